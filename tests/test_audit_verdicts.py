"""Two verdicts in one run, the audited privacy profile, validation and user-code errors.

Correct mechanisms are audited at confidence 1 - 1e-7 (a false failure has probability <= 1e-7
by the auditor's guarantee, whatever the seed). Broken ones are flagged with margins of many
standard errors (stated per test).
"""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

from ldp_audit.audit import audit, from_scalar
from ldp_audit.errors import InvalidParameterError, UserCodeError
from ldp_audit.mechanisms import (
    Gaussian,
    Laplace,
    analytic_gaussian_epsilon,
    analytic_gaussian_sigma,
)

STRICT = 1 - 1e-7
PAIR = [(np.array([0.0]), np.array([1.0]))]


class DoubleLaplace:
    """x + Laplace(scale) in doubles (a user's mechanism); claims epsilon = 1 / scale_claim."""

    def __init__(self, scale: float, epsilon: float = 1.0) -> None:
        self.scale, self.epsilon = scale, epsilon

    def privatize(self, x, rng):
        return x + rng.laplace(0.0, self.scale, size=x.shape)


class GaussianClaim:
    """N(x, sigma^2) claiming (epsilon, delta); epsilon_at gives the claimed profile."""

    def __init__(self, sigma: float, claim_sigma: float, delta: float) -> None:
        self.sigma, self.claim_sigma, self.delta = sigma, claim_sigma, delta
        self.epsilon = analytic_gaussian_epsilon(claim_sigma, 1.0, delta)

    def epsilon_at(self, delta: float) -> float:
        return math.inf if delta == 0 else analytic_gaussian_epsilon(self.claim_sigma, 1.0, delta)

    def privatize(self, x, rng):
        return x + self.sigma * rng.standard_normal(x.shape)


# ---- two verdicts -------------------------------------------------------------------------


def test_float_leak_is_attributed_to_the_float_representation():
    r = audit(Laplace(epsilon=1.0, clip=1.0), samples=100_000, rng=0, confidence=STRICT)
    assert r.distribution is not None and r.implementation is not None
    assert not r.distribution.violation  # correct in exact arithmetic (false failure <= 1e-7)
    # Mironov: an event M(x2) never produces; k2 = 0 gives a bound > 3 at these counts
    assert r.implementation.violation and r.implementation.witness.family == "float-bits"
    assert r.violation and r.leak == "float-representation"
    assert "floating-point representation" in r.implementation.consequence
    assert r.epsilon_lower_bound == r.implementation.epsilon_lower_bound
    assert r.implementation.epsilon_lower_bound >= r.distribution.epsilon_lower_bound


def test_calibration_error_is_not_blamed_on_floats():
    # scale halved: true epsilon 2 vs claim 1; at 100k samples the distribution bound's
    # standard error is ~0.03 and it is ~1.97: > 20 standard errors above 1.
    r = audit(DoubleLaplace(0.5), PAIR, samples=100_000, rng=1)
    assert r.distribution.violation and r.distribution.epsilon_lower_bound > 1.5
    assert r.leak == "distribution"
    assert "calibration" in r.distribution.consequence
    assert "calibration error, not only a floating-point leak" in r.implementation.consequence
    assert "may be correct in exact arithmetic" not in r.summary()


def test_no_float_bits_gives_the_distribution_verdict_only():
    r = audit(DoubleLaplace(1.0), PAIR, samples=50_000, rng=2, float_bits=False, confidence=STRICT)
    assert r.implementation is None and not r.violation
    d = json.loads(json.dumps(r.to_dict()))
    assert set(d["verdicts"]) == {"distribution"}
    assert d["verdicts"]["distribution"]["violation"] is False
    assert d["leak"] == "none" and d["profile"] is None


def test_to_dict_carries_both_verdicts_and_keeps_old_fields():
    r = audit(Laplace(epsilon=1.0, clip=1.0), samples=20_000, rng=0)
    d = json.loads(json.dumps(r.to_dict()))
    for key in ("epsilon_lower_bound", "claimed_epsilon", "violation", "witness", "float_bits"):
        assert key in d
    for kind in ("distribution", "implementation"):
        v = d["verdicts"][kind]
        assert set(v) >= {"epsilon_lower_bound", "violation", "witness", "consequence"}
    assert d["violation"] is (
        d["verdicts"]["distribution"]["violation"] or d["verdicts"]["implementation"]["violation"]
    )


# ---- privacy profile ---------------------------------------------------------------------


