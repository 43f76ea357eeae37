"""Adapter for scalar, one-call-per-value mechanisms of other libraries (diffprivlib, OpenDP).

Most DP libraries expose ``randomise(value) -> value`` one call at a time, carry their own
epsilon, and want a ``RandomState``, a seed, or cannot be seeded at all. :func:`from_scalar`
turns such a callable into a mechanism :func:`ldp_audit.audit.audit` can use: batched calls,
the library's own epsilon/delta passed through, an input domain from which neighbouring pairs
come, randomness derived from the audit's Generator where the library allows it, and every
error of the user's code wrapped with the input that caused it.

    from diffprivlib.mechanisms import Laplace
    from ldp_audit.audit import audit, from_scalar
    mech = from_scalar(lambda rs: Laplace(epsilon=1, sensitivity=1, random_state=rs).randomise,
                       epsilon=1, domain=(0.0, 1.0), seeding="random_state")
    print(audit(mech, samples=200_000, rng=0).summary())
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import numbers
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence, Set
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError, UserCodeError
from ldp_audit.validation import check_bool, check_choice, check_real, check_real_in, check_rng

__all__ = ["ScalarMechanism", "from_scalar"]

#: how the library's randomness is derived from the audit's Generator.
SEEDINGS = ("none", "random_state", "seed", "generator")
#: at most this many pairs are built from a finite domain.
_MAX_DOMAIN_PAIRS = 16


@dataclasses.dataclass(repr=False, eq=False)
class ScalarMechanism:
    """A scalar mechanism seen through the batched ``privatize(x, rng)`` interface.

    Build it with :func:`from_scalar`. Inputs have shape (n, 1); each row is one call of the
    wrapped function; outputs have shape (n, 1), float64, or (n, m) when every call returns a
    vector of m real numbers (int64 when they are integers, uint64 when one is >= 2^63).

    Attributes:
        epsilon: the library's claimed epsilon (passed through).
        delta: the library's claimed delta (0 for pure DP).
        reproducible: False when the library draws its own randomness (``seeding="none"``):
            the audit warns that the seed does not reproduce it.
        name: a label for reports.
    """

    _fn: Callable[..., Any]
    _: dataclasses.KW_ONLY
    epsilon: float
    delta: float
    domain: tuple[float, float] | Sequence[float]
    seeding: str
    name: str
    vectorized: bool
    integer_inputs: bool = False
    bool_inputs: bool = False
    labels: list[Any] | None = None  # a domain of strings, tuples...: its positions are audited
    _first: Any = dataclasses.field(default=None, init=False)  # the first result's kind

    @property
    def reproducible(self) -> bool:
        return self.seeding != "none"

    def __repr__(self) -> str:
        return f"ScalarMechanism({self.name}, epsilon={self.epsilon:g}, delta={self.delta:g})"

    def to_config(self) -> dict[str, Any]:
        """Label used in audit results (not a round-trippable config)."""
        out = {"name": self.name, "epsilon": self.epsilon, "delta": self.delta}
        return out | ({"labels": [str(v) for v in self.labels]} if self.labels else {})

    def _callable(self, rng: np.random.Generator) -> Callable[[Any], Any]:
        if self.seeding == "none":
            return self._fn
        if self.seeding == "random_state":
            arg: Any = np.random.RandomState(int(rng.integers(2**32)))
        elif self.seeding == "seed":
            arg = int(rng.integers(2**63 - 1))
        else:
            arg = np.random.default_rng(int(rng.integers(2**63 - 1)))
        try:
            out = self._fn(arg)
        except Exception as exc:  # noqa: BLE001 - user code
            # NumPy's legacy seeding (np.random.seed, RandomState(seed), diffprivlib's
            # random_state=seed) refuses the 63-bit seed: say which seeding fits it
            hint = (" (the seed is an int in [0, 2^63); a 32-bit seeding API such as "
                    "np.random.seed or RandomState(seed) takes seeding='random_state' or "
                    "seed % 2**32)") if self.seeding == "seed" else ""  # fmt: skip
            raise UserCodeError(
                f"the factory of {self.name} raised {type(exc).__name__} when given a "
                f"{type(arg).__name__} (seeding={self.seeding!r}): {exc}{hint}"
            ) from exc
        if not callable(out):
            raise UserCodeError(
                f"with seeding={self.seeding!r} the function of {self.name} must be a factory "
                f"returning the randomising callable, got {type(out).__name__}"
                f"{_one_value_method(out, 'return')}"
            )
        return out

    def privatize(self, x: Any, rng: np.random.Generator) -> np.ndarray:
        """Call the wrapped function on every row of ``x`` (n, 1); returns (n, 1) float64, or
        (n, m) for a function returning m values per call."""
        rng = check_rng(rng)
        xb = np.asarray(x, dtype=np.float64)
        if xb.ndim != 2 or xb.shape[1] != 1:
            raise InvalidParameterError(
                f"x must have shape (n, 1) for a scalar mechanism, got shape {xb.shape}"
            )
        fn = self._callable(rng)
        values = xb[:, 0]
        res: Any = []
        vals: list[Any] = []
        # one Python call per value (one per batch when vectorized), no per-value checks (the
        # cost is the library's; measured in benchmarks/bench_audit.py); the outputs are checked
        # once, as an array
        try:
            if self.vectorized:  # the domain's type, as one call per value receives it
                kind = np.int64 if self.integer_inputs else bool if self.bool_inputs else float
                res = fn(values.astype(kind))
            else:
                vals = values.astype(np.int64).tolist() if self.integer_inputs else values.tolist()
                vals = [bool(v) for v in vals] if self.bool_inputs else vals
                vals = [self.labels[int(v)] for v in vals] if self.labels else vals
                append = res.append
                for v in vals:
                    append(fn(v))
        except Exception as exc:  # noqa: BLE001 - user code
            on = f"a batch of {len(values)} values (first {values[0]!r})"
            if not self.vectorized:
                on = f"input {vals[len(res)]!r}"
            raise UserCodeError(f"{self.name} raised {type(exc).__name__} on {on}: {exc}") from exc
        if self.labels:  # a release that is a label reads as its position in the domain
            pos = {v: float(i) for i, v in enumerate(self.labels)}
            res = [pos.get(r, r) if isinstance(r, Hashable) else r for r in res]
        return self._outputs(res, vals, values.shape[0])

    def _outputs(self, res: Any, vals: list[Any], n: int) -> np.ndarray:
        """The calls' results as an (n, m) array: one real number (m = 1, float64) or one
        fixed-length vector of them (a tuple such as ``(y, seed)``, a bit vector) per input;
        bools read as 0/1; integer vectors stay int64 (a statistic then sees a seed exactly)."""
        if not self.vectorized and res:
            self._one_type(res, vals)
        arr: Any = None
        err: Exception | None = None
        try:
            arr = np.asarray(res)
        except Exception as exc:  # noqa: BLE001 - nested ((bits, cohort)), ragged or exotic
            if self.vectorized:
                raise UserCodeError(
                    f"{self.name} returned values that are not numbers: {exc}"
                ) from exc
            err = exc
        raw = res
        if not self.vectorized and (arr is None or arr.dtype == object):
            res = [_flat(r) for r in res]  # tuples, arrays, iterators (zip): read in order
            for v, r in zip(vals, res, strict=True):
                if len(r) != len(res[0]):
                    raise UserCodeError(
                        f"{self.name} must return the same number of values on every call: "
                        f"{_count(len(res[0]))} on input {vals[0]!r}, {_count(len(r))} on input "
                        f"{v!r}"
                    ) from err
            arr = np.asarray(res)
        if arr.ndim > 2 and not self.vectorized:  # a nested vector per call, in order
            arr = arr.reshape(len(arr), -1)
        width = arr.shape[1] if arr.ndim == 2 else 1
        if arr.dtype.kind not in "biuf" or arr.ndim not in (1, 2) or len(arr) != n or not width:
            for v, o, r in () if self.vectorized else zip(vals, raw, res, strict=True):
                for e in r if isinstance(r, (tuple, list, np.ndarray)) else (r,):
                    # np.asarray: an int beyond 64 bits, a Fraction or a Decimal is dtype object
                    if np.asarray(e).dtype.kind not in "biuf":
                        raise UserCodeError(
                            f"{self.name} must return a real number, got {o!r} "
                            f"({type(o).__name__}) on input {v!r}: {e!r} is not a float, a "
                            "64-bit integer or a bool (or a fixed-length vector of them on "
                            "every call)"
                        )
            raise UserCodeError(
                f"{self.name} must return one real number per input, got dtype {arr.dtype}, "
                f"shape {arr.shape} for {n} inputs (or one fixed-length vector of real numbers "
                "per input)"
            )
        if arr.ndim == 1:
            return arr.astype(np.float64)[:, None]
        if arr.dtype.kind == "f" and not self.vectorized and (np.abs(arr) >= 2**63).any():
            # NumPy reads Python ints, one of them >= 2^63, as float64 (rounded): keep uint64
            ints = [_flat(r) for r in raw]
            if all(isinstance(e, numbers.Integral) and e >= 0 for r in ints for e in r):
                return np.array(ints, dtype=np.uint64)
        if arr.dtype.kind in "bf":
            return arr.astype(np.float64)
        # integers stay exact: int64, or uint64 when one is >= 2^63 (a 64-bit seed or digest)
        return arr.astype(np.uint64 if arr.dtype.kind == "u" and (arr >= 2**63).any() else np.int64)

    def _one_type(self, res: list[Any], vals: list[Any]) -> None:
        """Refuse results whose type varies between calls (1 and 1.0): a reader of the release
        sees it, the audit reads values only; and a factory passed without ``seeding``."""
        if callable(res[0]):
            raise UserCodeError(
                f"{self.name} returned a function ({res[0]!r}) on input {vals[0]!r}: if it is a "
                "factory receiving the randomness, pass seeding='random_state', 'seed' or "
                "'generator' (--seeding at the command line); otherwise it must return a real "
                "number or a fixed-length vector of them"
            )
        if self._first is None:  # kept across batches: the two inputs of a pair are two
            self._first = (_kind(res[0]), res[0], vals[0])
        first, r0, v0 = self._first
        types = set(map(type, res))  # one signature: the first result stands for all
        if types & {tuple, list, np.ndarray}:
            types = set(map(_types, res))
        n = 1 if len(types) == 1 else None
        for v, r in zip(vals[:n], res[:n], strict=True):
            if not _same_kind(_kind(r), first):
                raise UserCodeError(
                    f"{self.name} returned {r0!r} ({type(r0).__name__}) on input {v0!r} and "
                    f"{r!r} ({type(r).__name__}) on input {v!r}: the type of a release must not "
                    "vary between calls (a reader tells 1 from 1.0, the audit reads values "
                    "only); return one type on every call, e.g. float(y)"
                )

    def audit_check_inputs(self, x: np.ndarray, what: str) -> None:
        """Refuse an input outside the domain: the function would get a value the claim does
        not cover (a pair outside an interval can leak more than epsilon and be called a
        violation), or another one (an integer domain truncates 0.5 to 0, a domain of labels
        reads position -1 as the last label)."""
        if isinstance(self.domain, tuple):
            lo, hi = self.domain
            if x.shape == (1,) and lo <= x[0] <= hi:
                return
            dom = f"the interval [{lo!r}, {hi!r}]"
        elif x.shape == (1,) and x[0] in self.domain:
            return
        else:
            dom = f"positions 0..{len(self.labels) - 1} of {self.labels}" if self.labels else ""
        raise InvalidParameterError(
            f"{what} = {x.tolist()} is not in the domain of {self.name} "
            f"({dom or self.domain!s:.100}): the claim covers those values only"
        )

    def candidate_pairs(self, dim: int = 1) -> list[tuple[np.ndarray, np.ndarray]]:
        """Neighbouring pairs from the declared domain: its two ends (and the middle) for an
        interval; for a finite set, every pair of distinct values, at most 16 (the first 16,
        which hold every value up to 17 values; from 18 values, consecutive values paired, so
        every value is in a pair up to 32 values)."""
        if dim != 1:
            raise InvalidParameterError(f"dim must be 1 for a scalar mechanism, got {dim!r}")
        if isinstance(self.domain, tuple) and len(self.domain) == 2 and self.domain[0] != "set":
            lo, hi = self.domain  # the middle halved first: lo + hi overflows near 1.8e308
            return [(np.array([lo]), np.array([x])) for x in (hi, 0.5 * lo + 0.5 * hi)]
        vals = list(self.domain)
        pairs = list(itertools.combinations(vals, 2))
        if len(vals) > _MAX_DOMAIN_PAIRS + 1:  # the first 16 would leave values never tried
            ends = vals + vals[:1] if len(vals) % 2 else vals  # odd: the last with the first
            pairs = list(zip(ends[::2], ends[1::2], strict=True))
        return [(np.array([a]), np.array([b])) for a, b in pairs[:_MAX_DOMAIN_PAIRS]]


def from_scalar(
    fn: Callable[..., Any],
    *,
    epsilon: float,
    delta: float = 0.0,
    domain: tuple[float, float] | Sequence[float],
    seeding: str = "none",
    name: str | None = None,
    vectorized: bool = False,
) -> ScalarMechanism:
    """Wrap a scalar ``value -> randomised value`` function as an auditable mechanism.

    Args:
        fn: with ``seeding="none"``, the randomising callable itself (e.g. diffprivlib's
            ``mech.randomise`` or an OpenDP measurement). Otherwise a factory taking the
            randomness (see ``seeding``) and returning that callable; it is called once per
            ``privatize`` batch, so the audit's Generator determines every draw.
        epsilon: the library's claimed epsilon (finite, >= 0).
        delta: the library's claimed delta, in [0, 1).
        domain: the inputs the claim covers: a tuple ``(low, high)`` of numbers for an interval
            (pairs: its ends, and low with the middle), or a list of values for a finite
            domain (pairs: every two distinct values, at most 16, every value in one up to 32
            values); a list of Python/NumPy integers makes the function receive ``int``
            values (libraries such as
            diffprivlib's ``Geometric`` refuse floats), a list of bools ``[False, True]``
            makes it receive ``bool`` values (OpenDP's ``make_randomized_response_bool``).
            A list holding other hashable values (strings, tuples) makes it receive them as
            they are; the audit's inputs are their positions 0, 1, ..., and a release equal to
            one of them reads as its position (randomised response over labels).
        seeding: ``"none"`` (the library cannot be seeded: results are not reproducible and
            the audit says so), ``"random_state"`` (a ``numpy.random.RandomState``), ``"seed"``
            (an int in [0, 2^63): NumPy's legacy ``np.random.seed`` / ``RandomState(seed)``
            take 32 bits, so pass ``seed % 2**32`` there, or use ``"random_state"``),
            ``"generator"`` (a ``numpy.random.Generator``).
        name: label for reports (default: the function's name).
        vectorized: ``fn`` accepts a 1-D array of values and returns one output per value
            (one call per batch instead of one per value); the array is int64 for a domain of
            integers, bool for ``[False, True]``, else float64.

    Returns:
        A :class:`ScalarMechanism`.

    Raises:
        InvalidParameterError: bad epsilon/delta/domain/seeding, or ``fn`` is not callable.
    """
    if not callable(fn):
        hint = _one_value_method(fn, "pass")
        raise InvalidParameterError(f"fn must be callable, got {type(fn).__name__}{hint}")
    if name is not None and not isinstance(name, str):  # str(5) would label reports "5"
        raise InvalidParameterError(f"name must be a string, got {type(name).__name__} {name!r}")
    eps = check_real_in(epsilon, "epsilon", lo=0.0, lo_open=False)
    dl = check_real_in(delta, "delta", lo=0.0, lo_open=False, hi=1.0, hi_open=True)
    check_choice(seeding, "seeding", SEEDINGS)
    vectorized = check_bool(vectorized, "vectorized")
    if isinstance(domain, (str, bytes)):  # not a set of its characters
        raise InvalidParameterError(
            f"domain must be (low, high) or a list of values, got {type(domain).__name__} "
            f"{domain!r:.80}"
        )
    if isinstance(domain, Set):  # its order: a set of strings iterates as PYTHONHASHSEED says
        domain = _sorted(domain)
    dom: Any
    integer_inputs = bool_inputs = False
    labels = None
    reals = isinstance(domain, tuple) and all(isinstance(v, numbers.Real) for v in domain)
    if reals and len(domain) == 2 and not _all_bools(domain):  # labels: a set of two
        lo = check_real(domain[0], "domain low")
        hi = check_real(domain[1], "domain high")
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise InvalidParameterError(
                f"domain must be (low, high) with finite low < high, got {domain!r}"
            )
        dom = (lo, hi)
    else:
        bool_inputs = _all_bools(domain)  # [False, True]: OpenDP's boolean randomised response
        try:
            labels = None if bool_inputs else _labels(domain, vectorized)
            vals = [
                float(v) if bool_inputs else check_real(v, "domain value")
                for v in (range(len(labels)) if labels else domain)
            ]
        except TypeError:
            raise InvalidParameterError(
                f"domain must be (low, high) or a list of values, got {domain!r}"
            ) from None
        if len(set(vals)) < 2 or not all(math.isfinite(v) for v in vals):
            raise InvalidParameterError(
                f"domain must hold at least two distinct finite values, got {domain!r}"
            )
        dom = list(dict.fromkeys(vals))
        integer_inputs = all(
            isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in domain
        )
        big = [v for v in domain if integer_inputs and abs(int(v)) > 2**53]
        if big:  # the audit's inputs are float64: 10**22 reached the function as -2**63
            raise InvalidParameterError(
                f"domain value {big[0]!r} is beyond 2^53 in magnitude: the audit's inputs are "
                "float64, which do not hold such an integer exactly (map the values to 0, 1, ...)"
            )
    label = name if name is not None else getattr(fn, "__qualname__", type(fn).__name__)
    return ScalarMechanism(
        fn,
        epsilon=eps,
        delta=dl,
        domain=dom,
        seeding=seeding,
        name=str(label),
        vectorized=vectorized,
        integer_inputs=integer_inputs and not bool_inputs,
        bool_inputs=bool_inputs,
        labels=labels,
    )


def _one_value_method(obj: Any, verb: str) -> str:
    """ " (pass its randomise method)" for a library object with a one-value method, else ""."""
    from ldp_audit.audit.mechanism import ONE_VALUE_METHODS  # (the package imports this module)

    one = [m for m in ONE_VALUE_METHODS if callable(getattr(obj, m, None))]
    return f" ({verb} its {one[0]} method)" if one else ""


def _labels(domain: Any, vectorized: bool) -> list[Any] | None:
    """A finite domain's distinct values when one of them is not a real number (strings,
    tuples: passed as they are, audited by position), else None."""
    if all(isinstance(v, numbers.Real) for v in domain):
        return None
    if vectorized or not all(isinstance(v, Hashable) for v in domain):
        raise InvalidParameterError(
            "domain values must be real numbers or hashable labels (strings, tuples; not with "
            f"vectorized=True), got {domain!r:.80}"
        )
    return list(dict.fromkeys(domain))


def _sorted(values: Set[Any]) -> list[Any]:
    """A set's values in an order that does not depend on the process (sorted, or by repr)."""
    try:
        return sorted(values)
    except TypeError:
        return sorted(values, key=repr)


def _all_bools(domain: Any) -> bool:
    try:
        return all(isinstance(v, (bool, np.bool_)) for v in domain)
    except TypeError:
        return False


def _flat(r: Any) -> list[Any]:
    if isinstance(r, np.ndarray):
        return r.ravel().tolist()
    if isinstance(r, Set):  # a subset: read in sorted order (its iteration order is no output)
        return sorted(r)
    # tuple, list, zip (not a dict: its keys alone are no output; read whole, refused)
    if isinstance(r, Iterable) and not isinstance(r, (str, bytes, Mapping)):
        return [e for item in r for e in _flat(item)]
    return [r]


def _kind(r: Any) -> Any:
    """A call's result's type as a reader of the release sees it: bool, int or float (NumPy's
    and Python's alike), an array's dtype kind, a tuple's or list's elements' kinds; None for
    other objects."""
    if isinstance(r, (bool, np.bool_)):
        return "bool"
    if isinstance(r, numbers.Integral):
        return "int"
    if isinstance(r, (float, np.floating)):
        return "float"
    if isinstance(r, np.ndarray):
        return {"u": "i"}.get(r.dtype.kind, r.dtype.kind)
    if isinstance(r, (tuple, list)):
        return tuple(_kind(e) for e in r)
    return None  # sets, iterators, tensors: not compared


def _types(r: Any) -> Any:
    if isinstance(r, (tuple, list)):
        return (type(r), *map(type, r))
    return r.dtype if isinstance(r, np.ndarray) else type(r)


def _same_kind(a: Any, b: Any) -> bool:
    """Kinds differ only where both are known: vectors position by position (their lengths
    and structure are checked with their values)."""
    if isinstance(a, tuple) and isinstance(b, tuple):
        return all(_same_kind(p, q) for p, q in zip(a, b, strict=False))
    return a is None or b is None or isinstance(a, tuple) or isinstance(b, tuple) or a == b


def _count(k: int) -> str:
    return f"{k} value{'' if k == 1 else 's'}"
