"""``infoprobe.caching`` is :mod:`infoprobe.pipeline.caching`; this name stays for existing
imports.
"""

import sys

from infoprobe.pipeline import caching as _module

sys.modules[__name__] = _module