def test_correct_gaussian_profile_below_its_analytic_curve():
    g = Gaussian(clip=0.5, noise_multiplier=2.0, delta=1e-3)  # sigma 1, sensitivity 1
    pairs = [(np.array([0.5]), np.array([-0.5]))]
    r = audit(g, pairs, samples=200_000, rng=3, confidence=STRICT, float_bits=False)
    p = r.profile
    assert p is not None and p.claimed_from == "epsilon_at" and 1e-3 in p.delta
    assert not r.violation and not any(p.above_claim)
    for d, lo in zip(p.delta, p.epsilon_lower, strict=True):
        true = math.inf if d == 0 else analytic_gaussian_epsilon(1.0, 1.0, d)
        assert lo <= true  # soundness at 1 - 1e-7
    # informative: at delta = 0.01 the truth is 2.32; the bound's s.e. here is ~0.05
    i = p.delta.index(0.01)
    assert p.epsilon_lower[i] > 1.2


def test_gaussian_with_halved_sigma_flagged_in_profile_and_verdict():
    # sigma 0.5 claiming sigma 1 at delta 1e-3 (claim 3.1): bound 5.4 at seed 4, s.e. ~0.2
    m = GaussianClaim(0.5, 1.0, 1e-3)
    r = audit(m, PAIR, samples=200_000, rng=4, float_bits=False)
    assert r.violation and r.distribution.violation
    assert any(r.profile.above_claim)


def test_gaussian_claiming_delta_100x_too_small_flagged():
    # sigma calibrated to (1, 1e-2) but claiming (1, 1e-4): true epsilon at 1e-4 is 1.83
    sigma = analytic_gaussian_sigma(1.0, 1.0, 1e-2)

    class Claim(GaussianClaim):
        def __init__(self) -> None:
            super().__init__(sigma, sigma, 1e-4)
            self.epsilon = 1.0

        def epsilon_at(self, delta):
            return 1.0 if delta >= 1e-4 else math.inf

    r = audit(Claim(), PAIR, samples=1_000_000, rng=5, float_bits=False)
    # bounds 1.43-1.44 on three other seeds (s.e. ~0.04): > 10 standard errors above 1
    assert r.violation and r.distribution.violation, r.summary()


@pytest.mark.parametrize("bad", [math.nan, -1.0])
def test_claimed_profile_must_be_a_nonnegative_epsilon(bad):
    # NaN was accepted (no point could ever be refuted), a negative claim too
    m = GaussianClaim(1.0, 2.0, 1e-3)
    m.epsilon_at = lambda delta: bad
    with pytest.raises(InvalidParameterError, match=r"epsilon_at\(0.0\) must be >= 0"):
        audit(m, PAIR, samples=5_000, rng=0, float_bits=False)


def test_profile_json_uses_inf_strings_for_no_claim():
    m = DoubleLaplace(1.0)
    m.delta = 1e-3
    r = audit(m, PAIR, samples=20_000, rng=6, float_bits=False)
    d = json.loads(json.dumps(r.to_dict()))["profile"]
    assert d["claimed_from"] == "single point"
    assert d["delta"][0] == 0.0 and d["epsilon_claimed"][0] == "inf"
    assert len(d["delta"]) == len(d["epsilon_lower"]) == len(d["epsilon_claimed"])
    assert d["epsilon_claimed"][-1] == 1.0


# ---- validation: types checked, absurd claims refused --------------------------------------


@pytest.mark.parametrize("eps", ["1", True, None, [1.0]])
def test_user_epsilon_type_checked(eps):
    m = DoubleLaplace(1.0, epsilon=eps)
    with pytest.raises(InvalidParameterError, match=r"mechanism.epsilon must be a real number"):
        audit(m, PAIR, samples=5_000)


def test_epsilon_inf_claim_refused():
    with pytest.raises(InvalidParameterError, match=r"claims no privacy"):
        audit(DoubleLaplace(1.0, epsilon=math.inf), PAIR, samples=5_000)


@pytest.mark.parametrize(
    "kw, name",
    [
        ({"float_bits": "no"}, "float_bits"),
        ({"profile": 1}, "profile"),
        ({"samples": True}, "samples"),
        ({"samples": 5000.0}, "samples"),
        ({"confidence": "0.9"}, "confidence"),
        ({"force": "yes"}, "force"),
        ({"max_events": 1.0}, "max_events"),
    ],
)
def test_audit_arguments_type_checked(kw, name):
    with pytest.raises(InvalidParameterError, match=name):
        audit(DoubleLaplace(1.0), PAIR, **{"samples": 5_000, **kw})


