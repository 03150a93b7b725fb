"""``python -m infoprobe`` runs the command line."""

import sys

from infoprobe.cli import main

sys.exit(main())
