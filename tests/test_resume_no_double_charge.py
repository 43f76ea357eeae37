"""``--resume`` never charges a release twice (issue 28).

Before: Ctrl-C, then the documented ``--resume``, reran the run from its seed and charged every
earlier agent again (266 interrupted + 3,000 rerun = 3,266 rows for 3,000 releases; the report
then gave a false VIOLATION). Now the resumed run's charges are matched, in order, against the
rows already in the ledger (``Ledger.begin_replay``, armed by ``RunWriter.open_ledger`` in
resume mode) and only charges past them are written.

The CLI tests interrupt a real training process at a seeded random moment (SIGINT, SIGTERM,
SIGKILL), resume it, and compare with an uninterrupted run of the same config and seed: the
ledger's rows (agent, event, scope, in order) and the transcript are identical, the ledger
equals what the transcript implies per agent (the system's ``ledger_charges``), the run
verifies against its manifest, and the report's verdict is unchanged. One pgc-a3c SIGINT case
runs by default; every system (pgc-a3c, dprl, frd; fedrl refuses --resume) under all three
signals is marked slow.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ldp_audit.accountant import Accountant, Budget, LaplaceEvent, Ledger
from ldp_audit.errors import BudgetExceeded, LedgerError
from ldp_audit.rundir import RunDir, RunWriter, verify_run
from tests.waiting import ledger_rows

# ---- the replay itself (in process, exact) -----------------------------------------------------


def _batches(seed: int) -> list[list[tuple[str, LaplaceEvent]]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(12):
        k = int(rng.integers(1, 6))
        out.append(
            [
                (f"a{int(rng.integers(0, 5))}", LaplaceEvent(float(rng.choice([0.5, 1.0]))))
                for _ in range(k)
            ]
        )
    return out


def _row_keys(path: Path) -> list[tuple]:
    with Ledger(path, readonly=True) as led:
        return [(r["agent"], r["event"], r["scope"]) for r in led.records()]


@pytest.mark.parametrize("stop", [0, 1, 5, 11, 12])
def test_replay_writes_exactly_the_uninterrupted_rows(tmp_path: Path, stop: int) -> None:
    batches = _batches(stop)
    ref = Accountant(tmp_path / "ref.sqlite")
    for b in batches:
        ref.charge_many(b)
    ref.close()
    first = Accountant(tmp_path / "res.sqlite")
    for b in batches[:stop]:  # interrupted after `stop` batches
        first.charge_many(b)
    first.close()
    led = Ledger(tmp_path / "res.sqlite")
    n = led.begin_replay()
    acc = Accountant(led)
    for b in batches:  # the resumed run repeats every charge from the start
        acc.charge_many(b)
    assert led.replay_status() == {"rows": n, "replayed": n, "pending": 0}
    acc.close()
    assert _row_keys(tmp_path / "res.sqlite") == _row_keys(tmp_path / "ref.sqlite")


def test_replay_refuses_a_different_run_and_checks_a_straddling_batch(tmp_path: Path) -> None:
    acc = Accountant(tmp_path / "l.sqlite", budget=Budget(epsilon=2.0))
    acc.charge_many([("a", LaplaceEvent(1.0))])
    acc.close()
    led = Ledger(tmp_path / "l.sqlite")
    led.begin_replay()
    acc = Accountant(led)
    with pytest.raises(LedgerError, match="does not repeat the charges"):
        acc.charge("b", LaplaceEvent(1.0))
    assert len(led) == 1
    # a batch whose first charge was made before: the budget check sees the state before the
    # batch (a: 1 of 2), so a, a (total 2) passes and a third charge is refused
    acc.charge_many([("a", LaplaceEvent(1.0)), ("a", LaplaceEvent(1.0))])
    assert len(led) == 2 and acc.spent("a", method="basic") == 2.0
    with pytest.raises(BudgetExceeded):
        acc.charge("a", LaplaceEvent(1.0))
    acc.close()


def test_resume_writer_replays_and_records_it_in_the_manifest(tmp_path: Path) -> None:
    run = tmp_path / "run"
    w = RunWriter(run, algorithm="toy", config={}, seed=0)
    acc = Accountant(w.open_ledger())
    acc.charge_many([("a", LaplaceEvent(1.0)), ("b", LaplaceEvent(1.0))])
    acc.close()
    w.finish(status="interrupted")
    w = RunWriter(run, algorithm="toy", config={}, seed=0, mode="resume")
    acc = Accountant(w.open_ledger())
    for a in ("a", "b", "c"):
        acc.charge(a, LaplaceEvent(1.0))
    acc.close()
    w.write_npz("transcript.npz", {"agent": np.arange(3)})
    man = w.finish()
    import json

    doc = json.loads(man.read_text())
    assert doc["resume"] == {"rows": 2, "replayed": 2, "pending": 0}
    assert doc["ledger"]["rows"] == 3 and verify_run(run).ok
    assert "did not complete" not in verify_run(run).summary()


def test_verify_of_an_interrupted_run_says_it_did_not_complete(tmp_path: Path) -> None:
    # `budget RUN --verify` on a Ctrl-C'd run printed "verified (authenticated): every file
    # matches manifest.json ..." and nothing about its status: it read as a finished run
    run = tmp_path / "run"
    w = RunWriter(run, algorithm="toy", config={}, seed=0)
    Accountant(w.open_ledger()).charge("a", LaplaceEvent(1.0))
    w.finish(status="interrupted")
    res = verify_run(run)
    assert res.ok and res.status == "interrupted"
    assert res.summary().endswith("; run status interrupted: the run did not complete")


# ---- real processes, interrupted and resumed ---------------------------------------------------

SYSTEMS = {
    "pgc-a3c": ["pgc-a3c", "--mechanism", "laplace", "--epsilon", "1", "--max-submissions", "300"],
    "dprl": [
        "dprl",
        "--algo",
        "reinforce",
        "--privacy",
        "dpsgd",
        "--noise-multiplier",
        "1",
        "--episodes",
        "30",
        "--hidden",
        "8",
    ],
    "frd": [
        "frd",
        "--epsilon",
        "1",
        "--max-episodes",
        "12",
        "--initial-episodes",
        "2",
        "--exchange-period",
        "2",
        "--hidden",
        "8",
        "--no-stop-at-mission",
    ],
}


def _train(args: list[str], out: Path, *, resume: bool = False) -> subprocess.Popen:
    argv = [sys.executable, "-m", "ldp_audit.cli", "train", *args, "--out", str(out)]
    argv += ["--no-progress"] + (["--resume"] if resume else [])
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return subprocess.Popen(
        argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )


def _finish(p: subprocess.Popen, timeout: float = 300) -> tuple[int, str]:
    _, err = p.communicate(timeout=timeout)
    return p.returncode, err


def _compare(run: Path, ref: Path) -> None:
    assert _row_keys(run / "ledger.sqlite") == _row_keys(ref / "ledger.sqlite")
    a, b = np.load(run / "transcript.npz"), np.load(ref / "transcript.npz")
    assert sorted(a.files) == sorted(b.files)
    for k in a.files:
        assert np.array_equal(a[k], b[k]), k
    rd = RunDir(run)
    implied = rd.system.ledger_charges(rd.transcript(), rd.train_config)
    assert implied == rd.ledger_charges()  # ledger == transcript, per agent
    res = verify_run(run)
    assert res.ok and res.authenticated, res.problems


def _verdict(run: Path) -> str:
    from ldp_audit.report import build_report

    return build_report(run, figures=False).model["verdict"]["status"]


def _interrupt_and_resume(
    system: str,
    sig: signal.Signals,
    seed: int,
    tmp_path: Path,
    *,
    verdicts: bool,
    after_rows: int | None = None,
) -> dict[str, int]:
    """Reference run; the same run interrupted (after a seeded random share of the reference's
    wall time, or once ``after_rows`` charges are committed) and resumed; compared. Returns
    the ledger's rows at the interruption and the rows the resume replayed."""
    args = SYSTEMS[system]
    ref = tmp_path / "ref"
    t0 = time.monotonic()
    code, err = _finish(_train(args, ref))
    wall = time.monotonic() - t0
    assert code == 0, err
    run = tmp_path / "run"
    p = _train(args, run)
    if after_rows is None:
        time.sleep(float(np.random.default_rng(seed).uniform(0.2, 0.9)) * wall)
    else:
        # paced once its ledger exists: the run is stopped (SIGSTOP) except for 5 ms slices
        # between two looks at its ledger, so the interruption lands after `after_rows` charges
        # however loaded the machine is (unpaced, its 300 charges take 0.3 s and a slow poller
        # missed them all)
        deadline = time.monotonic() + 300
        while not (run / "ledger.sqlite").exists() and p.poll() is None:  # start-up: unpaced
            assert time.monotonic() < deadline
            time.sleep(0.01)
        p.send_signal(signal.SIGSTOP)
        # (a run stopped inside its write transaction holds the lock: look again, not wait)
        while ledger_rows(run / "ledger.sqlite") < after_rows and p.poll() is None:
            assert time.monotonic() < deadline
            p.send_signal(signal.SIGCONT)
            time.sleep(0.005)
            p.send_signal(signal.SIGSTOP)
    p.send_signal(sig)  # a stopped process keeps it pending until it continues
    if after_rows is not None and p.poll() is None:
        p.send_signal(signal.SIGCONT)
    code, err = _finish(p)
    assert "Traceback" not in err, err
    at_interrupt = ledger_rows(run / "ledger.sqlite", 5.0)
    resumable = (run / "config.json").is_file()
    if resumable and (run / "manifest.json").is_file():
        import json

        resumable = json.loads((run / "manifest.json").read_text())["status"] != "complete"
    if not (run / "config.json").is_file():  # stopped before it wrote anything: start again
        code, err = _finish(_train(args, run, resume=False))
        assert code == 0, err
    elif resumable:
        code, err = _finish(_train(args, run, resume=True))
        assert code == 0, err
    _compare(run, ref)
    if verdicts:
        assert _verdict(run) == _verdict(ref)
    import json

    resumed = json.loads((run / "manifest.json").read_text()).get("resume") or {}
    return {"at_interrupt": at_interrupt, "replayed": int(resumed.get("replayed", 0))}


def test_pgc_sigint_then_resume_charges_nothing_twice(tmp_path: Path) -> None:
    """Issue 28's reproduction: SIGINT once 50 of 300 charges are committed, then --resume."""
    info = _interrupt_and_resume(
        "pgc-a3c", signal.SIGINT, 0, tmp_path, verdicts=True, after_rows=50
    )
    # it was interrupted mid-run and the resume replayed what the first attempt had charged
    assert 50 <= info["at_interrupt"] < 300
    assert info["replayed"] == info["at_interrupt"]


@pytest.mark.slow
@pytest.mark.parametrize("system", sorted(SYSTEMS))
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=str)
@pytest.mark.parametrize("seed", [1, 2])
def test_interrupt_then_resume_every_system(
    system: str, sig: signal.Signals, seed: int, tmp_path: Path
) -> None:
    _interrupt_and_resume(system, sig, seed, tmp_path, verdicts=seed == 1)
