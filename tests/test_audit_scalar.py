"""The scalar adapter ``from_scalar`` (one call per value, other libraries' mechanisms).

Correct mechanisms are audited at confidence 1 - 1e-7 (false failure <= 1e-7 by the auditor's
guarantee); broken ones with margins of many standard errors. diffprivlib and OpenDP are optional
test dependencies: their tests skip with a message when the library is absent.
"""

from __future__ import annotations

import decimal
import fractions
import math

import numpy as np
import pytest

from ldp_audit.audit import audit, from_scalar
from ldp_audit.errors import InvalidParameterError, UserCodeError

STRICT = 1 - 1e-7


def laplace_factory(scale: float):
    def make(rs: np.random.RandomState):
        return lambda v: v + rs.laplace(0.0, scale)

    return make


def test_seeded_scalar_mechanism_correct_and_reproducible():
    m = from_scalar(laplace_factory(1.0), epsilon=1.0, domain=(0.0, 1.0), seeding="random_state")
    a = audit(m, samples=20_000, rng=3, confidence=STRICT, float_bits=False)
    b = audit(m, samples=20_000, rng=3, confidence=STRICT, float_bits=False)
    assert not a.violation and a.reproducible and a.warnings == ()
    assert a.epsilon_lower_bound == b.epsilon_lower_bound and a.witness == b.witness
    assert a.pairs_tested == 2  # the domain's ends, and low with the middle


def test_broken_scalar_mechanism_flagged():
    # scale 0.5 claiming 1: true 2; bound ~1.8 at 30k samples (s.e. ~0.06)
    m = from_scalar(laplace_factory(0.5), epsilon=1.0, domain=(0.0, 1.0), seeding="random_state")
    r = audit(m, samples=30_000, rng=4, float_bits=False)
    assert r.violation and r.distribution.violation and r.epsilon_lower_bound > 1.3


def test_unseedable_library_warned():
    rs = np.random.RandomState(0)
    m = from_scalar(lambda v: v + rs.laplace(0.0, 1.0), epsilon=1.0, domain=(0.0, 1.0))
    r = audit(m, samples=5_000, rng=0, confidence=STRICT, float_bits=False)
    assert not r.reproducible
    assert any("not reproducible from the seed" in w for w in r.warnings)
    assert r.to_dict()["reproducible"] is False


def test_vectorized_and_finite_domain():
    def make(g: np.random.Generator):
        return lambda v: v + g.laplace(0.0, 1.0, size=v.shape)

    m = from_scalar(make, epsilon=1.0, domain=[0, 1, 0.5], seeding="generator", vectorized=True)
    assert len(m.candidate_pairs(1)) == 3
    r = audit(m, samples=20_000, rng=1, confidence=STRICT, float_bits=False)
    assert not r.violation and r.epsilon_lower_bound > 0.5


def test_scalar_errors_wrapped():
    def refuse(v):
        raise TypeError("integers only")

    m = from_scalar(refuse, epsilon=1.0, domain=(0.0, 1.0), name="lib.randomise")
    with pytest.raises(UserCodeError, match=r"lib.randomise raised TypeError on input 0.0") as e:
        audit(m, samples=5_000)
    assert isinstance(e.value.__cause__, TypeError)
    m = from_scalar(lambda v: "yes", epsilon=1.0, domain=(0.0, 1.0), name="lib.randomise")
    with pytest.raises(UserCodeError, match=r"must return a real number, got 'yes'"):
        audit(m, samples=5_000)


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"epsilon": "1"}, "epsilon must be a real number"),
        ({"epsilon": math.inf}, "finite"),
        ({"delta": 1.0}, "delta must be finite, >= 0 and < 1, got 1.0"),
        ({"domain": (1.0, 0.0)}, "low < high"),
        ({"domain": [1.0]}, "two distinct"),
        ({"seeding": "time"}, "seeding must be one of"),
    ],
)
def test_from_scalar_validation(kw, message):
    args = {"epsilon": 1.0, "domain": (0.0, 1.0), **kw}
    with pytest.raises(InvalidParameterError, match=message):
        from_scalar(lambda v: v, **args)


# ---- optional: diffprivlib and OpenDP ------------------------------------------------------


def _diffprivlib_mechanisms():
    """diffprivlib.mechanisms, or skip. diffprivlib 0.6.6 imports ``DOUBLE``/``DTYPE`` from
    ``sklearn.tree._tree``, which scikit-learn 1.9 no longer defines; the documented shim puts
    back the two dtype names (float64, float32) it expects. The mechanisms do not use trees."""
    pytest.importorskip("sklearn", reason="diffprivlib needs scikit-learn")
    try:
        import diffprivlib.mechanisms as dpm
    except ImportError as exc:
        if "sklearn.tree._tree" not in str(exc):
            pytest.skip(f"diffprivlib not installed (pip install diffprivlib): {exc}")
        import sklearn.tree._tree as tree

        tree.DOUBLE = np.float64
        tree.DTYPE = np.float32
        try:
            import diffprivlib.mechanisms as dpm
        except ImportError as exc2:
            pytest.skip(f"diffprivlib does not import with this scikit-learn: {exc2}")
    return dpm


