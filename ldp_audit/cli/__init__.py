"""The ``ldp-audit`` command.

Each subcommand lives in its own module with ``register(subparsers)``; the module's parser sets
``func`` (``args -> exit code``). Library code never prints; these modules do.

Exit codes (the same for every subcommand; :data:`EXIT_CODES`):

====  =====================================================================================
0     success; for a verdict-giving command: no violation found (which proves nothing more)
1     a privacy violation was found (audit, attack, report, demo)
2     usage or input error (bad option, bad value, bad file or run directory, budget exceeded)
3     internal error (a bug in ldp-audit: please report it with the traceback printed)
4     no violation found, but the evidence is not authenticated: read without a ledger key, or
      unverified and read with --allow-unverified (report, budget, attack --run-dir); not a
      clean pass
130   interrupted (Ctrl-C / SIGINT); what was written so far is consistent (see docs)
143   terminated (SIGTERM), handled like Ctrl-C
====  =====================================================================================

A ``sys.exit`` called by user code (a module given on the command line, at import or later)
is exit 2 with the file and line that called it, never that code's own exit status. No raw
traceback reaches a user for 0-2, 4 and 130; for 3 the traceback is printed after a one-line
summary, since it is a bug report. ``--json`` output goes to stdout; errors always go to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
import traceback
from typing import Any

from ldp_audit.errors import LdpAuditError
from ldp_audit.interrupts import EXIT_INTERRUPTED, EXIT_TERMINATED, Terminated, interrupted

EXIT_OK = 0
EXIT_VIOLATION = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3
EXIT_UNAUTHENTICATED = 4

#: exit code -> meaning (documented in README and ``ldp-audit --help``).
EXIT_CODES = {
    EXIT_OK: "success / no violation found",
    EXIT_VIOLATION: "privacy violation found",
    EXIT_USAGE: "usage or input error",
    EXIT_INTERNAL: "internal error (a bug: please report it)",
    EXIT_UNAUTHENTICATED: "no violation found, but the evidence is unauthenticated or "
    "unverified (not a clean pass)",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C)",
    EXIT_TERMINATED: "terminated (SIGTERM)",
}


# subcommand -> the module that registers it (with its siblings: train and reproduce, report
# and demo share one)
_COMMANDS = {
    "audit": "ldp_audit.cli.audit_cmd",
    "budget": "ldp_audit.cli.budget_cmd",
    "train": "ldp_audit.cli.train_cmd",
    "reproduce": "ldp_audit.cli.train_cmd",
    "attack": "ldp_audit.cli.attack_cmd",
    "report": "ldp_audit.cli.report_cmd",
    "demo": "ldp_audit.cli.report_cmd",
}


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The command line's parser. Given the arguments, only the module of the subcommand they
    name registers (``ldp-audit audit ...`` never imports the trainers' configs, Numba or
    Matplotlib that ``train``'s generated options need: 0.4 s of CPU instead of 2.6 s); anything
    else (``-h``, ``--version``, an unknown word) gets every subcommand."""
    # HelpParser shows defaults in every subcommand's help
    from ldp_audit.cli.types import HelpParser, group_common_options, refuse_blank_paths

    epilog = "exit codes: " + "; ".join(f"{k} {v}" for k, v in EXIT_CODES.items())
    parser = HelpParser(
        prog="ldp-audit",
        description="Audit, attack and account the privacy of locally private distributed RL.",
        epilog=epilog,
    )
    from ldp_audit import __version__

    parser.add_argument("--version", action="version", version=f"ldp-audit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    first = argv[0] if argv else None
    modules = [_COMMANDS[first]] if first in _COMMANDS else list(dict.fromkeys(_COMMANDS.values()))
    for name in modules:  # train/reproduce NAME: that system's options only
        one = name == _COMMANDS["train"] and first in _COMMANDS
        importlib.import_module(name).register(sub, *([argv] if one else []))
    refuse_blank_paths(parser)  # --out '' never falls back to a default (e.g. into a run)
    group_common_options(parser)  # -h: the shared options first, then the command's own
    return parser


def main(argv: list[str] | None = None, *, watchdog: bool | None = None) -> int:
    """Run the command line; return the exit code (never raises except SystemExit from argparse
    for ``--help`` / ``--version`` / usage errors, which exit 0 / 0 / 2).

    Args:
        argv: the arguments (default: ``sys.argv[1:]``).
        watchdog: arm the signal watchdog (:mod:`ldp_audit.cli.signals`: SIGINT / SIGTERM end
            the process within about 1 s even inside compiled code or a pool's shutdown).
            Default: only when ``argv`` is None, i.e. as the console script, never when a
            program or a test calls ``main([...])`` in its own process.
    """
    # modules named on the command line (--mechanism M:A, --pairs, --env-module, --simulator)
    # are found in the current folder, as `python -m` finds them: no PYTHONPATH=. needed. The
    # folder goes LAST on sys.path, unlike `python -m`: a stray numpy.py or torch.py in the
    # working folder must not replace an installed library the toolkit imports later
    cwd = os.getcwd()
    added_cwd = cwd not in sys.path
    if added_cwd:
        sys.path.append(cwd)
    import signal
    import threading

    from ldp_audit.cli.signals import SignalWatchdog

    old: dict[int, Any] = {}  # signal -> the handler it had
    raised: list[int] = []  # the signals _raise turned into exceptions
    dog = SignalWatchdog() if (argv is None if watchdog is None else watchdog) else None

    def _raise(signum: int, frame: object) -> None:
        if dog is not None and not dog.redelivered(signum):
            dog.notify(signum)
            if dog.finishing:  # the work is done: noted, the exit code says it (below)
                return
            if dog.defer(signum, frame):  # inside an import: raised when it has returned
                return
        raised.append(signum)
        raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()

    # from the start: SIGTERM while the subcommands' modules import (seconds on a loaded
    # machine) is the same one line and 143 as later, not a silent death by the signal
    if threading.current_thread() is threading.main_thread():
        if dog is not None and not dog.install():
            dog = None
        old[signal.SIGTERM] = signal.signal(signal.SIGTERM, _raise)
        # with the watchdog, SIGINT too; a command started with SIGINT ignored (a background
        # job of a non-interactive shell, nohup) keeps ignoring it, as Python itself does
        if dog is not None and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
            old[signal.SIGINT] = signal.signal(signal.SIGINT, _raise)
    try:
        code = _main(argv)
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (Terminated)
        # a trainer that caught SIGTERM's Terminated to close its run and raised a plain
        # KeyboardInterrupt after it (train dprl) still ends 143
        last = (
            Terminated()
            if raised[-1:] == [signal.SIGTERM] and type(exc) is KeyboardInterrupt
            else exc
        )
        writer = sys.modules.get("ldp_audit.rundir.writer")  # none imported: no run started
        if writer is not None:  # a run the signal caught before its trainer's own handler
            from ldp_audit.interrupts import closing

            try:
                with closing():  # the forced exit waits for it (bounded)
                    writer.finish_unfinished()
            except KeyboardInterrupt as again:  # a signal of the other kind: the close stops
                last = again  # (a second of the same kind is the watchdog's forced exit)
        code = interrupted("ldp-audit", last)
        if dog is not None and argv is None:
            dog.exit_now(code)
        return code
    finally:
        if added_cwd and argv is not None and cwd in sys.path:  # a caller's process: restore
            sys.path.remove(cwd)
        # as the console script the watchdog stays armed until the process ends: a pool's
        # shutdown or a non-daemon thread can still hold the exit after main returns
        if argv is not None or dog is None:
            for signum, handler in old.items():
                if handler is not None:  # one not installed from Python: none to restore
                    signal.signal(signum, handler)
            if dog is not None:
                dog.uninstall()
    if dog is not None and argv is None:  # the console script: no interpreter teardown
        late = dog.teardown()
        if late is not None:  # a signal after the work: the run is complete, the code says 130
            late_exc = Terminated() if late == signal.SIGTERM else KeyboardInterrupt()
            code = interrupted("ldp-audit", late_exc)
        dog.exit_now(code)
    return code


def _refuse_repeated(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """An option that takes one value (or a --flag/--no-flag pair) given twice is a usage error
    (exit 2) naming it and both values: argparse would silently keep the last one (``--private-param
    length=0.25,0.5 --private-param length=1,2`` trained on 1 and 2). ``append`` options (``--param
    K=V``) are meant to repeat."""
    from ldp_audit.cli.types import leaf_parser

    leaf = leaf_parser(parser, argv)
    single = (argparse._StoreAction, argparse.BooleanOptionalAction)
    by_opt = {o: a for a in leaf._actions if isinstance(a, single) for o in a.option_strings}
    seen: dict[argparse.Action, list[str]] = {}
    for i, tok in enumerate(argv[: argv.index("--") if "--" in argv else len(argv)]):
        name = tok.partition("=")[0]
        if name not in by_opt and tok[:1] == "-" != tok[1:2]:  # -oDIR: argparse's -o DIR
            name = tok[:2]
        action = by_opt.get(name)
        if action is not None:  # the option and its value, as given
            value = argv[i + 1 : i + 2] if action.nargs != 0 and tok == name else []
            seen.setdefault(action, []).append(" ".join([tok, *value]))
    for action, given in seen.items():
        if len(given) > 1:
            leaf.error(
                f"{'/'.join(action.option_strings)} given {len(given)} times ({'; '.join(given)}): "
                "give it once (a repeated option is never read as the last one)"
            )


def _user_exit(exc: SystemExit) -> str:
    """What a ``sys.exit`` raised inside a command (a user module at import, a user function)
    did, naming the file and line that called it: exit 2, never the user's 0 with no output."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    return (
        f"user code called sys.exit({exc.code!r}){where} while the command ran (a module or "
        "function given on the command line must not end the process); the command did not "
        "finish"
    )


@contextlib.contextmanager
def _one_line_warnings() -> Any:
    """While a command runs, a library warning (PGC-A3C's coordinate-clipping claim, Gymnasium's
    on a user env's module or constructor, Matplotlib's) is one ``WARNING:`` line on stderr, not
    Python's two-line form with a file path, without a terminal's colour codes (Gymnasium's).
    Before session 57 only a generated command's trainer or attack was covered: an
    ``--env-module`` import, the probe's construction and ``report`` printed the two-line form."""
    import re
    import warnings

    with warnings.catch_warnings():
        warnings.showwarning = lambda message, *a, **k: print(
            "WARNING: " + re.sub(r"\x1b\[[0-9;]*m", "", str(message)), file=sys.stderr
        )
        yield


def _main(argv: list[str] | None) -> int:
    given = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(given)
    args, extra = parser.parse_known_args(given)
    _refuse_repeated(parser, given)
    if extra:  # the subcommand's usage and -h, with the closest option (cli.types)
        from ldp_audit.cli.types import unrecognized_error

        unrecognized_error(parser, given, extra)
    code, out = EXIT_OK, sys.stdout
    if out is not None:  # None: fd 1 closed (``>&-``), print drops the output
        sys.stdout = _PipeSafe(out)
    try:
        from ldp_audit.limits import check_input_paths

        check_input_paths(args)  # a FIFO / socket / device input: exit 2, never opened
        if hasattr(args, "backend"):  # --backend/--address/--workers: named so, before any work
            from ldp_audit.backends import backend_options

            backend_options(args)
        from ldp_audit.accountant.ledger_marks import unverified_reads
        from ldp_audit.rundir.writer import command_line

        with (
            unverified_reads(getattr(args, "allow_unverified", False) is True),
            command_line(["ldp-audit", *given]),  # a run made here records what was run
            _one_line_warnings(),
        ):
            code = int(args.func(args) or 0)  # an older copy of a ledger: read, said first
        if sys.stdout is not None:
            sys.stdout.flush()
        return code
    except BrokenPipeError:  # stdout closed early, written to otherwise than by print
        _devnull_stdout(sys.stdout)
        return code
    except (LdpAuditError, SystemExit) as exc:  # a SystemExit is never ours once the command
        why = _user_exit(exc) if isinstance(exc, SystemExit) else exc  # runs: user code's
        print(f"ldp-audit: error: {why}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # a bug: one line, then the traceback as a bug report
        signal_exc = _wrapped_signal(exc)
        if signal_exc is not None:
            raise signal_exc from None
        print(
            f"ldp-audit: internal error: {type(exc).__name__}: {exc}\n"
            "This is a bug in ldp-audit; please report it with the traceback below.",
            file=sys.stderr,
        )
        traceback.print_exc(file=sys.stderr)
        return EXIT_INTERNAL
    finally:
        if isinstance(sys.stdout, _PipeSafe):
            sys.stdout = out


def _wrapped_signal(exc: BaseException | None) -> KeyboardInterrupt | None:
    """The signal's ``KeyboardInterrupt`` / ``Terminated`` that ``exc`` was raised from (its
    ``__cause__`` chain), if any: code between Python and the handler can wrap it (Python 3.11
    raises a RuntimeError "Error calling __set_name__" for one raised while a dataclass is made:
    session 58, `attack dynamics` SIGINTed during its imports ended 3 with a traceback)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__
    return None


def _devnull_stdout(stream: Any) -> None:
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())


class _PipeSafe:
    """``sys.stdout`` while a command runs: once its reader is gone (``ldp-audit audit ... |
    head -1``) the rest of the output is dropped, not raised, so the command finishes and
    its exit code (a verdict's 1) is kept; before, the BrokenPipeError of a print ended it
    with 0."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def write(self, text: str) -> int:
        try:
            return self._inner.write(text)
        except BrokenPipeError:
            _devnull_stdout(self._inner)
            return len(text)

    def flush(self) -> None:
        try:
            self._inner.flush()
        except BrokenPipeError:
            _devnull_stdout(self._inner)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
