"""Evidence against a person (issue 28): the tamper table, rerun.

Each attack below is made by someone who can write the run directory and knows every format,
but not the ledger key (it lives outside the run: LDP_AUDIT_KEY_FILE, here a temp file from
tests/conftest.py). The table of docs/accountant.md ("What is detected, by what") is what these
tests assert, column by column:

* ``key``: the reader holds the key (the machine that wrote the run): every attack is detected.
* ``no key + --expect-head``: a reader without the key but with the chain head published
  elsewhere detects what changes the chain.
* ``no key``: a reader with neither, facing a person who also rewrites manifest.json: nothing
  but accidents is detected (asserted too, so the docs cannot overstate it).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from ldp_audit.accountant import Accountant, Budget, LaplaceEvent, Ledger
from ldp_audit.accountant import ledger_format as LF
from ldp_audit.accountant.keys import KeyFileError, default_key_path, load_key
from ldp_audit.accountant.ledger_format import LedgerIntegrityError
from ldp_audit.accountant.ledger_migrate import migrate_v1
from ldp_audit.cli import main
from ldp_audit.errors import LedgerError
from ldp_audit.rundir import RunWriter, verify_run, write_artifact
from tests.ledger_checksums import agent_chk, state_chk
from tests.test_evidence_analyses import VIOLATION

EPS = 5.0


def _make_run(path: Path, *, agents: int = 4, snapshot: Path | None = None) -> Path:
    """A small finished run: agent a0 is charged twice (its full budget 10), a1 Laplace(5) and
    Laplace(0.5), the others once. ``snapshot``: a copy of the ledger after the first batch."""
    w = RunWriter(path, algorithm="toy", config={"delta": 0.0}, seed=0)
    acc = Accountant(w.open_ledger(), budget=Budget(epsilon=10.0))
    acc.charge_many([(f"a{i}", LaplaceEvent(EPS)) for i in range(agents)])
    if snapshot is not None:
        shutil.copy(path / "ledger.sqlite", snapshot)
    acc.charge_many([("a0", LaplaceEvent(EPS)), ("a1", LaplaceEvent(0.5))])
    acc.ledger.close()
    agent = np.array([0, 1, 2, 3, 0, 1][: agents + 2], dtype=np.int64)
    w.write_npz("transcript.npz", {"agent": agent})
    w.finish()
    return path


@pytest.fixture
def run(tmp_path: Path) -> Path:
    return _make_run(tmp_path / "run", snapshot=tmp_path / "older.sqlite")


def _rows(path: Path) -> list[tuple]:
    con = sqlite3.connect(path)
    try:
        return con.execute(
            "SELECT agent, event, scope, time, run_id FROM ldp_audit_charges ORDER BY id"
        ).fetchall()
    finally:
        con.close()


def _rewrite(path: Path, transform) -> None:
    """What a person without the key can do: rewrite the rows and recompute the chain, every
    running count and checksum, and the head (the MACs stay as they were: no key)."""
    rows = transform(_rows(path))
    con = sqlite3.connect(path)
    try:
        (lid,) = con.execute("SELECT value FROM ldp_audit_meta WHERE key='ledger_id'").fetchone()
        con.execute("DELETE FROM ldp_audit_charges")
        con.execute("DELETE FROM ldp_audit_state")
        old_macs = dict(con.execute("SELECT agent, mac FROM ldp_audit_agents").fetchall())
        con.execute("DELETE FROM ldp_audit_agents")
        prev, per_agent, counts = LF.genesis_hash(lid), {}, {}
        for i, (agent, event, scope, t, run_id) in enumerate(rows, start=1):
            n = per_agent[agent] = per_agent.get(agent, 0) + 1
            prev = LF.row_hash(prev, LF.row_bytes(i, agent, event, scope, t, run_id, n))
            con.execute(
                "INSERT INTO ldp_audit_charges VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (i, agent, event, scope, t, run_id, n, prev),
            )
            counts[(agent, scope, event)] = counts.get((agent, scope, event), 0) + 1
            last = i
            con.execute(
                "INSERT OR REPLACE INTO ldp_audit_agents VALUES (?, ?, ?, ?, ?)",
                (agent, n, last, agent_chk(agent, n, last), old_macs.get(agent, b"\0" * 32)),
            )
        for (agent, scope, event), n in counts.items():
            con.execute(
                "INSERT INTO ldp_audit_state VALUES (?, ?, ?, ?, ?)",
                (agent, scope, event, n, state_chk(agent, scope, event, n)),
            )
        con.execute("UPDATE ldp_audit_head SET rows = ?, hash = ? WHERE k = 1", (len(rows), prev))
        con.commit()
    finally:
        con.close()


def _reseal_meta(path: Path, **changes: str) -> None:
    """Edit metadata entries and recompute the digest the head records (no key: no MAC)."""
    con = sqlite3.connect(path)
    try:
        for k, v in changes.items():
            con.execute("UPDATE ldp_audit_meta SET value = ? WHERE key = ?", (v, k))
        meta = dict(con.execute("SELECT key, value FROM ldp_audit_meta").fetchall())
        con.execute("UPDATE ldp_audit_head SET meta = ? WHERE k = 1", (LF.metadata_digest(meta),))
        con.commit()
    finally:
        con.close()


def _state_only_edit(path: Path) -> None:
    """Issue 28's silent one: move one of a1's counts from Laplace(5) to Laplace(0.5) in the
    state table (CRC-32s recomputed, no charge row, the total unchanged): spend 5.5 -> 1."""
    big = json.dumps({"epsilon": EPS, "type": "laplace"}, separators=(",", ":"), sort_keys=True)
    small = json.dumps({"epsilon": 0.5, "type": "laplace"}, separators=(",", ":"), sort_keys=True)
    con = sqlite3.connect(path)
    try:
        events = dict(
            con.execute("SELECT event, n FROM ldp_audit_state WHERE agent = 'a1'").fetchall()
        )
        assert events == {big: 1, small: 1}, events
        for ev, n in ((big, 0), (small, 2)):
            if n == 0:
                con.execute("DELETE FROM ldp_audit_state WHERE agent='a1' AND event=?", (ev,))
            else:
                con.execute(
                    "UPDATE ldp_audit_state SET n = ?, chk = ? WHERE agent='a1' AND event=?",
                    (n, state_chk("a1", "local", ev, n), ev),
                )
        con.commit()
    finally:
        con.close()


def _rewrite_manifest_anchor(run: Path) -> None:
    """The person also makes manifest.json agree with the tampered ledger (its MAC, under the
    key they do not have, is left as it was)."""
    man = json.loads((run / "manifest.json").read_text())
    with Ledger(run / "ledger.sqlite", readonly=True, verify=False) as led:
        a = led.anchor()
    man["ledger"] = {**man["ledger"], **a}
    (run / "manifest.json").write_text(json.dumps(man))


def _tamper(name: str, run: Path, tmp: Path) -> None:
    led = run / "ledger.sqlite"
    if name == "rollback":
        shutil.copy(tmp / "older.sqlite", led)
    elif name == "truncation":
        _rewrite(led, lambda rows: rows[:-2])
    elif name == "delete agent":
        _rewrite(led, lambda rows: [r for r in rows if r[0] != "a0"])
    elif name == "rewrite 5 -> 0.5":
        _rewrite(led, lambda rows: [(a, e.replace("5.0", "0.5"), *rest) for a, e, *rest in rows])
    elif name == "state-only edit":
        _state_only_edit(led)
    elif name == "swap":  # another run of the same owner (made beforehand when given)
        other = tmp / "other" if (tmp / "other").is_dir() else _make_run(tmp / "other")
        shutil.copy(other / "ledger.sqlite", led)
    elif name == "metadata edit":
        _reseal_meta(led, budget=json.dumps({"epsilon": 100.0, "delta": 0.0, "method": "basic"}))
    else:  # pragma: no cover
        raise AssertionError(name)


ATTACKS = [
    "rollback",
    "truncation",
    "delete agent",
    "rewrite 5 -> 0.5",
    "state-only edit",
    "swap",
    "metadata edit",
]
#: no key, but the chain head published elsewhere (--expect-head): what changes the chain
NO_KEY_HEAD_DETECTS = {
    "rollback": True,
    "truncation": True,
    "delete agent": True,
    "rewrite 5 -> 0.5": True,
    "state-only edit": True,  # the full walk rebuilds the state from the rows
    "swap": True,
    "metadata edit": False,  # the metadata is outside the chain: only its MAC covers it
}
#: no key, nothing published, manifest.json rewritten to match: what is still detected
NO_KEY_DETECTS = {a: a == "state-only edit" for a in ATTACKS}


def _no_key(monkeypatch: pytest.MonkeyPatch, tmp: Path) -> None:
    monkeypatch.setenv("LDP_AUDIT_KEY_FILE", str(tmp / "no-such-key"))


@pytest.mark.parametrize("attack", ATTACKS)
def test_every_attack_is_detected_with_the_key(attack: str, run: Path, tmp_path: Path) -> None:
    head = verify_run(run).ledger["chain_head"]
    assert verify_run(run).ok and verify_run(run).authenticated
    _tamper(attack, run, tmp_path)
    res = verify_run(run)
    assert not res.ok, attack
    assert any("ledger.sqlite" in p for p in res.problems), res.problems
    # the person also rewrites the manifest's anchor: its MAC gives them away
    if attack not in ("state-only edit",):
        try:
            _rewrite_manifest_anchor(run)
        except Exception:  # noqa: BLE001 - the tampered ledger does not even open: detected
            pass
        else:
            res = verify_run(run)
            assert not res.ok, attack
    # with the head published elsewhere: detected too
    assert not verify_run(run, head).ok


@pytest.mark.parametrize("attack", ATTACKS)
def test_without_the_key_what_the_docs_table_says(
    attack: str, run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    head = verify_run(run).ledger["chain_head"]
    if attack == "swap":  # the owner's other run, written with the owner's key
        _make_run(tmp_path / "other")
    _no_key(monkeypatch, tmp_path)
    clean = verify_run(run)
    assert clean.ok and not clean.authenticated
    assert any("unauthenticated" in n for n in clean.notes)
    _tamper(attack, run, tmp_path)
    _rewrite_manifest_anchor(run)
    assert (not verify_run(run, head).ok) == NO_KEY_HEAD_DETECTS[attack], attack
    assert (not verify_run(run).ok) == NO_KEY_DETECTS[attack], attack


@pytest.mark.parametrize("attack", ["rollback", "swap", "metadata edit", "truncation"])
def test_the_anchor_alone_detects_an_unedited_manifest_mismatch(
    attack: str, run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the key, a person who leaves manifest.json alone is still caught by its anchor."""
    _no_key(monkeypatch, tmp_path)
    _tamper(attack, run, tmp_path)
    res = verify_run(run)
    assert not res.ok
    assert any("manifest.json" in p and "ledger.sqlite" in p for p in res.problems), res.problems


