"""``ldp-audit reproduce fedrl``: every option generated from ``ReproConfig`` (issue 25, "Configs
are the CLI"): one option per field, with the field's docstring, default and bounds; the
documented commands build the configs they built when the options were hand-written; bad
values exit 2 naming the option and the value, before any file is written."""

from __future__ import annotations

import argparse
import dataclasses
import math
from pathlib import Path

import pytest

from ldp_audit.cli import build_parser, main
from ldp_audit.config import field_docs, from_args, option_name
from ldp_audit.training.fedrl.reproduce import ReproConfig


def _repro_parser() -> argparse.ArgumentParser:
    top = build_parser()
    rep = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    sub = rep.choices["reproduce"]
    rsub = next(a for a in sub._actions if isinstance(a, argparse._SubParsersAction))
    return rsub.choices["fedrl"]


def _config(argv: list[str]) -> ReproConfig:
    args = build_parser().parse_args(["reproduce", "fedrl", *argv])
    return from_args(ReproConfig, args)


def test_every_field_is_a_documented_bounded_option() -> None:
    p = _repro_parser()
    options = set(p._option_string_actions)
    docs = field_docs(ReproConfig)
    for f in dataclasses.fields(ReproConfig):
        assert option_name(f.name) in options, f.name
        assert docs.get(f.name), f.name  # a docstring under the field
        assert "ldp_audit" in f.metadata, f.name  # bounds (or choices) in its metadata
    # the options of the hand-written version, none lost (and nothing else hand-written left)
    before = (
        "--sizes --runs --train-steps --hist-lens --fig4-runs --attack-sigmas --attack-clip "
        "--attack-steps --audit-samples --seed --threads --fig4-steps --explore-eps "
        "--curve-points --curve-maps --n-maps --hist-len --n-envs --eval-maps --device "
        "--meeting-rule --out --overwrite --json --no-progress --backend --address --workers "
        "--force"
    ).split()
    assert set(before) <= options
    text = " ".join(p.format_help().split())
    assert "--attack-clip ATTACK_CLIP B of the clipped half of the attack sweep (>= 1e-06" in text
    assert "(none: those of the first size) (>= 1; default: none)" in text


def test_no_option_given_is_the_default_config() -> None:
    assert _config([]) == ReproConfig()


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (  # make reproduce-fedrl (the committed report's command)
            "--sizes 8 --runs 5 --train-steps 32000 --hist-lens --attack-steps 250 "
            "--explore-eps 0.05 0.1 0.2 --curve-points 8 --curve-maps 200 --workers 20 "
            "--threads 1 --no-progress --force",
            {"sizes": (8,), "train_steps": (32000,), "hist_lens": (), "attack_steps": 250},
        ),
        (  # the 16 x 16 run (reports/fedrl-16)
            "--sizes 16 --runs 5 --train-steps 32000 --hist-lens --attack-sigmas "
            "--audit-samples 0 --explore-eps 0.05 0.1 0.2 --curve-points 8 --curve-maps 200 "
            "--workers 2 --threads 1 --no-progress --force",
            {"sizes": (16,), "train_steps": (32000,), "hist_lens": (), "attack_sigmas": (),
             "audit_samples": 0},
        ),
        (
            "--sizes 8 16 --train-steps 10 20 --fig4-steps 5 --fig4-runs 3 --seed 7 "
            "--meeting-rule public-code --device cpu --n-maps 100 --n-envs 4 --hist-len 2 "
            "--eval-maps 3 --attack-clip 0.5 --attack-sigmas 0 2.5 --explore-eps 1 "
            "--curve-points 0 --curve-maps 1",
            {"sizes": (8, 16), "train_steps": (10, 20), "fig4_steps": 5, "fig4_runs": 3,
             "seed": 7, "meeting_rule": "public-code", "n_maps": 100, "n_envs": 4,
             "hist_len": 2, "eval_maps": 3, "attack_clip": 0.5, "attack_sigmas": (0.0, 2.5),
             "explore_eps": (1.0,), "curve_points": 0, "curve_maps": 1},
        ),
        ("--fig4-steps none --explore-eps", {"explore_eps": ()}),
    ],
)  # fmt: skip
def test_documented_commands_build_the_same_config(argv: str, expected: dict) -> None:
    assert _config(argv.split()) == ReproConfig(**expected)


@pytest.mark.parametrize(
    ("argv", "needles"),
    [
        ("--sizes 12", ("--sizes", "'12'")),
        ("--runs 0", ("--runs must be an integer >= 1, got '0'",)),
        ("--runs 1_0", ("--runs", "'1_0'")),
        ("--train-steps 10 0", ("--train-steps must be an integer >= 1, got '0'",)),
        ("--train-steps", ("--train-steps", "expected at least one argument")),
        ("--hist-lens 0", ("--hist-lens must be an integer >= 1, got '0'",)),
        ("--attack-sigmas -1", ("--attack-sigmas", "got '-1'")),
        ("--attack-sigmas -inf 1", ("--attack-sigmas", "'-inf'")),  # a leading -inf: a value
        ("--attack-sigmas 1 nan", ("--attack-sigmas", "'nan'")),
        ("--attack-sigmas 1e7", ("--attack-sigmas", "1e+06", "got '1e7'")),
        ("--attack-clip 0", ("--attack-clip", "got '0'")),
        ("--attack-clip 1e-7", ("--attack-clip", "1e-06")),
        ("--attack-clip inf", ("--attack-clip", "got 'inf'")),
        ("--audit-samples -1", ("--audit-samples must be an integer >= 0, got '-1'",)),
        ("--seed -1", ("--seed must be an integer >= 0, got '-1'",)),
        ("--fig4-steps 0", ("--fig4-steps must be an integer >= 1",)),
        ("--explore-eps 0", ("--explore-eps must be a finite number in (0, 1], got '0'",)),
        ("--explore-eps 0.1 1.5", ("--explore-eps", "'1.5'")),
        ("--curve-points -1", ("--curve-points must be an integer >= 0, got '-1'",)),
        ("--curve-maps 0", ("--curve-maps must be an integer >= 1, got '0'",)),
        ("--n-maps 9", ("--n-maps must be an integer >= 10, got '9'",)),
        ("--device gpu", ("--device", "'gpu'")),
        ("--meeting-rule x", ("--meeting-rule", "'x'")),
        ("--sizes 8 16 --train-steps 1 2 3", ("--train-steps", "one per size (2)", "[1, 2, 3]")),
    ],
)
def test_bad_values_exit_2_by_name_before_any_file(
    argv: str, needles: tuple[str, ...], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "never"
    try:  # argparse exits 2; a refusal after parsing (InvalidParameterError) returns 2
        code = main(["reproduce", "fedrl", *argv.split(), "--out", str(out)])
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    assert code == 2, err
    for needle in needles:
        assert needle in err, (needle, err)
    assert "Traceback" not in err and not out.exists()


def test_the_config_still_checks_a_python_caller() -> None:
    """The generated options read the same ranges ReproConfig.__post_init__ checks."""
    from ldp_audit.errors import InvalidParameterError

    for kw in ({"explore_eps": (0.0,)}, {"attack_sigmas": (-math.inf,)}, {"sizes": (12,)}):
        with pytest.raises(InvalidParameterError):
            ReproConfig(**kw)
    with pytest.raises(InvalidParameterError, match=r"one per size \(2\), got \[1, 2, 3\]$"):
        ReproConfig(sizes=(8, 16), train_steps=(1, 2, 3))
    with pytest.raises(TypeError):
        ReproConfig((8,))  # type: ignore[misc]  # keyword-only
