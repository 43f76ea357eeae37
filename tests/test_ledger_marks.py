"""The high-water mark (ldp_audit.accountant.ledger_marks): a ledger alone rolled back or forked
is refused on open, by a writer and by `budget --verify` (before it, both went through and a new
accountant charged on top of the older spend: docs/accountant.md, "What no key catches");
a backup restored on purpose is accepted by `budget --accept-restored`; a mark edited by hand
is refused; a writer killed between its commit and the mark leaves a ledger that opens."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ldp_audit.accountant import Accountant, Budget, LaplaceEvent, Ledger
from ldp_audit.accountant.keys import ENV_HEADS, heads_dir
from ldp_audit.accountant.ledger_format import LedgerIntegrityError
from ldp_audit.cli import main
from ldp_audit.errors import InvalidParameterError, LedgerError
from ldp_audit.rundir import RunWriter

ROOT = Path(__file__).resolve().parents[1]
ONE = [("a", LaplaceEvent(1.0))]


@pytest.fixture(autouse=True)
def _heads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own heads folder (the marks of the session's key are shared otherwise)."""
    monkeypatch.setenv(ENV_HEADS, str(tmp_path / "heads"))
    return tmp_path / "heads"


def _ledger(tmp_path: Path, before: int, after: int) -> tuple[Path, Path]:
    """A ledger alone charged ``before`` times, copied, then charged ``after`` more times."""
    led = tmp_path / "alone" / "ledger.sqlite"
    led.parent.mkdir()
    with Accountant(led, budget=Budget(epsilon=100.0)) as acc:
        acc.charge_many(ONE * before)
        shutil.copy(led, tmp_path / "older.sqlite")
        acc.charge_many(ONE * after)
    return led, tmp_path / "older.sqlite"


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str], *needles: str) -> None:
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and all(n in err for n in needles), err


def test_a_ledger_alone_rolled_back_is_refused(tmp_path, capsys) -> None:
    """The documented gap (3 of 8 charges read as the spend, exit 0) closed: exit 2."""
    led, older = _ledger(tmp_path, 3, 5)
    shutil.copy(older, led)  # the rollback
    for readonly in (False, True):
        with pytest.raises(LedgerIntegrityError, match="holds 3 charges.*records 8") as e:
            Ledger(led, readonly=readonly)
        assert "--accept-restored" in str(e.value) and str(led) in str(e.value)
    with pytest.raises(LedgerIntegrityError, match="high-water mark"):
        Accountant(led, budget=Budget(epsilon=100.0))
    _refused(capsys, ["budget", str(led), "--verify"], "high-water mark records 8", "--accept")
    _refused(capsys, ["budget", str(led)], "high-water mark records 8")


def test_a_fork_is_refused(tmp_path, capsys) -> None:
    """Two copies charged on their own: the one charged second, and the other once the mark
    has moved past it, are refused (the chain does not pass through the mark's head)."""
    led, copy = _ledger(tmp_path, 3, 0)
    a, b = Accountant(led), Accountant(copy)  # both opened at the mark (3 rows)
    a.charge_many(ONE)
    with pytest.raises(LedgerIntegrityError, match="does not pass through row 4"):
        b.charge_many(ONE * 2)  # committed to the fork, then refused: the mark stays at a's
    a.close(), b.close()
    _refused(capsys, ["budget", str(copy), "--verify"], "does not pass through row 4")
    with pytest.raises(LedgerIntegrityError, match="does not pass through"):
        Accountant(copy)
    with Accountant(led) as acc:  # the ledger the mark follows goes on
        acc.charge_many(ONE)
        assert acc.spent("a", method="basic") == pytest.approx(5.0)


def test_a_backup_restored_on_purpose_is_accepted(tmp_path, capsys) -> None:
    led, older = _ledger(tmp_path, 3, 5)
    shutil.copy(older, led)
    capsys.readouterr()
    assert main(["budget", str(led), "--accept-restored"]) == 0
    out = capsys.readouterr().out
    assert "3 charges" in out and "forgot 8 charges" in out, out
    assert main(["budget", str(led), "--verify"]) == 0
    with Accountant(led, budget=Budget(epsilon=100.0)) as acc:
        acc.charge_many(ONE)
        assert acc.spent("a", method="basic") == pytest.approx(4.0)
    capsys.readouterr()
    assert main(["budget", str(led), "--accept-restored"]) == 0  # a copy at the mark
    assert "nothing forgotten" in capsys.readouterr().out
    _refused(capsys, ["budget", str(led), "--accept-restored", "--verify"], "used alone")
    with pytest.raises(InvalidParameterError, match="accept_restored must be a bool, got 'no'"):
        Ledger(led, accept_restored="no")  # a truthy string would have accepted


