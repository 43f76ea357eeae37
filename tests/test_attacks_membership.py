"""Membership inference with canaries and one-run auditing (ldp_audit.attacks.membership)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from ldp_audit.attacks import membership as M
from ldp_audit.attacks.one_run_steinke import audit_scores
from ldp_audit.errors import InvalidParameterError
from ldp_audit.mechanisms import RandomizedResponse

CANDS = np.array([9.7, 9.8, 9.9, 12.0])


def index_simulator(theta, gravity, rng, alpha=0.0):
    """The 'gradient' is the gravity's index among CANDS (12.0, the canary, is index 3)."""
    idx = np.searchsorted(CANDS, np.asarray(gravity)).astype(np.float64)[:, None]
    return idx, np.zeros(idx.shape[0])


def test_one_run_bound_exact_on_constructed_scores() -> None:
    # Perfect scores: every guess is right; the bound is logit of the one-sided CP lower limit
    # of r/r at beta / (number of fractions), for the largest fraction (most guesses).
    m = 1000
    included = np.arange(m) % 2 == 0
    scores = included.astype(float) + np.linspace(0, 0.1, m)
    out = audit_scores(scores, included, delta=0.0, confidence=0.95, fractions=M.GUESS_FRACTIONS)
    r = 2 * math.floor(0.5 * m / 2)
    p_lo = (0.05 / len(M.GUESS_FRACTIONS)) ** (1 / r)  # CP lower limit for r successes in r
    assert out["guesses"] == r and out["correct"] == r
    assert out["epsilon_lower_bound"] == pytest.approx(math.log(p_lo / (1 - p_lo)), rel=1e-9)
    # uninformative scores give no bound above 0 for this seed's balanced split
    out0 = audit_scores(np.zeros(m), included, delta=0.0, fractions=M.GUESS_FRACTIONS)
    assert out0["epsilon_lower_bound"] == 0.0


def test_membership_metrics() -> None:
    inc = np.array([True] * 500 + [False] * 500)
    perfect = M.membership_metrics(inc.astype(float), inc)
    assert perfect["auc"] == 1.0 and perfect["advantage"] == 1.0
    assert perfect["tpr_at_fpr"]["0.01"] == 1.0
    rng = np.random.default_rng(0)
    rand = M.membership_metrics(rng.random(1000), inc)
    # AUC of random scores: sd = sqrt((n1+n2+1)/(12 n1 n2)) ~ 0.0183; 0.5 +- 0.1 is > 5 sd
    # (two-sided false failure < 1e-6).
    assert abs(rand["auc"] - 0.5) < 0.1
    with pytest.raises(InvalidParameterError, match="members"):
        M.membership_metrics(np.zeros(3), np.ones(3, dtype=bool))


@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_rr_canaries_respect_the_guarantee(eps: float, tmp_path) -> None:
    # Each agent reports RR of its gravity index (k = 4) once: the run is eps-DP in each canary
    # bit, so at confidence 1 - 1e-6 the one-run bound must not exceed eps (Steinke et al.,
    # Thm. 3.1: false-failure probability <= 1e-6), and the attack must see the signal.
    mech = RandomizedResponse(epsilon=eps, k=4)
    trainer = M.FixedThetaTrainer(theta=np.zeros(1), mechanism=mech, simulator=index_simulator)
    res = M.run(
        trainer,
        run_dir=tmp_path,
        mechanism=mech,
        n_agents=4000,
        n_canaries=3000,
        scorer=M.TranscriptScorer(simulator=index_simulator, n_shadow=5),
        seed=1,
        confidence=1 - 1e-6,
    )
    assert res.attack == "membership" and res.k == 2
    assert res.epsilon_lower_bound <= eps
    assert not res.violation
    assert res.ceiling == pytest.approx(math.exp(eps) / (math.exp(eps) + 1))
    # RR-of-index has P(report = canary | in) = e^eps/(e^eps+3), | out) = 1/(e^eps+3): the
    # attack's AUC must exceed 0.5 by far more than its sampling sd (~0.011 here, > 5 sd).
    assert res.auc > 0.56
    assert res.extra["tpr_ceiling_at_fpr"]["0.01"] == pytest.approx(min(1, math.exp(eps) * 0.01))


