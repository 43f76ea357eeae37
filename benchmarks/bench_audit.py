"""Tightness and speed of ldp_audit.audit, against a straightforward auditor in the same run.

Tightness table (issue 19): lower bound / true epsilon and seconds of ``audit(..., samples=N)``
(default N = 10^6 per input, confidence 0.95, distribution verdict = exact-arithmetic reading,
since the built-in mechanisms compute in doubles and their float bits leak, which makes
"bound / true epsilon" meaningless for the implementation verdict: that bound is reported
separately as ``implementation_bound``) for

* Laplace (clip 1) at epsilon 0.1, 1, 10 (its declared candidate pairs);
* an L2-clipped Laplace (clip to L2 norm 1 in 2-D, Lap(1) per coordinate; true epsilon
  2 sqrt 2 = 2.83 on the diagonal pair);
* the Gaussian (sigma 2, L2 sensitivity 2) at delta = 1e-2, 1e-3, 1e-5 (true epsilon: the
  analytic Gaussian mechanism's).

Beside each ratio: the **ceiling** of any audit that bounds one threshold event with
one-sided Clopper-Pearson intervals (union bound) at these sample sizes: the exact event
probabilities of the best threshold event, all N samples estimating it, no Bonferroni, the best
error split; and the **pooled ceiling**, the same on 2N trials: what a pooled event pair
(``stats.epsilon_lower_bound_from_pooled_counts``; an event with x the numerator and its mirror
with x2 the numerator, equally good for these symmetric mechanisms) can reach at best.

A single seed's ratio varies by about +-0.015 with the selection's luck, so each setting is
also audited with seeds 0 .. ``--seeds``-1 in three configurations in the same run: the default
(``pool=False``), ``pool=True``, and ``ratio_test="poisson", pool=True`` (Poissonized estimation,
the exact joint conditional test of the two rates, pooled disjoint pairs): mean ratios of each.

Two more ceilings: the **Poisson pooled ceiling** (pure DP rows: the exact conditional Poisson
test of one event on 2N trials, no Bonferroni; what ``ratio_test="poisson", pool=True`` can
reach at best), and the **event-count ceiling**: the normal-theory limit of *any* sound audit
that bounds epsilon through one event's two counts on 2N outputs per input (pooled), median
bound, no Bonferroni: the largest c with ``p1 - c p2 - delta >= z_alpha sqrt((p1 (1 - p1) +
c^2 p2 (1 - p2)) / 2N)`` over threshold events (a level-alpha test of the boundary
``q1 = c q2 + delta`` has power at most about 1/2 below it). ``bound / event ceiling`` says how
much of what is reachable at this sample size the audit reaches.

The straightforward baseline implements the same recipe the obvious way: one ``privatize``
call per report and a Python loop over candidate thresholds. It runs on ``--naive-samples`` per
input (it is slow); the comparison is in samples per second.

Profile: one audit of the Gaussian (sigma 2, sensitivity 2, claim at delta 1e-3) with its
privacy profile, lower bound / analytic epsilon at each delta.

Time goal: Laplace eps = 0.1 with a default audit at ``--goal-samples`` (6e6) per input, seeds
0-2: ratio and seconds.

Scalar adapter (``from_scalar``): a diffprivlib Laplace (when diffprivlib imports; see
docs/audit.md for the scikit-learn shim) audited through the adapter, its samples/s against a
plain Python loop over ``randomise`` in the same run, and both verdicts.

    .venv/bin/python benchmarks/bench_audit.py [--samples 1000000] [--naive-samples 20000]
        [--backend {local,ray} [--address ADDR] [--workers N]]

The pieces (each tightness setting with its seeds, the profile, each time-goal seed, each
trade-off case, the scalar adapter) are independent and seeded as before; with ``--backend``
they are tasks of ``ldp_audit.backends.run_tasks`` (a local process pool or Ray) and give the
same numbers as the default in-process run, only the timings differ (parallel tasks share the
cores, so the speed columns are only meaningful in the default run).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from pathlib import Path

import numpy as np
from scipy import special, stats

from ldp_audit.audit import audit, from_scalar
from ldp_audit.errors import InvalidParameterError
from ldp_audit.mechanisms import Gaussian, Laplace, analytic_gaussian_epsilon
from ldp_audit.stats import epsilon_lower_bound_from_counts


class L2Laplace:
    """Clip to L2 norm 1, add Lap(b) per coordinate: true epsilon 2 sqrt(d) / b (L1 diameter
    of the L2 ball), claimed as such."""

    def __init__(self, b: float = 1.0, d: int = 2) -> None:
        self.b, self.d = b, d
        self.epsilon = 2.0 * math.sqrt(d) / b

    def privatize(self, x, rng):
        norm = np.linalg.norm(x, axis=1, keepdims=True)
        return x / np.maximum(1.0, norm) + rng.laplace(0.0, self.b, size=x.shape)


def _cp_lo(k, n, a):
    return np.where(k <= 0, 0.0, special.betaincinv(np.maximum(k, 1e-300), n - k + 1, a))


def _cp_up(k, n, a):
    return np.where(k >= n, 1.0, special.betaincinv(k + 1, np.maximum(n - k, 1e-300), 1 - a))


def ceiling(p1: np.ndarray, p2: np.ndarray, n: int, alpha: float, delta: float) -> float:
    """Best one-event Clopper-Pearson bound from exact probabilities (expected counts)."""
    best = -math.inf
    for share in np.linspace(0.02, 0.98, 49):
        lo = _cp_lo(p1 * n, n, alpha * share) - delta
        hi = _cp_up(p2 * n, n, alpha * (1 - share))
        with np.errstate(all="ignore"):
            v = np.where(lo > 0, np.log(np.maximum(lo, 1e-300)) - np.log(hi), -np.inf)
        best = max(best, float(np.max(v)))
    return best


def event_ceiling(p1: np.ndarray, p2: np.ndarray, n: int, alpha: float, delta: float) -> float:
    """Normal-theory ceiling of any one-event audit on n trials per rate (see the docstring)."""
    z = stats.norm.isf(alpha)
    lo, hi = 0.0, 60.0  # log c: bisection on the largest feasible c
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        c = math.exp(mid)
        ok = (p1 - c * p2 - delta) >= z * np.sqrt((p1 * (1 - p1) + c * c * p2 * (1 - p2)) / n)
        lo, hi = (mid, hi) if np.any(ok) else (lo, mid)
    return lo


def poisson_ceiling(p1: np.ndarray, p2: np.ndarray, n: int, alpha: float) -> float:
    """Exact conditional Poisson test of one event at expected counts n p1, n p2 (pure DP)."""
    k1, k2 = p1 * n, p2 * n
    with np.errstate(all="ignore"):
        th = _cp_lo(k1, k1 + k2, alpha)
        v = np.log(th) - np.log1p(-th)
    return float(np.nanmax(np.where(k1 > 0, v, -np.inf)))


def pooled_ceiling(p1: np.ndarray, p2: np.ndarray, n: int, alpha: float, delta: float) -> float:
    """The ceiling of a pooled pair of mirrored events: one event's, on 2n trials."""
    return ceiling(p1, p2, 2 * n, alpha, delta)


