"""FedRL: output mechanism, accounting before release, training run directory, audit, attack,
CLI train -> attack -> report, bad input."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from ldp_audit.accountant import (
    Accountant,
    GaussianEvent,
    NonPrivateEvent,
    SelfComposedEvent,
    compose,
)
from ldp_audit.attacks.fedrl import (
    attack_observation,
    attack_rewards,
    binary_accuracy_ceiling,
    implied_epsilon,
)
from ldp_audit.errors import InvalidParameterError
from ldp_audit.mechanisms import analytic_gaussian_epsilon
from ldp_audit.release import release_with, reserve
from ldp_audit.training.fedrl.config import FedRLConfig
from ldp_audit.training.fedrl.gridworld import generate_maps
from ldp_audit.training.fedrl.mechanisms import OutputMechanism, TargetMechanism
from ldp_audit.training.fedrl.report import report_sections
from ldp_audit.training.fedrl.runs import run_fedrl, train_fedrl

TINY = {
    "size": 8,
    "n_maps": 100,
    "train_steps": 40,
    "n_envs": 4,
    "batch_size": 8,
    "learning_starts": 16,
    "eval_maps": 5,
    "target_update": 5,
    "prepay_block": 7,
}


@pytest.fixture(scope="module")
def maps():
    return generate_maps(8, 100, seed=0)


# ---------------------------------------------------------------- mechanism


def test_clipped_output_mechanism_epsilon_and_event():
    m = OutputMechanism(1.0, 2.0)
    assert m.sensitivity == pytest.approx(2 * 2.0 * 4.0)  # 2 B sqrt(16)
    assert m.epsilon == pytest.approx(analytic_gaussian_epsilon(1.0, 16.0, 1e-5))
    assert m.event() == GaussianEvent(1.0 / 16.0)
    assert m.exchange_event(5) == SelfComposedEvent(GaussianEvent(1.0 / 16.0), 5)
    assert m.exchange_event(np.int64(3)) == SelfComposedEvent(GaussianEvent(1.0 / 16.0), 3)
    for rows in (2.5, 1.0, True, "3", 0):  # 2.5 rows was charged as 2 (truncated), not refused
        with pytest.raises(InvalidParameterError, match="rows"):
            m.exchange_event(rows)
    assert m.epsilon_at(0.0) == math.inf and m.epsilon_at(np.float64(1e-5)) == m.epsilon
    for delta in ("0.1", True, -1.0, 1.0, float("nan")):  # "0.1" was read as 0.1
        with pytest.raises(InvalidParameterError, match="delta"):
            m.epsilon_at(delta)
    x = np.full((3, 16), 100.0)
    y = m.privatize(x, np.random.default_rng(0))
    assert y.shape == (3, 16) and abs(y.mean() - 2.0) < 1.0  # clipped to B = 2 before noise
    for bad, words in [(np.ones(15), "16 columns"), (np.full(16, np.nan), "x must be finite")]:
        with pytest.raises(InvalidParameterError, match=words):  # refused before any noise
            m.privatize(bad, np.random.default_rng(0))


@pytest.mark.parametrize("make", [OutputMechanism, TargetMechanism])
def test_mechanism_bound_refusal_names_its_own_argument(make):
    """OutputMechanism(1.0, 0.0) and TargetMechanism(1.0, 0.0) (the targets' bound) were both
    refused as 'clip_outputs must be ...', a name neither takes."""
    with pytest.raises(InvalidParameterError, match=r"^bound must be .*got 0.0"):
        make(1.0, 0.0)


@pytest.mark.parametrize(
    ("sigma", "bound", "word"), [(1.0, None, "unbounded"), (0.0, 1.0, "no noise")]
)
def test_unprotected_outputs_are_infinite_in_words(sigma, bound, word):
    m = OutputMechanism(sigma, bound)
    assert math.isinf(m.epsilon) and not m.private
    assert m.event() == NonPrivateEvent()
    assert word in m.why_infinite() and m.why_infinite().startswith("infinite")


def test_reserved_block_refuses_an_unpaid_release():
    """FedRL's exchange draws on a block reserved through ldp_audit.release.reserve."""
    acc = reserve(Accountant(None))
    ev = GaussianEvent(1.0)
    with pytest.raises(InvalidParameterError, match="was not charged to the ledger first"):
        release_with(lambda: np.zeros(2), accountant=acc, charges=[("0/beta", ev)], epsilon=1.0)
    acc.add([("0/beta", ev)])
    assert acc.accountant.ledger.agents() == ["0/beta"]  # durable charge before any release
    rel = release_with(lambda: np.zeros(2), accountant=acc, charges=[("0/beta", ev)], epsilon=1.0)
    assert rel.values.shape == (2,) and acc.unused() == 0
    with pytest.raises(InvalidParameterError, match="not charged"):
        release_with(lambda: np.zeros(2), accountant=acc, charges=[("0/beta", ev)], epsilon=1.0)


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"sigma": -1.0}, r"sigma must be a real number in \[0, 1e\+06\], got -1.0"),
        ({"sigma": float("nan")}, r"sigma must be .*got nan"),
        ({"sigma": True}, r"sigma must be .*got True"),
        ({"sigma": "1"}, r"sigma must be .*got '1'"),
        ({"clip_outputs": 0.0}, r"clip_outputs must be None or a real .*\[1e-06, .*got 0.0"),
        ({"clip_outputs": -2}, r"clip_outputs must be .*got -2"),
        ({"hist_len": 0}, r"hist_len must be an integer >= 1, got 0"),
        ({"size": 12}, r"size must be one of 8, 16, 32.*got 12"),
        ({"density": 1.0}, r"density must be a real number in \[0, 1\), got 1.0"),
        ({"methods": ("dqn-beta",)}, r"methods must be one of .*got 'dqn-beta'"),
        ({"methods": ("fedrl", "fedrl")}, r"methods must not repeat"),
        ({"eval_maps": 900, "n_maps": 1000}, r"eval_maps must be <= the 100 test maps"),
    ],
)
def test_bad_config(kwargs, match):
    with pytest.raises(InvalidParameterError, match=match):
        FedRLConfig(**kwargs)


