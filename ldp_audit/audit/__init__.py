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
   and a log-ratio score of discrete output cells (few distinct outputs), or else of the
   output rows seen more than once (*atoms* of continuous outputs). For the
   *implementation* reading, add a log-ratio score of floating-point *bit cells* of the raw
   outputs (sign, exponent, trailing zeros of the mantissa: Mironov 2012 — additive noise in
   IEEE doubles leaves input-dependent gaps in the low bits). On B, choose for each statistic
   the threshold event ``{s > t}`` or ``{s <= t}`` (linear and log-spaced tail quantiles), the
   direction (which input is the numerator) and the split of the event's error probability
   between its two counts that maximise the bound the estimation step is expected to give.
   Keep the ``max_events`` best distribution events, plus the best float-bit event when it
   promises more than all of them, plus a *probe* event when some event's B counts alone
   contradict the claim (a binomial test at level ``_PROBE_LEVEL``; rare leaks whose
   denominator B is too small to show, see ``selection.probe_event``).
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
largest epsilon it could refute (``ln((1 - delta) / resolution_probability)``, floored at 0): a
mechanism that hides its leak in rarer events ("curator" attacks) is not seen at this size.
A claim at or above :func:`one_count_epsilon` (only an event never seen under x2 could refute
it) that is not refuted gives an ``inconclusive`` result, said in its verdicts and warnings;
``tightness_ceiling`` (:func:`tightness_ceiling`) is the largest bound a mechanism exactly at
its claim could get from the audit at this size.

**Sequential mode** (``sequential=True``): fresh fixed-sample audits on the stages of
:func:`sequential_plan` (a doubling schedule of sample sizes, stage k at level
``alpha 6 / (pi^2 k^2)``, the last at the rest of alpha, stages that could not refute the claim
merged away), stopping at the first refutation (the union bound over stages makes any stopping
rule valid; see ``sequential.audit_sequential``).

A violation is attributed to the floating-point representation only when the distribution
reading of the same samples does not already refute the claim. Finding no violation proves
nothing beyond this test's power: the mechanism may still violate its claim on inputs or
events that were not tried.

:func:`exact_epsilon` gives the white-box value for our own mechanisms from their
``privacy_loss`` so users can put claim, exact and empirical side by side; :func:`from_scalar`
adapts one-call-per-value mechanisms of other libraries (diffprivlib, OpenDP).

**Where things are** (one file per stage, in the order :func:`audit` runs through them):
``api`` (:func:`audit` itself), ``plan`` (arguments checked, samples and error split),
``search`` (the selection stage over the pairs), ``statistics`` (the statistics fitted on A),
``selection`` (threshold events chosen on B), ``sampling`` (the mechanism's outputs, in
chunks), ``estimation`` (fresh counts, their bounds and the delta bound),
``tradeoff`` (the f-DP curve), ``sequential``, ``resolution`` (sample sizes and the ceiling),
``mechanism`` (the claim and the pairs), ``results`` (what is returned), ``exact`` (the
white-box epsilon). The bounds themselves are :mod:`ldp_audit.stats`'s.
"""

from __future__ import annotations

from ldp_audit._scalar import from_scalar
from ldp_audit.audit.api import audit
from ldp_audit.audit.exact import exact_epsilon
from ldp_audit.audit.mechanism import default_pairs
from ldp_audit.audit.resolution import (
    estimation_samples,
    max_refutable_epsilon,
    one_count_epsilon,
    tightness_ceiling,
)
from ldp_audit.audit.results import (
    AuditResult,
    PrivacyProfile,
    SequentialInfo,
    TradeoffCurve,
    Verdict,
    Witness,
)
from ldp_audit.audit.sequential import sequential_plan, sequential_schedule

__all__ = [
    "AuditResult",
    "PrivacyProfile",
    "SequentialInfo",
    "TradeoffCurve",
    "Verdict",
    "Witness",
    "audit",
    "default_pairs",
    "estimation_samples",
    "exact_epsilon",
    "from_scalar",
    "max_refutable_epsilon",
    "one_count_epsilon",
    "sequential_plan",
    "sequential_schedule",
    "tightness_ceiling",
]
