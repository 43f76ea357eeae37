"""``ldp-audit train pgc-a3c``: the learning constants (eta, gamma, lam, beta, alpha_start,
alpha_decay) and the engine's clip, buffer_size, reduced_dim, window and target_score are options
generated from ``PgcA3cConfig`` (issue 25, "Configs are the CLI"): their bounds, written once in
the config and justified in the field docs, are checked by the command line (exit 2 naming the
option, before any work) and by the config itself; the learning constants given reach the
CartPole engine's config and the Gymnasium trainer's, the engine's options the engine's only."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from ldp_audit.cli import main
from ldp_audit.config import field_docs
from ldp_audit.errors import InvalidParameterError
from ldp_audit.training.pgc_a3c.config import PgcA3cConfig
from tests.cli_capture import hand_over, handed, subcommand_parser

LEARNING = ("eta", "gamma", "lam", "beta", "alpha_start", "alpha_decay")
ENGINE = ("clip", "buffer_size", "reduced_dim", "window", "target_score")
TINY = ["train", "pgc-a3c", "--mechanism", "laplace", "--epsilon", "1", "--max-submissions", "20"]


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> None:
    import ldp_audit.training.pgc_a3c.grid as pgc  # train replaced where it is defined
    import ldp_audit.training.pgc_a3c_gym.trainer as gym

    hand_over(monkeypatch, (pgc, "train"), (gym, "train"))


def _config_of(argv: list[str]) -> Any:
    return handed([*argv, "--no-progress"])


def _train_parser() -> argparse.ArgumentParser:
    return subcommand_parser("train", "pgc-a3c")


def test_each_learning_constant_is_a_bounded_documented_option() -> None:
    p = _train_parser()
    text = " ".join(p.format_help().split())
    docs = field_docs(PgcA3cConfig)
    fields = {f.name: f for f in dataclasses.fields(PgcA3cConfig)}
    for name in LEARNING:
        opt = "--" + name.replace("_", "-")
        assert opt in p._option_string_actions, opt
        b = fields[name].metadata["ldp_audit"]
        assert b["maximum"] is not None and b["minimum"] is not None, name  # both ends
        assert "in (" in docs[name] or "in [" in docs[name], name  # the doc states the range
    for name in ENGINE:
        assert "--" + name.replace("_", "-") in p._option_string_actions, name
    # every field has its bounds in its metadata (the bool stop_at_target needs none)
    assert [f for f, v in fields.items() if "ldp_audit" not in v.metadata] == ["stop_at_target"]
    assert "(> 0, <= 1000; default: 0.5)" in text  # --eta
    assert "(> 0, <= 1; default: 0.99)" in text  # --gamma
    assert "(>= 0, <= 1000; default: 0.01)" in text  # --beta


def test_no_constant_given_keeps_the_papers(captured: None) -> None:
    cfg = _config_of(TINY)
    paper = PgcA3cConfig()
    assert all(getattr(cfg, n) == getattr(paper, n) for n in LEARNING)


def test_the_constants_given_reach_the_config(captured: None) -> None:
    argv = [*TINY, "--eta", "0.25", "--gamma", "1", "--lam", "1000", "--beta", "0"]
    cfg = _config_of([*argv, "--alpha-start", "0", "--alpha-decay", "1e12"])
    assert (cfg.eta, cfg.gamma, cfg.lam, cfg.beta) == (0.25, 1.0, 1000.0, 0.0)
    assert (cfg.alpha_start, cfg.alpha_decay) == (0.0, 1e12)
    assert cfg.effective_aggregator_lr == 0.25  # eta is the SGD step


def test_the_engines_options_reach_its_config(captured: None) -> None:
    prs = [*TINY[:3], "prs", *TINY[4:]]
    argv = [*prs, "--clip", "0.5", "--buffer-size", "7", "--reduced-dim", "112", "--window", "3"]
    cfg = _config_of([*argv, "--target-score", "-1e-3"])  # a minus value is a value
    assert (cfg.clip, cfg.buffer_size, cfg.reduced_dim) == (0.5, 7, 112)
    assert (cfg.window, cfg.target_score, cfg.mechanism) == (3, -1e-3, "prs")
    cfg = _config_of([*TINY, "--clip", "none", "--buffer-size", "none"])
    assert (cfg.clip, cfg.buffer_size, cfg.effective_clip) == (None, None, 0.01)  # the paper's
    assert all(getattr(_config_of(TINY), n) == getattr(PgcA3cConfig(), n) for n in ENGINE)
    # CartPole-v1's gravity through --env is the engine: its options apply there too
    gym = ["--env", "CartPole-v1", "--private-param", "gravity=9.7,9.9"]
    cfg = _config_of([*TINY, *gym, "--window", "4", "--clip", "0.02"])
    assert (cfg.window, cfg.clip, cfg.gravities) == (4, 0.02, (9.7, 9.9))


def test_the_constants_reach_the_gymnasium_trainer(captured: None) -> None:
    pytest.importorskip("gymnasium")
    from ldp_audit.training.pgc_a3c_gym.config import GymPgcConfig

    argv = [*TINY, "--env", "Acrobot-v1", "--private-param", "LINK_MASS_1=0.5,1"]
    cfg = _config_of([*argv, "--eta", "0.125", "--alpha-decay", "90", "--beta", "0.5"])
    assert isinstance(cfg, GymPgcConfig)
    assert (cfg.eta, cfg.alpha_decay, cfg.beta, cfg.gamma) == (0.125, 90.0, 0.5, 0.99)


@pytest.mark.parametrize(
    ("argv", "needles"),
    [
        (["--eta", "0"], ("--eta must be a finite number in (0, 1000], got '0'",)),
        (["--eta", "1000.5"], ("--eta must be a finite number in (0, 1000], got '1000.5'",)),
        (["--eta", "nan"], ("--eta", "'nan'")),
        (["--eta", "-inf"], ("--eta", "'-inf'")),  # a minus value is a value, refused by name
        (["--eta", "1e-320"], ("--eta", "normal double")),
        (["--gamma", "0"], ("--gamma must be a finite number in (0, 1], got '0'",)),
        (["--gamma", "1.01"], ("--gamma", "(0, 1]", "1.01")),
        (["--lam", "0"], ("--lam must be a finite number in (0, 1000], got '0'",)),
        (["--lam", "1e4"], ("--lam must be a finite number in (0, 1000], got '1e4'",)),
        (["--beta", "-0.1"], ("--beta must be a finite number in [0, 1000], got '-0.1'",)),
        (["--beta", "inf"], ("--beta must be a finite number in [0, 1000], got 'inf'",)),
        (["--beta", "1001"], ("--beta must be a finite number in [0, 1000], got '1001'",)),
        (["--alpha-start", "1.5"], ("--alpha-start must be a finite number in [0, 1], got '1.5'",)),
        (["--alpha-decay", "0"], ("--alpha-decay must be a finite number in (0, 1e+12], got '0'",)),
        (["--alpha-decay", "2e12"],
         ("--alpha-decay must be a finite number in (0, 1e+12], got '2e12'",)),
        (["--alpha-decay", "1_0"], ("--alpha-decay", "'1_0'")),
        (["--clip", "0"], ("--clip must be a finite number in (0, inf), got '0'",)),
        (["--clip", "inf"], ("--clip", "'inf'")),
        (["--clip", "1e300"], ("--clip", "could move by")),  # noisy steps would overflow
        (["--buffer-size", "0"], ("--buffer-size must be an integer >= 1, got '0'",)),
        (["--reduced-dim", "113"], ("--reduced-dim must be <= 112, got '113'",)),
        (["--reduced-dim", "3"], ("--reduced-dim applies to --mechanism='prs' only",)),
        (["--window", "0"], ("--window must be an integer >= 1, got '0'",)),
        (["--target-score", "nan"], ("--target-score", "'nan'")),
        (["--budget", "1"], ("unrecognized arguments: --budget",)),  # no option: see train_cmd
        (["--env", "Acrobot-v1", "--private-param", "LINK_MASS_1=0.5,1", "--clip", "1",
          "--window", "3"], ("--clip, --window: options of the CartPole engine",)),
        # CartPole's gravity runs on the engine: named as given (it said --gravities, which
        # train pgc-a3c has not); 1e100 trained until its float32 observation overflowed
        # (2026-12-07: exit 2 mid-run, "values must be finite; found nan", the run interrupted)
        (["--env", "CartPole-v1", "--private-param", "gravity=-9.8,9.8"],
         ("--private-param gravity", "physical constant", "-9.8")),
        (["--env", "CartPole-v1", "--private-param", "gravity=1e100,9.8"],
         ("--private-param gravity", "1e+100", "<= 1e+30")),
    ],
)  # fmt: skip
def test_bad_constants_exit_2_by_name_before_any_work(
    argv: list[str],
    needles: tuple[str, ...],
    captured: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "run"
    try:  # argparse exits 2; a refusal after parsing (InvalidParameterError) returns 2
        code = main([*TINY, *argv, "--out", str(out)])
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    assert code == 2, err
    for needle in needles:
        assert needle in err, (needle, err)
    assert not out.exists()


@pytest.mark.parametrize(
    ("name", "ok", "bad"),
    [
        ("eta", 1000.0, 1000.5),
        ("lam", 1000.0, 1000.5),
        ("beta", 1000.0, 1000.5),
        ("alpha_decay", 1e12, 1.5e12),
        ("gamma", 1.0, 1.0 + 1e-12),
        ("alpha_start", 1.0, 1.0 + 1e-12),
    ],
)
def test_the_configs_check_the_same_bounds_in_the_same_words(
    name: str, ok: float, bad: float
) -> None:
    """A Python caller (no argparse) meets the bounds the option shows; the Gymnasium config
    refuses with the same message (one check, shared)."""
    from ldp_audit.training.pgc_a3c_gym.config import GymPgcConfig

    base = dict(env_id="MountainCar-v0", private_param="force", values=(0.0008, 0.001))
    assert getattr(PgcA3cConfig(**{name: ok}), name) == ok
    with pytest.raises(InvalidParameterError) as cartpole:
        PgcA3cConfig(**{name: bad})
    with pytest.raises(InvalidParameterError) as gym:
        GymPgcConfig(**base, **{name: bad})
    assert name in str(cartpole.value) and str(cartpole.value) == str(gym.value)


def test_a_cartpole_gravity_that_overflows_the_engine_is_refused_by_the_config() -> None:
    """A Python caller meets the engine's gravity cap too (its observations are float32)."""
    from ldp_audit.training.pgc_a3c.config import GRAVITY_MAX

    assert PgcA3cConfig(gravities=(GRAVITY_MAX, 9.8)).gravities == (GRAVITY_MAX, 9.8)
    for key in ("gravities", "agent_gravities"):
        with pytest.raises(InvalidParameterError, match=key):
            PgcA3cConfig(**{key: (1e100, 9.8)})


