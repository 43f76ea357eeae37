"""DP-SGD RL's report sections (the ``dprl`` system's part of ``ldp-audit report``).

Part of the ``dprl`` system (:mod:`ldp_audit.training.dprl`).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from ldp_audit.report.plugin import figure_png, section
from ldp_audit.training.dprl.algos import SOLVED_RETURN, SOLVED_WINDOW, window_means
from ldp_audit.training.dprl.trainer import fmt_epsilon, read_run

# ------------------------------------------------------------------------------------------------
# Report sections (ldp_audit.report registry: "dprl" -> this function)
# ------------------------------------------------------------------------------------------------

__all__ = ["report_sections"]


def report_sections(run_dir: Path, extra: list[Path] | None = None) -> list[dict]:
    """Learning curve, the accountant's guarantee and the one-run audit(s), for the report."""
    run = read_run(run_dir)
    cfg, met = run["config"], run["metrics"]
    priv = met.get("privacy", {})
    returns = np.asarray(met.get("returns", []), dtype=np.float64)
    fig = Figure(figsize=(5.5, 3.2), layout="tight")
    ax = fig.subplots()
    ax.plot(np.arange(1, returns.size + 1), returns, lw=0.6, alpha=0.5, label="return")
    mu = window_means(returns)
    if mu.size:
        ax.plot(np.arange(SOLVED_WINDOW, returns.size + 1), mu, label="mean of last 25")
    ax.axhline(SOLVED_RETURN, ls=":", color="k", label="solved (475)")
    ax.set(xlabel="episode", ylabel="return")
    ax.set_title(f"{cfg.algo} / {cfg.privacy} (sigma={cfg.noise_multiplier:g})")
    ax.legend(fontsize=7)
    conv = met.get("convergence_episode")
    paras = [
        f"{len(returns)} episodes, {met.get('updates', 0)} private updates, "
        f"{met.get('env_steps', 0)} environment steps. Convergence (mean of 25 "
        f"consecutive returns >= 475): "
        + (f"episode {conv}." if conv not in (None, "inf") else "not reached."),
        *([f"Stopped early: {met['stopped']}"] if met.get("stopped") else []),
    ]
    rows = [["privacy", cfg.privacy], ["unit", str(priv.get("unit"))]]
    rows.append(["epsilon (accountant)", fmt_epsilon(priv.get("epsilon", math.inf), none="nan")])
    rows.append(["delta", f"{cfg.delta:g}"])
    for k, v in (priv.get("by_method") or {}).items():
        rows.append([f"epsilon ({k})", fmt_epsilon(v, none="nan")])
    title = f"DP-RL training ({cfg.algo}, privacy {cfg.privacy})"
    figs = {"dprl_learning_curve": figure_png(fig)}
    data = {"returns": returns.tolist(), "convergence_episode": conv}
    sections = [section("dprl-learning", title, paras, figures=figs, data=data)]
    title = "Privacy guarantee (accountant's upper bound)"
    table = ("accountant", ["quantity", "value"], rows)
    sections.append(section("dprl-privacy", title, [str(priv.get("words", ""))], table, data=priv))
    from ldp_audit.opacus.scoring import audit_sections

    # the one-run audits: the same coverage and tests table as a user's Opacus loop
    more, _ = audit_sections(run_dir, extra, {"sample_rate": cfg.sample_rate},
                             met.get("updates"), prefix="dprl", trainer="DP-SGD")  # fmt: skip
    sections += more
    return sections
