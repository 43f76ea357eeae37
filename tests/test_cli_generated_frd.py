"""``ldp-audit train frd``: --agents (field n_agents), --epsilon (ldp_epsilon) and --gravities
(comma-separated) are generated from ``FrdConfig`` (issue 25: ``bounds(option=...)`` and
``bounds(parse=read_gravities, whole=True)``), with the names, defaults, spelling and configs of
the hand-written options they replaced; bad values exit 2 naming the option before any work."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from ldp_audit.cli import build_parser, main
from ldp_audit.training import frd
from ldp_audit.training.frd import PAPER_SETTINGS, FrdConfig


class _Got(BaseException):  # not caught by main(): the config the trainer was handed
    pass


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> None:
    def fake(cfg: Any, **kw: Any) -> None:
        raise _Got(cfg)

    monkeypatch.setattr(frd, "train", fake)


def _config_of(argv: list[str], tmp_path: Path) -> FrdConfig:
    with pytest.raises(_Got) as got:
        main(["train", "frd", *argv, "--out", str(tmp_path / "run"), "--no-progress"])
    return got.value.args[0]


def _train_parser() -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    tsub = next(
        a for a in sub.choices["train"]._actions if isinstance(a, argparse._SubParsersAction)
    )
    return tsub.choices["frd"]


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
        (["--gravities", "9"], "--gravities must be >= 2 comma-separated numbers > 0, got '9'"),
        (["--gravities", "9,nan"], "--gravities must be >= 2 comma-separated numbers > 0"),
        (["--gravities", "9,-1"], "got '9,-1'"),
        (["--gravities", "9 10"], "got '9 10'"),
        (["--epsilon", "0"], "argument --epsilon: --epsilon must be a finite number in (0, inf)"),
        (["--epsilon", "1e-320"], "--epsilon must be >= 2.22507e-308 (a normal double)"),
        (["--epsilon", "1_0"], "got '1_0'"),
        (["--epsilon", "1", "--mode", "fedavg"],
         "--epsilon (the LDP proxy memory) needs --mode frd"),
        (["--gravities", "9,10", "--private-param", "length=1,2"],
         "--gravities and --private-param both declare the secret"),
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