def test_gridworld_actions_must_be_integers(maps):
    """3.0 and True were actions 3 and 1 of the Gymnasium env, and 2.7 action 2 of the vector
    one (np.asarray(..., dtype=int64))."""
    import gymnasium as gym

    from ldp_audit.training.fedrl.gridworld import VectorGridWorld

    env = gym.make("ldp_audit/FedRLGridWorld-v0", maps=maps, hist_len=1)
    env.reset(seed=0)
    for bad in (3.0, True, 16, -1):
        with pytest.raises(InvalidParameterError, match="action"):
            env.step(bad)
    env.step(np.int64(3))
    vec = VectorGridWorld(maps, np.array([1, 2]), hist_len=1)
    vec.reset()
    with pytest.raises(InvalidParameterError, match=r"2 integers in \[0, 16\)"):
        vec.step(np.array([2.7, 1.0]))
    assert vec.step(np.array([2, 1]))[3].all()


def test_other_size_with_t_max_is_allowed():
    assert FedRLConfig(size=12, t_max=50).episode_limit == 50


# ---------------------------------------------------------------- training and accounting


def test_every_release_is_charged_and_recorded(maps):
    cfg = FedRLConfig(**TINY, clip_outputs=1.0, methods=("fedrl",))
    res = run_fedrl(cfg, seed=3, maps=maps)
    acc, log = res["accountant"], res["log"]
    r = res["results"][0]
    it, up = cfg.train_steps, r["updates"]
    assert up == it - (cfg.learning_starts // cfg.n_envs - 1)  # updates start when 16 stored
    q = log.q.arrays()
    beta = q["sender"] == 1
    train = q["kind"] <= 2
    # beta releases n_envs rows per acting step and 2 x batch rows per update
    assert (beta & train).sum() == it * cfg.n_envs + up * 2 * cfg.batch_size
    assert ((~beta) & train).sum() == it * cfg.n_envs + up * cfg.batch_size
    assert len(log.y) == up * cfg.batch_size
    # the ledger holds exactly the charges of those releases (prepaid blocks all drawn)
    nm = cfg.output_mechanism().event()
    expected = [(SelfComposedEvent(nm, cfg.n_envs), it), (SelfComposedEvent(nm, 8), 2 * up)]
    eps_expected, _ = compose(expected, delta=cfg.delta, method="rdp")
    assert acc.spent("0/beta", delta=cfg.delta, method="rdp") == pytest.approx(eps_expected)
    assert math.isinf(acc.spent("0/alpha:Y", delta=cfg.delta, method="rdp"))  # Y unprotected
    assert math.isinf(acc.spent("0/beta@fedrl2", delta=cfg.delta, method="rdp"))
    assert math.isfinite(acc.spent("0/beta@fedrl1", delta=cfg.delta, method="rdp"))
    # clipped before noise: released values have the noise spread around [-1, 1]
    assert np.abs(q["report"]).max() < 1.0 + 8 * cfg.sigma
    assert r["target_syncs"] == up // cfg.target_update > 0


@pytest.mark.parametrize(
    ("method", "what"), [("fedrl", "alpha's Q outputs are"), ("dqn-alpha", "joint Q-values are")]
)
def test_diverged_training_refused_naming_the_learning_rate(maps, method, what):
    """lr 1e30: FedRL stopped with the mechanism's 'x must be finite; found nan at index
    (0, 0)', and DQN-alpha / DQN-full trained on to a NaN model and printed a SuccRate, exit 0."""
    cfg = FedRLConfig(**TINY, lr=1e30, methods=(method,))
    with pytest.raises(
        InvalidParameterError, match=rf"fedrl diverged: .*{what} not finite.*lr=1e\+30"
    ):
        run_fedrl(cfg, seed=0, maps=maps, record=False)


def test_runs_are_reproducible(maps):
    import torch

    cfg = FedRLConfig(**TINY, methods=("dqn-alpha", "fedrl"))
    state = torch.get_rng_state()
    a = run_fedrl(cfg, seed=5, maps=maps, record=False)["results"]
    # torch's global generator untouched (the modules' default init drew from it, then overwritten)
    assert torch.equal(torch.get_rng_state(), state)
    b = run_fedrl(cfg, seed=5, maps=maps, record=False)["results"]
    for x, y in zip(a, b, strict=True):
        assert x["final_loss"] == y["final_loss"]
        for n in x["state"]:
            for k in x["state"][n]:
                assert np.array_equal(x["state"][n][k], y["state"][n][k])


def test_runs_batched_are_independent(maps):
    cfg = FedRLConfig(**{**TINY, "train_steps": 20}, runs=2)
    res = run_fedrl(cfg, seed=2, maps=maps, record=False)["results"]
    assert [(r["method"], r["trial"]) for r in res] == [
        (m, t) for m in ("dqn-alpha", "dqn-full", "fedrl") for t in (0, 1)
    ]
    for a, b in zip(res[::2], res[1::2], strict=True):
        assert a["runs_batched"] == 2
        net = next(iter(a["state"]))
        w = next(iter(a["state"][net]))
        assert not np.array_equal(a["state"][net][w], b["state"][net][w])  # own init per run


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"seed": -1}, r"^seed must be an integer >= 0, got -1$"),
        ({"seed": True}, r"^seed must be an integer >= 0, got True$"),
        ({"seed": 1, "threads": 0}, r"^threads must be an integer >= 1, got 0$"),
        ({"seed": 1, "threads": 2.0}, r"^threads must be an integer >= 1, got 2.0$"),
    ],
)
def test_bad_seed_or_threads_is_refused_before_any_file(tmp_path, kw, match):
    out = tmp_path / "run"
    with pytest.raises(InvalidParameterError, match=match):
        train_fedrl(FedRLConfig(**TINY, runs=1), out, **kw)
    with pytest.raises(InvalidParameterError, match=match):
        run_fedrl(FedRLConfig(**TINY, runs=1), **kw)
    assert not out.exists()


