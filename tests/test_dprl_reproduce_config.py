"""``reproduce dprl`` / ``train dprl``: options generated from their configs, and the committed
report rebuilt by the report module (``training/dprl/reproduce_report.py``)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path

import pytest

from ldp_audit.cli import main

REPORT = Path(__file__).resolve().parent.parent / "reports" / "dprl"


def _settings_of(doc: dict):  # noqa: ANN202
    from ldp_audit.training.dprl.config import ReproduceSettings

    kw = {k: tuple(v) if isinstance(v, list) else v for k, v in doc["settings"].items()}
    return ReproduceSettings(**kw)


def test_committed_readme_rerenders_from_its_results() -> None:
    """reports/dprl/README.md is exactly what the report module writes from results.json."""
    from ldp_audit.training.dprl.reproduce_report import pages

    doc = json.loads((REPORT / "results.json").read_text())
    assert pages(doc) == {"README.md": (REPORT / "README.md").read_text()}


def test_dqn_preset_names_are_the_presets() -> None:
    from ldp_audit.training.dprl.config import DQN_PRESET_NAMES
    from ldp_audit.training.dprl.trainer import DQN_PRESETS

    assert sorted(DQN_PRESET_NAMES) == sorted(DQN_PRESETS)


def _parsed(monkeypatch: pytest.MonkeyPatch, verb: str, argv: list[str], tmp_path: Path):  # noqa: ANN202
    """What ``verb dprl ARGV`` hands to the trainer / the reproduction (nothing runs)."""
    import ldp_audit.training.dprl.reproduce as rep
    import ldp_audit.training.dprl.trainer as dprl

    got = []

    def stop(cfg, **kw):  # noqa: ANN001, ANN003, ANN202
        got.append(cfg)
        raise KeyboardInterrupt

    monkeypatch.setattr(dprl, "train", stop)
    monkeypatch.setattr(rep, "reproduce", stop)
    assert main([verb, "dprl", *argv, "--out", str(tmp_path / "o"), "--no-progress"]) == 130
    return got[0]


def test_reproduce_options_give_the_committed_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The committed report's command, as its README shows it, parsed, is its recorded settings
    (field for field)."""
    doc = json.loads((REPORT / "results.json").read_text())
    shown = doc["command"]
    assert "--noise-multiplier" in shown
    from tests.markdown_unwrap import unwrap_markdown

    assert f"`{shown}`" in unwrap_markdown((REPORT / "README.md").read_text())
    argv = shown.split()[3:]  # after "ldp-audit reproduce dprl"
    argv = argv[: argv.index("--cache")]  # no cache / out / workers: nothing must run here
    assert _parsed(monkeypatch, "reproduce", argv, tmp_path) == _settings_of(doc)


