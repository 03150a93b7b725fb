"""``infoprobe.ensemble`` is :mod:`infoprobe.train.ensemble`; this name stays for existing
imports.
"""

import sys

from infoprobe.train import ensemble as _module

sys.modules[__name__] = _module
