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
    errors: the one error hierarchy (``LdpAuditError`` and its subclasses).

The package root gives only ``__version__``: each name is imported from the submodule that
defines it (``from ldp_audit.mechanisms import Laplace``).
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
