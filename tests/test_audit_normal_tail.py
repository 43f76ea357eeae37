"""The normal tail model of the delta > 0 selection (issue 40, ``selection._NORMAL_TAIL``).

The optimal event of a Gaussian at small delta has fewer than one denominator output among the
selection samples (sigma 1, sensitivity 2, delta 1e-3: y > 3.3, P = 1e-5 under x2, 0.5 of the
50,000 tune outputs at 10^6 samples), so the empirical counts cannot place it; a normal fitted to
the selection values can, when it predicts the tail counts it can check. Selection only: every
event is still estimated on fresh samples, so soundness does not depend on the model.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

import ldp_audit.audit.selection as selection
from ldp_audit.audit import audit
from ldp_audit.audit.selection import _normal_tail_rates
from ldp_audit.mechanisms import Gaussian, analytic_gaussian_epsilon

PAIR = [(np.array([1.0]), np.array([-1.0]))]


def test_normal_tail_rates_follow_a_normal_beyond_the_tail_values():
    rng = np.random.default_rng(0)
    v = np.sort(rng.normal(-1.0, 1.0, 50_000))
    ts = np.array([0.0, 2.0, 2.5, 3.0, 3.3])
    est = _normal_tail_rates(v, ts, True, 200)
    assert est is not None
    u = v[-201]
    assert np.isnan(est[ts <= u]).all() and np.isfinite(est[ts > u]).all()
    # beyond the 200 tail values: within a factor 1.5 of the truth (the anchor is the 5% upper
    # bound of 200/50,000, about 1.12 times the rate; the mean and sd are estimated from 50,000
    # values, good to 0.5% at 5 sigma: a false failure is far below 1e-6)
    truth = norm.sf(ts + 1.0)
    ok = ts > u
    assert np.all(est[ok] / truth[ok] > 1.0 / 1.5) and np.all(est[ok] / truth[ok] < 1.5)
    # the lower tail
    low = _normal_tail_rates(v, np.array([-5.3]), False, 200)
    assert low is not None and 0.66 < low[0] / norm.cdf(-4.3) < 1.5


@pytest.mark.parametrize(
    "draw",
    [lambda r: r.laplace(0.0, 1.0, 50_000), lambda r: r.uniform(-1.0, 1.0, 50_000),
     lambda r: r.standard_t(3, 50_000)],
    ids=["laplace", "uniform", "student-t3"],
)  # fmt: skip
def test_no_model_for_tails_that_are_not_normal(draw):
    v = np.sort(draw(np.random.default_rng(1)))
    assert _normal_tail_rates(v, np.array([v[-1] + 1.0]), True, 200) is None


def test_short_or_constant_tails_give_no_model():
    assert _normal_tail_rates(np.sort(np.random.default_rng(2).normal(size=500)), np.ones(1),
                              True, 200) is None  # fmt: skip
    assert _normal_tail_rates(np.zeros(50_000), np.ones(1), True, 200) is None


@pytest.mark.parametrize("seed", [0, 1])
def test_gaussian_event_moves_into_the_far_tail_and_stays_sound(seed, monkeypatch):
    """Sigma 1, sensitivity 2, delta 1e-3 (true epsilon 7.58) at 2 x 10^5 samples: with the
    model the chosen event has fewer denominator outputs than without (it lies further out,
    where the optimum is), and the bound stays below the truth (its guarantee at confidence
    1 - 1e-6: a false failure <= 1e-6 per audit)."""
    g = Gaussian(clip=1.0, noise_multiplier=1.0, delta=1e-3)
    true_eps = analytic_gaussian_epsilon(1.0, 2.0, 1e-3)
    kw = dict(samples=200_000, rng=seed, float_bits=False, tradeoff=False, profile=False,
              confidence=1 - 1e-6)  # fmt: skip
    with_model = audit(g, PAIR, **kw)
    monkeypatch.setattr(selection, "_NORMAL_TAIL", False)
    without = audit(g, PAIR, **kw)
    assert with_model.epsilon_lower_bound <= true_eps and without.epsilon_lower_bound <= true_eps
    assert with_model.witness.k2 < without.witness.k2