def test_diffprivlib_laplace_three_lines():
    dpm = _diffprivlib_mechanisms()
    mech = from_scalar(
        lambda rs: dpm.Laplace(epsilon=1.0, sensitivity=1.0, random_state=rs).randomise,
        epsilon=1.0,
        domain=(0.0, 1.0),
        seeding="random_state",
    )
    r = audit(mech, samples=20_000, rng=0, confidence=STRICT)
    assert not r.distribution.violation, r.summary()  # the maths is right
    assert r.reproducible


def test_diffprivlib_mislabelled_epsilon_flagged():
    dpm = _diffprivlib_mechanisms()
    # the library runs at epsilon 2 but the claim passed through says 1: bound ~1.8, s.e. ~0.06
    mech = from_scalar(
        lambda rs: dpm.Laplace(epsilon=2.0, sensitivity=1.0, random_state=rs).randomise,
        epsilon=1.0,
        domain=(0.0, 1.0),
        seeding="random_state",
    )
    r = audit(mech, samples=30_000, rng=1, float_bits=False)
    assert r.violation and r.leak == "distribution"


def test_opendp_laplace_unseedable():
    dp = pytest.importorskip("opendp.prelude", reason="OpenDP not installed (pip install opendp)")
    dp.enable_features("contrib")
    meas = dp.m.make_laplace(
        dp.atom_domain(T=float, nan=False), dp.absolute_distance(T=float), scale=1.0
    )
    mech = from_scalar(meas, epsilon=meas.map(1.0), domain=(0.0, 1.0), name="opendp laplace")
    r = audit(mech, samples=3_000, rng=0, confidence=STRICT)  # OpenDP: ~5k calls/s here
    assert mech.epsilon == pytest.approx(1.0)
    assert not r.distribution.violation, r.summary()
    assert not r.reproducible  # OpenDP draws its own randomness


@pytest.mark.parametrize(
    "name, make, domain, delta, float_leak",
    [
        (
            "Geometric",
            lambda dpm, rs: dpm.Geometric(epsilon=1.0, sensitivity=1, random_state=rs),
            [0, 1],  # integers: the library refuses floats
            0.0,
            False,
        ),
        (
            "Snapping",
            lambda dpm, rs: dpm.Snapping(
                epsilon=1.0, sensitivity=1.0, lower=0.0, upper=10.0, random_state=rs
            ),
            (0.0, 1.0),
            0.0,
            False,
        ),
        (
            "GaussianAnalytic",
            lambda dpm, rs: dpm.GaussianAnalytic(
                epsilon=1.0, delta=1e-3, sensitivity=1.0, random_state=rs
            ),
            (0.0, 1.0),
            1e-3,
            True,
        ),
    ],
    ids=["geometric", "snapping", "gaussian-analytic"],
)
def test_diffprivlib_float_safe_and_leaky(name, make, domain, delta, float_leak):
    """Issue 19's finding, as a golden test: the float-safe Geometric and Snapping come out clean
    in both readings; the continuous GaussianAnalytic is right in exact arithmetic but its
    doubles leak (at seed 0 its float-bit bound is 5.7 vs the claim 1: an event with k2 = 0)."""
    dpm = _diffprivlib_mechanisms()
    mech = from_scalar(
        lambda rs: make(dpm, rs).randomise,
        epsilon=1.0,
        delta=delta,
        domain=domain,
        seeding="random_state",
        name=f"diffprivlib {name}",
    )
    r = audit(mech, samples=30_000, rng=0, confidence=STRICT, profile=False)
    assert not r.distribution.violation, r.summary()
    assert r.implementation.violation is float_leak, r.summary()
    assert r.leak == ("float-representation" if float_leak else "none")


def test_vectorized_errors_wrapped():
    x, rng = np.zeros((3, 1)), np.random.default_rng(0)
    m = from_scalar(lambda v: 1 / 0, epsilon=1.0, domain=(0.0, 1.0), name="lib", vectorized=True)
    with pytest.raises(UserCodeError, match=r"lib raised ZeroDivisionError on a batch of 3"):
        m.privatize(x, rng)
    m = from_scalar(lambda v: v[:2], epsilon=1.0, domain=(0.0, 1.0), name="lib", vectorized=True)
    with pytest.raises(UserCodeError, match=r"one real number per input, got dtype float64, shape"):
        m.privatize(x, rng)
    bits = from_scalar(lambda v: v > 0, epsilon=1.0, domain=(0.0, 1.0), vectorized=True)
    assert bits.privatize(x, rng).dtype == np.float64  # a vectorized bit mechanism's bools


def test_vectorized_function_receives_the_domain_type():
    # session 56 probe: a vectorized k-RR indexing a table by its input array stopped with
    # "raised IndexError on a batch of 8 values" (it got float64 for domain=[0, 1]), and one
    # flipping bools with ~v with "raised TypeError" (float64 for [False, True])
    x, rng, seen = np.array([[0.0], [1.0]]), np.random.default_rng(0), []

    def record(v):
        seen.append(v.dtype)
        return np.asarray(v, dtype=np.float64)

    for domain, dtype in (([0, 1], np.int64), ([False, True], np.bool_), ([0, 0.5], np.float64)):
        from_scalar(record, epsilon=1.0, domain=domain, vectorized=True).privatize(x, rng)
        assert seen.pop() == dtype
    table = np.array([0.2, 0.8])
    m = from_scalar(lambda v: table[v], epsilon=1.0, domain=[0, 1], vectorized=True)
    assert m.privatize(x, rng)[:, 0].tolist() == [0.2, 0.8]


