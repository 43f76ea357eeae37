"""The subtle broken DP-SGD trainers (per-layer clipping, accountant charged q/2) are flagged in
one run by the white-box claimed-mechanism test; the correct trainers are not.

Configurations (also the reproduction's audit table, ``training/dprl_reproduce.py``):
REINFORCE 40 updates of 4 episodes, sigma 6, C 10, 800 orthonormal gradient canaries; DQN
(hidden 64) 100 updates, Poisson rate q = 1/2 from a 2-transition buffer, sigma 3, 800 canaries.
Every verdict is at 99% confidence (three tests, Bonferroni): over the 2 correct runs of the fast
test the chance of any false alarm is at most 2%, over the 10 of the slow one at most 10%.
"""

from __future__ import annotations

import pytest
import torch

from ldp_audit.attacks.one_run import audit_run
from ldp_audit.training.dprl import DprlConfig, train
from ldp_audit.training.dprl_reproduce import (
    AUDIT_DQN,
    AUDIT_REINFORCE,
    ReproduceSettings,
    _readme,
    audit_summary,
)
from tests import broken_dprl as B

torch.set_num_threads(1)
CONF = 0.99


def _audit(tmp_path, kw, hooks, seed, black=False):  # noqa: ANN001, ANN202
    run = tmp_path / f"{kw['algo']}-{seed}-{id(hooks)}"
    train(DprlConfig(**kw), seed=seed, run_dir=run, hooks=hooks)
    white = audit_run(run, setting="white-box", confidence=CONF, mu_bound=False)
    if black:
        return white, audit_run(run, setting="black-box", confidence=CONF)
    return white


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
    "kw, hooks",
    [(AUDIT_REINFORCE, B.PER_LAYER_CLIPPING), (AUDIT_DQN, B.HALF_SAMPLE_RATE)],
    ids=["per-layer", "half-q"],
)
def test_subtle_bugs_flagged_in_one_run(tmp_path, kw, hooks) -> None:  # noqa: ANN001
    res, black = _audit(tmp_path, kw, hooks, 0, black=True)
    assert res.violation and "mechanism" in res.extra["flagged_by"]
    mech = res.extra["mechanism_test"]
    assert mech["p_mean"] < 1e-4  # far beyond the 0.0033 level
    assert mech["rate_lower_bound"] > mech["rate_claimed"]
    assert res.to_dict()["violation"] is True
    # the reproduction's README renders this row and says which test flagged it
    name = "per-layer clipping" if kw["algo"] == "reinforce" else "accountant charged q/2 (DQN)"
    row = {"trainer": name, "seed": 0, "updates": 1, "true_epsilon": 1.0,
           "white-box": audit_summary(res), "black-box": audit_summary(black)}  # fmt: skip
    doc = {"table": [], "audits": [row], "command": "c", "wall_seconds": 1.0, "machine": "m"}
    md = _readme(doc, ReproduceSettings())
    assert f"| {name} | 0 | 1 |" in md and "VIOLATION (mechanism" in md
    assert "broken trainers flagged in one run" in md and name in md.split("Reading:")[1]
