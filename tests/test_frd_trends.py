"""The FRD report's trend tests (ldp_audit.training.frd.trends): exact rank-sum permutation
tests checked against scipy, Holm's correction, the medians' order-statistic intervals, and the
report's re-rendering from results.json."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from ldp_audit.errors import InvalidParameterError
from ldp_audit.training.frd.trends import (
    TRENDS,
    holm,
    median_ci,
    rank_sum_test,
    trend_tests,
)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_wilcoxon_without_ties_equals_scipy_exact_mann_whitney(seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = rng.permutation(40)[:9].astype(float) + rng.normal(0, 0.01, 9)
    b = rng.permutation(40)[:11].astype(float) + 3 + rng.normal(0, 0.01, 11)
    r = rank_sum_test(a, b)
    ref = stats.mannwhitneyu(a, b, method="exact", alternative="two-sided")
    assert r["p"] == pytest.approx(ref.pvalue, rel=1e-9)
    less = stats.mannwhitneyu(a, b, method="exact", alternative="less")
    assert r["p_a"] == pytest.approx(less.pvalue, rel=1e-9)
    # theta = P(a < b) + P(a = b)/2 = 1 - U_a / (m n)
    assert r["theta"] == pytest.approx(1 - ref.statistic / (a.size * b.size))


def _enumerate(a: list, b: list, score) -> float:
    """Two-sided p by listing every split of the pooled sample (brute force)."""
    z = np.asarray(a + b, dtype=float)
    s = score(z)
    w = s[: len(a)].sum()
    sums = [s[list(c)].sum() for c in itertools.combinations(range(z.size), len(a))]
    sums = np.asarray(sums)
    lo, hi = np.mean(sums <= w + 1e-9), np.mean(sums >= w - 1e-9)
    return min(1.0, 2 * min(lo, hi))


def test_ties_and_censoring_match_brute_force_enumeration() -> None:
    a = [100.0, 120.0, "inf", 120.0, 90.0, "inf"]
    b = [130.0, "inf", "inf", 120.0, 200.0, 150.0, "inf"]
    x = [math.inf if v == "inf" else v for v in a]
    y = [math.inf if v == "inf" else v for v in b]
    r = rank_sum_test(a, b)
    assert r["p"] == pytest.approx(_enumerate(x, y, stats.rankdata), rel=1e-12)
    # scipy's own permutation test, exact (every split) on the same statistic
    ref = stats.permutation_test(
        (x, y),
        lambda u, v: stats.rankdata(np.concatenate([u, v]))[: len(u)].sum(),
        permutation_type="independent",
        n_resamples=np.inf,
        alternative="two-sided",
    )
    assert r["p"] == pytest.approx(ref.pvalue, rel=1e-9)


def test_siegel_tukey_matches_enumeration_and_sees_dispersion() -> None:
    from ldp_audit.training.frd.trends import _siegel_tukey

    assert list(_siegel_tukey(7)) == [1, 4, 5, 7, 6, 3, 2]
    narrow = [100.0, 101.0, 102.0, 103.0, 104.0, 105.0]
    wide = [40.0, 60.0, 80.0, 130.0, 160.0, "inf"]
    r = rank_sum_test(narrow, wide, scores="siegel-tukey")
    assert r["theta"] > 0.9 and r["p_a"] < 0.01 < r["p_b"]

    def st(z):
        out = np.empty(z.size)
        out[np.argsort(z, kind="stable")] = _siegel_tukey(z.size)
        return out

    x = [math.inf if v == "inf" else v for v in wide]
    assert r["p"] == pytest.approx(_enumerate(narrow, x, st), rel=1e-12)


def test_rank_sum_test_refuses_bad_input() -> None:
    with pytest.raises(InvalidParameterError, match="two non-empty samples"):
        rank_sum_test([], [1.0])
    with pytest.raises(InvalidParameterError, match="scores"):
        rank_sum_test([1.0], [2.0], scores="ansari")


def test_holm_step_down() -> None:
    assert holm([0.01, 0.04, 0.03, 0.5]) == pytest.approx([0.04, 0.09, 0.09, 0.5])
    assert holm([0.3, 0.2]) == pytest.approx([0.4, 0.4])


def test_median_interval_coverage() -> None:
    med, lo, hi, cover = median_ci([5, 1, 4, 2, 3])
    assert (med, lo, hi) == (3, 1, 5) and cover == pytest.approx(1 - 2 / 32)
    med, lo, hi, cover = median_ci(list(range(1, 31)))
    # order statistics (k, n + 1 - k) cover the median with 1 - 2 P(Bin(n, 1/2) <= k - 1); the
    # interval is the narrowest with coverage >= 0.95 (the largest such k), found by brute force
    k = max(k for k in range(1, 16) if 1 - 2 * stats.binom.cdf(k - 1, 30, 0.5) >= 0.95)
    assert (lo, hi) == (k, 31 - k) == (10, 21)
    assert cover == pytest.approx(1 - 2 * stats.binom.cdf(k - 1, 30, 0.5)) and cover >= 0.95
    assert median_ci([1, "inf", "inf"])[0] == math.inf


def test_trend_tests_verdicts_and_family() -> None:
    n = 12
    rows = []
    for kind, st, ag in {tuple(t["a"]) for t in TRENDS} | {tuple(t["b"]) for t in TRENDS}:
        base = 100.0 + (st == 2) * 100.0  # setting 2 clearly slower than 1; the rest equal
        rows.append(
            {
                "kind": kind,
                "setting": st,
                "agents": ag,
                "mission": [base + i for i in range(n)],
            }  # fmt: skip
        )
    out = trend_tests(rows)
    assert out["family"] == len(TRENDS) and out["correction"] == "holm"
    by = {(t["claim"], tuple(t["a"]), t["test"]): t for t in out["tests"]}
    s12 = by[("setting1_vs_2", ("frd", 1, 2), "wilcoxon")]
    assert s12["verdict"] == "agrees" and s12["theta"] == 1.0
    s23 = by[("setting2_vs_3", ("frd", 2, 2), "wilcoxon")]
    assert s23["verdict"] == "contradicts" and s23["theta"] == 0.0
    same = by[("fig4", ("frd", 1, 2), "wilcoxon")]
    assert same["verdict"] == "unresolved" and same["p"] == 1.0
    assert same["groups_needed"] == math.inf
    assert all(t["p_holm"] >= t["p"] for t in out["tests"])


def test_rerender_rewrites_what_reproduce_wrote(tmp_path) -> None:
    """``rerender`` (README, figures, trends from results.json) gives the files ``reproduce``
    wrote itself, byte for byte; a folder without results.json is refused."""
    pytest.importorskip("torch")
    from ldp_audit.training.frd import reproduce as R

    s = R.ReproduceSettings(settings=(1, 2), agents=(1, 2), groups=3, max_episodes=20,
                            ldp_epsilons=(1.0,), leak=False, seed=5)  # fmt: skip
    out = tmp_path / "rep"
    doc = R.reproduce(s, out=out)
    # boxes present: s1 vs s2 at 1 and 2 agents, FRD vs FedAvg location and dispersion at 1, 2
    assert doc["trends"]["family"] == 6
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    (out / "README.md").write_text("stale")
    R.rerender(out)
    after = {p.name: p.read_bytes() for p in out.iterdir()}
    assert after == before
    assert b"## The paper's trends, tested" in after["README.md"]
    with pytest.raises(InvalidParameterError, match="no results.json"):
        R.rerender(tmp_path / "nothing")
