"""The stated-family bound of an ``opacus`` run, beside the assumption-free one (docs/opacus.md).

White-box gradient canaries: :func:`~ldp_audit.attacks.one_run_family.sgm_family_bound` on the
released updates' projections and the audit's joins (the subsampled-Gaussian family); every
other setting (black-box, input canaries): :func:`~ldp_audit.attacks.one_run_family.
gdp_family_bound` on the canaries' scores (the mu-GDP family). The bound is a lower confidence
bound on epsilon *under the assumption it names*; it is compared with the run's claim but does
not enter the assumption-free verdict (``flagged_by``): ``refuted`` says whether the claim is
refuted under the assumption.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["family_bound"]


def family_bound(
    run_dir: Path,
    *,
    projections: np.ndarray | None,
    scores: np.ndarray,
    included: np.ndarray,
    sample_rate: float,
    delta: float,
    confidence: float,
    claimed_epsilon: float,
) -> dict[str, Any] | None:
    """The family bound of a run (None when the run has one class of canaries only):
    ``projections`` are the white-box released updates on gradient canaries' directions (None:
    black-box or input canaries, or no update; the mu-GDP bound of ``scores``)."""
    from ldp_audit.attacks.one_run_family import gdp_family_bound, sgm_family_bound
    from ldp_audit.rundir import RunDir

    inc = np.asarray(included, dtype=bool)
    if not (inc.any() and (~inc).any()):
        return None
    if projections is not None:
        joins = RunDir(run_dir).secrets("canary_joins", for_scoring=True)["canary_joins"]
        out = sgm_family_bound(projections, np.asarray(joins, dtype=bool), inc,
                               sample_rate=sample_rate, delta=delta,
                               confidence=confidence)  # fmt: skip
    else:
        out = gdp_family_bound(scores, inc, delta=delta, confidence=confidence)
    lb = float(out["epsilon_lower_bound"])
    claim = float(claimed_epsilon)
    out["claimed_epsilon"] = claim
    out["ratio_to_claim"] = (lb / claim) if 0 < claim < math.inf else None
    out["refuted"] = bool(lb > claim * (1.0 + 1e-12))
    out["level"] = 1.0 - float(out["confidence"])
    return out
