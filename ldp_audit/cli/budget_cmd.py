"""``ldp-audit budget LEDGER [--agent ID] [--delta D] [--method M] [--json]``.

Reads a privacy ledger (a ``ledger.sqlite`` file or a run directory holding one) and prints, per
agent, the epsilon spent at ``delta``, the composition that gave it and what is left of the
budget; local (per-agent LDP) and central (DP-SGD) claims are summarised side by side, never
summed. An agent over the budget (the one the ledger records, or ``--budget``) is a
violation: exit 1. The ledger is opened read-only (SQLite ``mode=ro``): nothing is ever written
to it, a missing file is an error (never a new, empty ledger), and another application's SQLite
file is refused untouched.

``--verify`` walks the whole hash chain and rebuilds every agent's state from the rows (exit 0
and the chain head when it verifies; exit 2 with the first problem when not); on a run
directory it also checks every file against ``manifest.json``, the ledger against the anchor
the manifest records (ledger id, row count, chain head) and every analysis file against its
seal (``analyses.json``), and prints the run's root. ``--expect-head HEX`` also checks that
this copy extends a chain head recorded elsewhere (e.g. published with a report);
``--expect-root HEX`` that the whole run has the root published. Every output says whether
the ledger was authenticated with the ledger key (docs/accountant.md, "The key"): a process
that holds a key refuses a ledger or run not authenticated by it (exit 2, unless
``--allow-unverified``); without a key the exit code is 4, not 0.
``--delta`` defaults to the run's delta (``config.json``), else the delta of the budget the
ledger records, else 0; the output names the one it used. ``--migrate-to NEW`` converts a
schema-version-1 or -2 ledger into a new keyed file (the old one is kept). A ledger the key's
high-water mark shows was rolled back or forked is refused (exit 2); ``--accept-restored``
accepts a backup restored on purpose (:mod:`~ldp_audit.accountant.ledger_marks`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from functools import partial
from pathlib import Path
from typing import Any

from ldp_audit.cli.evidence import evidence_args, exit_code
from ldp_audit.cli.types import add_flags, add_int
from ldp_audit.errors import InvalidParameterError, LdpAuditError, LedgerError
from ldp_audit.parse import real_in
from ldp_audit.rundir import to_jsonable, verify_run
from ldp_audit.rundir.files import fmt_number, read_json

_METHODS = ("best", "basic", "advanced", "optimal", "rdp", "prv", "pld")


def register(subparsers: Any) -> None:
    """Add the ``budget`` subcommand."""
    p = subparsers.add_parser(
        "budget",
        help="privacy spent and remaining per agent, from a ledger",
        description="Epsilon spent and remaining per agent of a privacy ledger, and which "
        "composition (basic, advanced, optimal, rdp, prv, pld) gave it. Local (per-agent LDP) "
        "and central (DP-SGD) claims are reported side by side.",
    )
    p.add_argument(
        "ledger", metavar="LEDGER", help="ledger.sqlite, or a run directory that holds one"
    )
    p.add_argument("--agent", type=_agent_id, help="only this agent (e.g. 0/17)")
    p.add_argument(
        "--delta",
        type=real_in("--delta", low=0.0, high=1.0, low_open=False),
        help="delta at which epsilon is reported (default: the run's delta from config.json, "
        "else the recorded budget's delta, else 0, i.e. pure DP; Gaussian events need > 0)",
    )
    p.add_argument(
        "--method", choices=_METHODS, default="best", help="composition (default: best valid)"
    )
    p.add_argument(
        "--budget",
        type=real_in("--budget", low=0.0),
        help="per-agent epsilon budget for 'remaining' (default: the budget recorded in the "
        "ledger by the accountant that wrote it, if any); an agent over it is a violation "
        "(exit 1)",
    )
    text = "agents listed in the text table, largest spend first (default 20; 0 = all)"
    add_int(p, "--limit", 0, default=20, help=text)
    add_flags(
        p,
        json="print JSON (every agent) on stdout",
        verify="verify the whole hash chain and every agent's state against the rows",
    )
    evidence_args(
        p,
        "with --verify: ",
        "read a ledger or run that this process's ledger key does not authenticate, or (with "
        "--verify) a run that does not verify: exit 4 instead of 2, and the output says so first",
        "with --verify on a run directory: ",
    )
    add_flags(
        p,
        recover="roll back a hot journal (LEDGER-journal left by a writer killed inside a "
        "commit) in place: opens the ledger once with write access, charges nothing; readers "
        "read the committed state without it, from a private copy",
        accept_restored="a backup of LEDGER (or of the run's ledger) restored on purpose: after "
        "a full verify, move this key's high-water mark of the ledger back to this copy's head "
        "(a copy with fewer charges, or another chain, than the mark is refused until then); "
        "for a run, its analyses.json's mark too (an analysis rolled back on purpose); prints "
        "the rows and head each mark forgot",
    )
    p.add_argument(
        "--migrate-to",
        metavar="NEW",
        help="convert a schema-version-1 or -2 ledger into a new keyed file NEW (LEDGER is kept)",
    )
    p.set_defaults(func=_run)


def _ledger_path(arg: str) -> Path:
    """The ledger file of ``arg`` (a file, or a run directory), refused before it is opened
    when it is missing or not a regular file (a FIFO would block)."""
    path = Path(arg) / "ledger.sqlite" if Path(arg).is_dir() else Path(arg)
    try:
        os.stat(path)  # a FIFO, socket or device was refused already (limits.check_input_paths)
    except FileNotFoundError:
        raise LedgerError(f"ledger file {str(path)!r} does not exist") from None
    except OSError as exc:
        raise LedgerError(f"cannot read ledger file {str(path)!r}: {exc}") from None
    return path


def _run_delta(arg: str, budgets: dict[str, Any]) -> tuple[float, str]:
    """The delta a run was accounted at: its config.json, else the recorded budget's, else 0."""
    run = Path(arg) if Path(arg).is_dir() else Path(arg).parent
    cfg_file = run / "config.json"
    if cfg_file.is_file():
        try:  # the bytes --verify checked (rundir.files.read_checked)
            cfg = read_json(run, "config.json").get("config") or {}
        except (LdpAuditError, AttributeError):
            cfg = {}
        d = cfg.get("delta") if isinstance(cfg, dict) else None
        if isinstance(d, (int, float)) and not isinstance(d, bool) and 0 <= d < 1:
            return float(d), f"the run's delta ({cfg_file})"
    for scope, what in (("local", "budget"), ("central", "central budget")):
        if budgets[scope] is not None and budgets[scope].delta > 0:
            return budgets[scope].delta, f"the delta of the {what} the ledger records"
    return 0.0, "default: pure DP; pass --delta for Gaussian events"


