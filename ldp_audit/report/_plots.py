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
from ldp_audit.report.markdown import count_noun as plural

#: Colours of the core figures (blue, orange, green, red, grey), for a system's own figures too.
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#7f7f7f")
_BLUE, _ORANGE, _GREEN, _RED, _GREY = COLORS
_CYCLE = (_BLUE, _ORANGE, _GREEN, "#9467bd")  # one colour per audit in the profile figures
_MAX_POINTS = 4000  # points per scatter/line: enough for the eye, small PNGs for 90k agents


def figure_png(fig: Figure) -> bytes:
    """A ``matplotlib.figure.Figure`` as PNG bytes (off-screen Agg canvas, no pyplot state)."""
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


def _figure(height: float, panels: int = 1) -> tuple[Figure, Any]:
    """A figure 10 inches wide (constrained layout) and its ``panels`` axes side by side."""
    fig = Figure(figsize=(10, height), layout="constrained")
    return fig, fig.subplots(1, panels)


def _note(ax: Any, text: str, xy: tuple[float, float], color: str, **kw: Any) -> None:
    """A note on the axes at ``xy`` in axes fractions (8 pt unless ``kw`` says otherwise)."""
    ax.annotate(text, xy, xycoords="axes fraction", **{"fontsize": 8, "color": color, **kw})


def _short_mech(name: Any) -> str:
    """A mechanism's name for a legend: ``name=foo, sigma=1, ...`` -> ``foo`` (at most 40
    characters), so a legend never grows wider than its figure."""
    text = str(name)
    if text.startswith("name="):
        text = text[5:].split(",", 1)[0]
    return text if len(text) <= 40 else text[:37] + "..."


def legend_below(ax: Any, ncols: int = 2, fontsize: float = 8, also: Any = None) -> None:
    """The axes' legend under its x-axis label, never over the data or the axis labels
    (constrained layout makes room for it); ``also``: a twin axes whose entries join it."""
    handles, labels = ax.get_legend_handles_labels()
    if also is not None:
        more = also.get_legend_handles_labels()
        handles, labels = handles + more[0], labels + more[1]
    if handles:
        ax.legend(
            handles,
            labels,
            fontsize=fontsize,
            loc="upper center",
            bbox_to_anchor=(0.5, -0.2),
            ncols=ncols,
            frameon=False,
        )


def thin(n: int) -> np.ndarray:
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


def _release_index(releases: list[str]) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(inverse, counts, ids) of a system's releases: ``inverse[i]`` is the id of release i."""
    if not releases:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), []
    ids, inverse, counts = np.unique(
        np.asarray(releases, dtype=object).astype(str), return_inverse=True, return_counts=True
    )
    return inverse.reshape(-1), counts, [str(a) for a in ids]


def spend_over_releases(releases: list[str], led: LedgerStats) -> tuple[np.ndarray, np.ndarray]:
    """Each release's id's cumulative basic spend after that release (a system's ``releases``:
    the ledger id of every transcript row, in arrival order).

    The ledger gives each id's total; it is spread evenly over the id's releases (exact when
    every release is charged the same epsilon, as in PGC: eps/T each).

    Returns:
        (agent_spend, running_max): per release, the releasing id's spend so far and the
        largest per-id spend over all ids so far.
    """
    inverse, counts, ids = _release_index(releases)
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


def ledger_figure(
    led: LedgerStats,
    model: dict[str, Any] | None = None,
    releases: list[str] | None = None,
) -> bytes:
    """Spent epsilon over releases (when the system gives its ``releases``) or the spend per
    ledger scope with the run's one claimed epsilon marked (from ``model``), beside the
    distribution of per-agent spend."""
    fig, (ax1, ax2) = _figure(4.4, 2)
    if releases is None:
        claim = ((model or {}).get("privacy_statement") or {}).get("claim") or {}
        _scope_panel(ax1, led, claim)
        _spend_hist(ax2, led)
        return figure_png(fig)
    spend, running = spend_over_releases(releases, led)
    n = np.arange(1, spend.size + 1)
    idx = thin(spend.size)
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
    ax1b = None
    if spend.size:
        first = np.zeros(spend.size, dtype=bool)  # each id's first release
        first[np.unique(_release_index(releases)[0], return_index=True)[1]] = True
        ax1b = ax1.twinx()
        ax1b.plot(
            n[idx],
            np.cumsum(first)[idx],
            color=_GREY,
            lw=1,
            ls="-.",
            label="agents charged so far (right axis)",
        )
        ax1b.set_ylabel("agents charged so far", color=_GREY)
        ax1b.tick_params(axis="y", colors=_GREY)
        ax1b.set_ylim(bottom=0)
    legend_below(ax1, also=ax1b)  # one legend for both y-axes, below the panel
    ax1.set(xlabel="submission n (arrival order)", ylabel="spent epsilon per agent", ylim=(0, None))
    ax1.set_title("Spent epsilon over submissions", wrap=True)
    _spend_hist(ax2, led)
    return figure_png(fig)