def test_run_directory_and_report(tmp_path):
    cfg = FedRLConfig(**TINY, runs=1)
    out = tmp_path / "run"
    m = train_fedrl(cfg, out, seed=1)
    names = {p.name for p in out.iterdir()}
    assert {
        "config.json",
        "ledger.sqlite",
        "transcript.npz",
        "secrets.npz",
        "metrics.json",
        "model.npz",
        "manifest.json",
    } <= names
    man = json.loads((out / "manifest.json").read_text())
    assert man["status"] == "complete" and man["algorithm"] == "fedrl"
    assert set(m["table"]) == {"DQN-alpha", "DQN-full", "FedRL-1", "FedRL-2"}
    words = {p["ledger_agent"]: p["in_words"] for p in m["privacy"]}
    assert "unbounded" in words["0/beta"] and "unbounded" in words["0/alpha:Y"]
    secs = report_sections(out)
    assert [s["id"] for s in secs] == ["fedrl-privacy", "fedrl-table1"]
    assert any(
        "infinite, because the Q outputs are unbounded" in str(r)
        for r in secs[0]["tables"][0]["rows"]
    )
    # a run directory is evidence: never overwritten silently
    from ldp_audit.errors import RunDirectoryError

    with pytest.raises(RunDirectoryError):
        train_fedrl(cfg, out, seed=1)