def _agent_id(text: str) -> str:
    """``--agent``: an id a ledger can hold (not blank, no NUL), refused naming the option."""
    from ldp_audit.accountant.ledger_format import check_text

    try:
        return check_text(text, "--agent", agent=True)
    except InvalidParameterError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _check_run(path: Path, allow: bool) -> bool:
    """A ledger in a run directory is read only after the run is checked against its manifest
    (its files, config.json's delta included, the manifest's MAC, the ledger's anchor; the
    whole chain is --verify's): an edited delta or another run's ledger changed what was
    printed, exit 0. Refused (exit 2) unless ``allow``; then True (exit 4)."""
    if not any((path.parent / f).exists() for f in ("config.json", "manifest.json")):
        return False  # a ledger on its own
    res = verify_run(path.parent, full=False)
    if res.ok:
        return False
    msg = f"run {str(path.parent)!r} does not verify: {res.problems[0]}"
    return _unverified(msg, allow, f"; check it with `ldp-audit budget {path.parent} --verify`")


def _unverified(msg: str, allow: bool, hint: str) -> bool:
    """Evidence that does not verify: refused (``LedgerError``, exit 2, ``msg`` + ``hint``)
    unless ``allow``; then said first, on stderr, and True (exit 4)."""
    if not allow:
        raise LedgerError(f"{msg}{hint}, or pass --allow-unverified")
    print(f"UNVERIFIED EVIDENCE (read with --allow-unverified): {msg}", file=sys.stderr)
    return True


_fmt = partial(fmt_number, nd=6, nan="nan")


