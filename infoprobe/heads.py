"""``infoprobe.heads`` is :mod:`infoprobe.attention.program`; this name stays for existing
imports.
"""

import sys

from infoprobe.attention import program as _module

sys.modules[__name__] = _module
