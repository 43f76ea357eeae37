"""One-run audit of DP-SGD training (attacks/one_run.py) against correct and broken trainers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.stats import binom

from ldp_audit.attacks.one_run_dprl import audit_run, dprl_evidence
from ldp_audit.attacks.one_run_steinke import audit_scores, epsilon_lower_bound, p_value
from ldp_audit.errors import InvalidParameterError, RunDirectoryError
from ldp_audit.stats import clopper_pearson_lower
from ldp_audit.training.dprl.config import DprlConfig
from ldp_audit.training.dprl.trainer import train
from tests import broken_dprl as B

torch.set_num_threads(1)

#: 20 updates of 8 episodes, 400 gradient canaries of raw norm 10 C, C = 10, sigma = 12:
#: the accountant says epsilon ~ 1.45 at delta 1e-5.
AUDIT_RF = dict(
    algo="reinforce",
    privacy="dpsgd",
    episodes=160,
    num_envs=8,
    canaries=400,
    noise_multiplier=12.0,
    clip=10.0,
)
#: Each bound holds with probability >= 99% when the accountant is right; over the 5 seeded
#: repeats of the correct trainer (2 in the default suite, 3 more in the slow one) the chance of
#: any false alarm is <= 5% (union bound).
CONF = 0.99


def _naive_p_value(m: int, r: int, v: int, eps: float, delta: float) -> float:
    """Steinke, Nasr & Jagielski (2023), Appendix D, line by line."""
    q = 1 / (1 + math.exp(-eps))
    beta = binom.sf(v - 1, r, q)
    alpha = 0.0
    total = 0.0
    for i in range(1, v + 1):
        total = total + binom.pmf(v - i, r, q)
        if total > i * alpha:
            alpha = total / i
    return min(beta + alpha * delta * 2 * m, 1)


@pytest.mark.parametrize(
    "m, r, v, eps, delta",
    [
        (1000, 100, 80, 1.0, 1e-5),
        (1000, 100, 95, 2.5, 1e-3),
        (50, 20, 20, 0.3, 0.01),
        (400, 400, 230, 0.2, 0.0),
    ],  # fmt: skip
)
def test_p_value_matches_appendix_d(m: int, r: int, v: int, eps: float, delta: float) -> None:
    assert p_value(m, r, v, eps, delta) == pytest.approx(_naive_p_value(m, r, v, eps, delta))


def test_delta_zero_bound_is_the_clopper_pearson_logit() -> None:
    for r, v in ((100, 90), (40, 40), (200, 130)):
        lo = float(clopper_pearson_lower(v, r, 0.05))
        expect = math.log(lo / (1 - lo))
        assert epsilon_lower_bound(1000, r, v, delta=0.0, beta=0.05) == pytest.approx(
            expect, abs=1e-6
        )


def test_delta_weakens_the_bound_and_bad_counts_refused() -> None:
    a = epsilon_lower_bound(1000, 100, 95, delta=0.0, beta=0.05)
    b = epsilon_lower_bound(1000, 100, 95, delta=1e-4, beta=0.05)
    assert 0 < b < a
    assert epsilon_lower_bound(1000, 100, 50, delta=1e-5, beta=0.05) == 0.0
    with pytest.raises(InvalidParameterError, match="v <= r <= m"):
        epsilon_lower_bound(10, 20, 5, delta=0.0, beta=0.05)


def test_audit_scores_on_randomized_response() -> None:
    """eps-DP randomized response of the bits: the bound never exceeds eps (seeded, 99%)."""
    rng = np.random.default_rng(0)
    eps = 1.0
    for _ in range(5):
        bits = rng.random(2000) < 0.5
        keep = rng.random(2000) < math.exp(eps) / (1 + math.exp(eps))
        guess = np.where(keep, bits, ~bits)
        s = guess + 0.01 * rng.standard_normal(2000)
        res = audit_scores(s, bits, delta=0.0, confidence=CONF)
        assert 0.3 < res["epsilon_lower_bound"] <= eps


def _audit(tmp_path, name, hooks, seed, **kw):  # noqa: ANN001, ANN202
    run = tmp_path / name
    train(DprlConfig(**{**AUDIT_RF, **kw}), seed=seed, run_dir=run, hooks=hooks)
    return audit_run(run, setting="white-box", confidence=CONF), audit_run(
        run, setting="black-box", confidence=CONF
    )


@pytest.mark.parametrize(
    "seeds", [(0, 1), pytest.param((2, 3, 4), marks=pytest.mark.slow)], ids=["fast", "slow"]
)
def test_correct_trainer_no_false_alarm_over_seeded_repeats(tmp_path, seeds) -> None:
    for seed in seeds:
        white, black = _audit(tmp_path, f"ok{seed}", None, seed)
        assert not white.violation and not black.violation
        assert white.epsilon_lower_bound < white.composed_epsilon
        # the accountant's best (RDP, PRV, PLD; issue 29): PLD's 1.438 (RDP alone gave 1.448)
        assert white.composed_epsilon == pytest.approx(1.438, abs=0.005)


@pytest.mark.parametrize("hooks", [B.NOISE_NOT_TIMES_CLIP, B.NO_CLIPPING], ids=["noise", "clip"])
def test_gross_bugs_flagged_in_one_run(tmp_path, hooks) -> None:  # noqa: ANN001
    white, black = _audit(tmp_path, "bad", hooks, 0)
    assert white.violation and black.violation
    # the assumption-free bound alone refutes the claim (at its Bonferroni share of the six
    # white-box tests); the subsampled-Gaussian family bound is far above it
    assert "steinke" in white.extra["flagged_by"]
    assert white.epsilon_lower_bound > 1.5 * white.composed_epsilon
    assert white.extra["family_bound"]["epsilon_lower_bound"] > 5 * white.composed_epsilon
    assert white.to_dict()["violation"] is True


def test_scores_read_no_secrets(tmp_path, monkeypatch) -> None:
    run = tmp_path / "r"
    train(DprlConfig(**{**AUDIT_RF, "canaries": 20, "episodes": 16}), seed=0, run_dir=run)
    (run / "secrets.npz").rename(tmp_path / "hidden.npz")
    ev = dprl_evidence(run)  # white-box: the released projections' sums; black-box: the model
    s = ev.transcript["canary_projection"].sum(axis=0)
    assert s.shape == (20,) and np.isfinite(s).all()
    assert ev.black_box.shape == (20,) and np.isfinite(ev.black_box).all()
    with pytest.raises(RunDirectoryError):
        audit_run(run)  # scoring needs the secrets (and says which file is missing)


def test_run_without_canaries_refused(tmp_path) -> None:
    run = tmp_path / "r"
    train(DprlConfig(**{**AUDIT_RF, "canaries": 0, "episodes": 16}), seed=0, run_dir=run)
    with pytest.raises(RunDirectoryError, match="no canaries"):
        audit_run(run)