def _spend_hist(ax2: Any, led: LedgerStats) -> None:
    basic, best = led.basic[np.isfinite(led.basic)], led.best[np.isfinite(led.best)]
    # the one infinite count of the page: infinite under the tightest method (basic is also
    # infinite for Gaussian events it cannot compose, which are not non-private releases)
    n_inf = int(led.best.size - best.size)
    n_basic_na = int(led.basic.size - basic.size) - n_inf
    notes = []
    if n_inf:
        notes.append(f"{plural(n_inf, 'id')} with epsilon = inf under every method (not drawn)")
    if n_basic_na > 0:
        notes.append(f"basic composition does not apply to {plural(n_basic_na, 'id')} (Gaussian)")
    for k, text in enumerate(notes):
        _note(ax2, text, (0.02, 0.92 - 0.07 * k), _RED)
    if not led.best.size:
        text = "no local (per-agent) charges: this run's charges are central"
        _note(ax2, text, (0.5, 0.5), _GREY, ha="center", fontsize=9)
    if best.size:
        hi = float(max(basic.max(initial=0.0), best.max()))
        bins = np.linspace(0, hi * 1.05 + 1e-9, 30)
        if basic.size:
            ax2.hist(basic, bins=bins, color=_BLUE, alpha=0.5, label="basic composition")
        ax2.hist(
            best,
            bins=bins,
            color=_GREEN,
            histtype="step",
            lw=2.5,
            ls="--",
            label="tightest valid method",
        )
        if led.budget is not None:
            ax2.axvline(led.budget, color="k", ls=":", lw=1.2, label="budget")
        legend_below(ax2)
        top = ax2.get_ylim()[1]
        ax2.set_ylim(0, top * (1.0 + 0.1 * (len(notes) + 1)))  # room for the notes
    ax2.ticklabel_format(axis="x", style="sci", scilimits=(-3, 4))
    ax2.set(xlabel="spent epsilon (local scope)", ylabel="number of agents")
    ax2.set_title(f"Per-agent spend ({plural(led.basic.size, 'agent')})", wrap=True)


def _scope_panel(ax: Any, led: LedgerStats, claim: dict[str, Any] | None = None) -> None:
    """Local (per agent) and central (model-level) spend side by side, never summed; the run's
    one claimed epsilon (``claim``, from the privacy statement) marked when it is finite."""
    central = np.array(sorted((led.central or {}).values()), dtype=np.float64)
    groups = [("local (per agent)", led.best), ("central (model)", central)]
    for i, (_name, vals) in enumerate(groups):
        fin = vals[np.isfinite(vals)]
        if fin.size:
            ax.boxplot([fin], positions=[i], widths=0.5, showfliers=True)
        n_inf = vals.size - fin.size
        if n_inf or not vals.size:  # infinite spend is not drawn, and an empty scope says so
            text = f"{plural(n_inf, 'id')} with epsilon = inf" if n_inf else "no charges"
            ax.annotate(text, (i, 0), ha="center", fontsize=8, color=_RED if n_inf else _GREY)
    eps = (claim or {}).get("epsilon")
    if eps is not None and math.isfinite(eps):
        pos = 1 if (led.central and not led.agents) else 0
        label = f"the claim: {eps:.4g} ({claim.get('method') or 'method not recorded'})"
        ax.plot([pos], [eps], "*", color=_RED, ms=12, label=label)
        legend_below(ax, ncols=1)
        ax.set_ylim(0, max(ax.get_ylim()[1], 1.15 * eps))
    ax.set_xticks([0, 1], [f"{n}\n{plural(v.size, 'id')}" for n, v in groups])
    ax.set(xlim=(-0.6, 1.6), ylim=(0, None), ylabel="spent epsilon (tightest method)")
    ax.set_title("Ledger scopes side by side (never summed)", wrap=True)


