"""``ldp-audit train dprl`` -> ``attack membership --run-dir`` -> ``report`` end to end."""

from __future__ import annotations

import json
import math

import pytest
import torch

from ldp_audit.cli import main

torch.set_num_threads(1)

TRAIN = [
    "train", "dprl", "--algo", "reinforce", "--privacy", "dpsgd", "--noise-multiplier", "12",
    "--clip", "10", "--episodes", "160", "--canaries", "400", "--seed", "0", "--no-progress",
]  # fmt: skip


def test_train_attack_report(tmp_path, capsys) -> None:
    run = tmp_path / "run"
    assert main([*TRAIN, "--out", str(run), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["privacy"]["unit"] == "episode"
    # the ledger's best: PLD 1.438 here, below PRV (1.448) and RDP
    assert doc["privacy"]["epsilon"] == pytest.approx(1.438, abs=0.005)
    assert doc["privacy"]["method"] == "pld"
    assert doc["privacy"]["epsilon"] <= min(doc["privacy"]["by_method"].values())
    audit = tmp_path / "audit.json"
    code = main(["attack", "membership", "--run-dir", str(run), "--out", str(audit), "--json"])
    assert code == 0  # the correct trainer: no violation
    res = json.loads(audit.read_text())
    assert res["attack"] == "one-run-white-box"
    assert res["epsilon_lower_bound"] < res["composed_epsilon"]
    assert res["extra"]["black_box"]["attack"] == "one-run-black-box"
    capsys.readouterr()
    rep = tmp_path / "report"
    assert main(["report", str(run), str(audit), "--out", str(rep)]) == 0
    md = (rep / "report.md").read_text()
    assert "One-run audit" in md and "Privacy guarantee" in md
    assert "## One-run audit of the DP-SGD training" in md and "Opacus training" not in md
    # a run directory is evidence: training again into it is refused (exit 2)
    assert main([*TRAIN, "--out", str(run)]) == 2


@pytest.mark.parametrize(
    "args, needle",
    [
        (
            ["--noise-multiplier", "-1"],
            "--noise-multiplier must be a finite number in [0, 1e+06], got '-1'",
        ),
        (["--noise-multiplier", "nan"], "--noise-multiplier must be a finite number"),
        (
            ["--noise-multiplier", "1e7"],
            "--noise-multiplier must be a finite number in [0, 1e+06], got '1e7'",
        ),
        (["--clip", "0"], "--clip must be a finite number in (0, 1e+06], got '0'"),
        (["--delta", "1"], "--delta must be a finite number in (0, 1), got '1'"),
        (
            ["--state-box", "1,2"],
            "argument --state-box: --state-box must be 'cartpole' or four 'lo,hi' pairs "
            "separated by ';', got '1,2'",
        ),
        (["--state-box", "nan,1;0,1;0,1;0,1"], "got 'nan,1;0,1;0,1;0,1'"),
        (["--state-box", "1_0,1;0,1;0,1;0,1"], "--state-box must be 'cartpole' or four"),
        (["--state-box", "cartpole;"], "--state-box must be 'cartpole' or four"),
        (["--state-box=-inf,1;-1,1;-1,1;-1,1"], "--state-box must be 'cartpole' or four"),
        (["--state-box", "1,2;3,4;5,6;7,8;9,10"], "--state-box must be 'cartpole' or four"),
        (["--store-updates=yes"], "--store-updates"),  # a flag takes no value
        (["--hidden", "0"], "--hidden must be an integer >= 1, got '0'"),
        (
            ["--per-sample", "fast"],
            "--per-sample must be one of 'auto', 'materialize', 'ghost', got 'fast'",
        ),
        (["--canaries", "1"], "--canaries: --canaries must be 0 or an integer >= 2, got 1"),
        (
            ["--budget-epsilon", "0"],
            "--budget-epsilon must be a finite number in (0, inf), got '0'",
        ),
        (["--lr", "-1e-3"], "--lr must be a finite number in (0, inf), got '-1e-3'"),
        (  # session 58: taken; its canaries' inf norms made the model NaN
            ["--canary-scale", "1e308"],
            "--canary-scale must be a finite number in [1, 1e+06], got '1e308'",
        ),
        (["--dropout", "1"], "--dropout must be a finite number in [0, 1), got '1'"),
        (["--buffer-size", "1.5"], "--buffer-size must be an integer >= 1, got '1.5'"),
        (
            ["--exploration-fraction", "0"],
            "--exploration-fraction must be a finite number in (0, 1], got '0'",
        ),
        (["--device", "tpu"], "--device must be one of 'cpu', 'cuda', 'auto', got 'tpu'"),
        (["--algo", "ppo"], "argument --algo: --algo must be one of 'reinforce', 'dqn', got 'ppo'"),
        (
            ["--privacy", "ldp"],
            "argument --privacy: --privacy must be one of 'none', 'dpsgd', 'obs-noise', got 'ldp'",
        ),
    ],
)
def test_bad_cli_input_is_usage_error(tmp_path, capsys, args, needle) -> None:  # noqa: ANN001
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        main(["train", "dprl", "--algo", "dqn", "--privacy", "dpsgd", *args, "--out", str(out)])
    assert e.value.code == 2
    assert needle in capsys.readouterr().err
    assert not out.exists()  # nothing written, nothing charged


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--privacy", "none", "--canaries", "5"], "canaries audit DP-SGD training"),
        (
            ["--privacy", "dpsgd", "--noise-multiplier", "0", "--canaries", "5"],
            "they need --noise-multiplier > 0",
        ),
        (["--privacy", "dpsgd", "--state-box", "cartpole"], "--state-box clips observations"),
        (
            ["--privacy", "obs-noise", "--state-box=-1,1;-1,1;0,0.01;-1,1"],
            "--state-box must contain the declared IQRs",
        ),  # fmt: skip
    ],
)
def test_inconsistent_options_refused_before_any_episode(tmp_path, capsys, args, needle) -> None:  # noqa: ANN001
    out = tmp_path / "run"
    assert main(["train", "dprl", "--algo", "reinforce", *args, "--out", str(out)]) == 2
    assert needle in capsys.readouterr().err
    assert not out.exists()


