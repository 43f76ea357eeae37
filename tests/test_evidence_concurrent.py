"""Everything a verdict reads is evidence, with writers at work meanwhile (split from
tests/test_evidence_analyses.py): an artefact swapped while its writer waits for the seal, two
writers of one artefact or of one report at once, a run replaced while it was analysed."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from ldp_audit.accountant.keys import load_key
from ldp_audit.cli import main
from ldp_audit.rundir import verify_run, write_artifact
from ldp_audit.rundir.seal import INDEX
from tests.test_evidence_analyses import VIOLATION, _make_run
from tests.test_report_fixtures import GOOD_ATTACK


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """A small finished run with a sealed violating audit.json."""
    r = _make_run(tmp_path / "run")
    write_artifact(r, "audit.json", [VIOLATION])
    return r


def test_an_artefact_swapped_while_its_writer_waits_for_the_seal_is_not_sealed(
    run: Path, monkeypatch
) -> None:
    """Session 56 probe: a person holding the flock of the run folder (opening it read-only is
    enough) made `audit --run-dir RUN` wait after it wrote audit.json (a violation), replaced
    the file (no violation, bound 0.5) and let go: the seal hashed the file as it then was, and
    the forgery verified (authenticated), `report` exit 0. The seal now refuses bytes that are
    not what this process wrote, and the write leaves no unsealed file behind."""
    import ldp_audit.rundir.seal as seal
    from ldp_audit.errors import RunDirectoryError

    real = seal._run_key

    def swapped_meanwhile(r: Path):
        (r / "attack_x.json").write_text(json.dumps({**GOOD_ATTACK, "accuracy": 0.5}))
        return real(r)

    monkeypatch.setattr(seal, "_run_key", swapped_meanwhile)
    with pytest.raises(RunDirectoryError, match="changed between its write and its seal"):
        write_artifact(run, "attack_x.json", GOOD_ATTACK)
    assert not (run / "attack_x.json").exists()
    res = verify_run(run)
    assert res.ok and set(res.analyses) == {"audit.json"}, res.problems


def _forked_write(write: Any, wait: Any, done: Any) -> None:
    """A forked writer: ``write()`` after ``wait``; "ok" or the exception's repr to ``done``."""
    wait.wait(10)
    try:
        write()
        done.put("ok")
    except Exception as exc:  # noqa: BLE001 - reported to the test
        done.put(repr(exc))


def _race(monkeypatch: pytest.MonkeyPatch, module: Any, first: Any, second: Any) -> list[str]:
    """``first()`` and ``second()`` in two forked processes, the second writing while the
    first seals (``module.seal_analyses`` made slow, 0.3 s, and announced); their sorted
    outcomes ("ok" or the exception's repr)."""
    import multiprocessing
    import time

    ctx = multiprocessing.get_context("fork")
    inside, go, done, real = ctx.Event(), ctx.Event(), ctx.Queue(), module.seal_analyses

    def slow_seal(r: Any, names: Any) -> Any:
        inside.set()
        time.sleep(0.3)
        return real(r, names)

    monkeypatch.setattr(module, "seal_analyses", slow_seal)
    go.set()
    procs = [ctx.Process(target=_forked_write, args=(first, go, done)),
             ctx.Process(target=_forked_write, args=(second, inside, done))]  # fmt: skip
    for p in procs:
        p.start()
    for p in procs:
        p.join(20)
    return sorted(done.get(timeout=1) for _ in procs)


def _write_audit(run: Path, bound: float) -> None:
    """``audit.json`` with ``bound`` over the sealed one."""
    write_artifact(run, "audit.json", [{**VIOLATION, "epsilon_lower_bound": bound}],
                   overwrite=True)  # fmt: skip