def test_ctrl_c_writes_what_was_released_and_marks_interrupted(tmp_path, monkeypatch, npz_writes):
    """Ctrl-C after the FedRL runs released: the run is marked interrupted and its transcript
    holds every Q output the ledger was charged for (the ledger and transcript agree)."""
    from ldp_audit.accountant import Ledger
    from ldp_audit.training.fedrl import runs as F  # run_fedrl looks _train_runs up there

    real = F.train_runs

    def interrupted(method, *args, **kwargs):
        out = real(method, *args, **kwargs)
        if method == "fedrl":
            raise KeyboardInterrupt
        return out

    monkeypatch.setattr(F, "train_runs", interrupted)
    cfg = FedRLConfig(**TINY, runs=1, methods=("fedrl", "dqn-alpha"))
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        train_fedrl(cfg, out, seed=1)
    assert json.loads((out / "manifest.json").read_text())["status"] == "interrupted"
    with np.load(out / "transcript.npz") as tr:  # absent before the fix: nothing was written
        rows = len(tr[next(k for k in tr.files if k.startswith("q_"))])
    led = Ledger(out / "ledger.sqlite", readonly=True)
    try:
        charged = len(led)
    finally:
        led.close()
    assert rows > 0 and charged > 0
    assert ("transcript.npz", True) in npz_writes and all(
        c for _, c in npz_writes
    )  # session 58: the close inside closing()


# ---------------------------------------------------------------- audit (approximate DP)


def test_audit_accepts_correct_and_flags_broken_output_mechanism():
    """confidence 0.999: the correct mechanism is wrongly flagged with probability <= 0.1 %."""
    from ldp_audit.audit import audit

    good = OutputMechanism(8.0, 1.0)

    class Broken(OutputMechanism):
        def privatize(self, x, rng):  # noqa: ANN001, ANN202 - claims sigma 8, adds sigma 2
            return OutputMechanism(2.0, self.bound).privatize(x, rng)

    bad = Broken(8.0, 1.0)
    assert good.epsilon == pytest.approx(bad.epsilon) and 3 < good.epsilon < 6
    r1 = audit(
        good, good.candidate_pairs(), samples=40_000, float_bits=False, rng=1, confidence=0.999
    )
    assert not r1.violation and r1.epsilon_lower_bound <= good.epsilon
    r2 = audit(
        bad, bad.candidate_pairs(), samples=40_000, float_bits=False, rng=1, confidence=0.999
    )
    assert r2.violation and r2.epsilon_lower_bound > good.epsilon


# ---------------------------------------------------------------- attack scoring


