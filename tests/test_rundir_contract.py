"""The run-directory contract (ldp_audit.rundir): written once, never appended or overwritten."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from ldp_audit.errors import InvalidParameterError, RunDirectoryError
from ldp_audit.rundir import (
    RunWriter,
    check_new_dir,
    check_new_file,
    check_report_dir,
    read_config,
    to_jsonable,
    verify_manifest,
    verify_run,
    write_artifact,
)


def _run(path, **kw):
    w = RunWriter(path, algorithm="test", config={"a": 1}, seed=0, **kw)
    w.write_npz("transcript.npz", {"report": np.zeros((2, 2))})
    w.write_json("metrics.json", {"fst": [float("inf"), 3.0]})
    w.finish()
    return w


def test_a_run_is_written_once_and_its_manifest_verifies(tmp_path) -> None:
    run = tmp_path / "run"
    _run(run)
    assert read_config(run)["status"] == "complete"
    assert json.loads((run / "metrics.json").read_text())["fst"] == ["inf", 3.0]
    v = verify_manifest(run)
    assert v["ok"] and v["status"] == "complete" and not v["unlisted"]
    # a second run into the same folder is refused, and nothing changes
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    with pytest.raises(RunDirectoryError, match="already exists and is not empty") as exc:
        _run(run)
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before
    # in the Python API's words (session 54: it named the CLI's --overwrite and --resume, which
    # open_run and RunWriter do not take)
    assert "pass overwrite=True" in str(exc.value) and "--" not in str(exc.value)
    # tampering is seen
    (run / "metrics.json").write_text("{}")
    assert verify_manifest(run)["changed"] == ["metrics.json"]


def test_overwrite_replaces_a_run_whole_and_refuses_foreign_folders(tmp_path) -> None:
    run = tmp_path / "run"
    _run(run)
    (run / "attack_old.json").write_text("{}")
    _run(run, mode="overwrite")
    assert not (run / "attack_old.json").exists()  # never merged with the old run
    other = tmp_path / "mine"
    other.mkdir()
    (other / "thesis.tex").write_text("x")
    with pytest.raises(RunDirectoryError, match="refusing to delete"):
        RunWriter(other, algorithm="test", config={}, seed=0, mode="overwrite")
    assert (other / "thesis.tex").exists()
    # session 56 probe: any config.json (a project's) or index.html (a web site's) made a folder
    # "a run or report" that --overwrite deleted whole, sources and photos with it
    (other / "config.json").write_text('{"name": "my-app"}')
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text("<html>my site</html>")
    (site / "photo.jpg").write_bytes(b"x")
    for folder in (other, site):
        with pytest.raises(RunDirectoryError, match="not a run or report folder"):
            RunWriter(folder, algorithm="test", config={}, seed=0, mode="overwrite")
        with pytest.raises(RunDirectoryError, match="not a run or report folder"):
            check_new_dir(folder, overwrite=True)
    assert (other / "thesis.tex").exists() and (site / "photo.jpg").exists()
    # an earlier report is still replaced, and so is what a report killed inside its own
    # --overwrite leaves (its index.html already deleted: before, refused, with no way out)
    (site / "photo.jpg").unlink()
    (site / "figures").mkdir()
    (site / "figures" / "audit.png").write_bytes(b"x")
    (site / "report.json").write_text("{}")
    assert check_new_dir(site, overwrite=True) == site
    (site / "index.html").unlink()
    assert check_new_dir(site, overwrite=True) == site


def test_finish_seals_what_the_writer_wrote_not_what_was_put_into_the_running_run(
    tmp_path,
) -> None:
    """Session 56 probe: a forged audit.json (no violation) put into a run while `train` ran was
    hashed into its manifest and read as the run's sealed audit (verified, authenticated,
    `report` exit 0); transcript.npz replaced after its write was sealed as replaced."""
    run = tmp_path / "run"
    w = RunWriter(run, algorithm="test", config={"a": 1}, seed=0)
    w.write_npz("transcript.npz", {"report": np.zeros((2, 2))})
    w.write_json("metrics.json", {})
    (run / "audit.json").write_text("[]")  # put in by hand while the run runs
    np.savez_compressed(run / "transcript.npz", report=np.ones((2, 2)))  # swapped after its write
    w.finish()
    assert "audit.json" not in json.loads((run / "manifest.json").read_text())["files"]
    problems = verify_run(run).problems
    assert any("transcript.npz does not match the SHA-256 in manifest.json" in p for p in problems)
    assert any("audit.json is not sealed" in p for p in problems), problems


def test_overwrite_through_a_link_is_refused_before_work(tmp_path) -> None:
    """Found from outside (session 57): `train pgc-a3c ... --out LINK --overwrite`, LINK a
    symbolic link to an earlier run, passed the checks, then exit 3 "internal error: OSError:
    Cannot call rmtree on a symbolic link" with a traceback (`report -o LINK --overwrite` too).
    Refused by the output-path check, naming the link; the run behind it is left whole."""
    run, link = tmp_path / "run", tmp_path / "link"
    _run(run)
    link.symlink_to(run)
    before = {f.name: f.read_bytes() for f in run.iterdir()}
    with pytest.raises(RunDirectoryError, match="'.*link' is a symbolic link .*folder itself"):
        RunWriter(link, algorithm="test", config={"a": 1}, seed=0, mode="overwrite")
    with pytest.raises(RunDirectoryError, match="symbolic link"):
        check_new_dir(link, overwrite=True)
    assert {f.name: f.read_bytes() for f in run.iterdir()} == before


def test_resume_checks_config_and_keeps_the_ledger(tmp_path) -> None:
    run = tmp_path / "run"
    w = RunWriter(run, algorithm="test", config={"a": 1}, seed=3)
    led = w.open_ledger()
    from ldp_audit.accountant import Accountant, PureDpEvent

    Accountant(ledger=led).charge("x", PureDpEvent(1.0))
    w.write_json("metrics.json", {})
    assert (run / "ledger.sqlite-journal").exists()  # TRUNCATE: empty while the ledger is open
    w.finish(status="interrupted")
    assert not (run / "ledger.sqlite-journal").exists()  # finish closed it (since 2026-12-06)
    with pytest.raises(RunDirectoryError, match=r"different config \(a: 1 \(run\) vs 2 \(now\)\)"):
        RunWriter(run, algorithm="test", config={"a": 2}, seed=3, mode="resume")
    with pytest.raises(RunDirectoryError, match="different seed"):
        RunWriter(run, algorithm="test", config={"a": 1}, seed=4, mode="resume")
    w2 = RunWriter(run, algorithm="test", config={"a": 1}, seed=3, mode="resume")
    assert not (run / "metrics.json").exists()  # the interrupted attempt's outputs are gone
    assert Accountant(ledger=w2.open_ledger()).spent("x") == pytest.approx(1.0)
    w2.finish()
    with pytest.raises(RunDirectoryError, match="complete; nothing to resume"):
        RunWriter(run, algorithm="test", config={"a": 1}, seed=3, mode="resume")


def test_a_finished_run_made_to_look_unfinished_is_never_resumed(tmp_path) -> None:
    """Found from outside (session 57): a finished run with a sealed violating ``audit.json``
    (``report`` exit 1); "complete" edited to "interrupted" in manifest.json (or the manifest
    deleted), then a resume of it: the audit was deleted, the run re-sealed and verified
    (authenticated), and ``report`` exited 0. A resume now needs a manifest that verifies and
    records an unfinished run, and refuses a run holding sealed analyses without one, or (session
    58) one whose ledger's analysis mark recalls analyses sealed when it was complete."""
    from ldp_audit.accountant import Accountant, PureDpEvent

    def resume(run):
        return RunWriter(run, algorithm="test", config={"a": 1}, seed=3, mode="resume")

    for tamper in ("edit", "delete", "delete all"):
        run = tmp_path / tamper
        w = RunWriter(run, algorithm="test", config={"a": 1}, seed=3)
        Accountant(ledger=w.open_ledger()).charge("x", PureDpEvent(1.0))
        w.finish()
        write_artifact(run, "audit.json", [{"violation": True}])
        man = run / "manifest.json"
        if tamper == "edit":
            man.write_text(man.read_text().replace('"complete"', '"interrupted"'))
            match = "does not verify .*MAC"
        elif tamper == "delete":
            man.unlink()
            match = "holds analyses.json but no manifest.json"
        else:  # session 58: the index and the audit deleted too; the resume re-sealed the run
            for name in ("manifest.json", "analyses.json", "audit.json"):
                (run / name).unlink()
            match = "finished and 1 analyses of it were sealed .* manifest.json and analyses"
        before = {p.name: p.read_bytes() for p in run.iterdir()}
        with pytest.raises(RunDirectoryError, match=match):
            resume(run)
        assert {p.name: p.read_bytes() for p in run.iterdir()} == before  # nothing deleted


