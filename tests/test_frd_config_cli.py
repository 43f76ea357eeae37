"""`ldp-audit train frd`'s config options are generated from FrdConfig (ldp_audit.config): the
same names and values as the hand-written options they replaced, the same config built, bad
values refused (exit 2, option and value named) before any work, and each field's bounds in its
metadata agreeing with FrdConfig's own __post_init__."""

from __future__ import annotations

import dataclasses
import json

import pytest

from ldp_audit.cli import build_parser, main
from ldp_audit.errors import InvalidParameterError
from ldp_audit.training.frd import run as frd_run
from ldp_audit.training.frd.config import PAPER_SETTINGS, FrdConfig

#: the options of FrdConfig's fields before the generator (hand-written), and the new ones
FORMER = {"--mode", "--groups", "--sections", "--exchange-period", "--initial-episodes",
          "--hidden", "--layers", "--max-episodes", "--threshold", "--ldp-samples",
          "--no-stop-at-mission"}  # fmt: skip
NEW = {"--stop-at-mission", "--proxy-dims", "--window", "--episode-steps", "--state-low",
       "--state-high", "--gamma", "--actor-lr", "--critic-lr", "--fail-reward", "--distil-epochs",
       "--distil-batch", "--distil-lr", "--ldp-cell-share", "--device"}  # fmt: skip
#: formerly hand-written, generated since bounds(option=...) and bounds(parse=..., whole=True)
RENAMED = {"--agents", "--gravities", "--epsilon"}
#: written by hand (another name or syntax than the field's) or not config at all
HAND = {"--setting", "--private-param", "--seed",
        "--out", "--overwrite", "--resume", "--json", "--no-progress", "--force", "--help",
        "-h"}  # fmt: skip


def _train_parser():
    sub = build_parser()._subparsers._group_actions[0].choices["train"]
    return sub._subparsers._group_actions[0].choices["frd"]


def test_options_generated_and_hand_written():
    p = _train_parser()
    generated = {s for a in p._actions if a.dest.startswith("cfg__") for s in a.option_strings}
    assert generated == FORMER | NEW | RENAMED
    assert set(p._option_string_actions) == FORMER | NEW | RENAMED | HAND
    assert "--n-agents" not in p._option_string_actions  # n_agents is --agents, as before


class _Built(Exception):
    pass


def _config_of(argv, monkeypatch):
    """The FrdConfig `train frd ARGV` would train (nothing runs)."""

    def fake_train(cfg, **_kw):
        raise _Built(cfg)

    monkeypatch.setattr(frd_run, "train", fake_train)  # replaced where it is defined
    args = build_parser().parse_args(["train", "frd", *argv])
    with pytest.raises(_Built) as e:
        args.func(args)
    return e.value.args[0]


