"""The lower bound on delta at the claimed epsilon, from the verdict events' counts."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ldp_audit.audit.estimation import Counts, event_counts
from ldp_audit.audit.selection import Candidate
from ldp_audit.stats import (
    clopper_pearson_lower,
    clopper_pearson_upper,
    pooled_rate_lower,
    pooled_rate_upper,
)

if TYPE_CHECKING:
    from ldp_audit.audit.plan import Plan


def _delta_lower_bound(
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