def _run(args: argparse.Namespace) -> int:
    from ldp_audit.accountant import Ledger
    from ldp_audit.accountant.ledger_migrate import migrate_v1

    run_verify = args.verify and Path(args.ledger).is_dir()  # a missing ledger: verify_run says
    path = Path(args.ledger) / "ledger.sqlite" if run_verify else _ledger_path(args.ledger)
    if args.expect_head is not None and not args.verify:
        raise InvalidParameterError("--expect-head needs --verify")
    if args.expect_root is not None and not (args.verify and Path(args.ledger).is_dir()):
        raise InvalidParameterError(
            "--expect-root needs --verify and a run directory (the root covers the whole run)"
        )
    if args.accept_restored:
        if args.verify or args.recover or args.migrate_to is not None:
            raise InvalidParameterError("--accept-restored is used alone (then --verify)")
        run = path if path.is_file() else Path(args.ledger) / "ledger.sqlite"
        return _accept_restored(run, args.json, Path(args.ledger).is_dir())
    if args.recover:
        if args.verify or args.migrate_to is not None:
            raise InvalidParameterError("--recover is used alone (then --verify the ledger)")
        journal = Path(f"{path}-journal")
        hot = journal.is_file() and journal.stat().st_size > 0
        with Ledger(path, create=False) as led:  # a writer's open rolls a hot journal back
            if led.readonly:
                raise InvalidParameterError(
                    f"--recover: ledger {str(path)!r} or its folder is not writable; a hot "
                    f"journal can only be rolled back by its owner"
                )
            rows, head = len(led), led.chain_head()
        what = "rolled back the hot journal" if hot else "no hot journal to roll back"
        print(f"ledger {path}: {what}; {rows} charges, chain head {head}")
        return 0
    if args.migrate_to is not None:
        with migrate_v1(path, args.migrate_to) as new:
            rows, head = len(new), new.chain_head()
        print(f"migrated {path} to {args.migrate_to}: {rows} charges, chain head {head}")
        return 0
    if run_verify:
        return _verify_run(args)
    from ldp_audit.accountant.keys import check_key_outside

    check_key_outside(path.parent, "the ledger's folder", near=True)  # a key beside the ledger
    unverified = not args.verify and _check_run(path, args.allow_unverified)
    with Ledger(path, create=False, readonly=True) as ledger:
        refused = _key_refusal(ledger, args.allow_unverified)
        if ledger.mark_refusal and not unverified:  # read with --allow-unverified
            unverified = _unverified(ledger.mark_refusal, True, "")
        if args.verify:
            out = {**ledger.verify(expect_head=args.expect_head), "ledger": str(path)}
            note = getattr(ledger.store, "hot_journal_note", None)
        else:
            out = {**_spent(args, ledger, path), "verified": not unverified}
        if ledger.mark_refusal:
            out.update(verified=False, mark_refusal=ledger.mark_refusal)
    if args.json:
        print(json.dumps(to_jsonable(out), indent=2, default=str, allow_nan=False))
    elif args.verify:
        ext = " and extends the expected head" if args.expect_head else ""
        print(
            f"ledger {path} verifies{ext}: {out['rows']} charges, {out['agents']} agents, "
            f"chain head {out['chain_head']}"
        )
        print(_auth_line(out["authenticated"], out["auth_note"], out["key_id"]))
        if note:
            print(f"note: {note}")
        print("(a ledger file alone: pass the run directory to check it against its manifest)")
    else:
        _print_text(out, args.limit, args.agent)
    over = bool(out.get("over_budget"))
    return exit_code(over, out["authenticated"] and not (refused or unverified))


def _accept_restored(path: Path, as_json: bool, run: bool) -> int:
    """``--accept-restored``: the high-water mark moved to this copy's head (a full verify
    first), and for a run (``run``) its analysis mark to its ``analyses.json``; prints what
    each mark recorded before (``--json``: ``rows``, ``chain_head`` and ``forgotten``,
    ``{"rows", "chain_head"}`` or null; a run's ``analyses`` the same for its index)."""
    from ldp_audit.accountant import Ledger
    from ldp_audit.rundir.seal import accept_restored

    if run:  # a run's analyses.json not written by the key: refused before either mark moves
        accept_restored(path.parent, move=False)
    with Ledger(path, create=False, readonly=True, accept_restored=True) as led:
        if not led.authenticated:
            raise LedgerError(f"--accept-restored: {led.auth_note}")
        rows, head, old = len(led), led.chain_head(), led.restored
    ana = accept_restored(path.parent) if run else None
    if as_json:
        lost = old and {"rows": old[0], "chain_head": old[1].hex()}
        doc = {"ledger": str(path), "rows": rows, "chain_head": head, "forgotten": lost}
        if ana:
            gone = ana[2] and {"rows": ana[2][0], "chain_head": ana[2][1].hex()}
            doc["analyses"] = {"rows": ana[0], "chain_head": ana[1], "forgotten": gone}
        print(json.dumps(doc, indent=2))
        return 0
    if old is None:
        forgot = "nothing forgotten (no mark, one this copy extends, or one failing its MAC)"
    else:
        forgot = (
            f"the mark forgot {old[0]} charges ending in head {old[1].hex()}: the charges of "
            f"that later or forked copy no longer count against this ledger's budget"
        )
    print(f"ledger {path}: accepted as restored: {rows} charges, chain head {head}; {forgot}")
    if ana:
        forgot = "nothing forgotten"
        if ana[2] is not None:
            forgot = (
                f"the mark forgot {ana[2][0]} sealed analyses ending in head {ana[2][1].hex()}: "
                f"the analyses (verdicts) of that later or forked copy are no longer asked for"
            )
        print(f"run {path.parent}: analyses.json accepted as restored: {ana[0]} sealed "
              f"analyses, head {ana[1]}; {forgot}")  # fmt: skip
    return 0


