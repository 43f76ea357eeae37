"""DP-SGD RL's report sections (the ``dprl`` system's part of ``ldp-audit report``).

Part of the ``dprl`` system (:mod:`ldp_audit.training.dprl`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit.training.dprl.trainer import SOLVED_RETURN, SOLVED_WINDOW, fmt_epsilon, read_run

# ------------------------------------------------------------------------------------------------
# Report sections (ldp_audit.report registry: "dprl" -> this function)
# ------------------------------------------------------------------------------------------------

__all__ = ["report_sections"]


def report_sections(run_dir: Path, extra: list[Path] | None = None) -> list[dict]:
    """Learning curve, the accountant's guarantee and the one-run audit(s), for the report."""
    import io

    run = read_run(run_dir)
    cfg, met = run["config"], run["metrics"]
    priv = met.get("privacy", {})
    returns = np.asarray(met.get("returns", []), dtype=np.float64)
    figs: dict[str, bytes] = {}
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(5.5, 3.2))
        ax.plot(np.arange(1, returns.size + 1), returns, lw=0.6, alpha=0.5, label="return")
        if returns.size >= SOLVED_WINDOW:
            c = np.concatenate([[0], np.cumsum(returns)])
            mu = (c[SOLVED_WINDOW:] - c[:-SOLVED_WINDOW]) / SOLVED_WINDOW
            ax.plot(np.arange(SOLVED_WINDOW, returns.size + 1), mu, label="mean of last 25")
        ax.axhline(SOLVED_RETURN, ls=":", color="k", label="solved (475)")
        ax.set_xlabel("episode")
        ax.set_ylabel("return")
        ax.set_title(f"{cfg.algo} / {cfg.privacy} (sigma={cfg.noise_multiplier:g})")
        ax.legend(fontsize=7)
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100)
        plt.close(fig)
        figs["dprl_learning_curve"] = buf.getvalue()
    except ImportError:  # pragma: no cover
        pass
    conv = met.get("convergence_episode")
    sections = [
        {
            "id": "dprl-learning",
            "title": f"DP-RL training ({cfg.algo}, privacy {cfg.privacy})",
            "paragraphs": [
                f"{len(returns)} episodes, {met.get('updates', 0)} private updates, "
                f"{met.get('env_steps', 0)} environment steps. Convergence (mean of 25 "
                f"consecutive returns >= 475): "
                + (f"episode {conv}." if conv not in (None, "inf") else "not reached."),
                *([f"Stopped early: {met['stopped']}"] if met.get("stopped") else []),
            ],
            "tables": [],
            "figures": figs,
            "data": {"returns": returns.tolist(), "convergence_episode": conv},
        }
    ]
    rows = [["privacy", cfg.privacy], ["unit", str(priv.get("unit"))]]
    rows.append(["epsilon (accountant)", fmt_epsilon(_num(priv.get("epsilon", math.inf)))])
    rows.append(["delta", f"{cfg.delta:g}"])
    for k, v in (priv.get("by_method") or {}).items():
        rows.append([f"epsilon ({k})", fmt_epsilon(_num(v)) if not isinstance(v, str) else v])
    sections.append(
        {
            "id": "dprl-privacy",
            "title": "Privacy guarantee (accountant's upper bound)",
            "paragraphs": [str(priv.get("words", ""))],
            "tables": [{"caption": "accountant", "header": ["quantity", "value"], "rows": rows}],
            "figures": {},
            "data": priv,
        }
    )
    from ldp_audit.report import one_run_audit_documents

    audits = one_run_audit_documents(run_dir, extra)
    if audits:
        arows = []
        for _f, top in audits:
            bb = top.get("extra", {}).get("black_box")
            for d in [top] + ([bb] if isinstance(bb, dict) else []):
                ex = d.get("extra", {})
                fdp = ex.get("f_dp") or {}
                mech = ex.get("mechanism_test") or {}
                pmin = min((r["p_value"] for r in fdp.get("p_values", [])), default=None)
                arows.append(
                    [
                        ex.get("setting", d["attack"]),
                        d.get("n"),
                        fmt_epsilon(_num(d.get("epsilon_lower_bound"))),
                        fmt_epsilon(_num(d.get("composed_epsilon"))),
                        "-" if pmin is None else f"{pmin:.3g} (level {fdp['level']:.3g})",
                        "-"
                        if not mech
                        else f"{min(mech['p_mean'], mech['p_noise']):.3g} (level "
                        f"{mech['level']:.3g})",
                        d.get("confidence"),
                        ("VIOLATION" if d.get("violation") else "consistent")
                        + (f" ({', '.join(ex['flagged_by'])})" if ex.get("flagged_by") else ""),
                    ]
                )
        sections.append(
            {
                "id": "dprl-audit",
                "title": "One-run audit (Steinke, Nasr & Jagielski 2023)",
                "paragraphs": [
                    "Empirical lower bound on epsilon from the canaries planted in this run, at "
                    "the stated confidence, beside the accountant's upper bound. A lower bound "
                    "above the upper bound is a violation; a lower bound below it proves nothing.",
                    "Two more tests of the same run: the f-DP one-run test of the ledger's whole "
                    "claimed privacy curve (after Mahloujifar, Melis & Chaudhuri 2024; smallest "
                    "p-value over the guess counts) and, white-box, the test of the claimed "
                    "mechanism (clip C, noise sigma C, charged sampling rate) on the canary "
                    "directions. A p-value at or below its level flags the run. The tests share "
                    "1 - confidence (Bonferroni): a correct trainer is flagged with probability "
                    "at most 1 - confidence.",
                ],
                "tables": [
                    {
                        "caption": "one-run audit",
                        "header": [
                            "setting",
                            "canaries",
                            "eps lower bound",
                            "eps (accountant)",
                            "f-DP test p",
                            "mechanism test p",
                            "confidence",
                            "verdict",
                        ],  # fmt: skip
                        "rows": arows,
                    }
                ],
                "figures": {},
                "data": {"audits": [d for _, d in audits]},
            }
        )
    return sections


def _num(v: Any) -> float:
    if isinstance(v, str):
        return math.inf if v == "inf" else float("nan")
    return float(v) if v is not None else float("nan")