def test_a_mark_edited_by_hand_is_refused(tmp_path, capsys, _heads) -> None:
    led, older = _ledger(tmp_path, 3, 5)
    (mark,) = _heads.iterdir()
    doc = json.loads(mark.read_text())
    assert doc["rows"] == 8
    mark.write_text(json.dumps({**doc, "rows": 3}))  # "back to 3", without the key
    with pytest.raises(LedgerIntegrityError, match="fails its MAC"):
        Ledger(led)
    _refused(capsys, ["budget", str(led), "--verify"], "fails its MAC", str(mark))
    mark.write_text("not a mark")
    with pytest.raises(LedgerIntegrityError, match="malformed or fails its MAC"):
        Ledger(older, readonly=True)
    capsys.readouterr()
    assert main(["budget", str(led), "--accept-restored"]) == 0  # the way out it names
    assert "failing its MAC" in capsys.readouterr().out
    assert json.loads(mark.read_text())["rows"] == 8 and len(Ledger(led)) == 8


def test_no_mark_opens_and_a_copy_at_the_mark_verifies(tmp_path, _heads) -> None:
    """A missing mark (first use, another machine) is no problem; a whole copy (same rows and
    head) verifies, as a run folder copied elsewhere to be read."""
    led, _ = _ledger(tmp_path, 3, 5)
    copy = tmp_path / "copy.sqlite"
    shutil.copy(led, copy)
    assert Ledger(copy, verify="full").verify()["rows"] == 8
    (mark,) = _heads.iterdir()
    mark.write_bytes(b"")  # what a machine crash after the unsynced rename can leave
    assert len(Ledger(led)) == 8
    shutil.rmtree(_heads)
    assert len(Ledger(led)) == 8


_KILLED = r"""
import os, signal, sys
from ldp_audit.accountant import Accountant, LaplaceEvent
from ldp_audit.accountant import ledger as L
acc = Accountant(sys.argv[1])
acc.charge_many([("a", LaplaceEvent(1.0))])
def die(*a, **k):
    os.kill(os.getpid(), signal.SIGKILL)  # after the commit, before the mark
L.advance_mark = die
acc.charge_many([("a", LaplaceEvent(1.0))] * 2)
"""


def test_a_writer_killed_between_commit_and_mark_leaves_a_ledger_that_opens(tmp_path) -> None:
    led = tmp_path / "ledger.sqlite"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", _KILLED, str(led)], env=env, check=False)
    assert proc.returncode == -9
    (mark,) = heads_dir().iterdir()
    assert json.loads(mark.read_text())["rows"] == 1  # lags the file's 3 rows
    with Accountant(led) as acc:
        assert len(acc.ledger) == 3
        acc.charge_many(ONE)
    assert json.loads(mark.read_text())["rows"] == 4


def test_a_writer_that_cannot_write_the_mark_is_refused_before_charging(tmp_path, monkeypatch):
    """A heads folder that cannot be created (here under /proc): the writer committed, then
    raised "cannot write its high-water mark" (a charge counted, the caller told it failed);
    now refused on open, nothing charged. Readers still read (no mark: nothing to compare)."""
    led, _ = _ledger(tmp_path, 2, 0)
    monkeypatch.setenv(ENV_HEADS, "/proc/ldp-audit-no-such-folder/heads")
    with pytest.raises(LedgerError, match="cannot be charged.*nothing was charged"):
        Accountant(led)
    assert len(Ledger(led, readonly=True)) == 2


