"""ldp-audit: check the privacy of locally private distributed reinforcement learning.

``import ldp_audit`` needs only numpy and scipy; torch, opacus, gymnasium and dp_accounting are
imported lazily by the parts that use them.

Submodules:
    mechanisms: the epsilon-LDP mechanisms (Laplace, projected random sign, bit flip, randomized
        response, Gaussian) and ``split_epsilon``.
    audit: the black-box auditor (``audit``; two verdicts and a privacy profile per run), the
        white-box ``exact_epsilon`` and ``from_scalar`` for one-value-at-a-time mechanisms.
    release: the one release path (charge durably, randomise, seal) every trainer uses.
    rundir: the run-directory contract (written once; manifest; named artefacts) and
        ``RunDir``, the one typed reader of any system's run.
    systems: the ``System`` protocol and the one registry of systems (the four shipped ones and
        third-party ones from the ``ldp_audit.systems`` entry point group).
    stats: Clopper-Pearson, Wilson and the rate -> epsilon conversions shared with ``attacks``.
    accountant: events, the SQLite ledger, composition and budgets.
    report: privacy reports (HTML, Markdown, JSON).
    testing: ``check_mechanism``, a conformance checker for your own mechanism.
"""

from __future__ import annotations

import importlib
from typing import Any

from ldp_audit.errors import (
    BudgetExceeded,
    InvalidParameterError,
    LdpAuditError,
    LedgerError,
    RunDirectoryError,
    UserCodeError,
)

__version__ = "0.1.0"

# Public names re-exported lazily (PEP 562) so importing the package stays light: module -> names
_LAZY_FROM = {
    "ldp_audit.mechanisms": "Laplace ProjectedRandomSign BitFlip RandomizedResponse Gaussian "
    "NoPrivacy split_epsilon DiscreteLaplace",
    "ldp_audit.audit": "AuditResult Verdict PrivacyProfile exact_epsilon",
    "ldp_audit._scalar": "from_scalar",
    "ldp_audit.release": "require_sealed",
    "ldp_audit.rundir": "RunWriter RunDir",
    "ldp_audit.accountant": "Accountant Ledger",
    "ldp_audit.testing": "check_mechanism",
}
_LAZY = {name: module for module, names in _LAZY_FROM.items() for name in names.split()}

__all__ = [
    "BudgetExceeded",
    "InvalidParameterError",
    "LdpAuditError",
    "LedgerError",
    "RunDirectoryError",
    "UserCodeError",
    "__version__",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ldp_audit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