class _OneValuePerCall:
    """diffprivlib's shape: an epsilon and randomise(value), no privatize."""

    epsilon = 1.0

    def randomise(self, value):
        return value


def test_one_value_per_call_object_pointed_at_from_scalar():
    # a diffprivlib mechanism passed as it is got "must have ... a privatize(x, rng) method"
    # (audit, --mechanism) or "fn must be callable" (from_scalar, --scalar) with no way forward
    with pytest.raises(InvalidParameterError, match=r"from_scalar\(obj\.randomise.*--scalar"):
        audit(_OneValuePerCall(), [(np.array([0.0]), np.array([1.0]))], samples=2_000)
    with pytest.raises(InvalidParameterError, match=r"pass its randomise method"):
        from_scalar(_OneValuePerCall(), epsilon=1.0, domain=(0.0, 1.0))
    # session 57: a factory returning the object, not its method (``lambda rs:
    # Laplace(..., random_state=rs)``, .randomise forgotten) got no such pointer
    m = from_scalar(lambda rs: _OneValuePerCall(), epsilon=1.0, domain=(0.0, 1.0), seeding="seed")
    with pytest.raises(
        UserCodeError, match=r"got _OneValuePerCall \(return its randomise method\)"
    ):
        m.privatize(np.zeros((2, 1)), np.random.default_rng(0))


class _PrivatiseClient:
    """pure-ldp's shape: an epsilon and privatise(value) (British spelling), no privatize."""

    epsilon = 1.0

    def privatise(self, value):
        return value


def test_privatise_clients_and_bare_functions_pointed_at_from_scalar():
    # pure-ldp's DEClient(1, 8) and multi-freq-ldpy's GRR_Client passed to audit() got only
    # "must have an epsilon attribute and a privatize(x, rng) method, got DEClient"
    one_pair = [(np.array([0.0]), np.array([1.0]))]
    with pytest.raises(InvalidParameterError, match=r"from_scalar\(obj\.privatise.*OBJ\.privatise"):
        audit(_PrivatiseClient(), one_pair, samples=2_000)
    with pytest.raises(InvalidParameterError, match=r"pass its privatise method"):
        from_scalar(_PrivatiseClient(), epsilon=1.0, domain=(0.0, 1.0))

    def grr_client(v, k, epsilon):  # one value per call, more arguments than the value
        return v

    with pytest.raises(InvalidParameterError, match=r"it is a function.*from_scalar\(lambda v"):
        audit(grr_client, one_pair, samples=2_000)


class _AddNoiseMechanism:
    """PyDP's shape (``LaplaceMechanism(epsilon, sensitivity)``): an epsilon and
    ``add_noise(value)``, no privatize."""

    epsilon = 1.0

    def add_noise(self, value):
        return value


def test_add_noise_mechanisms_pointed_at_from_scalar():
    # session 58 probe: PyDP 1.1.5's LaplaceMechanism(1.0, 1.0) passed to audit(), --mechanism
    # or from_scalar got only "must have ... a privatize(x, rng) method, got LaplaceMechanism"
    # (or "fn must be callable"), the way in that diffprivlib's and pure-ldp's objects get left out
    one_pair = [(np.array([0.0]), np.array([1.0]))]
    with pytest.raises(InvalidParameterError, match=r"from_scalar\(obj\.add_noise.*OBJ\.add_noise"):
        audit(_AddNoiseMechanism(), one_pair, samples=2_000)
    with pytest.raises(InvalidParameterError, match=r"pass its add_noise method"):
        from_scalar(_AddNoiseMechanism(), epsilon=1.0, domain=(0.0, 1.0))


def test_a_32_bit_seeding_api_given_the_seed_is_told_which_seeding_fits():
    """Session 58 probe: ``seeding="seed"`` passes an int in [0, 2^63); a factory seeding
    NumPy's legacy generator with it (``np.random.seed(s)``, ``RandomState(s)``, diffprivlib's
    ``random_state=s``) stopped with NumPy's "Seed must be between 0 and 2**32 - 1" alone."""

    def factory(seed):
        rs = np.random.RandomState(seed)
        return lambda v: v + rs.laplace()

    m = from_scalar(factory, epsilon=1.0, domain=(0.0, 1.0), seeding="seed")
    with pytest.raises(
        UserCodeError, match=r"2\*\*32 - 1 \(the seed is an int in \[0, 2\^63\)"
    ) as e:
        m.privatize(np.zeros((2, 1)), np.random.default_rng(0))
    assert "seeding='random_state' or seed % 2**32" in str(e.value)
    m = from_scalar(lambda s: factory(s % 2**32), epsilon=1.0, domain=(0.0, 1.0), seeding="seed")
    assert m.privatize(np.zeros((2, 1)), np.random.default_rng(0)).shape == (2, 1)


# ---- one vector per call: the frequency-oracle clients of LDP libraries (issue 40) -----------
# pure-ldp's and multi-freq-ldpy's clients return a bit vector (unary encoding) or a pair
# (y, seed) (local hashing) per call; from_scalar refused them ("must return a real number").
# Self-contained re-implementations, seeded through seeding="generator".


