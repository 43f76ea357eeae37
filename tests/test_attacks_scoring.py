"""Exact checks of the attack scoring arithmetic (ldp_audit.attacks.scoring)."""

from __future__ import annotations

import json
import math

import pytest
from scipy import stats

from ldp_audit.attacks.scoring import (
    AttackResult,
    accuracy_ceiling,
    accuracy_interval,
    composed_epsilon,
    epsilon_from_accuracy,
    membership_tpr_ceiling,
)
from ldp_audit.errors import InvalidParameterError
from ldp_audit.stats import epsilon_from_tpr_fpr, epsilon_lower_bound_from_tpr_fpr_counts


def test_ceiling_closed_form() -> None:
    e = math.e
    assert accuracy_ceiling(1.0, 3) == pytest.approx(e / (e + 2), rel=1e-15)
    assert accuracy_ceiling(math.log(3), 2) == pytest.approx(0.75, rel=1e-15)
    # T reports at eps compose to T * eps
    assert accuracy_ceiling(2.0, 3, reports=5) == pytest.approx(
        math.exp(10) / (math.exp(10) + 2), rel=1e-15
    )
    assert accuracy_ceiling(math.inf, 3) == 1.0
    assert accuracy_ceiling(1e-12, 4) == pytest.approx(0.25, rel=1e-9)
    # no overflow for huge eps
    assert accuracy_ceiling(5000.0, 3) == 1.0


def test_composition() -> None:
    assert composed_epsilon(0.5, 4) == 2.0
    assert composed_epsilon(math.inf, 3) == math.inf
    with pytest.raises(InvalidParameterError, match="reports"):
        composed_epsilon(1.0, 0)


def test_epsilon_from_accuracy_inverts_ceiling() -> None:
    for eps in (0.1, 1.0, 3.0):
        for k in (2, 3, 10):
            assert epsilon_from_accuracy(accuracy_ceiling(eps, k), k) == pytest.approx(eps)
    assert epsilon_from_accuracy(1 / 3, 3) == 0.0
    assert epsilon_from_accuracy(0.1, 3) == 0.0
    assert epsilon_from_accuracy(1.0, 3) == math.inf


def test_ceiling_and_implied_epsilon_take_delta() -> None:
    # k-ary test under (eps, delta): acc <= (e^eps + (k - 1) delta) / (e^eps + k - 1); it
    # was e^eps / (e^eps + k - 1) whatever the delta (session 57)
    e = math.e
    assert accuracy_ceiling(1.0, 3, delta=0.1) == pytest.approx((e + 0.2) / (e + 2), rel=1e-15)
    assert accuracy_ceiling(1.0, 2, delta=1e-5) == pytest.approx((e + 1e-5) / (e + 1), rel=1e-15)
    # T reports compose to (T eps, min(1, T delta))
    c = accuracy_ceiling(0.5, 4, reports=3, delta=0.01)
    assert c == pytest.approx((math.exp(1.5) + 3 * 0.03) / (math.exp(1.5) + 3), rel=1e-14)
    assert accuracy_ceiling(0.5, 4, reports=3, delta=0.5) == 1.0
    for eps in (0.1, 1.0, 3.0):
        for k in (2, 3, 10):
            for d in (1e-6, 0.05, 0.3):
                acc = accuracy_ceiling(eps, k, delta=d)
                assert epsilon_from_accuracy(acc, k, delta=d) == pytest.approx(eps, rel=1e-9)
    assert epsilon_from_accuracy((1 + 2 * 0.1) / 3, 3, delta=0.1) == 0.0
    for bad in (-0.1, 1.5, math.nan, "0.1", True):
        with pytest.raises(InvalidParameterError, match="delta"):
            accuracy_ceiling(1.0, 3, delta=bad)
        with pytest.raises(InvalidParameterError, match="delta"):
            epsilon_from_accuracy(0.5, 3, delta=bad)
    # an (0.01, 0.5) release that reveals the secret half the time: 2000 of 3000 right (k = 3)
    # is within its guarantee, not a violation
    kw = dict(attack="a", mechanism={}, epsilon=0.01, reports_per_agent=1, k=3, n=3000)
    assert AttackResult.from_guesses(**kw, correct=2000).violation
    res = AttackResult.from_guesses(**kw, correct=2000, delta=0.5)
    assert not res.violation and res.delta == 0.5 and res.epsilon_lower_bound == 0.0
    assert res.ceiling == pytest.approx((math.exp(0.01) + 1.0) / (math.exp(0.01) + 2))
    assert "delta=0.5" in res.summary() and res.to_dict()["delta"] == 0.5
    # the attacks read a mechanism's delta (checked before any work): Gaussian's, 0 if pure
    from types import SimpleNamespace

    from ldp_audit.attacks.dynamics_shadow import mechanism_delta
    from ldp_audit.mechanisms import Gaussian, Laplace

    assert mechanism_delta(Gaussian(clip=1.0, noise_multiplier=1.0, delta=1e-3)) == 1e-3
    assert mechanism_delta(Laplace(epsilon=1.0, clip=1.0)) == 0.0 and mechanism_delta(None) == 0.0
    with pytest.raises(InvalidParameterError, match="mechanism.delta"):
        mechanism_delta(SimpleNamespace(epsilon=1.0, delta=2.0))


