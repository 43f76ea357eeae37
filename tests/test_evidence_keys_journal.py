"""Issue 38, items 5 and 6: a key file inside the run and malformed key files are refused; a
hot journal (a writer killed inside a commit) leaves every read-only reader able to read the
committed state instead of "attempt to write a readonly database"."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ldp_audit.accountant import Accountant, LaplaceEvent, Ledger
from ldp_audit.accountant.keys import KeyFileError, load_key
from ldp_audit.cli import main
from ldp_audit.rundir import RunWriter, verify_run, write_artifact


def _key_file(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o600)
    return path


# ---------------------------------------------------------------- item 5: keys


def test_a_key_file_inside_the_run_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    run = tmp_path / "run"
    monkeypatch.setenv("LDP_AUDIT_KEY_FILE", str(run / "ledger.key"))
    with pytest.raises(KeyFileError, match="inside the run directory"):
        RunWriter(run, algorithm="toy", config={}, seed=0)
    assert not run.exists()  # refused before anything was written
    argv = ["train", "pgc-a3c", "--mechanism", "laplace", "--epsilon", "1",
            "--max-submissions", "20", "--no-progress", "--out", str(run)]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "inside the run directory" in err and "Traceback" not in err
    assert not (run / "ledger.key").exists()


def test_a_reader_refuses_a_run_that_carries_its_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    run = tmp_path / "run"
    w = RunWriter(run, algorithm="toy", config={}, seed=0)
    Accountant(w.open_ledger()).charge("a", LaplaceEvent(1.0))
    w.finish()
    key = Path(os.environ["LDP_AUDIT_KEY_FILE"])
    shutil.copy(key, run / "ledger.key")  # the owner's key copied into the run
    (run / "ledger.key").chmod(0o600)
    monkeypatch.setenv("LDP_AUDIT_KEY_FILE", str(run / "ledger.key"))
    with pytest.raises(KeyFileError, match="inside the run directory"):
        verify_run(run)
    for argv in (["budget", str(run), "--verify"], ["budget", str(run)], ["report", str(run)]):
        assert main(argv) == 2, argv
        assert "ledger.key' is inside" in capsys.readouterr().err
    with pytest.raises(KeyFileError, match="inside the run directory"):
        write_artifact(run, "audit.json", [])
    assert not (run / "audit.json").exists()


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("ab" * 32 + "\n" + "cd" * 32 + "\n", "2 lines"),  # two keys concatenated
        ("ab" * 16 + "\ncd" * 1 + "\n", "2 lines"),
        ("ab" * 16 + " " + "cd" * 16, "white space inside"),
        ("ab" * 3000, "over the limit of 4096"),  # 6000 bytes: refused, never cut
        ("ab" * 2048 + "\n", "over the limit of 4096"),  # 4097 bytes
    ],
)
def test_malformed_key_files_are_refused(
    text: str, match: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LDP_AUDIT_KEY_FILE", str(_key_file(tmp_path / "k" / "key", text)))
    with pytest.raises(KeyFileError, match=match):
        load_key()


def test_a_key_of_exactly_the_limit_and_a_trailing_newline_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LDP_AUDIT_KEY_FILE", str(_key_file(tmp_path / "k" / "key", "ab" * 2048)))
    assert load_key().key == bytes.fromhex("ab" * 2048)
    monkeypatch.setenv(
        "LDP_AUDIT_KEY_FILE", str(_key_file(tmp_path / "k2" / "key", "ab" * 32 + "\n"))
    )
    assert load_key().key == bytes.fromhex("ab" * 32)
    monkeypatch.setenv("LDP_AUDIT_KEY", "ab" * 16 + "\n" + "cd" * 16)
    with pytest.raises(KeyFileError, match="2 lines"):
        load_key()


# ---------------------------------------------------------------- item 6: hot journal

_CHILD = r"""
import os, sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("PRAGMA journal_mode=TRUNCATE")
con.execute("PRAGMA cache_size=1")  # pages spill into the file before the commit
con.execute("BEGIN IMMEDIATE")
con.execute("UPDATE ldp_audit_charges SET agent = agent || 'x'")
con.execute("CREATE TABLE junk (x BLOB)")
for i in range(200):
    con.execute("INSERT INTO junk VALUES (?)", (os.urandom(4000),))
