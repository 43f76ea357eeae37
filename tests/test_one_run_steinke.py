"""The Steinke, Nasr & Jagielski (2023) bound against the anchor (issue 26).

jax_privacy's ``CanaryScoreAuditor.epsilon_one_run`` (one-sided: guess "in" for the scores at or
above a threshold) computes, for ``m`` canaries, ``r`` guesses and ``v`` correct ones, the
largest epsilon whose p-value (Corollary 5.4 / Appendix D,
``P[Bin(r, q) >= v] + 2 m delta max_i P[v - i <= Bin(r, q) < v] / i``, ``q = e^eps/(1+e^eps)``)
is below the significance. jax-privacy is not installed here (it needs jax), so the anchor is a
golden table (``tests/data/steinke_golden.json``) computed from the paper's formula by the
straightforward loop below (``_paper_eps``: exact binomial terms with ``math.comb`` and
``fractions``-free floats, Brent's method like jax_privacy), written by::

    .venv/bin/python tests/test_one_run_steinke.py --write

The optional test compares with jax_privacy itself when it is importable.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from ldp_audit.attacks.one_run_steinke import (
    _p_all_correct,
    epsilon_lower_bound,
    p_value,
    steinke_ceiling,
)

GOLDEN = Path(__file__).parent / "data" / "steinke_golden.json"


def _paper_p(m: int, r: int, v: int, eps: float, delta: float) -> float:
    """Appendix D's p-value, term by term."""
    q = math.exp(eps) / (1 + math.exp(eps))
    pmf = [math.comb(r, k) * q**k * (1 - q) ** (r - k) for k in range(r + 1)]
    beta = sum(pmf[v:])
    alpha = 0.0
    for i in range(1, v + 1):
        alpha = max(alpha, sum(pmf[v - i : v]) / i)
    return min(beta + alpha * delta * 2 * m, 1.0)


def _paper_eps(m: int, r: int, v: int, delta: float, sig: float) -> float:
    from scipy.optimize import brentq

    if _paper_p(m, r, v, 0.0, delta) >= sig:
        return 0.0
    lo, hi = 0.0, 1.0
    while _paper_p(m, r, v, hi, delta) < sig:
        lo, hi = hi, 2 * hi
    return brentq(lambda e: sig - _paper_p(m, r, v, e, delta), lo, hi, xtol=1e-9)


def _cases() -> list[dict]:
    """In/out scores of seeded games; the one-sided threshold at the top 10 % / 30 %."""
    out = []
    for seed, m, shift, delta in [(0, 200, 1.0, 1e-5), (1, 400, 2.0, 1e-5), (2, 100, 4.0, 0.0),
                                  (3, 300, 0.5, 1e-6), (4, 60, 8.0, 1e-5)]:  # fmt: skip
        rng = np.random.default_rng(seed)
        inc = rng.random(m) < 0.5
        s = rng.standard_normal(m) + shift * inc
        for frac in (0.1, 0.3):
            thr = float(np.quantile(s, 1 - frac))
            r = int((s >= thr).sum())
            v = int((inc & (s >= thr)).sum())
            out.append({"in_scores": s[inc].tolist(), "out_scores": s[~inc].tolist(),
                        "threshold": thr, "m": m, "r": r, "v": v, "delta": delta,
                        "significance": 0.05})  # fmt: skip
    return out


def _write() -> None:
    rows = []
    for c in _cases():
        c["epsilon"] = _paper_eps(c["m"], c["r"], c["v"], c["delta"], c["significance"])
        rows.append(c)
    GOLDEN.write_text(json.dumps({"command": ".venv/bin/python tests/test_one_run_steinke.py "
                                  "--write", "cases": rows}, indent=1))  # fmt: skip


def test_bound_equals_the_golden_table() -> None:
    doc = json.loads(GOLDEN.read_text())
    assert len(doc["cases"]) == 10
    for c in doc["cases"]:
        s_in, s_out = np.asarray(c["in_scores"]), np.asarray(c["out_scores"])
        r = int((s_in >= c["threshold"]).sum() + (s_out >= c["threshold"]).sum())
        v = int((s_in >= c["threshold"]).sum())
        assert (r, v, s_in.size + s_out.size) == (c["r"], c["v"], c["m"])
        eps = epsilon_lower_bound(c["m"], r, v, delta=c["delta"], beta=c["significance"])
        # ours bisects 40 times and returns the low end; the table is Brent's root (1e-9)
        assert eps <= c["epsilon"] + 1e-9 and c["epsilon"] - eps < 1e-6 * max(1, c["epsilon"])


def test_p_value_equals_the_paper_loop() -> None:
    for m, r, v, e, d in [(50, 20, 15, 0.7, 1e-3), (30, 30, 30, 2.0, 1e-5), (80, 10, 6, 0.0, 0.0)]:
        assert p_value(m, r, v, e, d) == pytest.approx(_paper_p(m, r, v, e, d), rel=1e-12)


def test_all_correct_fast_path_equals_p_value() -> None:
    for m, r, e, d in [(800, 800, 3.0, 1e-5), (800, 16, 2.0, 1e-5), (1000, 1000, 5.5, 1e-5),
                       (50, 50, 1.0, 0.01), (100, 20, 0.0, 1e-5)]:  # fmt: skip
        assert _p_all_correct(m, r, e, d) == pytest.approx(p_value(m, r, r, e, d), rel=1e-10)
    # the perfect attacker's ceiling at 800 canaries, delta 1e-5, 6 fractions at 95 % / 3 tests
    assert steinke_ceiling(800, delta=1e-5, beta=0.05 / 3 / 6) == pytest.approx(4.779, abs=1e-3)


def test_against_jax_privacy_when_installed() -> None:
    auditing = pytest.importorskip("jax_privacy.auditing")
    for c in json.loads(GOLDEN.read_text())["cases"]:
        a = auditing.CanaryScoreAuditor(np.asarray(c["in_scores"]), np.asarray(c["out_scores"]))
        explicit = auditing.Explicit(c["threshold"])
        theirs = a.epsilon_one_run(
            c["significance"], c["delta"] or 1e-300, threshold_strategy=explicit
        )
        ours = epsilon_lower_bound(c["m"], c["r"], c["v"], delta=c["delta"],
                                   beta=c["significance"])  # fmt: skip
        assert ours == pytest.approx(theirs, abs=1e-5)


if __name__ == "__main__" and "--write" in sys.argv:
    _write()


def test_non_finite_scores_are_counted_in_the_error() -> None:
    """A diverged run (NaN parameters) gives NaN scores: the error says how many, not only the
    shapes (which agree)."""
    from ldp_audit.attacks.one_run_steinke import check_scores
    from ldp_audit.errors import InvalidParameterError

    with pytest.raises(InvalidParameterError, match=r"\(2 not finite: NaN or inf"):
        check_scores(np.array([1.0, np.nan, np.inf, 0.5]), np.array([1, 0, 1, 0]))
