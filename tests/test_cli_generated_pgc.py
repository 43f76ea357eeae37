"""``ldp-audit train pgc-a3c``: the learning constants (eta, gamma, lam, beta, alpha_start,
alpha_decay) are options generated from ``PgcA3cConfig`` (issue 25, "Configs are the CLI"):
their bounds, written once in the config and justified in the field docs, are checked by the
command line (exit 2 naming the option, before any work) and by the config itself; the values
given reach the CartPole engine's config and the Gymnasium trainer's."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from ldp_audit.cli import build_parser, main
from ldp_audit.config import field_docs
from ldp_audit.errors import InvalidParameterError
from ldp_audit.training.pgc_a3c.config import PgcA3cConfig

LEARNING = ("eta", "gamma", "lam", "beta", "alpha_start", "alpha_decay")
TINY = ["train", "pgc-a3c", "--mechanism", "laplace", "--epsilon", "1", "--max-submissions", "20"]


class _Got(BaseException):  # not caught by main(): the config the trainer was handed
    pass


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> None:
    import ldp_audit.training.gym_pgc as gym
    import ldp_audit.training.pgc_a3c as pgc

    def fake(cfg: Any, **kw: Any) -> None:
        raise _Got(cfg)

    monkeypatch.setattr(pgc, "train", fake)
    monkeypatch.setattr(gym, "train", fake)


def _config_of(argv: list[str]) -> Any:
    with pytest.raises(_Got) as got:
        main([*argv, "--no-progress"])
    return got.value.args[0]


def _train_parser() -> argparse.ArgumentParser:
    top = build_parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    tsub = next(
        a for a in sub.choices["train"]._actions if isinstance(a, argparse._SubParsersAction)
    )
    return tsub.choices["pgc-a3c"]


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


def test_the_constants_reach_the_gymnasium_trainer(captured: None) -> None:
    pytest.importorskip("gymnasium")
    from ldp_audit.training.gym_pgc import GymPgcConfig

    argv = [*TINY, "--env", "Acrobot-v1", "--private-param", "LINK_MASS_1=0.5,1"]
    cfg = _config_of([*argv, "--eta", "0.125", "--alpha-decay", "90", "--beta", "0.5"])
    assert isinstance(cfg, GymPgcConfig)
    assert (cfg.eta, cfg.alpha_decay, cfg.beta, cfg.gamma) == (0.125, 90.0, 0.5, 0.99)


@pytest.mark.parametrize(
    ("argv", "needles"),
    [
        (["--eta", "0"], ("--eta", "eta must be finite and > 0, got 0.0")),
        (["--eta", "1000.5"], ("--eta", "eta must be <= 1000", "1000.5")),
        (["--eta", "nan"], ("--eta", "'nan'")),
        (["--eta", "-inf"], ("--eta", "'-inf'")),  # a minus value is a value, refused by name
        (["--eta", "1e-320"], ("--eta", "normal double")),
        (["--gamma", "0"], ("--gamma", "gamma must be in (0, 1], got 0.0")),
        (["--gamma", "1.01"], ("--gamma", "(0, 1]", "1.01")),
        (["--lam", "0"], ("--lam", "lam must be finite and > 0")),
        (["--lam", "1e4"], ("--lam", "lam must be <= 1000")),
        (["--beta", "-0.1"], ("--beta", "beta must be finite and >= 0, got -0.1")),
        (["--beta", "inf"], ("--beta", "beta must be finite and >= 0, got inf")),
        (["--beta", "1001"], ("--beta", "beta must be <= 1000")),
        (["--alpha-start", "1.5"], ("--alpha-start", "alpha_start must be <= 1, got 1.5")),
        (["--alpha-decay", "0"], ("--alpha-decay", "alpha_decay must be finite and > 0")),
        (["--alpha-decay", "2e12"], ("--alpha-decay", "alpha_decay must be <= 1e+12")),
        (["--alpha-decay", "1_0"], ("--alpha-decay", "'1_0'")),
    ],
)
def test_bad_constants_exit_2_by_name_before_any_work(
    argv: list[str],
    needles: tuple[str, ...],
    captured: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        main([*TINY, *argv, "--out", str(out)])
    err = capsys.readouterr().err
    assert e.value.code == 2, err
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
    from ldp_audit.training.gym_pgc import GymPgcConfig

    base = dict(env_id="MountainCar-v0", private_param="force", values=(0.0008, 0.001))
    assert getattr(PgcA3cConfig(**{name: ok}), name) == ok
    with pytest.raises(InvalidParameterError) as cartpole:
        PgcA3cConfig(**{name: bad})
    with pytest.raises(InvalidParameterError) as gym:
        GymPgcConfig(**base, **{name: bad})
    assert name in str(cartpole.value) and str(cartpole.value) == str(gym.value)