def audit_figure(model: dict[str, Any]) -> bytes | None:
    """Each audit verdict: its one-sided confidence interval [lower bound, inf) for epsilon,
    the event's point estimate, the claim and the white-box exact epsilon (exact arithmetic)."""
    res = model["audits"]["results"]
    rows = [(r, v) for r in res for v in r["verdicts"]]
    if not rows:
        return None
    fig, ax = _figure(1.8 + 0.55 * len(rows))
    keys = ("claimed_epsilon", "exact_epsilon")
    xs = np.array(  # None: NaN
        [
            [r[k] for k in keys] + [v["epsilon_lower_bound"], v.get("point_estimate")]
            for r, v in rows
        ],
        dtype=float,
    )
    xmax = 1.25 * xs[np.isfinite(xs)].max(initial=1.0)
    labels = []
    for i, (r, v) in enumerate(rows):
        c = _RED if v["violation"] else _BLUE
        lb = v["epsilon_lower_bound"]
        conf = r.get("confidence")
        lvl = f"{conf * 100:.0f}% " if isinstance(conf, float) else ""
        ax.plot([lb, xmax], [i, i], color=c, lw=6, alpha=0.35, solid_capstyle="butt")
        ax.plot([lb], [i], marker="|", ms=16, mew=2.5, color=c)
        ax.annotate("", (xmax, i), (xmax * 0.97, i), arrowprops={"arrowstyle": "->", "color": c})
        ax.plot([], [], color=c, lw=6, alpha=0.35, label=f"{lvl}one-sided interval [bound, inf)")
        pe = v.get("point_estimate")
        if pe is not None and math.isfinite(pe):
            ax.plot([pe], [i], "o", color=c, ms=5, label="point estimate of the witness event")
        ax.plot(
            [r["claimed_epsilon"]] * 2,
            [i - 0.32, i + 0.32],
            color="k",
            lw=2,
            label="claimed epsilon",
        )
        if r["exact_epsilon"] is not None and v["kind"] == "distribution":
            ax.plot(
                [r["exact_epsilon"]],
                [i],
                "D",
                color=_ORANGE,
                ms=6,
                label="exact epsilon (white-box, exact arithmetic only)",
            )
        verdict = "VIOLATION" if v["violation"] else "no violation found"
        labels.append(f"{_short_mech(r['mechanism'])}\n{v['kind']}: {verdict}")
    ax.set_yticks(np.arange(len(rows)), labels, fontsize=8)
    ax.set(xlim=(0, xmax), ylim=(-0.6, len(rows) - 0.4), xlabel="epsilon")
    ax.invert_yaxis()
    ax.set_title(
        "Audit verdicts: true epsilon in the shaded interval (at the confidence)", wrap=True
    )
    first: dict[str, Any] = {}  # each legend entry once: its first artist
    for handle, name in zip(*ax.get_legend_handles_labels(), strict=True):
        first.setdefault(name, handle)
    fig.legend(first.values(), first.keys(), fontsize=8, loc="outside lower center", ncols=2)
    return figure_png(fig)


def profile_figure(model: dict[str, Any]) -> bytes | None:
    """Audited privacy profile (epsilon lower bound vs delta) against the claimed profile."""
    res = [r for r in model["audits"]["results"] if r.get("profile")]
    if not res:
        return None
    fig, ax = _figure(3.9)
    pos = [d for r in res for d in r["profile"]["delta"] if d > 0]
    lin = min(pos) / 10 if pos else 1e-6
    top = 0.0
    for i, r in enumerate(res):
        p = r["profile"]
        c = _CYCLE[i % len(_CYCLE)]
        d, lo, cl = (np.array(p[k]) for k in ("delta", "epsilon_lower", "epsilon_claimed"))
        name = _short_mech(r["mechanism"])
        ax.plot(d, lo, "o-", color=c, label=f"{name}: audited lower bound")
        fin = np.isfinite(cl)
        if fin.any():
            ax.plot(d[fin], cl[fin], "s--", color=c, alpha=0.7, label=f"{name}: claimed")
        bad = np.array(p["above_claim"], dtype=bool)
        if bad.any():
            ax.plot(d[bad], lo[bad], "x", color=_RED, ms=10, mew=2, label="above the claim")
        top = max(top, float(np.max(lo, initial=0)), float(np.max(cl[fin], initial=0)))
        if (~fin).any():
            text = "no claim at delta = " + ", ".join(f"{x:g}" for x in d[~fin])
            _note(ax, text, (0.01, 0.92 - 0.08 * i), c)
    ax.set_xscale("symlog", linthresh=lin)
    ax.set(ylim=(0, 1.15 * top + 1e-9), xlabel="delta (symmetric log scale; 0 at the left)")
    ax.set_ylabel("epsilon")
    ax.set_title(
        "Privacy profile: audited epsilon lower bound vs the claimed epsilon(delta)", wrap=True
    )
    legend_below(ax, ncols=3)
    return figure_png(fig)