def oue_factory(epsilon: float, k: int = 4):
    """Optimised unary encoding of a value in 1..k: bit v - 1 kept w.p. 1/2, the others set
    w.p. 1 / (e^epsilon + 1); true epsilon ``epsilon``."""

    def make(g: np.random.Generator):
        q = 1.0 / (math.exp(epsilon) + 1.0)

        def privatise(v: int) -> np.ndarray:
            bits = (g.random(k) < q).astype(np.int64)
            bits[v - 1] = g.random() < 0.5
            return bits

        return privatise

    return make


G_OLH = 8  # the hash range


def _hash(seed: int, v: int) -> int:
    """A hash that needs every bit of a 62-bit seed (a float64 copy changes it)."""
    return (seed * 0x9E3779B97F4A7C15 + v * 0xBF58476D1CE4E5B9) % (2**61 - 1) % G_OLH


def olh_factory(epsilon: float, seed_low: int = 0):
    """Local hashing: (y, seed), y = H_seed(v) kept w.p. e^eps / (e^eps + g - 1), else another
    of the g values; the seed is in [seed_low, seed_low + 2^62)."""

    def make(g: np.random.Generator):
        keep = math.exp(epsilon) / (math.exp(epsilon) + G_OLH - 1)

        def privatise(v: int) -> tuple[int, int]:
            seed = seed_low + int(g.integers(2**62))
            h = _hash(seed, v)
            y = h if g.random() < keep else (h + 1 + int(g.integers(G_OLH - 1))) % G_OLH
            return y, seed

        return privatise

    return make


def support_gap(outputs, x, x_prime):
    """[y = H_seed(x)] - [y = H_seed(x')], on the exact (int64) outputs."""
    ys, seeds = outputs[:, 0].tolist(), outputs[:, 1].tolist()
    a, b = int(x[0]), int(x_prime[0])
    gap = [(y == _hash(s, a)) - (y == _hash(s, b)) for y, s in zip(ys, seeds, strict=True)]
    return np.array(gap, dtype=float)


def test_a_vector_per_call_is_audited():
    """OUE at epsilon 1 (k 4): correct at its claim (false failure <= 1e-7); claiming 0.5 it is
    refuted (bound about 0.9 at 20,000 samples, standard error about 0.04)."""
    ok = from_scalar(oue_factory(1.0), epsilon=1.0, domain=[1, 2, 3, 4], seeding="generator")
    x = np.array([[1.0], [2.0]])
    out = ok.privatize(x, np.random.default_rng(0))
    assert out.shape == (2, 4) and out.dtype == np.int64
    r = audit(ok, samples=20_000, rng=0, confidence=STRICT)
    assert not r.violation and r.epsilon_lower_bound > 0.5, r.summary()
    wrong = from_scalar(oue_factory(1.0), epsilon=0.5, domain=[1, 2, 3, 4], seeding="generator")
    assert audit(wrong, samples=20_000, rng=0).violation


def test_a_hashed_pair_per_call_reaches_a_statistic_exactly():
    """(y, seed) with 62-bit seeds: the statistic recomputes H_seed from the int64 outputs. At
    true epsilon 2 claiming 1.5 the support event's bound is about 1.9 at 20,000 samples
    (standard error about 0.05); a float64 copy of the seeds would make the statistic's hash
    wrong and the bound about 0."""
    m = from_scalar(olh_factory(2.0), epsilon=1.5, domain=[1, 2], seeding="generator")
    r = audit(m, samples=20_000, rng=0, statistics=[support_gap], float_bits=False)
    assert r.violation and r.witness.family == "user", r.summary()


def test_a_64_bit_seed_reaches_a_statistic_exactly():
    """Seeds in [2^63, 2^63 + 2^62) (a uint64 seed or digest) stay uint64: they were read as
    float64, so the statistic's hash was wrong: bound 0.000, no violation (measured, seed 0); now
    1.909, as the 62-bit seeds of the test above."""
    m = from_scalar(olh_factory(2.0, 2**63), epsilon=1.5, domain=[1, 2], seeding="generator")
    out = m.privatize(np.array([[1.0], [2.0]]), np.random.default_rng(0))
    assert out.dtype == np.uint64 and (out[:, 1] >= 2**63).all()
    r = audit(m, samples=20_000, rng=0, statistics=[support_gap], float_bits=False)
    assert r.violation and r.witness.family == "user", r.summary()


def ss_factory(epsilon: float, k: int, ordered: bool):
    """Subset selection of a value in 0..k-1, as multi-freq-ldpy 0.2.5's ``SS_Client``: a set
    of w = round(k / (e^eps + 1)) values, holding v w.p. w e^eps / (w e^eps + k - w). ``ordered``
    returns it as that client does, an array with v first when kept: v at any other place
    never happens on input v and does on input v' (true epsilon infinite); as a set it is
    epsilon-LDP."""

    def make(g: np.random.Generator):
        w = max(1, round(k / (math.exp(epsilon) + 1)))
        keep = w * math.exp(epsilon) / (w * math.exp(epsilon) + k - w)

        def privatise(v: int):
            others = [u for u in range(k) if u != v]
            if g.random() < keep:
                out = [v, *g.choice(others, size=w - 1, replace=False).tolist()]
            else:
                out = g.choice(others, size=w, replace=False).tolist()
            return np.array(out) if ordered else set(out)

        return privatise

    return make


