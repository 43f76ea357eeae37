"""Tests of ldp_audit.audit.

Exact first (deterministic fakes with known rates: the bound arithmetic), then seeded audits of
broken mechanisms (must be flagged) and correct ones (must not be). Correct-mechanism audits run
at confidence 1 - 1e-7, so by the auditor's guarantee each such test fails with probability at
most 1e-7 whatever the seed. Broken-mechanism audits have margins of many standard errors
(stated per test).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from ldp_audit import audit as audit_mod
from ldp_audit.audit import AuditResult, Witness, audit, default_pairs, exact_epsilon, selection
from ldp_audit.errors import InvalidParameterError
from ldp_audit.mechanisms import (
    BitFlip,
    DiscreteLaplace,
    Gaussian,
    Laplace,
    ProjectedRandomSign,
    RandomizedResponse,
)
from ldp_audit.stats import epsilon_lower_bound_from_counts, epsilon_lower_bound_from_pooled_counts
from tests.broken_for_audit import (
    DoubledRandomizedResponse,
    ExponentialMechanism,
    NoisyMaxIndex,
    NoisyMaxValue,
    SparseVector,
    SparseVectorNoQueryNoise,
    TextbookFloatLaplace,
    TwoSidedGeometric,
    UnaryEncoding,
)
from tests.broken_mechanisms import known_broken

STRICT = 1 - 1e-7  # confidence for "correct mechanism is not flagged" tests


class RateFake:
    """Deterministic fake: of every privatize call's n rows, exactly round(p n) are 1.0."""

    def __init__(self, rates: dict[float, float], epsilon: float = 1.0, delta: float = 0.0):
        self.rates, self.epsilon, self.delta = rates, epsilon, delta
        self.calls: list[int] = []

    def privatize(self, x, rng):
        n = x.shape[0]
        self.calls.append(n)
        k = int(round(self.rates[float(x[0, 0])] * n))
        y = np.zeros((n, 1))
        y[:k] = 1.0
        return y


PAIR = [(np.array([0.0]), np.array([1.0]))]


# ---------------------------------------------------------------------------------------------
# exact arithmetic on deterministic fakes
# ---------------------------------------------------------------------------------------------


def test_bound_arithmetic_exact_on_fake():
    fake = RateFake({0.0: 0.6, 1.0: 0.2}, epsilon=1.5)
    r = audit(fake, PAIR, samples=10_000, confidence=0.9, rng=0, max_events=1)
    n_est = 10_000 - 1_000
    k1, k2 = round(0.6 * n_est), round(0.2 * n_est)
    share = r.witness.numerator_share  # the error split fixed at selection
    assert share in selection.SHARES
    want = epsilon_lower_bound_from_counts(k1, n_est, k2, n_est, 0.1, numerator_share=share)
    assert r.epsilon_lower_bound == pytest.approx(want, rel=1e-12)
    assert r.events_estimated == 1
    w = r.witness
    assert (w.k1, w.n1, w.k2, w.n2) == (k1, n_est, k2, n_est)
    assert w.x == (0.0,) and w.x2 == (1.0,)
    assert r.samples == 10_000 and r.selection_samples == 1_000
    assert r.claimed_epsilon == 1.5 and not r.violation
    assert math.log(3.0) > r.epsilon_lower_bound > 1.0


def test_bound_arithmetic_other_direction_and_bonferroni():
    # x2 is the numerator now: rates 0.1 vs 0.5 on y = 1; and y = 0 gives 0.9 vs 0.5.
    fake = RateFake({0.0: 0.1, 1.0: 0.5}, epsilon=0.5)
    r = audit(fake, PAIR, samples=20_000, confidence=0.95, rng=1, max_events=2)
    n_est = 18_000
    k_y1 = (round(0.5 * n_est), round(0.1 * n_est))  # (x2, x) counts of y = 1
    want = epsilon_lower_bound_from_counts(
        k_y1[0],
        n_est,
        k_y1[1],
        n_est,
        0.05 / r.events_estimated,
        numerator_share=r.witness.numerator_share,
    )
    assert r.epsilon_lower_bound == pytest.approx(want, rel=1e-12)
    assert r.witness.x == (1.0,) and r.witness.x2 == (0.0,)
    assert r.violation  # ln 5 - slack > 0.5
    assert r.epsilon_lower_bound > 1.4


