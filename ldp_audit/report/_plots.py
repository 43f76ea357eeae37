"""Matplotlib figures of a report, rendered off-screen (Agg) to PNG bytes.

Nothing here touches pyplot's global state: every figure is a ``matplotlib.figure.Figure`` with
its own Agg canvas, so reports can be built from threads and never open a window.
"""

from __future__ import annotations

import io
import math
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ldp_audit.report._ledger import LedgerStats
from ldp_audit.report._load import RunData
from ldp_audit.report._model import fst_values, mu_matrix, transcript_agent_ids, zeta_matrix

__all__ = ["ledger_figure", "audit_figure", "attack_figure", "learning_figure", "ceiling"]

_BLUE, _ORANGE, _GREEN, _RED, _GREY = "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#7f7f7f"
_MAX_POINTS = 4000  # points per scatter/line: enough for the eye, small PNGs for 90k agents


def _png(fig: Figure) -> bytes:
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


def _thin(n: int) -> np.ndarray:
    """Indices of at most ``_MAX_POINTS`` evenly spaced rows out of ``n`` (always the last)."""
    if n <= _MAX_POINTS:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, _MAX_POINTS).round().astype(np.int64))


def ceiling(epsilon: np.ndarray | float, k: int) -> np.ndarray:
    """Best accuracy of guessing one of k equally likely secrets from an eps-LDP report.

    e^eps / (e^eps + k - 1) (shared/papers.md, section 1; the Bayes optimum under eps-LDP).
    """
    e = np.exp(np.minimum(np.asarray(epsilon, dtype=np.float64), 700.0))
    return e / (e + k - 1)


def spend_over_submissions(run: RunData, led: LedgerStats) -> tuple[np.ndarray, np.ndarray]:
    """Each transcript row's agent's cumulative basic spend after that submission.

    The ledger gives each agent's total; it is spread evenly over the agent's submissions
    (exact when every submission is charged the same epsilon, as in PGC: eps/T each).

    Returns:
        (agent_spend, running_max): per row, the submitting agent's spend so far and the
        largest per-agent spend over all agents so far.
    """
    inverse, counts, ids = transcript_agent_ids(run)
    if inverse.size == 0:
        return np.zeros(0), np.zeros(0)
    lookup = dict(zip(led.agents, led.basic.tolist(), strict=True))
    total = np.array([lookup.get(a, 0.0) for a in ids])
    order = np.argsort(inverse, kind="stable")
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    k = np.empty(inverse.size, np.int64)
    k[order] = np.arange(inverse.size) - np.repeat(starts, counts) + 1  # 1-based occurrence
    spend = total[inverse] * k / counts[inverse]
    return spend, np.maximum.accumulate(spend)