def test_binary_ceiling_and_implied_epsilon():
    assert binary_accuracy_ceiling(0.0, 0.0, 0.5) == pytest.approx(0.5)
    assert binary_accuracy_ceiling(0.0, 0.0, 0.8) == pytest.approx(0.8)
    assert binary_accuracy_ceiling(1.0, 0.0, 0.5) == pytest.approx(math.e / (1 + math.e))
    assert binary_accuracy_ceiling(math.inf, 0.0, 0.5) == 1.0
    for eps in (0.5, 2.0, 5.0):
        c = binary_accuracy_ceiling(eps, 1e-5, 0.5)
        assert implied_epsilon(c, 1e-5, 0.5) == pytest.approx(eps, rel=1e-6)
    assert implied_epsilon(0.55, 0.0, 0.7) == 0.0  # below the prior: nothing implied


def test_observation_attack_recovers_clean_and_not_noisy():
    rng = np.random.default_rng(0)
    obs = (rng.random((1500, 25)) < 0.7).astype(np.uint8)
    w = rng.normal(size=(25, 16))
    clean = obs @ w
    res0 = attack_observation(clean, obs, epsilon=math.inf, delta=0.0, seed=0)
    acc0 = np.mean([r["accuracy"] for r in res0])
    assert acc0 > 0.85 and len(res0) == 24
    noisy = clean + 200.0 * rng.normal(size=clean.shape)
    m = OutputMechanism(200.0, 10.0)
    res1 = attack_observation(noisy, obs, epsilon=m.epsilon, delta=m.delta, seed=0)
    acc1 = np.mean([r["accuracy"] for r in res1])
    assert acc1 < 0.75  # near the 0.7 majority rate
    assert not any(r["violation"] for r in res1)


def test_observation_attack_on_a_cell_with_one_obstacle_among_its_training_rows():
    # a short run's cell seen as an obstacle once: early stopping's stratified split raised
    # ValueError ('attack fedrl' exit 3); cell j is an obstacle in row j only, so for most cells
    # that row lands among the 21 training rows
    obs = np.ones((30, 25), dtype=np.uint8)
    obs[np.arange(25), np.arange(25)] = 0
    values = np.random.default_rng(0).normal(size=(30, 16))
    res = attack_observation(values, obs, epsilon=math.inf, delta=0.0, seed=0)
    assert len(res) == 24 and all(r["n_test"] == 9 and 0 <= r["correct"] <= 9 for r in res)


def test_reward_attack_from_clean_targets():
    rng = np.random.default_rng(1)
    bump = rng.integers(0, 2, 2000)
    reward = np.where(bump > 0, -11.0, -2.0) + rng.random(2000)
    y = reward + 0.9 * 3.0
    res = attack_rewards(y, reward, bump, epsilon=math.inf, delta=0.0, seed=0)
    assert res["accuracy"] > 0.97 and res["ceiling"] == 1.0 and res["mae"] < res["mae_baseline"]
    # session 56: `attack fedrl --seed 9223372036854775807` was exit 3 (scikit-learn takes
    # random_state < 2**32); seeds below it keep their results
    big = attack_rewards(y, reward, bump, epsilon=math.inf, delta=0.0, seed=2**63 - 1)
    assert big["accuracy"] > 0.97
    assert attack_rewards(y, reward, bump, epsilon=math.inf, delta=0.0, seed=0) == res


# ---------------------------------------------------------------- CLI


def _cli(args):
    from ldp_audit.cli import main

    return main(args)


TINY_CLI = [
    "--size",
    "8",
    "--n-maps",
    "100",
    "--train-steps",
    "30",
    "--n-envs",
    "4",
    "--batch-size",
    "8",
    "--eval-maps",
    "5",
    "--learning-starts",
    "16",
    "--no-progress",
]


