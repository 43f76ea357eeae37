"""The auditor's entry point, ``audit()``, as stages: check, plan, select, estimate, conclude.

1. :func:`~ldp_audit.audit.plan.check_arguments`: every argument validated (types checked,
   not coerced) before any sample is drawn; a sequential audit is handed to
   :mod:`ldp_audit.audit.sequential` here.
2. :class:`~ldp_audit.audit.plan.Plan`: the split of ``samples`` into selection (A fits
   statistics, B chooses events) and estimation, the error levels, the warnings known before
   any work.
3. :func:`~ldp_audit.audit.search.select_events`: per input pair, statistics fitted on A
   (:mod:`ldp_audit.audit.statistics`) and threshold events chosen on B
   (:mod:`ldp_audit.audit.selection`); :func:`~ldp_audit.audit.search.kept_events` keeps the
   verdicts', the profile's and the f-DP curve's events.
4. :func:`~ldp_audit.audit.estimation.estimate_audit`: the kept events counted on fresh samples;
   :func:`~ldp_audit.audit.estimation.verdict_bounds` their bounds.
5. :func:`_conclude`: the two verdicts, the profile, the f-DP curve, the delta bound and the
   warnings, in one :class:`~ldp_audit.audit.results.AuditResult`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ldp_audit.audit.estimation import (
    Counts,
    delta_lower_bound,
    estimate_audit,
    profile_lowers,
    verdict_bounds,
)
from ldp_audit.audit.mechanism import claimed_profile, mechanism_label
from ldp_audit.audit.plan import Options, Plan, as_pair_list, check_arguments
from ldp_audit.audit.resolution import (
    max_refutable_epsilon,
    one_count_epsilon,
    tightness_ceiling,
)
from ldp_audit.audit.results import (
    AuditResult,
    PrivacyProfile,
    Verdict,
    Witness,
    with_inconclusive_texts,
)
from ldp_audit.audit.search import Kept, Selection, fixed_event, kept_events, select_events
from ldp_audit.audit.sequential import audit_sequential
from ldp_audit.audit.tradeoff import claimed_gaussian_curve, tradeoff_curve

__all__ = ["audit"]


def audit(
    mechanism: Any,
    pairs: Sequence[tuple[Any, Any]] | None = None,
    *,
    samples: int = 1_000_000,
    confidence: float = 0.95,
    rng: np.random.Generator | int | None = None,
    dim: int | None = None,
    selection_fraction: float = 0.1,
    max_events: int = 2,
    float_bits: bool = True,
    profile: bool | None = None,
    pool: bool = False,
    ratio_test: str = "clopper-pearson",
    tradeoff: bool = True,
    force: bool = False,
    progress: bool = False,
    statistics: Sequence[Callable[..., Any]] | None = None,
    sequential: bool = False,
    delta_event: bool = False,
    event: tuple[Any, Any, Any] | None = None,
) -> AuditResult:
    """Audit a mechanism's epsilon claim: two sound verdicts, witnesses and a privacy profile.

    Guarantee: ``P(result.epsilon_lower_bound > true epsilon) <= 1 - confidence``, for any
    mechanism whose rows are independent given the input (Clopper-Pearson on fresh estimation
    samples, Bonferroni over the estimated events; see the module docstring). Both verdicts
    (``result.distribution`` and ``result.implementation``) hold jointly at that level. For a
    mechanism with ``delta > 0`` the bound is in the (epsilon, delta) form at that delta.

    Args:
        mechanism: anything with ``epsilon`` (the claim), optionally ``delta`` and
            ``epsilon_at(delta)`` (its claimed profile), and ``privatize(x, rng)`` mapping
            (n, d) inputs to (n, k) outputs, rows independent. Scalar, one-call-per-value
            mechanisms of other libraries go through :func:`from_scalar`.
        pairs: list of (x, x2) 1-D input arrays to compare. None: the mechanism's declared
            ``candidate_pairs(dim)`` (a mechanism without one needs explicit pairs).
        samples: outputs per input of each pair, >= 1000: ``selection_fraction`` of them
            (at most 2,000,000) select events for every pair; the rest estimate, streamed in
            chunks, drawn only for pairs a kept event uses.
        confidence: in (0, 1).
        rng: a ``numpy.random.Generator``, an int seed, or None (fresh entropy).
        dim: input dimension for ``candidate_pairs`` (default: ``mechanism.dim`` or 1).
        selection_fraction: share of ``samples`` used to choose events, in (0, 1).
        max_events: how many exact-arithmetic events are estimated on fresh samples (one
            floating-point event is added when ``float_bits`` and it promises more).
        float_bits: also give the implementation verdict, searching floating-point bit cells
            (Mironov 2012). Additive noise computed in IEEE doubles (``x + rng.laplace(...)``)
            leaks through the low bits, so with this on such implementations are (rightly)
            flagged in ``result.implementation``; ``result.distribution`` audits the same
            samples as if computed in exact arithmetic. False: the distribution verdict only.
        profile: also audit the privacy profile (a lower bound on epsilon at several deltas,
            from the same samples). None: on when the mechanism claims ``delta > 0``.
        pool: also try, per pair, the *pooled* event pair (the best event with x the numerator
            and the best with x2 the numerator, counted on the same outputs, so each rate is
            estimated on twice the outputs; ``stats.epsilon_lower_bound_from_pooled_counts``).
            It competes with the single events at selection (its expected bound judged on a
            held-out half of the tuning samples). Used only when ``0.9 (1 - confidence) < 1/4``
            (where its bound is proven). Off by default: it did not raise the mean tightness
            measured in docs/audit.md (selection noise, not estimation, limits it there).
        ratio_test: how an event's two counts become a bound. ``"clopper-pearson"``: two
            one-sided Clopper-Pearson bounds with a union bound (the error split between them
            chosen at selection). ``"poisson"``: the estimation sample sizes are drawn from
            ``Poisson(n_est)`` (Poissonization; so the counts of a fixed event are independent
            Poisson counts) and pure-DP bounds (delta = 0) come from the exact *joint*
            conditional test on the ratio of the two rates
            (:func:`ldp_audit.stats.epsilon_lower_bound_from_poisson_counts`): the error is paid
            once instead of split. Pooled pairs then count the two events made disjoint
            (``S \\ S'`` and ``S' \\ S``), which keeps the pooled counts independent Poisson
            counts at any confidence. With delta > 0 the verdicts' events use the same test
            after adding ``Poisson(n delta / e^eps)`` artificial counts to the denominator
            (:func:`ldp_audit.stats.epsilon_lower_bound_from_poisson_counts_delta`, exact); the
            profile and the f-DP curve stay Clopper-Pearson on the realised sample sizes.
        tradeoff: also audit the f-DP trade-off curve of the witness pair from the same
            estimation samples (``result.tradeoff``, :class:`TradeoffCurve`): upper confidence
            points (type I, type II error) of threshold tests, simultaneous at ``confidence``,
            against the claimed curve (the mechanism's ``tradeoff(alpha)`` if it has one, else
            ``G_mu`` for a Gaussian with ``sigma`` and ``sensitivity``, else ``f_{eps,delta}``
            of the claim).
        force: run even when the estimated time exceeds 3 hours (measured on the first
            pair's selection samples, and refused earlier when the first small calls project
            over 6 hours; see docs/audit.md).
        progress: show a tqdm progress bar on stderr.
        statistics: extra statistics, each called as ``stat(outputs, x, x_prime)`` with the
            outputs of one input of a pair exactly as ``privatize`` returned them (shape
            (n, ...), dtype kept) and the pair's two inputs in the pair's order; it returns n
            finite real scores (one per output row). A ``name`` attribute (else ``__name__``)
            names it in the witness and the result. They are audited like the built-in
            statistics (threshold events chosen on selection samples only, fresh estimation
            samples, the same Bonferroni family). A mechanism's ``audit_statistics()`` list is
            added automatically. Checked before the selection samples are drawn (callable,
            distinct names; shape, real and finite on the first 8 outputs) and on every call.
        sequential: the anytime-valid sequential mode: ``samples`` becomes the budget per
            input, spent in fresh stages of doubling size (:func:`sequential_schedule`), stage
            k a fixed-sample audit at confidence ``1 - alpha 6 / (pi^2 k^2)``; stops at the
            first stage that refutes the claim, or when no remaining stage's ceiling
            (:func:`max_refutable_epsilon`) exceeds the claim. The result is the stage with the
            largest bound, its statements at ``confidence`` (union bound over the stages), with
            ``samples`` the outputs drawn per input over all stages run and ``sequential`` the
            stages (:class:`SequentialInfo`). Off by default.
        delta_event: for a claim with delta > 0, also estimate the event chosen (on selection
            samples) for the largest expected lower bound on delta at the claimed epsilon,
            ``CP_lower(p1) - e^epsilon CP_upper(p2)``: one more event in the distribution
            verdict's Bonferroni family (so it changes the other bounds slightly), aimed at
            refuting the claim rather than at the tightest epsilon. Off by default (the default
            mode's numbers stay as they were); refused for a pure claim (delta 0).
        event: a pre-registered event ``(x, x2, S)``, stated before any data is seen: the
            inputs x (the numerator) and x2, and the output set S, a list of output rows
            (numbers for one-column outputs; an output is in S when its row, as float64, equals
            one of them) or a callable ``S(outputs, x, x_prime)`` -> n booleans (outputs as
            ``privatize`` returned them; a randomised event must draw from its own Generator,
            independent of the outputs). No search: all ``samples`` outputs per input count
            this one event and the whole ``1 - confidence`` is spent on it (half on each
            Clopper-Pearson bound; with ``ratio_test="poisson"`` the joint test), which is
            sound for any fixed event (the choice only affects tightness). The result has the
            distribution verdict only, and resolution figures for this one event and test
            (``max_refutable_epsilon(samples, confidence, event_test=ratio_test)``); ``pairs``,
            ``statistics``, ``sequential``, ``pool`` and ``delta_event`` are refused with it.

    Returns:
        The :class:`AuditResult`.

    Raises:
        InvalidParameterError: invalid arguments (types are checked: ``'1'`` and ``True`` are
            not numbers, ``'no'`` is not a bool), a mechanism without ``privatize`` /
            ``epsilon``, a claim of epsilon = inf, no pairs for a mechanism that declares no
            domain, malformed outputs, an audit estimated to run for hours without ``force``.
        UserCodeError: the user's code raised, returned non-numbers or only NaN/inf.
    """
    kw = {k: v for k, v in locals().items() if k not in ("mechanism", "pairs")}
    start = time.perf_counter()
    o = check_arguments(mechanism, **kw)
    if o.sequential:  # each stage is this audit again, on the validated arguments
        kw.update(samples=o.samples, confidence=o.confidence, rng=o.rng, sequential=False)
        kw.update(selection_fraction=o.selection_fraction, statistics=[f for f, _ in o.user_fns])
        return audit_sequential(mechanism, pairs, stage=audit, start=start, **kw)
    pair_list = as_pair_list(mechanism, pairs, o.dim, o.event)
    plan = Plan.of(mechanism, o)

    from tqdm.auto import tqdm

    n_pairs = len(pair_list)
    total = 2 * plan.n_sel * n_pairs + 2 * plan.n_est * min(n_pairs, o.max_events + 1)
    with tqdm(total=total, disable=not o.progress, unit="sample", desc="audit", leave=False) as bar:

        def est_total(pairs_used: int) -> None:
            bar.total = 2 * plan.n_sel * n_pairs + 2 * plan.n_est * pairs_used
            bar.refresh()

        if o.event is None:
            sel = select_events(mechanism, pair_list, o, plan, bar.update, total)
            kept = kept_events(sel, o.max_events, o.tradeoff)
        else:
            sel, kept = fixed_event(mechanism, o)
        events = kept.verdict + kept.profile + kept.tradeoff
        counts = estimate_audit(
            mechanism, pair_list, events, sel, plan, o.delta, bar.update, est_total
        )
        bar.total = bar.n  # the last frame says 100% of what was drawn (Poissonized sizes vary)
        bar.refresh()
    return _conclude(mechanism, o, plan, pair_list, sel, kept, counts, start)


def _verdict(kind: str, items: list[tuple[float, Witness]], claimed: float) -> Verdict:
    """The verdict of ``kind`` over ``items`` (bound, witness): the largest bound (floored at 0)
    and its witness; its consequence is written by :func:`with_inconclusive_texts`."""
    b, w = max(items, key=lambda t: t[0], default=(0.0, None))
    b = max(0.0, b)
    return Verdict(kind, b, claimed, b > claimed, w, "", events_estimated=len(items))


def _conclude(
    mechanism: Any,
    o: Options,
    plan: Plan,
    pair_list: list[tuple[np.ndarray, np.ndarray]],
    sel: Selection,
    kept: Kept,
    counts: Counts,
    start: float,
) -> AuditResult:
    """The verdicts, the profile, the f-DP curve, the delta bound and the warnings."""
    claimed, delta, alpha = o.claimed, o.delta, plan.alpha
    bounds, per_event = verdict_bounds(kept.verdict, counts, pair_list, plan, delta)
    distribution = _verdict("distribution", per_event[: kept.n_dist], claimed)
    implementation = _verdict("implementation", per_event, claimed) if o.float_bits else None
    top = implementation if implementation is not None else distribution
    prof = None
    if plan.profile_deltas:
        lowers = profile_lowers(kept.profile, counts, plan.profile_deltas, alpha)
        claimed_curve, source = claimed_profile(mechanism, claimed, delta, plan.profile_deltas)
        prof = PrivacyProfile(
            delta=plan.profile_deltas,
            epsilon_lower=tuple(float(v) for v in lowers),
            epsilon_claimed=claimed_curve,
            confidence=o.confidence,
            events_estimated=len(kept.profile),
            claimed_from=source,
        )
    curve = None
    if kept.tradeoff:
        curve = tradeoff_curve(mechanism, o, kept.tradeoff, counts, pair_list, alpha)
    delta_lb, delta_conf, delta_joint = None, None, False
    if delta > 0 and kept.verdict:
        delta_lb, delta_joint = delta_lower_bound(kept.verdict, counts, claimed, plan)
        delta_conf = o.confidence
    warn = list(plan.warnings)
    # at a claimed delta > 0 a bound of 0 at that delta can be the truth ((0, delta)-DP) while
    # the same events separate the pair: then the delta bound or the profile says so
    separated = (delta_lb or 0.0) > 0.0 or (prof is not None and max(prof.epsilon_lower) > 0.0)
    if top.epsilon_lower_bound == 0.0 and o.event is None and not separated:
        warn.append(
            "no statistic separated the pair(s) at all: the lower bound is exactly 0. Either "
            "the outputs do not depend on the input, or the dependence lies in a structure "
            "none of the statistics computes (e.g. a hashed report (y, seed) whose event "
            "{y = H_seed(x)} needs the hash): pass statistics=[stat] (CLI: --statistic "
            "MODULE:FUNCTION) with stat(outputs, x, x_prime) -> one score per output row that "
            "computes it"
        )
    elif top.epsilon_lower_bound == 0.0 and o.event is not None and top.witness is not None:
        w = top.witness  # the pre-registered event: its bound is one-sided, x the numerator
        more = f" by more than the claimed delta {delta!r}" if delta > 0 else ""
        p1 = "P[M(x) in S] - delta" if delta > 0 else "P[M(x) in S]"
        warn.append(
            f"the pre-registered event's lower bound is exactly 0: S was seen {w.k1} of {w.n1} "
            f"times under x = {list(w.x)} (the numerator) and {w.k2} of {w.n2} under x2 = "
            f"{list(w.x2)}, not clearly more often under x{more}, so it refutes no claim. The "
            f"bound is on ({p1}) / P[M(x2) in S]: if S is likelier under x2, state it with x and "
            "x2 swapped (or take S's complement) and rerun with a fresh seed (an event chosen "
            "from these counts is no longer pre-registered on them)"
        )
    if sel.big_ints:
        warn.append(
            "the outputs are integers beyond 2^53 in magnitude: the auditor reads outputs as "
            "float64, which cannot tell neighbouring integers apart there, so a difference in "
            "their low digits is invisible to the events (a user statistic gets the raw "
            "outputs); release them minus an offset to audit them exactly"
        )
    unseeded = sel.unseeded and plan.reproducible  # else already said
    if unseeded:
        warn.append(
            "the mechanism is not reproducible from the seed: two privatize calls from the same "
            "Generator state gave different outputs, so it draws randomness other than the rng "
            "passed (the global numpy.random or random module, its own generator) or its "
            "outputs depend on state kept across calls; the bounds hold only if its outputs are "
            "independent draws of one distribution per input (no state), and rerunning with "
            "the same seed gives a different result: draw from the rng argument"
        )
    if sel.n_nonfinite:
        warn.append(
            f"{sel.n_nonfinite} of the selection outputs were NaN or inf (a score statistic "
            "reads a NaN score as +inf, a cell statistic counts them as cells of their own); a "
            "mechanism should release real numbers"
        )
    # the claimed G_mu curve of a Gaussian is what "exactly at its claim" means for it
    ceiling = tightness_ceiling(
        claimed,
        delta,
        plan.n_est,
        alpha / max(1, len(kept.verdict)),
        pool=plan.pool,
        poisson=plan.pois_v,
        curve=claimed_gaussian_curve(mechanism, claimed, delta),
        event=o.event is not None,
    )
    ceil = (plan.pool, o.ratio_test if o.event else None)  # what the ceilings depend on
    result = AuditResult(
        epsilon_lower_bound=top.epsilon_lower_bound,
        claimed_epsilon=claimed,
        confidence=o.confidence,
        samples=o.samples,
        witness=top.witness,
        seconds=time.perf_counter() - start,
        delta=delta,
        mechanism=mechanism_label(mechanism),
        pairs_tested=len(pair_list),
        events_estimated=len(kept.verdict),
        selection_samples=plan.n_sel,
        float_bits=o.float_bits,
        bounds=tuple(bounds),
        distribution=distribution,
        implementation=implementation,
        profile=prof,
        warnings=tuple(warn),
        reproducible=plan.reproducible and not unseeded,
        tradeoff=curve,
        delta_lower_bound=delta_lb,
        delta_confidence=delta_conf,
        delta_in_verdict=delta_joint,
        resolution_probability=math.exp(-max_refutable_epsilon(plan.n_est, o.confidence, *ceil)),
        max_refutable_epsilon=plan.top_bound,
        statistics=tuple(nm for _, nm in o.stat_fns),
        inconclusive_epsilon=one_count_epsilon(plan.n_est, o.confidence, *ceil, delta),
        tightness_ceiling=ceiling,
    )
    return with_inconclusive_texts(result)