def test_attack_on_other_algorithm_refused(tmp_path, capsys) -> None:
    from ldp_audit.rundir import RunWriter

    w = RunWriter(tmp_path / "r", algorithm="fedrl-unknown", config={}, seed=0)
    w.finish()
    assert main(["attack", "membership", "--run-dir", str(tmp_path / "r")]) == 2
    assert "fedrl-unknown" in capsys.readouterr().err


def test_obs_noise_train_says_infinite(tmp_path, capsys) -> None:
    run = tmp_path / "run"
    args = ["train", "dprl", "--algo", "reinforce", "--privacy", "obs-noise",
            "--noise-multiplier", "0.5", "--episodes", "8", "--no-progress",
            "--out", str(run)]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "epsilon = inf" in out


def test_broken_trainer_gives_violation_exit_codes(tmp_path, capsys) -> None:
    """A broken trainer's run: the audit exits 1 and the report's verdict is a violation."""
    from ldp_audit.training.dprl.config import DprlConfig
    from ldp_audit.training.dprl.trainer import train
    from tests.broken_dprl import NO_CLIPPING

    run = tmp_path / "bad"
    cfg = DprlConfig(algo="reinforce", privacy="dpsgd", noise_multiplier=12.0, clip=10.0,
                     episodes=160, canaries=400)  # fmt: skip
    train(cfg, seed=0, run_dir=run, hooks=NO_CLIPPING)
    audit = tmp_path / "audit.json"
    assert main(["attack", "membership", "--run-dir", str(run), "--out", str(audit)]) == 1
    assert "VIOLATION" in capsys.readouterr().out
    code = main(["report", str(run), str(audit), "--out", str(tmp_path / "rep")])
    assert code == 1
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "Verdict: violation" in md
    sec = md.split("One-run audit", 1)[1]  # this module's report section
    assert "| white-box |" in sec and "| black-box |" in sec and "VIOLATION" in sec


