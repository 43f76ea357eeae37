"""Published numbers the PGC-A3C report sections put beside ours.

Ono & Takahashi (2020), "Locally Private Distributed Reinforcement Learning", Tables 1-3
(20 trials per setting; copied from shared/papers.md). ``None`` where the paper gives no value.
"""

from __future__ import annotations

__all__ = ["PGC_A3C_TABLES", "paper_row"]

_EPS = (1.0, 2.0, 5.0, 10.0, float("inf"))

#: {(mechanism name, measure): {epsilon: value}}; measures: "median_fst" (Table 1),
#: "success_ratio" (Table 2), "relative_auc" (Table 3).
PGC_A3C_TABLES: dict[tuple[str, str], dict[float, float | None]] = {
    ("laplace", "median_fst"): dict(
        zip(_EPS, (18377.0, 20238.5, 5714.5, 4055.0, 1769.0), strict=True)
    ),
    ("prs", "median_fst"): dict(zip(_EPS, (25226.5, 7549.0, 2656.5, 11217.5, None), strict=True)),
    ("laplace", "success_ratio"): dict(zip(_EPS, (0.80, 0.90, 1.00, 1.00, 1.0), strict=True)),
    ("prs", "success_ratio"): dict(zip(_EPS, (0.85, 0.95, 0.90, 0.90, None), strict=True)),
    ("laplace", "relative_auc"): dict(zip(_EPS, (0.673, 0.711, 0.909, 0.965, None), strict=True)),
    ("prs", "relative_auc"): dict(zip(_EPS, (0.660, 0.862, 0.835, 0.771, 1.0), strict=True)),
}

_ALIASES = {
    "laplace": "laplace",
    "prs": "prs",
    "projectedrandomsign": "prs",
    "projected_random_sign": "prs",
    "projected-random-sign": "prs",
    "noprivacy": "laplace",  # eps = inf: the non-private A3C column
    "none": "laplace",
}


def paper_row(mechanism: str, epsilon: float) -> dict[str, float | None] | None:
    """The paper's Tables 1-3 entries for one setting, or None if the paper has no such setting.

    Args:
        mechanism: a mechanism config name ("laplace", "prs", "ProjectedRandomSign", ...).
        epsilon: the per-submission epsilon of the setting (``inf`` for non-private A3C).
    """
    key = _ALIASES.get(mechanism.replace(" ", "").lower())
    if key is None:
        return None
    eps = float(epsilon)
    if eps not in _EPS:
        return None
    row = {
        m: PGC_A3C_TABLES[(key, m)][eps] for m in ("median_fst", "success_ratio", "relative_auc")
    }
    if all(v is None for v in row.values()):
        return None
    return row
