"""Fault injection: the ledger as evidence. Zero silent under-counts.

Every fault (seeded random byte flips in every region of the file, row edits, deletions and
reorderings through the sqlite3 module, broken per-agent state, a lost journal, kills during
creation) must end in one of two outcomes: a named ``LedgerError``, or every agent's spend at
least its true spend with every charge past a full budget refused. Never a lower number, never a
raw ``sqlite3`` error. Where the file's logical content changed, ``verify()`` must say so.

All randomness is seeded; the assertions are deterministic properties (no false failures).
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ldp_audit.accountant import Accountant, Budget, LaplaceEvent, Ledger, PureDpEvent
from ldp_audit.accountant import ledger_format as LF
from ldp_audit.accountant.ledger_migrate import migrate_v1
from ldp_audit.errors import BudgetExceeded, LedgerError
from tests.ledger_checksums import agent_chk, state_chk

ROOT = Path(__file__).resolve().parents[1]
BUDGET = 2.0
N_AGENTS = 200
FULL = [f"a{i}" for i in range(0, N_AGENTS, 2)]  # spent exactly the budget
TABLES = ("ldp_audit_meta", "ldp_audit_charges", "ldp_audit_state", "ldp_audit_agents")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _build(path: Path) -> dict[str, float]:
    """A ledger of 200 agents, 1,400 interleaved rows; half the agents at the full budget."""
    truth = {f"a{i}": 0.0 for i in range(N_AGENTS)}
    with Accountant(path, budget=Budget(epsilon=BUDGET), run_id="r1") as acc:
        for rnd in range(8):
            batch = []
            for i in range(N_AGENTS):
                a = f"a{i}"
                if a in FULL:
                    batch.append((a, PureDpEvent(0.25)))
                elif rnd < 6:
                    batch.append((a, LaplaceEvent(0.25) if rnd % 2 else PureDpEvent(0.125)))
            acc.charge_many(batch)
            for a, ev in batch:
                truth[a] += ev.epsilon
        acc.charge_many([("central/0", PureDpEvent(1.0))] * 3, scope="central")
    return truth


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    path = tmp_path_factory.mktemp("faults") / "ledger.sqlite"
    truth = _build(path)
    return path, truth, _dump(path)


def _dump(path: Path) -> object:
    """The file's logical content, read with plain sqlite3 (or the error it raises)."""
    try:
        con = sqlite3.connect(Path(path).resolve().as_uri() + "?mode=ro", uri=True)
        con.text_factory = bytes  # a flip may leave a TEXT value that is not UTF-8
        try:
            out = []
            for t in (*TABLES, "ldp_audit_head"):
                out.append(sorted(map(repr, con.execute(f"SELECT * FROM {t}").fetchall())))
            return out
        finally:
            con.close()
    except (sqlite3.Error, UnicodeDecodeError) as exc:  # e.g. a column name made non-UTF-8
        return f"unreadable: {exc}"


def _observe(path: Path, truth: dict[str, float]) -> str:
    """Open, read every spend, try one charge past each full budget; assert no under-count.

    Returns "error" (a LedgerError was raised: the fault was detected) or "ok" (every number
    was at least the truth and every over-budget charge was refused).
    """
    try:
        with Ledger(path, create=False) as led:
            acc = Accountant(led)
            spent = acc.spent_all(method="basic", scope="local")
            for a, want in truth.items():
                got = spent.get(a, 0.0)
                assert got >= want - 1e-9, f"silent under-count: {a} reads {got}, spent {want}"
                assert acc.spent(a, method="basic") >= want - 1e-9
            assert acc.budget is not None and acc.budget.epsilon <= BUDGET
            for a in FULL[::10]:
                with pytest.raises(BudgetExceeded):
                    acc.charge(a, PureDpEvent(0.25))
        return "ok"
    except LedgerError:
        return "error"


def _verify_detects(path: Path) -> bool:
    try:
        with Ledger(path, create=False, verify=False) as led:
            led.verify()
        return False
    except LedgerError:
        return True


