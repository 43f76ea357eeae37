"""The subtle broken DP-SGD trainers (per-layer clipping, accountant charged q/2) are flagged in
one run by the white-box claimed-mechanism test; the correct trainers are not. (The broken
trainers are the reproduction's copies of tests/broken_dprl.py, run by its own audit task.)

Configurations (also the reproduction's audit table, ``training/dprl/reproduce.py``):
REINFORCE 40 updates of 4 episodes, sigma 6, C 10, 800 orthonormal gradient canaries; DQN
(hidden 64) 100 updates, Poisson rate q = 1/2 from a 2-transition buffer, sigma 3, 800 canaries.
Every verdict is at 99% confidence (three tests, Bonferroni): over the 2 correct runs of the fast
test the chance of any false alarm is at most 2%, over the 10 of the slow one at most 10%.
"""

from __future__ import annotations

import pytest
import torch

from ldp_audit.attacks.one_run import audit_run
from ldp_audit.training.dprl.config import DprlConfig, ReproduceSettings
from ldp_audit.training.dprl.reproduce_report import readme
from ldp_audit.training.dprl.reproduce_runs import (
    AUDIT_DQN,
    AUDIT_REINFORCE,
    audit_cases,
    audit_one,
)
from ldp_audit.training.dprl.trainer import train

torch.set_num_threads(1)
CONF = 0.99


def _audit(tmp_path, kw, hooks, seed):  # noqa: ANN001, ANN202
    run = tmp_path / f"{kw['algo']}-{seed}-{id(hooks)}"
    train(DprlConfig(**kw), seed=seed, run_dir=run, hooks=hooks)
    return audit_run(run, setting="white-box", confidence=CONF, mu_bound=False)


def _check_correct(tmp_path, seeds) -> None:  # noqa: ANN001
    for kw in (AUDIT_REINFORCE, AUDIT_DQN):
        for seed in seeds:
            res = _audit(tmp_path, kw, None, seed)
            assert not res.violation, res.extra["flagged_by"]
            mech = res.extra["mechanism_test"]
            assert mech["p_mean"] > 0.01 and mech["p_noise"] > 0.01
            assert mech["rate_lower_bound"] <= mech["rate_claimed"]


def test_correct_trainers_not_flagged(tmp_path) -> None:  # noqa: ANN001
    _check_correct(tmp_path, (0,))


@pytest.mark.slow
def test_correct_trainers_not_flagged_over_seeded_repeats(tmp_path) -> None:  # noqa: ANN001
    _check_correct(tmp_path, range(1, 6))


@pytest.mark.parametrize(
    "name", ["per-layer clipping, per-layer sigma*C noise", "accountant charged q/2 (DQN)"]
)
def test_subtle_bugs_flagged_in_one_run(name: str) -> None:
    """The reproduction's own audit task (``audit_one``, 95 %): flagged white-box by the
    mechanism test far beyond its level; the README renders the row."""
    s = ReproduceSettings()
    case = next(c for c in audit_cases(s) if c["trainer"] == name)
    row = audit_one(case, s)
    w = row["white-box"]
    assert w["violation"] and "mechanism" in w["flagged_by"]
    assert w["mechanism_p_mean"] < 1e-4  # the level is 0.05 / 3 / 2
    assert w["mechanism_rate_lower_bound"] > w["mechanism_rate_claimed"]
    assert row["true_epsilon"] > w["accountant_epsilon"]
    doc = {"table": [], "audits": [row], "command": "c", "wall_seconds": 1.0, "machine": "m"}
    md = readme(doc, s)
    assert f"| {name} | 0 | {row['updates']} |" in md and "VIOLATION (mechanism" in md
    assert "broken trainers flagged in one run" in md and name in md.split("Reading:")[1]


def test_run_without_updates_is_audited_by_the_bound_alone(tmp_path) -> None:  # noqa: ANN001
    """No update was made (learning never started): nothing for the curve and mechanism tests."""
    run = tmp_path / "idle"
    cfg = DprlConfig(algo="dqn", privacy="dpsgd", hidden=8, total_steps=50, canaries=6)
    assert train(cfg, seed=0, run_dir=run).updates == 0
    res = audit_run(run, setting="white-box", confidence=CONF)
    assert res.extra["f_dp"] is None and res.extra["mechanism_test"] is None
    assert not res.violation and res.epsilon_lower_bound == 0.0
