"""One FRD config with a run directory (:func:`train`: config.json, ledger, transcript, secrets,
metrics, model) and the report's sections for FRD runs. Part of :mod:`ldp_audit.training.frd`.
"""

from __future__ import annotations

import contextlib
import math
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError
from ldp_audit.interrupts import closing
from ldp_audit.report.plugin import section
from ldp_audit.rundir import RunDir, RunWriter
from ldp_audit.rundir.files import fmt_number
from ldp_audit.training.frd.config import ALGORITHM, FrdConfig
from ldp_audit.training.frd.engine import FrdResult, batch_device, checked_configs, train_many
from ldp_audit.validation import check_int

# ------------------------------------------------------------------------------------------------
# One config with a run directory
# ------------------------------------------------------------------------------------------------


def train(
    cfg: FrdConfig,
    *,
    seed: int,
    run_dir: str | Path | None = None,
    progress: bool = False,
    run_mode: str = "new",
    force: bool = False,
    ledger: Any = None,
) -> FrdResult:
    """Train one config (all its groups batched); optionally write a run directory (else charge
    ``ledger``, if given, or an in-memory one).

    The run directory (docs/frd.md): config.json (algorithm "frd", config.mode "frd"/"fedavg"),
    ledger.sqlite (agent id ``"<group>/<agent>"``, one charge per upload), transcript.npz,
    secrets.npz, metrics.json, model.npz, manifest.json.
    """
    if not isinstance(cfg, FrdConfig):
        raise InvalidParameterError(f"cfg must be an FrdConfig, got {type(cfg).__name__}")
    seed = check_int(seed, "seed", minimum=0)
    # sizes (``force``: see train_many), then the device ("cuda" without CUDA): before any file
    device = batch_device(checked_configs([cfg], None, force))
    from ldp_audit.accountant import Accountant

    if run_dir is None:
        accs = None if ledger is None else [Accountant(ledger=ledger)]
        return train_many([cfg], seed=seed, accountants=accs, progress=progress, force=force)[0]
    extra: dict[str, Any] = {}
    if cfg.private_param != "gravity":  # the generic record of the secret
        extra["private_parameter"] = cfg.private_parameter()
    if cfg.device != "cpu":  # where an auto/cuda run's distillation ran (resolved)
        extra["device"] = device
    from ldp_audit.training.device import load_libraries

    load_libraries("numba")  # before the run folder, as train dprl|fedrl
    w = RunWriter(
        run_dir,
        algorithm=ALGORITHM,
        config=cfg.to_dict(),
        seed=seed,
        mechanism=cfg.make_mechanism().to_config(),
        mode=run_mode,
        # gravity runs on the CPU keep their former config.json
        extra=extra or None,
    )
    recs: list[Any] = []
    try:
        acc = Accountant(ledger=w.open_ledger())
        res = train_many(
            [cfg],
            seed=seed,
            accountants=[acc],
            record=True,
            progress=progress,
            _recorders=recs,
            force=force,
        )[0]
        empty = {k: np.zeros(0, np.int64) for k in ("trial", "agent", "submission", "theta_index")}
        tr = dict(res.transcript or {}) or {**empty, "report": np.zeros((0, 2))}
        w.write_npz("transcript.npz", tr)
        w.write_npz("secrets.npz", dict(res.secrets or {cfg.private_param: np.zeros(0)}))
        met = res.metrics()
        if cfg.device != "cpu":  # an auto/cuda run says where it ran (a CPU run's: as before)
            met["device"] = device
        w.write_json("metrics.json", met)
        w.write_npz("model.npz", res.model)
    except BaseException:
        with closing():  # a signal's forced exit waits for the close (bounded)
            _write_partial(w, recs)
            w.finish(status="interrupted")
        raise
    w.finish()
    return res


def _write_partial(w: Any, recs: list[Any]) -> None:
    """On an interruption: what was released so far (every row of it was charged first)."""
    with contextlib.suppress(Exception):  # best effort; the caller re-raises the interruption
        if recs and len(recs[0].transcript):
            rec = recs[0]
            arrs = rec.transcript.arrays()
            if rec.thetas:
                arrs["thetas"] = np.stack(rec.thetas)
            w.write_npz("transcript.npz", arrs)
            w.write_npz("secrets.npz", {rec.cfg.private_param: np.concatenate(rec.secret_gravity)})


def train_run(
    cfg: FrdConfig,
    *,
    seed: int,
    run_dir: str | Path | None = None,
    ledger: Any = None,
    progress: bool | None = None,
    run_mode: str = "new",
) -> Any:
    """:func:`train` under the System contract (:meth:`ldp_audit.systems.System.train`);
    ``native``: the FrdResult."""
    from ldp_audit.systems import TrainResult

    res = train(cfg, seed=seed, run_dir=run_dir, progress=bool(progress), run_mode=run_mode,
                ledger=ledger)  # fmt: skip
    eps = float(cfg.make_mechanism().epsilon)
    privacy = {
        "mechanism": cfg.make_mechanism().to_config(),
        "local": True,
        "epsilon_per_upload": eps if math.isfinite(eps) else "inf",
        "uploads_per_agent_max": int(res.uploads.max()) if res.uploads.size else 0,
    }
    return TrainResult(system=ALGORITHM, config=cfg, seed=int(seed), seconds=float(res.seconds),
                       privacy=privacy, metrics=res.metrics(),
                       run_dir=None if run_dir is None else Path(run_dir), native=res)  # fmt: skip