def test_cli_train_attack_report(tmp_path, capsys):
    run = tmp_path / "run"
    assert (
        _cli(
            [
                "train",
                "fedrl",
                *TINY_CLI,
                "--sigma",
                "1",
                "--clip-outputs",
                "2",
                "--methods",
                "fedrl",
                "--out",
                str(run),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "0/beta" in out and "-DP over the whole run" in out and "0/alpha:Y" in out
    # below the audit's 1000 samples: exit 2 before the attack (was after it, naming "samples")
    assert _cli(["attack", "fedrl", "--run-dir", str(run), "--audit-samples", "10"]) == 2
    assert "--audit-samples must be 0 (no audit) or >= 1000, got 10" in capsys.readouterr().err
    assert not (run / "attack_fedrl.json").exists()
    assert _cli(["attack", "fedrl", "--run-dir", str(run), "--audit-samples", "5000"]) == 0
    assert (run / "attack_fedrl.json").is_file() and (run / "audit.json").is_file()
    doc = json.loads((run / "attack_fedrl.json").read_text())
    assert doc["attack"] == "fedrl-transcript" and 0 <= doc["accuracy"] <= 1
    # the best cell named once, with its own chance (it said "best cell cell +2,-1 0.595 ...")
    best = doc["extra"]["best_cell"]
    assert f"best {best['target']} {best['accuracy']:.3f} [" in doc["extra"]["summary"]
    assert f"] (chance {best['chance']:.3f}) vs ceiling" in doc["extra"]["summary"]
    assert _cli(["report", str(run)]) == 0
    md = (run / "report" / "report.md").read_text()
    # one run has no t-interval: the text says so as the table does ("(1 run)", never "nan")
    assert "(none with one run)" in md and "(1 run)" in md and "nan" not in md
    assert "gave no text" not in md and "the same result file" in md
    assert "FedRL: privacy of what the agents exchange" in md
    assert "FedRL: attack on the transcript" in md
    # a second attack must not overwrite the evidence
    assert _cli(["attack", "fedrl", "--run-dir", str(run), "--audit-samples", "0"]) == 2


def test_attack_fedrl_checks_the_audit_beside_it_before_the_attack(tmp_path, capsys):
    """`attack fedrl --run-dir RUN --audit-samples N` on a run that had an audit.json (written
    by `audit --run-dir`) ran the attack, wrote attack_fedrl.json, then refused audit.json (exit
    2): half its result written, and its rerun refused for attack_fedrl.json. Now audit.json is
    checked with attack_fedrl.json, before the attack."""
    from ldp_audit.rundir import verify_run, write_artifact
    from tests.test_report_fixtures import audit_entry

    run = tmp_path / "run"
    train = ["train", "fedrl", *TINY_CLI, "--sigma", "1", "--clip-outputs", "2"]
    assert _cli([*train, "--methods", "fedrl", "--out", str(run)]) == 0
    write_artifact(run, "audit.json", [audit_entry()])
    capsys.readouterr()
    attack = ["attack", "fedrl", "--run-dir", str(run), "--audit-samples", "5000"]
    assert _cli(attack) == 2
    assert "audit.json already exists" in capsys.readouterr().err
    assert not (run / "attack_fedrl.json").exists() and verify_run(run).ok
    assert _cli([*attack, "--overwrite"]) == 0  # both replaced
    assert json.loads((run / "audit.json").read_text())[0]["samples"] == 5000
    assert verify_run(run).ok


@pytest.mark.parametrize(
    ("extra", "msg"),
    [
        (["--sigma", "-1"], "--sigma must be a finite number in [0, 1e+06], got '-1'"),
        (["--sigma", "nan"], "--sigma must be a finite number in [0, 1e+06], got 'nan'"),
        (["--sigma", "inf"], "argument --sigma: --sigma must be a finite number in [0, 1e+06]"),
        (["--clip-outputs", "0"], "--clip-outputs must be a finite number in [1e-06, 1e+06]"),
        (["--size", "12"], "size must be one of 8, 16, 32"),
        (["--density", "1.5"], "--density must be a finite number in [0, 1), got '1.5'"),
        (["--resume"], "--resume"),
    ],
)
def test_cli_bad_input(tmp_path, capsys, extra, msg):
    out = tmp_path / "never"
    try:  # refused by the option's converter (argparse exits) or by the command (returns 2)
        base = list(TINY_CLI)
        if extra[0] in base:  # an option is given once (a repeated one is refused)
            i = base.index(extra[0])
            del base[i : i + 2]
        code = _cli(["train", "fedrl", *base, *extra, "--out", str(out)])
    except SystemExit as e:
        code = e.code
    assert code == 2
    assert msg in capsys.readouterr().err
    assert not out.exists()  # refused before any work: nothing written, nothing charged


def _train_parser():
    import argparse

    from ldp_audit.cli import build_parser

    p = build_parser()
    for name in ("train", "fedrl"):
        sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
        p = sub.choices[name]
    return p


def test_cli_options_are_generated_from_the_config():
    """Every FedRLConfig field is an option of train fedrl (ldp_audit.config), none given
    means the config's defaults, and the help shows each field's default and bounds."""
    import dataclasses

    from ldp_audit.config import given_fields, option_name

    p = _train_parser()
    opts = {o: a for a in p._actions for o in a.option_strings}
    for f in dataclasses.fields(FedRLConfig):
        assert option_name(f.name) in opts, f.name
        assert opts[option_name(f.name)].dest == f"cfg__{f.name}"
    assert given_fields(p.parse_args([])) == {}
    help_text = " ".join(p.format_help().split())
    assert (
        "--n-maps N_MAPS maps generated (paper: 8000; split 80 / 10 / 10 percent) "
        "(>= 10; default: 8000)" in help_text
    )
    assert "(>= 1e-06, <= 1e+06; default: none)" in help_text  # --clip-outputs
    args = p.parse_args(["--clip-outputs", "none", "--t-max", "40", "--methods", "fedrl"])
    assert given_fields(args) == {"clip_outputs": None, "t_max": 40, "methods": ("fedrl",)}


def test_bounds_in_the_metadata_agree_with_the_config():
    """The bounds --help shows are the ones __post_init__ enforces: each end accepted, the
    value just outside refused (by the config itself, not only by the command line)."""
    import dataclasses

    for f in dataclasses.fields(FedRLConfig):
        b = f.metadata["ldp_audit"]
        for end, step, is_open in (("minimum", -1, b["open_min"]), ("maximum", 1, b["open_max"])):
            v = b[end]
            if v is None:
                continue
            if str(f.type).startswith("int"):
                inside, outside = int(v), int(v) + step
            else:
                inside = math.nextafter(v, -step * math.inf) if is_open else float(v)
                outside = float(v) if is_open else math.nextafter(v, step * math.inf)
            # sizes other than 8 / 16 / 32 need t_max; 10 maps hold one test map
            kw = {"size": {"t_max": 40}, "n_maps": {"eval_maps": 1}}.get(f.name, {})
            FedRLConfig(**kw, **{f.name: inside})
            with pytest.raises(InvalidParameterError, match=f.name):
                FedRLConfig(**kw, **{f.name: outside})
        if b["choices"] is not None:
            for c in b["choices"]:
                FedRLConfig(**{f.name: (c,) if f.name == "methods" else c})


def test_cli_methods_named_twice_train_once(tmp_path):
    """As before the options were generated: --methods fedrl fedrl trains FedRL once."""
    out = tmp_path / "run"
    code = _cli(["train", "fedrl", *TINY_CLI, "--methods", "fedrl", "fedrl", "--out", str(out)])
    assert code == 0
    doc = json.loads((out / "config.json").read_text())
    assert doc["config"]["methods"] == ["fedrl"]


def test_cli_hist_len_zero_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        _cli(["train", "fedrl", "--hist-len", "0"])
    assert e.value.code == 2 and "--hist-len must be an integer >= 1, got '0'" in (
        capsys.readouterr().err
    )


def test_cli_train_refuses_a_density_without_maps_before_any_file(tmp_path, capsys):
    """--density 0.999999999999 wrote config.json, ledger.sqlite and manifest.json, then
    refused (session 57): the maps are drawn before the run directory."""
    out = tmp_path / "run"
    assert _cli(["train", "fedrl", "--density", "0.999999999999", "--out", str(out)]) == 2
    assert "leaves no two connected free cells" in capsys.readouterr().err
    assert not out.exists()


def test_cli_attack_needs_a_fedrl_run(tmp_path, capsys):
    doc = {"algorithm": "pgc-a3c", "config": {}, "mechanism": None, "seed": 0}
    (tmp_path / "config.json").write_text(json.dumps(doc))
    assert _cli(["attack", "fedrl", "--run-dir", str(tmp_path)]) == 2
    assert "must be a fedrl run" in capsys.readouterr().err


def test_cli_reproduce_tiny(tmp_path, capsys):
    out = tmp_path / "rep"
    args = [
        "reproduce",
        "fedrl",
        "--sizes",
        "8",
        "--runs",
        "2",
        "--train-steps",
        "20",
        "--n-envs",
        "4",
        "--n-maps",
        "100",
        "--eval-maps",
        "5",
        "--hist-lens",
        "2",
        "--fig4-runs",
        "1",
        "--attack-sigmas",
        "0",
        "--attack-clip",
        "1",
        "--attack-steps",
        "60",
        "--audit-samples",
        "0",
        "--no-progress",
        "--out",
        str(out),
    ]
    assert _cli(args) == 0
    md = (out / "README.md").read_text()
    assert (
        "| 8 | FedRL-1 | 2 |" in md and "## Figure 4" in md and "## Attack on the transcript" in md
    )
    res = json.loads((out / "results.json").read_text())
    assert set(res["table1"]["8"]["table"]) == {"DQN-alpha", "FedRL-1", "FedRL-2", "DQN-full"}
    assert len(res["attacks"]) == 2  # sigma 0 without and with clipping
    assert not (out / "results.partial.json").exists()
    capsys.readouterr()
    assert _cli(args) == 2  # a generated report is evidence: no silent overwrite
    assert "already holds a report" in capsys.readouterr().err


def test_privacy_table_composes_alphas_two_training_channels():
    """Alpha releases Q outputs (``<run>/alpha``) and its targets Y (``<run>/alpha:Y``): its
    guarantee as an agent (the privacy unit) is the composition of both, larger than either
    line. Exact check: Gaussian mechanisms compose to a Gaussian with mu = sqrt(sum mu_i^2)."""
    from ldp_audit.training.fedrl.runs import privacy_table

    cfg = FedRLConfig(**TINY, sigma=30.0, clip_outputs=1.0, target_sigma=40.0, clip_targets=10.0)
    acc = Accountant()
    q, y = cfg.output_mechanism(), cfg.target_mechanism()
    acc.charge("0/alpha", q.exchange_event(1))
    acc.charge("0/alpha:Y", y.exchange_event(1))
    rows = {r["ledger_agent"]: r for r in privacy_table(cfg, acc, [0])}
    both = rows["0/alpha + 0/alpha:Y"]
    mu = math.hypot(8 / 30, 20 / 40)  # one row each (one charge each, kept cheap)
    assert both["epsilon"] == pytest.approx(analytic_gaussian_epsilon(1 / mu, 1.0, 1e-5), rel=1e-3)
    assert both["epsilon"] > rows["0/alpha"]["epsilon"] + rows["0/alpha:Y"]["epsilon"] / 2
    assert both["charges"] == 2 and "training releases" in both["channel"]
    # the paper's unprotected Y: alpha's guarantee is infinite, and says why
    cfg2 = FedRLConfig(**TINY, sigma=30.0, clip_outputs=1.0)
    acc2 = Accountant()
    acc2.charge("0/alpha", cfg2.output_mechanism().exchange_event(2))
    acc2.charge("0/alpha:Y", cfg2.target_mechanism().exchange_event(2))
    both2 = {r["ledger_agent"]: r for r in privacy_table(cfg2, acc2, [0])}["0/alpha + 0/alpha:Y"]
    assert math.isinf(both2["epsilon"]) and "targets Y are unbounded" in both2["in_words"]
