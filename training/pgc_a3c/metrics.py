"""Learning-efficiency metrics of PGC-A3C (Ono & Takahashi 2020, section 4).

Pure, side-effect-free functions from per-submission scores to the paper's measures:

- ``moving_average``: the forward window mean mu_n of eq. (25);
- ``first_success_time``: FST of eq. (26), ``inf`` if the target is never met;
- ``success_ratio``: the success-ratio curve of eq. (27) (Figure 3);
- ``success_auc`` / ``relative_auc``: the area under that curve and its ratio to the
  non-private curve's area (Table 3);
- ``median_ci`` / ``ratio_ci`` / ``relative_auc_ci``: bootstrap and Wilson confidence intervals
  reported beside Tables 1-3.

Indexing follows the paper: submissions are numbered n = 1..N (1-based). Arrays are 0-based, so
``zeta[..., i]`` is zeta_{i+1} and ``mu[..., i]`` is mu_{i+1}; FST values are 1-based submission
numbers.

Our resolution of what the paper leaves open (documented in README.md, "Reproducing PGC-A3C"):

- mu_n needs zeta_n..zeta_{n+m-1}; where that window runs past the last submission (or into a NaN,
  i.e. a submission that was never made), mu_n is undefined (NaN) and never counts as a success.
- The area under the success curve is the integral of the right-continuous step function
  n -> success_ratio(n) over [0, horizon], i.e. mean_k max(0, horizon - FST_k).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ldp_audit import stats
from ldp_audit.errors import InvalidParameterError
from ldp_audit.rundir import json_number
from ldp_audit.rundir.files import json_real
from ldp_audit.validation import check_int, check_positive, check_probability, check_rng

__all__ = [
    "TARGET_SCORE",
    "WINDOW",
    "moving_average",
    "final_mean_mu",
    "first_success_time",
    "success_ratio",
    "success_auc",
    "relative_auc",
    "median_ci",
    "ratio_ci",
    "relative_auc_ci",
    "summarize",
    "fst_from_json",
    "fst_to_json",
]

#: Theta, the target score of eq. (26).
TARGET_SCORE = 195.0
#: m, the forward window of eq. (25).
WINDOW = 10


def _check_scores(zeta: Any) -> np.ndarray:
    arr = np.asarray(zeta)
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)
    ):
        raise InvalidParameterError(f"zeta must be a real numeric array, got dtype {arr.dtype}")
    if arr.ndim not in (1, 2) or arr.shape[-1] == 0:
        raise InvalidParameterError(
            f"zeta must have shape (N,) or (trials, N) with N >= 1, got shape {arr.shape}"
        )
    arr = arr.astype(np.float64, copy=False)
    if np.isinf(arr).any():
        raise InvalidParameterError("zeta must hold finite scores or NaN (not reached), got inf")
    return arr


def _check_fst(fst: Any) -> np.ndarray:
    arr = np.asarray(fst, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise InvalidParameterError(
            f"fst must have shape (trials,) with trials >= 1, got {arr.shape}"
        )
    bad = np.isnan(arr) | (arr < 1)
    if bad.any():
        raise InvalidParameterError(
            f"fst must hold 1-based submission numbers >= 1 or inf, got {arr[bad][0]!r} "
            f"at index {int(np.argmax(bad))}"
        )
    return arr


def moving_average(zeta: Any, window: int = WINDOW) -> np.ndarray:
    """Forward window mean of the scores, eq. (25).

    mu_n = (1/m) * sum_{n'=n}^{n+m-1} zeta_{n'}.

    Args:
        zeta: scores, shape (N,) or (trials, N); ``zeta[..., i]`` is zeta_{i+1}. NaN marks a
            submission that was never made (a trial stopped early).
        window: m (the paper uses 10).

    Returns:
        float64 array of the same shape as ``zeta``; ``mu[..., i]`` is mu_{i+1}. Entries whose
        window runs past the end or contains a NaN are NaN.
    """
    z = _check_scores(zeta)
    m = check_int(window, "window", minimum=1)
    mu = np.full(z.shape, np.nan)
    n = z.shape[-1]
    if n >= m:
        # The window mean of eq. (25), summed in a fixed order so that ten scores of 195 give
        # exactly 195.0 (no cumulative-sum rounding near the threshold).
        view = np.lib.stride_tricks.sliding_window_view(z, m, axis=-1)
        mu[..., : n - m + 1] = view.sum(axis=-1) / m
    return mu


def final_mean_mu(zeta: Any) -> float | None:
    """Mean over trials of each trial's last defined mu_n (eq. 25); None if none is defined."""
    last = [
        row[ok[-1]] for row in moving_average(zeta) if (ok := np.flatnonzero(~np.isnan(row))).size
    ]
    return float(np.mean(last)) if last else None