def test_pooled_pair_arithmetic_exact_on_fake():
    # symmetric rates: y = 1 is 0.6 vs 0.4 (x numerator), y = 0 is 0.6 vs 0.4 (x2 numerator);
    # pooling both on the same outputs estimates each rate on 2 n_est trials and wins
    fake = RateFake({0.0: 0.6, 1.0: 0.4}, epsilon=0.1)
    r = audit(fake, PAIR, samples=10_000, confidence=0.9, rng=0, max_events=1, pool=True)
    n_est = 9_000
    w = r.witness
    assert w.pooled and "pooled with" in w.event
    assert (w.k1, w.n1, w.k2, w.n2) == (10_800, 18_000, 7_200, 18_000)
    want = epsilon_lower_bound_from_pooled_counts(
        10_800, 7_200, 2 * n_est, 0.1, numerator_share=w.numerator_share
    )
    assert r.epsilon_lower_bound == pytest.approx(want, rel=1e-12)
    single = audit(fake, PAIR, samples=10_000, confidence=0.9, rng=0, max_events=1, pool=False)
    assert not single.witness.pooled and single.witness.n1 == n_est
    assert math.log(1.5) > r.epsilon_lower_bound > single.epsilon_lower_bound > 0.2
    assert r.to_dict()["witness"]["pooled"] is True
    # pooling is proven only for per-side error levels below 1/4: not used at confidence 0.5
    low = audit(fake, PAIR, samples=10_000, confidence=0.5, rng=0, max_events=1, pool=True)
    assert not low.witness.pooled
    with pytest.raises(InvalidParameterError, match="pool"):
        audit(fake, PAIR, samples=10_000, pool="yes")
    # the default is off: a single event, n_est trials
    assert not audit(fake, PAIR, samples=10_000, confidence=0.9, rng=0).witness.pooled


def test_pooled_ceiling_is_exact():
    # disjoint outputs (true epsilon inf): k2 = 0 of 2 n_est pooled trials reaches the ceiling
    class Disjoint:
        epsilon = 0.5

        def privatize(self, x, rng):
            return np.array(x, dtype=np.float64)  # two point masses, no overlap

    pair = [(np.array([0.0]), np.array([100.0]))]
    n_est = audit_mod.estimation_samples(5_000)
    top = audit_mod.max_refutable_epsilon(n_est, 0.95, pool=True)
    a = 0.9 * 0.05
    assert top == pytest.approx(-math.log(1.0 - a ** (1.0 / (2 * n_est))), rel=1e-12)
    assert top > audit_mod.max_refutable_epsilon(n_est, 0.95)  # the pooled trials count twice
    r = audit(Disjoint(), pair, samples=5_000, rng=0, float_bits=False, max_events=1, pool=True)
    assert r.witness.pooled and r.witness.k2 == 0 and r.witness.n2 == 2 * n_est
    assert top - 0.01 < r.epsilon_lower_bound <= top + 1e-9


def test_epsilon_delta_form_exact():
    fake = RateFake({0.0: 0.6, 1.0: 0.2}, epsilon=0.5, delta=0.1)
    r = audit(fake, PAIR, samples=10_000, confidence=0.9, rng=0, max_events=1)
    n_est = 9_000
    want = epsilon_lower_bound_from_counts(
        5400, n_est, 1800, n_est, 0.1, delta=0.1, numerator_share=r.witness.numerator_share
    )
    assert r.delta == 0.1
    assert r.epsilon_lower_bound == pytest.approx(want, rel=1e-12)
    assert r.epsilon_lower_bound < math.log(0.5 / 0.2)


def test_identical_outputs_give_zero_and_no_violation():
    fake = RateFake({0.0: 0.3, 1.0: 0.3})
    r = audit(fake, PAIR, samples=5_000, rng=0)
    assert r.epsilon_lower_bound == 0.0 and not r.violation


def test_chunking_bounds_each_privatize_call(monkeypatch):
    from ldp_audit.audit import sampling  # the stage that chunks

    monkeypatch.setattr(sampling, "_CHUNK_ELEMENTS", 2048)
    fake = RateFake({0.0: 0.5, 1.0: 0.25})
    r = audit(fake, PAIR, samples=20_000, rng=0, max_events=1)
    assert max(fake.calls) <= 2048
    # every sample drawn once, plus an 8-row probe, the seeding check's two 8-row calls, the
    # dtype check's 8 rows of x2 (one pair) and the repeat check's two 1,000-row calls
    assert sum(fake.calls) == 2 * 20_000 + 4 * 8 + 2 * 1000
    assert r.witness.n1 == 18_000


