"""The anytime-valid sequential audit: fresh fixed-sample audits on a doubling schedule."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ldp_audit.audit.mechanism import check_mechanism
from ldp_audit.audit.resolution import estimation_samples, max_refutable_epsilon
from ldp_audit.audit.results import AuditResult, SequentialInfo, at_delta, with_inconclusive_texts
from ldp_audit.validation import check_confidence, check_int, check_real_in

__all__ = ["sequential_alpha", "sequential_plan", "sequential_schedule"]

#: the first stage of a sequential audit spends ``samples // _SEQ_FIRST`` (at least
#: ``_SEQ_MIN``) per input; each later stage doubles it (7 stages spend ~ the budget).
_SEQ_FIRST = 127
_SEQ_MIN = 2000


def sequential_schedule(samples: int) -> list[int]:
    """The stage sizes (outputs per input) of a sequential audit with budget ``samples``:
    doubling from ``max(_SEQ_MIN, samples // 127)``; what is left of the budget goes to the last
    stage (a budget below 2 * _SEQ_MIN is one stage)."""
    samples = check_int(samples, "samples", minimum=1000)
    first = max(_SEQ_MIN, samples // _SEQ_FIRST)
    out: list[int] = []
    left, size = samples, first
    while left >= size:
        out.append(size)
        left -= size
        size *= 2
    if not out:
        return [samples]
    out[-1] += left
    return out


def sequential_alpha(alpha: float, k: int) -> float:
    """The error level of stage k (1-based) of a sequential audit: ``alpha 6 / (pi^2 k^2)``
    (the levels sum to at most alpha over any number of stages)."""
    return alpha * 6.0 / (math.pi**2 * k * k)


def _stage_levels(alpha: float, stages: int) -> list[float]:
    """The error levels of a plan of ``stages`` stages: ``sequential_alpha(alpha, k)`` for every
    stage but the last, which gets what is left of alpha (alpha itself for one stage); they sum
    to alpha."""
    head = [sequential_alpha(alpha, k) for k in range(1, stages)]
    return [*head, alpha - sum(head)]


def sequential_plan(
    samples: int,
    claimed: float,
    confidence: float = 0.95,
    selection_fraction: float = 0.1,
    pool: bool = False,
    delta: float = 0.0,
) -> list[tuple[int, float]]:
    """The stages of a sequential audit of a claim ``claimed``: ``(samples per input, error
    level)`` per stage, fixed before any sample is drawn (from the budget, the claim and the
    level only, so any stopping rule stays valid); ``delta``: the claimed delta, which lowers
    every stage's ceiling (:func:`max_refutable_epsilon`).

    Start from :func:`sequential_schedule` with the levels ``alpha 6 / (pi^2 k^2)`` (the last
    stage gets the rest of alpha, so the levels sum to alpha). A stage whose ceiling
    (:func:`max_refutable_epsilon` at its estimation samples and level) is at or below the claim
    could never refute it: while the first stage cannot, it is merged into the second; while
    the last cannot, it is merged into the one before (each merge also raises every remaining
    stage's level). So every stage of a multi-stage plan can refute the claim, and a claim that
    only the whole budget can refute gets one stage with the whole budget at level alpha: the
    fixed-sample audit itself. If even that cannot refute it (the claim is at or above the
    fixed-sample ceiling), the plan is that one stage; :func:`audit` then runs only the
    schedule's first stage and says the verdict is vacuous.
    """
    claimed = check_real_in(claimed, "claimed", lo=0.0, lo_open=False)
    alpha = 1.0 - check_confidence(confidence)
    sizes = sequential_schedule(samples)

    def can_refute(n: int, level: float) -> bool:
        n_est = estimation_samples(n, selection_fraction)
        return claimed < max_refutable_epsilon(n_est, 1.0 - level, pool, None, delta)

    while len(sizes) > 1:
        levels = _stage_levels(alpha, len(sizes))
        if not can_refute(sizes[0], levels[0]):
            sizes = [sizes[0] + sizes[1], *sizes[2:]]
        elif not can_refute(sizes[-1], levels[-1]):
            sizes = [*sizes[:-2], sizes[-2] + sizes[-1]]
        else:
            break
    return list(zip(sizes, _stage_levels(alpha, len(sizes)), strict=True))


def audit_sequential(
    mechanism: Any,
    pairs: Sequence[tuple[Any, Any]] | None,
    *,
    samples: int,
    confidence: float,
    rng: np.random.Generator,
    start: float,
    stage: Callable[..., AuditResult],
    **kwargs: Any,
) -> AuditResult:
    """Sequential audit: independent fixed-sample audits on the stages of
    :func:`sequential_plan` (a doubling schedule of sample sizes, stage k at confidence
    ``1 - alpha_k``, ``alpha_k = alpha 6 / (pi^2 k^2)``, the last stage the rest of alpha;
    stages that could not refute the claim merged away), stopping at the first stage that
    refutes the claim, or when the budget is spent. A claim that not even the whole budget can
    refute runs one small stage and says its verdict is vacuous; a result whose claim is above
    what its last stage resolves is marked inconclusive (:attr:`AuditResult.inconclusive`).

    Soundness (anytime-valid). Stage k draws fresh outputs from its own generator, so its
    result is a fixed-sample audit of ``n_k`` samples at level ``alpha_k``: whatever the
    earlier stages saw, ``P(bound_k > true epsilon) <= alpha_k`` (and the same for its delta
    bound and profile). By the union bound, ``P(some stage's bound > true epsilon) <=
    sum_k alpha_k = alpha`` (the plan's levels sum to alpha; the plan depends on the budget,
    the claim and the level only). The event "every stage's statement
    holds" thus has probability >= 1 - alpha whatever the stopping rule (stopping is a
    function of the stages' data, and on that event every stage is right, in particular the
    one reported: the stage with the largest bound). So the reported bound, and the verdict,
    hold at ``confidence`` for any stopping time, including one chosen by the user while
    watching; the price is the smaller level (and sample size) of each stage.

    ``stage`` is the fixed-sample audit each stage runs (:func:`ldp_audit.audit.audit`, passed
    in by it, so this module does not import the one that imports it).
    """
    claimed, delta = check_mechanism(mechanism)
    pool = bool(kwargs.get("pool"))
    frac = kwargs["selection_fraction"]
    plan = sequential_plan(samples, claimed, confidence, frac, pool, delta)
    n_full = estimation_samples(plan[-1][0], frac)
    ceiling = max_refutable_epsilon(n_full, confidence, pool, None, delta)
    vacuous = len(plan) == 1 and claimed >= ceiling
    if vacuous:
        # nothing in the budget can refute the claim: one cheap stage, for its bound only
        plan = [(sequential_schedule(samples)[0], 1.0 - confidence)]
    # a one-stage plan is the fixed-sample audit itself (same generator, same samples)
    gens = [rng] if len(plan) == 1 else rng.spawn(len(plan))
    stages: list[dict[str, Any]] = []
    results: list[AuditResult] = []
    stopped = "cannot refute" if vacuous else "budget spent"
    for (n_k, a_k), g in zip(plan, gens, strict=True):
        r = stage(mechanism, pairs, samples=n_k, confidence=1.0 - a_k, rng=g, **kwargs)
        results.append(r)
        keys = ("epsilon_lower_bound", "delta_lower_bound", "violation", "seconds")
        stages.append({"samples": n_k, "confidence": 1.0 - a_k, **{k: getattr(r, k) for k in keys}})
        if r.violation:
            stopped = "refuted"
            break
    best = max(
        range(len(results)),
        key=lambda i: (results[i].violation, results[i].epsilon_lower_bound, i),
    )
    r = results[best]
    used = sum(st["samples"] for st in stages)
    info = SequentialInfo(
        stages=tuple(stages),
        stopped=stopped,
        budget=samples,
        samples_used=used,
        best_stage=best + 1,
    )
    last = results[-1]
    warn = list(r.warnings)
    if vacuous and not r.violation:
        warn.append(
            f"a claim of epsilon {claimed:.6g}{at_delta(delta)} cannot be refuted by any stage "
            f"of a budget of {samples} samples per input (even all of it in one audit has the "
            f"ceiling {ceiling:.4g}): the sequential audit stopped after one stage of "
            f"{plan[0][0]} samples; its 'no violation' is vacuous: a larger budget is needed"
        )
    out = replace(
        r,
        confidence=confidence,
        delta_confidence=None if r.delta_lower_bound is None else confidence,
        samples=used,
        selection_samples=sum(x.selection_samples for x in results),
        seconds=time.perf_counter() - start,
        warnings=tuple(warn),
        resolution_probability=last.resolution_probability,
        max_refutable_epsilon=last.max_refutable_epsilon,
        inconclusive_epsilon=last.inconclusive_epsilon,
        tightness_ceiling=last.tightness_ceiling,
        sequential=info,
        # the reported stage is chosen from the data: its statements hold at the union level
        profile=None if r.profile is None else replace(r.profile, confidence=confidence),
        tradeoff=None if r.tradeoff is None else replace(r.tradeoff, confidence=confidence),
    )
    return with_inconclusive_texts(out)
