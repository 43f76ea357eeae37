"""Published numbers the PGC-A3C report sections put beside ours.

Ono & Takahashi (2020), "Locally Private Distributed Reinforcement Learning", Tables 1-3
(20 trials per setting; copied from shared/papers.md). ``None`` where the paper gives no value.
"""

from __future__ import annotations

__all__ = ["PAPER", "paper_row"]

_INF = float("inf")
#: The paper's Tables 1-3 (papers.md section 1): {measure: {mechanism: {epsilon: value}}};
#: measures "median_fst" (Table 1), "success_ratio" (Table 2), "relative_auc" (Table 3).
#: ``None``: no number printed for that cell.
PAPER: dict[str, dict[str, dict[float, float | None]]] = {
    "median_fst": {
        "laplace": {1.0: 18377.0, 2.0: 20238.5, 5.0: 5714.5, 10.0: 4055.0, _INF: 1769.0},
        "prs": {1.0: 25226.5, 2.0: 7549.0, 5.0: 2656.5, 10.0: 11217.5, _INF: None},
    },
    "success_ratio": {
        "laplace": {1.0: 0.80, 2.0: 0.90, 5.0: 1.00, 10.0: 1.00, _INF: 1.0},
        "prs": {1.0: 0.85, 2.0: 0.95, 5.0: 0.90, 10.0: 0.90, _INF: None},
    },
    # Table 3 prints its eps = inf 1.0 in the PRS row, but it is the non-private A3C's area over
    # its own (1 by definition; the paper runs no non-private |B| = 100 setting, Tables 1-2 have
    # no PRS eps = inf), so it sits beside the reference, the Laplace table's eps = inf column.
    "relative_auc": {
        "laplace": {1.0: 0.673, 2.0: 0.711, 5.0: 0.909, 10.0: 0.965, _INF: 1.0},
        "prs": {1.0: 0.660, 2.0: 0.862, 5.0: 0.835, 10.0: 0.771, _INF: None},
    },
}

#: mechanism config names (lower case, without spaces, "_" and "-") of the paper's columns; the
#: non-private A3C (eps = inf) is the Laplace table's column
_ALIASES = {"projectedrandomsign": "prs", "noprivacy": "laplace", "none": "laplace"}


def paper_row(mechanism: str, epsilon: float) -> dict[str, float | None] | None:
    """The paper's Tables 1-3 entries for one setting, or None if the paper has no such setting.

    Args:
        mechanism: a mechanism config name ("laplace", "prs", "ProjectedRandomSign", ...).
        epsilon: the per-submission epsilon of the setting (``inf`` for non-private A3C).
    """
    name = "".join(c for c in mechanism.lower() if c not in " _-")
    key = _ALIASES.get(name, name)
    eps = float(epsilon)
    if eps not in PAPER["median_fst"].get(key, {}):
        return None
    row = {m: PAPER[m][key][eps] for m in PAPER}
    if all(v is None for v in row.values()):
        return None
    return row
