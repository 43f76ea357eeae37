"""``ldp-audit train frd``: --agents (field n_agents), --epsilon (ldp_epsilon) and --gravities
(comma-separated) are generated from ``FrdConfig`` (issue 25: ``bounds(option=...)`` and
``bounds(parse=read_list(at_least=2), whole=True)``), with the names, defaults, spelling and
configs of the hand-written options they replaced; bad values exit 2 naming the option before
any work."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from ldp_audit.cli import main
from ldp_audit.training.frd import run as frd_run
from ldp_audit.training.frd.config import PAPER_SETTINGS, FrdConfig
from tests.cli_capture import hand_over, handed, subcommand_parser


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> None:
    hand_over(monkeypatch, (frd_run, "train"))  # replaced where it is defined


def _config_of(argv: list[str], tmp_path: Path) -> FrdConfig:
    return handed(["train", "frd", *argv, "--out", str(tmp_path / "run"), "--no-progress"])


def _train_parser() -> argparse.ArgumentParser:
    return subcommand_parser("train", "frd")


def test_the_options_are_the_fields_under_their_old_names() -> None:
    p = _train_parser()
    dests = {o: a.dest for a in p._actions for o in a.option_strings}
    assert dests["--agents"] == "cfg__n_agents"
    assert dests["--epsilon"] == "cfg__ldp_epsilon"
    assert dests["--gravities"] == "cfg__gravities"
    assert "--n-agents" not in dests and "--ldp-epsilon" not in dests
    assert dests["--private-param"] == "private_param"  # one option, two fields: by hand
    text = " ".join(p.format_help().split())
    assert "--agents AGENTS agents per group (U) (>= 1; default: 4)" in text
    assert "(> 0, or inf; default: none)" in text  # --epsilon
    assert "the same as --private-param gravity=V1,V2 (default: 9.7,9.8,9.9)" in text


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], {}),
        (["--agents", "2", "--gravities", "9,10"], {"n_agents": 2, "gravities": (9.0, 10.0)}),
        (["--epsilon", "2"], {"ldp_epsilon": 2.0}),
        (["--epsilon", "inf"], {}),  # inf: the non-private upload, as before
        (["--epsilon", "none"], {}),  # none: the same (new: the word every T | None option reads)
        (["--private-param", "length=0.25,0.5,1"],
         {"private_param": "length", "private_values": (0.25, 0.5, 1.0)}),
        (["--private-param", "gravity=9,11"], {"gravities": (9.0, 11.0)}),
        (["--setting", "3", "--agents", "2"], {"n_agents": 2, **PAPER_SETTINGS[3]}),
    ],
)  # fmt: skip
def test_the_options_build_the_same_configs(
    argv: list[str], expected: dict, captured: None, tmp_path: Path
) -> None:
    kw = {**PAPER_SETTINGS[1], **expected}
    assert _config_of(argv, tmp_path) == FrdConfig(**kw)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--agents", "0"], "argument --agents: --agents must be an integer >= 1, got '0'"),
        (["--agents", "1.5"], "--agents must be an integer"),
        (["--gravities", "9"], "--gravities must be at least 2 comma-separated finite numbers > 0, "
         "got '9'"),
        (["--gravities", "9,nan"], "--gravities must be at least 2 comma-separated finite numbers"),
        (["--gravities", "9,-1"], "got '9,-1'"),
        (["--gravities", "9 10"], "got '9 10'"),
        (["--epsilon", "0"],
         "argument --epsilon: --epsilon must be 'inf' or a finite number in (0, inf)"),
        (["--epsilon", "1e-320"], "--epsilon must be >= 2.22507e-308 (a normal double)"),
        (["--epsilon", "1_0"], "got '1_0'"),
        (["--epsilon", "1", "--mode", "fedavg"],
         "--epsilon is for mode 'frd' (the LDP proxy memory), got mode 'fedavg'"),
        (["--gravities", "9,10", "--private-param", "length=1,2"],
         "--gravities and --private-param both declare the secret"),
        # the upload mechanism's refusal in the options' words (session 57: "epsilon / samples
        # * min(cell_share, ...) ... got epsilon=1e-305, samples=100000, cell_share=0.5")
        (["--epsilon", "1e-305", "--ldp-samples", "100000"],
         "--epsilon/--ldp-samples * min(--ldp-cell-share, 1 - --ldp-cell-share) must be >= "),
        (["--epsilon", "1e-300", "--ldp-cell-share", "1e-10"],
         "got --epsilon=1e-300, --ldp-samples=32, --ldp-cell-share=1e-10"),
    ],
)  # fmt: skip
def test_bad_values_exit_2_naming_the_option(
    argv: list[str], needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    try:  # argparse exits 2; a refusal after parsing (InvalidParameterError) returns 2
        code = main(["train", "frd", *argv, "--out", str(out)])
    except SystemExit as e:
        code = e.code
    assert code == 2
    assert needle in capsys.readouterr().err
    assert not out.exists()


# ``ldp-audit reproduce frd``: every option but outputs, modes and backends is generated from
# training/frd/reproduce.py's ReproduceSettings (issue 25), under the hand-written names it had


@pytest.fixture
def reproduce_captured(monkeypatch: pytest.MonkeyPatch) -> None:
    from ldp_audit.training.frd import reproduce as frd_reproduce

    hand_over(monkeypatch, (frd_reproduce, "reproduce"))


def _settings_of(argv: list[str], tmp_path: Path) -> Any:
    return handed(["reproduce", "frd", *argv, "--out", str(tmp_path / "rep"), "--no-progress"])


def _reproduce_parser() -> argparse.ArgumentParser:
    return subcommand_parser("reproduce", "frd")


#: one non-default value per field of ReproduceSettings, as the command line spells it
_REPRODUCE_VALUES = {
    "settings": (["--settings", "2,5"], (2, 5)),
    "agents": (["--agents", "3,8"], (3, 8)),
    "groups": (["--groups", "7"], 7),
    "max_episodes": (["--max-episodes", "50"], 50),
    "threshold": (["--threshold", "150.5"], 150.5),
    "fedavg_setting": (["--fedavg-setting", "4"], 4),
    "ldp_epsilons": (["--ldp-epsilons", "0.5,2"], (0.5, 2.0)),
    "leak": (["--no-leak"], False),
    "leak_groups": (["--leak-groups", "3"], 3),
    "leak_shadow": (["--leak-shadow", "5"], 5),
    "leak_epsilons": (["--leak-epsilons", "0.1"], (0.1,)),
    "seed": (["--seed", "9"], 9),
    "device": (["--device", "auto"], "auto"),  # resolved by reproduce() (here: recorded)
}


def test_reproduce_every_field_is_a_generated_option() -> None:
    import dataclasses

    from ldp_audit.training.frd.reproduce import ReproduceSettings

    p = _reproduce_parser()
    dests = {a.dest for a in p._actions}
    fields = {f.name for f in dataclasses.fields(ReproduceSettings)}
    assert fields == set(_REPRODUCE_VALUES)
    assert {f"cfg__{f}" for f in fields} <= dests  # one generated option per field
    assert not {"settings", "agents", "seed", "device", "no_leak"} & dests  # none by hand
    text = " ".join(p.format_help().split())
    assert "(ReproduceSettings; generated)" in text
    assert "--settings SETTINGS Table 1 settings of Figure 3" in text
    assert "(>= 1; default: 4)" in text  # --groups


@pytest.mark.parametrize("name", sorted(_REPRODUCE_VALUES))
def test_reproduce_each_option_reaches_its_field(
    name: str, reproduce_captured: None, tmp_path: Path
) -> None:
    from ldp_audit.training.frd.reproduce import ReproduceSettings

    argv, value = _REPRODUCE_VALUES[name]
    got = _settings_of(argv, tmp_path)
    assert getattr(got, name) == value
    assert got == ReproduceSettings(**{name: value})  # every other field: the default


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], {}),  # the defaults of the hand-written options: those of ReproduceSettings
        (["--agents", "1,2,4", "--groups", "30", "--max-episodes", "250"],  # make reproduce-frd
         {"agents": (1, 2, 4), "groups": 30, "max_episodes": 250}),
        (["--groups", "2", "--max-episodes", "100", "--leak-groups", "4", "--leak-shadow", "8",
          "--leak-epsilons", "1"],  # docs/scale-out.md
         {"groups": 2, "max_episodes": 100, "leak_groups": 4, "leak_shadow": 8,
          "leak_epsilons": (1.0,)}),
        (["--agents", "2", "--ldp-epsilons", "1,10"], {"agents": (2,), "ldp_epsilons": (1, 10)}),
    ],
)  # fmt: skip
def test_reproduce_documented_commands_give_the_same_settings(
    argv: list[str], expected: dict, reproduce_captured: None, tmp_path: Path
) -> None:
    from ldp_audit.training.frd.reproduce import ReproduceSettings

    got = _settings_of(argv, tmp_path)
    assert got == ReproduceSettings(**expected)
    assert got.settings == (1, 2, 3, 4, 5, 6, 7) or "settings" in expected
    assert got.leak is True and got.device == "cpu" and got.seed == 0


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--settings", "8"], "argument --settings: --settings must be a comma-separated list of "
         "integers in [1, 7], got '8'"),
        (["--settings", ""], "--settings must be a comma-separated list"),
        (["--agents", "10001"], "argument --agents: --agents must be a comma-separated list of "
         "integers in [1, 10000], got '10001'"),
        (["--agents", "1_0"], "got '1_0'"),
        (["--groups", "0"], "argument --groups: --groups must be an integer >= 1, got '0'"),
        (["--max-episodes", "1.5"], "--max-episodes must be an integer"),
        (["--threshold", "inf"], "argument --threshold: --threshold must be a finite number"),
        (["--threshold", "-1"], "got '-1'"),
        (["--fedavg-setting", "8"], "argument --fedavg-setting: --fedavg-setting must be <= 7, "
         "got '8'"),
        (["--ldp-epsilons", "1,inf"], "argument --ldp-epsilons: --ldp-epsilons must be comma-"
         "separated finite numbers > 0, got '1,inf'"),
        (["--leak-epsilons", "0"], "argument --leak-epsilons: --leak-epsilons must be comma-"
         "separated finite numbers > 0, got '0'"),
        (["--leak-shadow", "0"], "--leak-shadow must be an integer >= 1, got '0'"),
        (["--seed", "-1"], "argument --seed: --seed must be an integer >= 0, got '-1'"),
        (["--device", "tpu"], "argument --device: --device must be one of 'cpu', 'cuda', 'auto', "
         "got 'tpu'"),
    ],
)  # fmt: skip
def test_reproduce_bad_values_exit_2_naming_the_option(
    argv: list[str], needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "rep"
    with pytest.raises(SystemExit) as e:
        main(["reproduce", "frd", *argv, "--out", str(out)])
    assert e.value.code == 2
    assert needle in capsys.readouterr().err
    assert not out.exists()


def test_reproduce_a_check_across_settings_names_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--threshold above the paper settings' 500 steps: refused (by the cells' FrdConfig, in
    the sizes check) before any work, naming the option, not the field."""
    out = tmp_path / "rep"
    assert main(["reproduce", "frd", "--threshold", "1e30", "--out", str(out)]) == 2
    assert "error: --threshold must be <= episode_steps (500:" in capsys.readouterr().err
    assert not out.exists()