def test_an_ordered_subset_is_refuted_and_a_set_is_not():
    """k 10, epsilon 1 (subsets of 3): the ordered report is refuted (bound 2.478 at 20,000
    samples, seed 0; its true epsilon is infinite); the same report as a set is not (0.933;
    false failure <= 1e-7)."""
    kw = {"epsilon": 1.0, "domain": [0, 1], "seeding": "generator"}
    r = audit(from_scalar(ss_factory(1.0, 10, True), **kw), samples=20_000, rng=0)
    assert r.distribution.violation and r.epsilon_lower_bound > 2.0, r.summary()
    ok = audit(from_scalar(ss_factory(1.0, 10, False), **kw), samples=20_000, rng=0,
               confidence=STRICT)  # fmt: skip
    assert not ok.violation, ok.summary()


def test_unequal_or_non_numeric_vectors_are_named():
    x, rng = np.array([[1.0], [2.0]]), np.random.default_rng(0)
    ragged = from_scalar(lambda v: [0] * v, epsilon=1.0, domain=[1, 2], name="lib")
    with pytest.raises(UserCodeError, match=r"lib must return the same number of values on every "
                       r"call: 1 value on input 1, 2 values on input 2"):  # fmt: skip
        ragged.privatize(x, rng)
    text = from_scalar(lambda v: (v, "seed"), epsilon=1.0, domain=[1, 2], name="lib")
    with pytest.raises(UserCodeError, match=r"lib must return a real number, got \(1, 'seed'\)"):
        text.privatize(x, rng)
    # a randomised-response bool reads as 0/1 (OpenDP's make_randomized_response_bool)
    flip = from_scalar(lambda v: bool(v), epsilon=1.0, domain=[0, 1])
    assert flip.privatize(np.array([[0.0], [1.0]]), rng).tolist() == [[0.0], [1.0]]


def rappor_factory(f: float, clears: bool = True):
    """Basic one-time RAPPOR of a value in 1..4 (a one-hot Bloom filter of 4 bits): a set bit
    stays 1 w.p. 1 - f/2, a clear bit becomes 1 w.p. f/2; returns (bits, cohort) as pure-ldp's
    client does. Claim 2 ln((1 - f/2) / (f/2)) (two bits differ). ``clears=False`` is
    pure-ldp 1.2.0's ``RAPPORClient._perturb``: it never clears a set bit (true epsilon inf)."""

    def make(g: np.random.Generator):
        def privatise(v: int) -> tuple[list[int], int]:
            u = g.random(4)
            bits = [int(u[i] < f / 2 or (i == v - 1 and (u[i] < 1 - f / 2 or not clears)))
                    for i in range(4)]  # fmt: skip
            return bits, 0

        return privatise

    return make


def test_a_nested_result_per_call_is_read_in_order():
    """(bits, cohort) per call: flattened to 5 values. f = 0.5 claims 2 ln 3 = 2.197: the
    correct client is not flagged (false failure <= 1e-7); the one that never clears a set bit
    is refuted (its bit v - 1 is never 0 under v: bound about ln of 20,000 samples, far above)."""
    claim = 2 * math.log(3.0)
    ok = from_scalar(rappor_factory(0.5), epsilon=claim, domain=[1, 2], seeding="generator")
    assert ok.privatize(np.array([[1.0]]), np.random.default_rng(0)).shape == (1, 5)
    assert not audit(ok, samples=20_000, rng=0, confidence=STRICT).violation
    bad = from_scalar(rappor_factory(0.5, clears=False), epsilon=claim, domain=[1, 2],
                      seeding="generator")  # fmt: skip
    r = audit(bad, samples=20_000, rng=0)
    assert r.violation and r.epsilon_lower_bound > 5.0, r.summary()


def test_a_boolean_domain_passes_bools():
    """OpenDP's make_randomized_response_bool takes a bool and refuses an int ("inferred type is
    i32, expected bool"), and domain=[False, True] was refused ("must be a real number"). A
    self-contained boolean randomised response that insists on bools, keeping the value w.p.
    3/4 (epsilon ln 3): correct at ln 3 (false failure <= 1e-7), refuted at ln 3 / 2 (bound
    about 1.05 at 20,000 samples, standard error about 0.03)."""

    def make(g: np.random.Generator):
        def rr(v: bool) -> bool:
            if not isinstance(v, bool):
                raise TypeError(f"expected bool, got {type(v).__name__}")
            return v if g.random() < 0.75 else not v

        return rr

    eps = math.log(3.0)
    ok = from_scalar(make, epsilon=eps, domain=[False, True], seeding="generator")
    assert ok.candidate_pairs(1)[0][1].tolist() == [1.0]
    assert not audit(ok, samples=20_000, rng=0, confidence=STRICT).violation
    half = from_scalar(make, epsilon=eps / 2, domain=(False, True), seeding="generator")
    assert audit(half, samples=20_000, rng=0).violation