def _wide(k: int, calls: list[tuple[int, int]]) -> object:
    """A unary encoding of width ``k`` that records the shape of every draw."""

    class Wide:
        epsilon = 1.0

        def privatize(self, x, rng):
            y = UnaryEncoding(1.0, k=k).privatize(x, rng)
            calls.append(y.shape)
            return y

    return Wide()


def test_wide_outputs_are_chunked_by_output_width():
    calls: list[tuple[int, int]] = []
    r = audit(_wide(2048, calls), PAIR, samples=3_000, rng=0, float_bits=False)
    # chunks of 2^22 / 2048 = 2048 rows: a call never holds more than 2^22 values
    assert max(n * k for n, k in calls) <= 2048 * 2048
    assert r.epsilon_lower_bound >= 0.0 and not r.violation


def test_outputs_wider_than_the_chunk_over_1024_are_chunked_too(monkeypatch):
    # chunks had a floor of 1024 rows: outputs wider than chunk / 1024 values (4096 at the
    # default 2^22) were drawn 1024 rows at a time, beyond the stated chunk of 2^22 values
    # (an OUE with k = 20,000: 810 MB peak, 564 MB with the fix, the same result)
    from ldp_audit.audit import sampling

    monkeypatch.setattr(sampling, "_CHUNK_ELEMENTS", 1 << 14)
    calls: list[tuple[int, int]] = []
    audit(_wide(64, calls), PAIR, samples=3_000, rng=0, float_bits=False)
    assert max(n * k for n, k in calls) <= 1 << 14


def test_outputs_too_wide_for_memory_refused_before_the_work_unless_forced(monkeypatch):
    # OUE with k = 2^20 (allowed) wanted 1,000 rows of 2^20 values per input in the fit half
    # (~47 GiB estimated): now refused, naming the width and the limit, unless forced
    monkeypatch.setenv("LDP_AUDIT_MEMORY_LIMIT", "1M")
    wide = UnaryEncoding(1.0, k=512)
    with pytest.raises(InvalidParameterError, match=r"512 values per row.*memory limit.*force"):
        audit(wide, samples=3_000, rng=0)
    assert audit(wide, samples=3_000, rng=0, force=True, float_bits=False).pairs_tested >= 1


def test_result_dict_json_and_summary():
    r = audit(RateFake({0.0: 0.6, 1.0: 0.2}, epsilon=1.5), PAIR, samples=5_000, rng=0)
    d = json.loads(json.dumps(r.to_dict()))
    assert d["violation"] is False and d["claimed_epsilon"] == 1.5
    assert d["witness"]["x"] == [0.0] and d["witness"]["family"] in ("cells", "coordinate")
    s = r.summary()
    assert "proves nothing" in s and "witness" in s
    assert isinstance(r, AuditResult) and isinstance(r.witness, Witness)
    with pytest.raises(AttributeError):
        r.epsilon_lower_bound = 5.0  # type: ignore[misc]  # frozen
    viol = AuditResult(2.0, 1.0, 0.95, 10, None, 0.1)
    assert viol.violation and "VIOLATION" in viol.summary()
    assert AuditResult(1.0, math.inf, 0.95, 10, None, 0.1).to_dict()["claimed_epsilon"] == "inf"


def test_reproducible_with_seed():
    m = Laplace(epsilon=1.0, clip=1.0)
    a = audit(m, samples=20_000, rng=5, float_bits=False)
    b = audit(m, samples=20_000, rng=5, float_bits=False)
    assert a.epsilon_lower_bound == b.epsilon_lower_bound
    assert a.witness == b.witness


# ---------------------------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------------------------


class NoDomain:
    epsilon = 1.0

    def privatize(self, x, rng):
        return x + rng.laplace(0.0, 1.0, size=x.shape)


def test_validation_errors():
    with pytest.raises(InvalidParameterError, match="pairs must be given"):
        audit(NoDomain(), samples=5_000)
    with pytest.raises(InvalidParameterError, match="privatize"):
        audit(object(), PAIR)
    with pytest.raises(InvalidParameterError, match="samples"):
        audit(NoDomain(), PAIR, samples=10)
    with pytest.raises(InvalidParameterError, match="confidence"):
        audit(NoDomain(), PAIR, confidence=1.0)
    with pytest.raises(InvalidParameterError, match="same length"):
        audit(NoDomain(), [(np.zeros(2), np.zeros(3))], samples=5_000)
    with pytest.raises(InvalidParameterError, match="finite"):
        audit(NoDomain(), [(np.array([np.nan]), np.zeros(1))], samples=5_000)
    with pytest.raises(InvalidParameterError, match="at least one"):
        audit(NoDomain(), [], samples=5_000)
    with pytest.raises(InvalidParameterError, match="rng"):
        audit(NoDomain(), PAIR, samples=5_000, rng="seed")  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="max_events"):
        audit(NoDomain(), PAIR, samples=5_000, max_events=0)

    class BadShape(NoDomain):
        def privatize(self, x, rng):
            return np.zeros((3, 1))

    with pytest.raises(InvalidParameterError, match="shape"):
        audit(BadShape(), PAIR, samples=5_000)


