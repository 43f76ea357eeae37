"""A reader parses only the bytes a check saw, and a run holds only files the toolkit accounts for
(session 48).

1. Check-then-read: every reader verified a run (``require_verified``) and then opened each file
   again to read it, so a file swapped between the check and the read was parsed unverified
   (``report`` read an edited ``audit.json`` and printed its verdict; a library reader read a
   swapped transcript). Readers now read a file once (``rundir.files.read_checked``) and refuse
   bytes whose SHA-256 is not the one the check saw, or a file the check did not see.
2. A file in a run folder that is neither sealed (``manifest.json``, ``analyses.json``) nor one
   the toolkit leaves unsealed by design (the ledger's files, an interrupted write's temporary
   file) verified: ``budget RUN --verify`` said OK beside a forged ``notes.md``.

Each test below failed on the code before session 48.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ldp_audit.cli import main
from ldp_audit.errors import RunDirectoryError
from ldp_audit.rundir import RunDir, require_verified, verify_run, write_artifact
from tests import test_evidence_analyses as analyses
from tests.test_report_fixtures import GOOD_ATTACK

run = analyses.run  # the fixture: a small finished toy run with a sealed audit finding a violation
_forge_audit = analyses._edit_audit  # 'violation' set to false and the bound to 3.1


# ------------------------------------------------------------------ 1: the bytes checked are read


def test_a_file_swapped_after_the_check_is_never_parsed(run: Path) -> None:
    require_verified(run)  # what every reader calls first
    rd = RunDir(run)
    assert rd.json("audit.json")[0]["violation"] is True  # the verified bytes read
    np.savez(run / "transcript.npz", agent=np.full(4, 7, dtype=np.int64))  # swapped
    _forge_audit(run)
    with pytest.raises(RunDirectoryError, match=r"transcript\.npz changed after it was verif"):
        rd.arrays("transcript.npz", "agent")
    with pytest.raises(RunDirectoryError, match=r"audit\.json changed after it was verified"):
        rd.json("audit.json")
    (run / "metrics.json").write_text(json.dumps({"note": "forged"}))
    with pytest.raises(RunDirectoryError, match=r"metrics\.json changed after it was verified"):
        rd.metrics()
    # checked again, the change is named and (with --allow-unverified) the bytes it saw read
    res = require_verified(run, allow_unverified=True)
    assert not res.ok and any("transcript.npz does not match" in p for p in res.problems)
    assert rd.arrays("transcript.npz", "agent")["agent"].tolist() == [7, 7, 7, 7]


def test_a_file_added_after_the_check_is_never_parsed(run: Path) -> None:
    require_verified(run)
    (run / "attack_dynamics.json").write_text(json.dumps(GOOD_ATTACK))  # after the check
    with pytest.raises(RunDirectoryError, match=r"attack_dynamics\.json was not in the run"):
        RunDir(run).json("attack_dynamics.json")
    # what the toolkit itself writes after the check is read back (sealed, recorded)
    write_artifact(run, "attack_fedrl.json", GOOD_ATTACK)
    assert RunDir(run).json("attack_fedrl.json") == json.loads(json.dumps(GOOD_ATTACK))
    assert RunDir(run).json("audit.json")[0]["violation"] is True  # the index was rewritten


def test_report_reads_the_bytes_it_verified(
    run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """audit.json swapped right after report's check: before, the report parsed the forged
    audit (violation false) and exited 4 with its verdict; now it refuses, naming the file."""
    import ldp_audit.rundir.verify as verify  # cli.evidence imports it from there at call time

    real = verify.require_verified

    def check_then_swap(*a, **kw):
        res = real(*a, **kw)
        _forge_audit(run)  # the window between the check and the read
        return res

    monkeypatch.setattr(verify, "require_verified", check_then_swap)
    assert main(["report", str(run), "-o", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "audit.json changed after it was verified" in err
    assert not (tmp_path / "r" / "index.html").exists()
    monkeypatch.setattr(verify, "require_verified", real)  # unswapped: the real verdict
    (run / "audit.json").unlink()
    write_artifact(run, "audit.json", [analyses.VIOLATION])
    assert main(["report", str(run), "-o", str(tmp_path / "r2")]) == 1  # the violation


def test_an_extra_swapped_after_its_seal_check_is_never_parsed(
    run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """report RUN EXTRA: the EXTRA's seal was checked on one read and the loader read it again."""
    from ldp_audit.cli import report_cmd
    from ldp_audit.rundir.seal import seal_document

    extra = tmp_path / "attack_out.json"
    extra.write_text(json.dumps(seal_document(dict(GOOD_ATTACK), run)))
    real = report_cmd._check_extras

    def check_then_swap(args):
        out = real(args)
        extra.write_text(json.dumps(dict(GOOD_ATTACK, accuracy=0.99)))  # unsealed now
        return out

    monkeypatch.setattr(report_cmd, "_check_extras", check_then_swap)
    assert main(["report", str(run), str(extra), "-o", str(tmp_path / "r")]) == 2
    assert "attack_out.json changed after it was verified" in capsys.readouterr().err