def test_a_run_has_one_writer_at_a_time(tmp_path) -> None:
    """Found from outside (session 55): two ``train pgc-a3c ... --resume`` of one interrupted
    run at once (333 of 3,000 charges) both replayed and charged: one exited 2, the other 0,
    and the run held 5,667 charges for 3,000 releases and failed to verify (config.json
    rewritten by the other). A writer now holds the run's ledger (flock) until finish(); a
    second resume or overwrite is refused before it changes anything."""
    import gc

    from ldp_audit.accountant import Accountant, PureDpEvent

    run = tmp_path / "run"
    w = RunWriter(run, algorithm="test", config={"a": 1}, seed=3)
    Accountant(ledger=w.open_ledger()).charge("x", PureDpEvent(1.0))
    with pytest.raises(RunDirectoryError, match="being written by another process"):
        RunWriter(run, algorithm="test", config={"a": 1}, seed=3, mode="overwrite")
    w.finish(status="interrupted")
    a = RunWriter(run, algorithm="test", config={"a": 1}, seed=3, mode="resume")
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    for mode in ("resume", "overwrite"):
        with pytest.raises(RunDirectoryError, match="being written by another process"):
            RunWriter(run, algorithm="test", config={"a": 1}, seed=3, mode=mode)
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before  # nothing changed
    del a  # a writer dropped unfinished lets go too
    gc.collect()
    b = RunWriter(run, algorithm="test", config={"a": 1}, seed=3, mode="resume")
    Accountant(ledger=b.open_ledger()).charge("x", PureDpEvent(1.0))  # replayed, not charged
    b.finish()
    assert len(b._ledger) == 1 and verify_run(run).ok