def test_an_iterator_per_call_is_read_in_order():
    """pure-ldp's Hadamard mechanism returns a list of (j, coefficient) pairs when it keeps the
    coefficients and a zip object when it re-draws them: the audit stopped with "4 values on
    input 1, 1 value on input 1". Both read as the same 4 values in order."""

    def hm(v: int):
        pairs = [(v, 1), (v + 1, -1)]
        return pairs if v == 1 else zip((v, v + 1), (1, -1), strict=True)

    m = from_scalar(hm, epsilon=1.0, domain=[1, 2])
    out = m.privatize(np.array([[1.0], [2.0]]), np.random.default_rng(0))
    assert out.tolist() == [[1, 1, 2, -1], [2, 1, 3, -1]] and out.dtype == np.int64
    only_zip = from_scalar(lambda v: zip((v,), (0,), strict=True), epsilon=1.0, domain=[1, 2])
    assert only_zip.privatize(np.array([[2.0]]), np.random.default_rng(0)).tolist() == [[2, 0]]


@pytest.mark.parametrize(
    ("ret", "shown"),
    [
        ({"y": 1}, r"\{'y': 1\} \(dict\)"),  # was read as its keys: "got ['y'] (list)"
        ({1: 0.5}, r"\{1: 0.5\} \(dict\)"),  # was read silently as its key 1
        (None, r"None \(NoneType\)"),  # was "got [None] (list)"
        (2**70, r"1180591620717411303424 \(int\)"),  # was "got dtype object, shape (2, 1)"
        (fractions.Fraction(1, 2), r"Fraction\(1, 2\) \(Fraction\)"),  # the same
        (decimal.Decimal(1), r"Decimal\('1'\) \(Decimal\)"),  # was "got [Decimal('1')] (list)"
    ],
)
def test_a_non_real_output_is_shown_as_returned(ret, shown):
    m = from_scalar(lambda v: ret, epsilon=1.0, domain=[1, 2], name="lib")
    with pytest.raises(UserCodeError, match=rf"lib must return a real number, got {shown} on "):
        m.privatize(np.array([[1.0], [2.0]]), np.random.default_rng(0))


def test_a_set_is_read_in_sorted_order():
    # a 2-subset; CPython iterates {9, 1} as 9, 1 (hash slots), an order that is no output
    m = from_scalar(lambda v: {v + 8, v}, epsilon=1.0, domain=[1, 2])
    out = m.privatize(np.array([[1.0], [2.0]]), np.random.default_rng(0))
    assert out.tolist() == [[1, 9], [2, 10]] and out.dtype == np.int64


def _rr_typed(keep_type, flip_type):
    def make(g):
        return lambda v: keep_type(v) if g.random() < 0.73 else flip_type(1 - v)

    return make


def test_a_type_that_varies_between_calls_is_refused():
    # session 52's probe: randomised response returning int when it keeps v, float when it flips
    # (the type tells which): 0.239-7.447 at epsilon 0.25-8, no violation; now refused
    m = from_scalar(_rr_typed(int, float), epsilon=1.0, domain=[0, 1], seeding="generator")
    with pytest.raises(
        UserCodeError, match=r"\((int|float)\) on input 0 and .* \((float|int)\) on input 0: "
    ):
        m.privatize(np.zeros((50, 1)), np.random.default_rng(0))
    # int for one input, float for the other: the first kind is kept across calls
    by_input = from_scalar(
        lambda g: lambda v: float(v) if v else v, epsilon=1.0, domain=[0, 1], seeding="generator"
    )
    with pytest.raises(UserCodeError, match=r"returned 0 \(int\) on input 0 and 1.0 \(float\) on"):
        audit(by_input, samples=2000, rng=0, float_bits=False, tradeoff=False)
    # one kind in two spellings (NumPy and Python ints) is one type
    same = from_scalar(_rr_typed(np.int64, int), epsilon=1.0, domain=[0, 1], seeding="generator")
    assert same.privatize(np.zeros((50, 1)), np.random.default_rng(0)).shape == (50, 1)


def test_a_width_that_varies_names_the_wrapped_function_not_the_adapter():
    """Session 56: one value for input 0 and two for input 1 was refused as "mechanism.privatize
    of ScalarMechanism returned 2 values per row", naming ldp-audit's adapter class."""

    def make(g):
        return lambda v: (g.random(),) if v == 0 else (g.random(), g.random())

    m = from_scalar(make, epsilon=1.0, domain=[0, 1], seeding="generator", name="mylib.rr")
    with pytest.raises(UserCodeError) as e:
        audit(m, samples=2000, rng=0, float_bits=False, tradeoff=False)
    msg = str(e.value)
    assert msg.startswith("mylib.rr (through from_scalar) returned 2 values per row"), msg
    assert "ScalarMechanism" not in msg


def test_a_factory_without_seeding_is_pointed_at_seeding():
    m = from_scalar(_rr_typed(int, int), epsilon=1.0, domain=[0, 1], name="lib")
    with pytest.raises(UserCodeError, match=r"lib returned a function .*seeding="):
        m.privatize(np.zeros((2, 1)), np.random.default_rng(0))


def _label_rr(labels, keep_eps):
    """k-RR over arbitrary labels, returning a label: keeps v w.p. e^a / (e^a + k - 1)."""

    def make(g: np.random.Generator):
        def rr(v):
            if v not in labels:
                raise TypeError(f"expected one of {labels}, got {v!r}")
            e = math.exp(keep_eps)
            if g.random() < e / (e + len(labels) - 1):
                return v
            return [u for u in labels if u != v][g.integers(len(labels) - 1)]

        return rr

    return make


