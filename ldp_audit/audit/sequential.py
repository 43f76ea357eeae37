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
from ldp_audit.audit.results import AuditResult, SequentialInfo
from ldp_audit.validation import check_int

__all__ = ["sequential_alpha", "sequential_schedule"]

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
    """Sequential audit: independent fixed-sample audits on a doubling schedule of sample
    sizes, stage k at confidence ``1 - alpha_k``, ``alpha_k = alpha 6 / (pi^2 k^2)``, stopping
    at the first stage that refutes the claim, or when no remaining stage could (the claim is
    at least the largest remaining stage's ceiling :func:`max_refutable_epsilon`), or when the
    budget is spent.

    Soundness (anytime-valid). Stage k draws fresh outputs from its own generator, so its
    result is a fixed-sample audit of ``n_k`` samples at level ``alpha_k``: whatever the
    earlier stages saw, ``P(bound_k > true epsilon) <= alpha_k`` (and the same for its delta
    bound and profile). By the union bound, ``P(some stage's bound > true epsilon) <=
    sum_k alpha_k <= alpha sum_k 6 / (pi^2 k^2) = alpha``. The event "every stage's statement
    holds" thus has probability >= 1 - alpha whatever the stopping rule (stopping is a
    function of the stages' data, and on that event every stage is right, in particular the
    one reported: the stage with the largest bound). So the reported bound, and the verdict,
    hold at ``confidence`` for any stopping time, including one chosen by the user while
    watching; the price is the smaller level (and sample size) of each stage.

    ``stage`` is the fixed-sample audit each stage runs (:func:`ldp_audit.audit.audit`, passed
    in by it, so this module does not import the one that imports it).
    """
    alpha = 1.0 - confidence
    schedule = sequential_schedule(samples)
    gens = rng.spawn(len(schedule))
    claimed, _ = check_mechanism(mechanism)
    pool = bool(kwargs.get("pool"))
    frac = kwargs["selection_fraction"]
    stages: list[dict[str, Any]] = []
    results: list[AuditResult] = []
    stopped = "budget spent"
    for k, (n_k, g) in enumerate(zip(schedule, gens, strict=True), start=1):
        a_k = sequential_alpha(alpha, k)
        r = stage(mechanism, pairs, samples=n_k, confidence=1.0 - a_k, rng=g, **kwargs)
        results.append(r)
        stages.append(
            {
                "samples": n_k,
                "confidence": 1.0 - a_k,
                "epsilon_lower_bound": r.epsilon_lower_bound,
                "delta_lower_bound": r.delta_lower_bound,
                "violation": r.violation,
                "seconds": r.seconds,
            }
        )
        if r.violation:
            stopped = "refuted"
            break
        rest = list(enumerate(schedule[k:], start=k + 1))
        if rest and all(
            claimed
            >= max_refutable_epsilon(
                estimation_samples(n_j, frac), 1.0 - sequential_alpha(alpha, j), pool
            )
            for j, n_j in rest
        ):
            stopped = "cannot refute"
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
    warn = [w for w in r.warnings if "cannot be refuted with" not in w]
    if (
        stopped == "budget spent"
        and last.max_refutable_epsilon is not None
        and (claimed >= last.max_refutable_epsilon)
    ):
        warn.append(
            f"a claim of epsilon {claimed:.6g} cannot be refuted by the last stage's "
            f"{schedule[-1]} samples per input (its ceiling is {last.max_refutable_epsilon:.3g}): "
            "'no violation' is vacuous; a larger budget is needed"
        )
    return replace(
        r,
        confidence=confidence,
        delta_confidence=None if r.delta_lower_bound is None else confidence,
        samples=used,
        selection_samples=sum(x.selection_samples for x in results),
        seconds=time.perf_counter() - start,
        warnings=tuple(warn),
        resolution_probability=last.resolution_probability,
        max_refutable_epsilon=last.max_refutable_epsilon,
        sequential=info,
        # the reported stage is chosen from the data: its statements hold at the union level
        profile=None if r.profile is None else replace(r.profile, confidence=confidence),
        tradeoff=None if r.tradeoff is None else replace(r.tradeoff, confidence=confidence),
    )