def test_a_bad_ledger_key_is_refused_before_the_run_folder_is_made(tmp_path, monkeypatch) -> None:
    """Session 53: ``LDP_AUDIT_KEY=zz ldp-audit train ... --out R`` (or a key file that is a
    folder, world-readable, ...; or ``LDP_AUDIT_HEADS`` a folder that cannot be written) exited 2
    leaving R with a config.json "running" and no manifest."""
    from ldp_audit.errors import LedgerError

    (tmp_path / "afile").write_text("x")
    run = tmp_path / "run"
    _run(run)
    w = RunWriter(run, algorithm="test", config={"a": 1}, seed=0, mode="overwrite")
    w.finish(status="interrupted")
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    for env, value in (
        ("LDP_AUDIT_KEY", "zz"),
        ("LDP_AUDIT_KEY_FILE", str(tmp_path)),
        ("LDP_AUDIT_HEADS", str(tmp_path / "afile")),
    ):
        with monkeypatch.context() as mp:
            mp.setenv(env, value)
            with pytest.raises(LedgerError):  # KeyFileError is one
                RunWriter(tmp_path / "new", algorithm="test", config={}, seed=0)
            assert not (tmp_path / "new").exists()
            for mode in ("resume", "overwrite"):  # the interrupted run is left as it was
                with pytest.raises(LedgerError):
                    RunWriter(run, algorithm="test", config={"a": 1}, seed=0, mode=mode)
                assert {p.name: p.read_bytes() for p in run.iterdir()} == before