@pytest.mark.parametrize("labels", [["a", "b", "c"], [(0, 0), (0, 1), (1, 1)]])
def test_a_domain_of_labels_passes_the_labels_and_reads_them_back(labels):
    """Session 54: randomised response over strings (or tuples) was refused ("domain value must
    be a real number, got 'a' (str)"); the function now receives the labels and a release that
    is one of them is read as its position. At its claim (epsilon 1, 3 pairs) not flagged
    (false failure <= 1e-7); keeping as epsilon 2 while claiming 1 is refuted (bound about 1.9
    at 10,000 samples, standard error about 0.07)."""
    ok = from_scalar(_label_rr(labels, 1.0), epsilon=1.0, domain=labels, seeding="generator")
    assert [p[1].tolist() for p in ok.candidate_pairs(1)] == [[1.0], [2.0], [2.0]]
    out = ok.privatize(np.array([[2.0]] * 50), np.random.default_rng(0))
    assert out.shape == (50, 1) and set(out[:, 0]) == {0.0, 1.0, 2.0}
    assert not audit(ok, samples=10_000, rng=0, confidence=STRICT).violation
    bad = from_scalar(_label_rr(labels, 2.0), epsilon=1.0, domain=labels, seeding="generator")
    r = audit(bad, samples=10_000, rng=0)
    assert r.distribution.violation and r.distribution.epsilon_lower_bound > 1.5
    with pytest.raises(InvalidParameterError, match="not with vectorized=True"):
        from_scalar(lambda v: v, epsilon=1.0, domain=labels, vectorized=True)
    with pytest.raises(InvalidParameterError, match="hashable"):
        from_scalar(lambda v: v, epsilon=1.0, domain=[[0], [1]])
    # a 2-tuple of labels is a set of two, not an interval ("domain low must be a real number")
    two = from_scalar(lambda v: v, epsilon=1.0, domain=("yes", "no"))
    assert two.labels == ["yes", "no"] and len(two.candidate_pairs(1)) == 1


class _ReversedSet(frozenset):
    """A set whose iteration order is the reverse of the sorted one (as a set of strings may
    iterate under some PYTHONHASHSEED)."""

    def __iter__(self):
        return iter(sorted(frozenset.__iter__(self), key=repr, reverse=True))


def test_a_set_domain_is_read_in_one_order_whatever_the_process():
    """Session 55 probe: ``domain={"red", "green", "blue"}`` took the set's iteration order,
    which for strings changes with PYTHONHASHSEED: the same ``audit(..., rng=0)`` gave 0.968
    (witness x = [2], x2 = [0]) in one process and 0.979 (x = [0], x2 = [1], other colours) in
    another. A set is now read sorted, so its positions, pairs and result depend on the seed
    only."""
    labels = ["blue", "green", "red"]
    for dom in ({"red", "green", "blue"}, _ReversedSet(labels), frozenset(labels)):
        m = from_scalar(_label_rr(labels, 1.0), epsilon=1.0, domain=dom, seeding="generator")
        assert m.labels == labels
    nums = from_scalar(lambda v: v, epsilon=1.0, domain=_ReversedSet([3, 1, 2]))
    assert nums.domain == [1.0, 2.0, 3.0] and nums.integer_inputs
    mixed = from_scalar(lambda v: v, epsilon=1.0, domain=_ReversedSet(["b", (0, 1), "a"]))
    assert mixed.labels == sorted(["b", (0, 1), "a"], key=repr)


@pytest.mark.parametrize("domain", ["01", "0:1", b"ab", "red,green"])
def test_a_string_domain_is_refused_not_read_as_its_characters(domain):
    """Session 55 probe: ``domain="0:1"`` (the command line's spelling) was read as the labels
    '0', ':' and '1', and the audit stopped in the user's function ("fac raised TypeError on
    input '0': can only concatenate str (not "float") to str"), blaming it for the domain; a
    function that accepted strings was audited on characters. Now refused naming ``domain``,
    before any call."""
    calls = []
    with pytest.raises(InvalidParameterError, match="^domain must be"):
        from_scalar(lambda v: calls.append(v) or 0.0, epsilon=1.0, domain=domain)
    assert calls == []


@pytest.mark.parametrize("big", [10**22, 2**60 + 1, -(2**53) - 1, np.int64(2**62)])
def test_an_integer_domain_value_float64_cannot_hold_is_refused(big):
    """Session 56 probe: ``--domain 10000000000000000000000,1`` (``domain=[10**22, 1]``)
    passed -2**63 to the function (a float64 cast to int64, with only NumPy's RuntimeWarning),
    and 2**60 + 1 reached it as 2**60: the audit ran on inputs the user never gave."""
    with pytest.raises(InvalidParameterError, match="beyond 2\\^53 in magnitude"):
        from_scalar(lambda v: 0.0, epsilon=1.0, domain=[0, big])
    seen = []
    edge = from_scalar(lambda v: seen.append(v) or 0.0, epsilon=1.0, domain=[0, 2**53])
    edge.privatize(np.array([[0.0], [2.0**53]]), np.random.default_rng(0))
    assert seen == [0, 2**53]


