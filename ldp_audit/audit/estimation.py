"""Estimation: the kept events counted on fresh samples, and each count pair turned into a bound.

:func:`estimate_audit` draws, per input pair that a kept event uses, fresh outputs of both inputs
from the pair's own estimation streams (Poisson-sized with ``ratio_test="poisson"``) and counts
every event in one pass; :func:`verdict_bounds` turns each verdict event's two counts into its
epsilon lower bound with :mod:`ldp_audit.stats` (two one-sided Clopper-Pearson bounds, the
pooled rate bounds, or the joint Poisson test), Bonferroni over the verdicts' m events, with
the :class:`~ldp_audit.audit.results.Witness` that names the event; :func:`delta_lower_bound`
the lower bound on delta at the claimed epsilon from the same counts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ldp_audit.audit.results import Witness
from ldp_audit.audit.sampling import Joint, stream_counts
from ldp_audit.audit.selection import Candidate
from ldp_audit.stats import (
    clopper_pearson_lower,
    clopper_pearson_upper,
    epsilon_lower_bound_from_counts,
    epsilon_lower_bound_from_poisson_counts,
    epsilon_lower_bound_from_poisson_counts_delta,
    epsilon_lower_bound_from_pooled_counts,
    pooled_rate_lower,
    pooled_rate_upper,
)

if TYPE_CHECKING:
    from ldp_audit.audit.plan import Plan
    from ldp_audit.audit.search import Selection


@dataclass
class Counts:
    """The estimation counts: per event (by ``id``), its count under x and under x2; per pair,
    the realised sample sizes (Poisson ones under ``ratio_test="poisson"``), the arrival times
    of the delta augmentation's Poisson processes (single, pooled) and, per pooled event, the
    intersection counted to make the pair's events disjoint."""

    results: dict[int, tuple[int, int]] = field(default_factory=dict)
    sizes: dict[int, tuple[int, int]] = field(default_factory=dict)
    arrivals: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    joints: dict[int, Joint] = field(default_factory=dict)


def estimate_audit(
    mechanism: Any,
    pair_list: Sequence[tuple[np.ndarray, np.ndarray]],
    events: Sequence[Candidate],
    sel: Selection,
    plan: Plan,
    delta: float,
    tick: Callable[[int], None],
    before: Callable[[int], None],
) -> Counts:
    """Count ``events`` on fresh outputs (one pass per input of each pair serves them all).

    ``before(pairs_used)`` is called once the pairs to draw are known (the progress bar's
    total); ``tick(m)`` after each chunk of m outputs. ``sel``: each pair's streams and output
    width.
    """
    n_est, poisson = plan.n_est, plan.poisson
    out = Counts()
    by_pair: dict[int, list[Candidate | Joint]] = {}
    for c in events:
        by_pair.setdefault(c.pair, []).append(c)
        if c.partner is not None:
            by_pair[c.pair].append(c.partner)
            if poisson:  # the pair's events are made disjoint: count the intersection
                out.joints[id(c)] = Joint(c, c.partner)
                by_pair[c.pair].append(out.joints[id(c)])
    before(len(by_pair))
    for p, evs in by_pair.items():
        if poisson and delta > 0:
            # the augmentation's Poisson processes (rate n delta for single events, 2 n delta
            # for pooled pairs) on [0, 1], from their own stream, independent of the counts
            g = sel.streams[p].spawn(1)[0]
            out.arrivals[p] = (
                g.uniform(size=int(g.poisson(n_est * delta))),
                g.uniform(size=int(g.poisson(2.0 * n_est * delta))),
            )
        x, x2 = pair_list[p]
        re1, re2 = sel.est_rngs[p]
        # Poissonization: the sample sizes are Poisson(n_est), drawn before any output
        n1_p = int(re1.poisson(n_est)) if poisson else n_est
        n2_p = int(re2.poisson(n_est)) if poisson else n_est
        out.sizes[p] = (n1_p, n2_p)
        k_x = stream_counts(mechanism, x, n1_p, re1, evs, tick, sel.widths[p], sel.first[p])
        k_x2 = stream_counts(mechanism, x2, n2_p, re2, evs, tick, sel.widths[p], sel.first[p])
        for ev, a, b in zip(evs, k_x, k_x2, strict=True):
            out.results[id(ev)] = (a, b)
    return out


def event_counts(
    ev: Candidate, counts: Counts, n_est: int, poisson: bool
) -> tuple[int, int, int, int]:
    """``(k_num, n_num, k_den, n_den)`` of a verdict event: its two counts and sample sizes,
    oriented (numerator first). A pooled event S (x the numerator) with S' (x2 the numerator):
    counted on the same outputs, ``2 n_est`` trials each; with ``poisson``, S \\ S' and
    S' \\ S (disjoint, so both pooled counts are independent Poisson counts with means
    ``n_est`` times their rates) on the summed realised sizes."""
    a, b = counts.results[id(ev)]
    n_w, n_w2 = ev.oriented(*counts.sizes[ev.pair])
    if ev.partner is None:
        k_num, k_den = ev.oriented(a, b)
        return k_num, n_w, k_den, n_w2
    a2, b2 = counts.results[id(ev.partner)]
    if poisson:
        i1, i2 = counts.results[id(counts.joints[id(ev)])]
        return (a - i1) + (b2 - i2), n_w + n_w2, (b - i2) + (a2 - i1), n_w + n_w2
    return a + b2, 2 * n_est, b + a2, 2 * n_est


