"""The report of ``ldp-audit reproduce dprl``: Figures 8-9 and 12-13 and README.md.

:func:`figures` draws reward (Figures 8 and 12) and convergence time (Figures 9 and 13) against
the noise level from the grid's runs; :func:`readme` writes the README from ``results.json``'s
content (the table, the one-run audit table and a reading of it computed from the numbers), so
a committed report re-renders from its ``results.json``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit.config import config_from_dict
from ldp_audit.rundir.files import fmt_number
from ldp_audit.training.dprl.algos import SOLVED_WINDOW, window_means
from ldp_audit.training.dprl.config import ReproduceSettings
from ldp_audit.training.dprl.reproduce_runs import levels as grid_levels
from ldp_audit.training.frd.trends import median_ci
from ldp_audit.training.reproduction import restore
from ldp_audit.training.reproduction_statement import readme_page

__all__ = ["figures", "pages", "readme"]


def _moving(r: np.ndarray) -> np.ndarray:
    """The mean of the last 25 returns at each episode (NaN before the 25th)."""
    out = np.full(r.size, np.nan)
    out[SOLVED_WINDOW - 1 :] = window_means(r)
    return out


def figures(out: Path, runs: list[dict[str, Any]], s: ReproduceSettings) -> dict[str, str]:
    """Figures 8 and 12 (return over episodes per noise level) and 9 and 13 (episodes to solve
    against sigma) of the grid's ``runs``, written into ``out``; returns name -> file name."""
    import warnings

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = {}
    for fam, fr, fc in (("dpsgd", "figure8", "figure9"), ("obs-noise", "figure12", "figure13")):
        dp = fam == "dpsgd"
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
        fig_c, axes_c = plt.subplots(1, 2, figsize=(10, 3.4))
        for ax, ax_c, algo in zip(axes, axes_c, ("reinforce", "dqn"), strict=True):
            xs, ys, lo, hi, miss = [], [], [], [], []
            for sigma, clip_only in grid_levels(s, fam):
                rs = [r for r in runs if r["algo"] == algo and r["family"] == fam
                      and r["sigma"] == sigma
                      and bool(r.get("clip_only")) == clip_only]  # fmt: skip
                if not clip_only:  # Figure 9/13's x axis is sigma: clip-only is in Figure 8/12
                    horizon = max(len(r["returns"]) for r in rs)
                    c = np.array([min(r["convergence_episode"], horizon) for r in rs], dtype=float)
                    xs.append(sigma)
                    ys.append(c.mean())
                    lo.append(c.min())
                    hi.append(c.max())
                    miss.append(sum(math.isinf(r["convergence_episode"]) for r in rs))
                n = min(len(r["returns"]) for r in rs)
                if n == 0:
                    continue
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN windows
                    mv = np.stack([_moving(np.asarray(r["returns"][:n])) for r in rs])
                    mean = np.nanmean(mv, axis=0) if np.isfinite(mv).any() else mv[0]
                    band = np.nanmin(mv, axis=0), np.nanmax(mv, axis=0)
                eps = rs[0]["epsilon"]
                lab = (
                    "clip only (sigma=0)"
                    if clip_only
                    else f"sigma={sigma:g}" + ("" if sigma else " (non-private)")
                )
                if dp and sigma:
                    lab += f", eps={eps:.3g}" if math.isfinite(eps) else ", eps=inf"
                x = np.arange(1, n + 1)
                ax.plot(x, mean, label=lab)
                ax.fill_between(x, *band, alpha=0.2)
            ax.axhline(475, ls=":", color="k")
            ax.set_title(f"{algo.upper()} ({'DP-SGD' if dp else 'observation noise'})")
            ax.set(xlabel="episode", ylabel="return (mean of 25; band: min-max over seeds)")
            ax.legend(fontsize=7)
            ax_c.errorbar(xs, ys, yerr=[np.subtract(ys, lo), np.subtract(hi, ys)], marker="o",
                          capsize=3)  # fmt: skip
            for x, y, k in zip(xs, ys, miss, strict=True):
                if k:  # centred above its marker: on the symlog axis no two labels overlap
                    ax_c.annotate(f"{k}/{s.seeds}", (x, y), xytext=(0, 5), ha="center",
                                  textcoords="offset points", fontsize=7)  # fmt: skip
            if any(xs):  # sigma 0 and sigma 0.01-0.1 were crowded on a linear axis
                ax_c.set_xscale("symlog", linthresh=min(x for x in xs if x > 0))
                ax_c.set_xticks(xs, [f"{x:g}" for x in xs])
            ax_c.margins(y=0.12)  # room for the labels above the top markers
            ax_c.set_title(f"{algo.upper()}: convergence ({'DP-SGD' if dp else 'obs.'})")
            ax_c.set(
                xlabel="noise multiplier sigma (k/n: seeds of n unsolved)",
                ylabel="episodes to solve (unsolved = run length)",
            )
        for name, f in ((fr, fig), (fc, fig_c)):
            f.tight_layout()
            f.savefig(out / f"{name}.png", dpi=100)
            plt.close(f)
            names[name] = f"{name}.png"
    return names


