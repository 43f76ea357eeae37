"""``ldp-audit train pgc-a3c`` and ``ldp-audit reproduce pgc-a3c``."""

from __future__ import annotations

import argparse
import json
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from ldp_audit.cli import system_cmd, train_cmd
from ldp_audit.errors import LdpAuditError


def _run(argv: list[str]) -> int:
    """Parse and dispatch like ``ldp_audit.cli.main`` with only this module registered."""
    parser = argparse.ArgumentParser(prog="ldp-audit")
    sub = parser.add_subparsers(dest="command")
    sub.required = True
    train_cmd.register(sub)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except LdpAuditError as exc:
        print(f"ldp-audit: error: {exc}", file=sys.stderr)
        return 2


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "pgc-a3c", "--mechanism", "gauss", "--epsilon", "1"],
        ["train", "pgc-a3c", "--mechanism", "laplace", "--epsilon", "-1"],
        ["train", "pgc-a3c", "--mechanism", "laplace", "--epsilon", "nan"],
        ["train", "pgc-a3c", "--mechanism", "prs", "--epsilon", "1", "--trials", "0"],
        ["train", "pgc-a3c", "--mechanism", "prs", "--epsilon", "1", "--seed", "x"],
        ["reproduce", "pgc-a3c", "--trials", "0"],
        ["reproduce", "other"],
    ],
)
def test_usage_errors_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        _run(argv)
    assert exc.value.code == 2
    assert "error" in capsys.readouterr().err


