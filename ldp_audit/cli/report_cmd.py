"""``ldp-audit report RUN_DIR [EXTRA ...] [-o OUT]`` and ``ldp-audit demo [--out DIR]``.

``report`` turns a run directory of any algorithm into index.html (self-contained), report.md
and report.json; audits and attacks written elsewhere (an audit's ``--json`` output saved to a
file, an attack's ``--out``) are read from the EXTRA folders or files. ``demo`` trains, audits,
attacks and reports end to end on embedded defaults and prints where index.html is.

Exit codes (``ldp_audit.cli``): 0 no violation found in authenticated evidence, 1 a privacy
violation was found (the report's verdict), 2 usage or input error (bad run directory, output
folder refused, evidence that does not verify or is not authenticated by this process's key),
3 internal error, 4 no violation found but the evidence is unauthenticated (no ledger key) or
unverified (read with ``--allow-unverified``): the verdict line says which, 130 interrupted.
Progress goes to stderr; ``--json`` prints the written paths, the verdict, the evidence it
rests on and the run's root as JSON on stdout (paths as strings, infinities as "inf").
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from ldp_audit.cli.evidence import check_evidence, evidence_args, exit_code
from ldp_audit.cli.types import (
    add_flags,
    add_int,
    check_not_inside_run,
    show_progress,
)
from ldp_audit.errors import InvalidParameterError, LdpAuditError, RunDirectoryError
from ldp_audit.report import check_report_out
from ldp_audit.report.browser import find_chromium, screenshot
from ldp_audit.rundir import to_jsonable, verify_run
from ldp_audit.rundir.files import pin_checked, read_checked, read_manifest, sha256_file
from ldp_audit.rundir.paths import is_run_dir, json_files, timestamped_dir
from ldp_audit.rundir.seal import check_document_seal, seal_analyses

#: the evidence a verdict rests on, weakest last, and what its verdict line says about it
_EVIDENCE_TAG = {
    "authenticated": "",
    "unauthenticated": " [UNAUTHENTICATED EVIDENCE: no ledger key checked it]",
    "unverified": " [UNVERIFIED EVIDENCE: read with --allow-unverified]",
}


def register(subparsers: Any) -> None:
    """Add the ``report`` and ``demo`` subcommands."""
    p = subparsers.add_parser(
        "report",
        help="write a privacy report (HTML, Markdown, JSON) from a run directory",
        description="Write index.html (self-contained), report.md and report.json from what a "
        "run left behind: run status and manifest check, ledger (local and central scope side "
        "by side), audits (both verdicts, privacy profile), attacks, the algorithm's own "
        "sections (learning curves for pgc-a3c) and a plain-language verdict. Exit 1 when the "
        "verdict is a violation.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (docs/interfaces.md)")
    p.add_argument(
        "extra",
        metavar="EXTRA",
        nargs="*",
        default=[],
        help="folders or JSON files of analyses written outside the run (an audit's --json "
        "output, an attack's --out); their audits and attacks are reported too",
    )
    p.add_argument(
        "-o",
        "--out",
        dest="out_dir",
        help="output folder, new or empty (default: RUN_DIR/report)",
    )
    add_flags(p, overwrite="replace an earlier report at the output folder")
    add_int(p, "--top", 1, default=10, help="rows in the top-agents table")
    add_flags(
        p,
        json="print the written paths as JSON",
        screenshot="also save screenshot.png (needs chromium)",
    )
    evidence_args(  # checked with the manifest before anything is read
        p,
        "",
        "report a run whose files do not match its manifest or its sealed analyses, that has no "
        "manifest or no ledger, or that this process's key does not authenticate (refused by "
        "default, exit 2); the verdict line then says UNVERIFIED and the exit code is 4 (1 on a "
        "violation)",
    )
    p.set_defaults(func=_report)

    d = subparsers.add_parser(
        "demo",
        help="train, audit, attack and report end to end on embedded defaults",
        description="A short PGC-A3C run (Laplace, eps = 5, a few agents) with its SQLite ledger, "
        "an audit of its mechanism (two verdicts and a privacy profile), a dynamics attack on "
        "its transcript, and the report. Exit 1 when the report finds a violation (the default "
        "Laplace mechanism computed in IEEE doubles does leak through its float bits).",
    )
    d.add_argument(
        "--out",
        help="run directory, new or empty (default: a new runs/demo-<timestamp> folder)",
    )
    add_int(d, "--seed", 0, default=0, help="the one seed everything derives from")
    d.add_argument("--report-dir", help="where the report goes (default: OUT/report)")
    add_flags(
        d,
        overwrite="replace an earlier demo run (and report) at these paths",
        no_progress="no progress bars on stderr",
        json="print the written paths as JSON",
        screenshot="also save screenshot.png (needs chromium)",
    )
    d.set_defaults(func=_demo)


def _need_chromium() -> None:
    """--screenshot without Chromium: refuse before any work."""
    if find_chromium() is None:
        raise InvalidParameterError(
            "--screenshot needs chromium on PATH (scripts/ensure_chromium.sh installs it), "
            "found none"
        )


def _screenshot(paths: dict[str, Path], seal: bool = True) -> None:
    paths["screenshot"] = shot = screenshot(paths["html"], paths["html"].parent / "screenshot.png")
    # the run's own report, sealed as its pages are
    if seal and shot.parent.name == "report" and is_run_dir(shot.parent.parent):
        pin_checked(None, {shot: sha256_file(shot)})  # what the browser wrote, not the old one
        seal_analyses(shot.parent.parent, ["report/screenshot.png"])


def _print_paths(paths: dict[str, Path], **extra: Any) -> None:
    """``--json``: the written paths and ``extra``."""
    print(json.dumps(to_jsonable({**paths, **extra}), indent=2, allow_nan=False))


def _report(args: argparse.Namespace) -> int:
    from ldp_audit.report import build_report  # at call time: tests patch it where it is defined

    if args.screenshot:
        _need_chromium()
    if not Path(args.run_dir).is_dir():
        raise RunDirectoryError(
            f"RUN_DIR must be an existing run directory, got {args.run_dir!r}"
            + (" (a file)" if Path(args.run_dir).exists() else " (not found)")
        )
    # evidence first: a run that does not match its manifest is refused (exit 2) by default
    checked = check_evidence(args, "RUN_DIR", _check_extras)  # EXTRA analyses: sealed for it?
    out = Path(args.run_dir) / "report" if args.out_dir is None else Path(args.out_dir)
    # errors name what the user gave: --out, or the default folder they never typed
    name = "--out" if args.out_dir is not None else "the default report folder"
    if args.out_dir is None and not args.overwrite and out.is_dir() and any(out.iterdir()):
        raise RunDirectoryError(
            f"this run already has a report in {str(out)!r}: pass --overwrite to regenerate it "
            "there (the folder is replaced whole), or --out DIR to write a new one elsewhere"
        )
    check_not_inside_run(out, name, allow=Path(args.run_dir) / "report")  # the named one
    # the output folder is checked before the report is built (and never holds an input)
    check_report_out(out, overwrite=args.overwrite, inputs=[args.run_dir, *args.extra], name=name)
    report = build_report(args.run_dir, top=args.top, extra=args.extra)
    verdict = report.model["verdict"]
    seal = not args.unsealed and verdict.get("evidence") != "unverified" and checked.ok
    try:
        paths = report.write(out, overwrite=args.overwrite, seal=seal)
    except RunDirectoryError:
        if args.overwrite or not (out.is_dir() and any(out.iterdir())):
            raise
        raise RunDirectoryError(  # (session 58: it said "pass overwrite=True")
            f"{name} {str(out)!r} was written by another command while this report was built: "
            f"pass --overwrite to replace it, or --out DIR to write a new one elsewhere"
        ) from None
    if args.screenshot:
        _screenshot(paths, seal)

    # the evidence the verdict rests on, as checked before it was read: the stricter of that
    # and the model's own check
    before = "unverified" if args.unsealed else checked.evidence
    evidence = max(before, verdict.get("evidence", before), key=list(_EVIDENCE_TAG).index)
    code = exit_code(verdict["status"] == "violation", evidence == "authenticated")
    if args.json:
        _print_paths(
            paths,
            verified=checked.ok,
            evidence=evidence,
            root=checked.root,
            verification=checked.to_dict(),
            verdict=verdict["status"],
            headline=verdict["headline"],
        )
    else:
        tag = _EVIDENCE_TAG[evidence]
        print(f"verdict: {verdict['status'].upper()}{tag}. {verdict['headline']}")
        print(
            f"report written: {paths['html']} (also {paths['markdown'].name}, {paths['json'].name})"
        )
        print(
            f"run root: {checked.root} (manifest, ledger head and sealed analyses; publish it "
            f"and check it later with --expect-root)"
        )
    return code


def _check_extras(args: argparse.Namespace) -> list[str]:
    """Every EXTRA analysis must be sealed by the toolkit for this run (an attack's ``--out``
    carries a seal under the ledger key and the run's manifest): an unsealed or forged one is
    refused (exit 2, naming it) unless ``--allow-unverified``; then the problems are returned
    (the verdict is UNVERIFIED, exit 4). Without a key, a seal cannot be checked: the run is
    read as unauthenticated already."""
    if not args.extra:
        return []
    from ldp_audit.accountant.keys import load_key

    key = load_key(create=False)
    problems = []
    for e in [e for e in args.extra if is_run_dir(e)]:
        # a run given as EXTRA is read as a run (a system's section shows its config, metrics
        # and ledger): it must verify as a whole (session 57: an FRD run's config.json and
        # metrics.json edited, `report RUN EXTRA_RUN` showed the forged epsilon, exit 0)
        try:
            res = verify_run(e)
            bad = None if res.ok else res.problems[0]
        except (OSError, LdpAuditError) as exc:
            bad = str(exc)
        if bad is not None:
            problems.append(f"EXTRA {str(e)!r} is a run that does not verify: {bad}")
    for f in [f for e in args.extra for f in json_files(Path(e)) if f.is_file()]:
        try:  # the bytes whose seal is checked are the bytes the report's loader reads
            data = read_checked(f, "EXTRA")
            pin_checked(None, {f: hashlib.sha256(data).hexdigest()})
            doc = json.loads(data)
        except (OSError, ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
            continue  # the report's loader names an unreadable file
        if not isinstance(doc, (dict, list)) or (
            isinstance(doc, dict)
            and not ({"accuracy", "epsilon_lower_bound"} & set(doc))
            # a one-run audit the dprl / opacus sections show (one_run_audit_documents)
            and not str(doc.get("attack", "")).startswith("one-run")
        ):
            continue  # not an analysis (e.g. a report.json or config.json beside it)
        if _sealed_in_its_run(f):  # another run's own artefact, sealed in its index
            continue
        state, why = check_document_seal(doc, args.run_dir, key)
        if state in ("unsealed", "forged"):
            problems.append(f"EXTRA {str(f)!r} is not sealed for this run: {why}")
    if problems and not args.allow_unverified:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise RunDirectoryError(
            f"{problems[0]}{more}. Refusing to read it; pass --allow-unverified to read it "
            f"anyway (the verdict then says UNVERIFIED EVIDENCE: exit 4, or 1 on a violation)"
        )
    return problems


def _sealed_in_its_run(f: Path) -> bool:
    """``f`` is an artefact of another finished run (an EXTRA folder that is a run) that
    verifies as a whole (its manifest's MAC, its ledger, its index), sealed and unchanged in
    that run's ``analyses.json`` (or hashed into its manifest): a folder beside a hand-written
    ``config.json`` and an unkeyed ``manifest.json`` listing the file is no run's evidence."""
    run = f.parent
    if not is_run_dir(run) or not (run / "manifest.json").is_file():
        return False
    try:
        res = verify_run(run, full=False)
    except (OSError, ValueError, AttributeError, LookupError, LdpAuditError):
        return False
    if not res.ok:
        return False
    listed = (read_manifest(run) or {}).get("files") or {}
    return f.name in res.analyses or f.name in listed


def _demo(args: argparse.Namespace) -> int:
    from ldp_audit.demo import check_paths, run_demo

    if args.screenshot:
        _need_chromium()
    # every output path is checked, under its option's name, before any work starts
    out = timestamped_dir("runs/demo") if args.out is None else args.out
    for path, name in ((args.out, "--out"), (args.report_dir, "--report-dir")):
        if path is not None:
            check_not_inside_run(path, name)
    check_paths(out, args.report_dir, overwrite=args.overwrite, names=("--out", "--report-dir"))
    bars = show_progress(args)
    res = run_demo(
        out,
        seed=args.seed,
        report_dir=args.report_dir,
        progress=bars,
        overwrite=args.overwrite,
        # no bar (a log, a pipe, --no-progress): one quiet line per stage on stderr instead
        on_stage=None if bars else lambda name: print(f"{name} ...", file=sys.stderr, flush=True),
    )
    if args.screenshot:
        _screenshot(res.report)
    if args.json:
        _print_paths(
            res.report,
            run_dir=res.run_dir,
            seconds=res.seconds,
            verdict=res.verdict,
            headline=res.headline,
        )
    else:
        secs = ", ".join(f"{k} {v:.1f} s" for k, v in res.seconds.items())
        print(f"demo run directory: {res.run_dir} ({secs})")
        print(f"verdict: {res.verdict.upper()}. {res.headline}")
        print(f"open the report: {res.report['html'].resolve()}")
    return 1 if res.violation else 0