def test_artifacts_are_named_and_never_silently_replaced(tmp_path) -> None:
    run = tmp_path / "run"
    _run(run)
    write_artifact(run, "attack_dynamics.json", {"accuracy": 0.5})
    with pytest.raises(RunDirectoryError, match="already exists"):
        write_artifact(run, "attack_dynamics.json", {"accuracy": 0.9})
    assert json.loads((run / "attack_dynamics.json").read_text()) == {"accuracy": 0.5}
    with pytest.raises(InvalidParameterError, match="artefact name"):
        write_artifact(run, "config.json", {})
    with pytest.raises(RunDirectoryError, match="not a run directory"):
        write_artifact(tmp_path, "audit.json", {})
    assert verify_manifest(run)["unlisted"] == ["attack_dynamics.json"]


def test_output_paths_are_checked_before_work(tmp_path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(RunDirectoryError, match="not a directory"):
        check_new_dir(f)
    with pytest.raises(RunDirectoryError, match="not a directory"):
        check_new_dir(f / "sub")
    with pytest.raises(InvalidParameterError, match="non-empty path"):
        check_new_dir("")
    with pytest.raises(InvalidParameterError, match="must be a path"):
        check_new_dir(123)
    with pytest.raises(InvalidParameterError, match="must not contain NUL"):
        check_new_dir(str(tmp_path / "a\x00b"))
    with pytest.raises(RunDirectoryError, match="does not exist"):
        check_new_file(tmp_path / "missing" / "x.png", name="--plot")
    with pytest.raises(RunDirectoryError, match="already exists"):
        check_new_file(f)
    if os.geteuid() != 0:  # root can write anywhere
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o500)
        with pytest.raises(RunDirectoryError, match="cannot write"):
            check_new_dir(ro / "run")
    with pytest.raises(RunDirectoryError, match="not a directory"):
        check_new_dir("/proc/version/x")


def test_report_dir_keeps_hand_written_files(tmp_path) -> None:
    (tmp_path / "notes.md").write_text("mine")
    with pytest.raises(RunDirectoryError, match="not empty"):
        check_report_dir(tmp_path)
    assert check_report_dir(tmp_path, overwrite=True) == tmp_path
    (tmp_path / "results.json").write_text("{}")
    with pytest.raises(RunDirectoryError, match="already holds a report"):
        check_report_dir(tmp_path)
    assert check_report_dir(tmp_path, overwrite=True) == tmp_path


def test_json_convention_inf_is_a_string_nan_is_null() -> None:
    from pathlib import Path

    out = to_jsonable({"a": np.float64("inf"), "b": [float("-inf"), np.nan], "p": Path("x")})
    assert out == {"a": "inf", "b": ["-inf", None], "p": "x"}
    json.dumps(out, allow_nan=False)


def test_a_full_disk_is_named_not_a_traceback(tmp_path) -> None:
    """A write the file system refuses (here a file-size limit, EFBIG; ENOSPC on a full tmpfs
    went the same way) is a RunDirectoryError naming the file: `train` exited 3 with a
    traceback before. The temp file is removed and the charges already made stay."""
    resource = pytest.importorskip("resource")
    w = RunWriter(tmp_path / "r", algorithm="toy", config={}, seed=0)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, hard))
    try:
        big = np.random.default_rng(0).random(1 << 18)  # 2 MiB, incompressible
        with pytest.raises(RunDirectoryError, match=r"cannot write .*transcript\.npz: File too"):
            w.write_npz("transcript.npz", {"x": big})
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == ["config.json"]


def test_a_file_created_meanwhile_is_never_replaced(tmp_path, monkeypatch) -> None:
    """Two writers racing for one new run folder both passed the "exists?" check, and the
    second renamed its config.json over the first's: the loser then charged the winner's
    ledger (30 of 30 forked pairs ended with a run holding both writers' charges). The window
    is replayed here: the check answers "missing" although the other writer's file is there."""
    from pathlib import Path

    from ldp_audit.rundir.files import write_json_file

    target = tmp_path / "config.json"
    target.write_text('{"w": 0}')  # the winner's
    real = Path.exists
    monkeypatch.setattr(Path, "exists", lambda p: False if p == target else real(p))
    with pytest.raises(RunDirectoryError, match="created by another writer meanwhile"):
        write_json_file(target, {"w": 1})
    assert target.read_text() == '{"w": 0}' and os.listdir(tmp_path) == ["config.json"]