def _page_map(path: Path) -> tuple[int, dict[int, str]]:
    con = sqlite3.connect(path)
    try:
        size = con.execute("PRAGMA page_size").fetchone()[0]
        pages = dict(con.execute("SELECT pageno, name FROM dbstat").fetchall())
    finally:
        con.close()
    return size, pages


def test_no_wal_and_the_main_file_alone_is_complete(built, tmp_path):
    """Every committed charge is in the main file: a copy of that one file is a full backup."""
    path, truth, dump = built
    assert not Path(f"{path}-wal").exists()
    copy = tmp_path / "copy.sqlite"
    shutil.copyfile(path, copy)  # the main file only
    assert _dump(copy) == dump
    assert _observe(copy, truth) == "ok"
    with Ledger(copy) as led:
        assert led.verify()["rows"] == 1403


def test_random_byte_flips_in_every_region(built, tmp_path):
    """Seeded flips on every page of the file (header, schema, each table, each index)."""
    path, truth, dump = built
    size, pages = _page_map(path)
    data = path.read_bytes()
    n_pages = len(data) // size
    rng = np.random.default_rng(20261123)
    outcomes: dict[str, dict[str, int]] = {}
    for pageno in range(1, n_pages + 1):
        region = pages.get(pageno, "free")
        base = (pageno - 1) * size
        hdr = base + (100 if pageno == 1 else 0)
        content = int.from_bytes(data[hdr + 5 : hdr + 7], "big") or size  # cell content start
        if region == "free" or content >= size:
            content = 0
        # anywhere on the page, and (where cells are) inside the cells themselves
        offsets = [int(x) for x in rng.integers(0, size, 2)]
        offsets += [int(x) for x in rng.integers(content, size, 2 if content == 0 else 6)]
        if pageno == 1:
            offsets += [int(x) for x in rng.integers(0, 100, 6)]  # the database header
        for off in offsets:
            bad = bytearray(data)
            bad[base + off] ^= int(rng.integers(1, 256))
            copy = tmp_path / f"p{pageno}_{off}.sqlite"
            copy.write_bytes(bytes(bad))
            changed = _dump(copy) != dump
            outcome = _observe(copy, truth)  # asserts: no silent under-count
            if changed:
                assert _verify_detects(copy), f"page {pageno} ({region}) +{off}: not detected"
            stat = outcomes.setdefault(region, {"error": 0, "ok": 0})
            stat[outcome] += 1
            copy.unlink()
    # every region of the file was hit
    for name in (*TABLES, "sqlite_schema", "ldp_audit_head", "sqlite_autoindex_ldp_audit_meta_1"):
        assert name in outcomes, f"no flip landed in {name}: {sorted(outcomes)}"
    for name in (*TABLES, "sqlite_schema", "ldp_audit_head"):
        assert outcomes[name]["error"] > 0, (name, outcomes[name])


def _edit(path: Path, *sql: tuple[str, tuple]) -> None:
    con = sqlite3.connect(path)
    for q, p in sql:
        con.execute(q, p)
    con.commit()
    con.close()


