"""An audit's arguments, checked, and its plan: how the samples and the error are spent.

:func:`check_arguments` validates every argument of :func:`ldp_audit.audit.audit` in a fixed
order (types checked, not coerced; the first bad one is named) before any sample is drawn;
:func:`as_pair_list` checks the input pairs; :class:`Plan` splits ``samples`` into selection
(A fits statistics, B chooses events) and estimation, and ``1 - confidence`` over the events.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ldp_audit.audit.mechanism import (
    MAX_DIM,
    as_pair,
    call_user,
    check_mechanism,
    default_pairs,
    user_attr,
)
from ldp_audit.audit.resolution import estimation_samples, max_refutable_epsilon
from ldp_audit.audit.results import at_delta, short_values
from ldp_audit.audit.selection import PROFILE_DELTAS, SHARES
from ldp_audit.audit.statistics import EventIndicator, ScoreStatistic, statistic_list
from ldp_audit.errors import InvalidParameterError
from ldp_audit.limits import forced
from ldp_audit.stats import POOLED_MAX_ALPHA
from ldp_audit.validation import (
    as_rng,
    check_bool,
    check_choice,
    check_confidence,
    check_int,
    check_probability,
)

__all__ = ["RATIO_TESTS"]

#: the ratio tests :func:`ldp_audit.audit.audit` offers for an event's two counts (see its
#: docstring).
RATIO_TESTS = ("clopper-pearson", "poisson")


@dataclass(frozen=True)
class Options:
    """The validated arguments of one :func:`audit` call (``claimed`` and ``delta``: the
    mechanism's claim; ``stat_fns``: the mechanism's shipped statistics, then the user's)."""

    claimed: float
    delta: float
    confidence: float
    samples: int
    selection_fraction: float
    max_events: int
    dim: int | None
    float_bits: bool
    want_profile: bool
    pool: bool
    tradeoff: bool
    ratio_test: str
    force: bool
    progress: bool
    sequential: bool
    delta_event: bool
    user_fns: list[tuple[Callable[..., Any], str]]
    stat_fns: list[tuple[Callable[..., Any], str]]
    rng: np.random.Generator
    #: the pre-registered event (x, x2, its indicator) or None (the event search)
    event: tuple[np.ndarray, np.ndarray, ScoreStatistic] | None = None


def check_arguments(mechanism: Any, **a: Any) -> Options:
    """Every argument of :func:`audit` (``a``: its keyword arguments) checked, in a fixed order
    (the first bad one is named), before any sample is drawn; an int seed or None becomes a
    ``Generator``."""
    claimed, delta = check_mechanism(mechanism)
    v: dict[str, Any] = {"claimed": claimed, "delta": delta}
    v["confidence"] = check_confidence(a["confidence"])
    v["samples"] = check_int(a["samples"], "samples", minimum=1000)
    v["selection_fraction"] = check_probability(a["selection_fraction"], "selection_fraction")
    v["max_events"] = check_int(a["max_events"], "max_events", minimum=1)
    dim = a["dim"]
    v["dim"] = None if dim is None else check_int(dim, "dim", minimum=1, maximum=MAX_DIM)
    v["float_bits"] = check_bool(a["float_bits"], "float_bits")
    profile, ratio_test = a["profile"], a["ratio_test"]
    v["want_profile"] = delta > 0 if profile is None else check_bool(profile, "profile")
    v["pool"] = check_bool(a["pool"], "pool")
    v["tradeoff"] = check_bool(a["tradeoff"], "tradeoff")
    v["ratio_test"] = check_choice(ratio_test, "ratio_test", RATIO_TESTS)
    for name in ("force", "progress", "sequential", "delta_event"):
        v[name] = check_bool(a[name], name)
    v["force"] = v["force"] or forced()  # a command's --force (limits.forcing) reaches it too
    if v["delta_event"] and delta == 0:  # it would be ignored: a pure claim has no delta bound
        raise InvalidParameterError(
            "delta_event (--delta-event) needs a claim with delta > 0; the mechanism claims "
            "pure epsilon-DP (delta 0), so there is no delta to bound (drop it)"
        )
    v["user_fns"] = user_fns = statistic_list(a["statistics"], "statistics")
    shipped = user_attr(mechanism, "audit_statistics")
    got = (
        call_user(mechanism, "mechanism.audit_statistics()", shipped) if callable(shipped) else None
    )
    v["stat_fns"] = statistic_list(got, "mechanism.audit_statistics()") + user_fns
    names = [nm for _, nm in v["stat_fns"]]
    dup = sorted({nm for nm in names if names.count(nm) > 1})
    if dup:
        raise InvalidParameterError(
            f"statistics: two statistics are named {dup[0]!r}; give each a distinct name "
            "(a name attribute) so the witness says which one it was"
        )
    rng = as_rng(a["rng"])
    ev = check_event(a["event"], v)  # with it: the distribution verdict only
    if ev is not None:
        v.update(float_bits=False, want_profile=False, tradeoff=False, stat_fns=[])
    return Options(**v, rng=rng, event=ev)


def check_event(event: Any, v: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, Any] | None:
    """``event=(x, x2, S)`` checked (``v``: the other checked arguments, none of which may ask
    for the event search's own features)."""
    if event is None:
        return None
    try:
        x, x2, s = event
    except (TypeError, ValueError):
        raise InvalidParameterError(
            "event must be (x, x2, S): two inputs and the output set S (a list of output rows) "
            f"or a callable S(outputs, x, x_prime) -> n booleans, got {event!r:.80}"
        ) from None
    x, x2 = as_pair((x, x2), "event")
    if np.array_equal(x, x2):
        raise InvalidParameterError("event: x == x2, so the audit could show nothing")
    for name in ("user_fns", "sequential", "pool", "delta_event"):
        if v[name]:
            raise InvalidParameterError(
                f"event: {name.replace('user_fns', 'statistics')}= cannot be used with a "
                "pre-registered event (it belongs to the event search)"
            )
    if callable(s):
        name = str(getattr(s, "name", None) or getattr(s, "__name__", "event"))
        return x, x2, EventIndicator(s, f"{name.replace('<lambda>', 'event')}(y, x, x2)", x, x2)
    try:
        rows = np.asarray(s, dtype=np.float64)
        rows = rows.reshape(-1, 1) if rows.ndim == 1 else rows
    except (TypeError, ValueError):
        rows = np.empty((0, 0))
    if rows.ndim != 2 or rows.size == 0 or not np.all(np.isfinite(rows)):
        raise InvalidParameterError(
            "event: S must be a callable S(outputs, x, x_prime) -> n booleans or a non-empty "
            f"list of finite output rows (numbers or equal-length lists), got {s!r:.80}"
        )

    def in_rows(y: Any, *_: Any) -> np.ndarray:
        y = np.asarray(y, dtype=np.float64).reshape(len(y), -1)
        if y.shape[1] != rows.shape[1]:
            raise InvalidParameterError(
                f"event: the output set's rows have {rows.shape[1]} value(s), the mechanism's "
                f"outputs {y.shape[1]}"
            )
        hit = np.zeros(len(y), dtype=bool)
        for r in rows:
            hit |= (y == r).all(axis=1)
        return hit

    shown = ", ".join(short_values(r) for r in rows[:4].tolist())
    more = f", ... ({len(rows)} rows)" if len(rows) > 4 else ""
    return x, x2, EventIndicator(in_rows, f"y in {{{shown}{more}}}", x, x2)


def as_pair_list(
    mechanism: Any,
    pairs: Sequence[tuple[Any, Any]] | None,
    dim: int | None,
    event: tuple[np.ndarray, np.ndarray, Any] | None = None,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The input pairs to audit: the pre-registered ``event``'s, the given ones, checked, or
    the mechanism's declared ones."""
    if event is not None:
        if pairs is not None:
            raise InvalidParameterError(
                "event: pairs= cannot be used with a pre-registered event (it names its pair)"
            )
        return _in_domain(mechanism, [event[:2]], "event")
    if pairs is None:
        return default_pairs(mechanism, dim)
    try:
        n_pairs = len(pairs)
    except TypeError:
        raise InvalidParameterError(
            f"pairs must be a list of (x, x2) pairs, got {type(pairs).__name__}"
        ) from None
    if n_pairs == 0:
        raise InvalidParameterError("pairs must contain at least one (x, x2) pair, got []")
    pair_list = [as_pair(p, f"pairs[{i}]") for i, p in enumerate(pairs)]
    if all(np.array_equal(a, b) for a, b in pair_list):
        raise InvalidParameterError(
            "pairs: every pair has x == x2, so the audit could show nothing; give "
            "neighbouring inputs that differ"
        )
    return _in_domain(mechanism, pair_list, "pairs")


def _in_domain(mechanism: Any, pair_list: list[Any], what: str) -> list[Any]:
    """The given inputs, each checked by the mechanism's ``audit_check_inputs`` where it
    declares one (a :func:`~ldp_audit.audit.from_scalar` mechanism: its declared domain). Not
    ``check_inputs``: a user's mechanism may have its own helper of that name (session 56)."""
    if callable(getattr(mechanism, "audit_check_inputs", None)):
        for i, pair in enumerate(pair_list):
            for x, name in zip(pair, ("x", "x2"), strict=True):
                where = f"{what}{'' if what == 'event' else [i]} {name}"
                mechanism.audit_check_inputs(x, where)
    return pair_list


@dataclass(frozen=True)
class Plan:
    """How one fixed-sample audit spends its samples and its error probability.

    ``n_est`` outputs per input estimate, ``n_sel`` select (``n_a`` fit statistics, ``n_b``
    choose events); ``alpha = 1 - confidence`` is split over the verdicts' events
    (``alpha_sel`` is the level each is judged at during selection); ``pool`` and
    ``delta_event`` are the options where they apply (``pois_v``: the verdicts' events use the
    joint Poisson test, pure claims only); ``top_bound`` is the largest epsilon this
    sample size can refute; ``warnings`` what is known before any sample is drawn.
    """

    n_est: int
    n_sel: int
    n_a: int
    n_b: int
    alpha: float
    alpha_sel: float
    pool: bool
    poisson: bool
    pois_v: bool
    delta_event: bool
    profile_deltas: tuple[float, ...]
    top_bound: float
    reproducible: bool
    warnings: tuple[str, ...]

    @classmethod
    def of(cls, mechanism: Any, o: Options) -> Plan:
        # a pre-registered event needs no selection: every sample estimates it
        n_est = o.samples if o.event else estimation_samples(o.samples, o.selection_fraction)
        n_sel = o.samples - n_est
        if n_est < 200:
            raise InvalidParameterError(
                f"selection_fraction leaves {n_est} estimation samples; need >= 200 "
                f"(samples={o.samples}, selection_fraction={o.selection_fraction})"
            )
        n_a = n_sel // 2
        alpha = 1.0 - o.confidence
        poisson = o.ratio_test == "poisson"
        # (Poissonized disjoint pairs are valid at any level)
        pool = o.pool and (poisson or (1.0 - min(SHARES)) * alpha < POOLED_MAX_ALPHA)
        profile_deltas = tuple(sorted({*PROFILE_DELTAS, o.delta})) if o.want_profile else ()
        warn: list[str] = []
        top_bound = max_refutable_epsilon(
            n_est, o.confidence, pool, o.ratio_test if o.event else None, o.delta
        )
        if o.claimed >= top_bound:
            warn.append(
                f"a claim of epsilon {o.claimed:.6g}{at_delta(o.delta)} cannot be refuted with "
                f"{n_est} estimation samples per input: no bound can exceed {top_bound:.3g} "
                "here, so 'no violation' is vacuous; refuting it needs more than e^epsilon "
                "samples per input"
            )
        reproducible = check_bool(
            user_attr(mechanism, "reproducible", True), "mechanism.reproducible"
        )
        if not reproducible:
            warn.append(
                "the mechanism is not reproducible from the seed (it draws its own randomness); "
                "rerunning with the same seed gives a different sample, with the same guarantee"
            )
        return cls(
            n_est=n_est,
            n_sel=n_sel,
            n_a=n_a,
            n_b=n_sel - n_a,
            alpha=alpha,
            alpha_sel=alpha / (o.max_events + int(o.float_bits)),
            pool=pool,
            poisson=poisson,
            pois_v=poisson and o.delta == 0.0,
            delta_event=o.delta_event and o.delta > 0,
            profile_deltas=profile_deltas,
            top_bound=top_bound,
            reproducible=reproducible,
            warnings=tuple(warn),
        )