def test_a_dangling_link_in_an_output_path_is_refused_by_name(tmp_path) -> None:
    """Session 52 probe: `train pgc-a3c|dprl --out LINK` to a link whose target does not exist
    ended in exit 3 and a FileExistsError traceback from the writer's mkdir. Now exit 2 naming
    the option and the link, for the path itself and for a link among its missing parents
    (check_new_dir, which every --out of a folder goes through; check_new_file would have
    written through the link): RunDirectoryError, exit 2 on the command line; nothing made."""
    from ldp_audit.rundir import check_new_file

    link = tmp_path / "link"
    os.symlink(tmp_path / "nowhere", link)
    for out in (link, link / "sub"):
        with pytest.raises(RunDirectoryError, match="symbolic link.*does not exist"):
            check_new_dir(out)
    with pytest.raises(RunDirectoryError, match="symbolic link.*does not exist"):
        check_new_file(link)
    assert sorted(os.listdir(tmp_path)) == ["link"] and not (tmp_path / "nowhere").exists()


def test_a_symlink_loop_as_a_report_folder_is_refused_by_name(tmp_path) -> None:
    """Session 57 CLI fuzz: `report RUN -o LOOP` and `demo --report-dir LOOP` (a link to
    itself) ended in exit 3, "internal error: RuntimeError: Symlink loop", from the input
    check's Path.resolve(). Now check_new_dir names it as a link that leads nowhere."""
    from ldp_audit.report import check_report_out

    loop = tmp_path / "loop"
    os.symlink(loop, loop)
    for out in (loop, loop / "sub"):
        with pytest.raises(RunDirectoryError, match="symbolic link.*does not exist"):
            check_report_out(out, inputs=[tmp_path / "run"], name="--out")
    assert os.listdir(tmp_path) == ["loop"]


def test_a_run_records_the_machine_and_the_cli_command_it_was_made_by(tmp_path) -> None:
    """Session 53's reviewer probe: a report said when and with what versions a run was made,
    not by what command nor on what machine. A new run now records the machine (no host name)
    and, made inside the CLI's ``command_line`` block, the command; a resume keeps the run's."""
    from ldp_audit.rundir.writer import command_line, machine

    _run(tmp_path / "plain")
    doc = read_config(tmp_path / "plain")
    assert doc["machine"] == machine() and "CPUs" in doc["machine"]
    assert "command" not in doc  # a library call is not a command line
    run = tmp_path / "cli"
    with command_line(["ldp-audit", "train", "x", "--out", "a b"]):
        w = RunWriter(run, algorithm="test", config={"a": 1}, seed=3)
        w.finish(status="interrupted")
    assert read_config(run)["command"] == "ldp-audit train x --out 'a b'"  # shlex-quoted
    with command_line(["ldp-audit", "train", "x", "--resume"]):
        RunWriter(run, algorithm="test", config={"a": 1}, seed=3, mode="resume").finish()
    assert read_config(run)["command"] == "ldp-audit train x --out 'a b'"
    assert verify_manifest(run)["ok"]


def test_a_file_system_without_flock_still_writes_runs(tmp_path, monkeypatch) -> None:
    """The one-writer lock is best effort where ``flock`` fails (some network or FUSE file
    systems raise ENOLCK): the run is written as before, never a raw OSError."""
    import errno
    import fcntl

    from ldp_audit.accountant import Accountant, PureDpEvent

    real = fcntl.flock

    def no_flock(fd, op):  # the run's lock (non-blocking) only: the marks' folder lock works
        if op & fcntl.LOCK_NB:
            raise OSError(errno.ENOLCK, "No locks available")
        return real(fd, op)

    monkeypatch.setattr(fcntl, "flock", no_flock)
    run = tmp_path / "run"
    w = RunWriter(run, algorithm="test", config={"a": 1}, seed=3)
    Accountant(ledger=w.open_ledger()).charge("x", PureDpEvent(1.0))
    w.finish(status="interrupted")
    r = RunWriter(run, algorithm="test", config={"a": 1}, seed=3, mode="resume")
    r.open_ledger()
    r.finish()
    _run(tmp_path / "run", mode="overwrite")