def test_the_middle_of_a_huge_interval_is_inside_it():
    """Session 57 probe: ``domain=(1e308, 1.7e308)`` (``--domain 1e308:1.7e308``), finite and
    accepted, made the pair (low, middle) with middle = 0.5 * (low + high) = inf: the audit
    stopped with "pairs[1] x2 must be finite, got [inf]" (exit 2), naming pairs the user never
    gave. The middle is now halved first; the same value wherever low + high does not overflow."""
    for lo, hi in ((1e308, 1.7e308), (-1.7e308, 1.7e308), (0.0, 1.0), (-3.0, 5.0)):
        m = from_scalar(lambda v: 0.0, epsilon=1.0, domain=(lo, hi))
        mids = [b[0] for _, b in m.candidate_pairs()]
        assert mids[0] == hi and lo < mids[1] < hi
        if math.isfinite(lo + hi):
            assert mids[1] == 0.5 * (lo + hi)
    m = from_scalar(
        laplace_factory(1.0), epsilon=1.0, domain=(1e308, 1.7e308), seeding="random_state"
    )
    r = audit(m, samples=1000, rng=0, float_bits=False, tradeoff=False, profile=False)
    assert r.distribution.epsilon_lower_bound >= 0


def test_every_value_of_a_large_finite_domain_is_in_a_pair():
    """Session 56 probe: the pairs of a finite domain were the first 16 of every two values,
    so from 18 values on the last ones were never tried: a k-RR over 0..19 (epsilon 1) that
    releases 19 as it is got 0.764, "no violation" (5,000 samples, seed 0); now 7.0, refuted
    on (18, 19). Up to 17 values the pairs are as before."""
    import itertools

    def values(m):
        return {float(v) for a, b in m.candidate_pairs() for v in (a[0], b[0])}

    for k in (17, 18, 20, 31, 32, 33):
        m = from_scalar(lambda v: 0.0, epsilon=1.0, domain=list(range(k)))
        assert len(m.candidate_pairs()) <= 16
        assert values(m) == set(map(float, range(min(k, 32))))
    small = from_scalar(lambda v: 0.0, epsilon=1.0, domain=list(range(7)))
    first = list(itertools.combinations(range(7), 2))[:16]
    assert [(a[0], b[0]) for a, b in small.candidate_pairs()] == first

    def make(g):
        def f(v):
            if v == 19 or g.random() < math.e / (math.e + 19):
                return v
            o = int(g.integers(19))
            return o + (o >= v)

        return f

    m = from_scalar(make, epsilon=1.0, domain=list(range(20)), seeding="generator")
    r = audit(m, samples=5000, rng=0, float_bits=False, tradeoff=False, profile=False)
    assert r.violation and r.epsilon_lower_bound > 3


def test_an_input_outside_a_finite_domain_is_refused_before_any_call():
    """Session 55 probe: ``--domain a,b --event "0;-1;0"`` audited the labels a and b (position
    -1 read as the last label), ``"0;2;0"`` stopped with "make_lab raised IndexError on input
    2.0" (blaming the user's function), and ``--domain 0,1 --event "0;0.5;0"`` passed 0 for 0.5
    (an integer domain truncates): bound 0, "no violation", on a pair never audited. Inputs of
    ``event=`` and ``pairs=`` outside a finite domain are now refused naming them, before any
    call; so are an interval's (session 55: a pair (0, 5) of a Laplace claiming epsilon 1 on
    [0, 1] was audited, a "violation" of a claim that does not cover 5)."""
    calls = []

    def fn(v):
        calls.append(v)
        return 0.0

    labels = from_scalar(fn, epsilon=1.0, domain=["a", "b"])
    ints = from_scalar(fn, epsilon=1.0, domain=[0, 1, 2])
    for m, x2 in ((labels, -1.0), (labels, 2.0), (labels, 0.5), (ints, 0.5), (ints, 3.0)):
        with pytest.raises(InvalidParameterError, match=r"^event x2 = \[.*not in the domain"):
            audit(m, event=([0.0], [x2], [0.0]), samples=2000, rng=0)
        with pytest.raises(InvalidParameterError, match=r"^pairs\[1\] x2 = \[.*not in the domain"):
            audit(m, [([0.0], [1.0]), ([0.0], [x2])], samples=2000, rng=0)
    assert calls == []
    interval = from_scalar(fn, epsilon=1.0, domain=(0.0, 1.0))
    for x2 in (2.0, -0.5):
        with pytest.raises(InvalidParameterError, match=r"^pairs\[0\] x2 = .*the interval"):
            audit(interval, [([0.0], [x2])], samples=2000, rng=0, float_bits=False)
    assert calls == []
    res = audit(interval, [([0.0], [1.0])], samples=2000, rng=0, float_bits=False)
    # the pair inside the interval is audited on exactly its two inputs; a constant output
    # carries nothing, so the bound is 0 and nothing is flagged
    assert set(calls) == {0.0, 1.0}
    assert res.epsilon_lower_bound == 0.0 and not res.violation


@pytest.mark.parametrize("name", [5, b"lap", True, ["lap"]])
def test_a_name_that_is_not_a_string_is_refused(name):
    """Session 55 probe: ``from_scalar(fn, name=5)`` was accepted and labelled reports "5"."""
    with pytest.raises(InvalidParameterError, match="^name must be a string"):
        from_scalar(lambda v: v, epsilon=1.0, domain=(0.0, 1.0), name=name)