def _spent(args: argparse.Namespace, ledger: Any, path: Path) -> dict[str, Any]:
    """The spend of every agent (or ``--agent``'s) and the budgets, as ``--json`` prints it."""
    from ldp_audit.accountant import Accountant, Budget

    meta = ledger.meta()
    budgets: dict[str, Any] = {"local": None, "central": None}
    for scope, key in (("local", "budget"), ("central", "central_budget")):
        if meta.get(key):
            b = json.loads(meta[key])
            budgets[scope] = Budget(epsilon=b["epsilon"], delta=b["delta"], method=b["method"])
    if args.delta is None:
        args.delta, delta_source = _run_delta(args.ledger, budgets)
    else:
        delta_source = "--delta"
    if args.budget is not None:
        budgets["local"] = Budget(epsilon=args.budget)
    acc = Accountant(ledger=ledger)  # no budget: opening must not write to the ledger
    used: dict[str, float] = {}  # spend under each agent's own scope budget
    for scope, b in budgets.items():
        if b is not None and b.method != "filter":
            used.update(acc.spent_all(delta=b.delta, method=b.method, scope=scope))
    if args.agent is not None:
        if not ledger.has_agent(args.agent):
            known = ledger.agents()
            hint = f"; agents are e.g. {known[:5]!r}" if known else "; the ledger is empty"
            raise InvalidParameterError(
                f"--agent: no such agent {args.agent!r} in ledger {str(path)!r} "
                f"({len(known)} agents){hint}"
            )
        detail = acc.spent_detail(args.agent, delta=args.delta, method=args.method)
        b = budgets["central" if detail.scope == "central" else "local"]
        row = _row(detail.agent, detail.epsilon, detail.method, detail.scope, used, b)
        row.update(charges=detail.charges, by_method=detail.by_method)
        if b is not None and detail.charges == 0 and b.method != "filter":
            row["remaining"] = b.epsilon  # never charged
        rows = [row]
    else:
        scopes = ledger.scopes()
        bulk = acc.spent_all_detail(delta=args.delta, method=args.method)
        rows = []
        for a in sorted(bulk):
            sc = scopes.get(a, {"local"})
            scope = next(iter(sc)) if len(sc) == 1 else "mixed"
            b = budgets["central" if scope == "central" else "local"]
            rows.append(_row(a, bulk[a][0], bulk[a][1], scope, used, b))
    summary = acc.summary(delta=args.delta, method=args.method)

    def _over(r: dict[str, Any]) -> bool:  # spent > its budget's limit (the accountant's check)
        b = budgets["central" if r["scope"] == "central" else "local"]
        return b.epsilon - r["remaining"] > b.limit

    return {
        "ledger": str(path),
        "charges": len(ledger),
        "ledger_agents": len(rows) if args.agent is None else len(ledger.agents()),
        "chain_head": ledger.chain_head(),
        "delta": args.delta,
        "delta_source": delta_source,
        **{k: getattr(ledger, k) for k in ("authenticated", "auth_note", "key_id")},
        "storage_note": getattr(ledger.store, "hot_journal_note", None),
        "method": args.method,
        "budget": None if budgets["local"] is None else budgets["local"].to_dict(),
        "central_budget": None if budgets["central"] is None else budgets["central"].to_dict(),
        "summary": {k: summary[k] for k in ("local", "central")},
        "agents": rows,
        # spent more than the budget (recorded or --budget) allows: a violation (exit 1)
        "over_budget": [r["agent"] for r in rows if r["remaining"] is not None and _over(r)],
    }


def _key_refusal(ledger: Any, allow: bool) -> bool:
    """A process that holds a ledger key refuses a ledger that key does not authenticate
    (another or a made-up key id, a schema-2 ledger): ``LedgerError`` (exit 2) unless
    ``allow`` (then True: the caller exits 4). False: authenticated, or no key at all."""
    from ldp_audit.accountant.keys import load_key

    if ledger.authenticated:
        return False
    key = load_key(create=False)
    if key is None:
        return False
    msg = (
        f"ledger {ledger.path!r} is not authenticated by this process's ledger key {key.id} "
        f"({key.source}): {ledger.auth_note}"
    )
    hint = ". Evidence under another (or a made-up) key id is not a pass: read it with the key "
    return _unverified(msg, allow, hint + "that wrote it")