def test_state_only_edit_is_refused_by_every_spend_reader(run: Path, capsys) -> None:
    """Issue 28: one UPDATE of a state row made spent(), charge()'s budget check and budget
    read the lower value. Now each refuses, cheaply (the agent's MAC covers its state)."""
    led_path = run / "ledger.sqlite"
    with Ledger(led_path) as led:
        assert Accountant(led).spent("a1", method="basic") == pytest.approx(5.5)
    _state_only_edit(led_path)
    with Ledger(led_path) as led:
        acc = Accountant(led)
        with pytest.raises(LedgerIntegrityError, match="a1.*MAC"):
            acc.spent("a1", method="basic")
        with pytest.raises(LedgerIntegrityError, match="a1.*MAC"):
            acc.charge("a1", LaplaceEvent(0.5))
        with pytest.raises(LedgerIntegrityError):
            acc.spent_all(method="basic")
    assert main(["budget", str(run)]) == 2
    assert "a1" in capsys.readouterr().err


def test_metadata_and_truncation_are_refused_on_open_with_the_key(run: Path, tmp_path) -> None:
    _tamper("metadata edit", run, tmp_path)
    with pytest.raises(LedgerIntegrityError, match="MAC"):
        Ledger(run / "ledger.sqlite", readonly=True)
    _tamper("truncation", _make_run(tmp_path / "r2"), tmp_path)
    with pytest.raises(LedgerIntegrityError, match="MAC"):
        Ledger(tmp_path / "r2" / "ledger.sqlite", readonly=True)