_EDITS = {
    # (statements, detected on open?)
    "edit_middle_row": ([("UPDATE ldp_audit_charges SET event = ? WHERE id = 100", ("{}",))], 0),
    "edit_tail_row": ([("UPDATE ldp_audit_charges SET event = ? WHERE id = 1403", ("{}",))], 1),
    "delete_middle_row": ([("DELETE FROM ldp_audit_charges WHERE id = 500", ())], 0),
    "delete_last_row": ([("DELETE FROM ldp_audit_charges WHERE id = 1403", ())], 1),
    "reorder_rows": (
        [
            ("UPDATE ldp_audit_charges SET id = -1 WHERE id = 300", ()),
            ("UPDATE ldp_audit_charges SET id = 300 WHERE id = 301", ()),
            ("UPDATE ldp_audit_charges SET id = 301 WHERE id = -1", ()),
        ],
        0,
    ),
    "lower_a_count": ([("UPDATE ldp_audit_state SET n = n - 1 WHERE agent = 'a0'", ())], 1),
    "forget_an_agent": (
        [
            ("DELETE FROM ldp_audit_state WHERE agent = 'a0'", ()),
            ("DELETE FROM ldp_audit_agents WHERE agent = 'a0'", ()),
        ],
        1,
    ),
    "raise_the_budget": (
        [("UPDATE ldp_audit_meta SET value = replace(value, '2.0', '9.0') WHERE key='budget'", ())],
        1,
    ),
    "append_outside": (
        [
            (
                "INSERT INTO ldp_audit_charges (agent, event, scope, time, run_id, agent_n, hash)"
                " VALUES ('a1', '{}', 'local', 0, NULL, 99, x'00')",
                (),
            )
        ],
        1,
    ),
}


@pytest.mark.parametrize("name", sorted(_EDITS))
def test_row_edits_through_sqlite3_are_detected(built, tmp_path, name):
    path, truth, _ = built
    copy = tmp_path / "l.sqlite"
    shutil.copyfile(path, copy)
    statements, on_open = _EDITS[name]
    _edit(copy, *statements)
    outcome = _observe(copy, truth)  # never an under-count
    if on_open:
        assert outcome == "error"
        with pytest.raises(LF.LedgerIntegrityError):
            Ledger(copy, create=False)
    assert _verify_detects(copy)


def test_consistent_state_edit_is_caught_by_the_chained_row(built, tmp_path):
    """Lower an agent's state AND its total with valid checksums: its last chained row differs."""
    path, truth, _ = built
    copy = tmp_path / "l.sqlite"
    shutil.copyfile(path, copy)
    led = Ledger(copy)  # opened (and verified) before the edit, as a long-running trainer
    con = sqlite3.connect(copy)
    (n, last) = con.execute("SELECT n, last_id FROM ldp_audit_agents WHERE agent='a0'").fetchone()
    ev = con.execute("SELECT event FROM ldp_audit_state WHERE agent='a0'").fetchone()[0]
    con.execute(
        "UPDATE ldp_audit_state SET n = 1, chk = ? WHERE agent = 'a0'",
        (state_chk("a0", "local", ev, 1),),
    )
    con.execute(
        "UPDATE ldp_audit_agents SET n = 1, chk = ? WHERE agent = 'a0'",
        (agent_chk("a0", 1, last),),
    )
    con.commit()
    con.close()
    acc = Accountant(led)
    with pytest.raises(LF.LedgerIntegrityError, match="a0"):
        acc.charge("a0", PureDpEvent(0.25))  # the budget check reads only verified state
    with pytest.raises(LF.LedgerIntegrityError, match="a0"):
        acc.spent("a0")
    led.close()
    assert n == 8


def test_broken_agent_lookup_refuses_the_charge(built, tmp_path):
    """An agent's total row vanishes under an open ledger: a charge must not see a new agent."""
    path, truth, _ = built
    copy = tmp_path / "l.sqlite"
    shutil.copyfile(path, copy)
    acc = Accountant(copy)
    _edit(copy, ("DELETE FROM ldp_audit_agents WHERE agent = 'a2'", ()))
    with pytest.raises(LF.LedgerIntegrityError, match="a2"):
        acc.charge("a2", PureDpEvent(0.25))
    with pytest.raises(LF.LedgerIntegrityError):
        acc.spent_all(method="basic")
    acc.close()


_HALF_WRITTEN = r"""
import os, sys
from ldp_audit.accountant import Ledger
led = Ledger(sys.argv[1])
led.store.connection.execute("PRAGMA cache_size = 2")  # spill pages into the main file early
with led.transaction():
    led.charge_rows([(f"new/{i}", '{"epsilon":0.5,"type":"pure"}', "local") for i in range(3000)]
                    + [("a0", '{"epsilon":0.01,"type":"pure"}', "local")])
    os._exit(0)  # dies inside the transaction: the journal is hot, the main file half-written
"""