def ledger_figure(run: RunData, led: LedgerStats) -> bytes:
    """Spent epsilon over submissions and the distribution of per-agent spend."""
    fig = Figure(figsize=(10, 3.6), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2)
    spend, running = spend_over_submissions(run, led)
    n = np.arange(1, spend.size + 1)
    idx = _thin(spend.size)
    if spend.size:
        ax1.scatter(
            n[idx],
            spend[idx],
            s=4,
            color=_BLUE,
            alpha=0.5,
            label="submitting agent's spend (basic)",
        )
        ax1.plot(n[idx], running[idx], color=_RED, lw=1.5, label="max over agents (basic)")
    if led.best.size:
        ax1.axhline(
            float(led.best.max()),
            color=_GREEN,
            ls="--",
            lw=1.2,
            label="max over agents (tightest method), final",
        )
    if led.budget is not None:
        ax1.axhline(led.budget, color="k", ls=":", lw=1.2, label="budget")
    if spend.size:
        inverse, _, _ = transcript_agent_ids(run)
        first = np.zeros(inverse.size, dtype=bool)
        first[np.unique(inverse, return_index=True)[1]] = True
        ax1b = ax1.twinx()
        ax1b.plot(
            n[idx],
            np.cumsum(first)[idx],
            color=_GREY,
            lw=1,
            ls="-.",
            label="agents charged so far (right axis)",
        )
        ax1b.set_ylabel("agents", color=_GREY)
        ax1b.set_ylim(bottom=0)
        ax1b.legend(fontsize=8, loc="center right")
    ax1.set_xlabel("submission n (arrival order)")
    ax1.set_ylabel("spent epsilon per agent")
    ax1.set_title("Spent epsilon over submissions")
    ax1.set_ylim(bottom=0)
    if ax1.get_legend_handles_labels()[0]:
        ax1.legend(fontsize=8, loc="lower right")
    if led.basic.size:
        hi = float(max(led.basic.max(), led.best.max()))
        bins = np.linspace(0, hi * 1.05 + 1e-9, 30)
        ax2.hist(led.basic, bins=bins, color=_BLUE, alpha=0.5, label="basic composition")
        ax2.hist(
            led.best,
            bins=bins,
            color=_GREEN,
            histtype="step",
            lw=2.5,
            ls="--",
            label="tightest valid method",
        )
        if led.budget is not None:
            ax2.axvline(led.budget, color="k", ls=":", lw=1.2, label="budget")
        ax2.legend(fontsize=8)
    ax2.set_xlabel("spent epsilon")
    ax2.set_ylabel("agents")
    ax2.set_title(f"Per-agent spend ({led.basic.size} agents)")
    return _png(fig)


def audit_figure(model: dict[str, Any]) -> bytes | None:
    """Claimed vs exact vs empirical lower-bound epsilon for each audited mechanism."""
    res = model["audits"]["results"]
    if not res:
        return None
    fig = Figure(figsize=(10, 0.7 + 0.6 * len(res)), layout="constrained")
    ax = fig.subplots()
    y = np.arange(len(res))
    lb = [r["epsilon_lower_bound"] for r in res]
    colors = [_RED if r["violation"] else _BLUE for r in res]
    ax.barh(y, lb, color=colors, alpha=0.7, height=0.5, label="empirical lower bound")
    ax.scatter(
        [r["claimed_epsilon"] for r in res],
        y,
        marker="|",
        s=400,
        color="k",
        label="claimed epsilon",
        zorder=3,
    )
    ex = [(r["exact_epsilon"], i) for i, r in enumerate(res) if r["exact_epsilon"] is not None]
    if ex:
        ax.scatter(
            [e for e, _ in ex],
            [i for _, i in ex],
            marker="D",
            s=30,
            color=_ORANGE,
            label="exact (white-box)",
            zorder=4,
        )
    ax.set_yticks(y, [r["mechanism"] for r in res])
    ax.set_xlabel("epsilon")
    finite = [
        v
        for r in res
        for v in (r["claimed_epsilon"], r["epsilon_lower_bound"], r["exact_epsilon"])
        if v is not None and math.isfinite(v)
    ]
    ax.set_xlim(0, 1.15 * max(finite + [1.0]))
    ax.set_ylim(-0.6, len(res) - 0.4)
    ax.set_title("Audit: empirical lower bound vs claim")
    fig.legend(fontsize=8, loc="outside right upper")
    return _png(fig)


