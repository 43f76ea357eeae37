"""Property tests (Hypothesis, derandomised) for the composition maths."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from ldp_audit.accountant import PureDpEvent, SelfComposedEvent, compose
from ldp_audit.accountant import composition as C
from ldp_audit.accountant.events import event_from_json, event_to_json

EPS = st.floats(min_value=1e-3, max_value=3.0, allow_nan=False)
K = st.integers(min_value=1, max_value=300)
DELTA = st.floats(min_value=1e-12, max_value=0.1, allow_nan=False)
PROPS = settings(max_examples=60, derandomize=True, deadline=None)


@PROPS
@given(EPS, K, DELTA)
def test_optimal_never_above_basic_or_advanced(eps, k, delta):
    o = C.optimal_epsilon(eps, k, delta=delta)
    assert 0.0 <= o <= C.basic_epsilon([eps], [k]) * (1 + 1e-12)
    assert o <= C.advanced_epsilon([eps], [k], delta=delta) * (1 + 1e-9)


@PROPS
@given(EPS, K, DELTA)
def test_optimal_monotone_in_k_and_delta(eps, k, delta):
    o = C.optimal_epsilon(eps, k, delta=delta)
    assert C.optimal_epsilon(eps, k + 1, delta=delta) >= o - 1e-9
    assert C.optimal_epsilon(eps, k, delta=delta / 10) >= o - 1e-9


@PROPS
@given(EPS, K, DELTA)
def test_optimal_solves_its_profile(eps, k, delta):
    """delta(eps') computed independently in log space equals delta at the returned eps'."""
    o = C.optimal_epsilon(eps, k, delta=delta)
    if o <= 0.0 or o >= k * eps * (1 - 1e-12):
        return  # clamped ends: delta above delta(0), or the basic cap
    total = 0.0
    log_norm = k * math.log1p(math.exp(eps))
    for i in range(k + 1):
        loss = (k - 2 * i) * eps
        if loss > o:
            lc = math.lgamma(k + 1) - math.lgamma(i + 1) - math.lgamma(k - i + 1)
            total += math.exp(lc + (k - i) * eps - log_norm) * -math.expm1(o - loss)
    # eps' is rounded up by 1e-12 max(1, eps') (conservative): delta(eps') <= delta; the slope of
    # delta(.) is at most 1, so delta(eps') is below delta by at most ~2e-12 max(1, eps').
    assert total <= delta * (1 + 1e-9) + 1e-15
    assert total >= delta * (1 - 1e-6) - 2e-12 * max(1.0, o)


@PROPS
@given(st.lists(EPS, min_size=1, max_size=3), st.integers(1, 20), DELTA)
def test_heterogeneous_between_single_and_basic(epsilons, k, delta):
    counts = [k] * len(epsilons)
    het = C.optimal_epsilon_heterogeneous(epsilons, counts, delta=delta)
    assert het <= C.basic_epsilon(epsilons, counts) * (1 + 1e-12)
    assert het >= C.optimal_epsilon(max(epsilons), k, delta=delta) - 1e-9


@PROPS
@given(EPS, st.integers(1, 50))
def test_events_json_round_trip_and_best_le_basic(eps, k):
    ev = SelfComposedEvent(PureDpEvent(eps), k)
    assert event_from_json(event_to_json(ev)) == ev
    best, _ = compose(ev, delta=1e-6)
    assert best <= k * eps * (1 + 1e-12)
