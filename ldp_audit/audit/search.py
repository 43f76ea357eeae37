"""The selection stage of one audit, over every input pair (selection samples only).

Per pair (its own stream, split into the A, B and estimation streams of both inputs):
:func:`_fit_statistics` draws the fit half A and fits the pair's statistics
(:mod:`ldp_audit.audit.statistics`); the tune half B is streamed through them and
:func:`_screen_pair` chooses each statistic's events (:mod:`ldp_audit.audit.selection`).
:func:`kept_events` then keeps the events that are estimated on fresh samples. Nothing here
affects soundness: the kept events are fixed before the estimation samples are drawn.
"""

from __future__ import annotations

import copy
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ldp_audit.audit.plan import Options, Plan
from ldp_audit.audit.results import short_values
from ldp_audit.audit.sampling import (
    FIT_ELEMENTS,
    privatize_of,
    privatize_rows,
    repeats_refused,
    same_dtype,
    sample,
    seeded_by,
    stream_values,
)
from ldp_audit.audit.selection import (
    Candidate,
    best_events,
    choose,
    pool_pair,
    probe_event,
    threshold_counts,
)
from ldp_audit.audit.statistics import (
    ScoreStatistic,
    Snapped,
    UserStatistic,
    build_statistics,
    fit_snap,
    float_cell_statistic,
)
from ldp_audit.audit.tradeoff import TRADEOFF_LEVELS, tradeoff_events
from ldp_audit.errors import InvalidParameterError, UserCodeError
from ldp_audit.limits import fmt_bytes, memory_limit

#: estimated audit time (seconds) above which :func:`ldp_audit.audit.audit` refuses unless
#: ``force=True``.
_MAX_SECONDS = 3 * 3600.0
#: seconds the early pilot call may take at the slowest rate the 8-row calls allow
_PILOT_SECONDS = 1.0


@dataclass
class Selection:
    """What selection found over all pairs, from selection samples only: the candidate events
    of the distribution and implementation readings, the probe and delta events, the best event
    per profile delta, the f-DP thresholds per statistic, and per pair its streams for
    estimation and its output width."""

    streams: list[np.random.Generator]
    prof_best: list[Candidate | None]
    dist_cands: list[Candidate] = field(default_factory=list)
    float_cands: list[Candidate] = field(default_factory=list)
    probe: tuple[Candidate, float] | None = None
    d_best: Candidate | None = None
    tradeoff_q: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    est_rngs: list[tuple[np.random.Generator, np.random.Generator]] = field(default_factory=list)
    widths: list[int] = field(default_factory=list)
    first: list[tuple[int, np.dtype]] = field(default_factory=list)  # first call's k, dtype
    n_nonfinite: int = 0
    big_ints: bool = False
    row8: np.ndarray | None = None
    unseeded: bool = False
    stat_row: float = 0.0  # the user statistics' seconds a row, on the first 8 outputs


def select_events(
    mechanism: Any,
    pair_list: list[tuple[np.ndarray, np.ndarray]],
    o: Options,
    plan: Plan,
    tick: Callable[[int], None],
    total: int,
) -> Selection:
    """Selection for every pair: each pair's own stream is split into the A, B and estimation
    streams of both inputs; statistics are fitted on A, events chosen on B."""
    sel = Selection(
        streams=o.rng.spawn(len(pair_list)), prof_best=[None] * len(plan.profile_deltas)
    )
    for p, (x, x2) in enumerate(pair_list):
        ra1, ra2, rb1, rb2, re1, re2 = sel.streams[p].spawn(6)
        sel.est_rngs.append((re1, re2))
        user_stats: list[ScoreStatistic] = [UserStatistic(fn, nm, x, x2) for fn, nm in o.stat_fns]
        y8, raw8 = _first_calls(mechanism, x, x2, (ra1, ra2), user_stats, o, sel, p == 0, total)
        if raw8.dtype.kind in "iu" and (raw8.max() > 2**53 or raw8.min() < -(2**53)):
            sel.big_ints = True
        # one row repeated 8 times: compared with the fit half's rows (shared randomness)
        sel.row8 = y8[0] if (y8 == y8[0]).all() else None
        width = sel.widths[p]
        del y8, raw8
        stats = _fit_statistics(mechanism, p, x, x2, (ra1, ra2), width, o, plan, sel, tick, total)
        stats = stats + user_stats
        sb1 = stream_values(mechanism, x, plan.n_b, rb1, stats, tick, width, sel.first[p])
        sb2 = stream_values(mechanism, x2, plan.n_b, rb2, stats, tick, width, sel.first[p])
        _screen_pair(p, stats, sb1, sb2, o, plan, sel)
    return sel