def test_a_heads_folder_that_moves_with_the_ledger_is_refused(tmp_path, monkeypatch, capsys):
    """Session 51 probe: LDP_AUDIT_HEADS relative (a mark per working folder: from another
    folder, a rollback read as no mark, exit 0), the ledger's own folder, or inside a run
    (directly or by a symlink: copying the folder back rolled the mark back with it, the
    rollback passed) was accepted silently; now refused by name (exit 2), nothing charged."""
    led, older = _ledger(tmp_path, 3, 0)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(ENV_HEADS, "heads")
    with pytest.raises(InvalidParameterError, match="LDP_AUDIT_HEADS='heads'.*absolute"):
        Accountant(led)
    _refused(capsys, ["budget", str(led), "--verify"], "LDP_AUDIT_HEADS='heads'", "absolute")
    link = tmp_path / "link"
    link.symlink_to(led.parent)
    for heads in (led.parent, link):  # the ledger's own folder, directly or by a symlink
        monkeypatch.setenv(ENV_HEADS, str(heads))
        with pytest.raises(LedgerError, match="inside the ledger's folder.*roll the marks back"):
            Accountant(led)
    _refused(capsys, ["budget", str(led)], "inside the ledger's folder")
    inside = tmp_path / "run" / "state" / "heads"  # anywhere inside a run
    monkeypatch.setenv(ENV_HEADS, str(inside))
    with pytest.raises(LedgerError, match="inside the run directory"):
        RunWriter(tmp_path / "run", algorithm="test", config={}, seed=0)
    monkeypatch.setenv(ENV_HEADS, str(tmp_path / "heads"))
    assert len(Ledger(led, readonly=True)) == 3 and not inside.exists()  # readers still read


def test_a_mark_that_is_not_a_regular_file_is_refused_not_waited_on(tmp_path, _heads, capsys):
    """Session 51 probe: a FIFO at the mark's path hung every open (reader and writer) for
    ever; a folder there raised an OSError. Now: exit 2, "not a regular file"."""
    led, _ = _ledger(tmp_path, 2, 0)
    (mark,) = _heads.iterdir()
    mark.unlink()
    os.mkfifo(mark)
    _refused(capsys, ["budget", str(led), "--verify"], "not a regular file", str(mark))
    with pytest.raises(LedgerError, match="not a regular file"):
        Accountant(led)
    mark.unlink()
    mark.mkdir()
    _refused(capsys, ["budget", str(led)], f"{str(mark)!r} of ledger", ": Is a directory (")