def test_user_mechanism_with_pairs_and_1d_output():
    class OneD:
        epsilon = 2.0

        def privatize(self, x, rng):  # returns (n,) -- accepted as (n, 1)
            return x[:, 0] + rng.laplace(0.0, 1.0, size=x.shape[0])

    r = audit(OneD(), PAIR, samples=50_000, rng=0, float_bits=False, confidence=STRICT)
    assert not r.violation and r.epsilon_lower_bound > 0.5


def test_a_user_check_inputs_helper_is_not_called_by_the_audit():
    """Session 56 probe: a user's mechanism with its own ``check_inputs(self, x)`` helper,
    audited on explicit pairs, raised a raw ``TypeError: check_inputs() takes 2 positional
    arguments but 3 were given`` (exit 3, "a bug in ldp-audit", at the command line): the audit
    called any ``check_inputs`` it found as from_scalar's domain check."""

    class BitRR:
        epsilon = 1.0

        def check_inputs(self, x):
            if not np.isin(x, (0, 1)).all():
                raise ValueError("inputs must be bits")
            return np.asarray(x)

        def privatize(self, x, rng):
            x = self.check_inputs(x)
            return np.where(rng.random(x.shape) < np.e / (np.e + 1), x, 1 - x).astype(float)

    r = audit(BitRR(), PAIR, samples=5_000, rng=0, confidence=STRICT, tradeoff=False)
    assert not r.violation and r.epsilon_lower_bound > 0.5


def test_default_pairs_dedupes():
    pairs = default_pairs(Laplace(epsilon=1.0, clip=1.0), 1)
    keys = {tuple(np.concatenate(p)) for p in pairs}
    assert len(keys) == len(pairs) >= 2


# ---------------------------------------------------------------------------------------------
# broken mechanisms are flagged (fixed seeds; margins of many standard errors)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mech", known_broken(), ids=lambda m: type(m).__name__)
def test_known_broken_flagged(mech):
    # Exact-arithmetic audit (float bits off) so the mathematical bug itself is caught.
    # Smallest margin: L2ClipLaplace at d = 4 (true 2 eps; the bound's standard error at these
    # counts is < 0.05, the margin > 0.3, i.e. > 6 standard errors: false failure < 1e-9).
    r = audit(mech, samples=100_000, rng=11, dim=4, float_bits=False)
    assert r.violation, r.summary()


@pytest.mark.parametrize(
    "mech, kw, at_least",
    [
        # (d-1) eps = 4 true; bound ~ 2.7 at these counts, > 10 standard errors above 1
        (NoisyMaxValue(1.0), {"dim": 5}, 1.5),
        (SparseVectorNoQueryNoise(1.0), {"dim": 4}, 3.0),  # true: inf (p2 = 0 exactly)
        (DoubledRandomizedResponse(1.0), {}, 1.5),  # true 2; standard error ~ 0.02
        (TextbookFloatLaplace(1.0), {}, 3.0),  # float bits: p2 = 0 exactly (Mironov 2012)
        (ExponentialMechanism(1.0, broken=True), {"dim": 4}, 1.2),  # true 2; s.e. ~0.03
        (UnaryEncoding(1.0, broken=True), {}, 1.5),  # true 2; s.e. ~0.02
    ],
    ids=[
        "noisy-max-value",
        "svt-no-query-noise",
        "rr-doubled",
        "textbook-float-laplace",
        "exponential-no-half",
        "unary-encoding-doubled",
    ],
)
def test_extra_broken_flagged(mech, kw, at_least):
    r = audit(mech, samples=100_000, rng=3, **kw)
    assert r.violation and r.epsilon_lower_bound > at_least, r.summary()