def test_missing_epsilon_is_a_usage_error(capsys):
    assert _run(["train", "pgc-a3c", "--mechanism", "laplace", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "--epsilon is required with --mechanism laplace" in err
    assert _run(["train", "pgc-a3c", "--mechanism", "none", "--epsilon", "2"]) == 2
    assert "--epsilon must be omitted or inf" in capsys.readouterr().err


def test_reproduce_cli_writes_report(tmp_path, monkeypatch, capsys):
    from ldp_audit.training.pgc_a3c import reproduce

    seen = {}

    def fake(configs, seeds, **kw):
        assert len(set(seeds)) == len(configs)
        seen.update(workers=kw["workers"], acting={c.acting for c in configs}.pop())
        out = []
        for c in configs:
            z = np.zeros((c.trials, c.max_submissions))
            z[:, 20:] = 200.0  # every trial: FST 21
            out.append(SimpleNamespace(zeta=z))
        return out

    monkeypatch.setattr(reproduce, "engine_grid", fake)
    out = tmp_path / "rep"
    rc = _run(
        [
            "reproduce",
            "pgc-a3c",
            "--trials",
            "2",
            "--max-submissions",
            "100",
            "--out",
            str(out),
            "--workers",
            "3",
            "--acting",
            "sample",
            "--no-progress",
            "--json",
        ]
    )
    assert rc == 0
    assert seen == {"workers": 3, "acting": "sample"}
    printed = json.loads(capsys.readouterr().out)
    assert printed["config"]["trials"] == 2 and printed["config"]["max_submissions"] == 100
    assert printed["config"]["stop_at_target"] is True  # the default; --no-stop-at-target: off
    assert printed["settings"]["prs-eps5-B100"]["fst"] == [21.0, 21.0]
    assert sorted(p.name for p in out.iterdir()) == [
        "README.md",
        "figure2.png",
        "figure3.png",
        "results.json",
        "tables.md",
    ]


def test_train_cli_real_engine_writes_run_dir(tmp_path, capsys, monkeypatch):
    pytest.importorskip("ldp_audit.training.pgc_a3c")
    run = tmp_path / "run"
    argv = ["train", "pgc-a3c", "--mechanism", "laplace", "--epsilon", "2", "--trials", "2"]
    argv += ["--max-submissions", "40", "--seed", "3", "--no-progress", "--json"]
    assert _run([*argv, "--out", str(run)]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["mechanism"] == "laplace" and first["epsilon"] == 2.0 and first["trials"] == 2
    assert len(first["fst"]) == 2 and first["horizon"] == 40.0
    assert 0.0 <= first["success_ratio"] <= 1.0
    for name in ("config.json", "transcript.npz", "ledger.sqlite", "metrics.json"):
        assert (run / name).exists(), name
    # seeded: the same command gives the same scores; without --out it keeps its run in
    # runs/pgc-a3c-<timestamp> (as the other trainers)
    monkeypatch.chdir(tmp_path)
    assert _run(argv) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["run_dir"].startswith("runs/pgc-a3c-")
    assert (tmp_path / second["run_dir"] / "config.json").is_file()
    assert second["final_mean_mu"] == first["final_mean_mu"]
    assert second["fst"] == first["fst"]


# ---------------------------------------------------------------- options generated from the config
_GENERATED = {
    "--acting": "acting",
    "--stop-at-target": "stop_at_target",
    "--clip-kind": "clip_kind",
    "--aggregator": "aggregator",
    "--aggregator-lr": "aggregator_lr",
    "--target": "target",
}


def _train_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ldp-audit")
    sub = parser.add_subparsers(dest="command")
    train_cmd.register(sub)
    return parser


def test_generated_options_come_from_the_config():
    """Options generated from PgcA3cConfig: its field docs are the help, its defaults fill the
    options not given (ldp_audit.config); --mechanism is generated as a required option, and
    the fields whose command-line form differs (--epsilon, --trials, --rounds,
    --max-submissions) stay hand-written with their own defaults."""
    import dataclasses

    from ldp_audit.config import field_docs
    from ldp_audit.training.pgc_a3c.config import PgcA3cConfig

    parser = _train_parser()
    tsub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    train = tsub.choices["train"]
    psub = next(a for a in train._actions if isinstance(a, argparse._SubParsersAction))
    p = psub.choices["pgc-a3c"]
    dests = {o: a.dest for a in p._actions for o in a.option_strings}
    group = next(g for g in p._action_groups if "generated" in (g.title or ""))
    assert {o for a in group._group_actions for o in a.option_strings} == {
        *_GENERATED,
        "--no-stop-at-target",
    }
    for opt, name in _GENERATED.items():
        assert dests[opt] == name, opt
    help_text = " ".join(p.format_help().split())
    doc = field_docs(PgcA3cConfig)["acting"]
    assert doc.split(":")[0] in help_text
    args = parser.parse_args(["train", "pgc-a3c", "--mechanism", "none"])
    defaults = {f.name: f.default for f in dataclasses.fields(PgcA3cConfig)}
    for name in _GENERATED.values():
        assert getattr(args, name) == defaults[name], name
    assert args.trials == 1 and args.epsilon is None  # the CLI's own defaults
    given = parser.parse_args(
        ["train", "pgc-a3c", "--mechanism", "none", "--acting", "sample", "--stop-at-target",
         "--aggregator", "adam", "--aggregator-lr", "0.25", "--target", "literal-eq18"]
    )  # fmt: skip
    assert (given.acting, given.stop_at_target, given.aggregator) == ("sample", True, "adam")
    assert (given.aggregator_lr, given.target, given.clip_kind) == (0.25, "literal-eq18", "l1")


@pytest.mark.parametrize(
    ("opt", "value"),
    [
        ("--acting", "greedy"),
        ("--clip-kind", "l2"),
        ("--aggregator", "sgdx"),
        ("--aggregator-lr", "0"),
        ("--aggregator-lr", "nan"),
        ("--aggregator-lr", "-1"),
        ("--target", "literal"),
    ],
)
def test_generated_options_refuse_bad_values(opt, value, capsys, monkeypatch):
    """A bad value exits 2 naming the option and the value, before any training."""

    def boom(*a, **k):  # pragma: no cover - reached only if validation failed to stop the run
        raise AssertionError("training started")

    monkeypatch.setattr(system_cmd, "_generic_train", boom)
    with pytest.raises(SystemExit) as exc:
        _run(["train", "pgc-a3c", "--mechanism", "laplace", "--epsilon", "1", opt, value])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert opt in err and repr(value) in err, err


def test_reproduce_generates_the_reading_options(capsys):
    """``reproduce pgc-a3c``: the readings and --acting are generated from PgcA3cConfig (config
    defaults when not given); its --stop-at-target stays hand-written, on by default."""
    parser = _train_parser()
    args = parser.parse_args(["reproduce", "pgc-a3c"])
    assert (args.acting, args.clip_kind, args.aggregator) == ("argmax", "l1", "sgd")
    assert (args.aggregator_lr, args.target, args.stop_at_target) == (None, "engine", True)
    args = parser.parse_args(["reproduce", "pgc-a3c", "--no-stop-at-target", "--acting", "sample"])
    assert (args.acting, args.stop_at_target) == ("sample", False)
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["reproduce", "pgc-a3c", "--target", "eq18"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--target" in err and "'eq18'" in err, err