def test_absurd_sample_count_refused_unless_forced():
    with pytest.raises(InvalidParameterError, match=r"hours .*force"):
        audit(DoubleLaplace(1.0), PAIR, samples=10**13)


# ---- user code errors come back wrapped --------------------------------------------------


class Raises:
    epsilon = 1.0

    def privatize(self, x, rng):
        raise ZeroDivisionError("library refuses floats")


class Strings:
    epsilon = 1.0

    def privatize(self, x, rng):
        return np.array([["a"]] * x.shape[0])


class AllNan:
    epsilon = 1.0

    def privatize(self, x, rng):
        return np.full(x.shape, np.nan)


class BadPairs:
    epsilon = 1.0

    def privatize(self, x, rng):
        return x

    def candidate_pairs(self, dim):
        raise KeyError("boom")


def test_exception_in_privatize_wrapped_with_cause():
    with pytest.raises(UserCodeError, match=r"privatize of Raises raised ZeroDivisionError") as e:
        audit(Raises(), PAIR, samples=5_000)
    assert isinstance(e.value.__cause__, ZeroDivisionError)
    assert "x = [0]" in str(e.value)


def test_non_numeric_output_refused():
    with pytest.raises(UserCodeError, match=r"must return real numbers, got dtype <U1"):
        audit(Strings(), PAIR, samples=5_000)


def test_only_nan_outputs_refused():
    with pytest.raises(UserCodeError, match=r"only NaN/inf"):
        audit(AllNan(), PAIR, samples=5_000)


class EpsilonRaises(Raises):
    @property
    def epsilon(self):
        raise ZeroDivisionError("no claim")


def test_epsilon_property_error_wrapped():
    # hasattr() let a property's exception escape raw (a traceback at the CLI)
    with pytest.raises(UserCodeError, match=r"mechanism.epsilon of EpsilonRaises raised Zero"):
        audit(EpsilonRaises(), PAIR, samples=5_000)


def test_epsilon_beyond_exp_overflow_is_inconclusive_not_a_crash():
    # epsilon 1e300 with force: the claimed f-DP curve used math.exp(eps) (OverflowError)
    r = audit(DoubleLaplace(1.0, epsilon=1e300), PAIR, samples=5_000, rng=0, force=True)
    assert not r.violation and r.inconclusive
    assert not r.tradeoff.violation