def tradeoff_figure(model: dict[str, Any]) -> bytes | None:
    """Audited f-DP trade-off points (upper confidence type I / type II errors of threshold
    tests) against the claimed trade-off curve; a point below the claimed curve refutes it.

    Two panels: the whole unit square, and type I error on a log scale, where a strong claim's
    curve and the audited points (all at small type I error) can be told apart."""
    res = [r for r in model["audits"]["results"] if r.get("tradeoff")]
    if not res:
        return None
    fig, (ax_lin, ax_log) = _figure(4.6, 2)
    pos: list[float] = []
    for i, r in enumerate(res):
        t = r["tradeoff"]
        c = _CYCLE[i % len(_CYCLE)]
        ca, cb = np.array(t["claimed_alpha"]), np.array(t["claimed_beta"])
        a_u, b_u = np.array(t["type1_upper"]), np.array(t["type2_upper"])
        pos += [float(x) for x in a_u if x > 0] + [float(x) for x in ca if 0 < x < 1]
        order = np.argsort(a_u)
        bad = np.array(t["below_claim"], dtype=bool)
        name = _short_mech(r["mechanism"])
        labels = (f"{name}: claimed ({t['claimed_from']})", f"{name}: audited (upper points)")
        for ax, (claimed, audited, below) in (
            (ax_lin, (*labels, "below the claim")),
            (ax_log, (None, None, None)),  # one legend, from the first panel
        ):
            ax.plot(ca, cb, "--", color=c, alpha=0.8, label=claimed)
            ax.plot(a_u, b_u, "o", color=c, ms=4, label=audited)
            # the true curve lies below this staircase (all points jointly at the confidence)
            ax.step(a_u[order], b_u[order], where="post", color=c, lw=1, alpha=0.6)
            if bad.any():
                ax.plot(a_u[bad], b_u[bad], "x", color=_RED, ms=10, mew=2, label=below)
    lo = max(min(pos) / 3, 1e-12) if pos else 1e-6
    grid = np.geomspace(lo, 1.0, 200)
    ax_lin.plot([0, 1], [1, 0], ":", color="grey", lw=1, label="no privacy loss (1 - alpha)")
    ax_log.plot(grid, 1 - grid, ":", color="grey", lw=1)
    ax_lin.set(xlim=(0, 1), xlabel="type I error alpha (upper bound)")
    ax_log.set(xscale="log", xlim=(lo, 1), xlabel="type I error alpha (upper bound, log scale)")
    for ax in (ax_lin, ax_log):
        ax.set(ylim=(0, 1.02), ylabel="type II error beta (upper bound)")
    ax_lin.set_title("Whole trade-off", fontsize=10, wrap=True)
    ax_log.set_title("Small type I errors (log scale)", fontsize=10, wrap=True)
    fig.suptitle(
        "f-DP trade-off: the true curve passes below every audited point", fontsize=11, wrap=True
    )
    fig.legend(fontsize=8, loc="outside lower center", ncols=2, frameon=False)
    return figure_png(fig)


def attack_figure(model: dict[str, Any]) -> bytes | None:
    """Attack accuracy (with its confidence interval) beside the ceiling curve over epsilon."""
    res = [r for r in model["attacks"]["results"] if not r.get("one_run")]
    res = [r for r in res if r["accuracy"] is not None]  # the continuous variant: an MAE
    if not res:
        return None
    eps_default = model["ledger"]["epsilon_per_submission"] or 1.0
    fig, ax = _figure(4.2)
    ks = sorted({int(r["k"]) if isinstance(r["k"], (int, float)) else 3 for r in res})
    finite = [e for r in res if math.isfinite(e := r["epsilon"] or eps_default)]
    # default: every attacked run non-private (epsilon inf), the ceiling is 1
    xmax = max(10.0, 1.5 * max(finite, default=1.0))
    grid = np.linspace(0, xmax, 300)
    for k in ks:
        ax.plot(grid, ceiling(grid, k), color=_GREY, lw=1.5, label=f"ceiling e^eps/(e^eps+{k - 1})")
        ax.axhline(1.0 / k, color=_GREY, ls=":", lw=1, label=f"chance 1/{k}")
    for i, r in enumerate(res):
        e = r["epsilon"] if r["epsilon"] is not None else eps_default
        c = (_RED if r["violation"] else _BLUE, _ORANGE, _GREEN)[min(i, 2)]
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
    ax.set(xlim=(0, xmax), ylim=(0, 1.02), xlabel="epsilon of one report")
    ax.set_ylabel("attack accuracy")
    ax.set_title("Attack accuracy vs chance and the ceiling the claim allows", wrap=True)
    legend_below(ax, ncols=3)
    return figure_png(fig)