def first_success_time(
    zeta: Any, threshold: float = TARGET_SCORE, window: int = WINDOW
) -> np.ndarray | float:
    """First success time, eq. (26): FST = min{n : mu_n >= Theta}; ``inf`` if never.

    Args:
        zeta: scores, shape (N,) or (trials, N) (see ``moving_average``).
        threshold: Theta (the paper uses 195).
        window: m of eq. (25).

    Returns:
        The 1-based submission number of the first success as a float (``inf`` if none); an
        array of shape (trials,) for 2-D input, a float for 1-D input.
    """
    mu = moving_average(zeta, window)
    thr = float(threshold)
    if not math.isfinite(thr):
        raise InvalidParameterError(f"threshold must be finite, got {threshold!r}")
    hit = mu >= thr  # NaN compares False: an undefined mu_n is never a success
    first = np.argmax(hit, axis=-1).astype(np.float64) + 1.0  # 1-based n
    fst = np.where(hit.any(axis=-1), first, np.inf)
    return float(fst) if fst.ndim == 0 else fst


def success_ratio(fst: Any, n: Any) -> np.ndarray | float:
    """Success ratio, eq. (27): the fraction of trials with FST_k <= n.

    Args:
        fst: first success times, shape (trials,), 1-based, ``inf`` for never.
        n: submission count(s) at which to evaluate the curve (scalar or array).

    Returns:
        float or array shaped like ``n``.
    """
    f = np.sort(_check_fst(fst))
    q = np.asarray(n, dtype=np.float64)
    ratio = np.searchsorted(f, q, side="right") / f.size
    return float(ratio) if ratio.ndim == 0 else ratio


def success_auc(fst: Any, horizon: float) -> float:
    """Area under the success-ratio curve on [0, horizon] (Figure 3, Table 3).

    The curve is the right-continuous step function n -> success_ratio(n), so its area is
    mean_k max(0, horizon - FST_k) (a trial succeeding at FST_k contributes the rest of the run).

    Args:
        fst: first success times, shape (trials,).
        horizon: the end of the x-axis (the paper: 90,000 submissions).
    """
    f = _check_fst(fst)
    h = check_positive(horizon, "horizon")
    return float(np.mean(np.clip(h - f, 0.0, None)))


def relative_auc(fst: Any, reference_fst: Any, horizon: float) -> float:
    """Relative AUC (Table 3): area of ``fst``'s success curve over the reference's area.

    Args:
        fst: first success times of the setting, shape (trials,).
        reference_fst: first success times of the non-private (epsilon = inf) baseline.
        horizon: the common end of the x-axis.

    Returns:
        The ratio; NaN when the reference never succeeded within the horizon (area 0).
    """
    ref = success_auc(reference_fst, horizon)
    own = success_auc(fst, horizon)
    return own / ref if ref > 0 else float("nan")


def median_ci(
    values: Any,
    *,
    rng: np.random.Generator,
    confidence: float = 0.95,
    n_resamples: int = 10_000,
) -> tuple[float, float]:
    """Percentile-bootstrap confidence interval for the median (Table 1's median FST).

    ``inf`` values (trials that never succeeded) are allowed: the percentile is taken without
    interpolation, so an interval endpoint may be ``inf``.

    Args:
        values: the sample, shape (trials,).
        rng: the resampling stream.
        confidence: two-sided level.
        n_resamples: bootstrap resamples.
    """
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1:
        raise InvalidParameterError(f"values must be a 1-D array, got shape {x.shape}")
    c = check_probability(confidence, "confidence")
    b = check_int(n_resamples, "n_resamples", minimum=100)
    # ldp_audit.stats resamples and takes the percentile without interpolation (inf-safe).
    _, lo, hi = stats.bootstrap_median_ci(x, confidence=c, n_boot=b, rng=rng)
    return lo, hi