def test_two_writers_of_one_artefact_leave_a_run_that_verifies(
    run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found from outside (session 58): two `audit --run-dir RUN --overwrite` at once (4 of 4
    tries): one exit 0, the other refused ("changed between its write and its seal"), and its
    undo put the earlier audit.json back over the one just sealed: the run no longer verified
    (3 of 4). One writer of a run's analysis files at a time now: the second waits, then
    replaces the first's, both sealed."""
    import ldp_audit.rundir.writer as writer

    got = _race(
        monkeypatch, writer, partial(_write_audit, run, 7.0), partial(_write_audit, run, 8.0)
    )
    assert got == ["ok", "ok"]
    res = verify_run(run)
    assert res.ok, res.problems
    assert json.loads((run / "audit.json").read_text())[0]["epsilon_lower_bound"] == 8.0


def test_two_writers_of_a_runs_report_leave_it_whole(
    run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found from outside (session 58): two `Report.write(RUN / "report", overwrite=True)` at
    once (forked; two reports of the run, --top 1 and 10): one "ok", the other refused
    ("changed between its write and its seal") or FileNotFoundError, and once the refused one's
    undo removed the pages the "ok" one had sealed (its CLI had said "report written"). Now the
    second waits for the first: both ok, the run verifies, its report whole."""
    import ldp_audit.rundir.seal as seal
    from ldp_audit.report import Report, build_report

    out = run / "report"
    model = build_report(run, figures=False).model  # two reports that differ (fast)
    one, two = Report(model, {}), Report({**model, "second": True}, {})
    got = _race(monkeypatch, seal, partial(one.write, out, overwrite=True),
                partial(two.write, out, overwrite=True))  # fmt: skip
    assert got == ["ok", "ok"]
    res = verify_run(run)
    assert res.ok and not res.notes, (res.problems, res.notes)
    assert {f.name for f in out.iterdir()} == {"figures", "index.html", "report.json", "report.md"}
    assert json.loads((out / "report.json").read_text()).get("second") is True


def test_an_analysis_of_a_run_replaced_meanwhile_is_not_sealed_into_it(tmp_path: Path) -> None:
    """Found from outside (session 58): `audit --run-dir R --overwrite` (claim epsilon 5) while
    `train ... --epsilon 1 --out R --overwrite` replaced R: the audit of the old run was sealed
    into the new one, which verified (authenticated), and `report R` said "epsilon=5.0 ...
    leaks at least 10.5 > claimed 5" for a run of epsilon 1. The seal now refuses a manifest
    that is not the one this process verified; the artefact is not left behind."""
    import shutil

    from ldp_audit.errors import RunDirectoryError

    run, other = _make_run(tmp_path / "run"), _make_run(tmp_path / "other")
    assert verify_run(run).ok  # what `audit --run-dir` reads first
    shutil.rmtree(run)  # `train --overwrite` in another process
    shutil.copytree(other, run)
    with pytest.raises(RunDirectoryError, match="not the manifest this process verified"):
        write_artifact(run, "audit.json", [VIOLATION])
    assert not (run / "audit.json").exists() and not (run / INDEX).exists()
    # an attack's --out FILE: sealed for the run it read, so `report RUN FILE` refuses it
    from ldp_audit.rundir.seal import check_document_seal, seal_document

    doc = seal_document(dict(GOOD_ATTACK), run)
    assert verify_run(run).ok  # a later reader (`report RUN FILE`) of the new run
    assert check_document_seal(doc, run, load_key()) == (
        "unsealed",
        "its seal is for another run (or an earlier manifest.json)",
    )


def test_a_report_written_meanwhile_is_named_by_the_option(
    run: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """Found from outside (session 58): two `report RUN` at once; the second, refused when it
    came to write (the first had written RUN/report meanwhile), said "report out_dir ... pass
    overwrite=True" (the library's keyword) to a CLI user. Now it names --overwrite."""
    import ldp_audit.report as report

    real = report.build_report

    def meanwhile(*a: Any, **k: Any) -> Any:
        rep = real(*a, **{**k, "figures": False})
        (run / "report").mkdir(exist_ok=True)
        (run / "report" / "index.html").write_text("another report")
        return rep

    monkeypatch.setattr(report, "build_report", meanwhile)
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert "written by another command while this report was built" in err, err
    assert "pass --overwrite" in err and "overwrite=True" not in err
