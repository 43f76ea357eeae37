"""The sections of ``ldp-audit report RUN`` for a FedRL run, and the paper's Table 1."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from ldp_audit.errors import RunDirectoryError
from ldp_audit.report.plugin import figure_png, section
from ldp_audit.rundir.files import fmt_number

PAPER_TABLE1 = {
    "SuccRate": {
        "DQN-alpha": {8: 88.27, 16: 76.20, 32: 71.41},
        "FedRL-1": {8: 92.52, 16: 79.83, 32: 77.88},
        "FedRL-2": {8: 95.06, 16: 84.31, 32: 82.02},
        "DQN-full": {8: 93.69, 16: 83.40, 32: 79.73},
    },
    "AvgRwd": {
        "DQN-alpha": {8: 13.781, 16: 112.084, 32: 285.946},
        "FedRL-1": {8: 18.152, 16: 94.193, 32: 226.583},
        "FedRL-2": {8: 19.101, 16: 84.139, 32: 189.756},
        "DQN-full": {8: 31.286, 16: 38.114, 32: 52.72},
    },
}


def _fmt(v: Any, nd: int = 3) -> str:
    big = isinstance(v, (int, float)) and abs(v) >= 1e4
    return fmt_number(v, nd, nan="nan", fmt="g" if big else "f")


def report_sections(run_dir: Path, extra: list[Path] | None = None) -> list[dict[str, Any]]:
    """Sections of ``ldp-audit report RUN`` for a FedRL run (TRAINERS.md point 4).

    Sections: the privacy accounting per agent and channel (epsilon in words when infinite),
    Table 1 of this run beside the paper's, learning curves, and, when present, the audit
    (``audit.json``) and the transcript attack (``attack_fedrl.json``).
    """
    from ldp_audit.rundir import RunDir

    run_dir = Path(run_dir)
    if not (run_dir / "metrics.json").is_file():
        raise RunDirectoryError(f"{str(run_dir)!r} has no metrics.json (not a finished fedrl run)")
    rd = RunDir(run_dir)
    cfg, metrics = rd.config.get("config", {}), rd.metrics()
    size = int(cfg.get("size", metrics.get("size", 8)))
    sections: list[dict[str, Any]] = []
    run_cfg = rd.train_config  # the run's FedRLConfig
    mech, ymech = run_cfg.output_mechanism(), run_cfg.target_mechanism()
    priv = metrics.get("privacy", [])
    paras = [
        "Every Q output an agent sends is a release charged to that agent's ledger before the "
        "noise is drawn; an exchange of k rows is charged as k compositions of the per-row "
        "mechanism.",
        (
            f"Q outputs: per row {mech.why_infinite()}."
            if mech.why_infinite()
            else f"Q outputs clipped to [-{mech.bound:g}, {mech.bound:g}] per coordinate: one "
            f"row is a Gaussian mechanism with L2 sensitivity 2 B sqrt(16) = "
            f"{mech.sensitivity:g} and sigma = {mech.sigma:g}, i.e. per row "
            f"({_fmt(mech.epsilon)}, {mech.delta:g})-DP; the accountant composes all rows."
        ),
        (
            "Targets Y (they carry alpha's rewards): unprotected: "
            + (ymech.why_infinite() or "")
            + "; alpha's rewards leave it in the clear, as in the paper."
            if ymech.why_infinite()
            else f"Targets Y clipped to [-{ymech.bound:g}, {ymech.bound:g}] with sigma "
            f"{ymech.sigma:g}: per row ({_fmt(ymech.epsilon)}, {ymech.delta:g})-DP."
        ),
        "The shared MLP is updated from released values only (post-processing), so its "
        "parameters reveal nothing beyond the released rows.",
    ]
    table = [
        [p["run"], p["ledger_agent"], p["channel"], p["charges"], _fmt(p["epsilon"]), p["in_words"]]
        for p in priv
    ]
    caption = f"Accountant (best of RDP/PLD/PRV) at delta = {cfg['delta']:g}"
    header = ["run", "ledger agent", "channel", "charges", "epsilon", "in words"]
    title = "FedRL: privacy of what the agents exchange"
    data = {"privacy": priv, "mechanism": mech.to_config()}
    sections.append(section("fedrl-privacy", title, paras, (caption, header, table), data=data))
    rows = []
    for name, t in metrics.get("table", {}).items():
        ps, pr = (PAPER_TABLE1[k].get(name, {}).get(size) for k in ("SuccRate", "AvgRwd"))
        lo, hi = t["succ_rate_ci"]
        ci = "(1 run)" if lo is None else f"[{100 * lo:.1f}, {100 * hi:.1f}]"
        ps, pr = ("-" if p is None else f"{p:.{nd}f}" for p, nd in ((ps, 2), (pr, 3)))
        rows.append(
            [name, t["runs"], f"{100 * t['succ_rate']:.1f} {ci}", ps, f"{t['avg_reward']:.1f}", pr]
        )
    paras = [
        f"Greedy episodes on {cfg.get('eval_maps')} test maps after "
        f"{cfg.get('train_steps')} training iterations x {cfg.get('n_envs')} maps; "
        "SuccRate with a 95 % t-interval over runs (none with one run). The paper trained "
        "far longer; see reports/fedrl/README.md for the reproduction."
    ]
    if cfg.get("meeting_rule", "manhattan") == "public-code":
        paras.append(
            "Meeting rule: public-code, the authors' code's distance |dx + dy| (not the "
            "paper's Manhattan |dx| + |dy|) for meeting, the +50, the shaping term and "
            "the success check: agents on the same anti-diagonal band count as met, so "
            "these rates are not comparable with Manhattan ones (a random joint policy "
            "succeeds far more often under this rule)."
        )
    header = ["method", "runs", "SuccRate", "paper", "AvgRwd", "paper"]
    table = ("SuccRate (%) and AvgRwd, ours vs paper", header, rows)
    title = f"FedRL: Table 1 at {size}x{size} (this run) beside the paper"
    fig = Figure(figsize=(6, 3.5), layout="tight")
    ax = fig.subplots()
    for r in metrics.get("runs", []):
        ys = np.asarray(r["curve_success"], dtype=float)
        xs = (np.arange(len(ys)) + 1) * r["curve_every"]
        ax.plot(xs, ys, label=f"{r['method']} run {r['trial']}", lw=1)
    ax.set(xlabel="training iteration", ylabel="training-episode success rate")
    ax.legend(fontsize=6)
    figs = {"fedrl_curves": figure_png(fig)}
    data = {"table": metrics.get("table", {})}
    sections.append(section("fedrl-table1", title, paras, table, figures=figs, data=data))
    if (run_dir / "audit.json").is_file():
        # its verdicts are the core's audit section; this section carries the entries only
        title, items = "FedRL: black-box audit of the output mechanism", rd.json("audit.json")
        sections.append(section("fedrl-audit", title, [], data={"audit": items}))
    if (run_dir / "attack_fedrl.json").is_file():
        doc = rd.json("attack_fedrl.json").get("extra", {})  # AttackResult.to_dict()
        rows = [
            [
                a["target"],
                a["n_test"],
                _fmt(a["accuracy"]),
                "[{}, {}]".format(*map(_fmt, a["accuracy_ci"])),
                *map(_fmt, (a["chance"], a["ceiling"])),
            ]
            for a in doc.get("results", [])
        ]
        caption = (
            "accuracy with 95 % Clopper-Pearson interval, chance (majority class) and the "
            "ceiling the per-row (epsilon, delta) allows"
        )
        header = ["target", "test rows", "accuracy", "95 % CI", "chance", "ceiling"]
        title, paras = "FedRL: attack on the transcript", [doc.get("summary", "")]
        sections.append(section("fedrl-attack", title, paras, (caption, header, rows), data=doc))
    return sections
