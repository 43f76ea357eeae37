"""Selection: threshold events chosen on the B half of the selection samples.

For each statistic's values under the two inputs, :func:`threshold_counts` counts the four
threshold events (``{s > t}`` / ``{s <= t}``, either input the numerator) at candidate
thresholds; :func:`best_events` keeps, per delta, the event, direction and error split whose
bound on ``n_est`` fresh samples is expected to be largest (selection counts shrunk to one-sided
Clopper-Pearson bounds, :func:`ldp_audit.stats.clopper_pearson_lower` /
:func:`~ldp_audit.stats.clopper_pearson_upper`); :func:`probe_event` screens for rare leaks the
main rule cannot see (:func:`ldp_audit.stats.binomial_tail_pvalue`), :func:`best_events` with
``claimed`` aims at the delta bound, :func:`pool_pair` pairs a forward and a reverse event, and
:func:`choose` keeps the best distinct candidates. Selection data only: soundness never
depends on it, every kept event is estimated on fresh samples.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from ldp_audit.audit.statistics import ScoreStatistic, sorted_unique
from ldp_audit.stats import (
    binomial_tail_pvalue,
    clopper_pearson_lower,
    clopper_pearson_upper,
    log_ratio_bound,
    poisson_log_ratio_lower,
)

#: candidate thresholds per statistic.
_MAX_THRESHOLDS = 128
#: one-sided level of the shrunken selection rates (penalises noisy tail events).
_SHRINK = 0.05
#: candidate shares of an event's error probability spent on the numerator's lower bound
#: (the rest bounds the denominator); chosen per event at selection, from selection data only.
SHARES = (0.5, 0.25, 0.1)
#: the deltas of the audited privacy profile (plus the claimed delta).
PROFILE_DELTAS = (0.0, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 0.05, 0.1)
#: extreme distinct values always tried as thresholds (tail events at high epsilon).
_TAIL_THRESHOLDS = 24


@dataclass
class Candidate:
    pair: int
    stat: ScoreStatistic
    op: str  # "gt": s > t, "le": s <= t
    t: float
    x_is_numerator: bool
    predicted: float
    sel_counts: tuple[int, int]
    share: float = 0.5
    #: the reverse-direction event pooled with this one (see ``pool_pair``); None: a single event
    partner: Candidate | None = None

    def indicator(self, s: np.ndarray) -> np.ndarray:
        return s > self.t if self.op == "gt" else s <= self.t

    def oriented(self, under_x: Any, under_x2: Any) -> tuple[Any, Any]:
        """(the numerator input's, the denominator input's) of a per-input pair."""
        return (under_x, under_x2) if self.x_is_numerator else (under_x2, under_x)

    def key(self) -> tuple[int, int, str, float, bool]:
        return (self.pair, id(self.stat), self.op, self.t, self.x_is_numerator)


def _thresholds(s1: np.ndarray, s2: np.ndarray) -> np.ndarray | None:
    pooled = np.concatenate([s1, s2])
    uniq = sorted_unique(pooled)
    if uniq.size <= 1:
        return None
    if uniq.size <= _MAX_THRESHOLDS + 4 * _TAIL_THRESHOLDS:
        return uniq[:-1]
    qs = np.linspace(0.0, 1.0, _MAX_THRESHOLDS + 2)[1:-1]
    # the tails on a log scale (1/n .. 1/128 from either end): the rare events that decide
    # high epsilon and small delta fall between the linear grid's last point and the extremes
    tail = np.geomspace(2.0 / pooled.size, 1.0 / (_MAX_THRESHOLDS + 1), _TAIL_THRESHOLDS)
    qs = np.concatenate([qs, tail, 1.0 - tail])
    ts = np.quantile(pooled, np.clip(qs, 0.0, 1.0), method="inverted_cdf")
    # the extreme distinct values: the events where one input is rare (high epsilon)
    ts = np.unique(np.concatenate([ts, uniq[:_TAIL_THRESHOLDS], uniq[-_TAIL_THRESHOLDS - 1 :]]))
    ts = ts[ts < uniq[-1]]
    return ts if ts.size else None


class _ThresholdCounts(NamedTuple):
    """One statistic's selection values under the two inputs, sorted, its candidate thresholds
    and, per threshold, the four events' counts: ``(op, x is the numerator, numerator count,
    denominator count, numerator n, denominator n)``. Computed once per statistic and shared by
    :func:`best_events` (every delta of the verdict and the profile) and :func:`probe_event`."""

    s1: np.ndarray
    s2: np.ndarray
    ts: np.ndarray
    combos: tuple[tuple[str, bool, np.ndarray, np.ndarray, int, int], ...]


def threshold_counts(s1: np.ndarray, s2: np.ndarray) -> _ThresholdCounts | None:
    """:class:`_ThresholdCounts` of the values ``s1`` (under x) and ``s2`` (under x2); None when
    they take one value only."""
    s1 = np.sort(s1)
    s2 = np.sort(s2)
    ts = _thresholds(s1, s2)
    if ts is None:
        return None
    n1, n2 = len(s1), len(s2)
    g1 = n1 - np.searchsorted(s1, ts, side="right")
    g2 = n2 - np.searchsorted(s2, ts, side="right")
    l1, l2 = n1 - g1, n2 - g2
    combos = (
        ("gt", True, g1, g2, n1, n2),
        ("gt", False, g2, g1, n2, n1),
        ("le", True, l1, l2, n1, n2),
        ("le", False, l2, l1, n2, n1),
    )
    return _ThresholdCounts(s1, s2, ts, combos)


#: selection only: the denominator rate of a threshold event beyond the ``_TAIL_FIT``-th most
#: extreme selection value is read from an exponential tail fitted to those values (peaks over
#: threshold), not from the few raw counts there (0 for the events that decide high epsilon).
#: 0 turns it off. Soundness does not depend on it: events are still estimated on fresh samples.
_TAIL_FIT = 200
#: the level of the chi^2 quantile that bounds a fitted tail's scale (:func:`_tail_chi2`).
_TAIL_LEVEL = 1e-3


@functools.cache
def _tail_chi2(m: int) -> float:
    from scipy.special import gammaincinv

    return 2.0 * float(gammaincinv(float(m), _TAIL_LEVEL))


def _tail_rates(srt: np.ndarray, ts: np.ndarray, upper: bool, m: int) -> np.ndarray | None:
    """Exponential-tail estimate of ``P(s > t)`` (``upper``) or ``P(s <= t)`` at thresholds
    ``ts`` beyond the m-th most extreme of the sorted values ``srt`` (NaN elsewhere); None when
    the tail is not continuous (fewer than m distinct values there) or too short."""
    n = srt.size
    if m < 20 or n < 4 * m:
        return None
    tail = srt[-m:] if upper else srt[:m]
    u = float(srt[-m - 1] if upper else srt[m])
    with np.errstate(invalid="ignore"):  # inf - inf: NaN, refused below
        excess = (tail - u) if upper else (u - tail)
    if not np.all(np.isfinite(excess)) or np.unique(tail).size < m:
        return None
    beta = float(np.mean(excess))
    if not beta > 0:
        return None
    # an upper confidence bound on the scale (2 m beta_hat / beta ~ chi^2_{2m} for an
    # exponential tail): a heavier fitted tail, so far-tail events are not chosen on an
    # underestimated denominator (a ratio e^0.1 is otherwise faked by the scale's noise)
    beta *= 2.0 * m / _tail_chi2(m)
    dist = (ts - u) if upper else (u - ts)
    # anchored at the shrunk rate of the m tail values (as the raw counts are), so that the
    # model does not look better than the counts where the two meet
    anchor = float(clopper_pearson_upper(np.array([float(m)]), float(n), _SHRINK)[0])
    with np.errstate(all="ignore"):
        est = anchor * np.exp(-dist / beta)
    return np.where(dist > 0, est, np.nan)


#: selection only, delta > 0: the denominator rate beyond the ``_TAIL_FIT``-th most extreme
#: value is read from a normal distribution fitted to the input's selection values, when the
#: fit predicts the counts beyond the 200th and the 50th most extreme values (within 3 Poisson
#: standard deviations): the optimal event of a Gaussian at small delta has fewer than one
#: denominator output among the selection samples. False turns it off.
_NORMAL_TAIL = True


def _normal_tail_rates(srt: np.ndarray, ts: np.ndarray, upper: bool, m: int) -> np.ndarray | None:
    """Normal-model estimate of ``P(s > t)`` (``upper``) or ``P(s <= t)`` at thresholds ``ts``
    beyond the m-th most extreme of the sorted values ``srt`` (NaN elsewhere), anchored at the
    shrunk rate of the m tail values; None when the values do not look normal in that tail (the
    model's counts beyond the m-th and the (m/4)-th most extreme values are off by more than 3
    Poisson standard deviations) or the tail is too short."""
    from scipy.stats import norm

    n = srt.size
    if m < 20 or n < 4 * m or not np.all(np.isfinite(srt)):
        return None
    mu, sd = float(np.mean(srt)), float(np.std(srt))
    if not sd > 0:
        return None
    sign = 1.0 if upper else -1.0
    for k in (m, m // 4):
        u = float(srt[-k - 1] if upper else srt[k])
        want = n * float(norm.sf(sign * (u - mu) / sd))
        if abs(want - k) > 3.0 * math.sqrt(k):
            return None
    u = float(srt[-m - 1] if upper else srt[m])
    anchor = float(clopper_pearson_upper(np.array([float(m)]), float(n), _SHRINK)[0])
    base = float(norm.logsf(sign * (u - mu) / sd))
    dist = (ts - u) if upper else (u - ts)
    with np.errstate(all="ignore"):
        est = anchor * np.exp(norm.logsf(sign * (ts - mu) / sd) - base)
    return np.where(dist > 0, est, np.nan)


def _tail(model: Any, tc: _ThresholdCounts, x_num: bool, op: str, rates: np.ndarray) -> np.ndarray:
    """``rates`` (the denominator's) read from the tail ``model`` (:func:`_tail_rates` or
    :func:`_normal_tail_rates`) of the denominator input's selection values, where it applies."""
    fit = model(tc.s2 if x_num else tc.s1, tc.ts, op == "gt", min(_TAIL_FIT, len(tc.s1) // 10))
    return rates if fit is None else np.where(np.isnan(fit), rates, fit)


def _at(
    pair: int,
    stat: ScoreStatistic,
    tc: _ThresholdCounts,
    combo: tuple,
    i: int,
    pred: Any,
    share: float = 0.5,
) -> Candidate:
    """The candidate of threshold ``i`` of one of ``tc.combos``, with the predicted bound
    ``pred`` and the error split ``share``."""
    op, x_num, c_num, c_den = combo[:4]
    counts = (int(c_num[i]), int(c_den[i]))
    return Candidate(pair, stat, op, float(tc.ts[i]), x_num, float(pred), counts, share)


def best_events(
    stat: ScoreStatistic,
    tc: _ThresholdCounts | None,
    pair: int,
    n_est: int,
    alpha_event: float,
    deltas: Sequence[float],
    direction: bool | None = None,
    poisson: bool = False,
    claimed: float | None = None,
) -> list[Candidate | None]:
    """For each delta: the best threshold event ``{s > t}`` / ``{s <= t}``, direction and
    error split for one statistic (its selection counts ``tc``, :func:`threshold_counts`),
    judged by the bound it is expected to give on ``n_est`` fresh samples (selection counts
    shrunk to one-sided ``_SHRINK`` Clopper-Pearson bounds so that noisy tail events, whose
    selection ratio is inflated by the maximum over thresholds, are not over-trusted).
    ``direction``: only events with x (True) or x2 (False) the numerator. ``poisson``: pure-DP
    events (delta = 0) are judged by the Poisson conditional test
    (:func:`ldp_audit.stats.epsilon_lower_bound_from_poisson_counts`; no error split).
    ``claimed``: instead, the event with the largest expected lower bound on delta at the
    claimed epsilon, ``CP_lower(p1) - e^eps CP_upper(p2)``, when it is positive (the
    ``delta_event`` option; ``predicted`` is then that delta, comparable only among these)."""
    if tc is None:
        return [None] * len(deltas)
    n = len(tc.s1)
    c = math.exp(min(claimed, 700.0)) if claimed is not None else 0.0
    best: list[Candidate | None] = [None] * len(deltas)
    for combo in tc.combos:
        op, x_num, c_num, c_den = combo[:4]
        if direction is not None and x_num != direction:
            continue
        # the input cells' events are fixed by the inputs, not picked among 100 thresholds:
        # shrunk less (a 5% bound shrinks a ratio of 82 to 50 outputs of 5,000 to 1.08)
        own = stat.own_events(tc.ts)
        p_num, p_den = (
            np.where(
                own,
                bound(c.astype(np.float64), float(n), 0.25),
                bound(c.astype(np.float64), float(n), _SHRINK),
            )
            for bound, c in ((clopper_pearson_lower, c_num), (clopper_pearson_upper, c_den))
        )
        # and where even that reads no ratio, their point estimates: see _own_floor
        pt = (c_num / n, c_den / n) if own.any() and claimed is None else None
        # pure DP (delta = 0) only: the tail model of the denominator (see _TAIL_FIT)
        p_den0 = _tail(_tail_rates, tc, x_num, op, p_den) if 0.0 in deltas else p_den
        if _NORMAL_TAIL and any(d > 0 for d in deltas):
            p_den = _tail(_normal_tail_rates, tc, x_num, op, p_den)
        for share in SHARES:
            lo = clopper_pearson_lower(p_num * n_est, float(n_est), alpha_event * share)
            hi = clopper_pearson_upper(p_den * n_est, float(n_est), alpha_event * (1.0 - share))
            hi0 = clopper_pearson_upper(p_den0 * n_est, float(n_est), alpha_event * (1.0 - share))
            for j, delta in enumerate(deltas):
                if claimed is not None:
                    pred = lo - c * hi
                elif poisson and delta == 0.0:
                    if share != SHARES[0]:
                        continue  # one joint test: no split to choose
                    pred = poisson_log_ratio_lower(p_num * n_est, p_den0 * n_est, alpha_event)
                else:
                    pred = log_ratio_bound(lo - delta, hi0 if delta == 0.0 else hi)
                if pt is not None:
                    pred = _own_floor(pred, own, pt, n_est, alpha_event, share, delta)
                i = int(np.argmax(pred))
                if claimed is not None and not pred[i] > 0:
                    continue
                if best[j] is None or pred[i] > best[j].predicted:  # type: ignore[union-attr]
                    best[j] = _at(pair, stat, tc, combo, i, pred[i], share)
    return best


def _own_floor(
    pred: np.ndarray,
    own: np.ndarray,
    pt: tuple[np.ndarray, np.ndarray],
    n_est: int,
    alpha_event: float,
    share: float,
    delta: float,
) -> np.ndarray:
    """``pred`` raised to just below 0 (ordered by the bound ``b`` predicted from the point
    estimates ``pt`` of their rates: ``-1e-6 / (1 + b)``) at the input cells' events (``own``)
    where ``b`` is positive. Where every event is read as showing nothing (k-RR at epsilon 0.25
    over 200 values: the pair's cells at about 64 and 50 of 10^4 selection outputs), the pair's
    own event is then chosen before a bulk event of ratio ~1 (whose bound is ~0 whatever
    happens), never before an event read as showing something, nor as a second event."""
    lo = clopper_pearson_lower(pt[0] * n_est, float(n_est), alpha_event * share)
    hi = clopper_pearson_upper(pt[1] * n_est, float(n_est), alpha_event * (1.0 - share))
    b = log_ratio_bound(lo - delta, hi)
    with np.errstate(invalid="ignore"):
        return np.where(own & (b > 0), np.maximum(pred, -1e-6 / (1.0 + b)), pred)


#: level of the selection-sample screen that adds a *probe* event (see :func:`probe_event`).
_PROBE_LEVEL = 0.01


def probe_event(
    stat: ScoreStatistic,
    tc: _ThresholdCounts | None,
    pair: int,
    n_est: int,
    alpha_event: float,
    claimed: float,
    delta: float,
) -> tuple[Candidate, float] | None:
    """The threshold event whose selection counts most clearly contradict the claim, with its
    screening p-value, or None when no event's counts do at all.

    The main rule (:func:`best_events`) shrinks a zero denominator count to its 5% upper
    bound, which at the selection sample size is far above what the estimation sample can
    show: an event that a rare leak puts only under one input (a mechanism that, once in a
    thousand, releases something the other input never gives) is predicted a weak bound there
    and never chosen. The screen asks of each event the selection counts' own question: given
    ``s = k_num + k_den`` outputs in the event, is ``k_num`` too large for a ratio of at most
    ``e^claimed`` (``P(Binomial(s, q) >= k_num)``, ``q = c n1 / (c n1 + n2)``; with delta > 0
    the numerator count is first reduced by ``n delta``)? Among events with a p-value below
    :data:`_PROBE_LEVEL`, the one with the best bound predicted from median (not 5%)
    selection rates is returned. Selection data only: soundness does not depend on the screen
    (a probe is estimated on fresh samples and counted in the Bonferroni correction).
    """
    if tc is None:
        return None
    c = math.exp(min(claimed, 700.0))
    best: tuple[Candidate, float] | None = None
    for combo in tc.combos:
        _, _, c_num, c_den, n_num, n_den = combo
        k = np.maximum(c_num.astype(np.float64) - n_num * delta, 0.0)
        j = c_den.astype(np.float64)
        pval = binomial_tail_pvalue(k, j, c * n_num / (c * n_num + n_den))
        ok = pval < _PROBE_LEVEL
        if not ok.any():
            continue
        p_num = clopper_pearson_lower(c_num.astype(np.float64), float(n_num), 0.5)
        p_den = clopper_pearson_upper(j, float(n_den), 0.5)
        lo = clopper_pearson_lower(p_num * n_est, float(n_est), alpha_event * 0.5)
        hi = clopper_pearson_upper(p_den * n_est, float(n_est), alpha_event * 0.5)
        pred = np.where(ok, log_ratio_bound(lo - delta, hi), -np.inf)
        i = int(np.argmax(pred))
        if not np.isfinite(pred[i]) or (best is not None and pred[i] <= best[0].predicted):
            continue
        best = (_at(pair, stat, tc, combo, i, pred[i]), float(pval[i]))
    return best


def pool_pair(
    fwd_half: tuple[Candidate, np.ndarray, np.ndarray],
    rev_half: tuple[Candidate, np.ndarray, np.ndarray],
    n_est: int,
    alpha_event: float,
    delta: float,
    poisson: bool = False,
) -> Candidate | None:
    """The pooled candidate of a forward (x numerator) and a reverse event of one pair, each
    with the held-out selection values (under x, under x2) of its statistic: its bound is
    expected from counts on those held-out values (not the ones that chose the thresholds, so
    the maximum over thresholds does not inflate it), pooled over both events (shrunk as in
    ``best_events``), predicted at ``2 n_est`` trials, best error split."""
    fwd, f1, f2 = fwd_half
    rev, r1, r2 = rev_half
    # forward: x the numerator (f1 under x); reverse: x2 the numerator (r2 under x2)
    c_num = float(np.count_nonzero(fwd.indicator(f1)) + np.count_nonzero(rev.indicator(r2)))
    c_den = float(np.count_nonzero(fwd.indicator(f2)) + np.count_nonzero(rev.indicator(r1)))
    n2 = float(len(f1) + len(r1))
    # two input cells' events (fixed by the pair): read at their level, as in best_events
    lv = 0.25 if all(h.stat.own_events(np.array([h.t]))[0] for h in (fwd, rev)) else _SHRINK
    p_num = float(clopper_pearson_lower(c_num, n2, lv))
    p_den = float(clopper_pearson_upper(c_den, n2, lv))
    nt = 2.0 * n_est
    best: Candidate | None = None
    for share in SHARES:
        if poisson:  # (delta = 0 only) one joint test of the pooled Poisson counts
            if share != SHARES[0]:
                continue
            pred = float(poisson_log_ratio_lower(p_num * nt, p_den * nt, alpha_event))
            if not math.isfinite(pred):
                continue
        else:
            lo = float(clopper_pearson_lower(p_num * nt, nt, alpha_event * share)) - delta
            hi = float(clopper_pearson_upper(p_den * nt, nt, alpha_event * (1.0 - share)))
            if lo <= 0 or hi <= 0:
                continue
            pred = math.log(lo) - math.log(hi)
        if best is None or pred > best.predicted:
            counts = (int(c_num), int(c_den))
            best = Candidate(fwd.pair, fwd.stat, fwd.op, fwd.t, True, pred, counts, share, rev)
    return best


def choose(candidates: list[Candidate], k: int) -> list[Candidate]:
    """The k candidates with the best predicted bound, skipping the same event found twice and,
    after the first, any predicted to show nothing (a bound <= 0 would only split the error)."""
    out: list[Candidate] = []
    seen: set[tuple[int, tuple[int, int], bool]] = set()
    for c in sorted(candidates, key=lambda c: c.predicted, reverse=True):
        if out and not c.predicted > 0:
            break
        key = (c.pair, c.sel_counts, c.partner is not None)  # one event, whichever statistic
        if key in seen:
            continue
        seen.add(key)
        out.append(c)
        if len(out) == k:
            break
    return out