# --------------------------------------------------- 2: every file is sealed or unsealed by design


@pytest.mark.parametrize(
    "name", ["notes.md", "audit_old.json", "report/notes.md", "extra/attack_x.json", ".hidden"]
)
def test_a_file_added_by_hand_fails_verification(run: Path, name: str, capsys) -> None:
    f = run / name
    f.parent.mkdir(exist_ok=True)
    f.write_text("the attack found nothing: the claim holds\n")
    res = verify_run(run)
    want = f"{f} is not sealed (neither manifest.json nor analyses.json records it)"
    assert not res.ok and [p for p in res.problems if p.startswith(want)], res.problems
    assert main(["budget", str(run), "--verify"]) == 2
    captured = capsys.readouterr()
    assert captured.out.startswith("UNVERIFIED: ") and f"{f} is not sealed" in captured.err
    f.unlink()
    assert main(["budget", str(run), "--verify"]) == 0  # removed: verifies again


def test_a_file_added_by_hand_is_refused_unhashed(run: Path, monkeypatch) -> None:
    """Session 56: verify_run hashed every file before naming the unsealed ones, so a 20 GB
    sparse file added to a run took over a minute to refuse; it is now named and never read."""
    from ldp_audit.rundir import verify as verify_mod

    big = run / "dump.bin"
    with open(big, "wb") as fh:
        fh.truncate(1 << 34)  # 16 GiB, sparse: nothing on disk
    hashed: list[str] = []
    real = verify_mod.sha256_file
    monkeypatch.setattr(verify_mod, "sha256_file", lambda f: hashed.append(f.name) or real(f))
    try:
        res = verify_run(run)
    finally:
        big.unlink()
    assert not res.ok and res.problems[-1].startswith(f"{big} is not sealed"), res.problems
    assert "dump.bin" not in hashed and "config.json" in hashed
    assert verify_run(run).ok  # removed: verifies again


def test_files_unsealed_by_design_verify(run: Path, capsys) -> None:
    """The ledger's journal and an interrupted write's temporary file: no reader opens them."""
    (run / "ledger.sqlite-journal").write_bytes(b"")
    (run / ".audit.json.tmp-4242").write_text("{")  # a write killed before its rename
    res = verify_run(run)
    assert res.ok, res.problems
    assert any(".audit.json.tmp-4242: the temporary file of an interrupted write" in n
               for n in res.notes)  # fmt: skip
    assert main(["budget", str(run), "--verify"]) == 0
    assert ".audit.json.tmp-4242" in capsys.readouterr().out


def test_a_link_to_a_folder_fails_verification(run: Path, tmp_path: Path, capsys) -> None:
    """os.walk lists a linked folder but does not enter it: its files were never looked at."""
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "attack_x.json").write_text(json.dumps(GOOD_ATTACK))
    (run / "more").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    res = verify_run(run)
    assert f"{run / 'more'} is a link to a folder: its files are neither sealed nor checked" in (
        res.problems
    )
    assert main(["budget", str(run), "--verify"]) == 2


@pytest.mark.parametrize(
    "name", ["audit.json", "transcript.npz", "ledger.sqlite", "manifest.json", "analyses.json"]
)
def test_a_sealed_file_replaced_by_a_link_fails_verification(
    run: Path, tmp_path: Path, name: str
) -> None:
    """A sealed file replaced by a link to an identical copy outside the run verified (exit 0,
    session 49): the bytes matched, but they lived where the run's owner does not look and could
    change after the check. No writer makes a link, so one is refused like a linked folder.
    (Session 50: a linked analyses.json made verify_run raise "... was not in the run when it
    was verified (added since) ... verify the run again", hiding the link; now a problem.)"""
    copy = tmp_path / f"copy-{name}"
    copy.write_bytes((run / name).read_bytes())
    (run / name).unlink()
    (run / name).symlink_to(copy)
    res = verify_run(run)
    assert any(p.startswith(f"{run / name} is a link (to {copy})") for p in res.problems)
    assert main(["budget", str(run), "--verify"]) == 2
    (run / name).unlink()
    (run / name).write_bytes(copy.read_bytes())
    assert main(["budget", str(run), "--verify"]) == 0  # the file itself: verifies again


def test_a_folder_at_the_index_is_a_problem_not_a_raise(run: Path, capsys) -> None:
    """verify_run returns what does not verify; a folder at analyses.json raised out of it
    (session 50's probe) instead of being listed with the other problems."""
    (run / "analyses.json").unlink()
    (run / "analyses.json").mkdir()
    res = verify_run(run)
    assert not res.ok and f"{run / 'analyses.json'} cannot be read" in res.problems[0]
    assert "is a folder" in res.problems[0]
    assert main(["budget", str(run), "--verify"]) == 2