def test_a_signal_right_after_the_manifest_leaves_a_run_that_verifies(
    tmp_path, monkeypatch
) -> None:
    """Session 58 probe (reading finish() for asynchronous-exception windows): a Ctrl-C /
    SIGTERM whose KeyboardInterrupt came after manifest.json was renamed into place (during the
    folder's fsync) left the writer unfinished; the interrupted close (the CLI's
    ``finish_unfinished``, or a trainer's handler) then rewrote config.json as "interrupted"
    under the complete manifest, and the run failed to verify (config.json changed) for
    ``budget --verify``, ``report`` and ``--resume``. The signal is injected at that instant."""
    from ldp_audit.accountant import Accountant, PureDpEvent
    from ldp_audit.rundir import files, writer

    run = tmp_path / "run"
    w = RunWriter(run, algorithm="test", config={"a": 1}, seed=0)
    Accountant(ledger=w.open_ledger()).charge("x", PureDpEvent(1.0))
    w.write_json("metrics.json", {})
    real = files._fsync_dir

    def fsync_then_signal(p):
        real(p)
        if (p / "manifest.json").exists():
            raise KeyboardInterrupt

    monkeypatch.setattr(files, "_fsync_dir", fsync_then_signal)
    with pytest.raises(KeyboardInterrupt):
        w.finish()
    monkeypatch.setattr(files, "_fsync_dir", real)
    writer.finish_unfinished()  # what the CLI does on the signal
    with pytest.raises(RunDirectoryError, match="already finished"):
        w.finish(status="interrupted")  # what a trainer's handler does: nothing rewritten
    res = verify_run(run)
    assert res.ok and res.status == "complete", res.problems
    assert read_config(run)["status"] == "complete"
    # the ledger's flock was let go: the run can be written again
    RunWriter(run, algorithm="test", config={"a": 1}, seed=0, mode="overwrite").finish()


def _interrupt_after_unlinks(monkeypatch, cut: int) -> list[str]:
    """``os.unlink`` raises a signal's ``KeyboardInterrupt`` right after its ``cut``-th
    deletion; returns the names deleted so far (``monkeypatch.undo()`` restores it)."""
    real, done = os.unlink, []

    def unlink(path, *a, **k):
        real(path, *a, **k)
        done.append(os.path.basename(path))
        if len(done) == cut:
            raise KeyboardInterrupt

    monkeypatch.setattr(os, "unlink", unlink)
    return done


def test_an_overwrite_interrupted_while_it_deletes_can_be_overwritten_again(
    tmp_path, monkeypatch
) -> None:
    """Session 58 probe: ``--overwrite`` deleted the earlier run with one ``rmtree``; a Ctrl-C
    (or a kill) after it had deleted config.json but not every other file left a folder that
    is no run, and every later ``--overwrite`` refused it ("not a run or report folder;
    refusing to delete it"): the user had to delete it by hand. The signal is injected after
    each deletion in turn: every cut leaves a folder that reads as an unfinished run (its
    manifest goes first) and that ``--overwrite`` replaces."""
    from ldp_audit.accountant import Accountant, PureDpEvent

    def run_at(path, mode="new"):
        w = RunWriter(path, algorithm="test", config={"a": 1}, seed=0, mode=mode)
        Accountant(ledger=w.open_ledger()).charge("x", PureDpEvent(1.0))
        w.write_npz("transcript.npz", {"report": np.zeros((2, 2))})
        w.write_json("metrics.json", {})
        w.finish()

    for cut in range(1, 6):  # config, ledger, transcript, metrics, manifest
        run = tmp_path / f"run{cut}"
        run_at(run)
        done = _interrupt_after_unlinks(monkeypatch, cut)
        with pytest.raises(KeyboardInterrupt):
            RunWriter(run, algorithm="test", config={"a": 1}, seed=0, mode="overwrite")
        monkeypatch.undo()
        assert not (run / "manifest.json").exists(), (cut, done)  # reads as unfinished
        check_new_dir(run, overwrite=True)  # still an earlier run, not a foreign folder
        run_at(run, mode="overwrite")
        assert verify_run(run).ok, (cut, verify_run(run).problems)


