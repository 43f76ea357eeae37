"""Privacy reports: turn what a run left behind into HTML, Markdown and JSON.

    >>> from ldp_audit.report import write_report
    >>> paths = write_report("runs/demo")          # doctest: +SKIP
    >>> paths["html"]                              # doctest: +SKIP
    PosixPath('runs/demo/report/index.html')

A report has a plain-language verdict at the top (violations found, what was claimed, what the
evidence shows, what was not verified), the run's status and whether its files still match its
manifest, the per-agent ledger summarised (local and central scope side by side, never summed),
the audits (both verdicts -- distribution and implementation -- with their bounds, witnesses and
consequences, and the audited privacy profile), the attacks (accuracy with its interval beside
chance and the ceiling), and the configuration. All of that is generic: the same for every
system. What only one system knows (PGC-A3C's transcript and learning curves beside the paper's
Tables 1-3, DP-SGD's sampling, FRD's uploads) comes from that system's ``report_sections``,
registered in :mod:`ldp_audit.systems` (the contract: :mod:`ldp_audit.report.plugin`).

``index.html`` is self-contained (inline CSS, figures as base64 PNG), so it opens offline.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ldp_audit.report._ledger import LedgerStats, read_ledger
from ldp_audit.report._load import (
    OPTIONAL_FILES,
    REQUIRED_FILES,
    RunData,
    load_run,
    one_run_audit_documents,
)
from ldp_audit.report._model import SCHEMA, build_parts
from ldp_audit.report._render import render_html, render_json, render_markdown
from ldp_audit.rundir.files import json_real, pin_checked
from ldp_audit.rundir.paths import is_run_dir
from ldp_audit.validation import check_int

__all__ = [
    "Report",
    "RunData",
    "check_report_out",
    "LedgerStats",
    "load_run",
    "one_run_audit_documents",
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

    def write(
        self, out_dir: str | Path, *, overwrite: bool = False, seal: bool = True
    ) -> dict[str, Path]:
        """Write ``index.html``, ``report.md``, ``report.json`` and ``figures/*.png``.

        ``out_dir`` must not exist or be empty; an earlier report there is replaced only with
        ``overwrite=True`` (never merged: stale figures are removed). Written into a finished
        run's ``report`` folder, its files are sealed in the run's ``analyses.json``, unless
        ``seal`` is False (the caller read unsealed evidence) or the report read evidence that
        did not verify (its verdict's ``evidence`` is ``"unverified"``): such a report is left
        unsealed, so that every reader of the run flags it (session 57: a report of a run whose
        ``audit.json`` was swapped, read with --allow-unverified, was sealed; with the sealed
        audit put back, the run verified and its sealed page said "Claims not contradicted"
        where the run's audit found a violation).

        Returns:
            ``{"html": ..., "markdown": ..., "json": ..., "figures": ...}`` paths.
        """
        import contextlib

        from ldp_audit.rundir.files import one_analysis_writer

        # one writer of a run's report at a time (session 58: of two at once, one said "report
        # written" and the other's undo removed its pages)
        run = Path(out_dir).parent
        in_run = Path(out_dir).name == "report" and is_run_dir(run)
        with one_analysis_writer(run) if in_run else contextlib.nullcontext():
            return self._write(out_dir, overwrite, seal)

    def _write(self, out_dir: str | Path, overwrite: bool, seal: bool) -> dict[str, Path]:
        import shutil

        out = check_report_out(out_dir, overwrite=overwrite)
        if overwrite and out.exists() and any(out.iterdir()):
            shutil.rmtree(out)
        from ldp_audit.rundir.seal import REPORT_FILES, seal_analyses

        figs = out / "figures"
        pages = {
            "html": ("index.html", self.to_html()),
            "markdown": ("report.md", self.to_markdown("figures")),
            "json": ("report.json", self.to_json() + "\n"),
        }
        paths = {k: out / name for k, (name, _) in pages.items()}
        try:
            figs.mkdir(parents=True, exist_ok=True)
            for name, png in self.figures.items():
                (figs / f"{name}.png").write_bytes(png)
            for k, (_, text) in pages.items():
                paths[k].write_text(text, encoding="utf-8")
            verified = self.model.get("verdict", {}).get("evidence") != "unverified"
            if seal and verified and out.name == "report" and is_run_dir(out.parent):
                figures = [f"report/figures/{name}.png" for name in self.figures]
                wrote = {paths[k]: text.encode("utf-8") for k, (_, text) in pages.items()}
                wrote.update({figs / f"{n}.png": png for n, png in self.figures.items()})
                # the seal refuses bytes that are not these (swapped while it waited for the lock)
                pin_checked(None, {f: hashlib.sha256(b).hexdigest() for f, b in wrote.items()})
                seal_analyses(out.parent, [*REPORT_FILES, *figures])  # like every analysis
        except BaseException:
            # Ctrl-C, SIGTERM, a full disk: no half report is left behind (figures without a
            # page are no report that --overwrite may replace; a page its seal does not match
            # makes every reader refuse the run); a sealed page removed is only a note
            shutil.rmtree(figs, ignore_errors=True)
            for f in paths.values():
                f.unlink(missing_ok=True)
            raise
        paths["figures"] = figs
        return paths


def check_report_out(
    out_dir: str | Path,
    *,
    overwrite: bool = False,
    inputs: Sequence[str | Path] = (),
    name: str = "report out_dir",
) -> Path:
    """Check a report's output folder before any work: new, empty, or (with ``overwrite``) an
    earlier report; never a run directory, and never a folder holding one of ``inputs`` (the
    run and extra inputs a report reads are never replaced by it).

    Raises:
        RunDirectoryError: the folder cannot receive a report.
    """
    from ldp_audit.errors import RunDirectoryError
    from ldp_audit.rundir import check_new_dir

    out = Path(out_dir)
    if out.is_dir() and is_run_dir(out):
        raise RunDirectoryError(
            f"{name} {str(out)!r} is a run directory (it has config.json); a report never "
            "replaces a run: choose another folder (default RUN_DIR/report)"
        )
    # a missing folder holds no input; nor does a symbolic link loop, which resolve() raises
    # RuntimeError on (exit 3 until session 57): check_new_dir names it
    res = out.resolve() if out.exists() else None
    for i in inputs if res is not None else ():
        ip = Path(i).resolve()
        if ip == res or res in ip.parents:
            raise RunDirectoryError(
                f"{name} {str(out)!r} holds the input {str(i)!r}; a report never writes over "
                "what it reads: choose another folder"
            )
    return check_new_dir(out, name=name, overwrite=overwrite, can_resume=False)


def _budget(run: RunData) -> float | None:
    for src in (run.config, run.config["config"]):
        b = json_real(src.get("budget")) if isinstance(src, dict) else None
        if b is not None and math.isfinite(b) and b > 0:
            return b
    return None


def build_report(
    run: str | Path | RunData,
    *,
    top: int = 10,
    ledger: LedgerStats | None = None,
    figures: bool = True,
    extra: Sequence[str | Path] = (),
    sections_registry: Mapping[str, str] | None = None,
) -> Report:
    """Build the report of one run directory.

    Args:
        run: a run directory (validated with :func:`load_run`) or an already loaded run.
        top: rows in the top-spenders table (>= 1).
        ledger: per-agent spend, when already read; by default read from the run's ledger.
        figures: draw the figures (False gives the model and tables only; the HTML then has
            no images; a system's own section figures are kept where it draws them anyway).
        extra: folders or JSON files of analyses written outside the run (an audit's
            ``--json`` output, an attack's ``--out``), read for audits and attacks.
        sections_registry: ``algorithm -> "module:function"`` (default
            :func:`ldp_audit.report._sections.registered_sections`: the registered systems).

    Raises:
        RunDirectoryError: the run directory is incomplete or malformed (its system's
            sections check the system's own files).
        InvalidParameterError: ``top`` is not a positive integer.
    """
    check_int(top, "top", minimum=1)
    data = run if isinstance(run, RunData) else load_run(run, extra=tuple(extra))
    if ledger is None:
        delta = json_real((data.config.get("mechanism") or {}).get("delta")) or 0.0
        ledger = read_ledger(data.ledger_path, delta=delta, budget=_budget(data))
    model, part = build_parts(
        data, ledger, top=top, sections_registry=sections_registry, figures=figures
    )
    if not figures:
        return Report(model=model, figures=dict(part.figures))
    from ldp_audit.report import _plots

    figs = {"ledger": _plots.ledger_figure(ledger, model, releases=part.releases)}
    for name in ("audit", "profile", "tradeoff", "attack"):  # each one the model has data for
        if (png := getattr(_plots, f"{name}_figure")(model)) is not None:
            figs[name] = png
    figs.update(part.figures)
    return Report(model=model, figures=figs)


def write_report(
    run_dir: str | Path,
    out_dir: str | Path | None = None,
    *,
    top: int = 10,
    overwrite: bool = False,
    extra: Sequence[str | Path] = (),
) -> dict[str, Path]:
    """Build the report of ``run_dir`` and write it to ``out_dir`` (default ``run_dir/report``,
    the run's one named report folder). The output folder is checked before the report is built:
    it must be new or empty, or hold an earlier report and ``overwrite=True``.

    Returns:
        Paths of the written ``html``, ``markdown``, ``json`` files and the ``figures`` folder.
    """
    out = Path(run_dir) / "report" if out_dir is None else Path(out_dir)
    check_report_out(out, overwrite=overwrite, inputs=[run_dir, *extra])
    report = build_report(run_dir, top=top, extra=extra)
    return report.write(out, overwrite=overwrite)