print("inside", flush=True)
sys.stdin.read()  # killed here, inside the transaction
"""


def _killed_inside_a_commit(run: Path) -> None:
    """A child process writes into the run's ledger and is SIGKILLed inside the transaction,
    leaving ledger.sqlite-journal hot (the file holds uncommitted pages)."""
    led = run / "ledger.sqlite"
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(led)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "inside"
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait()
    assert (run / "ledger.sqlite-journal").stat().st_size > 0


@pytest.fixture
def hot_run(tmp_path: Path) -> tuple[Path, str]:
    run = tmp_path / "run"
    w = RunWriter(run, algorithm="toy", config={"delta": 0.0}, seed=0)
    Accountant(w.open_ledger()).charge_many([(f"a{i}", LaplaceEvent(1.0)) for i in range(50)])
    w.write_npz("transcript.npz", {"agent": np.arange(50, dtype=np.int64)})
    w.finish()
    head = verify_run(run).ledger["chain_head"]
    _killed_inside_a_commit(run)
    return run, head


def test_readers_read_the_committed_state_after_a_kill_inside_a_commit(
    hot_run: tuple[Path, str], capsys
) -> None:
    run, head = hot_run
    before = (run / "ledger.sqlite").read_bytes()
    # the raw state SQLite refuses read-only: what every reader met before issue 38
    con = sqlite3.connect((run / "ledger.sqlite").as_uri() + "?mode=ro", uri=True)
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        con.execute("SELECT COUNT(*) FROM ldp_audit_charges").fetchone()
    con.close()
    with Ledger(run / "ledger.sqlite", readonly=True) as led:
        assert len(led) == 50 and led.chain_head() == head and led.authenticated
        assert "hot journal" in led.store.hot_journal_note
        assert "--recover" in led.store.hot_journal_note
        assert led.verify()["rows"] == 50
    res = verify_run(run, head)
    assert res.ok and res.authenticated, res.problems
    assert any("hot journal" in n for n in res.notes)
    assert main(["budget", str(run), "--verify"]) == 0
    out = capsys.readouterr().out
    assert "hot journal" in out and "readonly" not in out
    assert main(["budget", str(run), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["charges"] == 50
    # the readers changed nothing: the file and its journal are as the kill left them
    assert (run / "ledger.sqlite").read_bytes() == before
    assert (run / "ledger.sqlite-journal").stat().st_size > 0
    # the command the note names rolls it back in place
    assert main(["budget", str(run / "ledger.sqlite"), "--recover"]) == 0
    assert "rolled back the hot journal" in capsys.readouterr().out
    con = sqlite3.connect((run / "ledger.sqlite").as_uri() + "?mode=ro", uri=True)
    assert con.execute("SELECT COUNT(*) FROM ldp_audit_charges").fetchone() == (50,)
    con.close()
    with Ledger(run / "ledger.sqlite", readonly=True) as led:
        assert led.store.hot_journal_note is None and led.chain_head() == head


def test_report_leaves_a_hot_journal_as_it_is(tmp_path: Path) -> None:
    """``report`` is a read-only reader (the docs' list), but its ledger loader opened the
    ledger with write access, so a report rolled a hot journal back in place (and switched a
    WAL-mode ledger back: session 50's probe, header bytes 2 2 -> 1 1). It reads like the other
    readers now: the committed state, the files left as they are."""
    run = tmp_path / "run"
    w = RunWriter(run, algorithm="toy", config={"delta": 0.0}, seed=0)
    Accountant(w.open_ledger()).charge_many([(f"a{i}", LaplaceEvent(1.0)) for i in range(50)])
    w.write_json("metrics.json", {"note": "toy"})
    w.finish()
    _killed_inside_a_commit(run)
    before = (run / "ledger.sqlite").read_bytes()
    assert main(["report", str(run)]) == 0
    assert json.loads((run / "report" / "report.json").read_text())["ledger"]
    assert (run / "ledger.sqlite").read_bytes() == before
    assert (run / "ledger.sqlite-journal").stat().st_size > 0


def test_a_short_or_odd_hex_key_is_named_as_such(monkeypatch) -> None:
    """Found from outside (session 55): ``LDP_AUDIT_KEY`` of 31 hex digits was refused as "not
    hex digits (expected 64 hex digits ...)", where the docs (and the 32-digit key it accepts)
    say at least 32; now the message names the odd count and the rule."""
    for text, words in (("a" * 31, "an odd number of hex digits"), ("0x" + "ab" * 16, "not hex")):
        monkeypatch.setenv("LDP_AUDIT_KEY", text)
        with pytest.raises(KeyFileError, match=words + r".*at least 32") as info:
            load_key()
        assert "expected 64" not in str(info.value)
    monkeypatch.setenv("LDP_AUDIT_KEY", "ab" * 16)
    assert load_key() is not None
