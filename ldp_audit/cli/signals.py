"""A signal watchdog for the command line: SIGINT / SIGTERM end every command within 2 s.

The ordinary path is Python's: SIGINT raises ``KeyboardInterrupt`` and SIGTERM ``Terminated``
in the main thread, the command unwinds, a run folder being written is marked interrupted, and
``main`` exits 130 / 143. That path needs the main thread to come back to the interpreter, which
it may not do for a long time: a long NumPy / Numba / SQLite / torch call, a process pool that
waits for its running tasks on shutdown, a thread that is not a daemon.

So the console entry point also arms this watchdog: the C-level signal handler writes the signal
number into a pipe (``signal.set_wakeup_fd``), a daemon thread blocked on that pipe sees it even
while the main thread is inside compiled code (every kernel here releases the GIL), waits
``grace`` seconds for the ordinary path, and if the process is still alive kills its worker
processes and ends it with ``os._exit`` and the documented code (130 / 143). What was written is
still consistent (files are written atomically; the ledger is SQLite, tested against SIGKILL),
but a run being written keeps ``"status": "running"`` instead of ``"interrupted"``: the same
state as after SIGKILL, which every reader already treats as incomplete. So the forced exit
waits (at most ``CLOSING_LIMIT_S`` after the signal) while a run is being closed as interrupted
(:func:`ldp_audit.interrupts.closing`) or the signal is held inside a library's import
(:meth:`SignalWatchdog.defer`), and work that Python's handler cannot reach is told at once
(:func:`ldp_audit.interrupts.on_signal`). A second signal of the same kind ends the process at
once.

"Within 2 s" counts from delivery: a process inside an uninterruptible system call (an fsync of
the ledger on a busy disk) gets the signal only when the call returns. ``LDP_AUDIT_SIGNAL_TRACE``
names a file where the watchdog notes the monotonic time it saw each signal (used by the tests).

Library code never installs this: only ``ldp_audit.cli.main`` when called as the console script.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import threading
import time

from ldp_audit.interrupts import CLOSING_LIMIT_S, closing_open, signal_hooks

__all__ = ["SignalWatchdog"]

_CODES = {int(signal.SIGINT): 130, int(signal.SIGTERM): 143}
_LIBS = re.compile(r"[/\\](site|dist)-packages[/\\]")


class SignalWatchdog:
    """Ends the process ``grace`` seconds after SIGINT / SIGTERM if it has not ended by itself."""

    def __init__(self, grace: float = 1.0) -> None:
        if isinstance(grace, bool) or not isinstance(grace, (int, float)) or not 0 < grace <= 10:
            raise ValueError(f"grace must be a number in (0, 10] seconds, got {grace!r}")
        self.grace = float(grace)
        self._r: int | None = None
        self._w: int | None = None
        self._old_fd: int | None = None
        # signals seen, per source: the pipe (C level) and the Python handlers; one delivery is
        # seen by both, so a second signal is one that a single source sees twice
        self._seen: dict[tuple[str, int], int] = {}
        self._armed: set[int] = set()
        self._lock = threading.Lock()
        self.finishing = False  # set by teardown(): the command's work is done
        self._late: int | None = None  # the first signal seen since then
        self._deferred: int | None = None  # a signal held while an import ran (defer)
        self._redelivering = False  # it is being sent again (not a second one)
        self._echo: int | None = None  # its byte on the wakeup pipe, not to be counted again

    def install(self) -> bool:
        """Arm the watchdog (main thread only); False where it cannot be armed (not the main
        thread, or no pipe), and the ordinary path alone then applies."""
        if threading.current_thread() is not threading.main_thread():
            return False
        try:
            r, w = os.pipe()
            os.set_blocking(w, False)
            self._old_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        except (OSError, ValueError):
            return False
        self._r, self._w = r, w
        threading.Thread(target=self._watch, name="ldp-audit-signal-watchdog", daemon=True).start()
        return True

    def notify(self, signum: int) -> None:
        """Called by the Python-level handlers too (in case a library replaced the wakeup fd)."""
        self._arm(int(signum), "handler")

    def uninstall(self) -> None:
        """Give the wakeup fd back (the thread stays blocked on its pipe, harmlessly)."""
        if self._w is None:
            return
        with contextlib.suppress(OSError, ValueError):
            signal.set_wakeup_fd(self._old_fd if self._old_fd is not None else -1)

    def exit_now(self, code: int) -> None:
        """The command has ended (or the ordinary path has unwound: files consistent, run
        marked interrupted): end the process at once, without the interpreter's teardown (which
        can take seconds with torch loaded, or wait on a pool), flushing what was printed
        first."""
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError, AttributeError):  # None: fd closed
                stream.flush()
        self._kill_children()
        os._exit(code)

    def teardown(self) -> int | None:
        """The command has finished: join its other non-daemon threads and run the exit
        handlers (``atexit``: logging, multiprocessing, temporary folders), the parts of the
        interpreter's teardown that matter, so that :meth:`exit_now` can skip the rest (module
        finalization: 2.6-5.4 s after ``train pgc-a3c`` at load 12, measured 2026-12-07, during
        which a signal ended the process by its default action, no line). A signal from here on
        is noted, not raised; returns the first one (None if none)."""
        import atexit

        self.finishing = True
        for t in threading.enumerate():
            if t is not threading.current_thread() and not t.daemon:
                t.join()
        with contextlib.suppress(Exception):
            getattr(atexit, "_run_exitfuncs", lambda: None)()
        return self._late

    def defer(self, signum: int, frame: object) -> bool:
        """True where the main thread is inside an import (``frame``: where the handler was
        called): the signal is held, not raised, and raised when the import has returned. An
        exception raised inside an import can unwind through a native module's init: ``import
        torch`` calls back into Python from C++, and a KeyboardInterrupt there ended the process
        by SIGABRT ("terminate called after throwing an instance of
        'pybind11::error_already_set'"), no manifest, no line (session 51 probe: 3 of 40 ``train
        fedrl`` runs signalled 0.3-4 s after config.json, where the trainer imports torch)."""
        if not _importing(frame):
            return False
        if self._deferred is None:
            self._deferred = int(signum)
            threading.Thread(target=self._redeliver, daemon=True).start()
        return True

    def redelivered(self, signum: int) -> bool:
        """True (once) for the held signal raised again by :meth:`defer`'s thread."""
        if self._deferred != signum or not self._redelivering:
            return False
        self._deferred, self._redelivering = None, False
        return True

    def _redeliver(self) -> None:
        main, signum = int(threading.main_thread().ident or 0), int(self._deferred or 0)
        while _importing(sys._current_frames().get(main)):  # noqa: SLF001 - the only way to
            time.sleep(0.005)  # see another thread's stack; the watchdog's grace still holds
        self._redelivering, self._echo = True, signum  # sent again: not a second signal
        signal.pthread_kill(main, signum)  # a real one: a blocking call returns EINTR

    @staticmethod
    def _kill_children() -> None:
        with contextlib.suppress(Exception):  # best effort: the process ends right after
            import multiprocessing

            for child in multiprocessing.active_children():
                child.kill()

    # -- the thread ------------------------------------------------------------------------------

    def _watch(self) -> None:
        assert self._r is not None
        while True:
            try:
                data = os.read(self._r, 64)
            except OSError:
                return
            if not data:
                return
            for b in data:
                if b == self._echo:
                    self._echo = None  # the held signal sent again: not a second one
                elif b in _CODES:
                    self._arm(b, "pipe")

    def _arm(self, signum: int, source: str) -> None:
        trace = os.environ.get("LDP_AUDIT_SIGNAL_TRACE")
        if trace:  # for the tests: when the process got the signal (CLOCK_MONOTONIC)
            with contextlib.suppress(OSError), open(trace, "a") as f:
                f.write(f"{source} {signum} {time.monotonic():.6f}\n")
        if signum not in _CODES:
            return
        if self.finishing and self._late is None:
            self._late = signum
        with self._lock:
            n = self._seen.get((source, signum), 0) + 1
            self._seen[(source, signum)] = n
            first = signum not in self._armed
            self._armed.add(signum)
        if n >= 2:
            self._force(signum, "a second signal")
        elif first:
            for hook in signal_hooks():
                with contextlib.suppress(Exception):
                    hook()
            threading.Thread(target=self._later, args=(signum,), daemon=True).start()

    def _later(self, signum: int) -> None:
        t0 = time.monotonic()
        time.sleep(self.grace)
        # a run being closed as interrupted, or the signal held inside a library's import
        # (raised when it returns, then the run is closed): let it finish (bounded)
        busy = lambda: closing_open() or self._deferred is not None  # noqa: E731
        if busy():
            while busy() and time.monotonic() - t0 < CLOSING_LIMIT_S:
                time.sleep(0.01)
            time.sleep(min(self.grace, max(0.0, t0 + CLOSING_LIMIT_S - time.monotonic())))
        self._force(signum, f"the command did not stop within {time.monotonic() - t0:.3g} s")

    def _force(self, signum: int, why: str) -> None:
        name = "interrupted" if signum == int(signal.SIGINT) else "terminated"
        msg = (
            f"ldp-audit: {name}; forced exit ({why}). Files written so far are consistent; a "
            f"run folder being written is left as after a kill (status 'running', not "
            f"'interrupted').\n"
        )
        self._kill_children()
        with contextlib.suppress(OSError):
            os.write(2, msg.encode())
        os._exit(_CODES[signum])


def _importing(frame: object) -> bool:
    """Whether ``frame`` (a Python frame, or None) is inside the import of an installed library
    (module-level code of a file under site-packages / dist-packages, where native modules call
    back into Python). A module of the user's or of ldp-audit's own source is not held: a signal
    in its slow import unwinds at once, as before."""
    lib = False  # a library's module-level code seen, run by the import system (not runpy)
    while frame is not None:
        code = frame.f_code  # type: ignore[attr-defined]
        lib = lib or (code.co_name == "<module>" and bool(_LIBS.search(code.co_filename)))
        if lib and code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back  # type: ignore[attr-defined]
    return False
