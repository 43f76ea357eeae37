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

from ldp_audit.audit.mechanism import MAX_DIM, as_pair, check_mechanism, default_pairs, user_attr
from ldp_audit.audit.resolution import estimation_samples, max_refutable_epsilon
from ldp_audit.audit.selection import PROFILE_DELTAS, SHARES
from ldp_audit.audit.statistics import statistic_list
from ldp_audit.errors import InvalidParameterError, UserCodeError
from ldp_audit.stats import POOLED_MAX_ALPHA
from ldp_audit.validation import as_rng, check_bool, check_int, check_probability

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

    @property
    def names(self) -> list[str]:
        return [nm for _, nm in self.stat_fns]


def check_arguments(
    mechanism: Any,
    *,
    samples: Any,
    confidence: Any,
    rng: Any,
    dim: Any,
    selection_fraction: Any,
    max_events: Any,
    float_bits: Any,
    profile: Any,
    pool: Any,
    ratio_test: Any,
    tradeoff: Any,
    force: Any,
    progress: Any,
    statistics: Any,
    sequential: Any,
    delta_event: Any,
) -> Options:
    """Every argument of :func:`audit` checked, in a fixed order (the first bad one is named),
    before any sample is drawn; an int seed or None becomes a ``Generator``."""
    claimed, delta = check_mechanism(mechanism)
    v: dict[str, Any] = {"claimed": claimed, "delta": delta}
    v["confidence"] = check_probability(confidence, "confidence")
    v["samples"] = check_int(samples, "samples", minimum=1000)
    v["selection_fraction"] = check_probability(selection_fraction, "selection_fraction")
    v["max_events"] = check_int(max_events, "max_events", minimum=1)
    v["dim"] = None if dim is None else check_int(dim, "dim", minimum=1, maximum=MAX_DIM)
    v["float_bits"] = check_bool(float_bits, "float_bits")
    v["want_profile"] = delta > 0 if profile is None else check_bool(profile, "profile")
    v["pool"] = check_bool(pool, "pool")
    v["tradeoff"] = check_bool(tradeoff, "tradeoff")
    if not isinstance(ratio_test, str) or ratio_test not in RATIO_TESTS:
        raise InvalidParameterError(
            f"ratio_test must be one of {', '.join(map(repr, RATIO_TESTS))}, got {ratio_test!r}"
        )
    v["ratio_test"] = ratio_test
    for name, flag in (("force", force), ("progress", progress), ("sequential", sequential)):
        v[name] = check_bool(flag, name)
    v["delta_event"] = check_bool(delta_event, "delta_event")
    v["user_fns"] = user_fns = statistic_list(statistics, "statistics")
    mech_fns: list[tuple[Callable[..., Any], str]] = []
    shipped = user_attr(mechanism, "audit_statistics")
    if callable(shipped):
        try:
            got = shipped()
        except Exception as exc:  # noqa: BLE001 - user code
            raise UserCodeError(
                f"mechanism.audit_statistics() of {type(mechanism).__name__} raised "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        mech_fns = statistic_list(got, "mechanism.audit_statistics()")
    v["stat_fns"] = mech_fns + user_fns
    names = [nm for _, nm in v["stat_fns"]]
    dup = sorted({nm for nm in names if names.count(nm) > 1})
    if dup:
        raise InvalidParameterError(
            f"statistics: two statistics are named {dup[0]!r}; give each a distinct name "
            "(a name attribute) so the witness says which one it was"
        )
    rng = as_rng(rng)
    return Options(**v, rng=rng)


def as_pair_list(
    mechanism: Any, pairs: Sequence[tuple[Any, Any]] | None, dim: int | None
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The input pairs to audit: the given ones, checked, or the mechanism's declared ones."""
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
    pair_list = [as_pair(p, i) for i, p in enumerate(pairs)]
    if all(np.array_equal(a, b) for a, b in pair_list):
        raise InvalidParameterError(
            "pairs: every pair has x == x2, so the audit could show nothing; give "
            "neighbouring inputs that differ"
        )
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
        n_est = estimation_samples(o.samples, o.selection_fraction)
        n_sel = o.samples - n_est
        if n_est < 200:
            raise InvalidParameterError(
                f"selection_fraction leaves {n_est} estimation samples; need >= 200 "
                f"(samples={o.samples}, selection_fraction={o.selection_fraction})"
            )
        n_a = n_sel // 2
        alpha = 1.0 - o.confidence
        poisson = o.ratio_test == "poisson"
        pool = o.pool
        if not poisson:  # (Poissonized disjoint pairs are valid at any level)
            pool = pool and (1.0 - min(SHARES)) * alpha < POOLED_MAX_ALPHA
        profile_deltas: tuple[float, ...] = ()
        if o.want_profile:
            profile_deltas = tuple(sorted({*PROFILE_DELTAS, o.delta}))
        warn: list[str] = []
        top_bound = max_refutable_epsilon(n_est, o.confidence, pool)
        if o.claimed >= top_bound:
            warn.append(
                f"a claim of epsilon {o.claimed:.6g} cannot be refuted with {n_est} estimation "
                f"samples per input: no bound can exceed {top_bound:.3g} here, so 'no violation' "
                "is vacuous; refuting it needs more than e^epsilon samples per input"
            )
        reproducible = bool(user_attr(mechanism, "reproducible", True))
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
