"""Everything a verdict reads is evidence (issue 38, items 1-4).

The attacker can write the run directory and knows every format, but not the ledger key
(``LDP_AUDIT_KEY_FILE`` from tests/conftest.py). Each test below failed on the code before
issue 38: an edited ``audit.json`` flipped the report's verdict to CONSISTENT (exit 0), a
made-up key id made the owner's reader say "unauthenticated" in a note and exit 0,
``--allow-unverified`` kept exit 0, and no root covered ``transcript.npz`` or the analyses.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from ldp_audit.accountant import Accountant, Budget, LaplaceEvent, Ledger
from ldp_audit.accountant.keys import load_key
from ldp_audit.cli import EXIT_UNAUTHENTICATED, main
from ldp_audit.rundir import (
    RunWriter,
    require_verified,
    verify_run,
    write_artifact,
)
from ldp_audit.rundir.files import manifest_bytes
from ldp_audit.rundir.seal import INDEX
from tests.test_report_fixtures import GOOD_ATTACK, audit_entry

EPS = 5.0

#: an audit that finds the claim (5 per release) violated: lower bound 7.61
VIOLATION = audit_entry(claimed_epsilon=EPS, epsilon_lower_bound=7.61, samples=1000)


def _make_run(path: Path) -> Path:
    """A small finished run (a toy algorithm: the report needs no system sections)."""
    w = RunWriter(path, algorithm="toy", config={"delta": 0.0}, seed=0,
                  mechanism={"name": "laplace", "epsilon": EPS})  # fmt: skip
    acc = Accountant(w.open_ledger(), budget=Budget(epsilon=10.0))
    acc.charge_many([(f"a{i}", LaplaceEvent(EPS)) for i in range(4)])
    acc.ledger.close()
    w.write_npz("transcript.npz", {"agent": np.arange(4, dtype=np.int64)})
    w.write_json("metrics.json", {"note": "toy"})
    w.finish()
    return path


@pytest.fixture
def run(tmp_path: Path) -> Path:
    r = _make_run(tmp_path / "run")
    write_artifact(r, "audit.json", [VIOLATION])
    return r


def _edit_audit(run: Path) -> None:
    """Issue 38, item 1: 'violation' set to false and the bound to 3.1."""
    doc = json.loads((run / "audit.json").read_text())
    doc[0].update(violation=False, epsilon_lower_bound=3.1)
    (run / "audit.json").write_text(json.dumps(doc))


# ---------------------------------------------------------------- item 1: sealed analysis files


def test_an_artefact_is_sealed_when_written(run: Path) -> None:
    index = json.loads((run / INDEX).read_text())
    (entry,) = index["entries"]
    assert entry["name"] == "audit.json" and len(entry["hmac"]) == 64
    res = verify_run(run)
    assert res.ok and res.authenticated, res.problems
    assert set(res.analyses) == {"audit.json"}


def test_an_edited_audit_is_refused_by_every_reader(run: Path, tmp_path: Path, capsys) -> None:
    assert main(["report", str(run), "-o", str(tmp_path / "r0"), "--json"]) == 1  # violation
    capsys.readouterr()
    _edit_audit(run)
    res = verify_run(run)
    assert not res.ok and any("audit.json" in p and "SHA-256" in p for p in res.problems)
    for argv in (
        ["report", str(run), "-o", str(tmp_path / "r1")],
        ["budget", str(run), "--verify"],
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "audit.json" in err and "Traceback" not in err, err
    assert not (tmp_path / "r1").exists()


def test_an_unsealed_or_deleted_artefact_is_refused(run: Path, tmp_path: Path, capsys) -> None:
    (run / "attack_dynamics.json").write_text(json.dumps({"accuracy": 0.1}))  # by hand
    res = verify_run(run)
    assert not res.ok and any("attack_dynamics.json is not sealed" in p for p in res.problems)
    (run / "attack_dynamics.json").unlink()
    (run / "audit.json").unlink()  # the audit that found the violation, deleted
    res = verify_run(run)
    assert not res.ok and any("audit.json is sealed" in p and "missing" in p for p in res.problems)
    (run / "audit.json").mkdir()  # a folder in a sealed file's place (verified before: exit 0)
    (run / "attack_x.json").mkdir()  # ... and under an analysis file's name
    res = verify_run(run)
    assert any("audit.json does not match the SHA-256" in p for p in res.problems)
    assert any("attack_x.json is not sealed" in p for p in res.problems)


@pytest.mark.parametrize("name", ["attack_Dyn.json", "attack_a b.json", "attack_\u00e9.json"])
def test_every_attack_file_the_report_reads_is_checked(
    run: Path, tmp_path: Path, name: str, capsys
) -> None:
    """The report reads every attack_*.json; the toolkit writes only attack_[a-z0-9_-]+.json
    and the check looked at those only: a hand-written 'attack_Dyn.json' (an attack
    no one ran) verified and was read into the report (session 47's outside probe)."""
    (run / name).write_text(json.dumps(GOOD_ATTACK))  # an attack no one ran
    res = verify_run(run)
    assert not res.ok and any(f"{name} is not sealed" in p for p in res.problems), res.problems
    assert main(["report", str(run), "-o", str(tmp_path / "r")]) == 2
    assert "is not sealed" in capsys.readouterr().err


def test_a_rewritten_index_without_the_key_is_refused(run: Path) -> None:
    """The person edits audit.json and recomputes the entry's SHA-256 and hash (not the MAC)."""
    import hashlib

    from ldp_audit.rundir.seal import _body

    _edit_audit(run)
    index = json.loads((run / INDEX).read_text())
    e = index["entries"][0]
    e["sha256"] = hashlib.sha256((run / "audit.json").read_bytes()).hexdigest()
    e["hash"] = hashlib.sha256(_body(e)).hexdigest()
    (run / INDEX).write_text(json.dumps(index))
    res = verify_run(run)
    assert not res.ok and any("MAC" in p for p in res.problems), res.problems


def test_the_reports_own_files_are_sealed(run: Path, capsys) -> None:
    assert main(["report", str(run)]) == 1
    names = [e["name"] for e in json.loads((run / INDEX).read_text())["entries"]]
    assert {"report/report.json", "report/report.md", "report/index.html"} <= set(names)
    assert verify_run(run).ok
    doc = json.loads((run / "report" / "report.json").read_text())
    doc["verdict"]["status"] = "consistent"
    (run / "report" / "report.json").write_text(json.dumps(doc))
    res = verify_run(run)
    assert not res.ok and any("report.json" in p for p in res.problems)


def test_the_reports_figures_are_sealed(run: Path, capsys) -> None:
    """report.md shows figures/*.png: an edited figure changed what the sealed page shows and
    verified (exit 0) before session 47's outside probe; a removed one is noted, an added one
    (not sealed) refused."""
    assert main(["report", str(run)]) == 1
    figs = sorted((run / "report" / "figures").glob("*.png"))
    names = {e["name"] for e in json.loads((run / INDEX).read_text())["entries"]}
    assert figs and {f"report/figures/{f.name}" for f in figs} <= names
    png = bytearray(figs[0].read_bytes())
    png[len(png) // 2] ^= 0x55
    figs[0].write_bytes(bytes(png))
    res = verify_run(run)
    assert not res.ok and any(f"figures/{figs[0].name} does not match" in p for p in res.problems)
    figs[0].unlink()
    (run / "report" / "figures" / "x.png").write_bytes(b"\x89PNG")
    res = verify_run(run)
    assert any(f"{figs[0].name} was sealed" in n for n in res.notes), res.notes
    assert not res.ok and any("x.png is not sealed" in p for p in res.problems)


def test_an_artefact_of_an_unfinished_run_goes_into_its_manifest(tmp_path: Path) -> None:
    w = RunWriter(tmp_path / "r", algorithm="toy", config={}, seed=0)
    Accountant(w.open_ledger()).charge("a", LaplaceEvent(1.0))
    write_artifact(tmp_path / "r", "attack_x.json", {"a": 1})  # before finish: not sealed
    assert not (tmp_path / "r" / INDEX).exists()
    w.finish()
    res = verify_run(tmp_path / "r")
    assert res.ok and res.authenticated, res.problems
    (tmp_path / "r" / "attack_x.json").write_text("{}")
    assert not verify_run(tmp_path / "r").ok  # the manifest's SHA-256 covers it


# ---------------------------------------------------------------- item 2: no key-id bypass


def _rekey(run: Path) -> None:
    """Issue 38, item 2: rewrite the ledger (every epsilon / 10), re-seal the manifest with a
    made-up key id and random MAC bytes in both key_id fields."""
    import sqlite3

    from tests.test_ledger_tamper import _rewrite

    fake = "0123456789abcdef"
    led = run / "ledger.sqlite"
    _rewrite(led, lambda rows: [(a, e.replace("5.0", "0.5"), *r) for a, e, *r in rows])
    from ldp_audit.accountant.ledger_format import metadata_digest

    con = sqlite3.connect(led)
    try:
        con.execute("UPDATE ldp_audit_meta SET value = ? WHERE key = 'key_id'", (fake,))
        meta = dict(con.execute("SELECT key, value FROM ldp_audit_meta").fetchall())
        con.execute(
            "UPDATE ldp_audit_head SET meta = ?, mac = ? WHERE k = 1",
            (metadata_digest(meta), os.urandom(32)),
        )
        con.commit()
    finally:
        con.close()
    man = json.loads((run / "manifest.json").read_text())
    with Ledger(led, readonly=True, verify=False) as lg:
        man["ledger"] = {**man["ledger"], **lg.anchor()}
    man["mac"] = {"key_id": fake, "hmac": os.urandom(32).hex()}
    body = {k: v for k, v in man.items() if k != "mac"}
    assert manifest_bytes(body)  # the body a real MAC would cover
    (run / "manifest.json").write_text(json.dumps(man))


def test_a_made_up_key_id_is_not_a_pass(tmp_path: Path, capsys) -> None:
    run = _make_run(tmp_path / "run")
    assert main(["budget", str(run), "--verify"]) == 0
    capsys.readouterr()
    _rekey(run)
    res = verify_run(run)
    assert not res.ok and any("0123456789abcdef" in p for p in res.problems), res.problems
    for argv in (
        ["budget", str(run), "--verify"],
        ["budget", str(run)],
        ["report", str(run), "-o", str(tmp_path / "rep")],
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "not authenticated by" in err or "not this process's key" in err, (argv, err)
    # told otherwise: read, but neither a clean verdict line nor exit 0
    argv = ["report", str(run), "-o", str(tmp_path / "rep"), "--allow-unverified"]
    assert main(argv) == EXIT_UNAUTHENTICATED
    out = capsys.readouterr().out
    assert out.startswith("UNVERIFIED EVIDENCE")
    verdict = next(ln for ln in out.splitlines() if ln.startswith("verdict:"))
    assert "UNVERIFIED EVIDENCE" in verdict
    assert main(["budget", str(run), "--allow-unverified"]) == EXIT_UNAUTHENTICATED


def test_without_a_key_the_verdict_says_unauthenticated(
    run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    run = _make_run(tmp_path / "clean")  # a consistent run: no violation, no analyses.json
    assert not (run / INDEX).exists()
    assert main(["report", str(run), "-o", str(tmp_path / "ok")]) in (0, EXIT_UNAUTHENTICATED)
    capsys.readouterr()
    monkeypatch.setenv("LDP_AUDIT_KEY_FILE", str(tmp_path / "no-such-key"))
    code = main(["report", str(run), "-o", str(tmp_path / "nokey")])
    out = capsys.readouterr().out
    assert code == EXIT_UNAUTHENTICATED
    verdict = next(ln for ln in out.splitlines() if ln.startswith("verdict:"))
    assert "UNAUTHENTICATED EVIDENCE" in verdict
    doc = json.loads((tmp_path / "nokey" / "report.json").read_text())
    assert doc["verdict"]["evidence"] == "unauthenticated"
    assert main(["budget", str(run), "--verify"]) == EXIT_UNAUTHENTICATED
    assert main(["budget", str(run)]) == EXIT_UNAUTHENTICATED


def test_a_reader_without_the_runs_key_creates_no_key_and_seals_nothing(
    run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found from outside (session 57): `report RUN` (into RUN/report) on a machine without the
    run's key created a key file there ("a reader never creates one") and sealed the report in
    analyses.json under it; the run's owner then refused the whole run, exit 2 ("analyses.json
    was sealed under key id ..."), with no way out but editing the index (`audit --run-dir` and
    `attack --run-dir --out` did the same). An analysis is now sealed under the key that sealed
    the run's manifest, or left unsealed: the owner's refusal names RUN/report to remove."""
    from ldp_audit.rundir.seal import seal_analyses, seal_document

    key_file = tmp_path / "no-key-here" / "ledger.key"
    monkeypatch.setenv("LDP_AUDIT_KEY_FILE", str(key_file))
    write_artifact(run, "attack_x.json", GOOD_ATTACK)  # what report, audit, attack call
    assert not key_file.exists() and not key_file.parent.exists()
    assert seal_document({"x": 1}, run) == {"x": 1}  # an attack's --out: unsealed
    assert [e["name"] for e in json.loads((run / INDEX).read_text())["entries"]] == ["audit.json"]
    monkeypatch.setenv("LDP_AUDIT_KEY", "ab" * 32)  # another key: nothing sealed under it either
    assert seal_analyses(run, ["attack_x.json"]) == []
    monkeypatch.undo()  # the run's key again
    res = verify_run(run)
    assert [p.split(" ")[0] for p in res.problems] == [str(run / "attack_x.json")], res.problems
    (run / "attack_x.json").unlink()
    assert verify_run(run).ok  # the owner's way out


def test_a_report_of_unverified_evidence_is_never_sealed(run: Path, capsys) -> None:
    """Found from outside (session 57): the run's audit.json (a violation) swapped for a passing
    one, `report RUN --allow-unverified` (exit 4, into RUN/report) sealed its pages; with the
    sealed audit.json put back the run verified (authenticated) and its sealed index.html said
    "Claims not contradicted". The pages of a report read from unverified evidence are written
    unsealed, so every reader of the run flags them."""
    sealed = (run / "audit.json").read_bytes()
    passing = audit_entry(claimed_epsilon=EPS, epsilon_lower_bound=2.0, samples=1000)
    (run / "audit.json").write_text(json.dumps([passing]))
    assert main(["report", str(run), "--allow-unverified", "--json"]) == EXIT_UNAUTHENTICATED
    capsys.readouterr()
    assert "not contradicted" in (run / "report" / "report.md").read_text()
    (run / "audit.json").write_bytes(sealed)
    res = verify_run(run)
    assert not res.ok and f"{run / 'report'}" in res.problems[0], res.problems
    assert [e["name"] for e in json.loads((run / INDEX).read_text())["entries"]] == ["audit.json"]


def test_an_extra_run_must_verify_as_a_whole(tmp_path: Path, capsys) -> None:
    """Found from outside (session 57): `report RUN EXTRA_RUN` with an FRD EXTRA_RUN whose
    config.json (ldp_epsilon 1 -> 0.01) and metrics.json were edited (`budget EXTRA_RUN
    --verify` exit 2) showed the forged epsilon and mission times in its FRD section, exit 0:
    only the EXTRA's analysis files were checked, not the run a section reads."""
    run, extra = _make_run(tmp_path / "run"), _make_run(tmp_path / "extra")
    (extra / "metrics.json").write_text(json.dumps({"note": "forged"}))
    out = str(tmp_path / "rep")
    assert main(["report", str(run), str(extra), "-o", out]) == 2
    err = capsys.readouterr().err
    assert f"EXTRA {str(extra)!r} is a run that does not verify" in err and "metrics.json" in err
    assert not (tmp_path / "rep").exists()  # refused before anything was written


def test_with_the_key_the_clean_run_exits_0(tmp_path: Path, capsys) -> None:
    run = _make_run(tmp_path / "run")
    assert main(["budget", str(run), "--verify"]) == 0
    assert main(["budget", str(run)]) == 0
    code = main(["report", str(run), "-o", str(tmp_path / "rep")])
    out = capsys.readouterr().out
    verdict = next(ln for ln in out.splitlines() if ln.startswith("verdict:"))
    assert "EVIDENCE" not in verdict and code == 0, out


# ---------------------------------------------------------------- item 3: --allow-unverified


def test_allow_unverified_changes_the_verdict_line_and_exit_code(tmp_path: Path, capsys) -> None:
    run = _make_run(tmp_path / "run")
    (run / "metrics.json").write_text(json.dumps({"note": "edited"}))  # after the manifest
    argv = ["report", str(run), "-o", str(tmp_path / "rep"), "--allow-unverified"]
    code = main(argv)
    out = capsys.readouterr().out
    assert code == EXIT_UNAUTHENTICATED, out
    verdict = next(ln for ln in out.splitlines() if ln.startswith("verdict:"))
    assert "UNVERIFIED EVIDENCE" in verdict
    assert main(["budget", str(run), "--verify", "--allow-unverified"]) == EXIT_UNAUTHENTICATED
    assert main(["budget", str(run), "--verify"]) == 2


# ---------------------------------------------------------------- item 4: one root


def test_one_root_covers_the_whole_run(run: Path, tmp_path: Path, capsys) -> None:
    res = verify_run(run)
    root = res.root
    assert main(["budget", str(run), "--verify"]) == 0
    assert f"run root {root}" in capsys.readouterr().out
    assert main(["budget", str(run), "--verify", "--expect-root", root]) == 0
    assert require_verified(run, expect_root=root).ok
    # the report prints the same root, and writing it does not change the root
    assert main(["report", str(run), "--expect-root", root]) == 1
    assert f"run root: {root}" in capsys.readouterr().out
    assert verify_run(run).root == root
    # a transcript edit with a re-sealed manifest (made by the owner's key: the worst case)
    # passes the MACs and the ledger head, but not the root
    from ldp_audit.rundir.files import sha256_file
    from ldp_audit.rundir.seal import seal_manifest

    head = res.ledger["chain_head"]
    np.savez(run / "transcript.npz", agent=np.zeros(4, dtype=np.int64))
    man = json.loads((run / "manifest.json").read_text())
    man.pop("mac")
    man["files"]["transcript.npz"] = sha256_file(run / "transcript.npz")
    (run / "manifest.json").write_text(json.dumps(seal_manifest(man, run)))
    # (the index chains to the old manifest: re-chain it as the owner's key would, in a
    # process of its own, which verified nothing)
    from ldp_audit.rundir.files import unpin_run
    from ldp_audit.rundir.seal import seal_analyses

    unpin_run(run)
    (run / INDEX).unlink()
    figures = [f"report/{f.relative_to(run / 'report')}" for f in run.glob("report/figures/*")]
    seal_analyses(run, ["audit.json", "report/report.json", "report/report.md",
                        "report/index.html", *figures])  # fmt: skip
    assert main(["budget", str(run), "--verify", "--expect-head", head]) == 0
    assert main(["budget", str(run), "--verify", "--expect-root", root]) == 2
    err = capsys.readouterr().err
    assert "expected root" in err
    assert main(["report", str(run), "--expect-root", root, "-o", str(tmp_path / "x")]) == 2


def test_expect_root_is_checked_for_form(run: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exc:  # the parser's refusal (exit 2), by the option
        main(["budget", str(run), "--verify", "--expect-root", "xyz"])
    assert exc.value.code == 2
    assert "--expect-root must be a 64-digit hex run root" in capsys.readouterr().err
    assert main(["budget", str(run), "--expect-root", "0" * 64]) == 2
    assert "--expect-root needs --verify" in capsys.readouterr().err


def test_the_tamper_table_rows_for_analyses_without_the_key(
    run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/accountant.md: without the key an edit is still caught by the sealed SHA-256, and
    by a published root; an index truncated with the analysis it sealed by the key's mark on
    the machine that sealed it (session 53), elsewhere only by the root."""
    root = verify_run(run).root
    monkeypatch.setenv("LDP_AUDIT_KEY_FILE", str(tmp_path / "no-such-key"))
    clean = verify_run(run)
    assert clean.ok and not clean.authenticated and clean.evidence == "unauthenticated"
    _edit_audit(run)
    assert not verify_run(run).ok
    # rolled back: the audit and its entry both removed (the entries left are authentic)
    (run / "audit.json").unlink()
    index = json.loads((run / INDEX).read_text())
    index["entries"] = index["entries"][:-1]
    (run / INDEX).write_text(json.dumps(index))
    monkeypatch.undo()  # the key sees it by the run's analysis mark (session 53) ...
    res = verify_run(run)
    assert not res.ok and "holds 0 sealed analyses, but its high-water mark records 1" in str(res)
    monkeypatch.setenv("LDP_AUDIT_HEADS", str(tmp_path / "elsewhere"))  # ... where it was sealed
    assert verify_run(run).ok
    assert not verify_run(run, expect_root=root).ok  # ... the published root anywhere


def test_a_forged_report_page_is_refused(run: Path, capsys) -> None:
    """Session 47's outside probe: the report's entries cut from the end of analyses.json (the
    chain still holds: a prefix) and index.html rewritten from VIOLATION to CONSISTENT verified
    with exit 0 and a note ("not sealed ... written before reports were"). An unsealed report
    page is now refused by every reader; removing the report folder lets a new one be written."""
    assert main(["report", str(run)]) == 1
    doc = json.loads((run / INDEX).read_text())
    doc["entries"] = [e for e in doc["entries"] if not e["name"].startswith("report/")]
    (run / INDEX).write_text(json.dumps(doc))
    page = run / "report" / "index.html"
    page.write_text(page.read_text().replace("VIOLATION", "CONSISTENT"))
    res = verify_run(run)
    assert not res.ok and any("index.html is not sealed" in p for p in res.problems)
    capsys.readouterr()
    assert main(["budget", str(run), "--verify"]) == 2
    assert "index.html is not sealed" in capsys.readouterr().err
    assert main(["report", str(run), "--overwrite"]) == 2  # the forged page is not replaced
    import shutil

    shutil.rmtree(run / "report")
    # session 53: the entries cut are a rollback the run's analysis mark records
    assert "holds 1 sealed analyses, but its high-water mark records" in str(verify_run(run))
    assert main(["report", str(run)]) == 2
    assert main(["budget", str(run), "--accept-restored"]) == 0  # the cut accepted on purpose
    assert main(["report", str(run)]) == 1 and verify_run(run).ok


@pytest.mark.parametrize("at", ["write_bytes", "write_text"])
def test_a_report_interrupted_while_writing_leaves_no_half_report(
    run: Path, capsys, monkeypatch, at: str
) -> None:
    """Ctrl-C in `report RUN` while it wrote its files left figures/ (and some pages): a folder
    that the rerun refused, even with --overwrite ("not a run or report folder"); in `report RUN
    --overwrite` after the new index.html, a page that did not match its seal: every reader,
    `report --overwrite` included, then refused the run as edited. Found by interrupting
    `report` at random times; now the interrupted write removes what it wrote."""
    real = getattr(Path, at)

    def interrupted(self: Path, *a, **k):
        if self.name in ("report.md", "ledger.png") or self.suffix == ".png":
            raise KeyboardInterrupt
        return real(self, *a, **k)

    monkeypatch.setattr(Path, at, interrupted)
    assert main(["report", str(run)]) == 130
    monkeypatch.undo()
    assert verify_run(run).ok and not any((run / "report").iterdir())
    assert main(["report", str(run)]) == 1 and verify_run(run).ok  # no --overwrite needed
    monkeypatch.setattr(Path, at, interrupted)
    assert main(["report", str(run), "--overwrite"]) == 130
    monkeypatch.undo()
    res = verify_run(run)
    assert res.ok, res.problems
    assert main(["report", str(run), "--overwrite"]) == 1 and verify_run(run).ok


def test_an_extra_analysis_must_be_sealed_for_the_run(tmp_path: Path, capsys) -> None:
    """An attack's --out FILE read by `report RUN FILE` is evidence too: sealed by the toolkit
    for that run (a 'seal' under the ledger key and the run's manifest), else refused."""
    from ldp_audit.rundir.seal import check_document_seal, seal_document
    from tests.test_report_fixtures import GOOD_ATTACK

    run = _make_run(tmp_path / "run")
    sealed = tmp_path / "attack.json"
    sealed.write_text(json.dumps(seal_document(dict(GOOD_ATTACK), run)))
    assert main(["report", str(run), str(sealed), "-o", str(tmp_path / "r1")]) == 0
    capsys.readouterr()
    by_hand = tmp_path / "by-hand.json"
    by_hand.write_text(json.dumps(GOOD_ATTACK))
    assert main(["report", str(run), str(by_hand), "-o", str(tmp_path / "r2")]) == 2
    assert "by-hand.json" in capsys.readouterr().err and not (tmp_path / "r2").exists()
    argv = ["report", str(run), str(by_hand), "-o", str(tmp_path / "r3"), "--allow-unverified"]
    assert main(argv) == EXIT_UNAUTHENTICATED
    verdict = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("verdict"))
    assert "UNVERIFIED EVIDENCE" in verdict
    # an edited sealed result, and one sealed for another run
    doc = json.loads(sealed.read_text())
    doc["accuracy"] = 0.34
    sealed.write_text(json.dumps(doc))
    assert check_document_seal(doc, run, load_key())[0] == "forged"
    assert main(["report", str(run), str(sealed), "-o", str(tmp_path / "r4")]) == 2
    other = _make_run(tmp_path / "other")
    doc = seal_document(dict(GOOD_ATTACK), other)
    assert check_document_seal(doc, run, load_key())[0] == "unsealed"
    assert check_document_seal(doc, other, load_key())[0] == "sealed"


def test_refusing_an_unsealed_extra_names_the_exit_it_would_get(tmp_path: Path, capsys) -> None:
    """docs/report.md: read with --allow-unverified, an unsealed audit gives exit 4, or 1 when
    it finds a violation; the refusal said "exit 4" even of a violating audit, and the run that
    followed exited 1 (session 51, the docs' `audit ... --json > audit-out/audit.json`)."""
    run = _make_run(tmp_path / "run")
    (tmp_path / "audit-out").mkdir()
    leak = audit_entry(epsilon_lower_bound=9.0)  # above its claim of 5
    (tmp_path / "audit-out" / "audit.json").write_text(json.dumps(leak))
    argv = ["report", str(run), str(tmp_path / "audit-out"), "-o", str(tmp_path / "r")]
    assert main(argv) == 2
    assert "UNVERIFIED EVIDENCE: exit 4, or 1 on a violation" in capsys.readouterr().err
    assert main([*argv, "--allow-unverified"]) == 1


def test_an_unsealed_one_run_audit_extra_is_refused(tmp_path: Path, capsys) -> None:
    """Session 56 probe: an EXTRA one-run audit with neither 'accuracy' nor
    'epsilon_lower_bound' was skipped by the seal check ("not an analysis") but shown by the
    dprl / opacus report sections (one_run_audit_documents): `report DPRL_RUN ex1` printed a
    hand-written white-box audit's tests as "consistent", exit 0."""
    run = _make_run(tmp_path / "run")
    forged = {"attack": "one-run-white-box", "violation": False, "extra": {"tests": {}}}
    (tmp_path / "forged.json").write_text(json.dumps(forged))
    argv = ["report", str(run), str(tmp_path / "forged.json"), "-o", str(tmp_path / "r")]
    assert main(argv) == 2
    assert "forged.json' is not sealed for this run" in capsys.readouterr().err


def test_another_runs_sealed_artefact_is_a_sealed_extra(tmp_path: Path) -> None:
    """`report RUN OTHER_RUN` (docs/frd.md reports two runs at once): the other run's own
    artefacts are sealed in its analyses.json, and read as such; edited, they are refused."""
    other = _make_run(tmp_path / "other")
    write_artifact(other, "audit.json", [audit_entry(claimed_epsilon=EPS, epsilon_lower_bound=1.0)])
    run = _make_run(tmp_path / "run")  # no analysis of its own
    assert main(["report", str(run), str(other), "-o", str(tmp_path / "r1")]) == 0
    _edit_audit(other)
    assert main(["report", str(run), str(other), "-o", str(tmp_path / "r2")]) == 2


def test_an_extra_folder_with_a_hand_written_manifest_is_no_sealed_run(
    tmp_path: Path, capsys
) -> None:
    """Session 56 probe: `report RUN FAKE` where FAKE holds a copied config.json, a forged
    audit.json (bound 0.5, no violation) and a hand-written manifest.json (no MAC, no ledger)
    listing its SHA-256 read the forgery as the other run's sealed artefact: exit 0, "epsilon
    >= 0.5". The folder must verify as a run first."""
    import hashlib

    run = _make_run(tmp_path / "run")
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "config.json").write_bytes((run / "config.json").read_bytes())
    forged = audit_entry(claimed_epsilon=EPS, epsilon_lower_bound=0.5)
    (fake / "audit.json").write_text(json.dumps([forged]))
    sha = hashlib.sha256((fake / "audit.json").read_bytes()).hexdigest()
    man = {"status": "complete", "files": {"audit.json": sha}}
    (fake / "manifest.json").write_text(json.dumps(man))
    assert main(["report", str(run), str(fake), "-o", str(tmp_path / "r")]) == 2
    # refused at the folder's check: its config.json is no file its manifest lists (the forgery
    # would be next: "fake/audit.json' is not sealed for this run")
    err = capsys.readouterr().err
    assert "fake/config.json was not in the run when it was verified (added since)" in err, err
    assert not (tmp_path / "r").exists()


def test_a_read_only_run_is_refused_before_work_never_a_traceback(
    run: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run on a read-only file system (EROFS, simulated at the OS calls: root ignores chmod):
    `audit --run-dir RUN --overwrite` audited, then died with exit 3 and a traceback."""
    import errno
    import os
    import tempfile

    from ldp_audit.errors import RunDirectoryError

    def erofs(*a, **k):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    before = (run / "audit.json").read_bytes()
    with monkeypatch.context() as m:
        m.setattr(tempfile, "mkdtemp", erofs)  # the output path's writability probe
        assert main(["audit", "--run-dir", str(run), "--overwrite"]) == 2
    err = capsys.readouterr().err
    assert "--run-dir: cannot create" in err and "Read-only file system" in err, err
    assert "Traceback" not in err and (run / "audit.json").read_bytes() == before
    monkeypatch.setattr(os, "replace", erofs)  # the index's rewrite fails
    with pytest.raises(RunDirectoryError, match="cannot write .*analyses.json: Read-only"):
        write_artifact(run, "attack_x.json", {"a": 1})
    assert not (run / "attack_x.json").exists()  # never left behind unsealed
    monkeypatch.setattr(os, "link", erofs)  # and the artefact's own write
    with pytest.raises(RunDirectoryError, match="cannot write .*attack_x.json: Read-only"):
        write_artifact(run, "attack_x.json", {"a": 1})


@pytest.mark.parametrize("overwrite", [False, True])
@pytest.mark.parametrize("at", ["after its rename", "before the seal", "after the seal"])
def test_an_artefact_write_interrupted_leaves_a_run_that_verifies(
    run: Path, monkeypatch, at: str, overwrite: bool
) -> None:
    """Ctrl-C / SIGTERM in `audit --run-dir RUN --overwrite` (or `attack ... --run-dir`) after
    the new audit.json replaced the old one but before its seal (the wait for the index's lock
    or the key): the file no longer matched its sealed SHA-256 and every reader refused the run
    as edited; one landing just after the seal, on a new artefact, deleted the sealed file
    ("sealed but missing"). Now the interrupted write puts back what the seal says. Session 58
    ("after its rename"): a signal's KeyboardInterrupt that came after the new file was renamed
    into place but before the ``try`` that puts the earlier one back (the folder's fsync) left
    the unsealed new file."""
    import ldp_audit.rundir.seal as seal
    import ldp_audit.rundir.writer as writer

    new = [audit_entry(claimed_epsilon=EPS, epsilon_lower_bound=1.0, samples=1000)]
    name = "audit.json" if overwrite else "attack_toy.json"
    before = (run / name).read_bytes() if overwrite else None
    real_write = seal.write_json_file

    def write_then_interrupt(*a, **k):
        real_write(*a, **k)
        raise KeyboardInterrupt

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    if at == "after its rename":
        monkeypatch.setattr(writer, "write_json_file", write_then_interrupt)
    elif at == "before the seal":
        monkeypatch.setattr(seal, "_run_key", interrupted)
    else:
        monkeypatch.setattr(seal, "write_json_file", write_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        write_artifact(run, name, new, overwrite=overwrite)
    monkeypatch.undo()
    res = verify_run(run)
    assert res.ok, res.problems
    if at == "after the seal":  # sealed: the new artefact stays
        assert json.loads((run / name).read_text()) == new
    elif overwrite:  # the earlier one, as sealed
        assert (run / name).read_bytes() == before
    else:
        assert not (run / name).exists()


_KILLED_IN_THE_SEAL = """
import sys, time
from pathlib import Path
import ldp_audit.rundir.writer as writer

run, name, overwrite, marker = Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "1", Path(sys.argv[4])

def seal_analyses(*a, **k):  # the artefact is in place, its seal not yet written
    marker.touch()
    time.sleep(600)

writer.seal_analyses = seal_analyses
writer.write_artifact(run, name, {"new": True}, overwrite=overwrite)
"""


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_kill_before_the_seal_names_the_way_out(
    run: Path, tmp_path: Path, overwrite: bool
) -> None:
    """Session 49: a SIGKILL between an artefact's write and its seal (no handler runs) left a
    run every reader refused as 'not sealed' / 'edited after the toolkit wrote it', with no way
    out named. The refusal now names the kill and the way out, and the way out verifies."""
    import signal
    import subprocess
    import sys
    import time

    name = "audit.json" if overwrite else "attack_toy.json"
    marker = tmp_path / "in-the-seal"
    p = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _KILLED_IN_THE_SEAL,
            str(run),
            name,
            str(int(overwrite)),
            str(marker),
        ]
    )
    t0 = time.monotonic()
    while not marker.exists():  # the event, not a sleep
        assert p.poll() is None and time.monotonic() - t0 < 120, "the child never reached the seal"
        time.sleep(0.01)
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=30)
    res = verify_run(run)
    assert not res.ok
    way_out = "run that command again with --overwrite" if overwrite else "remove it and run"
    assert any("killed before it sealed it" in x and way_out in x for x in res.problems), res
    if overwrite:  # what `audit --run-dir RUN --overwrite --allow-unverified` does
        write_artifact(run, name, [VIOLATION], overwrite=True)
    else:
        (run / name).unlink()
    assert verify_run(run).ok


def _roll_back_the_audit(run: Path) -> None:
    """Session 53: the audit that found the violation deleted and analyses.json truncated back
    (every entry left is authentic)."""
    (run / "audit.json").unlink()
    index = json.loads((run / INDEX).read_text())
    index["entries"] = index["entries"][:-1]
    (run / INDEX).write_text(json.dumps(index))


def test_an_analysis_rolled_back_is_refused_by_its_mark(run: Path, capsys) -> None:
    """Before session 53 the rollback turned `report`'s exit 1 (violation) into exit 0; the
    run's analysis mark (ledger_marks, outside the run) now refuses it in every reader."""
    assert main(["report", str(run), "--out", str(run.parent / "r0")]) == 1
    _roll_back_the_audit(run)
    capsys.readouterr()
    assert main(["report", str(run), "--out", str(run.parent / "r1")]) == 2
    err = capsys.readouterr().err
    assert str(run) in err and "holds 0 sealed analyses" in err and "records 1" in err
    assert f"ldp-audit budget {run} --accept-restored" in err
    assert main(["budget", str(run), "--verify"]) == 2
    assert main(["audit", "--run-dir", str(run), "--overwrite"]) == 2
    assert "records 1" in capsys.readouterr().err
    # read anyway: said first, exit 4
    argv = ["report", str(run), "--out", str(run.parent / "r2"), "--allow-unverified"]
    assert main(argv) == EXIT_UNAUTHENTICATED
    assert "UNVERIFIED EVIDENCE" in capsys.readouterr().out
    # a restore on purpose, accepted: the mark forgets the audit
    assert main(["budget", str(run), "--accept-restored"]) == 0
    assert "forgot 1 sealed analyses" in capsys.readouterr().out
    assert main(["budget", str(run), "--verify"]) == 0


def test_an_analysis_rolled_back_and_moved_is_refused(run: Path) -> None:
    """Found from outside (session 57): the rollback above, then `mv RUN RUN2`: the mark was
    per run path, so RUN2 (no mark of its own) verified (authenticated) and `report RUN2` exit
    0 without the violation. Where its own path has no mark, a run is checked against the mark
    of any copy of it (the same key and manifest): an older copy is refused, as a ledger's."""
    _roll_back_the_audit(run)
    moved = run.parent / "moved"
    run.rename(moved)
    res = verify_run(moved)
    assert not res.ok and "holds 0 sealed analyses" in res.problems[0], res.problems
    assert "records 1" in res.problems[0]


def test_accepting_a_moved_older_copy_says_what_its_mark_forgot(run: Path, capsys) -> None:
    """Found from outside (session 58): the moved rollback above accepted with `budget RUN2
    --accept-restored` printed "nothing forgotten" (RUN2's path had no mark of its own), though
    the mark it was refused by recorded the audit; now it names what is forgotten."""
    _roll_back_the_audit(run)
    moved = run.parent / "moved"
    run.rename(moved)
    assert main(["budget", str(moved), "--accept-restored"]) == 0
    out = capsys.readouterr().out
    assert "forgot 1 sealed analyses" in out and "nothing forgotten" not in out.split("\n")[1]
    assert verify_run(moved).ok


def test_a_complete_run_sealed_again_without_its_analyses_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found from outside (session 58): a finished run's manifest.json, analyses.json and
    audit.json deleted, then `train ... --resume` re-sealed it (a new manifest: no mark of its
    own) and `report` read VIOLATION as PARTIALLY VERIFIED, exit 0. The resume is refused now
    (tests/test_rundir_contract.py); a run re-sealed so before is refused by its ledger's mark."""
    monkeypatch.setenv("LDP_AUDIT_HEADS", str(tmp_path / "heads"))
    run = _make_run(tmp_path / "run")
    write_artifact(run, "audit.json", [VIOLATION])
    for name in ("manifest.json", INDEX, "audit.json"):
        (run / name).unlink()
    monkeypatch.setenv("LDP_AUDIT_HEADS", str(tmp_path / "none"))  # as a resume before 58 did
    RunWriter(run, algorithm="toy", config={"delta": 0.0}, seed=0,
              mechanism={"name": "laplace", "epsilon": EPS}, mode="resume").finish()  # fmt: skip
    monkeypatch.setenv("LDP_AUDIT_HEADS", str(tmp_path / "heads"))
    res = verify_run(run)
    assert not res.ok and "holds 0 sealed analyses" in res.problems[0], res.problems
    assert "records 1" in res.problems[0]


def test_an_analysis_index_that_forks_from_its_mark_is_refused(run: Path) -> None:
    """The same count with another last entry (an analysis rolled back, another sealed in its
    place under --allow-unverified) does not extend the marked head; the mark does not move."""
    _roll_back_the_audit(run)
    write_artifact(run, "attack_x.json", GOOD_ATTACK)
    res = verify_run(run)
    assert not res.ok and "does not pass through entry 1 of the high-water mark" in str(
        res.problems
    )


def test_a_copy_of_a_run_analysed_on_its_own_is_not_a_fork(run: Path, tmp_path: Path) -> None:
    """The analysis mark is per run path: `cp -r RUN COPY` and an audit of each verifies both
    (a ledger's mark is per ledger id: its copies share one budget)."""
    import shutil

    copy = tmp_path / "copy"  # both copies start from the same index (the audit sealed)
    shutil.copytree(run, copy)
    for r in (run, copy):
        write_artifact(r, "attack_x.json", GOOD_ATTACK)
    assert verify_run(run).ok and verify_run(copy).ok


def test_accepting_a_restored_run_without_a_key_creates_none(
    run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """Found from outside (session 57): `budget RUN --accept-restored` with no key file created
    one, then refused "analyses.json was sealed under key id A, not this process's key B" (B:
    the key it had just made). Now: no key, no key created, and the refusal says so."""
    key_file = tmp_path / "none" / "ledger.key"
    monkeypatch.setenv("LDP_AUDIT_KEY_FILE", str(key_file))
    assert main(["budget", str(run), "--accept-restored"]) == 2
    assert "holds no ledger key" in capsys.readouterr().err
    assert not key_file.parent.exists()


def test_accepting_a_restored_run_refuses_an_index_the_key_did_not_write(run: Path) -> None:
    """Session 53 probe: `budget RUN --accept-restored` on a run whose analyses.json fails its
    MAC said "nothing was accepted" after the ledger's mark had moved; now neither mark moves."""
    from ldp_audit.accountant.keys import heads_dir

    with Ledger(run / "ledger.sqlite", readonly=True) as led:
        mark = heads_dir() / led.anchor()["ledger_id"]  # the ledger's mark (ledger ids: hex)

    def marks() -> tuple[int, int]:  # the file's inode and time: rewritten?
        return mark.stat().st_ino, mark.stat().st_mtime_ns

    before = marks()
    index = json.loads((run / INDEX).read_text())
    index["entries"][0]["hmac"] = "00" * 32
    (run / INDEX).write_text(json.dumps(index))
    assert main(["budget", str(run), "--accept-restored"]) == 2
    assert marks() == before


def test_an_analysis_of_unverified_evidence_is_never_sealed(tmp_path: Path, capsys) -> None:
    """Session 56 probe: config.json's epsilon edited 5 -> 50, `audit --run-dir RUN
    --allow-unverified` (no violation of 50: bound 8.46) sealed its audit.json; config.json put
    back, the run verified (authenticated) and `report RUN` said "claims not contradicted",
    exit 0, with a bound of 8.46 against the claim 5. An analysis computed from evidence that
    did not verify is now written unsealed (every reader flags it), and an attack's --out is
    not sealed for the run; run again on the verified run (--overwrite --allow-unverified: its
    only problem is the file it replaces), it is sealed."""
    from ldp_audit import systems
    from tests.toy_system import SYSTEM, ToyConfig, train

    systems.register(SYSTEM, replace=True)
    try:
        run = tmp_path / "run"
        train(ToyConfig(agents=20, reports=3, epsilon=2.0), seed=0, run_dir=run)
        original = (run / "config.json").read_bytes()
        cfg = json.loads(original)
        cfg["config"]["epsilon"] = 50.0
        (run / "config.json").write_text(json.dumps(cfg))
        audit = ["audit", "--run-dir", str(run), "--samples", "2000", "--no-progress"]
        assert main([*audit, "--allow-unverified"]) in (0, EXIT_UNAUTHENTICATED)
        out = tmp_path / "attack.json"
        argv = ["attack", "toy-guess", "--run-dir", str(run), "--allow-unverified"]
        main([*argv, "--out", str(out)])
        assert "not sealed: this analysis was computed" in capsys.readouterr().err
        assert "seal" not in json.loads(out.read_text())
        (run / "config.json").write_bytes(original)
        res = verify_run(run)
        assert not res.ok and "audit.json is not sealed" in res.problems[0], res.problems
        assert main(["report", str(run), "-o", str(tmp_path / "r")]) == 2
        assert main(["report", str(run), str(out), "-o", str(tmp_path / "r")]) == 2
        assert main([*audit, "--allow-unverified", "--overwrite"]) in (0, 1, EXIT_UNAUTHENTICATED)
        assert verify_run(run).ok
    finally:
        systems.unregister("toy")