@pytest.mark.parametrize(
    "argv, expected",
    [
        ([], FrdConfig(**PAPER_SETTINGS[1])),
        (["--setting", "3", "--hidden", "8", "--groups", "2"],
         FrdConfig(**{**PAPER_SETTINGS[3], "hidden": 8}, groups=2)),
        (["--mode", "fedavg", "--setting", "5", "--agents", "3", "--sections", "10",
          "--exchange-period", "5", "--initial-episodes", "5", "--max-episodes", "40",
          "--threshold", "20", "--no-stop-at-mission", "--gravities", "4.9,19.6"],
         FrdConfig(**{**PAPER_SETTINGS[5], "sections": 10, "exchange_period": 5,
                      "initial_episodes": 5}, mode="fedavg", n_agents=3, max_episodes=40,
                   threshold=20.0, stop_at_mission=False, gravities=(4.9, 19.6))),
        (["--epsilon", "2", "--ldp-samples", "5", "--private-param", "length=0.25,0.5,1"],
         FrdConfig(ldp_epsilon=2.0, ldp_samples=5, private_param="length",
                   private_values=(0.25, 0.5, 1.0))),
        (["--epsilon", "inf", "--proxy-dims", "3", "1", "--gamma", "0.9", "--window", "5",
          "--state-low", "-2", "-3", "-0.2", "-3.5"],
         FrdConfig(proxy_dims=(1, 3), gamma=0.9, window=5, state_low=(-2.0, -3.0, -0.2, -3.5))),
    ],
    ids=["defaults", "setting-3", "fedavg", "ldp-length", "new-options"],
)  # fmt: skip
def test_command_line_builds_the_same_config(argv, expected, monkeypatch, tmp_path):
    cfg = _config_of([*argv, "--out", str(tmp_path / "r"), "--no-progress"], monkeypatch)
    assert cfg == expected
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    "argv, needles",
    [
        (["--mode", "fedavgx"], ("--mode", "'fedavgx'")),
        (["--groups", "0"], ("--groups must be an integer >= 1, got '0'",)),
        (["--groups", "1_0"], ("--groups", "'1_0'")),
        (["--sections", "nan"], ("--sections must be an integer >= 2, got 'nan'",)),
        (["--hidden", "1.5"], ("--hidden", "'1.5'")),
        (["--max-episodes", "0"], ("--max-episodes", "'0'")),
        (["--threshold", "-1"], ("--threshold must be a finite number in [0, inf), got '-1'",)),
        (["--threshold", "inf"], ("--threshold", "'inf'")),
        (["--ldp-samples", "0"], ("--ldp-samples must be an integer >= 1, got '0'",)),
        (["--proxy-dims", "4"], ("--proxy-dims", "'4'")),
        (["--gamma", "1.5"], ("--gamma", "'1.5'")),
        (["--actor-lr", "0"], ("--actor-lr", "'0'")),
        (["--distil-lr", "nan"], ("--distil-lr", "'nan'")),
        (["--ldp-cell-share", "1"], ("--ldp-cell-share", "'1'")),
        (["--window", "0"], ("--window", "'0'")),
        (["--state-low", "nan", "0", "0", "0"], ("--state-low", "'nan'")),
    ],
)  # fmt: skip
def test_bad_values_refused_by_name_before_any_work(argv, needles, tmp_path, capsys):
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as e:  # argparse usage error
        main(["train", "frd", *argv, "--out", str(out)])
    assert e.value.code == 2
    err = capsys.readouterr().err
    for n in needles:
        assert n in err, err
    assert not out.exists()


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--proxy-dims", "1", "1"], "--proxy-dims must be distinct"),
        (["--state-low", "0", "0"], "--state-low/--state-high must be 4 finite ranges"),
        (["--threshold", "600"], "--threshold must be <= --episode-steps"),
        (["--episode-steps", "100"], "--threshold must be <= --episode-steps"),
    ],
)
def test_whole_config_checks_exit_2_before_any_work(argv, needle, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "frd", *argv, "--out", str(out)]) == 2
    assert needle in capsys.readouterr().err
    assert not out.exists()


def _meta(f: dataclasses.Field) -> dict:
    return f.metadata.get("ldp_audit", {}) if f.metadata else {}


INT_FIELDS = [f for f in dataclasses.fields(FrdConfig) if f.type == "int"]


@pytest.mark.parametrize("f", INT_FIELDS, ids=lambda f: f.name)
def test_int_bounds_in_metadata_are_post_init_s(f):
    """Each integer field's metadata minimum is the one FrdConfig itself enforces."""
    lo = _meta(f).get("minimum")
    assert lo is not None, f"{f.name}: no minimum in its metadata"
    extra = {"threshold": 0.0} if f.name == "episode_steps" else {}  # threshold <= steps
    FrdConfig(**{f.name: lo}, **extra)  # the bound itself is accepted ...
    with pytest.raises(InvalidParameterError, match=f.name):
        FrdConfig(**{f.name: lo - 1}, **extra)  # ... one below it is not