def test_lower_bound_is_taken_at_the_printed_intervals_lower_end() -> None:
    # the two-sided CP interval at 0.95: its lower end Beta^{-1}(0.025; c, n - c + 1)
    c, n, k = 90, 100, 3
    lo = stats.beta.ppf(0.025, c, n - c + 1)
    res = AttackResult.from_guesses(
        attack="a", mechanism={}, epsilon=1.0, reports_per_agent=1, k=k, correct=c, n=n
    )
    assert res.epsilon_lower_bound == pytest.approx(math.log(lo * (k - 1) / (1 - lo)), rel=1e-9)
    # at chance the bound is 0
    assert (
        AttackResult.from_guesses(
            attack="a", mechanism={}, epsilon=1.0, reports_per_agent=1, k=3, correct=34, n=100
        ).epsilon_lower_bound
        == 0.0
    )
    lo2, hi2 = accuracy_interval(5, 10, 0.95)
    assert lo2 == pytest.approx(stats.beta.ppf(0.025, 5, 6), rel=1e-9)
    assert hi2 == pytest.approx(stats.beta.ppf(0.975, 6, 5), rel=1e-9)


def test_membership_ceiling_and_rates() -> None:
    assert membership_tpr_ceiling(1.0, 0.01) == pytest.approx(math.e * 0.01)
    assert membership_tpr_ceiling(1.0, 0.01, delta=1e-3) == pytest.approx(math.e * 0.01 + 1e-3)
    # the mirrored inequality binds at large FPR
    assert membership_tpr_ceiling(1.0, 0.9) == pytest.approx(1 - math.exp(-1) * 0.1)
    assert membership_tpr_ceiling(math.inf, 0.001) == 1.0
    assert epsilon_from_tpr_fpr(0.5, 0.1) == pytest.approx(math.log(5))
    assert epsilon_from_tpr_fpr(0.9, 0.5) == pytest.approx(math.log(0.5 / 0.1))
    assert epsilon_from_tpr_fpr(0.1, 0.1) == 0.0
    # the bound (95 %) is below the point estimate and positive for a strong test
    b = epsilon_lower_bound_from_tpr_fpr_counts(900, 1000, 100, 1000, 0.05)
    assert 0 < b < epsilon_from_tpr_fpr(0.9, 0.1)


def test_validation_names_parameter() -> None:
    with pytest.raises(InvalidParameterError, match="k must be an integer >= 2"):
        accuracy_ceiling(1.0, 1)
    with pytest.raises(InvalidParameterError, match="epsilon must be > 0"):
        accuracy_ceiling(-1.0, 3)
    with pytest.raises(InvalidParameterError, match="correct must be <= trials"):
        accuracy_interval(11, 10)
    with pytest.raises(InvalidParameterError, match="accuracy"):
        epsilon_from_accuracy(1.5, 3)


def test_attack_result_violation_and_json() -> None:
    def make(correct: int) -> AttackResult:
        n, k, eps = 1000, 3, 0.5
        return AttackResult(
            attack="dynamics",
            mechanism={"name": "randomized_response"},
            epsilon=eps,
            reports_per_agent=1,
            k=k,
            n=n,
            correct=correct,
            accuracy=correct / n,
            accuracy_ci=accuracy_interval(correct, n),
            ceiling=accuracy_ceiling(eps, k),
            composed_epsilon=eps,
            epsilon_lower_bound=epsilon_from_accuracy(accuracy_interval(correct, n)[0], k),
        )

    ok = make(440)  # ceiling(0.5, 3) = 0.452
    bad = make(700)
    assert not ok.violation
    assert bad.violation
    d = json.loads(json.dumps(bad.to_dict()))
    assert d["violation"] is True
    assert d["accuracy_ci"][0] < 0.7 < d["accuracy_ci"][1]
    inf = AttackResult(**{**ok.__dict__, "epsilon": math.inf, "composed_epsilon": math.inf})
    assert json.loads(json.dumps(inf.to_dict()))["epsilon"] == "inf"
    assert not inf.violation
    assert "no violation" in ok.summary() and "VIOLATION" in bad.summary()


