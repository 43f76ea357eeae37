"""The dynamics-inference sweep of issue 6: eps x mechanism x reports per agent, JSON + PNG.

``ldp-audit attack sweep`` attacks agents whose gravity is drawn uniformly from {9.7, 9.8, 9.9}
at every epsilon in {0.5, 1, 2, 5, 10, inf} (per report), for the Laplace (Alg. 2, C = 0.01) and
PRS (Alg. 3, C = 1) mechanisms, with T in {1, 5, 20} reports per
agent (together ``T * eps``-LDP, Sec. 3.2.1), at one or more broadcast thetas:

* ``init``: the first theta an honest aggregator broadcasts (PGC-A3C's Glorot initialisation);
* ``trained``: an honest mid-training theta (the final theta of a non-private PGC-A3C trial of
  ``--train-submissions`` submissions);
* ``crafted``: the malicious aggregator's theta
  (:func:`ldp_audit.attacks.dynamics_experiment.craft_theta`).

Cost-saving design, stated in the JSON: per theta, the agents' clean gradients (``n_agents x 20``
episodes) and the attacker's clean shadow gradients (``n_shadow`` per candidate) are simulated
once and shared by all cells; each cell draws fresh mechanism noise. Cells are therefore
correlated through the shared episodes, but each cell's accuracy is still a correct binomial
estimate for its own setting. eps = inf is the non-private baseline (``NoPrivacy``), the same for
both mechanisms.

Writes ``<out>/sweep.json`` (every :class:`~ldp_audit.attacks.scoring.AttackResult` plus settings)
and
``<out>/sweep.png`` (accuracy vs eps with CP intervals and the ceiling curves).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

# ldp_audit.attacks.dynamics_* (scikit-learn) is imported inside the functions, so that
# registering the `ldp-audit attack sweep` parser stays light.

EPSILONS: tuple[float, ...] = (0.5, 1.0, 2.0, 5.0, 10.0, math.inf)
MECHANISMS: tuple[str, ...] = ("laplace", "prs")
REPORTS: tuple[int, ...] = (1, 5, 20)
THETAS: tuple[str, ...] = ("init", "trained", "crafted")


def make_mechanism(name: str, epsilon: float) -> Any:
    """Paper mechanisms at one per-report epsilon (C = 0.01 Laplace, C = 1 PRS); inf -> none."""
    from ldp_audit.training.pgc_a3c.config import PgcA3cConfig

    none = math.isinf(epsilon) or name == "none"
    return PgcA3cConfig(mechanism="none" if none else name, epsilon=epsilon).make_mechanism()


def broadcast_theta(
    kind: str, rng: np.random.Generator, *, train_submissions: int = 3000, n_probe: int = 1000
) -> tuple[np.ndarray, dict[str, Any]]:
    """The theta of one threat model (see module docstring) and a description of it."""
    from ldp_audit.attacks.dynamics_experiment import craft_theta, linear_controller_theta

    if kind == "init":
        from ldp_audit.training.pgc_a3c.model import init_theta

        return init_theta(rng), {"theta": "init", "source": "PGC-A3C Glorot initialisation"}
    if kind == "trained":
        from ldp_audit.training.pgc_a3c.config import PgcA3cConfig
        from ldp_audit.training.pgc_a3c.grid import train

        cfg = PgcA3cConfig(mechanism="none", trials=1, max_submissions=train_submissions)
        res = train(cfg, seed=int(rng.integers(2**31)), progress=False)
        return np.asarray(res.theta[0]), {
            "theta": "trained",
            "source": f"non-private PGC-A3C trial, {train_submissions} submissions",
            "mean_last_100_scores": float(np.nanmean(res.zeta[0][-100:])),
        }
    if kind == "crafted":
        theta, info = craft_theta(rng=rng, n_probe=n_probe)
        return theta, {"theta": "crafted", "source": "craft_theta (malicious aggregator)", **info}
    if kind.startswith("linear"):
        w = [float(v) for v in kind[len("linear") :].split(":")]
        return linear_controller_theta(w), {"theta": kind, "source": "linear controller"}
    raise ValueError(f"theta must be one of {THETAS} or 'linearW0:W1:W2:W3', got {kind!r}")


def sweep(
    *,
    thetas: Sequence[str] = THETAS,
    epsilons: Sequence[float] = EPSILONS,
    mechanisms: Sequence[str] = MECHANISMS,
    reports: Sequence[int] = REPORTS,
    n_agents: int = 300,
    n_shadow: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
    train_submissions: int = 3000,
    n_probe: int = 1000,
    progress: bool = False,
    backend: str = "local",
    address: str | None = None,
    workers: int | None = None,
) -> dict[str, Any]:
    """Run the sweep; returns the JSON-able document (see module docstring).

    Each theta is one task of :func:`ldp_audit.backends.run_tasks` (its randomness is the
    theta's own child generator of ``seed``), so ``backend="ray"`` (``address`` for a cluster)
    gives bit for bit the results of ``backend="local"``; only the ``seconds`` fields differ.
    """
    from ldp_audit.attacks.dynamics_shadow import GRAVITIES, check_count, check_nonprivate_shadows
    from ldp_audit.backends import check_backend, run_tasks

    check_backend(backend, address, workers)  # before any work
    if math.inf in epsilons:  # the non-private cell's classifier: before any simulation
        check_nonprivate_shadows(check_count(n_shadow, "n_shadow") * len(GRAVITIES), len(GRAVITIES))
    t_start = time.perf_counter()
    root = np.random.default_rng(seed)
    cands = np.asarray(GRAVITIES)
    out: dict[str, Any] = {
        "settings": {
            "epsilons": ["inf" if math.isinf(e) else e for e in epsilons],
            "mechanisms": list(mechanisms),
            "reports_per_agent": list(reports),
            "candidates": cands.tolist(),
            "n_agents": n_agents,
            "n_shadow_per_candidate": n_shadow,
            "seed": seed,
            "confidence": confidence,
            "craft_probe_per_candidate": n_probe,
            "epsilon_meaning": "per report; T reports compose to T * eps",
            "shared_episodes": "per theta, agents' and shadow episodes are simulated once and "
            "shared by all cells; mechanism noise is fresh per cell",
            "machine": f"{platform.machine()} {platform.system()}",
            "backend": backend,
        },
        "thetas": [],
        "results": [],
    }
    in_process = backend == "local" and (workers is None or workers == 1)
    grid = {"epsilons": tuple(epsilons), "mechanisms": tuple(mechanisms), "reports": tuple(reports)}
    sizes = {"n_agents": n_agents, "n_shadow": n_shadow, "n_probe": n_probe}
    same = {**grid, **sizes, "confidence": confidence, "train_submissions": train_submissions}
    same.update(progress=bool(progress and in_process), seed=seed)
    tasks = [
        {"kind": kind, "rng": th_rng, **same}
        for kind, th_rng in zip(thetas, root.spawn(len(thetas)), strict=True)
    ]
    done = run_tasks(
        theta_task,
        tasks,
        backend=backend,
        address=address,
        workers=workers,
        progress="sweep thetas" if progress and not in_process else None,
        describe=lambda t: f"theta={t['kind']!r}, seed={t['seed']}",
    )
    for info, results in done:
        out["thetas"].append(info)
        out["results"].extend(results)
    out["violations"] = sum(r["violation"] for r in out["results"])
    out["seconds"] = time.perf_counter() - t_start
    return out


def theta_task(task: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One theta of the sweep (a task of :func:`ldp_audit.backends.run_tasks`): the broadcast
    theta, the agents' and shadow episodes, then every (mechanism, eps, T) cell.

    ``task`` holds ``kind``, ``rng`` (the theta's own generator), the grid and the sizes; the
    result depends on nothing else. Returns ``(theta info, [AttackResult.to_dict(), ...])``.
    """
    from ldp_audit.attacks.dynamics_shadow import (
        GRAVITIES,
        ShadowGradientAttack,
        mechanism_config,
        mechanism_epsilon,
        privatize,
        simulate_shadow,
    )
    from ldp_audit.attacks.scoring import AttackResult

    kind, th_rng = task["kind"], task["rng"]
    epsilons, mechanisms, reports = task["epsilons"], task["mechanisms"], task["reports"]
    n_agents, n_shadow, progress = task["n_agents"], task["n_shadow"], task["progress"]
    cands = np.asarray(GRAVITIES)
    t_max = max(reports)
    t0 = time.perf_counter()
    design_rng, world_rng, shadow_rng, noise_rng = th_rng.spawn(4)
    theta, info = broadcast_theta(
        kind, design_rng, train_submissions=task["train_submissions"], n_probe=task["n_probe"]
    )
    # --- the world: agents' gravities (secret, scoring only) and clean gradients ---
    secret = world_rng.choice(cands, size=n_agents)
    grads = simulate_shadow(theta, np.repeat(secret, t_max), world_rng, progress=progress)
    grads = grads.reshape(n_agents, t_max, -1)
    # --- the attacker's clean shadows at the broadcast theta ---
    shadow_g = np.repeat(cands, n_shadow)
    shadow = simulate_shadow(theta, shadow_g, shadow_rng, progress=progress)
    info["simulation_seconds"] = time.perf_counter() - t0
    cells: list[tuple[str, float]] = [("none", math.inf)] if math.inf in epsilons else []
    cells += [(m, e) for m in mechanisms for e in epsilons if math.isfinite(e)]
    results: list[dict[str, Any]] = []
    from tqdm.auto import tqdm

    total = len(cells) * len(reports)
    bar = tqdm(total=total, desc=f"sweep cells ({kind})", unit="cell", disable=not progress)
    for (mname, eps), cell_rng in zip(cells, noise_rng.spawn(len(cells)), strict=True):
        mech = make_mechanism(mname, eps)
        fit_rng, rep_rng = cell_rng.spawn(2)
        # one fitted attack per cell, reused for every T (reports are what differ)
        est = ShadowGradientAttack(mech, random_state=fit_rng).fit(shadow, shadow_g)
        for T in reports:
            c0 = time.perf_counter()
            rows = grads[:, :T].reshape(n_agents * T, -1)
            noisy = privatize(mech, rows, rep_rng)
            ids, guess, _ = est.predict_groups(noisy, np.repeat(np.arange(n_agents), T))
            correct = int(np.sum(guess == secret[ids]))  # scoring only
            res = AttackResult.from_guesses(
                attack="dynamics-malicious" if kind == "crafted" else "dynamics",
                mechanism=mechanism_config(mech),
                epsilon=mechanism_epsilon(mech),
                reports_per_agent=T,
                k=cands.size,
                n=n_agents,
                correct=correct,
                confidence=task["confidence"],
                seconds=time.perf_counter() - c0,
                extra={"theta": kind, "mechanism_family": mname, "method": est.method_},
            )
            results.append(res.to_dict())
            bar.update(1)
    bar.close()
    return info, results


def plot(doc: dict[str, Any], path: str | Path) -> None:
    """Accuracy vs per-report epsilon with CP intervals and the ceiling curves, one panel per
    (theta, mechanism)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ldp_audit.attacks.scoring import accuracy_ceiling

    res = doc["results"]
    thetas = [t["theta"] for t in doc["thetas"]]
    mechs = doc["settings"]["mechanisms"]
    reports = doc["settings"]["reports_per_agent"]
    finite = [e for e in doc["settings"]["epsilons"] if e != "inf"]
    x_inf = max(finite) * 3 if finite else 1.0
    k = len(doc["settings"]["candidates"])
    fig, axes = plt.subplots(
        len(thetas), len(mechs), figsize=(5.2 * len(mechs), 3.6 * len(thetas)), squeeze=False
    )
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    grid = np.geomspace(min(finite) / 1.5, max(finite) * 1.5, 200) if finite else np.array([])
    for i, th in enumerate(thetas):
        for j, m in enumerate(mechs):
            ax = axes[i][j]
            for c, T in enumerate(reports):
                col = colors[c % len(colors)]
                pts = [
                    r
                    for r in res
                    if r["extra"]["theta"] == th
                    and r["reports_per_agent"] == T
                    and r["extra"]["mechanism_family"] in (m, "none")
                ]
                pts.sort(key=lambda r: x_inf if r["epsilon"] == "inf" else r["epsilon"])
                xs = [x_inf if r["epsilon"] == "inf" else r["epsilon"] for r in pts]
                ys = [r["accuracy"] for r in pts]
                lo = [r["accuracy"] - r["accuracy_ci"][0] for r in pts]
                hi = [r["accuracy_ci"][1] - r["accuracy"] for r in pts]
                ax.errorbar(
                    xs,
                    ys,
                    yerr=[lo, hi],
                    marker="o",
                    ms=4,
                    capsize=2,
                    color=col,
                    label=f"attack, T={T}",
                )
                ax.plot(
                    grid,
                    [accuracy_ceiling(e, k, T) for e in grid],
                    "--",
                    color=col,
                    lw=1,
                    label=f"ceiling, T={T}",
                )
            ax.axhline(1.0 / k, color="grey", lw=0.8, ls=":", label="chance")
            ax.set_xscale("log")
            ticks = finite + [x_inf]
            ax.set_xticks(ticks)
            ax.set_xticklabels([f"{e:g}" for e in finite] + ["inf"])
            ax.set_ylim(0.2, 1.02)
            ax.set_xlabel("epsilon per report")
            ax.set_ylabel("accuracy (3 gravities)")
            ax.set_title(f"{m.upper()} — theta: {th}", fontsize=10)
            if i == 0 and j == 0:
                ax.legend(fontsize=7, ncol=2)
    fig.suptitle(
        f"Dynamics inference vs the LDP ceiling (n={doc['settings']['n_agents']} agents per "
        f"cell, 95% CP intervals)",
        fontsize=11,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_from_args(args: argparse.Namespace) -> int:
    """Run the sweep from parsed arguments; print one line per cell; 1 if any violation."""
    from ldp_audit.backends import check_backend
    from ldp_audit.rundir import check_report_dir
    from ldp_audit.rundir.paths import report_written, timestamped_dir

    check_backend(args.backend, args.address, args.workers)  # usage errors before any work
    if args.out is None:
        args.out = timestamped_dir("runs/attack-sweep")
    out_dir = check_report_dir(
        args.out, overwrite=args.overwrite, generated=("sweep.json", "sweep.png")
    )  # before the sweep runs
    doc = sweep(
        thetas=[t.strip() for t in args.thetas.split(",") if t.strip()],
        n_agents=args.agents,
        n_shadow=args.shadow,
        seed=args.seed,
        train_submissions=args.train_submissions,
        n_probe=args.probe,
        progress=not args.no_progress,
        backend=args.backend,
        address=args.address,
        workers=args.workers,
    )
    doc["settings"]["command"] = "ldp-audit " + " ".join(sys.argv[1:] or ["attack", "sweep"])
    out_dir.mkdir(parents=True, exist_ok=True)  # after the sweep: a failed one leaves no folder
    with report_written(out_dir):  # an interruption leaves no half report
        (out_dir / "sweep.json").write_text(json.dumps(doc, indent=1))
        plot(doc, out_dir / "sweep.png")
    for r in doc["results"]:
        eps = r["epsilon"]
        print(
            f"{r['extra']['theta']:8s} {r['extra']['mechanism_family']:8s} eps={eps!s:>4} "
            f"T={r['reports_per_agent']:2d} acc={r['accuracy']:.3f} "
            f"[{r['accuracy_ci'][0]:.3f}, {r['accuracy_ci'][1]:.3f}] "
            f"ceiling={r['ceiling']:.3f} eps_lb={r['epsilon_lower_bound']:.3f}"
            + (" VIOLATION" if r["violation"] else "")
        )
    print(f"wrote {out_dir / 'sweep.json'} and {out_dir / 'sweep.png'} in {doc['seconds']:.0f} s")
    return 1 if doc["violations"] else 0