def test_reproduce_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from ldp_audit.training.dprl.config import ReproduceSettings

    # the config's defaults, but 500 audit canaries (the command line's default since the start)
    got = _parsed(monkeypatch, "reproduce", [], tmp_path)
    assert got == ReproduceSettings(audit_canaries=500)
    got = _parsed(monkeypatch, "reproduce", ["--clip", "2", "--delta", "1e-6"], tmp_path)
    assert (got.clip, got.delta) == (2.0, 1e-6)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--audit-canaries", "1"], "--audit-canaries must be 0 or an integer >= 2, got 1"),
        (
            ["--audit-canaries", "-2"],
            "--audit-canaries: --audit-canaries must be 0 or an integer >= 2",
        ),
        (["--audit-canaries", "1.5"], "--audit-canaries must be an integer, got '1.5'"),
        (["--dpsgd-noise", "1"], "unrecognized arguments: --dpsgd-noise 1"),  # spelled --noise
        (["--noise-multiplier", "0", "nan"], "--noise-multiplier must be a finite number in [0, "),
        (["--noise-multiplier", "2e6"], "--noise-multiplier must be a finite number in [0, "),
        (["--obs-noise", "-1"], "--obs-noise must be a finite number in [0, "),
        (["--clip", "0"], "--clip must be a finite number in (0, "),
        (["--delta", "1"], "--delta must be a finite number in (0, 1), got '1'"),
        (["--dqn-preset", "fast"], "--dqn-preset must be one of 'solves', 'legacy', got 'fast'"),
        (["--seeds", "0"], "--seeds must be an integer >= 1, got '0'"),
    ],
)
def test_reproduce_bad_options_exit_2_before_any_file(
    args: list[str], needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "rep"
    with pytest.raises(SystemExit) as e:
        main(["reproduce", "dprl", *args, "--out", str(out)])
    assert e.value.code == 2
    assert needle in capsys.readouterr().err
    assert not out.exists()


def test_train_options_cover_the_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Every DprlConfig field is an option; unset options keep the config's defaults; each
    option reaches its field."""
    from ldp_audit.cli import build_parser
    from ldp_audit.training.dprl.config import DprlConfig

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    train = next(a for a in sub.choices["train"]._actions
                 if isinstance(a, argparse._SubParsersAction)).choices["dprl"]  # fmt: skip
    opts = {s for a in train._actions for s in a.option_strings}
    fields = {f.name for f in dataclasses.fields(DprlConfig)}
    assert {n for n in fields if f"--{n.replace('_', '-')}" not in opts} == set()
    assert "--no-store-updates" in opts
    base = ["--algo", "dqn", "--privacy", "dpsgd"]
    assert _parsed(monkeypatch, "train", base, tmp_path) == DprlConfig(algo="dqn")
    given = ["--lr", "0.003", "--buffer-size", "64", "--batch-size", "8", "--learning-starts", "32",
             "--gamma", "0.9", "--num-envs", "2", "--start-e", "0.5", "--canary-seed", "3",
             "--budget-epsilon", "none", "--eval-episodes", "2"]  # fmt: skip
    want = DprlConfig(algo="dqn", lr=0.003, buffer_size=64, batch_size=8, learning_starts=32,
                      gamma=0.9, num_envs=2, start_e=0.5, canary_seed=3,
                      eval_episodes=2)  # fmt: skip
    assert _parsed(monkeypatch, "train", [*base, *given], tmp_path) == want


def test_reproduce_noise_and_audit_canaries_come_from_the_config(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """--noise is the field dpsgd_noise (bounds(option=...)); --audit-canaries' command-line
    default 500 (bounds(cli_default=500)) is replaced by the value given, and --help shows both
    defaults."""
    from ldp_audit.cli import build_parser
    from ldp_audit.training.dprl.config import ReproduceSettings

    argv = ["--noise-multiplier", "0", "2.5", "--audit-canaries", "0"]
    got = _parsed(monkeypatch, "reproduce", argv, tmp_path)
    assert got == ReproduceSettings(dpsgd_noise=(0.0, 2.5), audit_canaries=0)
    got = _parsed(monkeypatch, "reproduce", ["--audit-canaries", "800"], tmp_path)
    assert got == ReproduceSettings()  # the Python default, given explicitly
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    rep = next(a for a in sub.choices["reproduce"]._actions
               if isinstance(a, argparse._SubParsersAction)).choices["dprl"]  # fmt: skip
    text = " ".join(rep.format_help().split())
    assert "--noise-multiplier NOISE_MULTIPLIER [NOISE_MULTIPLIER ...] DP-SGD noise multipliers " \
        "of the grid (0: non-private) (>= 0, <= 1e+06; default: 0.0 0.01 0.03 0.1 0.5 1.0)" \
        in text  # fmt: skip
    assert "(>= 0; default: 500; Python default: 800)" in text


@pytest.mark.parametrize(
    ("argv", "want"),
    [
        (["--privacy", "obs-noise", "--state-box", "cartpole"], {"state_box": "CARTPOLE"}),
        (
            ["--privacy", "obs-noise", "--state-box=-3,3;-4,4;-0.5,0.5;-5,5"],
            {"state_box": ((-3.0, 3.0), (-4.0, 4.0), (-0.5, 0.5), (-5.0, 5.0))},
        ),
        (["--privacy", "obs-noise", "--state-box", "none"], {"state_box": None}),
        (["--privacy", "none", "--store-updates"], {"store_updates": True}),
        (["--privacy", "none", "--no-store-updates"], {"store_updates": False}),
        (["--privacy", "none"], {"store_updates": None}),
    ],
)
def test_train_state_box_and_store_updates_reach_the_config(
    argv: list[str], want: dict, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from ldp_audit.training.dprl.config import DprlConfig
    from ldp_audit.training.dprl.obs_noise import CARTPOLE_BOX

    if want.get("state_box") == "CARTPOLE":
        want = {"state_box": CARTPOLE_BOX}
    privacy = argv[1]
    got = _parsed(monkeypatch, "train", ["--algo", "dqn", *argv], tmp_path)
    assert got == DprlConfig(algo="dqn", privacy=privacy, **want)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        ([], "the following arguments are required: --algo, --privacy"),
        (["--algo", "dqn"], "the following arguments are required: --privacy"),
        (["--privacy", "none"], "the following arguments are required: --algo"),
    ],
)
def test_train_algo_and_privacy_are_required(
    argv: list[str], needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """bounds(required=True): exit 2 before any file, though the config has defaults."""
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        main(["train", "dprl", *argv, "--out", str(out)])
    assert e.value.code == 2
    assert needle in capsys.readouterr().err
    assert not out.exists()


def test_the_noise_multiplier_has_one_name_and_options_are_never_abbreviated(capsys) -> None:
    """One DP-SGD noise scale, one option name (issue 39): ``reproduce dprl`` takes
    ``--noise-multiplier`` as ``train dprl`` does; the former ``--noise`` is refused with a
    pointer to it, and no option is read from an abbreviation (argparse's default would have
    read ``--noise`` as ``--noise-multiplier`` silently)."""
    for argv in (["reproduce", "dprl"], ["train", "dprl", "--algo", "dqn", "--privacy", "dpsgd"]):
        with pytest.raises(SystemExit) as e:
            main([*argv, "--noise", "1", "--no-progress"])
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert "--noise" in err and "did you mean --noise-multiplier" in err, err
    with pytest.raises(SystemExit):
        main(["audit", "--mechanism", "laplace", "--eps", "1"])  # --epsilon, abbreviated
    assert "--eps" in capsys.readouterr().err


def test_convergence_interval_counts_the_unsolved_seeds() -> None:
    """Each row's convergence interval is the median's, over every seed: it holds the median,
    and its upper end is inf wherever a seed did not solve (the README showed "inf [502, 502]"
    for 1 of 3 seeds solved: a bootstrap of the solved seeds' mean, the unsolved ones dropped)."""
    import math
    import re

    doc = json.loads((REPORT / "results.json").read_text())
    text = (REPORT / "README.md").read_text()  # the writer's, by the test above
    rows = re.findall(r"^\| (?:reinforce|dqn) \|.*$", text, re.M)
    assert len(rows) == len(doc["table"]) == 18
    for line, r in zip(rows, doc["table"], strict=True):
        med, lo, hi = map(
            float, re.fullmatch(r"(\S+) \[(\S+), (\S+)\]", line.split(" | ")[7]).groups()
        )
        assert lo <= med <= hi, line
        assert math.isinf(hi) == (r["solved"] < r["seeds"]), line


@pytest.mark.parametrize(("sigma", "observations"), [(200.0, 10), (50.0, 284)])
def test_boxed_epsilon_is_the_exact_gaussian_composition(sigma, observations):
    """The report's per-episode box epsilon is the exact one: H observations, each the Gaussian
    mechanism of sensitivity D (the box diagonal in IQR units) and std sigma, are G_mu with
    mu = sqrt(H) D / sigma, whose delta at the reported epsilon is the target (Balle & Wang's
    closed form, here by SciPy). It was RDP's, 3-10% looser (delta there far below 1e-5)."""
    from scipy.stats import norm

    from ldp_audit.training.dprl.obs_noise import CARTPOLE_BOX, CARTPOLE_IQR
    from ldp_audit.training.dprl.reproduce_runs import boxed_epsilon

    d = math.sqrt(
        sum(((hi - lo) / q) ** 2 for (lo, hi), q in zip(CARTPOLE_BOX, CARTPOLE_IQR, strict=True))
    )
    mu = math.sqrt(observations) * d / sigma

    def delta(e: float) -> float:
        return norm.cdf(-e / mu + mu / 2) - math.exp(e) * norm.cdf(-e / mu - mu / 2)

    eps = boxed_epsilon(sigma, 1e-5, observations)
    assert delta(eps) == pytest.approx(1e-5, rel=1e-4)
    assert delta(0.99 * eps) > 1.05e-5  # not looser than 1%


def test_too_many_audit_canaries_are_refused_by_their_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Session 56 probe: ``reproduce dprl --audit-canaries 1000000`` was refused as "canaries
    must be <= the number of model parameters" (the audit run's field), naming no option."""
    out = tmp_path / "rep"
    assert main(["reproduce", "dprl", "--audit-canaries", "4611", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--audit-canaries must be <= 4610" in err and "got 4611" in err
    assert not out.exists()
    from ldp_audit.training.dprl.config import ReproduceSettings

    assert ReproduceSettings(audit_canaries=4610).audit_canaries == 4610  # the DQN's 4,610


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["reproduce", "dprl", "--obs-noise", "0", "5e-324"], "--obs-noise must be 0 or >= 2.2"),
        (["reproduce", "dprl", "--noise-multiplier", "5e-324"], "--noise-multiplier must be 0 or"),
        (["reproduce", "fedrl", "--attack-sigmas", "5e-324"], "--attack-sigmas must be 0 or >="),
        # train dprl wrote config.json, the ledger and a manifest before this refusal
        (
            [
                "train",
                "dprl",
                "--algo",
                "dqn",
                "--privacy",
                "dpsgd",
                "--noise-multiplier",
                "5e-324",
            ],
            "--noise-multiplier must be 0 or >= 2.2",
        ),  # fmt: skip
    ],
)
def test_a_subnormal_noise_level_is_refused_before_the_grid(
    args: list[str], needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Session 56 probe: ``reproduce dprl --obs-noise 5e-324`` (or ``--noise-multiplier``,
    ``reproduce fedrl --attack-sigmas``) passed the [0, 1e6] bounds, made --out and started the
    grid; a run's own config refused it ("sigma must be >= 2.22507e-308"), naming no option.
    ``train dprl --noise-multiplier 5e-324`` was refused once its run folder was written."""
    out = tmp_path / "rep"
    assert main([*args, "--out", str(out)]) == 2
    assert needle in capsys.readouterr().err
    assert not out.exists()
