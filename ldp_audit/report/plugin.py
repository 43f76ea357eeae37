"""What a system's report sections receive and may return (docs/report.md, "How a system's
sections plug in").

A system names its report function in its registry entry (``SystemSpec(report_sections=
"module:function")``, :mod:`ldp_audit.systems`). The core report calls it for every run of that
system::

    f(run_dir, extra=None)                      # the plain form: returns a list of sections
    f(run_dir, extra=None, *, context=None)     # with a ``context`` parameter: gets a
                                                # ReportContext and may return a SystemReport

Everything generic (the ledger, the verdict, the privacy statement's form, audits, attacks, the
manifest check) is the core's and works the same for every system; what only one system knows
(its transcript layout, its learning curves, what its privacy unit is) comes from its function.
The return value is either a list of section dicts (``ldp_audit.report._sections``) or a dict
with any of the keys of :data:`SYSTEM_REPORT_KEYS`:

``sections``
    list of section dicts, rendered after the attacks.
``releases``
    the ledger id of every release in the transcript, in arrival order (strings). The core then
    checks that every releasing id was charged (``uncharged_agents``), counts releases per id
    (``submissions`` of the top spenders), draws the spend over releases, and says when a run
    released nothing.
``statement``
    ``{key: [value, source]}`` for the system's rows of the privacy statement (keys in
    :data:`STATEMENT_KEYS`; a key left out reads "not recorded" or the generic row), plus
    ``"unit"``: the privacy unit's name when the claim is read from the ledger ("agent").
``claimed``
    sentences added to the verdict's "What was claimed" (e.g. who released how many reports).
``missing``
    files the system writes when a run completes and that this (interrupted) run lacks.

A function that raises :class:`~ldp_audit.errors.RunDirectoryError` refuses the report (the run
is malformed for its system: the message names the file); any other exception, and a malformed
return value, becomes an error box in the report, never a crash.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ldp_audit.report._ledger import LedgerStats
from ldp_audit.report._load import RunData, missing_files
from ldp_audit.report._plots import COLORS, figure_png, legend_below, thin
from ldp_audit.report._statement import (
    NOT_RECORDED,
    events_words,
    fmt_eps,
    library_version,
    method_words,
    versions_words,
)

__all__ = [
    "ReportContext",
    "SystemReport",
    "STATEMENT_KEYS",
    "SYSTEM_REPORT_KEYS",
    "NOT_RECORDED",
    "events_words",
    "fmt_eps",
    "library_version",
    "method_words",
    "versions_words",
    "figure_png",
    "legend_below",
    "thin",
    "COLORS",
    "missing_files",
    "section",
]

#: The rows of the privacy statement a system describes (the others are the core's).
STATEMENT_KEYS = (
    "privacy_unit",
    "adjacency",
    "trust_model",
    "released",
    "accountant",
    "sampling",
    "mu_gdp",
)
#: The keys a system's report function may return in its dict form.
SYSTEM_REPORT_KEYS = ("sections", "releases", "statement", "claimed", "missing")


@dataclass(frozen=True)
class ReportContext:
    """What the core has read when it calls a system's report function.

    Attributes:
        run: the run directory as the core loaded it (config, metrics, audits, attacks).
        ledger: per-id spend read from its ledger.
        claim: the run's claim as the core reads it (``method``, ``epsilon``, ...; its unit may
            still change with the system's ``statement["unit"]``).
        one_run: the one-run audits among the run's attack files.
        figures: whether the report draws figures (a system may skip its own when False).
    """

    run: RunData
    ledger: LedgerStats
    claim: dict[str, Any]
    one_run: list[dict[str, Any]] = field(default_factory=list)
    figures: bool = True


@dataclass(frozen=True)
class SystemReport:
    """A system's contribution to its run's report, checked (see the module docstring)."""

    sections: list[dict[str, Any]] = field(default_factory=list)
    figures: dict[str, bytes] = field(default_factory=dict)
    note: dict[str, Any] = field(default_factory=dict)
    releases: list[str] | None = None
    statement: dict[str, tuple[str, str]] = field(default_factory=dict)
    unit: str | None = None
    claimed: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


def section(
    sid: str,
    title: str,
    paragraphs: list[str],
    *tables: tuple[str, list[str], list[list[Any]]],
    figures: dict[str, bytes] | None = None,
    data: Any = None,
) -> dict[str, Any]:
    """One section dict of a system's report (the form ``ldp_audit.report._sections`` checks);
    each of ``tables`` is ``(caption, header, rows)``."""
    return {
        "id": sid,
        "title": title,
        "paragraphs": list(paragraphs),
        "tables": [{"caption": c, "header": h, "rows": r} for c, h, r in tables],
        "figures": figures or {},
        "data": {} if data is None else data,
    }