def test_a_numpy_integer_is_refused_saying_which_type_the_field_takes() -> None:
    """PgcA3cConfig(trials=np.int64(3)) said "trials must be an integer >= 1, got np.int64(3)"
    until session 55 (GymPgcConfig's n_agents alike), where train(cfg, seed=np.int64(0)) is
    taken: the refusal now names the type and the cast."""
    import numpy as np

    with pytest.raises(
        InvalidParameterError, match=r"got np.int64\(3\) \(int64: give a Python int"
    ):
        PgcA3cConfig(trials=np.int64(3))
    with pytest.raises(
        InvalidParameterError, match=r"\(float32: give a Python float, float\(v\)\)"
    ):
        PgcA3cConfig(eta=np.float32(0.1))
    with pytest.raises(InvalidParameterError) as e:  # a bound, not the type: no hint
        PgcA3cConfig(trials=0)
    assert "give a Python" not in str(e.value)


def test_mechanism_is_generated_and_required(
    captured: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--mechanism comes from PgcA3cConfig.mechanism (bounds(required=True)): its choices and
    help from the config, required here though the config has a default; a missing or bad one
    exits 2 naming the option before any work; the value given reaches the config."""
    p = _train_parser()
    action = p._option_string_actions["--mechanism"]
    assert action.required and action.default is None
    help_text = " ".join(p.format_help().split())
    assert (
        '--mechanism {laplace,prs,none} Agent-side randomiser Q: "laplace" (Alg. 2), "prs" '
        '(Alg. 3) or "none" (eps = inf) (required)' in help_text
    )
    assert _config_of(["train", "pgc-a3c", "--mechanism", "none", "--max-submissions", "20"]) == (
        PgcA3cConfig(mechanism="none", trials=1, max_submissions=20)
    )
    out = tmp_path / "run"
    for argv, needle in [
        ([], "the following arguments are required: --mechanism"),
        (
            ["--mechanism", "gauss"],
            "--mechanism must be one of 'laplace', 'prs', 'none', got 'gauss'",
        ),
        (["--mechanism", ""], "--mechanism must be a non-empty string, got ''"),
    ]:
        with pytest.raises(SystemExit) as e:
            main(["train", "pgc-a3c", *argv, "--epsilon", "1", "--out", str(out)])
        assert e.value.code == 2
        assert needle in capsys.readouterr().err
        assert not out.exists()


def test_a_cli_run_and_its_report_say_the_command_and_machine(tmp_path: Path) -> None:
    """The run's config.json holds the command line that made it and the machine, and the
    report's run table shows both (session 53: a reviewer could not tell what was run)."""
    import shlex

    from ldp_audit.report import build_report
    from ldp_audit.rundir import read_config

    out = tmp_path / "run"
    assert main([*TINY, "--out", str(out)]) == 0
    doc = read_config(out)
    assert doc["command"] == shlex.join(["ldp-audit", *TINY, "--out", str(out)])
    md = build_report(out).to_markdown()
    assert f"| command | {doc['command']} |" in md and f"| machine | {doc['machine']} |" in md
