"""Former name of :mod:`ldp_audit.cli.types` (the command line's strict value parsers).

Kept so that existing imports keep working; new code imports :mod:`ldp_audit.cli.types`.
"""

from ldp_audit.cli.types import *  # noqa: F403
from ldp_audit.cli.types import INT_MAX, PATH_DESTS, HelpParser  # noqa: F401