def test_accept_restored_with_json_prints_json(tmp_path, capsys) -> None:
    """Session 51 probe: `--accept-restored --json` printed the text line (--json ignored)."""
    led, older = _ledger(tmp_path, 3, 5)
    shutil.copy(older, led)
    capsys.readouterr()
    assert main(["budget", str(led), "--accept-restored", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["rows"] == 3 and doc["forgotten"]["rows"] == 8, doc
    assert main(["budget", str(led), "--accept-restored", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["forgotten"] is None


def test_a_ledger_in_the_home_folder_is_read_with_the_default_key(tmp_path, monkeypatch, capsys):
    """Session 51 probe: `budget ~/ledger.sqlite` with the default key (~/.config/ldp-audit/)
    was refused (exit 2, "the ledger key file ... is inside the ledger's folder", naming the
    default as the way out); a ledger alone refuses only a key directly beside it."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for var in ("LDP_AUDIT_KEY_FILE", "LDP_AUDIT_KEY", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(var, raising=False)
    with Accountant(home / "ledger.sqlite", budget=Budget(epsilon=100.0)) as acc:
        acc.charge_many(ONE * 2)
    assert (home / ".config" / "ldp-audit" / "ledger.key").is_file()
    capsys.readouterr()
    assert main(["budget", str(home / "ledger.sqlite"), "--json"]) == 0
    assert "Traceback" not in capsys.readouterr().err
    monkeypatch.setenv("LDP_AUDIT_KEY_FILE", str(home / "ledger.key"))  # directly beside
    _refused(capsys, ["budget", str(home / "ledger.sqlite")], "is inside the ledger's folder")


def test_the_same_key_from_the_environment_sees_the_key_files_marks(tmp_path, monkeypatch, capsys):
    """Session 51 probe: the marks lived beside the key file, or in the state folder with the
    key in LDP_AUDIT_KEY: the same key passed in LDP_AUDIT_KEY found no mark, so a ledger rolled
    back from 8 to 3 charges verified (exit 0) and was charged on (4.0 spent). Now one folder."""
    monkeypatch.delenv(ENV_HEADS)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("LDP_AUDIT_KEY_FILE", str(tmp_path / "key" / "ledger.key"))
    led, older = _ledger(tmp_path, 3, 5)  # written with the key file
    shutil.copy(older, led)
    monkeypatch.setenv("LDP_AUDIT_KEY", (tmp_path / "key" / "ledger.key").read_text().strip())
    _refused(capsys, ["budget", str(led), "--verify"], "high-water mark records 8")
    with pytest.raises(LedgerIntegrityError, match="records 8"):
        Accountant(led)


def test_accept_restored_that_cannot_write_the_mark_says_nothing_was_accepted(
    tmp_path, monkeypatch, capsys
) -> None:
    """Session 51 probe: `--accept-restored` with a heads folder that cannot be written said
    "the charges were committed (the mark lags ...)": nothing is charged there."""
    led, _ = _ledger(tmp_path, 2, 0)
    monkeypatch.setenv(ENV_HEADS, str(led))  # a file, not a folder
    _refused(capsys, ["budget", str(led), "--accept-restored"], "nothing was accepted")


def test_another_ledgers_mark_in_its_place_is_named_as_such(tmp_path, capsys, _heads) -> None:
    """Session 51 probe: another ledger's (authentic) mark copied over this one's was refused
    with 'fails its MAC ... written by someone without the key', which it was not."""
    led, _ = _ledger(tmp_path, 3, 5)
    (mark,) = _heads.iterdir()
    other = tmp_path / "other" / "ledger.sqlite"
    other.parent.mkdir()
    with Accountant(other, budget=Budget(epsilon=100.0)) as acc:
        acc.charge_many(ONE * 9)
    (other_mark,) = (m for m in _heads.iterdir() if m != mark)
    shutil.copy(other_mark, mark)
    with pytest.raises(LedgerIntegrityError, match="is another ledger's"):
        Ledger(led)
    _refused(capsys, ["budget", str(led), "--verify"], "is another ledger's", str(mark))


def test_an_unverified_read_of_a_copy_the_mark_refuses_reads_it_and_says_why(
    tmp_path, capsys, _heads
) -> None:
    """`--allow-unverified` on a copy the mark refuses (session 51's leftover: exit 2 even so,
    the documented workaround an empty LDP_AUDIT_HEADS): read, the refusal said first, exit 4,
    nothing charged or written (the ledger's and the mark's bytes unchanged); without it,
    exit 2 as before; a writer is refused inside the same context."""
    from tests.test_evidence_analyses import _make_run

    led, older = _ledger(tmp_path, 3, 5)
    run = _make_run(tmp_path / "run")
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    with Accountant(run / "ledger.sqlite") as acc:  # the mark moves past the copy's head
        acc.charge_many(ONE)
    before = {f: f.read_bytes() for f in (older, copy / "ledger.sqlite", *_heads.iterdir())}
    why = "high-water mark records"
    for argv in (
        ["budget", str(older)],
        ["budget", str(older), "--verify", "--json"],
        ["budget", str(copy)],
        ["budget", str(copy), "--verify"],
        ["report", str(copy), "-o", str(tmp_path / "rep")],
    ):
        _refused(capsys, argv, why)
        assert main([*argv, "--allow-unverified"]) == 4, argv
        out, err = capsys.readouterr()
        assert "UNVERIFIED EVIDENCE" in out + err and why in out + err, argv
        assert "Traceback" not in err
        if "--json" in argv:
            assert json.loads(out)["verified"] is False
    from ldp_audit.accountant.ledger_marks import unverified_reads

    with unverified_reads():
        assert len(Ledger(older, readonly=True)) == 3
        with pytest.raises(LedgerIntegrityError, match=why):
            Accountant(older)  # a writer's open: refused, nothing charged
    assert {f: f.read_bytes() for f in before} == before


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0 or not os.path.isdir("/sys/kernel"),
    reason="needs root and sysfs (where os.access says writable and a create is refused)",
)
def test_a_marks_folder_root_cannot_create_in_is_refused_before_a_run(
    tmp_path, monkeypatch
) -> None:
    """Session 53: ``LDP_AUDIT_HEADS=/sys/kernel`` passed the writer's os.access check as root;
    ``train`` charged its ledger, then exited 2 naming the mark it could not write."""
    from ldp_audit.accountant.ledger_marks import check_writable

    monkeypatch.setenv(ENV_HEADS, "/sys/kernel")
    with pytest.raises(LedgerError, match="cannot be written"):
        check_writable(str(tmp_path / "ledger.sqlite"))
    with pytest.raises(LedgerError, match="cannot be written"):
        RunWriter(tmp_path / "run", algorithm="test", config={}, seed=0)
    assert not (tmp_path / "run").exists()