def summary_lines(res: Any) -> list[str]:
    """``train frd``'s text: groups, episodes to mission, uploads, clipped states."""
    cfg, m = res.config, res.metrics
    ms = ", ".join("inf" if not isinstance(x, (int, float)) or math.isinf(x) else f"{x:g}"
                   for x in m["mission"])  # fmt: skip
    ldp = f" LDP eps={cfg.ldp_epsilon:g}" if cfg.private else ""
    return [
        f"  {cfg.mode}{ldp}: {cfg.groups} group(s) x {cfg.n_agents} agents, episodes to "
        f"mission [{ms}], uploads per agent <= {m['uploads_per_agent_max']}, clipped states "
        f"{m['clipped_states']}"
    ]


# ------------------------------------------------------------------------------------------------
# Report sections (TRAINERS.md point 4)
# ------------------------------------------------------------------------------------------------


_fmt = partial(fmt_number, nan="nan")


def report_sections(run_dir: Path, extra: list[Path] | None = None) -> list[dict[str, Any]]:
    """Sections for ``ldp-audit report RUN [EXTRA...]``: mission times beside the paper's, the
    leak of the non-private upload, the LDP variant's leak capped by its epsilon.

    Every FRD run given (``run_dir`` and ``extra``) contributes a row; ``attack_dynamics.json``
    (or ``attack_frd.json``) of a run, if present, supplies its attack result.
    """
    runs = [Path(run_dir)] + [Path(p) for p in (extra or [])]
    mission_rows, leak_rows, privacy_rows, data = [], [], [], {}
    for rd in runs:
        try:
            run = RunDir(rd)
        except Exception:  # noqa: BLE001 - a non-run extra dir is skipped
            continue
        doc = run.config
        if doc.get("algorithm") != ALGORITHM:
            continue
        cfg = FrdConfig.from_dict(doc["config"])
        met = run.metrics() if (rd / "metrics.json").exists() else {}
        ldp = f", LDP eps={_fmt(cfg.ldp_epsilon)}" if cfg.private else ""
        label = f"{rd.name} ({cfg.mode}{ldp})"
        median, reached = _fmt(met.get("mission_median")), met.get("missions_reached", "-")
        reached = f"{reached}/{met.get('groups', '-')}"
        mission_rows.append([label, cfg.n_agents, cfg.groups, median, reached, _fmt(cfg.threshold)])
        spent = _spent(rd)
        eps_cell = "non-private (inf)" if not cfg.private else _fmt(spent)
        privacy_rows.append([label, eps_cell, met.get("uploads_per_agent_max", "-")])
        names = [n for n in ("attack_dynamics.json", "attack_frd.json") if (rd / n).exists()]
        att = run.json(names[0]) if names else None
        if att is not None:
            lo, hi = att.get("accuracy_ci", ["-", "-"])
            nums = [_fmt(att.get(k)) for k in ("accuracy", "chance", "ceiling", "composed_epsilon")]
            leak_rows.append([label, att.get("n"), nums[0], f"[{_fmt(lo)}, {_fmt(hi)}]", *nums[1:]])
        data[rd.name] = {"config": cfg.to_dict(), "metrics": {k: met.get(k) for k in
                         ("mission", "mission_median", "missions_reached", "clipped_states")},
                         "attack": att, "epsilon_spent_max": spent}  # fmt: skip
    paragraphs = [
        "Federated reinforcement distillation (Cha et al. 2019): agents exchange a proxy "
        "experience memory (visited cells and time-averaged policies) instead of experience; "
        "the FedAvg baseline exchanges parameters. The paper reports mission times as boxplots "
        "(Figures 3-4) without numbers in the text; see reports/frd/README.md for our "
        "reproduction beside the paper's qualitative claims.",
        "The non-private upload has no guarantee (epsilon = inf): the dynamics attack's accuracy "
        "is bounded only by 1. The LDP variant's accuracy is capped by "
        "e^{T eps}/(e^{T eps}+k-1) with T uploads per agent: T does not depend on the agents' "
        "data (the LDP variant never stops at its mission: every agent runs to max_episodes).",
    ]
    leak_head = ["run", "n", "accuracy", "95% CI", "chance", "ceiling", "composed eps"]
    tables = (
        (
            "Episodes to mission (median over groups; inf = not reached)",
            ["run", "agents", "groups", "median", "reached", "threshold"],
            mission_rows,
        ),
        (
            "Privacy spent per agent (accountant, basic composition)",
            ["run", "epsilon per agent (max)", "uploads per agent"],
            privacy_rows,
        ),
        (
            "Dynamics inference (of each agent's private CartPole constant, gravity unless the run "
            "declares another) on what each agent uploaded",
            leak_head,
            leak_rows,
        ),
    )
    title = "FRD / FedAvg: mission time, leak, LDP variant"
    return [section("frd", title, paragraphs, *tables, data=data)]


def _spent(rd: Path) -> float:
    from ldp_audit.accountant import Accountant, Ledger

    p = rd / "ledger.sqlite"
    if not p.exists():
        return math.nan
    try:
        acc = Accountant(ledger=Ledger(str(p), create=False))
        vals = acc.spent_all(delta=0.0, method="basic")
    except Exception:  # noqa: BLE001 - an unreadable ledger is shown as NaN
        return math.nan
    return max(vals.values()) if vals else 0.0
