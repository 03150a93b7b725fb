"""Which parameters the cost law counts, read off the model itself.

The law's P is the size of the map that decodes the pooled state: the last block's FFN
(W_in, b_in, W_out, b_out) and the readout MLP on CLS. Those are ``"decoding"``;
``"ffn"`` is every block's FFN, ``"total"`` every trainable parameter.
"""

from __future__ import annotations

from infoprobe.model import InfoFlowTransformer, ModelConfig

COUNTS = ("decoding", "ffn", "total")


def parameter_counts(cfg: ModelConfig) -> dict[str, int]:
    """``{"decoding", "ffn", "total"}`` parameter counts of a model built from ``cfg``."""
    model = InfoFlowTransformer(cfg)
    last = f"blocks.{cfg.n_layers - 1}.mlp."
    counts = dict.fromkeys(COUNTS, 0)
    for name, p in model.named_parameters():
        n = p.numel()
        counts["total"] += n
        if ".mlp." in name:
            counts["ffn"] += n
        if name.startswith((last, "readout.")):
            counts["decoding"] += n
    return counts
