"""Attention analysis: each head's observed program (program), the orientation of ordered
operations (orientation), attention rollout (rollout).
"""
