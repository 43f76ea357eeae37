"""``python -m ldp_audit.cli``."""

import sys

from ldp_audit.cli import main

sys.exit(main())
