"""What an audit returns: the result, its two verdicts, witness, profile, f-DP curve and stages.

Plain frozen dataclasses with ``summary()`` / ``to_dict()`` (infinities as ``"inf"``); the
consequence texts of the two verdicts (:func:`consequences`) are written here too, so that the
words of a result live in one file. Nothing here draws a sample or computes a bound.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

__all__ = [
    "VERDICT_KINDS",
    "AuditResult",
    "PrivacyProfile",
    "SequentialInfo",
    "TradeoffCurve",
    "Verdict",
    "Witness",
]


class _Json:
    #: properties written after the fields
    _derived: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict (infinities as ``"inf"``, nested results as their ``to_dict()``), the
        fields then the derived properties (``above_claim``, ``below_claim``, ``violation``)."""
        return _as_json(self, **{k: _jsonable(getattr(self, k)) for k in self._derived})


@dataclass(frozen=True)
class Witness(_Json):
    """The input pair and the event behind a lower bound.

    Attributes:
        x: the input whose output distribution is the numerator.
        x2: the other input.
        event: readable description of the event S.
        family: the statistic family that produced S (``"coordinate"``, ``"projection"``,
            ``"l1-ratio"``, ``"l1-norm"``, ``"l2-norm"``, ``"classifier"``, ``"cells"``,
            ``"atoms"``, ``"input-cells"``, ``"float-bits"``, ``"user"``: a statistic passed in
            ``statistics=`` or shipped by the mechanism's ``audit_statistics()``, named in
            ``event``).
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


#: the two readings of one audit (see :class:`Verdict`).
VERDICT_KINDS = ("distribution", "implementation")
#: a bound below this share of the tightness ceiling gets an explanation in the summary (a
#: mechanism at its claim lands within a few standard errors of the ceiling, issue 40).
_FAR_BELOW = 0.8


@dataclass(frozen=True)
class Verdict(_Json):
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


@dataclass(frozen=True)
class PrivacyProfile(_Json):
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
    _derived = ("above_claim",)

    @property
    def above_claim(self) -> tuple[bool, ...]:
        """Per delta: does the lower bound exceed the claim (a refuted point of the profile)?"""
        return tuple(lo > c for lo, c in zip(self.epsilon_lower, self.epsilon_claimed, strict=True))


@dataclass(frozen=True)
class TradeoffCurve(_Json):
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
        family_mu_lower: for a Gaussian claim (``claimed_from`` ``"gaussian ..."``), a lower
            confidence bound on mu at ``confidence`` **under the Gaussian-family assumption**
            (``ldp_audit.audit.tradeoff.FAMILY_ASSUMPTION``) from one more threshold test, at
            the midpoint of the two inputs' selection medians; None otherwise. A separate
            statement, not part of the verdicts (which assume nothing).
        family_epsilon_lower: the epsilon of ``G_{family_mu_lower}`` at the claimed delta.
        family_delta_lower: its delta at the claimed epsilon (the same assumption).
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
    family_mu_lower: float | None = None
    family_epsilon_lower: float | None = None
    family_delta_lower: float | None = None
    _derived = ("below_claim", "violation")

    @property
    def below_claim(self) -> tuple[bool, ...]:
        """Per point: does the upper confidence point lie below the claimed curve (refuted)?"""
        return tuple(c > b for c, b in zip(self.claimed_at_type1, self.type2_upper, strict=True))

    @property
    def violation(self) -> bool:
        """True when some point refutes the claimed trade-off curve at ``confidence``."""
        return any(self.below_claim)


@dataclass(frozen=True)
class SequentialInfo(_Json):
    """The stages of a sequential audit (``audit(..., sequential=True)``).

    Attributes:
        stages: per stage run, ``{"samples", "confidence", "epsilon_lower_bound",
            "delta_lower_bound", "violation", "seconds"}`` (``samples`` per input of each pair).
        stopped: ``"refuted"`` (a stage refuted the claim), ``"cannot refute"`` (not even the
            whole budget in one audit could give a bound above the claim: one small stage was
            run and the result is vacuous, :attr:`AuditResult.inconclusive`) or
            ``"budget spent"``.
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
            declare ``reproducible = False``, e.g. an unseedable library, and for those whose
            two 8-row calls from one Generator state differ: global or own randomness, state).
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
        max_refutable_epsilon: ``ln((1 - delta) / resolution_probability)`` (floored at 0),
            the largest epsilon this sample size could refute at the claimed delta (see
            :func:`max_refutable_epsilon`).
        statistics: the names of the user's / the mechanism's statistics that were searched.
        sequential: the stages of a sequential audit (None for a fixed-sample one).
        inconclusive_epsilon: the largest bound an event seen *once* under the second input
            could give here (:func:`ldp_audit.audit.one_count_epsilon`); a claim at or above it
            can be refuted only by an event never seen under M(x2), so a result that finds no
            violation for such a claim is :attr:`inconclusive`.
        tightness_ceiling: the largest bound this audit could report, at expected counts, for
            a mechanism exactly at its claim (the claim's randomised-response corner, or the
            claimed ``G_mu`` curve of a Gaussian; :func:`ldp_audit.audit.tightness_ceiling` at
            this sample size and per-event level): how close to the truth an audit of this size
            gets at best.
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
    inconclusive_epsilon: float | None = None
    tightness_ceiling: float | None = None

    @property
    def inconclusive(self) -> bool:
        """True when no violation was found for a claim this sample size cannot test: the claim
        is at or above :attr:`inconclusive_epsilon` (only an event never seen under the second
        input could refute it) or :attr:`max_refutable_epsilon` (nothing could: vacuous). Such
        a "no violation" says nothing about the claim."""
        if self.violation:
            return False
        return any(
            c is not None and self.claimed_epsilon >= c
            for c in (self.inconclusive_epsilon, self.max_refutable_epsilon)
        )

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
        form = f"(epsilon, delta={self.delta:.10g})" if self.delta > 0 else "pure epsilon"
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
        elif self.inconclusive:
            lines.append(
                "INCONCLUSIVE: no violation found, but the claim is too large for this sample "
                "size to test (see the warning); this says nothing about the claim."
            )
        else:
            lines.append(
                "no violation found. This proves nothing beyond this test's power: the "
                "mechanism may still violate its claim on inputs, events or sample sizes that "
                "were not tried."
            )
        verdicts = [v for v in (self.distribution, self.implementation) if v is not None]
        titles = {"distribution": "exact arithmetic", "implementation": "float bits"}
        for v in verdicts:
            title = f"{v.kind} ({titles[v.kind]})"
            state = (
                "VIOLATION"
                if v.violation
                else ("INCONCLUSIVE" if self.inconclusive else "no violation found")
            )
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
                f"{d:.10g}: {lo:.3g}" + (f" (claim {c:.3g})" if math.isfinite(c) else "")
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
            if tc.family_epsilon_lower is not None:
                above = tc.family_epsilon_lower > self.claimed_epsilon
                lines.append(
                    f"Gaussian-family bound (ASSUMES the pair's trade-off is G_mu for one "
                    f"unknown mu, as a Gaussian mechanism's; confidence {tc.confidence:.10g}): "
                    f"mu >= {tc.family_mu_lower:.6g}, epsilon >= {tc.family_epsilon_lower:.6g} "
                    f"at delta {self.delta:.10g}: {'ABOVE' if above else 'not above'} the claim; "
                    f"delta >= {tc.family_delta_lower:.6g} at epsilon {self.claimed_epsilon:g}"
                )
        if self.delta_lower_bound is not None:
            state = "ABOVE the claimed delta (refuted)" if self.delta_violation else "not above it"
            lines.append(
                f"delta lower bound at the claimed epsilon {self.claimed_epsilon:.6g}: "
                f"{self.delta_lower_bound:.6g} (claimed {self.delta:.10g}; confidence "
                f"{self.delta_confidence:.10g}): {state}"
            )
        if self.resolution_probability is not None and self.max_refutable_epsilon is not None:
            lines.append(
                f"resolution: events of probability below {self.resolution_probability:.3g} "
                "under the second input cannot be told from 0 at this sample size; no bound "
                f"can exceed epsilon {self.max_refutable_epsilon:.4g} (a leak hidden in "
                "rarer events is not seen)"
            )
        if self.tightness_ceiling is not None:
            ratio = (
                f" ({self.tightness_ceiling / self.claimed_epsilon:.3f} of the claim)"
                if self.claimed_epsilon > 0
                else ""
            )
            low = ""
            b, c = self.epsilon_lower_bound, self.tightness_ceiling
            if 0.0 < b < _FAR_BELOW * c and not self.violation and not self.inconclusive:
                low = (
                    f"; this bound is {b / c:.2f} of it: the mechanism is more private than it "
                    "claims on the pairs tried, or its leak lies where no statistic looks "
                    "(events that need a hash or another structure: statistics= / --statistic; "
                    "other inputs: pairs= / --pairs), or this run fell low by chance"
                )
            lines.append(
                f"tightness ceiling: {self.tightness_ceiling:.4g}{ratio}, the bound a mechanism "
                "exactly at its claim would get from this audit at this sample size (at expected "
                f"counts: how close it can come; one run may land a little above it){low}"
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
        d = {
            "epsilon_lower_bound": _jsonable(self.epsilon_lower_bound),
            "claimed_epsilon": _jsonable(self.claimed_epsilon),
            "violation": self.violation,
            "leak": self.leak,
            **_as_json(self, delta_violation=self.delta_violation, inconclusive=self.inconclusive),
        }
        verdicts = (d.pop("distribution"), d.pop("implementation"))
        d["verdicts"] = {v["kind"]: v for v in verdicts if v is not None}
        return d


def _witness_lines(w: Witness) -> list[str]:
    return [
        f"witness: x = {short_values(w.x)}, x2 = {short_values(w.x2)}",
        f"  event: {w.event}  [{w.family}]",
        f"  counts: {w.k1}/{w.n1} under M(x), {w.k2}/{w.n2} under M(x2) (fresh estimation samples)",
    ]


def _jsonable(v: Any) -> Any:
    if isinstance(v, float):
        return ("inf" if v > 0 else "-inf") if math.isinf(v) else float(v)
    if isinstance(v, (tuple, list)):
        return [_jsonable(a) for a in v]
    if isinstance(v, dict):
        return {k: _jsonable(a) for k, a in v.items()}
    return v.to_dict() if hasattr(v, "to_dict") else v


def _as_json(obj: Any, **extra: Any) -> dict[str, Any]:
    """The dataclass ``obj``'s fields, JSON-able (infinities as ``"inf"``, tuples as lists,
    nested results as their ``to_dict()``), then ``extra``."""
    return {**{f.name: _jsonable(getattr(obj, f.name)) for f in fields(obj)}, **extra}


def short_values(v: Sequence[float], k: int = 6) -> str:
    vals = [f"{a:.4g}" for a in v[:k]]
    more = f", ... ({len(v)} values)" if len(v) > k else ""
    return "[" + ", ".join(vals) + more + "]"


def consequences(dist: Verdict, impl: Verdict | None) -> tuple[str, str | None]:
    """The plain-language consequences of the distribution and implementation verdicts."""
    d_viol = dist.violation
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
    if not impl.violation:
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
        family = impl.witness.family if impl.witness is not None else ""
        if family == "float-bits" and impl.epsilon_lower_bound > dist.epsilon_lower_bound:
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


def at_delta(delta: float) -> str:
    """The words that name a claimed delta > 0 as the reason a ceiling is low ("" at 0)."""
    return f" at delta {delta:.10g} (a bound is ln((p1 - delta) / p2), p1 <= 1)" if delta else ""


#: how the inconclusive warning begins (so that it is added once, and replaced on a re-mark).
_INCONCLUSIVE_WARNING = "inconclusive: "


def with_inconclusive_texts(r: AuditResult) -> AuditResult:
    """``r`` with its verdicts' consequences and warnings saying plainly whether it is
    :attr:`AuditResult.inconclusive` (idempotent: the texts are rebuilt from the bounds)."""
    if r.distribution is None:
        return r
    impl = r.implementation
    d_text, i_text = consequences(r.distribution, impl)
    warn = [w for w in r.warnings if not w.startswith(_INCONCLUSIVE_WARNING)]
    if r.inconclusive:
        vacuous = r.max_refutable_epsilon is not None and (
            r.claimed_epsilon >= r.max_refutable_epsilon
        )
        why = (
            f"no bound can exceed {r.max_refutable_epsilon:.4g} at this sample size"
            f"{at_delta(r.delta)}"
            if vacuous
            else (
                f"only an event never seen under the second input could refute it (one "
                f"observation there caps the bound at {r.inconclusive_epsilon:.4g}; no bound can "
                f"exceed {r.max_refutable_epsilon:.4g})"
            )
        )
        text = (
            f"INCONCLUSIVE: the claim epsilon {r.claimed_epsilon:.6g} is too large for this "
            f"sample size to test: {why}. 'No violation' here says nothing about the claim; "
            "testing it needs more than e^epsilon samples per input."
        )
        d_text = text if not r.distribution.violation else d_text
        if i_text is not None and impl is not None and not impl.violation:
            i_text = text
        warn.append(
            f"{_INCONCLUSIVE_WARNING}a claim of epsilon {r.claimed_epsilon:.6g} is "
            + ("vacuous here: " if vacuous else "at the edge of what this sample size resolves: ")
            + why
            + "; a larger sample (budget) is needed"
        )
    return replace(
        r,
        distribution=replace(r.distribution, consequence=d_text),
        implementation=None if impl is None else replace(impl, consequence=i_text or ""),
        warnings=tuple(warn),
    )