def test_lost_hot_journal_is_detected_or_harmless(built, tmp_path):
    path, truth, _ = built
    copy = tmp_path / "l.sqlite"
    shutil.copyfile(path, copy)
    subprocess.run([sys.executable, "-c", _HALF_WRITTEN, str(copy)], env=_env(), check=True)
    journal = Path(f"{copy}-journal")
    assert journal.exists() and journal.stat().st_size > 0
    keep = tmp_path / "with_journal.sqlite"
    shutil.copyfile(copy, keep)
    shutil.copyfile(journal, f"{keep}-journal")
    journal.unlink()  # the journal is lost: the half-written transaction cannot be rolled back
    assert _observe(copy, truth) == "error"
    # with its journal the file rolls back to exactly the committed state
    assert _observe(keep, truth) == "ok"
    with Ledger(keep) as led:
        assert led.verify()["rows"] == 1403


_CREATOR = r"""
import os, signal, sys
from ldp_audit.accountant import ledger as L
real_link = os.link
def die(*a, **k):
    os.kill(os.getpid(), signal.SIGKILL)  # killed after the temp file, before the link
os.link = die
L.Ledger(sys.argv[1])
"""


def test_kill_during_creation_leaves_no_temp_file(tmp_path):
    path = tmp_path / "ledger.sqlite"
    proc = subprocess.run([sys.executable, "-c", _CREATOR, str(path)], env=_env())
    assert proc.returncode == -signal.SIGKILL
    assert not path.exists()
    left = [p.name for p in tmp_path.iterdir()]
    assert len(left) == 1 and ".ldp-creating." in left[0]  # the kill left one temp file ...
    with Ledger(path) as led:  # ... which the next open of a ledger in that folder removes
        assert len(led) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ledger.sqlite"]


_LOOP = r"""
import sys
from ldp_audit.accountant import Ledger
d = sys.argv[1]
print("ready", flush=True)
for i in range(10**6):
    Ledger(f"{d}/l{i}.sqlite").close()
"""


def test_random_kills_during_creation(tmp_path):
    """Kill a process creating ledgers at seeded random moments: every file opens or is absent."""
    rng = np.random.default_rng(7)
    for rnd in range(4):
        d = tmp_path / f"r{rnd}"
        d.mkdir()
        proc = subprocess.Popen(
            [sys.executable, "-c", _LOOP, str(d)], stdout=subprocess.PIPE, text=True, env=_env()
        )
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(float(rng.uniform(0.05, 0.3)))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        ledgers = sorted(p for p in d.iterdir() if p.name.endswith(".sqlite"))
        for p in ledgers:
            with Ledger(p, create=False) as led:  # every ledger that exists is whole
                assert len(led) == 0
        Ledger(d / "next.sqlite").close()  # the next open in that folder sweeps dead temps
        assert all(p.name.endswith(".sqlite") for p in d.iterdir()), sorted(os.listdir(d))