def test_readers_refuse_unverified_runs_naming_the_file(run: Path, tmp_path, capsys) -> None:
    _tamper("rollback", run, tmp_path)
    for argv in (
        ["budget", str(run), "--verify"],
        ["report", str(run), "-o", str(tmp_path / "rep")],
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "ledger.sqlite" in err and "Traceback" not in err, (argv, err)
    assert not (tmp_path / "rep").exists()
    # the attacks, on a tiny real pgc-a3c run with another run's ledger swapped in
    tiny = ["train", "pgc-a3c", "--mechanism", "laplace", "--epsilon", "1"]
    tiny += ["--max-submissions", "20", "--no-progress", "--out"]
    pgc, other = tmp_path / "pgc", tmp_path / "pgc2"
    assert main([*tiny, str(pgc)]) == 0 and main([*tiny, str(other)]) == 0
    capsys.readouterr()
    shutil.copy(other / "ledger.sqlite", pgc / "ledger.sqlite")
    # (membership --run-dir scores dprl runs; it calls the same check after the system lookup)
    argv = ["attack", "dynamics", "--run-dir", str(pgc), "--out", str(tmp_path / "a.json")]
    assert main(argv) == 2, argv
    err = capsys.readouterr().err
    assert "ledger.sqlite" in err and "ledger id" in err and "Traceback" not in err, err
    assert not (tmp_path / "a.json").exists()
    argv += ["--allow-unverified", "--shadow", "2", "--max-groups", "3"]
    assert main(argv) in (1, 4)  # never 0 on unverified evidence (issue 38)
    out = capsys.readouterr().out
    assert out.startswith("UNVERIFIED EVIDENCE") and "ledger id" in out.splitlines()[0]
    doc = json.loads((tmp_path / "a.json").read_text())
    assert doc["verified"] is False and doc["verification"]["problems"]
    # a file changed after the run: named too
    run2 = _make_run(tmp_path / "r2")
    (run2 / "transcript.npz").write_bytes(b"x")
    assert main(["report", str(run2), "-o", str(tmp_path / "rep2")]) == 2
    assert "transcript.npz" in capsys.readouterr().err
    # no manifest, no ledger
    (run2 / "manifest.json").unlink()
    (run2 / "ledger.sqlite").unlink()
    problems = verify_run(run2).problems
    assert any("manifest.json is missing" in p for p in problems)
    assert any("ledger.sqlite is missing" in p for p in problems)


def test_expect_head_from_elsewhere(run: Path, tmp_path: Path) -> None:
    head = verify_run(run).ledger["chain_head"]
    assert main(["budget", str(run), "--verify", "--expect-head", head]) == 0
    other = verify_run(_make_run(tmp_path / "o")).ledger["chain_head"]
    assert main(["budget", str(run), "--verify", "--expect-head", other]) == 2


def test_a_v2_ledger_reads_as_unauthenticated_and_is_never_charged(tmp_path: Path) -> None:
    """Old ledgers stay readable: a v2 ledger (the FRD report's frd-wide run as committed before
    its 2026-11-27 regeneration, `git show cf616fc:reports/frd/leak_runs/frd-wide/ledger.sqlite`,
    kept as a fixture) reads as unauthenticated."""
    old = Path(__file__).parent / "data" / "ledger_v2_frd_wide.sqlite"
    copy = tmp_path / "v2.sqlite"
    shutil.copy(old, copy)
    with Ledger(copy) as led:
        assert not led.authenticated and "schema version 2" in led.auth_note
        assert led.verify()["authenticated"] is False
        assert len(Accountant(led).spent_all(method="basic")) > 0
        with pytest.raises(LF.LedgerReadOnlyError, match="schema version 2"):
            Accountant(led).charge("x", LaplaceEvent(1.0))
    new = migrate_v1(copy, tmp_path / "v3.sqlite")
    assert new.authenticated and new.verify()["schema_version"] == 3
    new.close()


def test_key_file_sources_and_permissions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LDP_AUDIT_KEY_FILE")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    path = default_key_path()
    assert path == tmp_path / "cfg" / "ldp-audit" / "ledger.key"
    assert load_key(create=False) is None and not path.exists()  # a reader never creates one
    led = Ledger(tmp_path / "l.sqlite")  # a writer does, 0600
    assert path.stat().st_mode & 0o777 == 0o600 and led.authenticated
    led.close()
    path.chmod(0o644)
    with pytest.raises(KeyFileError, match="chmod 600"):
        Ledger(tmp_path / "l.sqlite", readonly=True)
    path.chmod(0o600)
    monkeypatch.setenv("LDP_AUDIT_KEY", "ab" * 16)  # the environment variable wins
    with Ledger(tmp_path / "l.sqlite", readonly=True) as led:
        assert not led.authenticated and "key id" in led.auth_note
    monkeypatch.setenv("LDP_AUDIT_KEY", "xyz")
    with pytest.raises(KeyFileError, match="hex"):
        load_key()
    monkeypatch.setenv("LDP_AUDIT_KEY", "ab" * 8)
    with pytest.raises(KeyFileError, match="at least 16 bytes"):
        load_key()


def test_a_relative_key_file_is_refused(tmp_path: Path, monkeypatch, capsys) -> None:
    """``LDP_AUDIT_KEY_FILE=rel/key`` named another key from each working folder: ``train``
    created one under its folder and ``budget`` from another folder read no key (exit 4,
    unauthenticated), session 53. Refused like a relative ``LDP_AUDIT_HEADS``."""
    run = _make_run(tmp_path / "run")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LDP_AUDIT_KEY_FILE", "rel/ledger.key")
    with pytest.raises(KeyFileError, match="_FILE='rel/ledger.key' is not an absolute path"):
        load_key(create=True)
    assert main(["budget", str(run), "--verify"]) == 2
    assert "LDP_AUDIT_KEY_FILE='rel/ledger.key'" in capsys.readouterr().err
    with pytest.raises(KeyFileError):
        RunWriter(tmp_path / "new", algorithm="toy", config={}, seed=0)
    assert not (tmp_path / "rel").exists() and not (tmp_path / "new").exists()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root (chown)")
def test_a_key_file_another_user_owns_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A person with write access to the key's folder but not the key drops their own key file
    (mode 0600, owned by them): root read it and sealed and verified with the person's key
    (session 49). A key file must belong to this process's user (or root), as ssh asks."""
    key = tmp_path / "key" / "ledger.key"  # its own: the session's key is shared by workers
    monkeypatch.setenv("LDP_AUDIT_KEY_FILE", str(key))
    run = _make_run(tmp_path / "run")  # creates the key
    os.chown(key, 12345, -1)
    with pytest.raises(KeyFileError, match="belongs to user id 12345"):
        load_key()
    assert main(["budget", str(run), "--verify"]) == 2
    os.chown(key, os.geteuid(), -1)
    assert main(["budget", str(run), "--verify"]) == 0


def test_budget_uses_the_runs_delta_and_refuses_a_fifo(tmp_path: Path, capsys) -> None:
    run = tmp_path / "g"
    w = RunWriter(run, algorithm="toy", config={"delta": 1e-5}, seed=0)
    Accountant(w.open_ledger()).charge("a", LaplaceEvent(1.0))
    w.finish()
    basic = ["--method", "basic"]  # (no PLD/PRV import: the delta is what is tested)
    assert main(["budget", str(run), "--json", *basic]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["delta"] == 1e-5 and "config.json" in out["delta_source"]
    assert out["authenticated"] is True
    assert main(["budget", str(run), "--delta", "0.001", "--json", *basic]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["delta"] == 0.001 and out["delta_source"] == "--delta"
    assert main(["budget", str(run), *basic]) == 0
    assert "delta = 1e-05 (the run's delta" in capsys.readouterr().out
    # the run is evidence: an edited delta (every epsilon printed changes) or another run's
    # ledger swapped in was read, exit 0; both are refused (the run checked against its
    # manifest, as every reader does), through the ledger file too
    other = RunWriter(tmp_path / "o", algorithm="toy", config={}, seed=0)
    Accountant(other.open_ledger()).charge("b", LaplaceEvent(1.0))
    other.finish()
    saved = (run / "ledger.sqlite").read_bytes()
    shutil.copy(tmp_path / "o" / "ledger.sqlite", run / "ledger.sqlite")
    assert main(["budget", str(run), *basic]) == 2
    assert "ledger.sqlite is not the run's ledger" in capsys.readouterr().err
    (run / "ledger.sqlite").write_bytes(saved)
    cfg = json.loads((run / "config.json").read_text())
    cfg["config"]["delta"] = 0.5
    (run / "config.json").write_text(json.dumps(cfg))
    for target in (run, run / "ledger.sqlite"):
        assert main(["budget", str(target), *basic]) == 2
        err = capsys.readouterr().err
        assert "config.json does not match the SHA-256 in manifest.json" in err, err
    assert main(["budget", str(run), "--json", "--allow-unverified", *basic]) == 4
    captured = capsys.readouterr()
    assert json.loads(captured.out)["verified"] is False and "UNVERIFIED" in captured.err
    (run / "config.json").unlink()  # no config.json: still a run (its manifest says so)
    assert main(["budget", str(run), *basic]) == 2
    assert "config.json is listed in manifest.json but missing" in capsys.readouterr().err
    fifo = tmp_path / "fifo"
    os_mkfifo = getattr(__import__("os"), "mkfifo", None)
    if os_mkfifo is None:
        pytest.skip("no FIFOs on this platform")
    os_mkfifo(fifo)
    assert main(["budget", str(fifo)]) == 2  # refused before opening: never blocks
    assert "not a regular file" in capsys.readouterr().err
    with pytest.raises(LedgerError, match="not a regular file"):
        Ledger(fifo, readonly=True)


def test_a_stripped_manifest_is_not_taken_for_an_old_one(run: Path) -> None:
    """Removing the anchor and the MAC would make a manifest look written before anchors; a
    keyed (schema-3) ledger's manifest always has both, so the strip itself is a problem."""
    man = json.loads((run / "manifest.json").read_text())
    del man["mac"], man["ledger"]
    (run / "manifest.json").write_text(json.dumps(man))
    res = verify_run(run)
    assert not res.ok and "stripped" in res.problems[0]


def test_the_mac_is_rfc2104_hmac_sha256() -> None:
    """LedgerKey.mac (precomputed pad states) equals the standard library's hmac.digest."""
    import hmac

    from ldp_audit.accountant.keys import LedgerKey

    rng = np.random.default_rng(0)
    for n in (16, 32, 63, 64, 65, 100, 200):  # keys longer than a block are hashed first
        key = LedgerKey(rng.bytes(n), "test")
        for msg in (b"", b"x", rng.bytes(1000)):
            assert key.mac(msg) == hmac.digest(key.key, msg, "sha256")
    assert "key=" not in repr(key) and key.id in repr(key)  # the key is never printed


def test_what_only_an_external_anchor_catches(
    run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The documented limits (docs/accountant.md, "What no key catches"), measured: a state the
    key itself sealed, restored later, verifies with the key; only a head or root published
    elsewhere tells it from the newer one. (1) A ledger alone (no run) copied back over a longer
    one: the older spend read as the spend until the high-water mark kept beside the key
    (ledger_marks); now refused, until accepted as restored on purpose. (2) A run folder
    restored from before its audit was added: verified until session 53, now refused by the
    run's analysis mark (the same marks); elsewhere (no mark) it verifies, and --expect-head
    passes (an analysis adds no charge); --expect-root refuses."""

    led = tmp_path / "alone" / "ledger.sqlite"
    led.parent.mkdir()
    acc = Accountant(led, budget=Budget(epsilon=10.0))
    acc.charge_many([("a", LaplaceEvent(1.0))] * 3)
    shutil.copy(led, tmp_path / "older-alone.sqlite")
    acc.charge_many([("a", LaplaceEvent(1.0))] * 5)
    later_head = acc.ledger.verify()["chain_head"]
    acc.ledger.close()
    shutil.copy(tmp_path / "older-alone.sqlite", led)  # the rollback
    # caught by the high-water mark beside the key (before it: exit 0, 3 of 8 charges read)
    assert main(["budget", str(led), "--verify"]) == 2
    with pytest.raises(LedgerIntegrityError, match="holds 3 charges.*mark records 8"):
        Ledger(led)
    assert main(["budget", str(led), "--accept-restored"]) == 0  # restored on purpose
    with Ledger(led) as old:
        assert Accountant(old).spent("a", method="basic") == pytest.approx(3.0)  # 8 were spent
    assert main(["budget", str(led), "--verify", "--expect-head", later_head]) == 2

    before = tmp_path / "before-audit"
    shutil.copytree(run, before)
    write_artifact(run, "audit.json", [VIOLATION])
    res = verify_run(run)
    assert res.ok and res.analyses
    shutil.rmtree(run)
    shutil.copytree(before, run)  # the whole folder rolled back: the audit is gone
    assert main(["budget", str(run), "--verify"]) == 2  # its analysis mark (before: 0)
    monkeypatch.setenv("LDP_AUDIT_HEADS", str(tmp_path / "another-machine"))
    assert main(["budget", str(run), "--verify"]) == 0
    assert main(["budget", str(run), "--verify", "--expect-head", res.ledger["chain_head"]]) == 0
    assert main(["budget", str(run), "--verify", "--expect-root", res.root]) == 2


def test_a_folder_at_the_journal_path_is_named(run: Path, capsys: pytest.CaptureFixture) -> None:
    """A folder at ``ledger.sqlite-journal`` (the docs' tamper list: 'exit 2 naming the file')
    made SQLite fail with a bare "disk I/O error" naming only ledger.sqlite: the refusal now
    names the journal path and what to do, for a reader, a writer and the CLI."""
    (run / "ledger.sqlite-journal").mkdir()
    for readonly in (True, False):
        with pytest.raises(LedgerError, match=r"ledger\.sqlite-journal' is not a file.*remove it"):
            Ledger(run / "ledger.sqlite", readonly=readonly)
    capsys.readouterr()
    assert main(["budget", str(run), "--verify"]) == 2
    assert "ledger.sqlite-journal' is not a file" in capsys.readouterr().err


def test_an_edited_manifest_is_named_not_the_file_it_lists(run: Path, capsys) -> None:
    """One byte of manifest.json flipped inside config.json's SHA-256 (session 50's probe):
    the one-line refusal said ``config.json does not match the SHA-256 in manifest.json
    (changed)``, blaming the genuine file; the manifest's failed MAC now comes first."""
    man = run / "manifest.json"
    text = man.read_text()
    digest = json.loads(text)["files"]["config.json"]
    flipped = digest[:10] + ("0" if digest[10] != "0" else "1") + digest[11:]
    man.write_text(text.replace(digest, flipped))
    res = verify_run(run)
    assert "manifest.json does not carry the MAC" in res.problems[0], res.problems
    assert any("config.json does not match" in p for p in res.problems[1:])
    assert main(["budget", str(run), "--verify"]) == 2
    assert "manifest.json does not carry the MAC" in capsys.readouterr().out.splitlines()[0]


def test_a_ledger_switched_to_wal_is_refused_by_readers(run: Path, capsys) -> None:
    """``sqlite3 ledger.sqlite 'PRAGMA journal_mode=WAL'`` (a mode kept in the file's header)
    made every read-only reader (budget --verify, report, verify_run) create
    ``ledger.sqlite-wal`` and ``-shm`` in the run and read them, though nothing checks them and
    the docs say a reader never creates a file (session 50's probe: exit 0, both files made).
    Readers now refuse it naming the mode and the way out; --recover restores the journal."""
    lp = run / "ledger.sqlite"
    with sqlite3.connect(lp) as con:
        assert con.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
    con.close()
    before = sorted(p.name for p in run.iterdir())
    capsys.readouterr()
    assert main(["budget", str(run), "--verify"]) == 2
    assert "is in WAL journal mode" in capsys.readouterr().out
    assert not verify_run(run).ok
    assert sorted(p.name for p in run.iterdir()) == before  # no side file made
    assert main(["budget", str(lp), "--recover"]) == 0
    assert main(["budget", str(run), "--verify"]) == 0


def test_another_runs_manifest_is_named_as_swapped(run: Path, tmp_path: Path) -> None:
    """manifest.json swapped in from another run of the same key (its MAC holds): the first
    problem was 'config.json does not match the SHA-256 in manifest.json (changed)', blaming a
    genuine file (session 50's probe, pgc-a3c runs of seed 1 and 2); it now names the manifest.
    A manifest matching some of the files is left to the per-file lines (ambiguous)."""
    other = RunWriter(tmp_path / "o", algorithm="toy", config={"delta": 0.5}, seed=1)
    Accountant(other.open_ledger()).charge("b", LaplaceEvent(1.0))
    other.write_npz("transcript.npz", {"agent": np.array([7], dtype=np.int64)})
    other.finish()
    shutil.copy(tmp_path / "o" / "manifest.json", run / "manifest.json")
    res = verify_run(run)
    assert "manifest.json is another run's manifest (swapped)" in res.problems[0], res.problems
    assert any("config.json does not match" in p for p in res.problems[1:])