def _auth_line(authenticated: bool, note: str, key_id: str | None) -> str:
    if authenticated:
        return f"authenticated: every read checked with the ledger key (key id {key_id})"
    return f"UNAUTHENTICATED: {note}"


def _verify_run(args: argparse.Namespace) -> int:
    """``--verify`` on a run directory: its files, its manifest's anchor, the whole ledger."""
    res = verify_run(args.ledger, args.expect_head, expect_root=args.expect_root)
    if args.json:
        print(json.dumps(res.to_dict(), indent=2, default=str, allow_nan=False))
    else:
        print(res.summary())
        for note in res.notes:
            print(f"note: {note}")
    if not res.ok:
        for problem in res.problems:
            print(f"ldp-audit: error: {problem}", file=sys.stderr)
        if not args.allow_unverified:
            return 2
        _unverified(f"run root {res.root}", True, "")
    return exit_code(False, res.ok and res.authenticated)


def _row(
    agent: str, eps: float, method: str, scope: str, used: dict[str, float], budget: Any
) -> dict:
    remaining = None
    if budget is not None and agent in used and math.isfinite(used[agent]):
        remaining = budget.epsilon - used[agent]  # infinite spend: not composable by the budget
    return dict(agent=agent, scope=scope, epsilon=eps, method=method, remaining=remaining)


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _shown(agent: Any) -> str:
    """An agent id as one line of text: control characters escaped (a ledger written before
    they were refused could otherwise print lines of its own)."""
    return re.sub(r"[\x00-\x1f\x7f-\x9f]", lambda m: repr(m[0])[1:-1], str(agent))


def _print_text(out: dict, limit: int, agent: str | None) -> None:
    b = out["budget"]
    # the ledger's totals; --agent's selection said apart (never "30 charges, 1 agents")
    shown = ""
    if agent is not None:
        shown = f"; showing agent {_shown(agent)}: {_count(out['agents'][0]['charges'], 'charge')}"
    totals = f"{_count(out['charges'], 'charge')}, {_count(out['ledger_agents'], 'agent')}"
    print(f"ledger: {out['ledger']}  ({totals}{shown})")
    print(f"chain head: {out['chain_head']}  (ldp-audit budget RUN --verify checks it all)")
    print(_auth_line(out["authenticated"], out["auth_note"], out["key_id"]))
    if out.get("storage_note"):
        print(f"note: {out['storage_note']}")
    print(f"delta = {out['delta']:g} ({out['delta_source']}), method = {out['method']}")
    if b is None:
        print("budget: none recorded (pass --budget EPS to see what is left)")
    else:
        print(f"budget: epsilon {b['epsilon']:g} per agent (delta {b['delta']:g}, {b['method']})")
    cb = out["central_budget"]
    if cb is not None:
        print(f"central budget: epsilon {cb['epsilon']:g} (delta {cb['delta']:g}, {cb['method']})")
    print()
    print(f"{'scope':<8} {'agents':>8} {'max epsilon':>12}  {'agent':<16} methods")
    for scope in ("local", "central"):
        s = out["summary"][scope]
        methods = ", ".join(f"{m}: {n}" for m, n in sorted(s["methods"].items())) or "-"
        print(
            f"{scope:<8} {s['agents']:>8} {_fmt(s['max_epsilon']) if s['agents'] else '-':>12}  "
            f"{_shown(s['max_agent'] or '-'):<16} {methods}"
        )
    rows = sorted(out["agents"], key=lambda r: (-r["epsilon"], r["agent"]))
    shown = rows if limit == 0 else rows[:limit]
    print()
    print(f"{'agent':<20} {'scope':<8} {'epsilon':>12} {'method':<12} {'remaining':>12}")
    for r in shown:
        print(
            f"{_shown(r['agent']):<20} {r['scope']:<8} {_fmt(r['epsilon']):>12} {r['method']:<12} "
            f"{_fmt(r['remaining']):>12}"
        )
    if len(shown) < len(rows):
        print(f"... {len(rows) - len(shown)} more agents (--limit 0 lists all, --json for all)")
    if out["over_budget"]:
        n, first = len(out["over_budget"]), _shown(out["over_budget"][0])
        print(
            f"VIOLATION: {_count(n, 'agent')} spent more than the budget (remaining < 0), "
            f"e.g. {first}"
        )