def _f(v: Any, nd: int = 3) -> str:
    return fmt_number(v, nd, nan="n/a")


def _ci(lo_hi: Any) -> str:
    """An interval of the README's table, "[lo, hi]" (results.json writes a NaN end as null)."""
    return "[{}, {}]".format(*(fmt_number(x, 4, none="n/a", nan="n/a") for x in lo_hi))


def _convergence(res: dict[str, Any], row: dict[str, Any]) -> str:
    """A table row's median convergence episode and its order-statistic interval, from the
    row's per-seed runs in ``res`` (unsolved seeds are inf and count)."""
    key = ("algo", "family", "sigma", "clip_only")
    conv = [x["convergence_episode"] for x in res["runs"] if all(x[k] == row[k] for k in key)]
    med, lo, hi, _ = median_ci(conv)
    return f"{_f(med, 4)} {_ci((lo, hi))}"


def _reading(audits: list[dict[str, Any]]) -> str:
    """What the audit table says, from the numbers (no fixed claims)."""
    correct = [a for a in audits if a["trainer"].startswith("correct")]
    broken = [a for a in audits if a not in correct]
    flagged = [a["trainer"] for a in broken if a["white-box"]["violation"]]
    false = [a for a in correct if a["white-box"]["violation"]]
    missed = [a for a in broken if not a["white-box"]["violation"]]
    parts = [
        "Reading: broken trainers flagged in one run at 95% confidence (white-box, any of the "
        "tests): "
        + (", ".join(flagged) if flagged else "none")
        + f"; false alarms on the {len(correct)} correct runs: {len(false)} (each run's verdict "
        "has false-alarm probability <= 5%)."
    ]
    for a in missed:
        parts.append(f" Not flagged: {a['trainer']}.")
    by = {a["trainer"]: a["white-box"] for a in audits}
    for n in (n for n in by if n.startswith(("per-layer", "accountant charged"))):
        w = by[n]
        parts.append(
            f" {n}: Steinke (eps, delta) bound {w['epsilon_lower_bound']:.2f} vs claimed "
            f"{_f(w['accountant_epsilon'])}; {w['family']} family bound "
            f"{_f(w['family_epsilon_lower_bound'])}; flagged by "
            + (", ".join(f"{t} (p = {_f(w['tests'][t])})" for t in w["flagged_by"]) or "none")
            + "."
        )
    return "".join(parts)


def _preset_words(name: str) -> str:
    from ldp_audit.training.dprl.trainer import DQN_PRESETS

    kw = {k: v for k, v in DQN_PRESETS[name].items() if k not in ("total_steps", "eval_episodes")}
    if not kw:
        return "the DprlConfig defaults"
    return "the DprlConfig defaults with " + ", ".join(f"{k} = {v}" for k, v in kw.items())


