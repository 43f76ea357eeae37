"""``ldp-audit reproduce fedrl`` (kept importable under its former name).

The reproduction lives in the FedRL package: :mod:`ldp_audit.training.fedrl.reproduce` (the
configuration, the stages and :func:`reproduce`) and
:mod:`ldp_audit.training.fedrl.reproduce_report` (README.md and results.json). Every name of
the former one-file module is importable from here.
"""

from __future__ import annotations

from ldp_audit.training.fedrl.reproduce import (
    ReproConfig,
    _describe_stage,
    _extras,
    _loadavg,
    _maps,
    _stage,
    _table1_config,
    _table1_size,
    audit_output_mechanism,
    random_policy_success,
    reproduce,
)
from ldp_audit.training.fedrl.reproduce_report import (
    AUTHORS_MAPS_RANDOM,
    _ci,
    _cp_pct,
    _eps,
    _pct,
    _render_curves,
    _render_explore,
    _render_rules,
    render_markdown,
    write_report,
)

__all__ = [
    "ReproConfig",
    "reproduce",
    "write_report",
    "audit_output_mechanism",
    "random_policy_success",
]

# names of the one-file module kept importable from here
_COMPAT = (
    AUTHORS_MAPS_RANDOM,
    render_markdown,
    _ci,
    _cp_pct,
    _describe_stage,
    _eps,
    _extras,
    _loadavg,
    _maps,
    _pct,
    _render_curves,
    _render_explore,
    _render_rules,
    _stage,
    _table1_config,
    _table1_size,
)