def test_float_laplace_is_correct_in_exact_arithmetic():
    r = audit(
        TextbookFloatLaplace(1.0), samples=100_000, rng=3, float_bits=False, confidence=STRICT
    )
    assert not r.violation
    assert r.witness.family != "float-bits"


def test_builtin_float_laplace_leaks_low_bits():
    # Documented limitation of ldp_audit.mechanisms.Laplace (Generator.laplace in doubles).
    r = audit(Laplace(epsilon=1.0, clip=1.0), samples=100_000, rng=0)
    assert r.violation and r.witness.family == "float-bits"
    assert r.witness.k2 == 0  # an event M(x2) never produces


# ---------------------------------------------------------------------------------------------
# correct mechanisms are not flagged (confidence 1 - 1e-7: false failure <= 1e-7 each)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "mech, kw",
    [
        (RandomizedResponse(epsilon=1.0), {}),
        (RandomizedResponse(epsilon=0.5, k=4), {}),
        (BitFlip(epsilon=1.0), {"dim": 3}),
        (ProjectedRandomSign(epsilon=1.0, clip=1.0, reduced_dim=1), {"dim": 1}),
        (ProjectedRandomSign(epsilon=2.0, clip=1.0, reduced_dim=2), {"dim": 4}),
        (Laplace(epsilon=1.0, clip=1.0), {"dim": 3, "float_bits": False}),
        (Gaussian(clip=1.0, noise_multiplier=2.0), {"dim": 2, "float_bits": False}),
        (DiscreteLaplace(epsilon=1.0, clip=1.0), {"dim": 1}),  # float-safe: bits searched too
        (NoisyMaxIndex(1.0), {"dim": 5}),
        (SparseVector(1.0), {"dim": 4}),
        (ExponentialMechanism(1.0), {"dim": 4}),
        (UnaryEncoding(1.0), {}),
        (TwoSidedGeometric(1.0), {"dim": 1}),
    ],
    ids=lambda v: type(v).__name__ if not isinstance(v, dict) else "",
)
def test_correct_not_flagged(mech, kw):
    r = audit(mech, samples=100_000, rng=7, confidence=STRICT, **kw)
    assert not r.violation, r.summary()
    assert r.epsilon_lower_bound >= 0.0


def test_tight_on_laplace_and_rr():
    # 1e6 samples: the bound's standard error is ~0.003 (eps = 1); expected ratio ~0.99, so the
    # 0.95 floor is > 10 standard errors away.
    r = audit(Laplace(epsilon=1.0, clip=1.0), samples=1_000_000, rng=0, float_bits=False)
    assert 0.95 <= r.epsilon_lower_bound <= 1.0
    r = audit(RandomizedResponse(epsilon=1.0), samples=1_000_000, rng=0)
    assert 0.95 <= r.epsilon_lower_bound <= 1.0


def test_soundness_many_small_audits():
    # 300 seeded audits of a correct RR at confidence 0.9: exceedances of the true epsilon are
    # Binomial(300, <= 0.1); P(count > 60) = 7.1e-8.
    m = RandomizedResponse(epsilon=1.0)
    seeds = np.random.default_rng(2024).spawn(300)
    over = sum(
        audit(m, samples=2_000, rng=s, confidence=0.9).epsilon_lower_bound > 1.0 for s in seeds
    )
    assert over <= 60


# ---------------------------------------------------------------------------------------------
# exact epsilon (white box)
# ---------------------------------------------------------------------------------------------


def test_exact_epsilon_builtins():
    assert exact_epsilon(Laplace(epsilon=1.0, clip=1.0), dim=3) == pytest.approx(1.0, abs=1e-9)
    assert exact_epsilon(RandomizedResponse(epsilon=0.7, k=3)) == pytest.approx(0.7, abs=1e-9)
    assert exact_epsilon(BitFlip(epsilon=1.0), dim=2) == pytest.approx(1.0, abs=1e-9)
    prs = ProjectedRandomSign(epsilon=1.0, clip=1.0, reduced_dim=1)
    assert exact_epsilon(prs, dim=2) == pytest.approx(1.0, abs=1e-9)
    g = Gaussian(clip=1.0, noise_multiplier=2.0)
    assert exact_epsilon(g, dim=2) == pytest.approx(g.epsilon, rel=1e-9)
    half = known_broken()[0]  # HalfScaleLaplace: true 2 eps
    assert exact_epsilon(half, dim=1) == pytest.approx(2.0, abs=1e-9)
    with pytest.raises(InvalidParameterError, match="privacy_loss"):
        exact_epsilon(NoDomain(), PAIR)