def _audit_lines(res: dict[str, Any], s: ReproduceSettings) -> list[str]:
    """The one-run audit section of the README (the audits of the Opacus door, issue 36)."""
    L = [
        "## One-run audit of correct and broken trainers, 95% confidence",
        "",
        "The audit of `train dprl` is that of a user's Opacus loop (`ldp_audit.opacus`, "
        "docs/opacus.md): white-box, seven tests, each at level 5%/7 (Bonferroni; the ledger "
        "check is deterministic), so a correct trainer's verdict is a false alarm with "
        "probability <= 5%: the (eps, delta) bound of Steinke, Nasr & Jagielski (2023); the "
        "f-DP one-run test of the ledger's whole claimed curve (after Mahloujifar, Melis & "
        "Chaudhuri 2024); the released noise per tensor and per update (noise) and between "
        "any two updates (lag); a canary's contribution along its direction (clipping); the "
        "ledger (one charge of the declared event per update). Black-box: the first two. "
        "Beside them the stated-family bound (subsampled Gaussian white-box, Gaussian DP "
        "black-box): a lower bound on epsilon only under its assumption, not in the verdict.",
        "",
        "| trainer | seed | updates | claimed eps | true eps | Steinke eps lb (white / black) "
        "| family bound (white / black) | f-DP min p (white / black) | noise p | lag p "
        "| contribution (C per update), p | ledger | tensors tested "
        "| verdict white (by) / black |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for a in res["audits"]:
        w, b = a["white-box"], a["black-box"]
        t = w["tests"]
        tt = w["tensors_tested"]
        L.append(
            f"| {a['trainer']} | {a['seed']} | {a['updates']} | "
            f"{_f(w['accountant_epsilon'], 4)} | {_f(a['true_epsilon'], 4)} | "
            f"{w['epsilon_lower_bound']:.3f} / {b['epsilon_lower_bound']:.3f} | "
            f"{_f(w['family_epsilon_lower_bound'])} / {_f(b['family_epsilon_lower_bound'])} | "
            f"{_f(w['fdp_min_p'])} / {_f(b['fdp_min_p'])} | {_f(t.get('noise'))} | "
            f"{_f(t.get('independence'))} | {_f(w['contribution'])}, "
            f"{_f(t.get('contribution'))} | {'ok' if t.get('ledger') == 1.0 else 'WRONG'} | "
            f"{f'{tt[0]}/{tt[1]}' if tt else '-'} | "
            f"{'VIOLATION' if w['violation'] else 'consistent'}"
            f"{' (' + ', '.join(w['flagged_by']) + ')' if w['flagged_by'] else ''} / "
            f"{'VIOLATION' if b['violation'] else 'consistent'}"
            f"{' (' + ', '.join(b['flagged_by']) + ')' if b['flagged_by'] else ''} |"
        )
    L += [
        "",
        "REINFORCE audit runs (`AUDIT_REINFORCE`): 40 updates of 4 episodes, sigma = 6, "
        f"C = 10, {min(s.audit_canaries, 898)} gradient canaries (raw norm 10 C, "
        "orthonormal public directions, each included with probability 1/2). DQN audit "
        "runs (`AUDIT_DQN`): hidden 64, q = 0.5 (Poisson sampling of a 2-transition "
        f"buffer), 100 updates, sigma = 3, C = 1, {s.audit_canaries} canaries, each "
        "included canary joining each update with probability q. 'True eps of what ran' is "
        "the accountant's PRV epsilon for the noise and sampling actually used (per-layer "
        "clipping: sigma / sqrt(4 tensors), the worst case; no clipping: unbounded). "
        "f-DP level: 5%/5/4 (four guess fractions).",
        "",
        _reading(res["audits"]),
        "",
    ]
    return L


def pages(res: dict[str, Any], notes: str | None = None) -> dict[str, str]:
    """The report's text pages (file name -> text): README.md from ``res`` (results.json, or the
    results in memory), with the settings it records (notes.md stays beside it)."""
    doc = restore(res)
    return {"README.md": readme(doc, config_from_dict(ReproduceSettings, doc["settings"]))}


def readme(res: dict[str, Any], s: ReproduceSettings) -> str:
    L = [
        "Generated by `ldp_audit.training.dprl.reproduce` (hand-written notes go in notes.md).",
        "",
        f"Command: `{res['command']}`  ",
        f"Wall time of this command: {res['wall_seconds']:.0f} s on {res['machine']} (runs "
        "found in `--cache` are read, not rerun); CPU time of all the runs: "
        f"{res.get('cpu_seconds', float('nan')):.0f} s; every run is seeded "
        f"(seeds {s.seed}..{s.seed + s.seeds - 1}).",
        "",
        f"Scale: REINFORCE {s.episodes} episodes per run (8 episodes per update), DQN "
        f"{s.total_steps} environment steps per run (preset `{s.dqn_preset}`: "
        f"{_preset_words(s.dqn_preset)}); {s.seeds} seeds per setting; {s.eval_episodes} greedy "
        f"evaluation episodes of each final network; DP-SGD clip "
        f"C = {s.clip:g}, delta = {s.delta:g}. Privacy unit: one episode (REINFORCE), one "
        f"transition (DQN, Poisson sampling at q = 128/10000 from the replay buffer, composed "
        f"over every update of the run).",
        "",
        "## Reward and convergence vs noise (Figures 8-9: DP-SGD; 12-13: observation noise)",
        "",
        f"| algo | noise | sigma | greedy eval return (mean of {s.eval_episodes} episodes; mean "
        "over seeds, 95% CI) "
        "| eval >= 475 | final training return (mean of last 50, 95% CI) | solved in training "
        "| convergence episode (median, order-statistic interval) "
        "| epsilon at delta (best; RDP) | updates | CPU-s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in res["table"]:
        eps = r["epsilon"]
        if r["family"] == "obs-noise" and r["sigma"]:
            eps_s = (
                f"inf on raw states (box: {_f(r['boxed_epsilon_per_episode'])} per episode of "
                f"{r['boxed_observations']} obs.)"
            )
        else:
            eps_s = _f(eps, 4)
            by = r.get("epsilon_by_method") or {}
            if r.get("epsilon_method") and math.isfinite(eps):
                eps_s += f" ({r['epsilon_method']}"
                if isinstance(by.get("rdp"), float) and r["epsilon_method"] != "rdp":
                    eps_s += f"; rdp {_f(by['rdp'], 4)}"
                eps_s += ")"
        if r.get("eval_mean") is not None:
            ev_s = f"{r['eval_mean']:.1f} {_ci(r['eval_ci95'])}"
            es_s = f"{r['eval_solved']}/{r['seeds']}"
        else:
            ev_s = es_s = "-"
        L.append(
            f"| {r['algo']} | {r['family']} | "
            f"{'clip only' if r.get('clip_only') else format(r['sigma'], 'g')} "
            f"| {ev_s} | {es_s} | {r['final_return_mean']:.1f} "
            f"{_ci(r['final_return_ci95'])} | {r['solved']}/{r['seeds']} | "
            f"{_convergence(res, r)} | {eps_s} | "
            f"{r['updates']} | {r.get('cpu_seconds', 0.0):.0f} |"
        )
    L += [
        "",
        "Sigma 0 is the non-private baseline (epsilon = inf); 'clip only' clips every per-sample "
        "gradient to C and adds no noise (epsilon = inf). The greedy evaluation plays the final "
        "network (argmax, dropout off) on the true states; a seed counts as solved there when its "
        f"{s.eval_episodes} episodes average >= 475. The epsilon is the ledger's `best` (RDP, "
        "PRV and PLD; a coarse PLD where PLD's own planner refuses, see docs/dprl.md), with "
        "RDP beside it where another method won; an observation-noise row's box epsilon is "
        "exact (the Gaussian mechanism of sensitivity sqrt(H) x the box diagonal for an "
        "episode of H observations). The bootstrap intervals are over "
        f"only {s.seeds} seeds: read them as a spread, not as a precise interval. Unsolved runs "
        "count as infinite in the median (a median of inf means most seeds did not solve) and "
        "in its interval, [x_(k), x_(n+1-k)] of the per-seed convergence episodes (with "
        f"{s.seeds} seeds it covers the true median with probability "
        f"{median_ci([0.0] * s.seeds)[3]:.0%}).",
        "",
        "![Figure 8](figure8.png)",
        "![Figure 9](figure9.png)",
        "![Figure 12](figure12.png)",
        "![Figure 13](figure13.png)",
        "",
    ]
    if res["audits"]:
        L += _audit_lines(res, s)
    L += [
        "## Where we differ from the slides, and why",
        "",
        "- The slides give plots only; our copy of them has no numeric values, so the comparison "
        "is qualitative (does reward fall and convergence time rise with sigma?).",
        "- Whole-gradient clipping (the slides clip REINFORCE per layer and never clip DQN "
        "effectively), and 8 episodes per REINFORCE update instead of 1 (a batch of per-episode "
        "gradients: the noise is divided over 8 episodes).",
        "- DQN samples its replay buffer by Poisson sampling (rate q) so the accountant's "
        "sampled-Gaussian analysis applies; the slides sample fixed-size batches.",
        "- Shorter runs than the slides (see Scale): this machine has 2 shared cores "
        f"({res.get('cpu_seconds', float('nan')) / 60:.0f} CPU-minutes for the runs above).",
        "- Observation-noise IQRs are measured once under a random policy "
        "(`ldp_audit.training.dprl.obs_noise.CARTPOLE_IQR`); the slides measured them during "
        "training (their Figure 11).",
    ]
    title = "DP in RL (Doulazmi & Odonnat slides): Figures 8-9 and 12-13, with epsilons"
    return readme_page(title, res, L)
