"""Privacy reports: turn what a run left behind into HTML, Markdown and JSON.

    >>> from ldp_audit.report import write_report
    >>> paths = write_report("runs/demo")          # doctest: +SKIP
    >>> paths["html"]                              # doctest: +SKIP
    PosixPath('runs/demo/report/index.html')

A report has a plain-language verdict at the top (what is guaranteed, what was verified, what
was not), the per-agent ledger summarised (distribution, top agents, spend over submissions),
the audits (claim, exact epsilon, empirical lower bound, witness), the attacks (accuracy beside
the ceiling and the implied epsilon lower bound), the learning curves (mu_n, FST, success ratio,
Ono & Takahashi 2020 eqs. 25-27) with the paper's Tables 1-3 beside ours, and the configuration.

``index.html`` is self-contained (inline CSS, figures as base64 PNG), so it opens offline.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ldp_audit.errors import InvalidParameterError
from ldp_audit.report._ledger import LedgerStats, read_ledger
from ldp_audit.report._load import OPTIONAL_FILES, REQUIRED_FILES, RunData, load_run
from ldp_audit.report._model import SCHEMA, build_model
from ldp_audit.report._render import render_html, render_json, render_markdown

__all__ = [
    "Report",
    "RunData",
    "LedgerStats",
    "load_run",
    "read_ledger",
    "build_report",
    "write_report",
    "REQUIRED_FILES",
    "OPTIONAL_FILES",
    "SCHEMA",
]


@dataclass(frozen=True)
class Report:
    """A built report: the JSON-able model and its figures (PNG bytes by name)."""

    model: dict[str, Any]
    figures: dict[str, bytes]

    def to_html(self) -> str:
        """Self-contained HTML (figures embedded)."""
        return render_html(self.model, self.figures)

    def to_markdown(self, figure_dir: str = "figures") -> str:
        """Markdown linking the figures as ``<figure_dir>/<name>.png``."""
        return render_markdown(self.model, {k: f"{figure_dir}/{k}.png" for k in self.figures})

    def to_json(self) -> str:
        """The report model as strict JSON."""
        return render_json(self.model)

    def write(self, out_dir: str | Path, *, overwrite: bool = False) -> dict[str, Path]:
        """Write ``index.html``, ``report.md``, ``report.json`` and ``figures/*.png``.

        ``out_dir`` must not exist or be empty; an earlier report there is replaced only with
        ``overwrite=True`` (never merged: stale figures are removed).

        Returns:
            ``{"html": ..., "markdown": ..., "json": ..., "figures": ...}`` paths.
        """
        import shutil

        from ldp_audit.rundir import check_new_dir

        out = check_new_dir(out_dir, name="report out_dir", overwrite=overwrite)
        if overwrite and out.exists() and any(out.iterdir()):
            shutil.rmtree(out)
        figs = out / "figures"
        figs.mkdir(parents=True, exist_ok=True)
        for name, png in self.figures.items():
            (figs / f"{name}.png").write_bytes(png)
        paths = {
            "html": out / "index.html",
            "markdown": out / "report.md",
            "json": out / "report.json",
            "figures": figs,
        }
        paths["html"].write_text(self.to_html(), encoding="utf-8")
        paths["markdown"].write_text(self.to_markdown("figures"), encoding="utf-8")
        paths["json"].write_text(self.to_json() + "\n", encoding="utf-8")
        return paths


def _budget(run: RunData) -> float | None:
    for src in (run.config, run.config["config"]):
        b = src.get("budget")
        if isinstance(b, (int, float)) and not isinstance(b, bool) and math.isfinite(b) and b > 0:
            return float(b)
    return None


def build_report(
    run: str | Path | RunData,
    *,
    top: int = 10,
    ledger: LedgerStats | None = None,
    progress: Callable[[Iterable[Any]], Iterable[Any]] | None = None,
    figures: bool = True,
) -> Report:
    """Build the report of one run directory.

    Args:
        run: a run directory (validated with :func:`load_run`) or an already loaded run.
        top: rows in the top-spenders table (>= 1).
        ledger: per-agent spend, when already read; by default read from the run's ledger.
        progress: optional wrapper for the per-agent ledger loop (e.g. ``tqdm``).
        figures: draw the figures (False gives the model and tables only; the HTML then has
            no images).

    Raises:
        RunDirectoryError: the run directory is incomplete or malformed.
        InvalidParameterError: ``top`` is not a positive integer.
    """
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise InvalidParameterError(f"top must be an integer >= 1, got {top!r}")
    data = run if isinstance(run, RunData) else load_run(run)
    if ledger is None:
        delta = data.config["mechanism"].get("delta", 0.0)
        delta = (
            float(delta) if isinstance(delta, (int, float)) and not isinstance(delta, bool) else 0.0
        )
        ledger = read_ledger(data.ledger_path, delta=delta, budget=_budget(data), progress=progress)
    model = build_model(data, ledger, top=top)
    if not figures:
        return Report(model=model, figures={})
    from ldp_audit.report import _plots

    figures: dict[str, bytes] = {"ledger": _plots.ledger_figure(data, ledger)}
    a = _plots.audit_figure(model)
    if a is not None:
        figures["audit"] = a
    b = _plots.attack_figure(model)
    if b is not None:
        figures["attack"] = b
    figures["learning"] = _plots.learning_figure(data, model)
    return Report(model=model, figures=figures)


def write_report(
    run_dir: str | Path,
    out_dir: str | Path | None = None,
    *,
    top: int = 10,
    progress: Callable[[Iterable[Any]], Iterable[Any]] | None = None,
    overwrite: bool = False,
) -> dict[str, Path]:
    """Build the report of ``run_dir`` and write it to ``out_dir`` (default ``run_dir/report``,
    the run's one named report folder). The output folder is checked before the report is built:
    it must be new or empty, or hold an earlier report and ``overwrite=True``.

    Returns:
        Paths of the written ``html``, ``markdown``, ``json`` files and the ``figures`` folder.
    """
    from ldp_audit.rundir import check_new_dir

    out = Path(run_dir) / "report" if out_dir is None else Path(out_dir)
    check_new_dir(out, name="report out_dir", overwrite=overwrite)
    report = build_report(run_dir, top=top, progress=progress)
    return report.write(out, overwrite=overwrite)
