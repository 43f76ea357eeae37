"""``ldp-audit budget``: text and JSON output, run directories, errors (exit 2)."""

from __future__ import annotations

import argparse
import json

import pytest

from ldp_audit.accountant import (
    Accountant,
    Budget,
    GaussianEvent,
    LaplaceEvent,
    PoissonSampledEvent,
)
from ldp_audit.cli import budget_cmd
from ldp_audit.errors import LdpAuditError


def _main(argv: list[str]) -> int:
    """The dispatch of ``ldp_audit.cli.main`` for the budget subcommand alone."""
    parser = argparse.ArgumentParser(prog="ldp-audit")
    sub = parser.add_subparsers(dest="command")
    budget_cmd.register(sub)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except LdpAuditError as exc:
        print(f"ldp-audit: error: {exc}")
        return 2


@pytest.fixture()
def ledger(tmp_path):
    path = tmp_path / "run" / "ledger.sqlite"
    path.parent.mkdir()
    with Accountant(path, budget=Budget(epsilon=2.0)) as acc:
        acc.charge_many([(f"0/{i}", LaplaceEvent(1.0)) for i in range(30)])
        acc.charge("0/7", LaplaceEvent(0.5))
    with Accountant(path) as acc:
        step = PoissonSampledEvent(0.01, GaussianEvent(1.0))
        acc.charge_many([("dpsgd", step)] * 50, scope="central")
    return path