def _first_calls(
    mechanism: Any,
    x: np.ndarray,
    x2: np.ndarray,
    rngs: tuple[np.random.Generator, np.random.Generator],
    user_stats: list[ScoreStatistic],
    o: Options,
    sel: Selection,
    first_pair: bool,
    total: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The first 8-row call of a pair on x (its output width, so chunks stay ~2^22 values even
    when outputs are much wider than inputs, and its dtype, added to ``sel``), the user
    statistics checked on its outputs (shape, finiteness) and x2's dtype; on the first pair,
    the seeding check, the time pilot and the repeats check. Returns the call's (float64, raw)
    outputs."""
    rng, rng2 = rngs
    t8 = time.perf_counter()
    y8, raw8 = privatize_rows(mechanism, x, 8, rng, raw=True)
    t8 = time.perf_counter() - t8
    width = max(x.shape[0], y8.shape[1])
    t_s = time.perf_counter()
    for st in user_stats:  # checked on 8 outputs before the work
        st.values(raw8)
    t_s = time.perf_counter() - t_s  # a row's time is its draw's and its scores'
    sel.stat_row = sel.stat_row or t_s / 8
    same_dtype(mechanism, x, x2, raw8, rng2)
    if first_pair:  # after the checks above: an error names the user's code first
        t0 = time.perf_counter()
        sel.unseeded = not seeded_by(mechanism, x, rng)
        t8 = min(t8, (time.perf_counter() - t0) / 2)  # the fastest of the three 8-row calls
        if not o.force:
            _pilot_time(mechanism, x, rng, t8 + t_s, width, o, total, len(sel.streams), user_stats)
        if not sel.unseeded:  # after the pilot: 2,000 rows of a slow mechanism take long
            repeats_refused(mechanism, x, rng, width)
    sel.widths.append(width)
    sel.first.append((y8.shape[1], raw8.dtype))
    return y8, raw8


def _fit_statistics(
    mechanism: Any,
    p: int,
    x: np.ndarray,
    x2: np.ndarray,
    rngs_a: tuple[np.random.Generator, np.random.Generator],
    width: int,
    o: Options,
    plan: Plan,
    sel: Selection,
    tick: Callable[[int], None],
    total: int,
) -> list[ScoreStatistic]:
    """Draw the fit half A of pair ``p`` (capped for wide outputs), refuse an audit estimated
    to run for hours (timed on the first pair) and malformed outputs, and fit the pair's
    distribution statistics (read on snapped outputs) and, with ``float_bits``, its float-bit
    cell statistic."""
    ra1, ra2 = rngs_a
    n_a_p = min(plan.n_a, max(1000, FIT_ELEMENTS // width))
    # A is held whole (raw and snapped outputs, features): about 24 bytes a value per input
    need, (limit, how) = 48.0 * n_a_p * width, memory_limit()
    if need > limit and not o.force:
        raise InvalidParameterError(
            f"the mechanism's outputs have {width} values per row: the selection's fit half "
            f"({n_a_p} rows per input) needs about {fmt_bytes(need)}, more than the "
            f"{fmt_bytes(limit)} memory limit ({how}); pass force=True (--force) to run it anyway"
        )
    t_a = time.perf_counter()
    ya1 = sample(mechanism, x, n_a_p, ra1, width, sel.first[p])
    ya2 = sample(mechanism, x2, n_a_p, ra2, width, sel.first[p])
    # iid rows repeat one value 8 times in one call and another n_a_p >= 100 times in the next
    # with probability below max_q q^100 (1 - q)^8 < 1e-12: the rows of a call share a draw
    same = sel.row8 is not None and n_a_p >= 100 and (ya1 == ya1[0]).all()
    if same and not np.array_equal(ya1[0], sel.row8):
        raise UserCodeError(
            f"{privatize_of(mechanism)} returned one output for every "
            f"row of a call on x = {short_values(x.tolist())}: {short_values(sel.row8.tolist())} "
            f"in all 8 rows of one call, {short_values(ya1[0].tolist())} in all {n_a_p} rows "
            "of the next call(s), so its rows share their randomness (one draw per call, e.g. "
            "rng.laplace(0, b) instead of rng.laplace(0, b, size=x.shape)); each row must be an "
            "independent release, or the audit would count one draw as many"
        )
    if p == 0 and not o.force:
        est = total * (max(time.perf_counter() - t_a, 1e-9) / (2 * n_a_p) + sel.stat_row)
        if est > _MAX_SECONDS:
            raise _too_long(o, total, est, len(sel.streams))
    fin1, fin2 = np.isfinite(ya1).all(axis=1), np.isfinite(ya2).all(axis=1)
    if not (fin1.any() or fin2.any()):
        raise UserCodeError(
            f"{privatize_of(mechanism)} returned only NaN/inf "
            f"outputs for pairs[{p}] (x = {short_values(x.tolist())}, x2 = "
            f"{short_values(x2.tolist())}); a mechanism must release real numbers"
        )
    sel.n_nonfinite += int((~fin1).sum() + (~fin2).sum())
    tick(2 * plan.n_a)  # (counted as drawn even when capped for wide outputs)
    snap = fit_snap(ya1, ya2)
    sa1, sa2 = snap(ya1), snap(ya2)
    inner, j, discrete = build_statistics(x, x2, sa1, sa2, snap)
    pooled_a = np.concatenate([ya1, ya2])
    stats: list[ScoreStatistic] = [Snapped(st, snap, pooled_a) for st in inner]
    if o.float_bits and not discrete:
        stats.append(float_cell_statistic(ya1, ya2, j, ya1.shape[1]))
    return stats


def _too_long(o: Options, total: int, est: float, n_pairs: int) -> InvalidParameterError:
    return InvalidParameterError(
        f"samples={o.samples} would take about {est / 3600:.1f} hours ({total:.3g} outputs at "
        f"the measured {total / est:.3g} outputs/s over {n_pairs} pair(s)); lower it, or "
        "pass force=True (--force) to run it anyway"
    )


def _pilot_time(
    mechanism: Any,
    x: np.ndarray,
    rng: np.random.Generator,
    t8: float,
    width: int,
    o: Options,
    total: int,
    n_pairs: int,
    user_stats: list[ScoreStatistic],
) -> None:
    """Refuse, before the fit half is drawn, an audit projected at over twice the time limit
    (the margin covers the model's error), and say a projection over 10 minutes on stderr.
    Nothing is drawn when ``t8`` (the fastest 8-row call) allows at most 10 minutes (or half
    the limit) even if all of it were a cost per row. Otherwise one pilot call of 64 to 1,000
    rows (about ``_PILOT_SECONDS`` at that slowest rate), from a copy of ``rng`` (the audit's
    draws are unchanged), fits a fixed cost per call and a cost per row through the two
    timings, so a vectorised mechanism whose small calls are all overhead is not taken for a
    slow one. ``t8`` and the pilot include the user statistics' time on those rows."""
    if total * t8 / 8 <= min(600.0, _MAX_SECONDS / 2):
        return
    n = int(min(1000, max(64, 8 * _PILOT_SECONDS / t8)))
    t0 = time.perf_counter()
    raw = privatize_rows(mechanism, x, n, copy.deepcopy(rng), raw=True)[1]
    for st in user_stats:
        st.values(raw)
    per_row = max(time.perf_counter() - t0 - t8, 0.0) / (n - 8)
    calls = 8 * n_pairs + 4 * total * width / FIT_ELEMENTS  # chunks: FIT_ELEMENTS / 4 values
    est = max(total * per_row + calls * max(t8 - 8 * per_row, 0.0), 1e-9)
    if est > 2 * _MAX_SECONDS:
        raise _too_long(o, total, est, n_pairs)
    if est >= 600:  # over the limit: the fit half's timing (more rows) decides
        over = f", over the {_MAX_SECONDS / 3600:g}-hour limit" if est > _MAX_SECONDS else ""
        print(
            f"audit: projected about {est / 60:.0f} min{over} ({total:.3g} outputs, timed on "
            f"{n}- and 8-row calls: {per_row * 1e3:.3g} ms a row)",
            file=sys.stderr,
        )


def _better(c: Candidate | None, cur: Candidate | None) -> Candidate | None:
    """``c`` when it predicts a larger bound than ``cur`` (or ``cur`` is None), else ``cur``."""
    return c if c is not None and (cur is None or c.predicted > cur.predicted) else cur


def _screen_pair(
    p: int,
    stats: list[ScoreStatistic],
    sb1: list[np.ndarray],
    sb2: list[np.ndarray],
    o: Options,
    plan: Plan,
    sel: Selection,
) -> None:
    """Choose, on the tune half B of pair ``p`` (values ``sb1`` under x, ``sb2`` under x2, per
    statistic), each statistic's verdict event, probe, delta event, pooled halves, profile
    events and f-DP thresholds, and add them to ``sel``."""
    n_est, alpha_sel, delta, pois_v = plan.n_est, plan.alpha_sel, o.delta, plan.pois_v
    halves: dict[bool, tuple[Candidate, np.ndarray, np.ndarray]] = {}
    h_b = plan.n_b // 2
    for st, v1, v2 in zip(stats, sb1, sb2, strict=True):
        is_float = st.family == "float-bits"
        tc = threshold_counts(v1, v2)
        c = best_events(st, tc, p, n_est, alpha_sel, (delta,), poisson=pois_v)[0]
        if c is not None:
            (sel.float_cands if is_float else sel.dist_cands).append(c)
        if not is_float:
            pr = probe_event(st, tc, p, n_est, alpha_sel, o.claimed, delta)
            if pr is not None and _better(pr[0], sel.probe and sel.probe[0]) is pr[0]:
                sel.probe = pr
        if plan.delta_event and not is_float:
            d = best_events(st, tc, p, n_est, alpha_sel, (delta,), claimed=o.claimed)[0]
            sel.d_best = _better(d, sel.d_best)
        if plan.pool and not is_float and h_b >= 100:
            # each half of a pooled pair is chosen on the first half of B, judged at
            # the pooled sample size; the pair is then judged on the second half
            tch = threshold_counts(v1[:h_b], v2[:h_b])
            for d_ in (True, False):
                h = best_events(st, tch, p, 2 * n_est, alpha_sel, (delta,), d_, pois_v)[0]
                if h is not None and _better(h, halves[d_][0] if d_ in halves else None) is h:
                    halves[d_] = (h, v1[h_b:], v2[h_b:])
        if plan.profile_deltas and not is_float:
            alpha_p = plan.alpha / len(plan.profile_deltas)
            for i, c in enumerate(best_events(st, tc, p, n_est, alpha_p, plan.profile_deltas)):
                sel.prof_best[i] = _better(c, sel.prof_best[i])
        if o.tradeoff and not is_float:
            # thresholds at type I levels of either input (the direction is known
            # only once the verdict's event is chosen), from selection values only
            # (the median first: the Gaussian-family event sits between the two medians)
            lv = np.array([0.5, *TRADEOFF_LEVELS, *(1.0 - np.array(TRADEOFF_LEVELS))])
            lv = lv[(lv * plan.n_b >= 5) & ((1.0 - lv) * plan.n_b >= 5) | (lv == lv[0])]
            sel.tradeoff_q[id(st)] = (
                np.quantile(v1, lv, method="inverted_cdf"),
                np.quantile(v2, lv, method="inverted_cdf"),
            )
    if len(halves) == 2:
        pc = pool_pair(halves[True], halves[False], n_est, alpha_sel, delta, pois_v)
        if pc is not None:
            sel.dist_cands.append(pc)


@dataclass(frozen=True)
class Kept:
    """The events estimated on fresh samples: ``verdict`` (the distribution verdict's
    ``n_dist`` events, then at most one float-bit event), the profile's and the f-DP curve's."""

    verdict: list[Candidate]
    n_dist: int
    profile: list[Candidate]
    tradeoff: list[Candidate]


def fixed_event(mechanism: Any, o: Options) -> tuple[Selection, Kept]:
    """The pre-registered event ``o.event`` as the one kept event (x the numerator, the error
    split equally), with its pair's estimation streams and output width: no selection."""
    x, x2, stat = o.event  # type: ignore[misc]
    sel = Selection(streams=o.rng.spawn(1), prof_best=[])
    probe, re1, re2 = sel.streams[0].spawn(3)
    sel.est_rngs.append((re1, re2))
    _first_calls(mechanism, x, x2, (probe, re2), [stat], o, sel, True, 2 * o.samples)
    return sel, Kept([Candidate(0, stat, "gt", 0.5, True, 0.0, (0, 0))], 1, [], [])


def kept_events(sel: Selection, max_events: int, want_tradeoff: bool) -> Kept:
    """The ``max_events`` best distribution events, the probe and the delta event when the main
    rule did not choose them, the float-bit event when it promises more than all of them, the
    distinct profile events, and the f-DP curve's threshold events."""
    chosen = choose(sel.dist_cands, max_events)
    best_dist = max((c.predicted for c in chosen), default=-math.inf)
    # the probe: the selection counts contradict the claim on an event the main rule did not
    # choose (its denominator is too rare for the selection sample); delta_event: the event
    # judged by the delta it is expected to show at the claimed epsilon (a bulk event; the
    # rule above favours the largest ratio). Each is estimated too, unless already chosen.
    for extra in (sel.probe[0] if sel.probe else None, sel.d_best):
        if extra is not None and extra.key() not in {c.key() for c in chosen}:
            chosen.append(extra)
    float_chosen = [c for c in choose(sel.float_cands, 1) if c.predicted > max(best_dist, 0.0)]
    prof_events: dict[tuple[int, int, str, float, bool], Candidate] = {}  # the first of equals
    for c in sel.prof_best:
        if c is not None:
            prof_events.setdefault(c.key(), c)
    # the f-DP curve: threshold events of the best distribution event's statistic
    fdp_events: list[Candidate] = []
    if want_tradeoff and chosen and id(chosen[0].stat) in sel.tradeoff_q:
        fdp_events = tradeoff_events(chosen[0], sel.tradeoff_q[id(chosen[0].stat)])
    return Kept(chosen + float_chosen, len(chosen), list(prof_events.values()), fdp_events)
