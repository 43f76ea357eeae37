"""Waiting for an event, not for a sleep: a timing test that sleeps a fixed time passes on an
idle machine and fails under load (the process it waits for has not got there yet).

:func:`wait_for` polls a predicate until it holds (or the process it watches exits, or a
generous deadline passes, each a clear failure); :func:`ledger_rows` is the usual predicate's
reading: the rows a run's ledger has committed, read-only, while its writer is running.
"""

from __future__ import annotations

import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path


def ledger_rows(path: Path, timeout: float = 0.0) -> int:
    """Rows committed so far in the ledger at ``path`` (read with plain sqlite3, read-only):
    0 before the file exists, before its head table is there, or while a writer holds the lock
    past ``timeout`` seconds (the caller looks again)."""
    if not path.is_file():
        return 0
    try:
        con = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True, timeout=timeout)
        try:
            return int(con.execute("SELECT rows FROM ldp_audit_head").fetchone()[0])
        finally:
            con.close()
    except (sqlite3.Error, TypeError):
        return 0


def wait_for(
    what: str,
    ready: Callable[[], bool],
    proc: subprocess.Popen | None = None,
    *,
    timeout: float = 300.0,
    every: float = 0.02,
) -> float:
    """Poll ``ready()`` until it is true; return the seconds waited.

    Fails (AssertionError naming ``what``) when ``proc`` exits first (its stderr tail in the
    message) or after ``timeout`` seconds: the deadline is a guard against a hang, not a
    measurement, so it is generous.
    """
    t0 = time.monotonic()
    while not ready():
        if proc is not None and proc.poll() is not None:
            err = proc.stderr.read()[-2000:] if proc.stderr is not None else ""
            raise AssertionError(f"exited ({proc.returncode}) before {what}: {err}")
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"{what}: not after {timeout:g} s")
        time.sleep(every)
    return time.monotonic() - t0


def wait_for_charges(
    run: Path, proc: subprocess.Popen | None = None, *, rows: int = 1, timeout: float = 300.0
) -> float:
    """Wait until the run's ``ledger.sqlite`` has committed at least ``rows`` charges: the
    training loop is under way (a charge comes before every release)."""
    ledger = run / "ledger.sqlite"
    return wait_for(
        f"{rows} ledger charge(s) in {ledger}",
        lambda: ledger_rows(ledger) >= rows,
        proc,
        timeout=timeout,
    )
