"""``infoprobe.rollout`` is :mod:`infoprobe.attention.rollout`; this name stays for
existing imports.
"""

import sys

from infoprobe.attention import rollout as _module

sys.modules[__name__] = _module