def attack_figure(model: dict[str, Any]) -> bytes | None:
    """Attack accuracy (with its confidence interval) beside the ceiling curve over epsilon."""
    res = model["attacks"]["results"]
    if not res:
        return None
    eps_default = model["ledger"]["epsilon_per_submission"] or 1.0
    fig = Figure(figsize=(10, 3.8), layout="constrained")
    ax = fig.subplots()
    ks = sorted({int(r["k"]) if isinstance(r["k"], (int, float)) else 3 for r in res})
    xmax = max(
        10.0,
        1.5
        * max(
            (r["epsilon"] or eps_default) for r in res if math.isfinite(r["epsilon"] or eps_default)
        ),
    )
    grid = np.linspace(0, xmax, 300)
    for k in ks:
        ax.plot(grid, ceiling(grid, k), color=_GREY, lw=1.5, label=f"ceiling e^eps/(e^eps+{k - 1})")
        ax.axhline(1.0 / k, color=_GREY, ls=":", lw=1, label=f"chance 1/{k}")
    for i, r in enumerate(res):
        e = r["epsilon"] if r["epsilon"] is not None else eps_default
        c = (
            (_RED if r["violation"] else _BLUE, _ORANGE, _GREEN)[min(i, 2)]
            if i
            else (_RED if r["violation"] else _BLUE)
        )
        if r["ci_low"] is not None and r["ci_high"] is not None:
            ax.errorbar(
                [e],
                [r["accuracy"]],
                yerr=[[r["accuracy"] - r["ci_low"]], [r["ci_high"] - r["accuracy"]]],
                fmt="o",
                color=c,
                capsize=4,
                label=f"{r['name']} accuracy (CI)",
            )
        else:
            ax.plot([e], [r["accuracy"]], "o", color=c, label=f"{r['name']} accuracy")
        imp = r["implied_epsilon_lower_bound"]
        if imp is not None and math.isfinite(imp) and imp > 0:
            ax.axvline(imp, color=c, ls="--", lw=1, label=f"{r['name']} implied eps >= {imp:.3g}")
    ax.set_xlim(0, xmax)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("epsilon of one report")
    ax.set_ylabel("attack accuracy")
    ax.set_title("Attack accuracy vs the ceiling the guarantee allows")
    ax.legend(fontsize=8, loc="lower right")
    return _png(fig)


def learning_figure(run: RunData, model: dict[str, Any]) -> bytes:
    """Scores zeta_n and mu_n (eq. 25) per trial, FST (eq. 26) and the success ratio (eq. 27)."""
    z, mu, fst = zeta_matrix(run), mu_matrix(run), fst_values(run)
    learn = model["learning"]
    fig = Figure(figsize=(10, 3.6), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2, width_ratios=(2, 1))
    n = np.arange(1, z.shape[1] + 1)
    idx = _thin(z.shape[1])
    colors = [_BLUE, _ORANGE, _GREEN, _RED, "#9467bd", "#8c564b"]
    for i in range(z.shape[0]):
        c = colors[i % len(colors)]
        lab = "" if z.shape[0] > 6 else f" (trial {i})"
        ax1.plot(n[idx], z[i, idx], color=c, lw=0.6, alpha=0.3)
        ax1.plot(n[idx], mu[i, idx], color=c, lw=1.5, label=f"mu_n{lab}" if i < 6 else None)
        if math.isfinite(fst[i]):
            ax1.axvline(fst[i], color=c, ls="--", lw=0.8)
    ax1.axhline(
        learn["target_score"], color="k", ls=":", lw=1, label=f"target {learn['target_score']:g}"
    )
    ax1.set_xlabel("submission n")
    ax1.set_ylabel("score")
    ax1.set_title("Learning curve: zeta_n (faint) and mu_n (eq. 25); dashed = FST")
    ax1.legend(fontsize=8, loc="upper left")
    horizon = max(learn["horizon"], z.shape[1], 1)
    grid = np.linspace(0, horizon, 400)
    ratio = (fst[None, :] <= grid[:, None]).mean(axis=1) if fst.size else np.zeros_like(grid)
    ax2.step(grid, ratio, where="post", color=_BLUE, label="ours")
    paper = learn["paper"]
    if paper and paper.get("success_ratio") is not None:
        ax2.axhline(
            paper["success_ratio"], color=_GREY, ls="--", lw=1, label="paper, at 90,000 (Table 2)"
        )
    ax2.set_ylim(-0.02, 1.02)
    ax2.set_xlabel("submissions n")
    ax2.set_ylabel("success ratio")
    ax2.set_title(f"Success ratio (eq. 27), {fst.size} trial(s)")
    ax2.legend(fontsize=8, loc="lower right")
    return _png(fig)