def test_reproduce_tiny(tmp_path) -> None:
    """The reproduction pipeline at a toy scale (the committed report is reports/dprl)."""
    from ldp_audit.training.dprl.config import ReproduceSettings
    from ldp_audit.training.dprl.reproduce import reproduce

    s = ReproduceSettings(seeds=2, episodes=16, total_steps=300, dpsgd_noise=(0.0, 1.0),
                          obs_noise=(0.0, 1.0), audit_canaries=0)  # fmt: skip
    res = reproduce(s, out=tmp_path / "rep")
    names = {p.name for p in (tmp_path / "rep").iterdir()}
    assert {"README.md", "results.json", "figure8.png", "figure9.png", "figure12.png",
            "figure13.png"} <= names  # fmt: skip
    rows = {(r["algo"], r["family"], r["sigma"]): r for r in res["table"]}
    assert rows[("reinforce", "dpsgd", 1.0)]["epsilon"] < math.inf
    assert rows[("dqn", "obs-noise", 1.0)]["epsilon"] == math.inf
    assert rows[("dqn", "obs-noise", 1.0)]["boxed_epsilon_per_episode"] < math.inf
    # the sigma 0 baseline is run once per (algo, seed) and shared by both figures
    assert rows[("reinforce", "dpsgd", 0.0)]["final_return_mean"] == pytest.approx(
        rows[("reinforce", "obs-noise", 0.0)]["final_return_mean"]
    )
    assert "inf on raw states" in (tmp_path / "rep" / "README.md").read_text()


def test_reproduce_refuses_existing_report_before_work(tmp_path, capsys) -> None:
    out = tmp_path / "rep"
    out.mkdir()
    (out / "README.md").write_text("earlier report")
    assert main(["reproduce", "dprl", "--seeds", "1", "--out", str(out)]) == 2
    assert (out / "README.md").read_text() == "earlier report"


def test_eval_episodes_beyond_its_cap_refused_before_any_work(tmp_path, capsys) -> None:
    """`--eval-episodes 9223372036854775807` trained, then died in numpy ("array is too big",
    exit 3, a traceback) with --force; `reproduce dprl` trained its grid first (session 57)."""
    out = tmp_path / "o"
    for head in (
        ["train", "dprl", "--algo", "reinforce", "--privacy", "none"],
        ["reproduce", "dprl"],
    ):
        argv = [*head, "--eval-episodes", str(2**63 - 1), "--force", "--out", str(out)]
        with pytest.raises(SystemExit) as e:  # a usage error: argparse's exit
            main(argv)
        assert e.value.code == 2
        assert "--eval-episodes must be <= 1,000,000,000" in capsys.readouterr().err
        assert not out.exists()


def test_a_failed_report_removes_the_folder_it_made(tmp_path) -> None:
    """A failing `reproduce` left its --out behind, empty (session 57); a folder that was there
    before stays, with its hand-written files."""
    from ldp_audit.rundir.paths import report_written

    new, old = tmp_path / "new", tmp_path / "old"
    old.mkdir()
    (old / "notes.md").write_text("mine")
    for folder in (new, old):
        with pytest.raises(RuntimeError), report_written(folder):
            (folder / "figs").mkdir(parents=True)
            (folder / "figs" / "a.png").write_bytes(b"x")
            raise RuntimeError("a run failed")
    assert not new.exists() and sorted(p.name for p in old.iterdir()) == ["notes.md"]


def test_reproduce_interrupted_while_writing_its_report_resumes_from_its_cache(
    tmp_path, capsys, monkeypatch
) -> None:
    """`reproduce dprl --cache C --out R` stopped by Ctrl-C / SIGTERM once its first figure was
    written left R holding that figure alone: the same command then refused R ("already exists
    and is not empty", --overwrite needed) instead of resuming from its cache (found by
    SIGTERM once R's first file appeared). Now the interrupted write removes what it wrote."""
    from matplotlib.figure import Figure

    out, cache = tmp_path / "rep", tmp_path / "cache"
    argv = ["reproduce", "dprl", "--seeds", "1", "--episodes", "5", "--total-steps", "300",
            "--noise-multiplier", "0", "--obs-noise", "0", "--audit-canaries", "0",
            "--eval-episodes", "0", "--cache", str(cache), "--out", str(out),
            "--no-progress"]  # fmt: skip
    real, saved = Figure.savefig, []

    def interrupted(self, *a, **k):
        saved.append(1)
        if len(saved) == 2:  # one figure written
            raise KeyboardInterrupt
        return real(self, *a, **k)

    monkeypatch.setattr(Figure, "savefig", interrupted)
    assert main(argv) == 130
    monkeypatch.undo()
    assert len(saved) == 2 and not out.exists()  # the --out it made removed too (session 57)
    cached = sorted(cache.iterdir())
    assert cached  # the finished runs
    capsys.readouterr()
    assert main(argv) == 0  # the same command: no --overwrite
    assert (out / "results.json").is_file() and sorted(cache.iterdir()) == cached