def test_verdict_fires_exactly_when_the_printed_interval_is_above_the_ceiling() -> None:
    # s53-attackprobe: the verdict came from the one-sided 95% CP limit while the line printed
    # the two-sided 95% interval, so 15/20 right at eps = 0.1, k = 2 read "[0.509, ...]
    # ceiling=0.525 -> VIOLATION" (151 of 29,700 grid cells disagreed). Exact, no randomness.
    grid = [(k, n, c, eps, t) for k in (2, 3, 50) for n in (20, 100) for c in range(0, n + 1, 2)
            for eps in (1e-9, 0.1, 0.5, 2.0, math.inf) for t in (1, 3)]  # fmt: skip
    for k, n, c, eps, t in grid:
        r = AttackResult.from_guesses(attack="x", mechanism={}, epsilon=eps, reports_per_agent=t,
                                      k=k, n=n, correct=c)  # fmt: skip
        assert r.violation == (r.accuracy_ci[0] > r.ceiling), (k, n, c, eps, t)
        assert r.violation == (r.epsilon_lower_bound > r.composed_epsilon), (k, n, c, eps, t)
    r = AttackResult.from_guesses(attack="x", mechanism={}, epsilon=0.1, reports_per_agent=1,
                                  k=2, n=20, correct=15)  # fmt: skip
    assert r.accuracy_ci[0] < r.ceiling and not r.violation and "no violation" in r.summary()


def test_the_ceiling_at_unequal_shares_is_the_guess_rule_optimum() -> None:
    """``from_guesses(shares=...)``: equal shares give e^eps / (e^eps + k - 1) and its implied
    epsilon; unequal ones the largest over s of the s commonest shares' sum times
    e^eps / (e^eps + s - 1), at least the commonest share (always guessing it), and the implied
    epsilon is the inverse (session 57: a guess of the commonest secret read "VIOLATION")."""
    from ldp_audit.attacks.scoring import AttackResult

    kw = {"attack": "t", "mechanism": {}, "reports_per_agent": 2, "k": 3, "n": 100}
    for correct in (20, 60, 95):
        equal = AttackResult.from_guesses(epsilon=0.5, correct=correct, shares=(1 / 3,) * 3, **kw)
        plain = AttackResult.from_guesses(epsilon=0.5, correct=correct, **kw)
        assert equal.ceiling == pytest.approx(plain.ceiling)
        assert equal.epsilon_lower_bound == pytest.approx(plain.epsilon_lower_bound)
    e = math.exp(1.0)  # T eps = 1; at (0.8, 0.1, 0.1): s = 1 gives 0.8, s = 2 0.658, s = 3 0.576
    skew = AttackResult.from_guesses(epsilon=0.5, correct=80, shares=(0.8, 0.1, 0.1), **kw)
    assert skew.ceiling == pytest.approx(0.8) and skew.epsilon_lower_bound == 0.0
    assert not skew.violation
    skew = AttackResult.from_guesses(epsilon=0.5, correct=80, shares=(0.5, 0.4, 0.1), **kw)
    assert skew.ceiling == pytest.approx(0.9 * e / (e + 1))
    lo = skew.accuracy_ci[0]  # 0.708: at the implied epsilon the s = 2 ceiling reaches it
    assert 0.9 / (1 + math.exp(-skew.epsilon_lower_bound)) == pytest.approx(lo)
    assert skew.violation  # lo 0.708 > 0.658


def test_unequal_shares_with_delta_solve_the_guess_channel_program():
    """The shares' ceiling is the linear program over (eps, delta)-DP guess channels: it is the
    closed forms where they hold (equal shares: the delta-aware ceiling; delta 0: the largest
    over s of the s commonest shares' sum times e^eps / (e^eps + s - 1), to 1e-9), it grows
    with delta, and the implied epsilon inverts it."""
    import math

    import numpy as np

    from ldp_audit.attacks import scoring as S

    rng = np.random.default_rng(57)
    for _ in range(5):
        k = int(rng.integers(2, 6))
        eps, d = float(rng.uniform(0, 4)), float(rng.uniform(0, 0.3))
        assert S._shares_ceiling(eps, d, (1 / k,) * k) == pytest.approx(
            S.accuracy_ceiling(eps, k, 1, d), abs=1e-9
        )
        shares = tuple(rng.dirichlet(np.ones(k)))
        top = sorted(shares, reverse=True)
        pure = max(sum(top[:s]) / (1 + (s - 1) * math.exp(-eps)) for s in range(1, k + 1))
        assert S._shares_ceiling(eps, 0.0, shares) == pytest.approx(pure, abs=1e-9)
        ceiling = S._shares_ceiling(eps, d, shares)
        assert ceiling >= pure - 1e-12  # delta only adds
        e = S._shares_epsilon(ceiling, d, shares)
        assert e <= eps + 1e-5 and (e == 0 or math.isclose(e, eps, abs_tol=1e-4))
    r = S.AttackResult.from_guesses(
        attack="dynamics", mechanism={"name": "gaussian"}, epsilon=0.1, k=3, n=200,
        correct=180, reports_per_agent=1, shares=(0.9, 0.05, 0.05), delta=1e-3,
    )  # fmt: skip
    assert r.ceiling >= 0.9 and not r.violation and r.delta == 1e-3
