"""What a running command tells the CLI's signal watchdog (:mod:`ldp_audit.cli.signals`), so
that library code (the trainers, the run writer) needs no import of the CLI: work to stop at
once when a signal arrives (:func:`on_signal`) and a run being closed as "interrupted" that the
watchdog's forced exit waits for (:func:`closing`); and how a signal ends a command: SIGTERM as
:class:`Terminated` (a ``KeyboardInterrupt``), the one line and exit code of :func:`interrupted`
(:data:`EXIT_INTERRUPTED`, :data:`EXIT_TERMINATED`; the CLI's ``ldp_audit.cli`` names them
too)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator

__all__ = [
    "CLOSING_LIMIT_S",
    "EXIT_INTERRUPTED",
    "EXIT_TERMINATED",
    "Terminated",
    "closing",
    "closing_open",
    "interrupted",
    "on_signal",
    "signal_hooks",
]

#: the exit code of a command ended by Ctrl-C / SIGINT (docs/cli.md)
EXIT_INTERRUPTED = 130
#: the exit code of a command ended by SIGTERM, handled like Ctrl-C
EXIT_TERMINATED = 143


class Terminated(KeyboardInterrupt):
    """SIGTERM turned into the same orderly unwinding as Ctrl-C (run folders marked
    "interrupted", ledgers consistent)."""


def interrupted(prog: str, exc: KeyboardInterrupt) -> int:
    """The one line a Ctrl-C (130) or a SIGTERM (143, :class:`Terminated`) prints for command
    ``prog``; its exit code."""
    term = isinstance(exc, Terminated)
    word = "terminated" if term else "interrupted"
    print(f"{prog}: {word}; files written so far are consistent", file=sys.stderr)
    return EXIT_TERMINATED if term else EXIT_INTERRUPTED


#: what :func:`on_signal` registered: called from the watchdog's thread at the first signal
_HOOKS: list[Callable[[], None]] = []


def on_signal(hook: Callable[[], None]) -> Callable[[], None]:
    """Have an armed watchdog call ``hook()`` from its own thread as soon as it sees the first
    SIGINT / SIGTERM, before its grace starts; returns the function that removes it. For work
    Python's handler cannot reach until it returns to the interpreter: ``train pgc-a3c``'s
    fused engine ends its compiled block at the next lock-step, so that the run is closed as
    "interrupted" within the grace (a block of 256 lock-steps outlived the 1 s grace at load
    7, session 53). ``hook`` must be quick and safe from another thread (set a flag)."""
    _HOOKS.append(hook)
    return lambda: _HOOKS.remove(hook) if hook in _HOOKS else None


#: the most seconds after a signal that the forced exit waits for :func:`closing`
CLOSING_LIMIT_S = 10.0
_CLOSING = [0]  # how many closing() blocks are open


@contextlib.contextmanager
def closing() -> Iterator[None]:
    """The command is writing what a signal left: a run folder being closed as "interrupted"
    (its transcript, its manifest). The forced exit waits for it (then one grace more for the
    process to end) up to ``CLOSING_LIMIT_S`` after the signal, as it waits for a signal held
    inside a library's import (:meth:`SignalWatchdog.defer`: numba's, while ``train pgc-a3c``
    loads its kernels, 0.8-2.3 s after config.json at load 15-20 ended 2 of 9 runs "running",
    session 54), so the run ends "interrupted",
    not "running": these writes fsync each file, seconds on a loaded disk (``train pgc-a3c``
    at load 13 ran its handler 0.96 s after the signal, session 54). A second signal still
    ends the process at once."""
    _CLOSING[0] += 1
    try:
        yield
    finally:
        _CLOSING[0] -= 1


def signal_hooks() -> list[Callable[[], None]]:
    """The hooks :func:`on_signal` registered (a copy)."""
    return list(_HOOKS)


def closing_open() -> bool:
    """Whether a :func:`closing` block is open."""
    return _CLOSING[0] > 0
