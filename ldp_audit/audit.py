"""Black-box epsilon auditor: sound lower bounds on a mechanism's epsilon, in two readings.

Given anything with ``epsilon`` (the claim) and ``privatize(x, rng)`` ((n, d) in, (n, k) out, rows
independent), :func:`audit` returns an :class:`AuditResult` whose ``epsilon_lower_bound``
satisfies

    P(epsilon_lower_bound > true epsilon) <= 1 - confidence

for every mechanism, by construction. The recipe (after DP-Sniper, Bichsel et al. 2021, and
Lu et al. 2022, with the Mironov 2012 floating-point attack added):

1. **Selection** (a fresh fraction of the samples, split in a *fit* half A and a *tune* half B).
   For every input pair (x, x2), fit a handful of one-dimensional statistics on A, read on
   outputs rounded to a 2^-32-relative grid (the *distribution* reading: exact arithmetic):
   the output itself / its most separating coordinate, the projection onto x - x2, the
   median-anchored L1 log-ratio (exact for additive Laplace noise), the L1 and L2 norms, a
   logistic-regression score trained to separate M(x) from M(x2) (multi-dimensional outputs),
   and a log-ratio score of discrete output cells (few distinct outputs). For the
   *implementation* reading, add a log-ratio score of floating-point *bit cells* of the raw
   outputs (sign, exponent, trailing zeros of the mantissa: Mironov 2012 — additive noise in
   IEEE doubles leaves input-dependent gaps in the low bits). On B, choose for each statistic
   the threshold event ``{s > t}`` or ``{s <= t}`` (linear and log-spaced tail quantiles), the
   direction (which input is the numerator) and the split of the event's error probability
   between its two counts that maximise the bound the estimation step is expected to give.
   Keep the ``max_events`` best distribution events, plus the best float-bit event when it
   promises more than all of them, plus a *probe* event when some event's B counts alone
   contradict the claim (a binomial test at level ``_PROBE_LEVEL``; rare leaks whose
   denominator B is too small to show, see :func:`_probe_event`).
2. **Estimation** (fresh samples, never used before). Count each kept event under M(x) and
   M(x2) and bound, for each event S with numerator input x,

       epsilon >= ln(CP_lower(P[M(x) in S]) - delta) - ln(CP_upper(P[M(x2) in S]))

   with one-sided Clopper-Pearson bounds at ``s (1 - confidence) / m`` and
   ``(1 - s) (1 - confidence) / m`` (s fixed at selection; Bonferroni over the m estimated
   events). If the mechanism is (epsilon, delta)-DP then
   ``P[M(x) in S] <= e^epsilon P[M(x2) in S] + delta`` for every S, so the union bound gives the
   guarantee above, whatever the selection step did. The **distribution verdict** is the
   maximum over the distribution events, the **implementation verdict** the maximum over all
   (both hold jointly); ``epsilon_lower_bound`` is the larger, floored at 0.
3. **Profile** (optional). Events chosen for several deltas are counted on the same estimation
   samples; each bounds ``ln(P[M(x) in S] - delta) - ln P[M(x2) in S]`` at every delta at
   once, so the lower curve holds simultaneously over the deltas (its own Bonferroni family).

**User statistics.** ``audit(..., statistics=[stat])`` (and a mechanism's own
``audit_statistics()``) adds statistics ``stat(outputs, x, x_prime) -> one float per output row``,
read on the outputs exactly as ``privatize`` returned them (e.g. a hashed report ``(y, seed)``,
whose distinguishing event ``{y = H_seed(x)}`` no built-in statistic computes). They go through
the same steps: thresholds and direction chosen on B, estimation on fresh samples, counted in the
same Bonferroni family (their events compete for the ``max_events`` slots and the probe like the
built-in distribution statistics, and count in the distribution verdict). When every event's
bound is <= 0 (the bound is exactly 0) the result warns and points at ``statistics=``.

**Delta at the claimed epsilon.** For an (epsilon, delta) claim, each estimated event S also
gives ``CP_lower(P[M(x) in S]) - e^epsilon CP_upper(P[M(x2) in S])``, a lower bound on the
mechanism's delta at the claimed epsilon (an (epsilon, delta)-DP mechanism has
``P[M(x) in S] - e^epsilon P[M(x2) in S] <= delta`` for every S). The intervals are the ones
behind the epsilon bounds (same levels, same Bonferroni family), so both bounds hold together
at ``confidence`` with no further split: on the event that every interval covers, both are
right. Per event, the delta bound exceeds the claimed delta exactly when the epsilon bound
exceeds the claimed epsilon, so the verdict from either bound is one verdict. The events are
chosen for the epsilon bound (the largest ratio, far in the tail at large samples), so their
delta bound can be loose; ``delta_event=True`` adds the event chosen for the largest expected
delta bound (one more event in the same Bonferroni family; opt-in because it moves the other
bounds slightly).

**Resolution.** Every result states the smallest event probability under the second input that
its estimation sample could tell from 0 (``resolution_probability``, ``1 - a^(1/N)``) and the
largest epsilon it could refute (``max_refutable_epsilon = ln(1 / resolution_probability)``): a
mechanism that hides its leak in rarer events ("curator" attacks) is not seen at this size.

**Sequential mode** (``sequential=True``): fresh fixed-sample audits on a doubling schedule of
sample sizes, stage k at level ``alpha 6 / (pi^2 k^2)``, stopping at the first refutation (the
union bound over stages makes any stopping rule valid; see :func:`_audit_sequential`).

A violation is attributed to the floating-point representation only when the distribution
reading of the same samples does not already refute the claim. Finding no violation proves
nothing beyond this test's power: the mechanism may still violate its claim on inputs or
events that were not tried.

:func:`exact_epsilon` gives the white-box value for our own mechanisms from their
``privacy_loss`` so users can put claim, exact and empirical side by side; :func:`from_scalar`
adapts one-call-per-value mechanisms of other libraries (diffprivlib, OpenDP).
"""

from __future__ import annotations

import abc
import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

import numpy as np
from scipy import special

from ldp_audit._scalar import from_scalar
from ldp_audit._validation import check_bool, check_int, check_probability, check_real
from ldp_audit.errors import InvalidParameterError, LdpAuditError, UserCodeError
from ldp_audit.stats import (
    POOLED_MAX_ALPHA,
    epsilon_lower_bound_from_counts,
    epsilon_lower_bound_from_poisson_counts,
    epsilon_lower_bound_from_poisson_counts_delta,
    epsilon_lower_bound_from_pooled_counts,
)

__all__ = [
    "AuditResult",
    "PrivacyProfile",
    "SequentialInfo",
    "TradeoffCurve",
    "Verdict",
    "Witness",
    "audit",
    "default_pairs",
    "exact_epsilon",
    "from_scalar",
    "sequential_alpha",
    "sequential_schedule",
]

#: float64 elements held per privatize call (outputs are streamed in chunks of this size).
_CHUNK_ELEMENTS = 1 << 22
#: rows of the fit half A used to train the classifier (fewer for very wide outputs).
_CLASSIFIER_ROWS = 20_000
#: float64 values of the fit half A kept per input (A is capped for very wide outputs).
_FIT_ELEMENTS = 1 << 24
#: at most this many distinct output rows for the discrete-cell statistic.
_MAX_CELLS = 4096
#: candidate thresholds per statistic.
_MAX_THRESHOLDS = 128
#: one-sided level of the shrunken selection rates (penalises noisy tail events).
_SHRINK = 0.05


