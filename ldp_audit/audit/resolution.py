"""Sample sizes and what they can resolve: the estimation share of ``samples`` and the ceiling.

:func:`estimation_samples` is how many of an audit's outputs per input estimate (the rest
select); :func:`max_refutable_epsilon` the largest bound any audit of that size can give: a
zero count among N trials still has the Clopper-Pearson upper bound ``1 - a^(1/N)``
(:func:`ldp_audit.stats.clopper_pearson_upper` at ``k = 0``, in closed form here).
"""

from __future__ import annotations

import math

from ldp_audit.audit.selection import SHARES
from ldp_audit.stats import POOLED_MAX_ALPHA

__all__ = ["estimation_samples", "max_refutable_epsilon"]

#: per input, at most this many outputs are used for selection (their statistic values are
#: held in memory); the rest of ``samples`` estimates, streamed in chunks (memory bounded).
_MAX_SELECTION = 2_000_000


def max_refutable_epsilon(n_est: int, confidence: float = 0.95, pool: bool = False) -> float:
    """The largest bound :func:`audit` can give with ``n_est`` estimation samples per input.

    A bound is ``ln(p1_lower - delta) - ln(p2_upper)`` with ``p1_lower <= 1`` and, at best (a
    zero count among N trials, one event, the largest share ``a = 0.9 (1 - confidence)`` of the
    error on the denominator), ``p2_upper = 1 - a^(1 / N)``; so no bound exceeds
    ``-ln(1 - a^(1 / N))`` (about ``ln(N / ln(1 / a))``): a larger claim cannot be refuted at
    this sample size. ``N = 2 n_est`` when ``pool`` (as in :func:`audit`) and pooling applies
    (``a < 1/4``), else ``n_est``.
    """
    a = (1.0 - min(SHARES)) * (1.0 - confidence)
    trials = max(int(n_est), 1) * (2 if pool and a < POOLED_MAX_ALPHA else 1)
    return -math.log(-math.expm1(math.log(a) / trials))


def estimation_samples(samples: int, selection_fraction: float = 0.1) -> int:
    """Per input, the outputs :func:`audit` spends on estimation for ``samples``."""
    n_sel = min(_MAX_SELECTION, max(200, int(round(samples * selection_fraction))))
    return samples - n_sel