def verdict_bounds(
    events: Sequence[Candidate],
    counts: Counts,
    pair_list: Sequence[tuple[np.ndarray, np.ndarray]],
    plan: Plan,
    delta: float,
) -> tuple[list[float], list[tuple[float, Witness]]]:
    """Per verdict event, its epsilon lower bound at level ``alpha / m`` (m = the number of
    verdict events) and its witness, in the order of ``events``."""
    alpha, n_est, poisson = plan.alpha, plan.n_est, plan.poisson
    m = len(events)
    per_event: list[tuple[float, Witness]] = []
    for ev in events:
        k_num, n_w, k_den, n_w2 = event_counts(ev, counts, n_est, poisson)
        event_text = ev.stat.describe(ev.op, ev.t)
        test = ("poisson" if delta == 0 else "poisson-augmented") if poisson else "clopper-pearson"
        pooled = ev.partner is not None
        if pooled:
            other = ev.partner.stat.describe(ev.partner.op, ev.partner.t)
            event_text += f" with x the numerator, pooled with {other} with x2 the numerator"
            event_text += " (each without the other's outputs)" if poisson else ""
        a = alpha / m
        if poisson and delta > 0:
            bnd = epsilon_lower_bound_from_poisson_counts_delta(
                k_num,
                k_den,
                a,
                delta_count=(2.0 if pooled else 1.0) * n_est * delta,
                arrivals=counts.arrivals[ev.pair][int(pooled)],
            )
        elif poisson:
            bnd = epsilon_lower_bound_from_poisson_counts(k_num, k_den, a, mean1=n_est, mean2=n_est)
        elif pooled:
            bnd = epsilon_lower_bound_from_pooled_counts(
                k_num, k_den, n_w, a, delta=delta, numerator_share=ev.share
            )
        else:
            bnd = epsilon_lower_bound_from_counts(
                k_num, n_w, k_den, n_w2, a, delta=delta, numerator_share=ev.share
            )
        xn, xd = ev.oriented(*pair_list[ev.pair])
        w = Witness(
            x=tuple(float(v) for v in xn),
            x2=tuple(float(v) for v in xd),
            event=event_text,
            family=ev.stat.family,
            k1=k_num,
            n1=n_w,
            k2=k_den,
            n2=n_w2,
            numerator_share=ev.share,
            pooled=pooled,
            test=test,
        )
        per_event.append((float(bnd), w))
    return [b for b, _ in per_event], per_event


def profile_lowers(
    events: Sequence[Candidate],
    counts: Counts,
    deltas: Sequence[float],
    alpha: float,
) -> np.ndarray:
    """The privacy profile's lower curve: per delta, the largest bound over the profile's own
    events (its own Bonferroni family, ``alpha / max(1, len(events))``)."""
    m_p = max(1, len(events))
    lowers = np.zeros(len(deltas))
    for ev in events:
        k_num, nn, k_den, nd = event_counts(ev, counts, 0, False)  # (single events)
        for i, dl in enumerate(deltas):
            v = epsilon_lower_bound_from_counts(
                k_num, nn, k_den, nd, alpha / m_p, delta=dl, numerator_share=ev.share
            )
            lowers[i] = max(lowers[i], float(v))
    return lowers


def delta_lower_bound(
    events: Sequence[Candidate], counts: Counts, claimed: float, plan: Plan
) -> tuple[float, bool]:
    """The lower bound on delta at the claimed epsilon over the verdict events, floored at 0,
    and whether it shares the verdicts' family.

    Per event S (numerator input x): ``CP_lower(k1; a s / m) - e^eps CP_upper(k2; a (1-s) / m)``
    with the event's own share ``s`` and the verdicts' Bonferroni factor m: the very intervals
    behind the epsilon bound, so both statements hold together at the audit's confidence (an
    (eps, delta)-DP mechanism has ``P[M(x) in S] - e^eps P[M(x2) in S] <= delta`` for every S).
    Pooled events use the pooled rate bounds. With the Poisson ratio test the epsilon bounds
    come from another test, so the delta bound is its own Clopper-Pearson family on the
    realised sample sizes (error split evenly; pooled events, whose counts are then made
    disjoint, are skipped).
    """
    alpha, poisson, m = plan.alpha, plan.poisson, len(events)
    c = math.exp(min(claimed, 700.0))
    best = 0.0
    for ev in events:
        if ev.partner is not None and poisson:
            continue
        k_num, n_num, k_den, n_den = event_counts(ev, counts, plan.n_est, poisson)
        share = 0.5 if poisson else ev.share
        a_lo, a_hi = alpha * share / m, alpha * (1.0 - share) / m
        if ev.partner is not None:
            lo = float(pooled_rate_lower(k_num, n_num, a_lo))
            hi = float(pooled_rate_upper(k_den, n_den, a_hi))
        else:
            if n_num <= 0 or n_den <= 0:
                continue
            lo = float(clopper_pearson_lower(k_num, n_num, a_lo))
            hi = float(clopper_pearson_upper(k_den, n_den, a_hi))
        best = max(best, lo - c * hi)
    return best, not poisson