def test_a_resume_interrupted_while_it_deletes_can_be_resumed_again(tmp_path, monkeypatch) -> None:
    """Session 58 probe: ``--resume`` deleted the interrupted attempt's outputs before its
    manifest, so a Ctrl-C (or a kill) between the two left a sealed manifest over missing files:
    ``budget --verify`` said transcript.npz was missing and every later ``--resume`` refused the
    run as one that does not verify. The manifest now goes first; the signal is injected after
    each deletion in turn, and every cut leaves a run that a second resume completes."""
    from ldp_audit.accountant import Accountant, PureDpEvent

    def attempt(path, mode, status):
        w = RunWriter(path, algorithm="test", config={"a": 1}, seed=0, mode=mode)
        Accountant(ledger=w.open_ledger()).charge("x", PureDpEvent(1.0))
        w.write_npz("transcript.npz", {"report": np.zeros((2, 2))})
        w.write_json("metrics.json", {})
        w.finish(status=status)

    for cut in range(1, 4):  # manifest, transcript, metrics
        run = tmp_path / f"run{cut}"
        attempt(run, "new", "interrupted")
        done = _interrupt_after_unlinks(monkeypatch, cut)
        with pytest.raises(KeyboardInterrupt):
            RunWriter(run, algorithm="test", config={"a": 1}, seed=0, mode="resume")
        monkeypatch.undo()
        assert not (run / "manifest.json").exists(), (cut, done)  # reads as unfinished
        attempt(run, "resume", "complete")
        res = verify_run(run)
        assert res.ok and res.status == "complete", (cut, res.problems)


def test_a_signal_right_after_a_run_is_locked_lets_the_lock_go(tmp_path, monkeypatch) -> None:
    """Session 58 probe: a KeyboardInterrupt raised right after ``hold_file`` took the run's
    ``flock`` (the check after the call) lost the descriptor with the lock held, so every later
    writer of the run in that process (a notebook's next ``--resume`` / ``overwrite``) was
    refused as "being written by another process" until the process ended."""
    import fcntl

    from ldp_audit.rundir.files import hold_file

    f = tmp_path / "ledger.sqlite"
    f.write_bytes(b"")
    real = fcntl.flock

    def flock_then_signal(fd, op):
        real(fd, op)
        raise KeyboardInterrupt

    monkeypatch.setattr(fcntl, "flock", flock_then_signal)
    with pytest.raises(KeyboardInterrupt):
        hold_file(f, "run 'x'")
    monkeypatch.setattr(fcntl, "flock", real)
    fd = hold_file(f, "run 'x'")  # not refused: the lock was let go
    assert fd is not None
    os.close(fd)


def test_finish_is_waited_for_by_a_signals_forced_exit(tmp_path, monkeypatch) -> None:
    """Session 58 probe: `train dprl` SIGINTed under load (load 10 on 2 cores) closed its run
    for longer than the watchdog's 1 s grace and was force-exited with no manifest ("running"):
    only pgc-a3c's close was inside ``interrupts.closing()``. ``finish`` now is, for every
    trainer: the forced exit waits for the manifest (bounded)."""
    from ldp_audit.interrupts import closing_open
    from ldp_audit.rundir import writer

    seen = []
    real = writer.write_json_file

    def write(target, obj, **k):
        seen.append((target.name, closing_open()))
        return real(target, obj, **k)

    monkeypatch.setattr(writer, "write_json_file", write)
    w = RunWriter(tmp_path / "run", algorithm="test", config={"a": 1}, seed=0)
    assert seen == [("config.json", False)]
    w.finish(status="interrupted")
    assert seen[1:] == [("config.json", True), ("manifest.json", True)]
    assert not closing_open()