def test_schema_version_1_refused_by_name_and_migrated_explicitly(tmp_path, monkeypatch):
    old = tmp_path / "v1.sqlite"
    con = sqlite3.connect(old)
    con.executescript(
        """
        CREATE TABLE ldp_audit_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE ldp_audit_charges (id INTEGER PRIMARY KEY, agent TEXT NOT NULL,
            event TEXT NOT NULL, scope TEXT NOT NULL, time REAL NOT NULL, run_id TEXT);
        INSERT INTO ldp_audit_meta VALUES ('application', 'ldp-audit privacy ledger'),
            ('schema_version', '1'), ('created', '0'),
            ('budget', '{"adaptive": false, "delta": 0.0, "epsilon": 1.0, "method": "basic"}');
        INSERT INTO ldp_audit_charges (agent, event, scope, time, run_id) VALUES
            ('x', '{"epsilon":0.5,"type":"pure"}', 'local', 1.0, 'r'),
            ('x', '{"epsilon":0.25,"type":"pure"}', 'local', 2.0, 'r'),
            ('y', '{"epsilon":0.5,"type":"pure"}', 'central', 3.0, NULL);
        """
    )
    con.close()
    before = old.read_bytes()
    with pytest.raises(LF.LedgerSchemaError, match="schema version 1.*migrate"):
        Ledger(old)
    new = tmp_path / "v2.sqlite"
    led = migrate_v1(old, new)
    assert old.read_bytes() == before  # the source is never changed
    acc = Accountant(led)
    assert acc.spent("x", method="basic") == pytest.approx(0.75)
    assert acc.budget == Budget(epsilon=1.0)
    with pytest.raises(BudgetExceeded):
        acc.charge("x", PureDpEvent(0.5))
    assert led.verify()["rows"] == 3
    assert [r["time"] for r in led.records()] == [1.0, 2.0, 3.0]
    led.close()
    with pytest.raises(LedgerError, match="exists"):
        migrate_v1(old, new)
    # session 58 probe: a migration interrupted (Ctrl-C) after the new file was created left an
    # empty keyed ledger there (zero spend, no sign of the migration) that the rerun refused as
    # "exists"; now it is removed, and the rerun migrates
    again = tmp_path / "v2b.sqlite"

    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(Ledger, "_seal_meta", interrupted)
    with pytest.raises(KeyboardInterrupt):
        migrate_v1(old, again)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v1.sqlite", "v2.sqlite"]
    with migrate_v1(old, again) as led:
        assert led.verify()["rows"] == 3


_WRITER = r"""
import sys
from ldp_audit.accountant import Accountant, Budget, PureDpEvent
from ldp_audit.errors import BudgetExceeded
path, wid, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
acc = Accountant(path, budget=Budget(epsilon=1.0))
ok = 0
for i in range(n):
    acc.charge_many([(f"own/{wid}/{i}", PureDpEvent(0.5)), (f"own/{wid}/{i}b", PureDpEvent(0.5))])
    try:
        acc.charge("shared", PureDpEvent(0.05))
        ok += 1
    except BudgetExceeded:
        pass
print(ok)
"""

_READER = r"""
import sys, time
from ldp_audit.accountant import Accountant
acc = Accountant(sys.argv[1])
t_end = time.monotonic() + float(sys.argv[2])
reads = 0
while time.monotonic() < t_end:
    spent = acc.spent_all(method="basic")
    assert spent.get("shared", 0.0) <= 1.0 + 1e-9, spent["shared"]
    acc.ledger.states(["shared"])
    reads += 1
print(reads)
"""


def test_eight_processes_with_readers_never_overspend(tmp_path):
    """6 writers and 2 bulk readers on one ledger: nothing lost, no error, exactly the budget."""
    path = tmp_path / "l.sqlite"
    Accountant(path, budget=Budget(epsilon=1.0)).close()
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(path), str(w), "25"],
            stdout=subprocess.PIPE,
            text=True,
            env=_env(),
        )
        for w in range(6)
    ]
    readers = [
        subprocess.Popen(
            [sys.executable, "-c", _READER, str(path), "4"],
            stdout=subprocess.PIPE,
            text=True,
            env=_env(),
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300)[0] for p in writers + readers]
    assert all(p.returncode == 0 for p in writers + readers), outs
    granted = sum(int(o.strip()) for o in outs[:6])
    assert all(int(o.strip()) > 0 for o in outs[6:])  # the readers did read meanwhile
    with Ledger(path, verify="full") as led:
        acc = Accountant(led)
        assert granted == 20  # 20 x 0.05 = the budget of 1.0, never more
        assert acc.spent("shared", method="basic") == pytest.approx(1.0)
        assert len(led) == 6 * 25 * 2 + 20