def ratio_ci(successes: int, trials: int, *, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a success ratio (Table 2).

    Args:
        successes: number of trials with FST <= horizon.
        trials: K.
        confidence: two-sided level.
    """
    check_int(trials, "trials", minimum=1)
    check_int(successes, "successes", minimum=0, maximum=trials)
    c = check_probability(confidence, "confidence")
    lo, hi = stats.wilson_interval(int(successes), int(trials), 1.0 - c)
    return float(lo), float(hi)


def relative_auc_ci(
    fst: Any,
    reference_fst: Any,
    horizon: float,
    *,
    rng: np.random.Generator,
    confidence: float = 0.95,
    n_resamples: int = 10_000,
) -> tuple[float, float]:
    """Percentile-bootstrap interval for the relative AUC (Table 3).

    The setting's trials and the reference's trials are resampled independently.
    """
    f = _check_fst(fst)
    r = _check_fst(reference_fst)
    h = check_positive(horizon, "horizon")
    check_rng(rng)
    c = check_probability(confidence, "confidence")
    b = check_int(n_resamples, "n_resamples", minimum=100)
    own = np.clip(h - f, 0.0, None)[rng.integers(0, f.size, size=(b, f.size))].mean(axis=1)
    ref = np.clip(h - r, 0.0, None)[rng.integers(0, r.size, size=(b, r.size))].mean(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(ref > 0, own / ref, np.nan)
    rel = rel[~np.isnan(rel)]
    if rel.size == 0:
        return float("nan"), float("nan")
    return stats.percentile_interval(rel, c)


def summarize(
    zeta: Any,
    *,
    horizon: float | None = None,
    reference_fst: Any = None,
    rng: np.random.Generator,
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    threshold: float = TARGET_SCORE,
    window: int = WINDOW,
) -> dict[str, Any]:
    """All of one setting's Table 1-3 measures, JSON-able.

    Args:
        zeta: scores, shape (trials, N).
        horizon: x-axis end for the success ratio and AUC; default N (``zeta.shape[1]``).
        reference_fst: FSTs of the non-private baseline; without it the relative AUC is omitted.
        rng: stream for the bootstrap intervals.
        confidence: level of every interval.
        n_resamples: bootstrap resamples.
        threshold: Theta of eq. (26).
        window: m of eq. (25).

    Returns:
        dict with ``trials``, ``horizon``, ``fst`` (list, ``"inf"`` for never), ``median_fst`` and
        ``median_fst_ci``, ``success_ratio`` and ``success_ratio_ci``, ``auc`` and, with a
        reference, ``relative_auc`` and ``relative_auc_ci``. Strict JSON, with the toolkit's
        convention (``ldp_audit.rundir.to_jsonable``): an infinite value (an FST never reached,
        an interval endpoint at infinity) is the string ``"inf"``; ``None`` (null) is only an
        undefined value (a relative AUC without a succeeding reference). Read FSTs back with
        :func:`fst_from_json`.
    """
    z = _check_scores(zeta)
    if z.ndim != 2:
        raise InvalidParameterError(f"zeta must have shape (trials, N), got shape {z.shape}")
    h = float(z.shape[1]) if horizon is None else check_positive(horizon, "horizon")
    fst = first_success_time(z, threshold, window)
    med_rng, auc_rng = rng.spawn(2)
    k = int(fst.size)
    succ = int(np.sum(fst <= h))
    out: dict[str, Any] = {
        "trials": k,
        "horizon": h,
        "fst": [json_number(v) for v in fst],
        "median_fst": json_number(float(np.median(fst))),
        "median_fst_ci": [
            json_number(v)
            for v in median_ci(fst, rng=med_rng, confidence=confidence, n_resamples=n_resamples)
        ],
        "successes": succ,
        "success_ratio": succ / k,
        "success_ratio_ci": list(ratio_ci(succ, k, confidence=confidence)),
        "auc": success_auc(fst, h),
        "confidence": confidence,
    }
    if reference_fst is not None:
        ref = _check_fst(reference_fst)
        out["relative_auc"] = json_number(relative_auc(fst, ref, h))
        out["relative_auc_ci"] = [
            json_number(v)
            for v in relative_auc_ci(
                fst, ref, h, rng=auc_rng, confidence=confidence, n_resamples=n_resamples
            )
        ]
    return out


def fst_to_json(v: Any) -> float | str:
    """An FST (eq. 26) for JSON: a finite submission number, or ``"inf"`` (never reached)."""
    return json_number(fst_from_json(float(v)))


def fst_from_json(v: Any) -> float:
    """An FST read from JSON: a number or ``"inf"`` (never reached). Returns a float.

    Raises:
        InvalidParameterError: anything else (a bool, another string, NaN, a number < 1).
    """
    f = json_real(v)
    if f is None or not f >= 1:  # NaN is not >= 1
        raise InvalidParameterError(f"fst must be a submission number >= 1 or 'inf', got {v!r}")
    return f