@pytest.mark.parametrize(
    "name, ok, bad",
    [
        ("gamma", (0.0, 1.0), (-1e-9, 1.0 + 1e-9)),
        ("actor_lr", (1e-300,), (0.0, -1.0)),
        ("critic_lr", (1e-300,), (0.0,)),
        ("distil_lr", (1e-300,), (0.0,)),
        ("ldp_cell_share", (1e-9, 1 - 1e-9), (0.0, 1.0)),
        ("threshold", (0.0, 500.0), (-1e-9,)),
        # session 58: np.float64(1e308) was taken (-1e40 diverged after one episode, after the
        # run had started, the refusal blaming the learning rates)
        ("fail_reward", (-1e6, 0.0, 1e6), (-1e6 - 1, 1e308, -1e308)),
    ],
)
def test_real_bounds_in_metadata_are_post_init_s(name, ok, bad):
    """A real field's interval in its metadata (what the option refuses) is FrdConfig's."""
    (f,) = [f for f in dataclasses.fields(FrdConfig) if f.name == name]
    m = _meta(f)
    for v in ok:
        FrdConfig(**{name: v})
        assert m["minimum"] is None or (v > m["minimum"] if m["open_min"] else v >= m["minimum"])
        assert m["maximum"] is None or (v < m["maximum"] if m["open_max"] else v <= m["maximum"])
    for v in bad:
        with pytest.raises(InvalidParameterError, match=name):
            FrdConfig(**{name: v})
        below = m["minimum"] is not None and (
            v <= m["minimum"] if m["open_min"] else v < m["minimum"]
        )
        above = m["maximum"] is not None and (
            v >= m["maximum"] if m["open_max"] else v > m["maximum"]
        )
        assert below or above, f"{name}={v}: refused by FrdConfig but inside its metadata"


def test_choices_in_metadata_are_post_init_s():
    by = {f.name: _meta(f) for f in dataclasses.fields(FrdConfig)}
    for name, allowed in (("mode", ("frd", "fedavg")),
                          ("private_param", ("gravity", "masscart", "masspole", "length",
                                             "force_mag"))):  # fmt: skip
        assert by[name]["choices"] == allowed
        with pytest.raises(InvalidParameterError, match=name):
            FrdConfig(**{name: "other"})


def test_defaults_unchanged_and_keyword_only():
    assert FrdConfig() == FrdConfig(**PAPER_SETTINGS[1])  # the CLI's --setting 1
    d = FrdConfig().to_dict()
    assert (d["mode"], d["n_agents"], d["groups"], d["max_episodes"], d["threshold"]) == (
        "frd", 4, 1, 300, 195.0)  # fmt: skip
    assert (d["ldp_samples"], d["stop_at_mission"], d["gravities"]) == (32, None, [9.7, 9.8, 9.9])
    # unset: the non-private upload stops at its mission, the LDP variant keeps its schedule
    assert FrdConfig().stops_at_mission and not FrdConfig(ldp_epsilon=1.0).stops_at_mission
    with pytest.raises(TypeError):
        FrdConfig("frd")  # type: ignore[misc]


def test_a_diverging_run_is_exit_2_naming_the_learning_rate(tmp_path, capsys):
    """critic_lr = 1e30: exit 2, one line naming the cause; the run is marked interrupted, with
    no metrics (nothing shows NaN) and no ledger journal left beside it."""
    out = tmp_path / "run"
    argv = ["train", "frd", "--agents", "2", "--groups", "2", "--sections", "10",
            "--hidden", "8", "--layers", "1", "--max-episodes", "9", "--critic-lr", "1e30",
            "--no-progress", "--out", str(out)]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "frd diverged" in err and "--critic-lr=1e+30" in err and "Traceback" not in err
    assert json.loads((out / "manifest.json").read_text())["status"] == "interrupted"
    assert not (out / "metrics.json").exists() and not (out / "ledger.sqlite-journal").exists()
