"""Speed of the dynamics attack's hot paths against the straightforward implementation.

In the same run, on the same inputs:

1. shadow simulation: one batched ``episode_gradients`` call for B episodes (what
   ``ldp_audit.attacks.dynamics_shadow.simulate_shadow`` does) vs. B calls of one episode each;
2. the Laplace likelihood of the reports (``ShadowGradientAttack.log_likelihood``: scipy ``cdist``
   + ``logsumexp``) vs. a Python loop over reports with numpy per report.

Prints the ratios and writes ``benchmarks/results/bench_attacks.json``.

    .venv/bin/python benchmarks/bench_attacks.py [--episodes 600] [--reports 300]
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from pathlib import Path

import numpy as np

from ldp_audit.attacks.dynamics_shadow import GRAVITIES, ShadowGradientAttack, simulate_shadow
from ldp_audit.mechanisms import Laplace
from ldp_audit.training.pgc_a3c.model import init_theta
from ldp_audit.training.pgc_a3c.rollout import episode_gradients


def _best(fn, repeat: int = 3) -> float:
    best = math.inf
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=600)
    ap.add_argument("--reports", type=int, default=300)
    ap.add_argument("--shadow", type=int, default=1000, help="shadow episodes per candidate")
    ap.add_argument("--json", type=Path, default=Path("benchmarks/results/bench_attacks.json"))
    a = ap.parse_args()

    rng = np.random.default_rng(0)
    theta = init_theta(rng)
    g = np.resize(np.asarray(GRAVITIES), a.episodes)

    def batched() -> None:
        simulate_shadow(theta, g, np.random.default_rng(1))

    def looped() -> None:
        r = np.random.default_rng(1)
        for gi in g:
            episode_gradients(theta[None, :], np.array([gi]), r)

    t_batch, t_loop = _best(batched), _best(looped, repeat=1)

    # Laplace likelihood over (reports x shadows)
    mech = Laplace(epsilon=1.0, clip=0.01)
    shadow_g = np.repeat(np.asarray(GRAVITIES), a.shadow)
    shadow = simulate_shadow(theta, shadow_g, np.random.default_rng(2))
    est = ShadowGradientAttack(mech).fit(shadow, shadow_g)
    reports = mech.privatize(shadow[: a.reports], np.random.default_rng(3))
    ll_vec = est.log_likelihood(reports)

    def vec() -> None:
        est.log_likelihood(reports)

    def loop() -> np.ndarray:
        b = mech.clip / mech.epsilon
        out = np.empty((reports.shape[0], len(GRAVITIES)))
        for i, y in enumerate(reports):
            for c, s in enumerate(est.support_):
                d = np.abs(y[None, :] - s).sum(axis=1)
                m = (-d / b).max()
                out[i, c] = m + math.log(np.exp(-d / b - m).mean())
        return out

    np.testing.assert_allclose(loop(), ll_vec, rtol=1e-9, atol=1e-9)
    t_vec, t_lp = _best(vec), _best(loop, repeat=1)

    rows = [
        {
            "name": "shadow simulation (episodes)",
            "n": a.episodes,
            "vectorised_s": t_batch,
            "straightforward_s": t_loop,
            "speedup": t_loop / t_batch,
        },
        {
            "name": "Laplace likelihood (reports x 3*shadow)",
            "n": [a.reports, 3 * a.shadow],
            "vectorised_s": t_vec,
            "straightforward_s": t_lp,
            "speedup": t_lp / t_vec,
        },
    ]
    for r in rows:
        print(
            f"{r['name']:42s} n={r['n']!s:12s} vectorised {r['vectorised_s']:.3f} s  "
            f"straightforward {r['straightforward_s']:.3f} s  ratio {r['speedup']:.1f}x"
        )
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(
        json.dumps(
            {
                "machine": f"{platform.machine()} {platform.system()} "
                "(2-core x86_64 CPU, shared with other jobs)",
                "command": "python benchmarks/bench_attacks.py "
                f"--episodes {a.episodes} --reports {a.reports} --shadow {a.shadow}",
                "results": rows,
            },
            indent=1,
        )
    )
    print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