def test_inf_outputs_of_one_input_give_no_raw_numpy_warning():
    # the selection's tail fit subtracted inf from inf: "RuntimeWarning: invalid value
    # encountered in subtract" reached a CLI user's stderr. Disjoint outputs: a violation.
    m = from_scalar(lambda v: math.inf if v > 0.5 else v, epsilon=1.0, domain=(0.0, 1.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = audit(m, samples=5_000, rng=0, float_bits=False)
    assert r.violation and any("NaN or inf" in w for w in r.warnings)


class Declared(DoubleLaplace):
    """A user's Laplace that declares its domain (and optional attributes set per test)."""

    def candidate_pairs(self, dim):
        return [(np.zeros(dim), np.ones(dim))]


@pytest.mark.parametrize(
    "attr, value, match",
    [
        ("dim", "2", r"mechanism.dim must be an integer >= 1, got '2'"),
        ("dim", True, r"mechanism.dim must be an integer >= 1, got True"),
        ("dim", 10**9, r"mechanism.dim must be <= 1,000,000"),  # ran until killed
        ("reproducible", "no", r"mechanism.reproducible must be True or False"),  # was True
    ],
)
def test_optional_mechanism_attributes_type_checked(attr, value, match):
    m = Declared(1.0)
    setattr(m, attr, value)
    with pytest.raises(InvalidParameterError, match=match):
        audit(m, samples=5_000, rng=0, float_bits=False)


def test_infinite_sigma_is_not_a_gaussian_claim():
    # sigma = inf with a delta claim made the claimed curve G_0 (no information at all)
    m = Declared(1.0)
    m.delta, m.sigma, m.sensitivity = 1e-3, math.inf, 1.0
    r = audit(m, samples=5_000, rng=0, float_bits=False)
    assert r.tradeoff.claimed_from == "epsilon-delta"


def test_candidate_pairs_error_wrapped():
    with pytest.raises(UserCodeError, match=r"candidate_pairs\(1\) of BadPairs raised KeyError"):
        audit(BadPairs(), samples=5_000)


def test_exact_epsilon_and_default_pairs_type_checked():
    from ldp_audit.audit import default_pairs, exact_epsilon

    lap = Laplace(epsilon=1.0, clip=1.0)
    with pytest.raises(InvalidParameterError, match="rng must be"):
        exact_epsilon(lap, rng="seed")
    with pytest.raises(InvalidParameterError, match="samples must be an integer"):
        exact_epsilon(lap, samples=True)
    with pytest.raises(InvalidParameterError, match="dim must be an integer >= 1"):
        default_pairs(lap, "2")


def test_unrefutable_claim_warned_and_ceiling_is_exact():
    from ldp_audit import audit as audit_mod

    n_est = audit_mod.estimation_samples(5_000)
    top = audit_mod.max_refutable_epsilon(n_est, 0.95)
    assert top < math.log(n_est)  # ln(n / ln(1/a)) < ln n
    # a broken mechanism (true epsilon inf: disjoint outputs) cannot beat the ceiling
    r = audit(DoubleLaplace(1e-9, epsilon=0.5), [(np.array([0.0]), np.array([100.0]))],
              samples=5_000, rng=0, float_bits=False, max_events=1)  # fmt: skip
    assert r.violation and r.epsilon_lower_bound <= top + 1e-9
    # k2 = 0, k1 = n: attained up to ln(p1_lower) = ln(a1) / n, about -0.0015 here
    assert top - 0.01 < r.epsilon_lower_bound
    r = audit(DoubleLaplace(1.0, epsilon=20.0), PAIR, samples=5_000, rng=0, float_bits=False)
    assert any("cannot be refuted" in w for w in r.warnings)


class NoColumns:
    epsilon = 1.0

    def privatize(self, x, rng):
        return np.zeros((x.shape[0], 0))


def test_outputs_without_columns_refused():
    # an (n, 0) output was a raw "ValueError: attempt to get argmax of an empty sequence"
    # (exit 3 with a traceback at the command line)
    with pytest.raises(InvalidParameterError, match=r"at least one value per row.*\(8, 0\)"):
        audit(NoColumns(), PAIR, samples=5_000)


class TupleOfColumns:
    epsilon = 1.0

    def privatize(self, x, rng):
        return x[:, 0] + rng.laplace(0.0, 1.0, len(x)), rng.integers(0, 9, len(x))


def test_a_tuple_of_columns_is_pointed_at_column_stack():
    # session 52: (y, seed) returned as a tuple of two arrays said only "got shape (2, 8)"
    with pytest.raises(InvalidParameterError, match=r"\(2, 8\): a tuple of 2 arrays .*column_st"):
        audit(TupleOfColumns(), PAIR, samples=5_000)


class OffsetBit:
    """Releases 2^60 + b with P[b = 1] = 0.9 for x = 1, 0 for x = 0: float64 (the auditor's
    reading) cannot tell 2^60 from 2^60 + 1, so the leak is invisible to the built-in
    statistics; the audit must say so rather than "the outputs do not depend on the input"."""

    epsilon = 1.0

    def privatize(self, x, rng):
        bit = (x[:, 0] > 0.5) & (rng.random(x.shape[0]) < 0.9)
        return 2**60 + bit.astype(np.int64)


def test_integers_beyond_float64_precision_warned():
    r = audit(OffsetBit(), PAIR, samples=5_000, rng=0)
    assert any("2^53" in w and "offset" in w for w in r.warnings), r.warnings


class UniformNoise:
    """x + U(-b, b) with b = 1 / (2 delta): exactly (0, delta)-DP on the pair (0, 1) (its total
    variation distance is 1 / (2 b)), as diffprivlib's Uniform mechanism; ``shift`` 0 makes the
    outputs independent of the input."""

    epsilon = 0.0

    def __init__(self, delta: float, shift: float = 1.0) -> None:
        self.delta, self.b, self.shift = delta, 1.0 / (2.0 * delta), shift

    def privatize(self, x, rng):
        return self.shift * x + rng.uniform(-self.b, self.b, size=x.shape)


def test_a_zero_epsilon_bound_at_a_claimed_delta_is_not_called_input_independent():
    """A correct (0, 0.2) mechanism: the epsilon bound at delta 0.2 is exactly 0 (the truth),
    while its events separate the pair (the delta bound is about 0.19: at 20,000 samples its
    standard error is about 0.004, so even at confidence 1 - 1e-7 it stays above 0.1 except with
    probability far below 1e-9). The
    result said "no statistic separated the pair(s) at all ... the outputs do not depend on the
    input"; that warning is now kept for outputs that really show no dependence."""
    r = audit(UniformNoise(0.2), PAIR, samples=20_000, rng=0, float_bits=False, confidence=STRICT)
    assert r.epsilon_lower_bound == 0.0 and not r.violation
    assert r.delta_lower_bound > 0.1
    assert not any("no statistic separated" in w for w in r.warnings)
    flat_mech = UniformNoise(0.2, shift=0.0)  # STRICT: no bound above 0 but w.p. <= 1e-7
    flat = audit(flat_mech, PAIR, samples=20_000, rng=0, float_bits=False, confidence=STRICT)
    assert flat.epsilon_lower_bound == 0.0 and flat.delta_lower_bound == 0.0
    assert any("no statistic separated" in w for w in flat.warnings)


def test_a_witness_of_nan_on_one_input_names_the_nan_cell():
    # session 52 probe: a mechanism returning NaN on x2 only was refuted with the witness
    # "(0 cells) + cells unseen in selection" (the event: every output but the NaN one)
    class NanOnOne:
        epsilon = 1.0

        def privatize(self, x, rng):
            x = np.asarray(x, float).reshape(len(x), -1)
            y = x[:, :1] + rng.laplace(0.0, 1.0, size=(len(x), 1))
            y[x[:, 0] == 1.0] = np.nan
            return y

    r = audit(NanOnOne(), [(np.array([0.0]), np.array([1.0]))], samples=5_000, rng=0,
              tradeoff=False, profile=False)  # fmt: skip
    assert r.violation
    assert "every output but the cells: y = [nan]" in r.summary()
    assert "(0 cells)" not in r.summary()
    assert any("a cell statistic counts them as cells of their own" in w for w in r.warnings)


class _WidthTellsInput:
    """Laplace, epsilon 1, on (0, 1); on input 1, about half of the calls return the release
    twice (two columns): the width of a call tells the input."""

    epsilon = 1.0

    def privatize(self, x, rng):
        y = x + rng.laplace(0.0, 1.0, size=x.shape)
        return np.hstack([y, y]) if x[0, 0] == 1 and rng.random() < 0.5 else y

    def candidate_pairs(self, dim):
        return [(np.zeros(1), np.ones(1))]


@pytest.mark.parametrize("seed", [1, 2])
def test_an_output_width_that_varies_between_calls_is_refused(seed):
    """Session 55 probe: only the fit half's two inputs were compared, so when their calls
    happened to agree (seed 2 here) the audit read chunks of 1 and 2 columns alike and said
    "no violation" (0.888 at 20,000 samples) on a mechanism whose width tells the input; with a
    callable pre-registered event nothing compared widths (0.810, 0.779 on seeds 1, 2). Every
    call of a pair must now return the width of its first call, in the selection, the
    estimation and with an event. (A mechanism whose calls all happen to agree cannot be told:
    seed 5 of the search draws width 1 on every call of input 1.)"""
    for kw in ({}, {"event": ([1.0], [0.0], lambda y, x, x2: y[:, 0] > 0.5)}):
        with pytest.raises(UserCodeError, match=r"values per row of .*first call on the pair"):
            audit(_WidthTellsInput(), samples=20_000, rng=seed, float_bits=False, **kw)


class _DtypeTellsInput:
    """Binary randomised response, epsilon 1; on input 1, about half of the calls return
    int64, the others float64: the dtype of a call tells the input."""

    epsilon = 1.0

    def privatize(self, x, rng):
        y = np.where(rng.random(x.shape) < math.e / (1 + math.e), x, 1 - x)
        return y.astype(np.int64) if x[0, 0] == 1 and rng.random() < 0.5 else y

    def candidate_pairs(self, dim):
        return [(np.zeros(1), np.ones(1))]


def test_an_output_dtype_that_varies_between_calls_is_refused():
    """Session 55 probe: session 52's dtype check compares one 8-row call of each input, so
    when those agreed (seed 0) the audit read int64 and float64 calls alike as float64 and said
    "no violation" (0.952 at 20,000 samples) on a release whose dtype tells the input. Every
    call of a pair is now held to its first call's dtype (int64 and uint64 alike)."""
    with pytest.raises(UserCodeError, match=r"dtype int64 on input x = \[1\].*dtype float64"):
        audit(_DtypeTellsInput(), samples=20_000, rng=0, float_bits=False)