def test_json_all_agents(ledger, capsys):
    assert _main(["budget", str(ledger), "--json", "--method", "basic"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["charges"] == 81
    assert out["budget"] == {"epsilon": 2.0, "delta": 0.0, "method": "basic"}
    by = {r["agent"]: r for r in out["agents"]}
    assert len(by) == 31
    assert by["0/7"]["epsilon"] == pytest.approx(1.5)
    assert by["0/7"]["remaining"] == pytest.approx(0.5)
    assert by["0/7"]["method"] == "basic" and by["0/7"]["scope"] == "local"
    assert by["dpsgd"]["method"] == "unsupported" and by["dpsgd"]["remaining"] is None
    assert out["summary"]["local"]["max_agent"] == "0/7"
    assert out["summary"]["central"]["agents"] == 1


def test_run_directory_and_agent_detail(ledger, capsys):
    argv = ["budget", str(ledger.parent), "--agent", "dpsgd", "--delta", "1e-5", "--json"]
    assert _main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    (row,) = out["agents"]
    assert row["charges"] == 50 and row["scope"] == "central"
    assert set(row["by_method"]) == {"rdp", "prv", "pld"}
    assert row["epsilon"] == min(row["by_method"].values())
    assert 0 < out["summary"]["central"]["max_epsilon"] < 1.0


def test_text_output_lists_largest_first(ledger, capsys):
    assert _main(["budget", str(ledger), "--delta", "1e-5", "--limit", "2"]) == 0
    text = capsys.readouterr().out
    assert "budget: epsilon 2 per agent" in text
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("agent "))
    assert lines[first + 1].startswith("0/7 ")
    assert "29 more agents" in text
    assert "local" in text and "central" in text


def test_budget_override(ledger, capsys):
    argv = ["budget", str(ledger), "--agent", "0/7", "--budget", "3", "--json", "--method", "basic"]
    assert _main(argv) == 0
    row = json.loads(capsys.readouterr().out)["agents"][0]
    assert row["epsilon"] == pytest.approx(1.5) and row["remaining"] == pytest.approx(1.5)


def test_an_agent_over_the_budget_is_a_violation(ledger, tmp_path, capsys):
    """Session 56: ``budget --budget 1`` printed remaining -0.5 and exited 0; an agent over the
    budget (recorded or --budget) is a violation, exit 1, with the accountant's slack."""
    argv = ["budget", str(ledger), "--method", "basic", "--budget", "1"]
    assert _main([*argv, "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["over_budget"] == ["0/7"]  # 1.5; the rest 1.0
    assert _main(argv) == 1
    assert "VIOLATION: 1 agent spent more than the budget (remaining < 0), e.g. 0/7" in (
        capsys.readouterr().out
    )
    assert _main([*argv[:-1], "1.5"]) == 0  # exactly spent: not over
    assert _main(["budget", str(ledger), "--agent", "0/7", "--budget", "1"]) == 1
    capsys.readouterr()
    tenths = tmp_path / "t.sqlite"  # 0.1 + 0.1 + 0.1 = 0.30000000000000004, accepted when charged
    with Accountant(tenths, budget=0.3) as acc:
        acc.charge_many([("a", LaplaceEvent(0.1))] * 3)
    assert _main(["budget", str(tenths), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["over_budget"] == []


def test_unknown_agent_is_an_error_not_zero_spent(ledger, capsys):
    """A mistyped --agent says "no such agent" (exit 2), never "0 spent"."""
    assert _main(["budget", str(ledger), "--agent", "0/77", "--json"]) == 2
    out = capsys.readouterr().out
    assert "no such agent '0/77'" in out and "'0/0'" in out


def test_verify_and_chain_head(ledger, capsys):
    assert _main(["budget", str(ledger), "--json"]) == 0
    head = json.loads(capsys.readouterr().out)["chain_head"]
    assert len(head) == 64
    assert _main(["budget", str(ledger), "--verify", "--expect-head", head]) == 0
    assert f"chain head {head}" in capsys.readouterr().out
    with Accountant(ledger) as acc:  # a later copy extends the earlier head
        acc.charge("0/1", LaplaceEvent(0.5))
    assert _main(["budget", str(ledger), "--verify", "--expect-head", head]) == 0
    capsys.readouterr()
    other = "ab" * 32
    assert _main(["budget", str(ledger), "--verify", "--expect-head", other]) == 2
    assert "does not extend the chain head" in capsys.readouterr().out
    assert _main(["budget", str(ledger), "--expect-head", head]) == 2  # needs --verify


def test_verify_names_an_edited_row(ledger, capsys):
    import sqlite3

    con = sqlite3.connect(ledger)
    con.execute("UPDATE ldp_audit_charges SET event = replace(event, '1.0', '0.1') WHERE id = 3")
    con.commit()
    con.close()
    assert _main(["budget", str(ledger), "--verify"]) == 2
    assert "row 3 does not match its hash" in capsys.readouterr().out


def test_foreign_sqlite_file_is_refused_untouched(tmp_path, capsys):
    import hashlib
    import sqlite3

    for name, sql in (("app.db", "CREATE TABLE users (name TEXT)"), ("empty.db", None)):
        path = tmp_path / name
        con = sqlite3.connect(path)
        con.execute(sql or "PRAGMA user_version = 7")
        con.commit()
        con.close()
        before = hashlib.sha256(path.read_bytes()).hexdigest()
        assert _main(["budget", str(path)]) == 2
        assert "another application" in capsys.readouterr().out
        assert hashlib.sha256(path.read_bytes()).hexdigest() == before
        assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(name)) == [name]


def test_missing_ledger_is_an_error_not_a_new_file(tmp_path, capsys):
    path = tmp_path / "nothere.sqlite"
    assert _main(["budget", str(path)]) == 2
    assert "does not exist" in capsys.readouterr().out
    assert not path.exists()


def test_foreign_file_exit_2(tmp_path, capsys):
    path = tmp_path / "junk.sqlite"
    path.write_bytes(b"not a database at all" * 10)
    assert _main(["budget", str(path)]) == 2
    assert "junk.sqlite" in capsys.readouterr().out


@pytest.mark.parametrize("bad", [["--delta", "2"], ["--method", "magic"], ["--limit", "-1"]])
def test_bad_arguments_exit_2(ledger, bad):
    with pytest.raises(SystemExit) as info:
        _main(["budget", str(ledger), *bad])
    assert info.value.code == 2


def test_cli_does_not_write(ledger):
    with Accountant(ledger) as acc:
        rows_before, meta_before = acc.ledger.records(), acc.ledger.meta()
    assert _main(["budget", str(ledger), "--json", "--budget", "5"]) == 0
    with Accountant(ledger) as acc:
        assert acc.ledger.records() == rows_before
        assert acc.ledger.meta() == meta_before  # --budget is not written back


def test_central_budget_remaining(tmp_path, capsys):
    path = tmp_path / "l.sqlite"
    step = PoissonSampledEvent(0.01, GaussianEvent(1.0))
    with Accountant(
        path, budget=1.0, central_budget=Budget(epsilon=3.0, delta=1e-5, method="rdp")
    ) as acc:
        acc.charge_many([("dpsgd", step)] * 20, scope="central")
        acc.charge("0/0", LaplaceEvent(0.25))
        used = acc.spent("dpsgd", delta=1e-5, method="rdp")
    assert _main(["budget", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["central_budget"] == {"epsilon": 3.0, "delta": 1e-5, "method": "rdp"}
    by = {r["agent"]: r for r in out["agents"]}
    assert by["dpsgd"]["remaining"] == pytest.approx(3.0 - used)
    assert by["0/0"]["remaining"] == pytest.approx(0.75)


def test_migrate_to_converts_a_version_1_ledger(tmp_path, capsys):
    import sqlite3

    old = tmp_path / "v1.sqlite"
    con = sqlite3.connect(old)
    con.executescript(
        """
        CREATE TABLE ldp_audit_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE ldp_audit_charges (id INTEGER PRIMARY KEY, agent TEXT NOT NULL,
            event TEXT NOT NULL, scope TEXT NOT NULL, time REAL NOT NULL, run_id TEXT);
        INSERT INTO ldp_audit_meta VALUES ('application', 'ldp-audit privacy ledger'),
            ('schema_version', '1');
        INSERT INTO ldp_audit_charges (agent, event, scope, time, run_id) VALUES
            ('x', '{"epsilon":0.5,"type":"pure"}', 'local', 1.0, NULL);
        """
    )
    con.close()
    assert _main(["budget", str(old)]) == 2
    assert "schema version 1" in capsys.readouterr().out
    new = tmp_path / "v2.sqlite"
    assert _main(["budget", str(old), "--migrate-to", str(new)]) == 0
    assert "1 charges" in capsys.readouterr().out
    assert _main(["budget", str(new), "--agent", "x", "--json", "--method", "basic"]) == 0
    assert json.loads(capsys.readouterr().out)["agents"][0]["epsilon"] == 0.5
    assert _main(["budget", str(old), "--migrate-to", str(new)]) == 2  # never overwrites


def test_text_header_is_the_ledgers_totals_with_agent_said_apart(ledger, capsys):
    """The header counts the whole ledger (81 charges, 31 agents) with or without --agent;
    --agent's selection is said apart, in the singular where it is one."""
    assert _main(["budget", str(ledger), "--delta", "1e-5"]) == 0
    assert f"ledger: {ledger}  (81 charges, 31 agents)\n" in capsys.readouterr().out
    assert _main(["budget", str(ledger), "--agent", "dpsgd", "--delta", "1e-5"]) == 0
    head = f"ledger: {ledger}  (81 charges, 31 agents; showing agent dpsgd: 50 charges)\n"
    assert head in capsys.readouterr().out
    assert _main(["budget", str(ledger), "--agent", "0/3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ledger_agents"] == 31
    assert _main(["budget", str(ledger), "--agent", "0/3"]) == 0
    assert "(81 charges, 31 agents; showing agent 0/3: 1 charge)\n" in capsys.readouterr().out