def test_broken_mechanism_is_caught_by_one_run_audit(tmp_path) -> None:
    # Claims eps = 0.2 but releases the raw index: the canaries are perfectly separable, so the
    # one-run bound far exceeds 0.2 (it holds at 1 - 1e-6 for a correct mechanism).
    class Leaky(RandomizedResponse):
        def privatize(self, x, rng):
            return np.asarray(x, dtype=np.int64)

    mech = Leaky(epsilon=0.2, k=4)
    trainer = M.FixedThetaTrainer(theta=np.zeros(1), mechanism=mech, simulator=index_simulator)
    res = M.run(
        trainer,
        run_dir=tmp_path,
        mechanism=mech,
        n_agents=600,
        n_canaries=500,
        scorer=M.TranscriptScorer(simulator=index_simulator, n_shadow=5, method="classifier"),
        seed=2,
        confidence=1 - 1e-6,
    )
    assert res.violation
    assert res.auc == 1.0
    assert res.epsilon_lower_bound > 1.0


def test_validation(tmp_path) -> None:
    trainer = M.FixedThetaTrainer(theta=np.zeros(1), simulator=index_simulator)
    with pytest.raises(InvalidParameterError, match="n_canaries"):
        M.run(trainer, run_dir=tmp_path, mechanism=None, n_agents=10, n_canaries=20, seed=0)
    with pytest.raises(InvalidParameterError, match="scores"):
        audit_scores(np.array([np.nan, 1.0]), np.array([True, False]), delta=0.0)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"background": [True, 9.8]}, "background gravity must be a real number, got True"),
        ({"background": "9.8"}, "background must be a non-empty list, got '9.8'"),
        ({"confidence": 1.0}, "confidence must be in"),
        ({"delta": -0.1}, "delta must be in"),
        ({"seed": 11}, r"the 3 canary bits all came out False \(probability 2\^\(1-3\)\)"),
    ],
)
def test_refused_before_training(tmp_path, kw, match) -> None:
    # were: True read as gravity 1, '9.8' a raw ValueError, and confidence, delta and canary bits
    # that all came out equal (seed 11 draws three False) refused only after training
    def trainer(gravities, run_dir, rng):
        raise AssertionError("trained")

    with pytest.raises(InvalidParameterError, match=match):
        M.run(
            trainer,
            run_dir=tmp_path,
            mechanism=None,
            n_agents=21,
            n_canaries=3,
            **{"seed": 0, **kw},
        )


def test_fixed_theta_trainer_without_a_mechanism_is_scored(tmp_path) -> None:
    # mechanism=None (its docstring: non-private) recorded {"name": "none"}, which the default
    # scorer's from_config refused; it now records NoPrivacy's config
    trainer = M.FixedThetaTrainer(theta=np.zeros(1), simulator=index_simulator)
    scorer = M.TranscriptScorer(simulator=index_simulator, n_shadow=20)  # boosting: 20 a leaf
    res = M.run(
        trainer, run_dir=tmp_path, mechanism=None, n_agents=40, n_canaries=30, scorer=scorer, seed=0
    )
    assert res.epsilon == math.inf and res.auc == 1.0  # the raw index: perfectly separable


def test_cp_reference() -> None:
    # the Clopper-Pearson lower limit used by the one-run bound agrees with scipy's Beta quantile
    from ldp_audit.stats import clopper_pearson_lower

    assert clopper_pearson_lower(70, 100, 0.01) == pytest.approx(
        stats.beta.ppf(0.01, 70, 31), rel=1e-9
    )