# ----------------------------------------------------------------------------------------------
# results
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Witness:
    """The input pair and the event behind a lower bound.

    Attributes:
        x: the input whose output distribution is the numerator.
        x2: the other input.
        event: readable description of the event S.
        family: the statistic family that produced S (``"coordinate"``, ``"projection"``,
            ``"l1-ratio"``, ``"l1-norm"``, ``"l2-norm"``, ``"classifier"``, ``"cells"``,
            ``"float-bits"``, ``"user"``: a statistic passed in ``statistics=`` or shipped by the
            mechanism's ``audit_statistics()``, named in ``event``).
        k1: estimation count of S among n1 outputs of M(x).
        n1: estimation samples of M(x).
        k2: estimation count of S among n2 outputs of M(x2).
        n2: estimation samples of M(x2).
        numerator_share: the share of this event's error probability spent on the lower bound
            of ``k1 / n1`` (the rest bounds ``k2 / n2`` from above); fixed at selection.
        pooled: the bound pools an event S (x the numerator) with an event S' (x2 the
            numerator), counted on the same outputs (``stats.epsilon_lower_bound_from_pooled_
            counts``): then ``k1 = #{M(x) in S} + #{M(x2) in S'}`` and
            ``k2 = #{M(x2) in S} + #{M(x) in S'}``, each of ``n1 = n2 = 2n`` trials.
        test: ``"clopper-pearson"`` (two one-sided bounds, union bound), ``"poisson"`` (the
            joint conditional test on Poissonized counts; ``n1``, ``n2`` are then the realised
            Poisson sample sizes, and a pooled pair counts ``S \\ S'`` and ``S' \\ S``) or
            ``"poisson-augmented"`` (the same for delta > 0, the denominator augmented).
    """

    x: tuple[float, ...]
    x2: tuple[float, ...]
    event: str
    family: str
    k1: int
    n1: int
    k2: int
    n2: int
    numerator_share: float = 0.5
    pooled: bool = False
    test: str = "clopper-pearson"

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict."""
        d = asdict(self)
        d["x"] = list(self.x)
        d["x2"] = list(self.x2)
        return d


#: the two readings of one audit (see :class:`Verdict`).
VERDICT_KINDS = ("distribution", "implementation")


@dataclass(frozen=True)
class Verdict:
    """One reading of an audit: its own bound, witness, verdict and plain-language consequence.

    * ``"distribution"``: events on outputs rounded to a 2^-32-relative grid (the
      exact-arithmetic reading: is the mechanism's mathematics right?).
    * ``"implementation"``: the same events plus floating-point bit cells of the raw outputs
      (Mironov 2012: does this binary leak?). Every distribution event is also an event of the
      raw outputs, so this bound is never below the distribution bound.

    Attributes:
        kind: ``"distribution"`` or ``"implementation"``.
        epsilon_lower_bound: sound lower bound (jointly with the other verdict, at the audit's
            confidence), floored at 0.
        claimed_epsilon: the claim it is compared with.
        violation: ``epsilon_lower_bound > claimed_epsilon``.
        witness: the pair and event attaining the bound (None if nothing was estimated).
        consequence: what the verdict means, in plain language.
        events_estimated: events of this reading among the audit's Bonferroni family.
    """

    kind: str
    epsilon_lower_bound: float
    claimed_epsilon: float
    violation: bool
    witness: Witness | None
    consequence: str
    events_estimated: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict (``"inf"`` for infinities)."""
        return {
            "kind": self.kind,
            "epsilon_lower_bound": _json_float(self.epsilon_lower_bound),
            "claimed_epsilon": _json_float(self.claimed_epsilon),
            "violation": self.violation,
            "witness": None if self.witness is None else self.witness.to_dict(),
            "consequence": self.consequence,
            "events_estimated": self.events_estimated,
        }


@dataclass(frozen=True)
class PrivacyProfile:
    """The audited privacy profile: a lower bound on epsilon(delta) at several deltas.

    Every point is a lower bound on the mechanism's smallest epsilon at that delta, all points
    simultaneously with probability >= ``confidence`` (each estimated event bounds
    ``ln(P[M(x) in S] - delta) - ln P[M(x2) in S]`` for every delta at once; Bonferroni over
    the profile's own events). This statement is separate from the verdicts' (each holds at
    ``confidence``; both together at ``2 confidence - 1``). Events are read on the
    exact-arithmetic grid (distribution reading).

    Attributes:
        delta: the deltas, ascending.
        epsilon_lower: the lower bound at each delta (>= 0).
        epsilon_claimed: the claim at each delta (``inf`` where nothing is claimed): the
            mechanism's ``epsilon_at(delta)`` when it has one, else ``epsilon`` for
            ``delta >= `` the claimed delta and ``inf`` below.
        confidence: the level of the simultaneous statement.
        events_estimated: the profile's Bonferroni factor.
        claimed_from: ``"epsilon_at"`` or ``"single point"``.
    """

    delta: tuple[float, ...]
    epsilon_lower: tuple[float, ...]
    epsilon_claimed: tuple[float, ...]
    confidence: float
    events_estimated: int
    claimed_from: str

    @property
    def above_claim(self) -> tuple[bool, ...]:
        """Per delta: does the lower bound exceed the claim (a refuted point of the profile)?"""
        return tuple(lo > c for lo, c in zip(self.epsilon_lower, self.epsilon_claimed, strict=True))

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict; ``"inf"`` where nothing is claimed."""
        return {
            "delta": list(self.delta),
            "epsilon_lower": [_json_float(v) for v in self.epsilon_lower],
            "epsilon_claimed": [_json_float(v) for v in self.epsilon_claimed],
            "above_claim": list(self.above_claim),
            "confidence": self.confidence,
            "events_estimated": self.events_estimated,
            "claimed_from": self.claimed_from,
        }


@dataclass(frozen=True)
class TradeoffCurve:
    """The audited f-DP trade-off curve (Dong, Roth & Su 2022) of the witness pair.

    For the hypothesis test "H0: the output came from M(x2)" against "H1: from M(x)", every
    event S gives a test (reject H0 when the output is in S) with type I error
    ``alpha_S = P[M(x2) in S]`` and type II error ``beta_S = 1 - P[M(x) in S]``; the mechanism's
    trade-off function ``T(alpha) = inf {beta_S : alpha_S <= alpha}`` passes through or below
    every such point. With upper confidence bounds ``alpha_U >= alpha_S`` and
    ``beta_U >= beta_S`` (Clopper-Pearson on the fresh estimation counts, Bonferroni over all
    ``2 K`` bounds), ``T(alpha_U) <= T(alpha_S) <= beta_S <= beta_U`` at every point
    simultaneously with probability >= ``confidence`` (T is non-increasing). An f-DP claim
    says ``T >= f``; a point with ``f(alpha_U) > beta_U`` refutes it. The points are an upper
    bound on the true curve (a lower bound on the *privacy loss*): the lower this staircase,
    the less private the mechanism is shown to be. The events are thresholds of the statistic
    of the distribution verdict's best event, at type I levels spread from 1e-5 to 0.99, fixed
    on selection samples. A separate statement from the verdicts' and the profile's.

    Attributes:
        type1_upper: ``alpha_U`` per event (ascending).
        type2_upper: ``beta_U`` per event.
        type1_estimate: ``k / n`` under M(x2) per event (for plotting).
        type2_estimate: ``1 - k / n`` under M(x) per event.
        claimed_at_type1: ``f(alpha_U)`` of the claimed curve per point.
        claimed_alpha: a grid of type I errors in [0, 1] for drawing the claimed curve.
        claimed_beta: ``f`` on that grid.
        claimed_from: ``"tradeoff"`` (the mechanism's ``tradeoff(alpha)``), ``"gaussian
            mu=..."`` (``G_mu`` with ``mu = sensitivity / sigma``) or ``"epsilon-delta"``
            (``f_{epsilon, delta}`` of the claim).
        confidence: level of the simultaneous statement.
        events_estimated: K, the threshold events (``2 K`` bounds in the Bonferroni family).
        x: the input of the alternative H1 (the witness's numerator).
        x2: the input of the null H0.
        statistic: the statistic thresholded.
    """

    type1_upper: tuple[float, ...]
    type2_upper: tuple[float, ...]
    type1_estimate: tuple[float, ...]
    type2_estimate: tuple[float, ...]
    claimed_at_type1: tuple[float, ...]
    claimed_alpha: tuple[float, ...]
    claimed_beta: tuple[float, ...]
    claimed_from: str
    confidence: float
    events_estimated: int
    x: tuple[float, ...] = ()
    x2: tuple[float, ...] = ()
    statistic: str = ""

    @property
    def below_claim(self) -> tuple[bool, ...]:
        """Per point: does the upper confidence point lie below the claimed curve (refuted)?"""
        return tuple(c > b for c, b in zip(self.claimed_at_type1, self.type2_upper, strict=True))

    @property
    def violation(self) -> bool:
        """True when some point refutes the claimed trade-off curve at ``confidence``."""
        return any(self.below_claim)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict."""
        return {
            "type1_upper": list(self.type1_upper),
            "type2_upper": list(self.type2_upper),
            "type1_estimate": list(self.type1_estimate),
            "type2_estimate": list(self.type2_estimate),
            "claimed_at_type1": list(self.claimed_at_type1),
            "below_claim": list(self.below_claim),
            "violation": self.violation,
            "claimed_alpha": list(self.claimed_alpha),
            "claimed_beta": list(self.claimed_beta),
            "claimed_from": self.claimed_from,
            "confidence": self.confidence,
            "events_estimated": self.events_estimated,
            "x": list(self.x),
            "x2": list(self.x2),
            "statistic": self.statistic,
        }


@dataclass(frozen=True)
class SequentialInfo:
    """The stages of a sequential audit (``audit(..., sequential=True)``).

    Attributes:
        stages: per stage run, ``{"samples", "confidence", "epsilon_lower_bound",
            "delta_lower_bound", "violation", "seconds"}`` (``samples`` per input of each pair).
        stopped: ``"refuted"`` (a stage refuted the claim), ``"cannot refute"`` (no remaining
            stage could give a bound above the claim) or ``"budget spent"``.
        budget: the sample budget per input (``samples`` of the call).
        samples_used: outputs drawn per input over the stages run.
        best_stage: the 1-based stage whose result is reported.
    """

    stages: tuple[dict[str, Any], ...]
    stopped: str
    budget: int
    samples_used: int
    best_stage: int

    def summary(self) -> str:
        """One line: how the sequential audit ended."""
        return (
            f"sequential: stopped after stage {len(self.stages)} ({self.stopped}), "
            f"{self.samples_used} of {self.budget} samples per input used, result of stage "
            f"{self.best_stage}"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict."""
        return {
            "stages": [
                {k: (_json_float(v) if isinstance(v, float) else v) for k, v in st.items()}
                for st in self.stages
            ],
            "stopped": self.stopped,
            "budget": self.budget,
            "samples_used": self.samples_used,
            "best_stage": self.best_stage,
        }


@dataclass(frozen=True)
class AuditResult:
    """Outcome of :func:`audit`.

    Attributes:
        epsilon_lower_bound: ``P(epsilon_lower_bound > true epsilon) <= 1 - confidence``;
            in the (epsilon, delta) form at ``delta`` when the mechanism claims delta > 0. The
            larger of the two verdicts' bounds (the implementation one when float bits were
            searched).
        claimed_epsilon: the mechanism's ``epsilon``.
        confidence: the confidence level of the bound.
        samples: outputs drawn per input of each pair (selection + estimation).
        witness: the pair and event attaining the bound (None only if nothing was estimated).
        seconds: wall-clock time of the audit.
        delta: the delta of the claim the bound refers to (0.0 for pure epsilon-DP).
        mechanism: a short description of the audited mechanism.
        pairs_tested: input pairs searched in the selection step.
        events_estimated: m, the events estimated on fresh samples (the Bonferroni factor of
            the verdicts; the profile has its own).
        selection_samples: per input, the outputs used for selection (the rest estimate).
        float_bits: whether floating-point bit cells were among the searched events.
        bounds: per estimated event, its own bound (for diagnostics).
        distribution: the exact-arithmetic verdict (None only for results built by hand).
        implementation: the float-bit verdict (None when ``float_bits`` was off).
        profile: the audited privacy profile (None when not requested).
        tradeoff: the audited f-DP trade-off curve (None when not requested or when nothing
            was estimated). Not part of ``violation`` (its own statement; see
            :class:`TradeoffCurve`).
        warnings: things the user should know (a mechanism not reproducible from the seed,
            non-finite outputs, ...).
        reproducible: whether the same seed reproduces the audit (False for mechanisms that
            declare ``reproducible = False``, e.g. an unseedable library).
        delta_lower_bound: for a claim with delta > 0, a lower bound on the mechanism's delta
            at the claimed epsilon, ``max_S CP_lower(P[M(x) in S]) - e^epsilon
            CP_upper(P[M(x2) in S])`` over the estimated events, from the same intervals as the
            epsilon bound (floored at 0; None for pure claims). Holds at ``delta_confidence``.
        delta_confidence: the level of ``delta_lower_bound``'s statement. With the default
            Clopper-Pearson ratio test it is the verdicts' own family (both bounds hold jointly
            at ``confidence``: the same intervals give both; ``delta_in_verdict`` is True and a
            delta refutation is a ``violation``); with ``ratio_test="poisson"`` it is a
            separate Clopper-Pearson family (jointly with the verdicts at
            ``2 confidence - 1``), not part of ``violation``.
        delta_in_verdict: whether ``delta_lower_bound`` shares the verdicts' family.
        resolution_probability: the smallest event probability under the second input (the
            denominator) that the estimation sample could tell from 0: an event with no
            estimation hit under M(x2) still gets the upper bound ``p = 1 - a^(1/N)``
            (``N`` estimation samples, ``a`` the largest error share one event's count gets),
            so a leak confined to events rarer than this under x2 reads as a ratio of at most
            ``1 / p``.
        max_refutable_epsilon: ``ln(1 / resolution_probability)``, the largest epsilon this
            sample size could refute (see :func:`max_refutable_epsilon`).
        statistics: the names of the user's / the mechanism's statistics that were searched.
        sequential: the stages of a sequential audit (None for a fixed-sample one).
    """

    epsilon_lower_bound: float
    claimed_epsilon: float
    confidence: float
    samples: int
    witness: Witness | None
    seconds: float
    delta: float = 0.0
    mechanism: str = ""
    pairs_tested: int = 0
    events_estimated: int = 0
    selection_samples: int = 0
    float_bits: bool = True
    bounds: tuple[float, ...] = field(default_factory=tuple)
    distribution: Verdict | None = None
    implementation: Verdict | None = None
    profile: PrivacyProfile | None = None
    warnings: tuple[str, ...] = field(default_factory=tuple)
    reproducible: bool = True
    tradeoff: TradeoffCurve | None = None
    delta_lower_bound: float | None = None
    delta_confidence: float | None = None
    delta_in_verdict: bool = False
    resolution_probability: float | None = None
    max_refutable_epsilon: float | None = None
    statistics: tuple[str, ...] = field(default_factory=tuple)
    sequential: SequentialInfo | None = None

    @property
    def delta_violation(self) -> bool:
        """True when ``delta_lower_bound`` exceeds the claimed delta (the claim is refuted at
        ``delta_confidence``)."""
        return self.delta_lower_bound is not None and self.delta_lower_bound > self.delta

    @property
    def violation(self) -> bool:
        """True when the lower bound exceeds the claimed epsilon, or the delta lower bound
        (when it belongs to the verdicts' own family, ``delta_in_verdict``) exceeds the claimed
        delta: the claim is refuted at the stated confidence. (For the same event and the same
        intervals the two refutations coincide; see the module docstring.)"""
        if self.epsilon_lower_bound > self.claimed_epsilon:
            return True
        return self.delta_in_verdict and self.delta_violation

    @property
    def leak(self) -> str:
        """Where a violation lies: ``"none"``, ``"distribution"`` (the maths/calibration: the
        exact-arithmetic reading already refutes the claim) or ``"float-representation"`` (only
        the floating-point bits refute it)."""
        if self.distribution is not None and self.distribution.violation:
            return "distribution"
        if self.violation:
            if self.implementation is not None and self.implementation.violation:
                return "float-representation"
            return "distribution"
        return "none"

    def summary(self) -> str:
        """Plain-text verdicts with witnesses and the caveat that a pass proves nothing."""
        form = f"(epsilon, delta={self.delta:g})" if self.delta > 0 else "pure epsilon"
        lines = [
            f"mechanism: {self.mechanism}",
            f"claimed epsilon: {self.claimed_epsilon:.6g} ({form})",
            f"epsilon lower bound: {self.epsilon_lower_bound:.6g} "
            f"at confidence {self.confidence:.10g}",
        ]
        if self.violation:
            lines.append(
                "VIOLATION: the mechanism's true epsilon exceeds its claim (this conclusion is "
                f"wrong with probability at most {1 - self.confidence:.3g})."
            )
        else:
            lines.append(
                "no violation found. This proves nothing beyond this test's power: the "
                "mechanism may still violate its claim on inputs, events or sample sizes that "
                "were not tried."
            )
        verdicts = [v for v in (self.distribution, self.implementation) if v is not None]
        for v in verdicts:
            title = (
                "distribution (exact arithmetic)"
                if v.kind == "distribution"
                else "implementation (float bits)"
            )
            state = "VIOLATION" if v.violation else "no violation found"
            lines.append(f"[{title}] lower bound {v.epsilon_lower_bound:.6g}: {state}")
            lines.append(f"  {v.consequence}")
            same = (
                v.kind == "implementation"
                and self.distribution is not None
                and v.witness == self.distribution.witness
            )
            if same:
                lines.append("  witness: the distribution verdict's (no float-bit event beat it)")
            elif v.witness is not None:
                lines.extend("  " + t for t in _witness_lines(v.witness))
        if not verdicts and self.witness is not None:
            lines.extend(_witness_lines(self.witness))
        if self.profile is not None:
            p = self.profile
            pts = ", ".join(
                f"{d:g}: {lo:.3g}" + (f" (claim {c:.3g})" if math.isfinite(c) else "")
                for d, lo, c in zip(p.delta, p.epsilon_lower, p.epsilon_claimed, strict=True)
            )
            lines.append(
                f"privacy profile, lower epsilon at delta (confidence {p.confidence:.10g}): {pts}"
            )
        if self.tradeoff is not None:
            tc = self.tradeoff
            state = (
                f"{sum(tc.below_claim)} point(s) BELOW the claimed curve (refuted)"
                if tc.violation
                else "no point below the claimed curve"
            )
            lines.append(
                f"f-DP trade-off ({tc.events_estimated} tests, confidence {tc.confidence:.10g}, "
                f"claimed {tc.claimed_from}): {state}"
            )
        if self.delta_lower_bound is not None:
            state = "ABOVE the claimed delta (refuted)" if self.delta_violation else "not above it"
            lines.append(
                f"delta lower bound at the claimed epsilon {self.claimed_epsilon:.6g}: "
                f"{self.delta_lower_bound:.6g} (claimed {self.delta:g}; confidence "
                f"{self.delta_confidence:.10g}): {state}"
            )
        if self.resolution_probability is not None and self.max_refutable_epsilon is not None:
            lines.append(
                f"resolution: events of probability below {self.resolution_probability:.3g} "
                "under the second input cannot be told from 0 at this sample size; no bound "
                f"can exceed epsilon {self.max_refutable_epsilon:.4g} (a leak hidden in "
                "rarer events is not seen)"
            )
        if self.statistics:
            lines.append("statistics supplied: " + ", ".join(self.statistics))
        if self.sequential is not None:
            lines.append(self.sequential.summary())
        for w in self.warnings:
            lines.append(f"warning: {w}")
        lines.append(
            f"{self.samples} samples per input ({self.selection_samples} for selection), "
            f"{self.pairs_tested} pair(s) searched, {self.events_estimated} event(s) estimated "
            f"(Bonferroni), {self.seconds:.2f} s"
        )
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict (``violation`` included); infinities become strings ``"inf"``.

        The fields are described in docs/interfaces.md ("Statistics and the auditor").
        """
        verdicts = {
            v.kind: v.to_dict() for v in (self.distribution, self.implementation) if v is not None
        }
        d = {
            "epsilon_lower_bound": _json_float(self.epsilon_lower_bound),
            "claimed_epsilon": _json_float(self.claimed_epsilon),
            "violation": self.violation,
            "leak": self.leak,
            "confidence": self.confidence,
            "delta": self.delta,
            "samples": self.samples,
            "selection_samples": self.selection_samples,
            "witness": None if self.witness is None else self.witness.to_dict(),
            "seconds": self.seconds,
            "mechanism": self.mechanism,
            "pairs_tested": self.pairs_tested,
            "events_estimated": self.events_estimated,
            "float_bits": self.float_bits,
            "bounds": [_json_float(b) for b in self.bounds],
            "verdicts": verdicts,
            "profile": None if self.profile is None else self.profile.to_dict(),
            "tradeoff": None if self.tradeoff is None else self.tradeoff.to_dict(),
            "warnings": list(self.warnings),
            "reproducible": self.reproducible,
            "delta_lower_bound": self.delta_lower_bound,
            "delta_confidence": self.delta_confidence,
            "delta_violation": self.delta_violation,
            "delta_in_verdict": self.delta_in_verdict,
            "resolution_probability": self.resolution_probability,
            "max_refutable_epsilon": (
                None
                if self.max_refutable_epsilon is None
                else _json_float(self.max_refutable_epsilon)
            ),
            "statistics": list(self.statistics),
            "sequential": None if self.sequential is None else self.sequential.to_dict(),
        }
        return d


def _witness_lines(w: Witness) -> list[str]:
    return [
        f"witness: x = {_short(w.x)}, x2 = {_short(w.x2)}",
        f"  event: {w.event}  [{w.family}]",
        f"  counts: {w.k1}/{w.n1} under M(x), {w.k2}/{w.n2} under M(x2) (fresh estimation samples)",
    ]


def _json_float(v: float) -> float | str:
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return float(v)


def _short(v: Sequence[float], k: int = 6) -> str:
    vals = [f"{a:.4g}" for a in v[:k]]
    more = f", ... ({len(v)} values)" if len(v) > k else ""
    return "[" + ", ".join(vals) + more + "]"


# ----------------------------------------------------------------------------------------------
# one-dimensional statistics (fitted on the A half of the selection samples)
# ----------------------------------------------------------------------------------------------


class _Statistic(abc.ABC):
    """A deterministic map from an (n, k) output batch to n real scores (NaN -> +inf)."""

    family = "statistic"
    #: reads the outputs as the mechanism returned them (not coerced to float64 (n, k))
    needs_raw = False

    def values(self, y: np.ndarray) -> np.ndarray:
        s = np.asarray(self._values(y), dtype=np.float64)
        return np.where(np.isnan(s), np.inf, s)

    @abc.abstractmethod
    def _values(self, y: np.ndarray) -> np.ndarray:
        """Raw scores of the outputs ``y`` (NaN allowed; mapped to +inf)."""

    @abc.abstractmethod
    def label(self) -> str:
        """Readable description of the statistic (used in the witness)."""

    def describe(self, op: str, t: float) -> str:
        return f"{self.label()} {'>' if op == 'gt' else '<='} {t:.17g}"


class _Coordinate(_Statistic):
    family = "coordinate"

    def __init__(self, j: int, k: int) -> None:
        self.j, self.k = j, k

    def _values(self, y: np.ndarray) -> np.ndarray:
        return y[:, self.j]

    def label(self) -> str:
        return "y" if self.k == 1 else f"y[{self.j}]"


class _Projection(_Statistic):
    family = "projection"

    def __init__(self, w: np.ndarray, name: str) -> None:
        self.w, self.name = w, name

    def _values(self, y: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore"):
            return y @ self.w

    def label(self) -> str:
        return f"<y, {self.name}>"


class _Norm(_Statistic):
    def __init__(self, order: int) -> None:
        self.order = order
        self.family = f"l{order}-norm"

    def _values(self, y: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore"):
            if self.order == 1:
                return np.abs(y).sum(axis=1)
            return np.sqrt(np.einsum("ij,ij->i", y, y))

    def label(self) -> str:
        return f"||y||_{self.order}"


class _MedianL1Ratio(_Statistic):
    """``sum_i |y_i - b_i| - |y_i - a_i|`` with a, b the coordinate medians of M(x), M(x2) on A:
    the exact log-likelihood ratio (up to scale) of additive Laplace noise around a and b."""

    family = "l1-ratio"

    def __init__(self, a: np.ndarray, b: np.ndarray) -> None:
        self.a, self.b = a, b

    def _values(self, y: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return (np.abs(y - self.b) - np.abs(y - self.a)).sum(axis=1)

    def label(self) -> str:
        return "sum_i |y_i - median2_i| - |y_i - median1_i|"


def _finite_features(y: np.ndarray) -> np.ndarray:
    return np.clip(np.nan_to_num(y, nan=0.0, posinf=1e150, neginf=-1e150), -1e150, 1e150)


class _Classifier(_Statistic):
    """Logistic-regression score separating M(x) (label 1) from M(x2) (label 0)."""

    family = "classifier"

    def __init__(self, ya1: np.ndarray, ya2: np.ndarray) -> None:
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.linear_model import LogisticRegression

        rows = max(500, min(_CLASSIFIER_ROWS, (1 << 22) // ya1.shape[1]))
        a1 = _finite_features(ya1[:rows])
        a2 = _finite_features(ya2[:rows])
        feats = np.concatenate([a1, a2])
        self.mu = feats.mean(axis=0)
        sd = feats.std(axis=0)
        self.sd = np.where(sd > 0, sd, 1.0)
        labels = np.concatenate([np.ones(len(a1)), np.zeros(len(a2))])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            warnings.simplefilter("ignore", RuntimeWarning)
            self.model = LogisticRegression(C=1.0, max_iter=300).fit(
                (feats - self.mu) / self.sd, labels
            )

    def _values(self, y: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return self.model.decision_function((_finite_features(y) - self.mu) / self.sd)

    def label(self) -> str:
        return "logistic-regression score(y)"


_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


def _row_keys(y: np.ndarray) -> np.ndarray:
    """64-bit hash of each output row's exact bit pattern (-0.0 folded into 0.0).

    Collisions merely merge cells: the event stays a fixed set, so soundness is unaffected.
    """
    u = np.ascontiguousarray(y + 0.0).view(np.uint64)
    h = np.full(u.shape[0], _FNV_OFFSET, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(u.shape[1]):
            h = (h ^ u[:, j]) * _FNV_PRIME
    return h


_CTZ_BITS = 9
_CTZ_TABLE = np.array(
    [_CTZ_BITS] + [(i & -i).bit_length() - 1 for i in range(1, 1 << _CTZ_BITS)], dtype=np.uint64
)


def _float_keys(v: np.ndarray) -> np.ndarray:
    """Bit cell of each double: (sign, biased exponent, trailing zeros of the mantissa, capped).

    Mironov (2012): ``fl(x + noise)`` lies on the grid of the larger of |x|, |noise|, so the low
    mantissa bits of an output depend on the input.
    """
    bits = np.ascontiguousarray(v + 0.0).view(np.uint64)
    sign = bits >> np.uint64(63)
    expo = (bits >> np.uint64(52)) & np.uint64(0x7FF)
    low = bits & np.uint64((1 << _CTZ_BITS) - 1)
    ctz = _CTZ_TABLE[low]
    return (sign << np.uint64(16)) | (expo << np.uint64(4)) | ctz


def _describe_float_key(key: int) -> str:
    sign = "-" if (key >> 16) & 1 else "+"
    expo = ((key >> 4) & 0x7FF) - 1023
    ctz = key & 0xF
    tz = f">= {ctz}" if ctz == _CTZ_BITS else f"= {ctz}"
    return f"sign {sign}, exponent {expo}, trailing zero bits {tz}"


class _CellScore(_Statistic):
    """Log-ratio score of output cells estimated on A (unseen cells score 0).

    A threshold on the score is the Neyman-Pearson event "cells whose estimated likelihood ratio
    exceeds t"; since the table is fitted on A and the threshold chosen on B, the event is
    fixed before the estimation samples are drawn.
    """

    def __init__(
        self,
        keyfn: Callable[[np.ndarray], np.ndarray],
        k1: np.ndarray,
        k2: np.ndarray,
        family: str,
        name: str,
        describe_key: Callable[[int], str],
    ) -> None:
        self.keyfn, self.family, self.name, self.describe_key = keyfn, family, name, describe_key
        keys, inv = np.unique(np.concatenate([k1, k2]), return_inverse=True)
        c1 = np.bincount(inv[: len(k1)], minlength=len(keys))
        c2 = np.bincount(inv[len(k1) :], minlength=len(keys))
        self.keys = keys
        self.scores = np.log((c1 + 0.5) / (len(k1) + 1.0)) - np.log((c2 + 0.5) / (len(k2) + 1.0))

    def _values(self, y: np.ndarray) -> np.ndarray:
        k = self.keyfn(y)
        idx = np.searchsorted(self.keys, k)
        idx = np.minimum(idx, len(self.keys) - 1)
        hit = self.keys[idx] == k
        return np.where(hit, self.scores[idx], 0.0)

    def label(self) -> str:
        return f"log-ratio score of {self.name}"

    def describe(self, op: str, t: float) -> str:
        sel = self.scores > t if op == "gt" else self.scores <= t
        keys = self.keys[sel]
        text = f"{self.label()} {'>' if op == 'gt' else '<='} {t:.6g}"
        if 0 < len(keys) <= 4:
            text += " (cells: " + "; ".join(self.describe_key(int(q)) for q in keys) + ")"
        else:
            text += f" ({len(keys)} cells)"
        if (op == "gt" and 0.0 > t) or (op == "le" and 0.0 <= t):
            text += " + cells unseen in selection"
        return text


class _Snap:
    """Rounds outputs to an absolute grid per coordinate (exact-arithmetic mode).

    ``fl(x + noise)`` lands on an input-dependent subset of the doubles (Mironov 2012), and a
    statistic whose threshold sits where only rounding decides (e.g. at the maximum of a sum of
    differences) inherits that leak. With ``float_bits=False`` every statistic therefore sees
    ``round(y / g) g`` with ``g_j = 2^-32 max(|q_0.01|, |q_0.99|)`` of coordinate j (fitted on A):
    each grid cell holds >= 2^15 doubles reachable from either input, so the events measure the
    mechanism's real-valued distribution, discretised. Any deterministic map keeps soundness.
    """

    def __init__(self, grid: np.ndarray) -> None:
        self.grid = grid

    @classmethod
    def fit(cls, ya1: np.ndarray, ya2: np.ndarray) -> _Snap:
        f = _finite_features(np.concatenate([ya1, ya2]))
        q = np.quantile(f, [0.01, 0.99], axis=0)
        mag = np.max(np.abs(q), axis=0)
        grid = np.ldexp(np.where(mag > 0, mag, 1.0), -32)
        return cls(grid)

    def __call__(self, y: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.round(y / self.grid) * self.grid


class _Snapped(_Statistic):
    """A statistic evaluated on snapped outputs (see :class:`_Snap`), its values rounded to a
    2^-36-relative grid fitted on A, so that plateaus of the statistic (e.g. the maximum of the
    L1 log-ratio, reached by every output beyond both centres) are exact ties that one
    threshold can take whole, instead of being split by rounding noise."""

    def __init__(self, inner: _Statistic, snap: _Snap, ya: np.ndarray | None = None) -> None:
        self.inner, self.snap = inner, snap
        self.family = inner.family
        self.quantum = 0.0
        if ya is not None and not isinstance(inner, _CellScore):
            v = self.inner.values(self.snap(ya))
            v = v[np.isfinite(v)]
            if v.size:
                q = np.quantile(v, [0.01, 0.99])
                mag = float(np.max(np.abs(q)))
                self.quantum = math.ldexp(mag, -36) if mag > 0 else 0.0

    def _values(self, y: np.ndarray) -> np.ndarray:
        v = self.inner.values(self.snap(y))
        if self.quantum > 0:
            with np.errstate(all="ignore"):
                v = np.round(v / self.quantum) * self.quantum
        return v

    def label(self) -> str:
        return self.inner.label()

    def describe(self, op: str, t: float) -> str:
        return self.inner.describe(op, t) + " (outputs on a 2^-32-relative grid)"


def _float_cell_statistic(ya1: np.ndarray, ya2: np.ndarray, j: int, k: int) -> _CellScore:
    def keyfn(y: np.ndarray) -> np.ndarray:
        return _float_keys(y[:, j])

    name = "float bit cells of " + ("y" if k == 1 else f"y[{j}]")
    return _CellScore(keyfn, keyfn(ya1), keyfn(ya2), "float-bits", name, _describe_float_key)


class _UserStatistic(_Statistic):
    """A user's (or the mechanism's ``audit_statistics()``) statistic for one pair:
    ``fn(outputs, x, x_prime)`` on the outputs exactly as ``privatize`` returned them, one
    finite real score per row. Checked on every call (shape, finiteness)."""

    family = "user"
    needs_raw = True

    def __init__(self, fn: Callable[..., Any], name: str, x: np.ndarray, x2: np.ndarray) -> None:
        self.fn, self.name, self.x, self.x2 = fn, name, x, x2

    def values(self, y: np.ndarray) -> np.ndarray:
        return self._values(y)

    def _values(self, y: np.ndarray) -> np.ndarray:
        n = len(y)
        try:
            raw = self.fn(y, self.x, self.x2)
        except LdpAuditError:
            raise
        except Exception as exc:  # noqa: BLE001 - user code: wrapped with context, cause kept
            raise UserCodeError(
                f"statistic {self.name!r} raised {type(exc).__name__} on {n} outputs: {exc}"
            ) from exc
        try:
            v = np.asarray(raw)
        except Exception as exc:  # noqa: BLE001 - e.g. ragged lists
            raise InvalidParameterError(
                f"statistic {self.name!r} must return an array of {n} scores: {exc}"
            ) from exc
        if v.dtype == object or v.dtype.kind not in "biuf":
            raise InvalidParameterError(
                f"statistic {self.name!r} must return real scores, got dtype {v.dtype}"
            )
        if v.shape != (n,):
            raise InvalidParameterError(
                f"statistic {self.name!r} must return one score per output row, shape ({n},), "
                f"got shape {v.shape}"
            )
        v = v.astype(np.float64)
        if not np.all(np.isfinite(v)):
            bad = int(np.count_nonzero(~np.isfinite(v)))
            raise InvalidParameterError(
                f"statistic {self.name!r} returned {bad} non-finite score(s) (NaN or inf) of "
                f"{n}; scores must be finite real numbers"
            )
        return v

    def label(self) -> str:
        if self.name.isidentifier():
            return f"{self.name}(y, x, x2)"
        return f"statistic {self.name!r}"


def _statistic_list(raw: Any, where: str) -> list[tuple[Callable[..., Any], str]]:
    """Validate a list of user statistics (callables) and name them: their ``name`` attribute,
    else their ``__name__`` (a lambda gets its position), else ``where[i]``."""
    if raw is None:
        return []
    if isinstance(raw, (str, bytes)) or callable(raw):
        raise InvalidParameterError(
            f"{where} must be a list of callables stat(outputs, x, x_prime), got "
            f"{type(raw).__name__}"
        )
    try:
        items = list(raw)
    except TypeError:
        raise InvalidParameterError(
            f"{where} must be a list of callables stat(outputs, x, x_prime), got "
            f"{type(raw).__name__}"
        ) from None
    out: list[tuple[Callable[..., Any], str]] = []
    for i, fn in enumerate(items):
        if not callable(fn):
            raise InvalidParameterError(
                f"{where}[{i}] must be callable as stat(outputs, x, x_prime), got "
                f"{type(fn).__name__} {fn!r:.60}"
            )
        name = getattr(fn, "name", None)
        if name is None:
            name = getattr(fn, "__name__", None)
            if name in (None, "<lambda>"):
                name = f"{where}[{i}]"
        if not isinstance(name, str) or not name:
            raise InvalidParameterError(
                f"{where}[{i}].name must be a non-empty string, got {name!r}"
            )
        out.append((fn, name))
    return out


def _build_statistics(
    x: np.ndarray, x2: np.ndarray, ya1: np.ndarray, ya2: np.ndarray
) -> tuple[list[_Statistic], int, bool]:
    """The few statistics tried for one pair (kept small so Bonferroni stays cheap), the
    output coordinate that separates the pair best, and whether the outputs are discrete."""
    k = ya1.shape[1]
    stats: list[_Statistic] = []
    r1, r2 = _row_keys(ya1), _row_keys(ya2)
    limit = min(_MAX_CELLS, (len(r1) + len(r2)) // 4)
    # a prefix with more distinct rows than the limit settles it without the full count
    head = np.concatenate([r1[: 8 * _MAX_CELLS], r2[: 8 * _MAX_CELLS]])
    discrete = _sorted_unique(head).size <= limit and (
        _sorted_unique(np.concatenate([r1, r2])).size <= limit
    )
    if discrete:
        examples: dict[int, np.ndarray] = {}
        for rows, keys in ((ya1, r1), (ya2, r2)):
            uk, first = np.unique(keys, return_index=True)
            for q, i in zip(uk.tolist(), first.tolist(), strict=True):
                examples.setdefault(q, rows[i])

        def describe_row(q: int) -> str:
            row = examples.get(q)
            return "y = ?" if row is None else f"y = {_short(row.tolist(), 4)}"

        stats.append(_CellScore(_row_keys, r1, r2, "cells", "output cells", describe_row))
    if k == 1:
        stats.append(_Coordinate(0, 1))
        j = 0
    else:
        f1 = _finite_features(ya1)
        f2 = _finite_features(ya2)
        with np.errstate(all="ignore"):
            gap = np.abs(f1.mean(axis=0) - f2.mean(axis=0))
            sd = np.sqrt(0.5 * (f1.var(axis=0) + f2.var(axis=0)))
            z = np.where(sd > 0, gap / np.where(sd > 0, sd, 1.0), np.where(gap > 0, np.inf, 0.0))
        j = int(np.argmax(np.nan_to_num(z, nan=0.0)))
        stats.append(_Coordinate(j, k))
        if x.shape[0] == k and np.any(x != x2):
            w = x - x2
            name = "x - x2"
        else:
            w = f1.mean(axis=0) - f2.mean(axis=0)
            name = "mean difference"
        scale = np.max(np.abs(w))
        if np.isfinite(scale) and scale > 0:
            stats.append(_Projection(w / scale, name))
        med1, med2 = np.median(f1, axis=0), np.median(f2, axis=0)
        if np.any(med1 != med2):
            stats.append(_MedianL1Ratio(med1, med2))
        stats.append(_Norm(1))
        stats.append(_Norm(2))
        stats.append(_Classifier(ya1, ya2))
    return stats, j, discrete


# ----------------------------------------------------------------------------------------------
# threshold selection
# ----------------------------------------------------------------------------------------------


def _cp_lower(k: np.ndarray, n: float, a: float) -> np.ndarray:
    with np.errstate(all="ignore"):
        lo = special.betaincinv(np.maximum(k, 1e-300), n - k + 1.0, a)
    return np.where(k <= 0, 0.0, lo)


def _cp_upper(k: np.ndarray, n: float, a: float) -> np.ndarray:
    with np.errstate(all="ignore"):
        hi = special.betaincinv(k + 1.0, np.maximum(n - k, 1e-300), 1.0 - a)
    return np.where(k >= n, 1.0, hi)


def _poisson_log_ratio_lower(k1: np.ndarray, k2: np.ndarray, a: float) -> np.ndarray:
    """``ln`` of :func:`ldp_audit.stats.poisson_ratio_lower` (no validation; -inf at k1 = 0)."""
    with np.errstate(all="ignore"):
        th = special.betaincinv(np.maximum(k1, 1e-300), k2 + 1.0, a)
        out = np.log(th) - np.log1p(-th)
    return np.where(k1 <= 0, -np.inf, out)


#: the ratio tests :func:`audit` offers for an event's two counts (see its docstring).
RATIO_TESTS = ("clopper-pearson", "poisson")


#: candidate shares of an event's error probability spent on the numerator's lower bound
#: (the rest bounds the denominator); chosen per event at selection, from selection data only.
_SHARES = (0.5, 0.25, 0.1)
#: the deltas of the audited privacy profile (plus the claimed delta).
_PROFILE_DELTAS = (0.0, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 0.05, 0.1)
#: extreme distinct values always tried as thresholds (tail events at high epsilon).
_TAIL_THRESHOLDS = 24


@dataclass
class _Candidate:
    pair: int
    stat: _Statistic
    op: str  # "gt": s > t, "le": s <= t
    t: float
    x_is_numerator: bool
    predicted: float
    sel_counts: tuple[int, int]
    share: float = 0.5
    delta: float = 0.0
    #: the reverse-direction event pooled with this one (see ``_pool``); None: a single event
    partner: _Candidate | None = None
    #: selection rates (shrunk numerator lower, denominator upper) behind ``predicted``
    sel_rates: tuple[float, float] = (0.0, 1.0)

    def indicator(self, s: np.ndarray) -> np.ndarray:
        return s > self.t if self.op == "gt" else s <= self.t

    def key(self) -> tuple[int, int, str, float, bool]:
        return (self.pair, id(self.stat), self.op, self.t, self.x_is_numerator)


def _sorted_unique(v: np.ndarray) -> np.ndarray:
    """``np.unique`` by sorting (hash-based unique is several times slower on float64)."""
    srt = np.sort(v)
    if srt.size == 0:
        return srt
    keep = np.empty(srt.size, dtype=bool)
    keep[0] = True
    np.not_equal(srt[1:], srt[:-1], out=keep[1:])
    return srt[keep]


def _thresholds(s1: np.ndarray, s2: np.ndarray) -> np.ndarray | None:
    pooled = np.concatenate([s1, s2])
    uniq = _sorted_unique(pooled)
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
    :func:`_best_events` (every delta of the verdict and the profile) and :func:`_probe_event`."""

    s1: np.ndarray
    s2: np.ndarray
    ts: np.ndarray
    combos: tuple[tuple[str, bool, np.ndarray, np.ndarray, int, int], ...]


def _threshold_counts(s1: np.ndarray, s2: np.ndarray) -> _ThresholdCounts | None:
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
#: the ``_TAIL_LEVEL`` quantile of chi^2 with 2m degrees of freedom, per m (computed lazily).
_TAIL_LEVEL = 1e-3


class _Chi2Quantiles(dict):
    def __missing__(self, m: int) -> float:
        from scipy.special import gammaincinv

        v = 2.0 * float(gammaincinv(float(m), _TAIL_LEVEL))
        self[m] = v
        return v


_TAIL_CHI2: dict[int, float] = _Chi2Quantiles()


def _tail_rates(srt: np.ndarray, ts: np.ndarray, upper: bool, m: int) -> np.ndarray | None:
    """Exponential-tail estimate of ``P(s > t)`` (``upper``) or ``P(s <= t)`` at thresholds
    ``ts`` beyond the m-th most extreme of the sorted values ``srt`` (NaN elsewhere); None when
    the tail is not continuous (fewer than m distinct values there) or too short."""
    n = srt.size
    if m < 20 or n < 4 * m:
        return None
    tail = srt[-m:] if upper else srt[:m]
    u = float(srt[-m - 1] if upper else srt[m])
    excess = (tail - u) if upper else (u - tail)
    if not np.all(np.isfinite(excess)) or np.unique(tail).size < m:
        return None
    beta = float(np.mean(excess))
    if not beta > 0:
        return None
    # an upper confidence bound on the scale (2 m beta_hat / beta ~ chi^2_{2m} for an
    # exponential tail): a heavier fitted tail, so far-tail events are not chosen on an
    # underestimated denominator (a ratio e^0.1 is otherwise faked by the scale's noise)
    beta *= 2.0 * m / _TAIL_CHI2[m]
    dist = (ts - u) if upper else (u - ts)
    # anchored at the shrunk rate of the m tail values (as the raw counts are), so that the
    # model does not look better than the counts where the two meet
    anchor = float(_cp_upper(np.array([float(m)]), float(n), _SHRINK)[0])
    with np.errstate(all="ignore"):
        est = anchor * np.exp(-dist / beta)
    return np.where(dist > 0, est, np.nan)


def _best_events(
    stat: _Statistic,
    tc: _ThresholdCounts | None,
    pair: int,
    n_est: int,
    alpha_event: float,
    deltas: Sequence[float],
    direction: bool | None = None,
    poisson: bool = False,
) -> list[_Candidate | None]:
    """For each delta: the best threshold event ``{s > t}`` / ``{s <= t}``, direction and
    error split for one statistic (its selection counts ``tc``, :func:`_threshold_counts`),
    judged by the bound it is expected to give on ``n_est`` fresh samples (selection counts
    shrunk to one-sided ``_SHRINK`` Clopper-Pearson bounds so that noisy tail events, whose
    selection ratio is inflated by the maximum over thresholds, are not over-trusted).
    ``direction``: only events with x (True) or x2 (False) the numerator. ``poisson``: pure-DP
    events (delta = 0) are judged by the Poisson conditional test
    (:func:`ldp_audit.stats.epsilon_lower_bound_from_poisson_counts`; no error split)."""
    if tc is None:
        return [None] * len(deltas)
    s1, s2, ts = tc.s1, tc.s2, tc.ts
    n = len(s1)
    best: list[_Candidate | None] = [None] * len(deltas)
    for op, x_num, c_num, c_den, _, _ in tc.combos:
        if direction is not None and x_num != direction:
            continue
        p_num = _cp_lower(c_num.astype(np.float64), float(n), _SHRINK)
        p_den = _cp_upper(c_den.astype(np.float64), float(n), _SHRINK)
        # pure DP (delta = 0) only: the tail model of the denominator (see _TAIL_FIT)
        p_den0 = p_den
        if 0.0 in deltas:
            fit = _tail_rates(s2 if x_num else s1, ts, op == "gt", min(_TAIL_FIT, n // 10))
            if fit is not None:
                p_den0 = np.where(np.isnan(fit), p_den, fit)
        for share in _SHARES:
            lo = _cp_lower(p_num * n_est, float(n_est), alpha_event * share)
            hi = _cp_upper(p_den * n_est, float(n_est), alpha_event * (1.0 - share))
            hi0 = _cp_upper(p_den0 * n_est, float(n_est), alpha_event * (1.0 - share))
            for j, delta in enumerate(deltas):
                if poisson and delta == 0.0:
                    if share != _SHARES[0]:
                        continue  # one joint test: no split to choose
                    pred = _poisson_log_ratio_lower(p_num * n_est, p_den0 * n_est, alpha_event)
                elif delta == 0.0:
                    with np.errstate(all="ignore"):
                        pred = np.where(
                            lo > 0, np.log(np.maximum(lo, 1e-300)) - np.log(hi0), -np.inf
                        )
                else:
                    with np.errstate(all="ignore"):
                        pred = np.where(
                            lo - delta > 0,
                            np.log(np.maximum(lo - delta, 1e-300)) - np.log(hi),
                            -np.inf,
                        )
                i = int(np.argmax(pred))
                cur = best[j]
                if cur is None or pred[i] > cur.predicted:
                    best[j] = _Candidate(
                        pair,
                        stat,
                        op,
                        float(ts[i]),
                        x_num,
                        float(pred[i]),
                        (int(c_num[i]), int(c_den[i])),
                        share,
                        float(delta),
                        sel_rates=(float(p_num[i]), float((p_den0 if delta == 0 else p_den)[i])),
                    )
    return best


#: level of the selection-sample screen that adds a *probe* event (see :func:`_probe_event`).
_PROBE_LEVEL = 0.01


def _probe_event(
    stat: _Statistic,
    tc: _ThresholdCounts | None,
    pair: int,
    n_est: int,
    alpha_event: float,
    claimed: float,
    delta: float,
) -> tuple[_Candidate, float] | None:
    """The threshold event whose selection counts most clearly contradict the claim, with its
    screening p-value, or None when no event's counts do at all.

    The main rule (:func:`_best_events`) shrinks a zero denominator count to its 5% upper
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
    ts = tc.ts
    c = math.exp(min(claimed, 700.0))
    best: tuple[_Candidate, float] | None = None
    for op, x_num, c_num, c_den, n_num, n_den in tc.combos:
        k = np.maximum(c_num.astype(np.float64) - n_num * delta, 0.0)
        j = c_den.astype(np.float64)
        q = c * n_num / (c * n_num + n_den)
        with np.errstate(all="ignore"):
            pval = np.where(k >= 1.0, special.betainc(np.maximum(k, 1.0), j + 1.0, q), 1.0)
        ok = pval < _PROBE_LEVEL
        if not ok.any():
            continue
        p_num = _cp_lower(c_num.astype(np.float64), float(n_num), 0.5)
        p_den = _cp_upper(j, float(n_den), 0.5)
        lo = _cp_lower(p_num * n_est, float(n_est), alpha_event * 0.5)
        hi = _cp_upper(p_den * n_est, float(n_est), alpha_event * 0.5)
        with np.errstate(all="ignore"):
            pred = np.where(
                ok & (lo - delta > 0), np.log(np.maximum(lo - delta, 1e-300)) - np.log(hi), -np.inf
            )
        i = int(np.argmax(pred))
        if not np.isfinite(pred[i]) or (best is not None and pred[i] <= best[0].predicted):
            continue
        best = (
            _Candidate(
                pair,
                stat,
                op,
                float(ts[i]),
                x_num,
                float(pred[i]),
                (int(c_num[i]), int(c_den[i])),
                0.5,
                float(delta),
                sel_rates=(float(p_num[i]), float(p_den[i])),
            ),
            float(pval[i]),
        )
    return best


def _delta_event(
    stat: _Statistic,
    tc: _ThresholdCounts | None,
    pair: int,
    n_est: int,
    alpha_event: float,
    claimed: float,
) -> _Candidate | None:
    """The threshold event (direction, error split) with the largest expected lower bound on
    delta at the claimed epsilon, ``CP_lower(p1) - e^eps CP_upper(p2)`` predicted on ``n_est``
    fresh samples from shrunk selection rates (as :func:`_best_events`), or None when no event
    is expected to show a positive delta. Selection data only (soundness does not depend on
    it). ``predicted`` holds the expected delta bound, comparable only among these events."""
    if tc is None:
        return None
    n = len(tc.s1)
    c = math.exp(min(claimed, 700.0))
    best: _Candidate | None = None
    for op, x_num, c_num, c_den, _, _ in tc.combos:
        p_num = _cp_lower(c_num.astype(np.float64), float(n), _SHRINK)
        p_den = _cp_upper(c_den.astype(np.float64), float(n), _SHRINK)
        for share in _SHARES:
            lo = _cp_lower(p_num * n_est, float(n_est), alpha_event * share)
            hi = _cp_upper(p_den * n_est, float(n_est), alpha_event * (1.0 - share))
            pred = lo - c * hi
            i = int(np.argmax(pred))
            if pred[i] > 0 and (best is None or pred[i] > best.predicted):
                best = _Candidate(
                    pair,
                    stat,
                    op,
                    float(tc.ts[i]),
                    x_num,
                    float(pred[i]),
                    (int(c_num[i]), int(c_den[i])),
                    share,
                    sel_rates=(float(p_num[i]), float(p_den[i])),
                )
    return best


def _pool(
    fwd_half: tuple[_Candidate, np.ndarray, np.ndarray],
    rev_half: tuple[_Candidate, np.ndarray, np.ndarray],
    n_est: int,
    alpha_event: float,
    delta: float,
    poisson: bool = False,
) -> _Candidate | None:
    """The pooled candidate of a forward (x numerator) and a reverse event of one pair, each
    with the held-out selection values (under x, under x2) of its statistic: its bound is
    expected from counts on those held-out values (not the ones that chose the thresholds, so
    the maximum over thresholds does not inflate it), pooled over both events (shrunk as in
    ``_best_events``), predicted at ``2 n_est`` trials, best error split."""
    fwd, f1, f2 = fwd_half
    rev, r1, r2 = rev_half
    # forward: x the numerator (f1 under x); reverse: x2 the numerator (r2 under x2)
    c_num = float(np.count_nonzero(fwd.indicator(f1)) + np.count_nonzero(rev.indicator(r2)))
    c_den = float(np.count_nonzero(fwd.indicator(f2)) + np.count_nonzero(rev.indicator(r1)))
    n2 = float(len(f1) + len(r1))
    p_num = float(_cp_lower(np.array([c_num]), n2, _SHRINK)[0])
    p_den = float(_cp_upper(np.array([c_den]), n2, _SHRINK)[0])
    nt = 2.0 * n_est
    best: _Candidate | None = None
    for share in _SHARES:
        if poisson:  # (delta = 0 only) one joint test of the pooled Poisson counts
            if share != _SHARES[0]:
                continue
            pred = float(
                _poisson_log_ratio_lower(
                    np.array([p_num * nt]), np.array([p_den * nt]), alpha_event
                )[0]
            )
            if not math.isfinite(pred):
                continue
        else:
            lo = float(_cp_lower(np.array([p_num * nt]), nt, alpha_event * share)[0]) - delta
            hi = float(_cp_upper(np.array([p_den * nt]), nt, alpha_event * (1.0 - share))[0])
            if lo <= 0 or hi <= 0:
                continue
            pred = math.log(lo) - math.log(hi)
        if best is None or pred > best.predicted:
            best = _Candidate(
                fwd.pair,
                fwd.stat,
                fwd.op,
                fwd.t,
                True,
                pred,
                (int(c_num), int(c_den)),
                share,
                delta,
                partner=rev,
                sel_rates=(p_num, p_den),
            )
    return best


# ----------------------------------------------------------------------------------------------
# sampling
# ----------------------------------------------------------------------------------------------


def _privatize_rows(
    mechanism: Any, x: np.ndarray, n: int, rng: np.random.Generator, raw: bool = False
) -> Any:
    """One privatize call on n copies of x; output coerced to float64 (n, k). ``raw``: return
    ``(coerced, as returned)`` (the latter for user statistics).

    Errors raised by the user's code come back as :class:`UserCodeError` naming the object, the
    input and the reason (the original exception is the ``__cause__``); errors of ldp-audit's own
    validation (an :class:`LdpAuditError`) pass through unchanged.
    """
    who = f"mechanism.privatize of {type(mechanism).__name__}"
    try:
        y = mechanism.privatize(np.repeat(x[None, :], n, axis=0), rng)
    except LdpAuditError:
        raise
    except Exception as exc:  # noqa: BLE001 - user code: wrapped with context, cause kept
        raise UserCodeError(
            f"{who} raised {type(exc).__name__} on input x = {_short(x.tolist())} ({n} rows): {exc}"
        ) from exc
    try:
        y = np.asarray(y)
    except Exception as exc:  # noqa: BLE001 - e.g. ragged lists
        raise UserCodeError(f"{who} returned something that is not an array: {exc}") from exc
    if y.dtype == object or y.dtype.kind not in "biuf":
        raise UserCodeError(
            f"{who} must return real numbers, got dtype {y.dtype} for input "
            f"x = {_short(x.tolist())} (first value {y.ravel()[:1].tolist()!r})"
        )
    returned = y
    if y.ndim == 1:
        y = y[:, None]
    if y.ndim != 2 or y.shape[0] != n:
        raise InvalidParameterError(
            f"mechanism.privatize must return an array of shape (n, k) with n = {n} rows for "
            f"an (n, d) input, got shape {y.shape}"
        )
    if y.dtype != np.float64:
        y = y.astype(np.float64)
    return (y, returned) if raw else y


def _chunks(n: int, d: int) -> list[int]:
    size = max(1024, _CHUNK_ELEMENTS // max(1, d))
    out = [size] * (n // size)
    if n % size:
        out.append(n % size)
    return out


def _sample(
    mechanism: Any, x: np.ndarray, n: int, rng: np.random.Generator, width: int
) -> np.ndarray:
    parts = [_privatize_rows(mechanism, x, m, rng) for m in _chunks(n, width)]
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _stream_values(
    mechanism: Any,
    x: np.ndarray,
    n: int,
    rng: np.random.Generator,
    stats: Sequence[_Statistic],
    tick: Callable[[int], None],
    width: int,
) -> list[np.ndarray]:
    """Statistic values of n fresh outputs of M(x), computed chunk by chunk."""
    acc: list[list[np.ndarray]] = [[] for _ in stats]
    for m in _chunks(n, width):
        y, raw = _privatize_rows(mechanism, x, m, rng, raw=True)
        for a, st in zip(acc, stats, strict=True):
            a.append(st.values(raw if st.needs_raw else y))
        tick(m)
    return [np.concatenate(a) for a in acc]


@dataclass
class _Joint:
    """The intersection of two events (counted to make a pooled pair's events disjoint)."""

    a: _Candidate
    b: _Candidate


def _stream_counts(
    mechanism: Any,
    x: np.ndarray,
    n: int,
    rng: np.random.Generator,
    events: Sequence[_Candidate | _Joint],
    tick: Callable[[int], None],
    width: int,
) -> list[int]:
    counts = [0] * len(events)
    for m in _chunks(n, width):
        y, raw = _privatize_rows(mechanism, x, m, rng, raw=True)
        cache: dict[int, np.ndarray] = {}

        def hits(
            ev: _Candidate, y: np.ndarray = y, raw: Any = raw, cache: dict[int, np.ndarray] = cache
        ):
            key = id(ev.stat)
            if key not in cache:
                cache[key] = ev.stat.values(raw if ev.stat.needs_raw else y)
            return ev.indicator(cache[key])

        for i, ev in enumerate(events):
            if isinstance(ev, _Joint):
                counts[i] += int(np.count_nonzero(hits(ev.a) & hits(ev.b)))
            else:
                counts[i] += int(np.count_nonzero(hits(ev)))
        tick(m)
    return counts


# ----------------------------------------------------------------------------------------------
# public API
# ----------------------------------------------------------------------------------------------


def _as_pair(pair: Any, i: int) -> tuple[np.ndarray, np.ndarray]:
    try:
        x, x2 = pair
    except (TypeError, ValueError):
        raise InvalidParameterError(
            f"pairs[{i}] must be a pair (x, x2) of 1-D input arrays, got {pair!r}"
        ) from None
    out = []
    for v, name in ((x, "x"), (x2, "x2")):
        try:  # strings, objects, ragged lists: named, not a raw ValueError
            a = np.asarray(v, dtype=np.float64) if not isinstance(v, np.ndarray) else v
            if a.ndim == 0:
                a = a.reshape(1)
            if a.ndim != 1 or a.size == 0:
                raise InvalidParameterError(
                    f"pairs[{i}] {name} must be a non-empty 1-D array, got shape {np.shape(v)}"
                )
            a = np.asarray(a, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            if isinstance(exc, InvalidParameterError):
                raise
            raise InvalidParameterError(
                f"pairs[{i}] {name} must be a 1-D array of real numbers, got {v!r}"
            ) from None
        if not np.all(np.isfinite(a)):
            raise InvalidParameterError(f"pairs[{i}] {name} must be finite, got {a.tolist()!r}")
        out.append(a)
    if out[0].shape != out[1].shape:
        raise InvalidParameterError(
            f"pairs[{i}] x and x2 must have the same length, got {out[0].size} and {out[1].size}"
        )
    return out[0], out[1]


def default_pairs(mechanism: Any, dim: int | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """The mechanism's declared ``candidate_pairs(dim)``, de-duplicated.

    Raises:
        InvalidParameterError: the mechanism declares no domain (no ``candidate_pairs``).
    """
    fn = getattr(mechanism, "candidate_pairs", None)
    if not callable(fn):
        raise InvalidParameterError(
            "pairs must be given for a mechanism that declares no input domain: pass "
            "pairs=[(x, x2), ...] (neighbouring inputs to compare), or give the mechanism a "
            f"candidate_pairs(dim) method; got a {type(mechanism).__name__} without one"
        )
    if dim is not None:
        dim = check_int(dim, "dim", minimum=1, maximum=MAX_DIM)
    d = dim if dim is not None else _user_attr(mechanism, "dim", None) or 1
    try:
        raw = list(fn(d))
    except LdpAuditError:
        raise
    except Exception as exc:  # noqa: BLE001 - user code
        raise UserCodeError(
            f"mechanism.candidate_pairs({d!r}) of {type(mechanism).__name__} raised "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    out: list[tuple[np.ndarray, np.ndarray]] = []
    seen: set[bytes] = set()
    for i, p in enumerate(raw):
        x, x2 = _as_pair(p, i)
        key = np.concatenate([x + 0.0, x2 + 0.0]).tobytes()
        if key not in seen:
            seen.add(key)
            out.append((x, x2))
    if not out:
        raise InvalidParameterError("mechanism.candidate_pairs returned no pairs")
    return out


def _mechanism_label(mechanism: Any) -> str:
    to_config = getattr(mechanism, "to_config", None)
    if callable(to_config):
        try:
            cfg = to_config()
            return ", ".join(f"{k}={v}" for k, v in cfg.items())
        except Exception:  # noqa: BLE001 - a user's to_config may fail; the label is cosmetic
            pass
    return type(mechanism).__name__


def _user_attr(mechanism: Any, name: str, default: Any = None) -> Any:
    """``getattr`` on a user's object; an exception in a property becomes a UserCodeError."""
    try:
        return getattr(mechanism, name, default)
    except Exception as exc:  # noqa: BLE001 - user code
        raise UserCodeError(
            f"mechanism.{name} of {type(mechanism).__name__} raised {type(exc).__name__}: {exc}"
        ) from exc


def _check_mechanism(mechanism: Any) -> tuple[float, float]:
    if not callable(_user_attr(mechanism, "privatize")) or not hasattr(mechanism, "epsilon"):
        raise InvalidParameterError(
            "mechanism must have an epsilon attribute and a privatize(x, rng) method, got "
            f"{type(mechanism).__name__}"
        )
    raw = _user_attr(mechanism, "epsilon")
    eps = check_real(raw, "mechanism.epsilon")
    if math.isnan(eps) or eps < 0:
        raise InvalidParameterError(f"mechanism.epsilon must be >= 0, got {raw!r}")
    if math.isinf(eps):
        raise InvalidParameterError(
            f"mechanism.epsilon is {raw!r}: a mechanism that claims no privacy has no claim to "
            "audit (every lower bound is below inf). Give the epsilon the mechanism is meant to "
            "satisfy; for a non-private baseline there is nothing to audit"
        )
    raw_delta = _user_attr(mechanism, "delta", 0.0)
    delta = 0.0 if raw_delta is None else check_real(raw_delta, "mechanism.delta")
    if not 0.0 <= delta < 1.0:
        raise InvalidParameterError(f"mechanism.delta must be in [0, 1), got {raw_delta!r}")
    return eps, delta


def _claimed_profile(
    mechanism: Any, claimed: float, delta: float, deltas: Sequence[float]
) -> tuple[tuple[float, ...], str]:
    fn = _user_attr(mechanism, "epsilon_at")
    if callable(fn):
        out = []
        for d in deltas:
            try:
                v = fn(d)
            except Exception as exc:  # noqa: BLE001 - user code
                raise UserCodeError(
                    f"mechanism.epsilon_at({d!r}) of {type(mechanism).__name__} raised "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            out.append(check_real(v, f"mechanism.epsilon_at({d!r})"))
        return tuple(out), "epsilon_at"
    return tuple(claimed if d >= delta else math.inf for d in deltas), "single point"


def _consequences(
    dist: tuple[float, bool], impl: tuple[float, bool, str] | None
) -> tuple[str, str | None]:
    d_bound, d_viol = dist
    if d_viol:
        d_text = (
            "The output distribution itself violates the claim (exact-arithmetic reading): the "
            "mechanism's mathematics or calibration is wrong (noise too small, sensitivity "
            "underestimated, a wrong formula). This is not a floating-point artefact."
        )
    else:
        d_text = (
            "No violation found in the output distribution read in exact arithmetic. This "
            "proves nothing beyond this test's power."
        )
    if impl is None:
        return d_text, None
    i_bound, i_viol, family = impl
    if not i_viol:
        i_text = (
            "No violation found in the outputs as computed (floating-point bit cells "
            "included). This proves nothing beyond this test's power."
        )
    elif d_viol:
        i_text = (
            "The implementation violates the claim, and the distributional audit of the same "
            "samples already shows it: this is (at least) a calibration error, not only a "
            "floating-point leak."
        )
        if family == "float-bits" and i_bound > d_bound:
            i_text += (
                " The floating-point bits leak further on top of it (Mironov 2012); fixing the "
                "calibration alone will not remove that part."
            )
    else:
        i_text = (
            "The implementation leaks through its floating-point representation (Mironov "
            "2012): outputs of M(x) and M(x2) occupy different sets of doubles, so whoever "
            "sees exact outputs can tell the inputs apart beyond the claim. The exact-arithmetic "
            "audit of the same samples showed no violation, so the mathematics may be right; a "
            "float-safe implementation (snapping, discrete noise on a grid) removes the leak."
        )
    return d_text, i_text


#: estimated audit time (seconds) above which :func:`audit` refuses unless ``force=True``.
_MAX_SECONDS = 3 * 3600.0
#: per input, at most this many outputs are used for selection (their statistic values are
#: held in memory); the rest of ``samples`` estimates, streamed in chunks (memory bounded).
_MAX_SELECTION = 2_000_000


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
            pair's selection samples).
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
            mode's numbers stay as they were); ignored for pure claims.

    Returns:
        The :class:`AuditResult`.

    Raises:
        InvalidParameterError: invalid arguments (types are checked: ``'1'`` and ``True`` are
            not numbers, ``'no'`` is not a bool), a mechanism without ``privatize`` /
            ``epsilon``, a claim of epsilon = inf, no pairs for a mechanism that declares no
            domain, malformed outputs, an audit estimated to run for hours without ``force``.
        UserCodeError: the user's code raised, returned non-numbers or only NaN/inf.
    """
    start = time.perf_counter()
    claimed, delta = _check_mechanism(mechanism)
    conf = check_probability(confidence, "confidence")
    samples = check_int(samples, "samples", minimum=1000)
    frac = check_probability(selection_fraction, "selection_fraction")
    max_events = check_int(max_events, "max_events", minimum=1)
    if dim is not None:
        dim = check_int(dim, "dim", minimum=1, maximum=MAX_DIM)
    float_bits = check_bool(float_bits, "float_bits")
    want_profile = delta > 0 if profile is None else check_bool(profile, "profile")
    pool = check_bool(pool, "pool")
    want_tradeoff = check_bool(tradeoff, "tradeoff")
    if not isinstance(ratio_test, str) or ratio_test not in RATIO_TESTS:
        raise InvalidParameterError(
            f"ratio_test must be one of {', '.join(map(repr, RATIO_TESTS))}, got {ratio_test!r}"
        )
    poisson = ratio_test == "poisson"
    force = check_bool(force, "force")
    progress = check_bool(progress, "progress")
    sequential = check_bool(sequential, "sequential")
    delta_event = check_bool(delta_event, "delta_event")
    user_fns = _statistic_list(statistics, "statistics")
    mech_fns: list[tuple[Callable[..., Any], str]] = []
    shipped = _user_attr(mechanism, "audit_statistics")
    if callable(shipped):
        try:
            got = shipped()
        except Exception as exc:  # noqa: BLE001 - user code
            raise UserCodeError(
                f"mechanism.audit_statistics() of {type(mechanism).__name__} raised "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        mech_fns = _statistic_list(got, "mechanism.audit_statistics()")
    stat_fns = mech_fns + user_fns
    names = [nm for _, nm in stat_fns]
    dup = sorted({nm for nm in names if names.count(nm) > 1})
    if dup:
        raise InvalidParameterError(
            f"statistics: two statistics are named {dup[0]!r}; give each a distinct name "
            "(a name attribute) so the witness says which one it was"
        )
    if rng is None or (isinstance(rng, (int, np.integer)) and not isinstance(rng, bool)):
        rng = np.random.default_rng(rng)
    elif not isinstance(rng, np.random.Generator):
        raise InvalidParameterError(
            f"rng must be a numpy.random.Generator, an int seed or None, got {type(rng).__name__}"
        )
    if sequential:
        return _audit_sequential(
            mechanism,
            pairs,
            samples=samples,
            confidence=conf,
            rng=rng,
            dim=dim,
            selection_fraction=frac,
            max_events=max_events,
            float_bits=float_bits,
            profile=profile,
            pool=pool,
            ratio_test=ratio_test,
            tradeoff=want_tradeoff,
            force=force,
            progress=progress,
            statistics=[fn for fn, _ in user_fns],
            delta_event=delta_event,
            start=start,
        )
    if pairs is None:
        pair_list = default_pairs(mechanism, dim)
    else:
        try:
            n_pairs = len(pairs)
        except TypeError:
            raise InvalidParameterError(
                f"pairs must be a list of (x, x2) pairs, got {type(pairs).__name__}"
            ) from None
        if n_pairs == 0:
            raise InvalidParameterError("pairs must contain at least one (x, x2) pair, got []")
        pair_list = [_as_pair(p, i) for i, p in enumerate(pairs)]
        if all(np.array_equal(a, b) for a, b in pair_list):
            raise InvalidParameterError(
                "pairs: every pair has x == x2, so the audit could show nothing; give "
                "neighbouring inputs that differ"
            )

    n_est = estimation_samples(samples, frac)
    n_sel = samples - n_est
    if n_est < 200:
        raise InvalidParameterError(
            f"selection_fraction leaves {n_est} estimation samples; need >= 200 "
            f"(samples={samples}, selection_fraction={frac})"
        )
    n_a = n_sel // 2
    n_b = n_sel - n_a
    alpha = 1.0 - conf
    alpha_sel = alpha / (max_events + int(float_bits))
    if not poisson:  # (Poissonized disjoint pairs are valid at any level)
        pool = pool and (1.0 - min(_SHARES)) * alpha < POOLED_MAX_ALPHA
    pois_v = poisson and delta == 0.0  # the verdicts' events use the joint Poisson test
    delta_event = delta_event and delta > 0
    profile_deltas: tuple[float, ...] = ()
    if want_profile:
        profile_deltas = tuple(sorted({*_PROFILE_DELTAS, delta}))
    warn: list[str] = []
    top_bound = max_refutable_epsilon(n_est, conf, pool)
    if claimed >= top_bound:
        warn.append(
            f"a claim of epsilon {claimed:.6g} cannot be refuted with {n_est} estimation "
            f"samples per input: no bound can exceed {top_bound:.3g} here, so 'no violation' "
            "is vacuous; refuting it needs more than e^epsilon samples per input"
        )
    reproducible = bool(_user_attr(mechanism, "reproducible", True))
    if not reproducible:
        warn.append(
            "the mechanism is not reproducible from the seed (it draws its own randomness); "
            "rerunning with the same seed gives a different sample, with the same guarantee"
        )

    from tqdm.auto import tqdm

    total = 2 * n_sel * len(pair_list) + 2 * n_est * min(len(pair_list), max_events + 1)
    bar = tqdm(total=total, disable=not progress, unit="sample", desc="audit", leave=False)
    n_nonfinite = 0
    try:
        # ---- selection -------------------------------------------------------------------
        streams = rng.spawn(len(pair_list))
        dist_cands: list[_Candidate] = []
        float_cands: list[_Candidate] = []
        probe: tuple[_Candidate, float] | None = None
        d_best: _Candidate | None = None
        prof_best: list[_Candidate | None] = [None] * len(profile_deltas)
        tradeoff_q: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        est_rngs: list[tuple[np.random.Generator, np.random.Generator]] = []
        widths: list[int] = []
        for p, (x, x2) in enumerate(pair_list):
            ra1, ra2, rb1, rb2, re1, re2 = streams[p].spawn(6)
            est_rngs.append((re1, re2))
            # width of one output row, from a small probe, so chunks stay ~2^22 values even
            # when outputs are much wider than inputs (one-hot encodings)
            y8, raw8 = _privatize_rows(mechanism, x, 8, ra1, raw=True)
            width = max(x.shape[0], y8.shape[1])
            user_stats: list[_Statistic] = [_UserStatistic(fn, nm, x, x2) for fn, nm in stat_fns]
            for st in user_stats:  # shape / finiteness checked on 8 outputs before the work
                st.values(raw8)
            del y8, raw8
            widths.append(width)
            n_a_p = min(n_a, max(1000, _FIT_ELEMENTS // width))
            t_a = time.perf_counter()
            ya1 = _sample(mechanism, x, n_a_p, ra1, width)
            ya2 = _sample(mechanism, x2, n_a_p, ra2, width)
            if p == 0 and not force:
                rate = 2 * n_a_p / max(time.perf_counter() - t_a, 1e-9)
                est = total / rate
                if est > _MAX_SECONDS:
                    raise InvalidParameterError(
                        f"samples={samples} would take about {est / 3600:.1f} hours "
                        f"({total:.3g} outputs at the measured {rate:.3g} outputs/s over "
                        f"{len(pair_list)} pair(s)); lower samples, or pass force=True "
                        "(--force) to run it anyway"
                    )
            if ya1.shape[1] != ya2.shape[1]:
                raise InvalidParameterError(
                    f"mechanism.privatize returned {ya1.shape[1]} and {ya2.shape[1]} columns for "
                    f"the two inputs of pairs[{p}]; outputs must have one shape"
                )
            fin1, fin2 = np.isfinite(ya1).all(axis=1), np.isfinite(ya2).all(axis=1)
            if not (fin1.any() or fin2.any()):
                raise UserCodeError(
                    f"mechanism.privatize of {type(mechanism).__name__} returned only NaN/inf "
                    f"outputs for pairs[{p}] (x = {_short(x.tolist())}, x2 = "
                    f"{_short(x2.tolist())}); a mechanism must release real numbers"
                )
            n_nonfinite += int((~fin1).sum() + (~fin2).sum())
            bar.update(2 * n_a)  # (counted as drawn even when capped for wide outputs)
            snap = _Snap.fit(ya1, ya2)
            sa1, sa2 = snap(ya1), snap(ya2)
            inner, j, discrete = _build_statistics(x, x2, sa1, sa2)
            pooled_a = np.concatenate([ya1, ya2])
            dist_stats: list[_Statistic] = [_Snapped(st, snap, pooled_a) for st in inner]
            float_stats: list[_Statistic] = []
            if float_bits and not discrete:
                float_stats.append(_float_cell_statistic(ya1, ya2, j, ya1.shape[1]))
            del ya1, ya2, sa1, sa2, pooled_a
            stats = dist_stats + float_stats + user_stats
            sb1 = _stream_values(mechanism, x, n_b, rb1, stats, bar.update, width)
            sb2 = _stream_values(mechanism, x2, n_b, rb2, stats, bar.update, width)
            halves: dict[bool, tuple[_Candidate, np.ndarray, np.ndarray]] = {}
            h_b = n_b // 2
            for st, v1, v2 in zip(stats, sb1, sb2, strict=True):
                is_float = st.family == "float-bits"
                tc = _threshold_counts(v1, v2)
                c = _best_events(st, tc, p, n_est, alpha_sel, (delta,), poisson=pois_v)[0]
                if c is not None:
                    (float_cands if is_float else dist_cands).append(c)
                if not is_float:
                    pr = _probe_event(st, tc, p, n_est, alpha_sel, claimed, delta)
                    if pr is not None and (probe is None or pr[0].predicted > probe[0].predicted):
                        probe = pr
                if delta_event and not is_float:
                    dc = _delta_event(st, tc, p, n_est, alpha_sel, claimed)
                    if dc is not None and (d_best is None or dc.predicted > d_best.predicted):
                        d_best = dc
                if pool and not is_float and h_b >= 100:
                    # each half of a pooled pair is chosen on the first half of B, judged at
                    # the pooled sample size; the pair is then judged on the second half
                    tch = _threshold_counts(v1[:h_b], v2[:h_b])
                    for d_ in (True, False):
                        h = _best_events(st, tch, p, 2 * n_est, alpha_sel, (delta,), d_, pois_v)[0]
                        if h is not None and (
                            d_ not in halves or h.predicted > halves[d_][0].predicted
                        ):
                            halves[d_] = (h, v1[h_b:], v2[h_b:])
                if profile_deltas and not is_float:
                    alpha_p = alpha / len(profile_deltas)
                    for i, c in enumerate(_best_events(st, tc, p, n_est, alpha_p, profile_deltas)):
                        if c is not None and (
                            prof_best[i] is None or c.predicted > prof_best[i].predicted
                        ):
                            prof_best[i] = c
                if want_tradeoff and not is_float:
                    # thresholds at type I levels of either input (the direction is known
                    # only once the verdict's event is chosen), from selection values only
                    lv = np.array([*_TRADEOFF_LEVELS, *(1.0 - np.array(_TRADEOFF_LEVELS))])
                    lv = lv[(lv * n_b >= 5) & ((1.0 - lv) * n_b >= 5)]
                    tradeoff_q[id(st)] = (
                        np.quantile(v1, lv, method="inverted_cdf"),
                        np.quantile(v2, lv, method="inverted_cdf"),
                    )
            if len(halves) == 2:
                pc = _pool(halves[True], halves[False], n_est, alpha_sel, delta, pois_v)
                if pc is not None:
                    dist_cands.append(pc)
        chosen = _choose(dist_cands, max_events)
        best_dist = max((c.predicted for c in chosen), default=-math.inf)
        if probe is not None and probe[0].key() not in {c.key() for c in chosen}:
            # the selection counts contradict the claim on an event the main rule did not
            # choose (its denominator is too rare for the selection sample): estimate it too
            chosen.append(probe[0])
        if d_best is not None and d_best.key() not in {c.key() for c in chosen}:
            # delta_event: the event judged by the delta it is expected to show at the claimed
            # epsilon (a bulk event; the rule above favours the largest ratio)
            chosen.append(d_best)
        float_chosen = [c for c in _choose(float_cands, 1) if c.predicted > max(best_dist, 0.0)]
        verdict_events = chosen + float_chosen
        prof_events: list[_Candidate] = []
        seen_keys: set[tuple[int, int, str, float, bool]] = set()
        for c in prof_best:
            if c is not None and c.key() not in seen_keys:
                seen_keys.add(c.key())
                prof_events.append(c)
        # the f-DP curve: threshold events of the best distribution event's statistic
        tradeoff_events: list[_Candidate] = []
        if want_tradeoff and chosen and id(chosen[0].stat) in tradeoff_q:
            tradeoff_events = _tradeoff_events(chosen[0], tradeoff_q[id(chosen[0].stat)])
        # ---- estimation on fresh samples (one pass per input serves verdicts and profile) ----
        all_events = verdict_events + prof_events + tradeoff_events
        by_pair: dict[int, list[_Candidate | _Joint]] = {}
        joints: dict[int, _Joint] = {}
        for c in all_events:
            by_pair.setdefault(c.pair, []).append(c)
            if c.partner is not None:
                by_pair[c.pair].append(c.partner)
                if poisson:  # the pair's events are made disjoint: count the intersection
                    joints[id(c)] = _Joint(c, c.partner)
                    by_pair[c.pair].append(joints[id(c)])
        bar.total = 2 * n_sel * len(pair_list) + 2 * n_est * len(by_pair)
        bar.refresh()
        results: dict[int, tuple[int, int]] = {}
        sizes: dict[int, tuple[int, int]] = {}
        arrivals: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for p, evs in by_pair.items():
            if poisson and delta > 0:
                # the augmentation's Poisson processes (rate n delta for single events, 2 n delta
                # for pooled pairs) on [0, 1], from their own stream, independent of the counts
                g = streams[p].spawn(1)[0]
                arrivals[p] = (
                    g.uniform(size=int(g.poisson(n_est * delta))),
                    g.uniform(size=int(g.poisson(2.0 * n_est * delta))),
                )
            x, x2 = pair_list[p]
            re1, re2 = est_rngs[p]
            # Poissonization: the sample sizes are Poisson(n_est), drawn before any output
            n1_p = int(re1.poisson(n_est)) if poisson else n_est
            n2_p = int(re2.poisson(n_est)) if poisson else n_est
            sizes[p] = (n1_p, n2_p)
            k_x = _stream_counts(mechanism, x, n1_p, re1, evs, bar.update, widths[p])
            k_x2 = _stream_counts(mechanism, x2, n2_p, re2, evs, bar.update, widths[p])
            for ev, a, b in zip(evs, k_x, k_x2, strict=True):
                results[id(ev)] = (a, b)
    finally:
        bar.close()

    m = len(verdict_events)
    bounds: list[float] = []
    per_event: list[tuple[float, Witness]] = []
    for ev in verdict_events:
        a, b = results[id(ev)]
        k_num, k_den = (a, b) if ev.x_is_numerator else (b, a)
        n1_p, n2_p = sizes[ev.pair]
        n_w, n_w2 = (n1_p, n2_p) if ev.x_is_numerator else (n2_p, n1_p)
        event_text = ev.stat.describe(ev.op, ev.t)
        test = ("poisson" if delta == 0 else "poisson-augmented") if poisson else "clopper-pearson"
        if ev.partner is not None and poisson:
            # pooled, Poissonized: S \ S' (x numerator) and S' \ S (x2 numerator) are disjoint,
            # so both pooled counts are independent Poisson counts with means n_est * rate
            a2, b2 = results[id(ev.partner)]
            i1, i2 = results[id(joints[id(ev)])]
            k_num, k_den = (a - i1) + (b2 - i2), (b - i2) + (a2 - i1)
            n_w = n_w2 = n1_p + n2_p
            if delta > 0:
                bnd = epsilon_lower_bound_from_poisson_counts_delta(
                    k_num,
                    k_den,
                    alpha / m,
                    delta_count=2.0 * n_est * delta,
                    arrivals=arrivals[ev.pair][1],
                )
            else:
                bnd = float(
                    epsilon_lower_bound_from_poisson_counts(
                        k_num, k_den, alpha / m, mean1=n_est, mean2=n_est
                    )
                )
            event_text = (
                f"{event_text} with x the numerator, pooled with "
                f"{ev.partner.stat.describe(ev.partner.op, ev.partner.t)} with x2 the numerator "
                "(each without the other's outputs)"
            )
        elif ev.partner is not None:
            # pooled: S (x numerator) counted with S' (x2 numerator) on the same outputs
            a2, b2 = results[id(ev.partner)]
            k_num, k_den, n_w = a + b2, b + a2, 2 * n_est
            n_w2 = n_w
            bnd = float(
                epsilon_lower_bound_from_pooled_counts(
                    k_num, k_den, n_w, alpha / m, delta=delta, numerator_share=ev.share
                )
            )
            event_text = (
                f"{event_text} with x the numerator, pooled with "
                f"{ev.partner.stat.describe(ev.partner.op, ev.partner.t)} with x2 the numerator"
            )
        elif poisson and delta > 0:
            bnd = epsilon_lower_bound_from_poisson_counts_delta(
                k_num, k_den, alpha / m, delta_count=n_est * delta, arrivals=arrivals[ev.pair][0]
            )
        elif pois_v:
            bnd = float(
                epsilon_lower_bound_from_poisson_counts(
                    k_num, k_den, alpha / m, mean1=n_est, mean2=n_est
                )
            )
        else:
            bnd = float(
                epsilon_lower_bound_from_counts(
                    k_num, n_w, k_den, n_w2, alpha / m, delta=delta, numerator_share=ev.share
                )
            )
        bounds.append(bnd)
        x, x2 = pair_list[ev.pair]
        xn, xd = (x, x2) if ev.x_is_numerator else (x2, x)
        per_event.append(
            (
                bnd,
                Witness(
                    x=tuple(float(v) for v in xn),
                    x2=tuple(float(v) for v in xd),
                    event=event_text,
                    family=ev.stat.family,
                    k1=k_num,
                    n1=n_w,
                    k2=k_den,
                    n2=n_w2,
                    numerator_share=ev.share,
                    pooled=ev.partner is not None,
                    test=test,
                ),
            )
        )

    def best_of(items: list[tuple[float, Witness]]) -> tuple[float, Witness | None]:
        if not items:
            return 0.0, None
        b, w = max(items, key=lambda t: t[0])
        return max(0.0, b), w

    d_bound, d_wit = best_of(per_event[: len(chosen)])
    d_viol = d_bound > claimed
    impl_info = None
    if float_bits:
        i_bound, i_wit = best_of(per_event)
        impl_info = (i_bound, i_bound > claimed, i_wit.family if i_wit else "")
    d_text, i_text = _consequences((d_bound, d_viol), impl_info)
    distribution = Verdict(
        "distribution", d_bound, claimed, d_viol, d_wit, d_text, events_estimated=len(chosen)
    )
    implementation = None
    if float_bits and impl_info is not None and i_text is not None:
        implementation = Verdict(
            "implementation", i_bound, claimed, impl_info[1], i_wit, i_text, events_estimated=m
        )
    top = implementation if implementation is not None else distribution

    prof = None
    if profile_deltas:
        m_p = max(1, len(prof_events))
        lowers = np.zeros(len(profile_deltas))
        for ev in prof_events:
            a, b = results[id(ev)]
            k_num, k_den = (a, b) if ev.x_is_numerator else (b, a)
            n1_p, n2_p = sizes[ev.pair]
            nn, nd = (n1_p, n2_p) if ev.x_is_numerator else (n2_p, n1_p)
            for i, dl in enumerate(profile_deltas):
                v = float(
                    epsilon_lower_bound_from_counts(
                        k_num, nn, k_den, nd, alpha / m_p, delta=dl, numerator_share=ev.share
                    )
                )
                lowers[i] = max(lowers[i], v)
        claimed_curve, source = _claimed_profile(mechanism, claimed, delta, profile_deltas)
        prof = PrivacyProfile(
            delta=profile_deltas,
            epsilon_lower=tuple(float(v) for v in lowers),
            epsilon_claimed=claimed_curve,
            confidence=conf,
            events_estimated=len(prof_events),
            claimed_from=source,
        )
    curve = None
    if tradeoff_events:
        curve = _tradeoff_curve(
            mechanism, claimed, delta, tradeoff_events, results, sizes, pair_list, alpha, conf
        )
    delta_lb, delta_conf, delta_joint = None, None, False
    if delta > 0 and verdict_events:
        delta_lb, delta_joint = _delta_lower_bound(
            verdict_events, results, sizes, joints, claimed, alpha, poisson, n_est
        )
        delta_conf = conf
    if top.epsilon_lower_bound == 0.0:
        warn.append(
            "no statistic separated the pair(s) at all: the lower bound is exactly 0. Either "
            "the outputs do not depend on the input, or the dependence lies in a structure "
            "none of the statistics computes (e.g. a hashed report (y, seed) whose event "
            "{y = H_seed(x)} needs the hash): pass statistics=[stat] with stat(outputs, x, "
            "x_prime) -> one score per output row that computes it"
        )
    if n_nonfinite:
        warn.append(
            f"{n_nonfinite} of the selection outputs were NaN or inf (scored as +inf by every "
            "statistic); a mechanism should release real numbers"
        )
    return AuditResult(
        epsilon_lower_bound=top.epsilon_lower_bound,
        claimed_epsilon=claimed,
        confidence=conf,
        samples=samples,
        witness=top.witness,
        seconds=time.perf_counter() - start,
        delta=delta,
        mechanism=_mechanism_label(mechanism),
        pairs_tested=len(pair_list),
        events_estimated=m,
        selection_samples=n_sel,
        float_bits=float_bits,
        bounds=tuple(bounds),
        distribution=distribution,
        implementation=implementation,
        profile=prof,
        warnings=tuple(warn),
        reproducible=reproducible,
        tradeoff=curve,
        delta_lower_bound=delta_lb,
        delta_confidence=delta_conf,
        delta_in_verdict=delta_joint,
        resolution_probability=math.exp(-top_bound),
        max_refutable_epsilon=top_bound,
        statistics=tuple(names),
    )


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


def _audit_sequential(
    mechanism: Any,
    pairs: Sequence[tuple[Any, Any]] | None,
    *,
    samples: int,
    confidence: float,
    rng: np.random.Generator,
    start: float,
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
    """
    alpha = 1.0 - confidence
    schedule = sequential_schedule(samples)
    gens = rng.spawn(len(schedule))
    claimed, _ = _check_mechanism(mechanism)
    pool = bool(kwargs.get("pool"))
    frac = kwargs["selection_fraction"]
    stages: list[dict[str, Any]] = []
    results: list[AuditResult] = []
    stopped = "budget spent"
    for k, (n_k, g) in enumerate(zip(schedule, gens, strict=True), start=1):
        a_k = sequential_alpha(alpha, k)
        r = audit(mechanism, pairs, samples=n_k, confidence=1.0 - a_k, rng=g, **kwargs)
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
    from dataclasses import replace

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


def _delta_lower_bound(
    events: Sequence[_Candidate],
    results: dict[int, tuple[int, int]],
    sizes: dict[int, tuple[int, int]],
    joints: dict[int, _Joint],
    claimed: float,
    alpha: float,
    poisson: bool,
    n_est: int,
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
    from ldp_audit.stats import (
        clopper_pearson_lower,
        clopper_pearson_upper,
        pooled_rate_lower,
        pooled_rate_upper,
    )

    m = len(events)
    c = math.exp(min(claimed, 700.0))
    best = 0.0
    for ev in events:
        a, b = results[id(ev)]
        k_num, k_den = (a, b) if ev.x_is_numerator else (b, a)
        n1_p, n2_p = sizes[ev.pair]
        n_num, n_den = (n1_p, n2_p) if ev.x_is_numerator else (n2_p, n1_p)
        share = 0.5 if poisson else ev.share
        a_lo, a_hi = alpha * share / m, alpha * (1.0 - share) / m
        if ev.partner is not None:
            if poisson:
                continue
            a2, b2 = results[id(ev.partner)]
            k_num, k_den, nt = a + b2, b + a2, 2 * n_est
            lo = float(pooled_rate_lower(k_num, nt, a_lo))
            hi = float(pooled_rate_upper(k_den, nt, a_hi))
        else:
            if n_num <= 0 or n_den <= 0:
                continue
            lo = float(clopper_pearson_lower(k_num, n_num, a_lo))
            hi = float(clopper_pearson_upper(k_den, n_den, a_hi))
        best = max(best, lo - c * hi)
    return best, not poisson


#: type I error levels of the f-DP curve's threshold tests (those a selection sample cannot
#: locate, fewer than 5 expected outputs beyond the threshold, are dropped).
_TRADEOFF_LEVELS = (1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9)


def _tradeoff_events(
    best: _Candidate, quantiles: tuple[np.ndarray, np.ndarray]
) -> list[_Candidate]:
    """Threshold events on ``best``'s statistic, oriented like it (its numerator is H1), at
    thresholds read from the selection quantiles of the null input (H0 = the denominator)."""
    q_den = quantiles[1] if best.x_is_numerator else quantiles[0]
    ts = np.unique(q_den)
    out = []
    for t in ts.tolist():
        c = _Candidate(best.pair, best.stat, best.op, float(t), best.x_is_numerator, 0.0, (0, 0))
        out.append(c)
    return out


def _claimed_tradeoff(
    mechanism: Any, claimed: float, delta: float
) -> tuple[Callable[[np.ndarray], np.ndarray], str]:
    """The claimed trade-off curve: ``mechanism.tradeoff``, else ``G_mu`` of a Gaussian with
    ``sigma`` and ``sensitivity`` (and a delta > 0 claim), else ``f_{epsilon, delta}``."""
    from ldp_audit.stats import eps_delta_tradeoff, gaussian_tradeoff

    fn = _user_attr(mechanism, "tradeoff")
    if callable(fn):

        def user(a: np.ndarray) -> np.ndarray:
            try:
                v = np.asarray(fn(a), dtype=np.float64)
            except Exception as exc:  # noqa: BLE001 - user code
                raise UserCodeError(
                    f"mechanism.tradeoff of {type(mechanism).__name__} raised "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            if v.shape != np.shape(a) or not np.all(np.isfinite(v)):
                raise UserCodeError(
                    f"mechanism.tradeoff of {type(mechanism).__name__} must return finite "
                    f"values of the shape of its input {np.shape(a)}, got {v.shape}"
                )
            return v

        return user, "tradeoff"
    sigma = _user_attr(mechanism, "sigma")
    sens = _user_attr(mechanism, "sensitivity")
    if (
        delta > 0
        and isinstance(sigma, (int, float))
        and isinstance(sens, (int, float))
        and not isinstance(sigma, bool)
        and not isinstance(sens, bool)
        and sigma > 0
        and sens > 0
    ):
        mu = float(sens) / float(sigma)
        return (lambda a: np.asarray(gaussian_tradeoff(a, mu))), f"gaussian mu={mu:.6g}"
    return (lambda a: np.asarray(eps_delta_tradeoff(a, claimed, delta))), "epsilon-delta"


def _tradeoff_curve(
    mechanism: Any,
    claimed: float,
    delta: float,
    events: list[_Candidate],
    results: dict[int, tuple[int, int]],
    sizes: dict[int, tuple[int, int]],
    pair_list: list[tuple[np.ndarray, np.ndarray]],
    alpha: float,
    conf: float,
) -> TradeoffCurve:
    from ldp_audit.stats import tradeoff_points_from_counts

    best = events[0]
    n1_p, n2_p = sizes[best.pair]
    n_alt, n_null = (n1_p, n2_p) if best.x_is_numerator else (n2_p, n1_p)
    k_alt = np.empty(len(events))
    k_null = np.empty(len(events))
    for i, ev in enumerate(events):
        a, b = results[id(ev)]
        k_alt[i], k_null[i] = (a, b) if ev.x_is_numerator else (b, a)
    a_u, b_u = tradeoff_points_from_counts(k_null, n_null, k_alt, n_alt, alpha)
    a_u, b_u = np.atleast_1d(a_u), np.atleast_1d(b_u)
    order = np.argsort(a_u, kind="stable")
    f, source = _claimed_tradeoff(mechanism, claimed, delta)
    grid = np.unique(np.concatenate([np.linspace(0.0, 1.0, 101), np.geomspace(1e-6, 0.01, 41)]))
    x, x2 = pair_list[best.pair]
    xn, xd = (x, x2) if best.x_is_numerator else (x2, x)
    return TradeoffCurve(
        type1_upper=tuple(float(v) for v in a_u[order]),
        type2_upper=tuple(float(v) for v in b_u[order]),
        type1_estimate=tuple(float(v) for v in (k_null / n_null)[order]),
        type2_estimate=tuple(float(v) for v in (1.0 - k_alt / n_alt)[order]),
        claimed_at_type1=tuple(float(v) for v in f(a_u[order])),
        claimed_alpha=tuple(float(v) for v in grid),
        claimed_beta=tuple(float(v) for v in f(grid)),
        claimed_from=source,
        confidence=conf,
        events_estimated=len(events),
        x=tuple(float(v) for v in xn),
        x2=tuple(float(v) for v in xd),
        statistic=f"{best.stat.label()} {'> t' if best.op == 'gt' else '<= t'}",
    )


#: the largest input dimension audited: candidate pairs and (samples, dim) outputs are held in
#: memory, and 1e9 dimensions ran until killed
MAX_DIM = 1_000_000


def max_refutable_epsilon(n_est: int, confidence: float = 0.95, pool: bool = False) -> float:
    """The largest bound :func:`audit` can give with ``n_est`` estimation samples per input.

    A bound is ``ln(p1_lower - delta) - ln(p2_upper)`` with ``p1_lower <= 1`` and, at best (a
    zero count among N trials, one event, the largest share ``a = 0.9 (1 - confidence)`` of the
    error on the denominator), ``p2_upper = 1 - a^(1 / N)``; so no bound exceeds
    ``-ln(1 - a^(1 / N))`` (about ``ln(N / ln(1 / a))``): a larger claim cannot be refuted at
    this sample size. ``N = 2 n_est`` when ``pool`` (as in :func:`audit`) and pooling applies
    (``a < 1/4``), else ``n_est``.
    """
    a = (1.0 - min(_SHARES)) * (1.0 - confidence)
    trials = max(int(n_est), 1) * (2 if pool and a < POOLED_MAX_ALPHA else 1)
    return -math.log(-math.expm1(math.log(a) / trials))


def estimation_samples(samples: int, selection_fraction: float = 0.1) -> int:
    """Per input, the outputs :func:`audit` spends on estimation for ``samples``."""
    n_sel = min(_MAX_SELECTION, max(200, int(round(samples * selection_fraction))))
    return samples - n_sel


def _choose(candidates: list[_Candidate], k: int) -> list[_Candidate]:
    """The k candidates with the best predicted bound, skipping the same event found twice."""
    out: list[_Candidate] = []
    seen: set[tuple[int, str, tuple[int, int], bool]] = set()
    for c in sorted(candidates, key=lambda c: c.predicted, reverse=True):
        pooled = c.partner is not None
        sig = (c.pair, c.stat.family, c.sel_counts, pooled)
        dup = (c.pair, "", c.sel_counts, pooled)
        if sig in seen or dup in seen:
            continue
        seen.add(sig)
        seen.add(dup)
        out.append(c)
        if len(out) == k:
            break
    return out


# ----------------------------------------------------------------------------------------------
# white-box: exact epsilon of our own mechanisms
# ----------------------------------------------------------------------------------------------


def exact_epsilon(
    mechanism: Any,
    pairs: Sequence[tuple[Any, Any]] | None = None,
    *,
    dim: int | None = None,
    samples: int = 20_000,
    rng: np.random.Generator | int | None = 0,
) -> float:
    """The supremum of the privacy loss over outputs, for the given pairs (white-box).

    Uses the mechanism's exact ``privacy_loss(x, x2, y)`` (``privacy_loss(x, x2, bits,
    matrices)`` for PRS, whose loss is conditional on the random matrix). The supremum over
    outputs is taken over probe outputs (``x``, ``x2``, points beyond them along ``x - x2``,
    sign vectors) and ``samples`` draws from each input; this is exact for our mechanisms
    (Laplace: the loss is constant beyond both clipped inputs; discrete outputs: the maximising
    output is drawn with overwhelming probability at moderate dimension) and a lower estimate
    otherwise. For a mechanism with ``delta > 0`` that exposes ``sigma`` and ``clip_rows``
    (the Gaussian), the exact analytic-Gaussian epsilon at ``delta`` for the pair's clipped L2
    distance is returned instead (Balle & Wang 2018), since its pure loss is unbounded.

    Args:
        mechanism: one of our mechanisms (anything with ``privacy_loss``).
        pairs: input pairs; None: ``candidate_pairs(dim)``.
        dim: input dimension for ``candidate_pairs``.
        samples: draws per input for the sample supremum.
        rng: generator or seed for those draws.

    Returns:
        The largest loss over the pairs (``inf`` if unbounded).

    Raises:
        InvalidParameterError: the mechanism has no ``privacy_loss``.
    """
    if not callable(getattr(mechanism, "privacy_loss", None)):
        raise InvalidParameterError(
            "exact_epsilon needs a mechanism with privacy_loss(x, x2, y) (white-box); got "
            f"{type(mechanism).__name__}. Use audit() for a black-box lower bound."
        )
    pair_list = (
        default_pairs(mechanism, dim)
        if pairs is None
        else [_as_pair(p, i) for i, p in enumerate(pairs)]
    )
    samples = check_int(samples, "samples", minimum=1)
    if isinstance(rng, np.random.Generator):
        gen = rng
    elif rng is None or (isinstance(rng, (int, np.integer)) and not isinstance(rng, bool)):
        gen = np.random.default_rng(rng)
    else:
        raise InvalidParameterError(
            f"rng must be a numpy.random.Generator, an int seed or None, got {type(rng).__name__}"
        )
    delta = float(getattr(mechanism, "delta", 0.0) or 0.0)
    if (
        delta > 0
        and hasattr(mechanism, "sigma")
        and callable(getattr(mechanism, "clip_rows", None))
    ):
        from ldp_audit.mechanisms import analytic_gaussian_epsilon

        best = 0.0
        for x, x2 in pair_list:
            dist = float(
                np.linalg.norm(mechanism.clip_rows(x[None, :]) - mechanism.clip_rows(x2[None, :]))
            )
            if dist > 0:
                best = max(best, analytic_gaussian_epsilon(mechanism.sigma, dist, delta))
        return best
    best = 0.0
    with_matrices = callable(getattr(mechanism, "privatize_with_matrices", None))
    for x, x2 in pair_list:
        for src in (x, x2):
            batch = np.repeat(src[None, :], int(samples), axis=0)
            if with_matrices:
                _, bits, mats = mechanism.privatize_with_matrices(batch, gen)
                loss = mechanism.privacy_loss(x[None, :], x2[None, :], bits, mats)
            else:
                y = _privatize_rows(mechanism, src, int(samples), gen)
                loss = mechanism.privacy_loss(x[None, :], x2[None, :], y)
            best = max(best, float(np.max(np.abs(loss))))
        if not with_matrices:
            diff = x - x2
            sgn = np.where(diff >= 0, 1.0, -1.0)
            probes = [x, x2, sgn, -sgn]
            for t in (0.5, 1.0, 2.0, 10.0, 1e3):
                probes += [x + t * diff, x2 - t * diff]
            for yv in probes:
                try:
                    loss = mechanism.privacy_loss(x[None, :], x2[None, :], yv[None, :])
                except (InvalidParameterError, ValueError):
                    continue
                best = max(best, float(np.max(np.abs(loss))))
    return best
