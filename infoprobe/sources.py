"""``infoprobe.sources`` is :mod:`infoprobe.compare.sources`; this name stays for existing
imports.
"""

import sys

from infoprobe.compare import sources as _module

sys.modules[__name__] = _module