def laplace_tails(b: float, c1: float, c2: float) -> tuple[np.ndarray, np.ndarray]:
    t = np.linspace(min(c1, c2) - 40 * b, max(c1, c2) + 40 * b, 40001)

    def sf(c):
        return np.where(t >= c, 0.5 * np.exp(-(t - c) / b), 1 - 0.5 * np.exp(-(c - t) / b))

    return sf(c1), sf(c2)


def naive_audit(mech, x, x2, samples: int, confidence: float, seed: int) -> float:
    """Same recipe, straightforward code: per-report privatize, loop over thresholds."""
    rng = np.random.default_rng(seed)
    n_sel = samples // 10
    n_est = samples - n_sel

    def draw(v, n):
        return np.array([mech.privatize(v[None, :], rng)[0, 0] for _ in range(n)])

    s1, s2 = draw(x, n_sel), draw(x2, n_sel)
    pooled = np.sort(np.concatenate([s1, s2]))
    best = (-math.inf, 0.0, True, True)
    for t in pooled[:: max(1, len(pooled) // 128)]:
        for gt in (True, False):
            c1 = np.sum(s1 > t) if gt else np.sum(s1 <= t)
            c2 = np.sum(s2 > t) if gt else np.sum(s2 <= t)
            for x_num in (True, False):
                a, b = (c1, c2) if x_num else (c2, c1)
                v = epsilon_lower_bound_from_counts(a, n_sel, b, n_sel, 1 - confidence)
                if v > best[0]:
                    best = (v, t, gt, x_num)
    _, t, gt, x_num = best
    e1, e2 = draw(x, n_est), draw(x2, n_est)
    c1 = np.sum(e1 > t) if gt else np.sum(e1 <= t)
    c2 = np.sum(e2 > t) if gt else np.sum(e2 <= t)
    a, b = (c1, c2) if x_num else (c2, c1)
    return max(0.0, float(epsilon_lower_bound_from_counts(a, n_est, b, n_est, 1 - confidence)))


def _diffprivlib():
    try:
        import diffprivlib.mechanisms as dpm
    except ImportError as exc:
        if "sklearn.tree._tree" not in str(exc):
            return None, f"diffprivlib not importable: {exc}"
        import sklearn.tree._tree as tree  # the shim of docs/audit.md

        tree.DOUBLE, tree.DTYPE = np.float64, np.float32
        try:
            import diffprivlib.mechanisms as dpm
        except ImportError as exc2:
            return None, f"diffprivlib not importable: {exc2}"
        return dpm, "imported with the sklearn.tree._tree DOUBLE/DTYPE shim"
    return dpm, "imported"


def _tightness_settings() -> list[tuple]:
    """The tightness table's settings: (name, mechanism, pairs, true epsilon, delta, p1, p2)."""
    settings = []
    a = 1.0 / math.sqrt(2.0)
    for e in (0.1, 1.0, 10.0):
        p1, p2 = laplace_tails(1.0 / e, 0.5, -0.5)
        settings.append((f"laplace eps={e:g}", Laplace(epsilon=e, clip=1.0), None, e, 0.0, p1, p2))
    settings.append(
        (
            "L2-clipped laplace d=2 (true 2.83)",
            L2Laplace(),
            [(np.array([a, a]), np.array([-a, -a]))],
            2.0 * math.sqrt(2.0),
            0.0,
            None,
            None,
        )
    )
    t = np.linspace(-60.0, 60.0, 60001)
    for dl in (1e-2, 1e-3, 1e-5):
        g = Gaussian(clip=1.0, noise_multiplier=2.0, delta=dl)
        true = analytic_gaussian_epsilon(2.0, 2.0, dl)
        p1, p2 = stats.norm.sf((t - 1.0) / 2.0), stats.norm.sf((t + 1.0) / 2.0)
        pairs = [(np.array([1.0]), np.array([-1.0]))]
        settings.append((f"gaussian sigma=2 delta={dl:g}", g, pairs, true, dl, p1, p2))
    return settings


def tightness_header() -> str:
    hdr = f"{'setting':36s} {'true':>6s} {'bound':>8s} {'ratio':>6s} {'ceiling':>7s} {'pooled':>7s}"
    return (
        hdr + f" {'sec':>6s} {'impl':>8s} {'naive':>8s} {'speed-up':>8s}"
        f" {'mean':>6s} {'nopool':>6s} {'poiss':>6s} {'pceil':>6s} {'evceil':>6s}"
    )


def tightness_setting(args, k: int) -> tuple[dict, list[str]]:
    """Row ``k`` of the tightness table and its printed line (one task)."""
    n, alpha = args.samples, 1 - args.confidence
    name, mech, pairs, true, dl, p1, p2 = _tightness_settings()[k]
    c0 = time.process_time()
    r = audit(mech, pairs, samples=n, confidence=args.confidence, rng=args.seed, dim=1,
              profile=False)  # fmt: skip
    cpu0 = time.process_time() - c0
    bound = r.distribution.epsilon_lower_bound
    ceil = ceiling(p1, p2, n, alpha, dl) / true if p1 is not None else None
    pceil = pooled_ceiling(p1, p2, n, alpha, dl) / true if p1 is not None else None
    n_est = n - n // 10
    ev_ceil = event_ceiling(p1, p2, 2 * n_est, alpha, dl) / true if p1 is not None else None
    pois_ceil = (
        poisson_ceiling(p1, p2, 2 * n_est, alpha) / true if p1 is not None and dl == 0 else None
    )
    seed_ratios: dict[str, list[float]] = {"pooled": [], "single": [], "poisson": []}
    seed_wall: dict[str, float] = {"pooled": 0.0, "single": 0.0, "poisson": 0.0}
    seed_cpu: dict[str, float] = {"pooled": 0.0, "single": 0.0, "poisson": 0.0}
    variants = (
        ("pooled", True, "clopper-pearson"),
        ("single", False, "clopper-pearson"),
        ("poisson", True, "poisson"),
    )
    for seed in range(args.seed, args.seed + args.seeds):
        for key, pool, test in variants:
            w0, c0 = time.perf_counter(), time.process_time()
            rs = audit(mech, pairs, samples=n, confidence=args.confidence, rng=seed, dim=1,
                       profile=False, float_bits=False, pool=pool, ratio_test=test,
                       tradeoff=False)  # fmt: skip
            seed_wall[key] += time.perf_counter() - w0
            seed_cpu[key] += time.process_time() - c0
            seed_ratios[key].append(rs.distribution.epsilon_lower_bound / true)
    mean_p = float(np.mean(seed_ratios["pooled"]))
    mean_s = float(np.mean(seed_ratios["single"]))
    mean_j = float(np.mean(seed_ratios["poisson"]))
    w = r.distribution.witness
    x, x2 = (pairs or [(np.array(w.x), np.array(w.x2))])[0]
    naive_bound = naive_s = speedup = None
    if x.shape[0] == 1:
        t0 = time.perf_counter()
        naive_bound = naive_audit(mech, x, x2, args.naive_samples, args.confidence, args.seed)
        naive_s = time.perf_counter() - t0
        speedup = (2 * n * r.pairs_tested / r.seconds) / (2 * args.naive_samples / naive_s)
    row = {
        "setting": name,
        "true_epsilon": true,
        "delta": dl,
        "lower_bound": bound,
        "ratio": bound / true,
        "ceiling_ratio": ceil,
        "pooled_ceiling_ratio": pceil,
        "seeds": list(range(args.seed, args.seed + args.seeds)),
        "seed_ratios_pooled": seed_ratios["pooled"],
        "seed_ratios_without_pooling": seed_ratios["single"],
        "mean_ratio_pooled": mean_p,
        "mean_ratio_without_pooling": mean_s,
        "seed_ratios_poisson_pooled": seed_ratios["poisson"],
        "mean_ratio_poisson_pooled": mean_j,
        "min_ratio_poisson_pooled": float(np.min(seed_ratios["poisson"])),
        "poisson_pooled_ceiling_ratio": pois_ceil,
        "event_ceiling_ratio": ev_ceil,
        "mean_over_event_ceiling_poisson_pooled": mean_j / ev_ceil if ev_ceil else None,
        "mean_over_event_ceiling_default": mean_s / ev_ceil if ev_ceil else None,
        "seeds_wall_seconds": seed_wall,
        "seeds_cpu_seconds": seed_cpu,
        "seconds": r.seconds,
        "cpu_seconds": cpu0,
        "pairs_searched": r.pairs_tested,
        "witness": w.to_dict() if w else None,
        "implementation_bound": r.epsilon_lower_bound,
        "naive_bound": naive_bound,
        "naive_samples": args.naive_samples,
        "naive_seconds": naive_s,
        "speedup_samples_per_second": speedup,
    }
    cs = f"{ceil:7.3f}" if ceil is not None else f"{'n/a':>7s}"
    cs += f" {pceil:7.3f}" if pceil is not None else f" {'n/a':>7s}"
    nb = f"{naive_bound:8.3f}" if naive_bound is not None else f"{'n/a':>8s}"
    sp = f"{speedup:7.0f}x" if speedup is not None else f"{'n/a':>8s}"
    line = (
        f"{name:36s} {true:6.3f} {bound:8.4f} {bound / true:6.3f} {cs} {r.seconds:6.2f} "
        f"{r.epsilon_lower_bound:8.3f} {nb} {sp} {mean_p:6.3f} {mean_s:6.3f} {mean_j:6.3f} "
        + (f"{pois_ceil:6.3f}" if pois_ceil is not None else f"{'n/a':>6s}")
        + (f" {ev_ceil:6.3f}" if ev_ceil is not None else f" {'n/a':>6s}")
    )
    return row, [line]


def profile_row(args) -> tuple[dict, list[str]]:
    """The audited privacy profile of the Gaussian (sigma 2, sensitivity 2, claim at delta 1e-3)
    against its analytic profile: lower bound / true epsilon at each delta (one audit)."""
    g = Gaussian(clip=1.0, noise_multiplier=2.0, delta=1e-3)
    pairs = [(np.array([1.0]), np.array([-1.0]))]
    r = audit(g, pairs, samples=args.samples, confidence=args.confidence, rng=args.seed)
    p = r.profile
    pts, lines = [], []
    for d, lo in zip(p.delta, p.epsilon_lower, strict=True):
        true = math.inf if d == 0 else analytic_gaussian_epsilon(2.0, 2.0, d)
        pts.append({"delta": d, "lower": lo, "true": "inf" if math.isinf(true) else true})
        ratio = f"{lo / true:.3f}" if math.isfinite(true) else "n/a"
        lines.append(
            f"gaussian profile: delta {d:g}: lower {lo:.3f}, true {true:.3f}, ratio {ratio}"
        )
    return {"setting": "gaussian sigma=2 sensitivity=2, claim at delta=1e-3", "points": pts,
            "seconds": r.seconds, "events_estimated": p.events_estimated}, lines  # fmt: skip


def goal_run(args, seed: int) -> tuple[dict, list[str]]:
    """Issue 19's time goal: Laplace eps = 0.1 to >= 0.97 x in <= 10 s on 2 cores (a default
    audit, both verdicts, the mechanism's own candidate pairs), at --goal-samples per input;
    one seed (one task)."""
    r = audit(Laplace(epsilon=0.1, clip=1.0), samples=args.goal_samples, rng=seed)
    ratio = r.distribution.epsilon_lower_bound / 0.1
    line = (
        f"laplace eps=0.1 at {args.goal_samples:.0e} samples/input, seed {seed}: "
        f"ratio {ratio:.3f} in {r.seconds:.1f} s"
    )
    return {"seed": seed, "ratio": ratio, "seconds": r.seconds}, [line]


def goal_joint_run(args, seed: int) -> tuple[dict, list[str]]:
    """The time goal's audit with ``ratio_test="poisson", pool=True`` at --samples (one seed)."""
    w0, c0 = time.perf_counter(), time.process_time()
    r = audit(Laplace(epsilon=0.1, clip=1.0), samples=args.samples, rng=seed,
              ratio_test="poisson", pool=True)  # fmt: skip
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    ratio = r.distribution.epsilon_lower_bound / 0.1
    line = (
        f"laplace eps=0.1 at {args.samples:.0e} samples/input, ratio_test=poisson, pool, "
        f"seed {seed}: ratio {ratio:.3f} in {wall:.1f} s (CPU {cpu:.1f} s)"
    )
    return {"seed": seed, "ratio": ratio, "seconds": wall, "cpu_seconds": cpu}, [line]


class HalfSigma:
    """Gaussian noise sigma 1 claiming sigma 2 (broken)."""

    def __init__(self) -> None:
        c = Gaussian(clip=1.0, noise_multiplier=2.0, delta=1e-3)
        self.real = Gaussian(clip=1.0, noise_multiplier=1.0, delta=1e-3)
        self.epsilon, self.delta, self.sigma, self.sensitivity = (
            c.epsilon, c.delta, c.sigma, c.sensitivity,
        )  # fmt: skip

    def privatize(self, x, rng):
        return self.real.privatize(x, rng)


class HalfScale:
    """Laplace with the scale of eps 2 claiming eps 1 (broken)."""

    epsilon = 1.0

    def __init__(self) -> None:
        self.real = Laplace(epsilon=2.0, clip=1.0)

    def candidate_pairs(self, dim):
        return self.real.candidate_pairs(dim)

    def privatize(self, x, rng):
        return self.real.privatize(x, rng)


def _tradeoff_cases() -> list[tuple]:
    gp = [(np.array([1.0]), np.array([-1.0]))]
    return [
        ("gaussian sigma=2 (correct, G_1)", Gaussian(clip=1.0, noise_multiplier=2.0, delta=1e-3),
         gp, 1.0),
        ("gaussian noise sigma=1 claiming sigma=2 (broken)", HalfSigma(), gp, 2.0),
        ("laplace eps=1 (correct)", Laplace(epsilon=1.0, clip=1.0), None, None),
        ("laplace scale of eps=2 claiming eps=1 (broken)", HalfScale(), None, None),
    ]  # fmt: skip


def tradeoff_row(args, k: int) -> tuple[dict, list[str]]:
    """The f-DP trade-off curve at --samples per input: correct mechanisms against their own
    curve (Gaussian sigma 2, sensitivity 2: G_1; Laplace eps 1: f_{1,0}) and broken ones (noise
    sigma 1 claiming sigma 2; Laplace with the scale of eps 2 claiming eps 1); case ``k``."""
    name, mech, pairs, true_mu = _tradeoff_cases()[k]
    w0, c0 = time.perf_counter(), time.process_time()
    r = audit(mech, pairs, samples=args.samples, confidence=args.confidence, rng=args.seed,
              float_bits=False, profile=False)  # fmt: skip
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    t = r.tradeoff
    au, bu = np.array(t.type1_upper), np.array(t.type2_upper)
    gap = bu - np.array(t.claimed_at_type1)
    row = {"setting": name, "claimed_from": t.claimed_from, "violation": t.violation,
           "points": len(au), "points_below_claim": int(sum(t.below_claim)),
           "min_gap_to_claim": float(gap.min()), "seconds": wall, "cpu_seconds": cpu,
           "tradeoff": t.to_dict()}  # fmt: skip
    if true_mu is not None:
        from ldp_audit.stats import gaussian_tradeoff

        row["max_gap_to_true_curve"] = float(np.max(bu - gaussian_tradeoff(au, true_mu)))
    line = (
        f"f-DP {name}: claimed {t.claimed_from}, {len(au)} points, "
        f"{row['points_below_claim']} below the claim (violation {t.violation}), "
        f"min gap {gap.min():+.4f}, {wall:.1f} s (CPU {cpu:.1f} s)"
    )
    return row, [line]


def scalar(args) -> tuple[dict, list[str]]:
    dpm, how = _diffprivlib()
    if dpm is None:
        return {"skipped": how}, [f"scalar adapter: skipped ({how})"]
    n_loop = args.scalar_samples
    mech = from_scalar(
        lambda r: dpm.Laplace(epsilon=1.0, sensitivity=1.0, random_state=r).randomise,
        epsilon=1.0,
        domain=(0.0, 1.0),
        seeding="random_state",
        name="diffprivlib.mechanisms.Laplace(epsilon=1, sensitivity=1).randomise",
    )
    vals = np.zeros(n_loop)
    loop_rates, adapter_rates = [], []
    for rep in range(3):  # alternated, medians: the machine is shared and its load varies
        lap = dpm.Laplace(epsilon=1.0, sensitivity=1.0, random_state=np.random.RandomState(rep))
        t0 = time.perf_counter()
        _ = [lap.randomise(float(v)) for v in vals]
        loop_rates.append(n_loop / (time.perf_counter() - t0))
        t0 = time.perf_counter()
        mech.privatize(vals[:, None], np.random.default_rng(rep))
        adapter_rates.append(n_loop / (time.perf_counter() - t0))
    loop_rate = float(np.median(loop_rates))
    adapter_rate = float(np.median(adapter_rates))
    r = audit(mech, samples=args.scalar_samples, confidence=args.confidence, rng=args.seed)
    out = {
        "library": how,
        "mechanism": mech.name,
        "samples_per_input": args.scalar_samples,
        "loop_samples_per_second": loop_rate,
        "adapter_samples_per_second": adapter_rate,
        "adapter_over_loop": adapter_rate / loop_rate,
        "audit_seconds": r.seconds,
        "distribution": r.distribution.to_dict(),
        "implementation": r.implementation.to_dict() if r.implementation else None,
        "leak": r.leak,
    }
    line = (
        f"diffprivlib Laplace eps=1 via from_scalar: {adapter_rate:,.0f} samples/s vs plain loop "
        f"{loop_rate:,.0f} samples/s ({adapter_rate / loop_rate:.2f}x); audit at "
        f"{args.scalar_samples} samples/input: distribution bound "
        f"{r.distribution.epsilon_lower_bound:.3f}, implementation bound "
        f"{r.epsilon_lower_bound:.3f} ({r.leak}), {r.seconds:.1f} s"
    )
    return out, [line]


#: The benchmark's independent pieces, by name: ``(args, k) -> (row, printed lines)``.
_PIECES = {
    "tightness": tightness_setting,
    "profile": lambda args, k: profile_row(args),
    "goal": goal_run,
    "goal-poisson-pooled": goal_joint_run,
    "tradeoff": tradeoff_row,
    "scalar": lambda args, k: scalar(args),
}


def _task(item: dict) -> tuple[dict, list[str]]:
    """One piece of the benchmark (a ``run_tasks`` task): its row and its printed lines."""
    return _PIECES[item["piece"]](item["args"], item["k"])


def _items(args) -> list[dict]:
    """Every piece, in the order the default run prints them."""
    items = [{"piece": "tightness", "k": k} for k in range(len(_tightness_settings()))]
    items.append({"piece": "profile", "k": 0})
    items += [{"piece": "goal", "k": seed} for seed in range(3)]
    items += [{"piece": "goal-poisson-pooled", "k": seed} for seed in range(3)]
    items += [{"piece": "tradeoff", "k": k} for k in range(len(_tradeoff_cases()))]
    items.append({"piece": "scalar", "k": 0})
    return [dict(it, args=args) for it in items]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=1_000_000)
    ap.add_argument("--naive-samples", type=int, default=20_000)
    ap.add_argument("--scalar-samples", type=int, default=100_000)
    ap.add_argument("--goal-samples", type=int, default=6_000_000)
    ap.add_argument("--confidence", type=float, default=0.95)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, default=6, help="seeds per setting for mean ratios")
    ap.add_argument("--json", type=Path, default=Path("benchmarks/results/bench_audit.json"))
    ap.add_argument(
        "--backend",
        choices=("local", "ray"),
        default=None,
        help="run the independent audits as ldp_audit.backends.run_tasks tasks here (a process "
        "pool with --workers > 1) or on Ray; default: in this process, one after the other, as "
        "before (timings are only comparable there: parallel tasks share the cores)",
    )
    ap.add_argument("--address", default=None, help="with --backend ray: an existing cluster")
    ap.add_argument("--workers", type=int, default=None, help="pool size / Ray CPUs started here")
    args = ap.parse_args()
    from ldp_audit.backends import backend_options, describe_spec, run_tasks

    try:
        where = backend_options(args)  # usage errors (exit 2) before any audit
    except InvalidParameterError as exc:
        ap.error(str(exc))
    items = _items(args)
    print(tightness_header())
    if args.backend is None:  # as before: in this process, each line as soon as it is measured
        outs = []
        for item in items:
            outs.append(_task(item))
            for line in outs[-1][1]:
                print(line, flush=True)
    else:
        outs = run_tasks(_task, items, describe=lambda it: describe_spec(
            {"piece": it["piece"], "k": it["k"], "seed": it["args"].seed}), **where)  # fmt: skip
        for _, lines in outs:
            for line in lines:
                print(line, flush=True)
    got: dict[str, list] = {}
    for item, (row, _) in zip(items, outs, strict=True):
        got.setdefault(item["piece"], []).append(row)
    out = {
        "command": "benchmarks/bench_audit.py "
        + f"--samples {args.samples} --naive-samples {args.naive_samples} "
        + f"--scalar-samples {args.scalar_samples} --goal-samples {args.goal_samples} "
        + f"--seed {args.seed} --seeds {args.seeds}"
        + (f" --backend {args.backend}" if args.backend else "")
        + (f" --address {args.address}" if args.address else "")
        + (f" --workers {args.workers}" if args.workers else ""),
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip()
        + ", shared and loaded 2-core machine",
        "samples_per_input": args.samples,
        "confidence": args.confidence,
        "results": got["tightness"],
        "profile": got["profile"][0],
        "time_goal": {
            "setting": "laplace eps=0.1",
            "samples_per_input": args.goal_samples,
            "runs": got["goal"],
            "poisson_pooled": {
                "samples_per_input": args.samples,
                "runs": got["goal-poisson-pooled"],
            },
        },
        "tradeoff": got["tradeoff"],
        "scalar_adapter": got["scalar"][0],
    }
    if args.backend:  # the default run's JSON is unchanged
        out["backend"] = where
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=2))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
