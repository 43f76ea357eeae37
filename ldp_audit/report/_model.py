"""The report model: one JSON-able dict built from a validated run and its ledger.

HTML, Markdown and JSON are all rendered from this one dict, so the three formats never
disagree. Every section has a ``status`` ("run" / "not run"); nothing optional is left out
silently.
"""

from __future__ import annotations

import datetime as _dt
import heapq
import json
import math
from collections import Counter
from typing import Any

import numpy as np

from ldp_audit.report._ledger import LedgerStats
from ldp_audit.report._load import RunData
from ldp_audit.report._paper import paper_row

__all__ = ["build_model", "SCHEMA", "TARGET_SCORE", "WINDOW"]

SCHEMA = "ldp-audit-report/1"
#: Theta of eq. (26) and m of eq. (25) (Ono & Takahashi 2020), used when metrics.json lacks them.
TARGET_SCORE = 195.0
WINDOW = 10


def _num(v: Any) -> float | None:
    """A finite-or-infinite float, or None for anything that is not a number."""
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float, np.integer, np.floating)):
        return float(v)
    if isinstance(v, str) and v.strip().lower() in ("inf", "infinity", "+inf"):
        return math.inf
    return None


def _stats(x: np.ndarray) -> dict[str, float | int | None]:
    if x.size == 0:
        return {"count": 0, "min": None, "median": None, "mean": None, "max": None}
    return {
        "count": int(x.size),
        "min": float(x.min()),
        "median": float(np.median(x)),
        "mean": float(x.mean()),
        "max": float(x.max()),
    }


def transcript_agent_ids(run: RunData) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Per-row agent index, per-agent submission counts and agent ids ("<trial>/<agent>").

    Returns:
        (inverse, counts, ids): ``inverse[i]`` is the agent of transcript row i, ``counts[j]``
        the number of submissions of agent j, ``ids[j]`` its ledger id.
    """
    tr = run.transcript
    pairs = np.stack([tr["trial"].astype(np.int64), tr["agent"].astype(np.int64)], axis=1)
    if pairs.shape[0] == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), []
    uniq, inverse, counts = np.unique(pairs, axis=0, return_inverse=True, return_counts=True)
    ids = [f"{t}/{a}" for t, a in uniq.tolist()]
    return inverse.reshape(-1), counts, ids


def _natural(agent: str) -> tuple[Any, ...]:
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in agent.split("/"))


def _run_section(run: RunData) -> dict[str, Any]:
    cfg = run.config
    tr = run.transcript
    present = {
        "secrets.npz": run.secrets is not None,
        "audit.json": run.audits is not None,
        "attack_*.json": sorted(f"attack_{k}.json" for k in run.attacks),
    }
    return {
        "algorithm": cfg["algorithm"],
        "seed": cfg["seed"],
        "created": cfg.get("created"),
        "versions": cfg.get("versions", {}),
        "mechanism": cfg["mechanism"],
        "config": cfg["config"],
        "submissions": run.n_submissions,
        "trials": int(np.unique(tr["trial"]).size),
        "dim": run.dim,
        "distinct_thetas": int(tr["thetas"].shape[0]),
        "optional_files": present,
    }


def _ledger_section(run: RunData, led: LedgerStats, top: int) -> dict[str, Any]:
    _, counts, ids = transcript_agent_ids(run)
    in_ledger = set(led.agents)
    uncharged = [a for a in ids if a not in in_ledger]
    tr_counts = dict(zip(ids, counts.tolist(), strict=True))
    # largest spend first; ties in natural agent order ("0/2" before "0/10")
    order = heapq.nsmallest(
        top, range(len(led.agents)), key=lambda i: (-led.basic[i], _natural(led.agents[i]))
    )
    if led.budget is None:
        remaining = None
    elif led.remaining is not None:
        remaining = led.remaining
    else:
        remaining = led.budget - led.best
    rows = []
    for i in order:
        rows.append(
            {
                "agent": led.agents[i],
                "submissions": int(tr_counts.get(led.agents[i], 0)),
                "basic": float(led.basic[i]),
                "best": float(led.best[i]),
                "method": led.method[i],
                "remaining": None if remaining is None else float(remaining[i]),
            }
        )
    mech_eps = _num(run.config["mechanism"].get("epsilon"))
    return {
        "status": "run",
        "agents": len(led.agents),
        "agents_in_transcript": len(ids),
        "uncharged_agents": len(uncharged),
        "uncharged_examples": uncharged[:5],
        "delta": led.delta,
        "epsilon_per_submission": mech_eps,
        "submissions_per_agent": _stats(counts.astype(np.float64)),
        "basic": _stats(led.basic),
        "best": _stats(led.best),
        "methods": dict(Counter(led.method).most_common()),
        "budget": led.budget,
        "budget_method": led.budget_method,
        "remaining": None if remaining is None else _stats(remaining),
        "over_budget": None if remaining is None else int((remaining < -1e-12).sum()),
        "top_agents": rows,
        "central": None
        if not led.central
        else {
            "agents": len(led.central),
            "max_epsilon": float(max(led.central.values())),
        },
    }


def _audit_section(run: RunData) -> dict[str, Any]:
    if run.audits is None:
        return {"status": "not run", "results": []}
    out = []
    for e in run.audits:
        claim = float(e["claimed_epsilon"])  # float("inf") parses the "inf" of to_dict()
        lb = float(e["epsilon_lower_bound"])
        viol = e.get("violation")
        viol = bool(viol) if isinstance(viol, bool) else lb > claim
        witness = e.get("witness")
        out.append(
            {
                "mechanism": str(e.get("mechanism") or run.config["mechanism"]["name"]),
                "claimed_epsilon": claim,
                "exact_epsilon": _num(e.get("exact_epsilon")),
                "epsilon_lower_bound": lb,
                "confidence": _num(e.get("confidence")),
                "samples": e.get("samples"),
                "seconds": _num(e.get("seconds")),
                "violation": viol,
                "witness": witness,
            }
        )
    return {"status": "run", "results": out}


def _first(d: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        if k in d and d[k] is not None:
            return d[k]
    return None


def _attack_section(run: RunData) -> dict[str, Any]:
    if not run.attacks:
        return {"status": "not run", "results": []}
    out = []
    for name, a in run.attacks.items():
        ci = _first(a, "accuracy_ci", "ci", "confidence_interval")
        lo = _num(_first(a, "ci_low", "accuracy_low", "accuracy_lower"))
        hi = _num(_first(a, "ci_high", "accuracy_high", "accuracy_upper"))
        if isinstance(ci, (list, tuple)) and len(ci) == 2:
            lo, hi = _num(ci[0]), _num(ci[1])
        ceiling = _num(_first(a, "ceiling", "accuracy_ceiling"))
        viol = a.get("violation")
        if not isinstance(viol, bool):
            viol = lo is not None and ceiling is not None and lo > ceiling
        tpr = _first(a, "tpr_at_fpr", "tpr_at_low_fpr")
        out.append(
            {
                "name": name,
                "attack": str(a.get("attack") or a.get("name") or name),
                "accuracy": float(a["accuracy"]),
                "ci_low": lo,
                "ci_high": hi,
                "confidence": _num(a.get("confidence")),
                "ceiling": ceiling,
                "chance": _num(_first(a, "chance", "baseline")),
                "k": _first(a, "k", "n_classes", "candidates"),
                # the ceiling applies to the epsilon composed over the T reports attacked together
                "epsilon": _num(_first(a, "composed_epsilon", "epsilon", "claimed_epsilon")),
                "reports_per_agent": _first(a, "reports_per_agent"),
                "mae": _num(a.get("mae")),
                "mae_baseline": _num(a.get("mae_baseline")),
                "implied_epsilon_lower_bound": _num(
                    _first(
                        a, "implied_epsilon_lower_bound", "epsilon_lower_bound", "implied_epsilon"
                    )
                ),
                "auc": _num(a.get("auc")),
                "advantage": _num(a.get("advantage")),
                "tpr_at_fpr": tpr
                if isinstance(tpr, (dict, list, float, int)) and tpr != {}
                else None,
                "samples": _first(a, "n", "samples", "n_targets"),
                "violation": viol,
                "details": {
                    k: v
                    for k, v in a.items()
                    if isinstance(v, (str, int, float, bool))
                    and not isinstance(v, bool)
                    or isinstance(v, bool)
                },
            }
        )
    return {"status": "run", "results": out}


def zeta_matrix(run: RunData) -> np.ndarray:
    """metrics.json's ``zeta`` as a (trials, N) float array, NaN-padded."""
    zeta = run.metrics["zeta"]
    n = max((len(z) for z in zeta), default=0)
    out = np.full((len(zeta), n), np.nan)
    for i, z in enumerate(zeta):
        out[i, : len(z)] = [np.nan if v is None else float(v) for v in z]
    return out


def forward_mean(zeta: np.ndarray, window: int = WINDOW) -> np.ndarray:
    """mu_n of eq. (25): mean of zeta_n..zeta_{n+m-1}; NaN where the window runs out."""
    mu = np.full(zeta.shape, np.nan)
    if zeta.shape[-1] >= window:
        view = np.lib.stride_tricks.sliding_window_view(zeta, window, axis=-1)
        mu[..., : zeta.shape[-1] - window + 1] = view.sum(axis=-1) / window
    return mu


def mu_matrix(run: RunData) -> np.ndarray:
    """mu_n per trial: metrics.json's ``mu`` if the trainer wrote it, else eq. (25) on zeta."""
    mu = run.metrics.get("mu")
    z = zeta_matrix(run)
    if isinstance(mu, list) and len(mu) == z.shape[0] and all(isinstance(m, list) for m in mu):
        out = np.full(z.shape, np.nan)
        for i, m in enumerate(mu):
            vals = [np.nan if v is None else float(v) for v in m][: z.shape[1]]
            out[i, : len(vals)] = vals
        return out
    window = int(run.metrics.get("window", WINDOW))
    return forward_mean(z, window)


def fst_values(run: RunData) -> np.ndarray:
    """FST per trial (eq. 26): metrics.json's ``fst`` if present, else from mu_n."""
    fst = run.metrics.get("fst")
    z = zeta_matrix(run)
    if isinstance(fst, list) and len(fst) == z.shape[0]:
        vals = [_num(v) for v in fst]
        return np.array([math.inf if v is None else v for v in vals])
    if isinstance(fst, (int, float)) and z.shape[0] == 1:
        return np.array([float(fst)])
    thr = float(run.metrics.get("target_score", TARGET_SCORE))
    mu = mu_matrix(run)
    if mu.shape[-1] == 0:
        return np.full(mu.shape[0], np.inf)
    hit = mu >= thr
    first = np.argmax(hit, axis=-1).astype(np.float64) + 1.0
    return np.where(hit.any(axis=-1), first, np.inf)


def _learning_section(run: RunData) -> dict[str, Any]:
    z = zeta_matrix(run)
    mu = mu_matrix(run)
    fst = fst_values(run)
    horizon = int(run.config["config"].get("max_submissions", z.shape[1]) or z.shape[1])
    trials = []
    for i in range(z.shape[0]):
        zi = z[i][~np.isnan(z[i])]
        mi = mu[i][~np.isnan(mu[i])]
        trials.append(
            {
                "trial": i,
                "submissions": int(zi.size),
                "mean_score": float(zi.mean()) if zi.size else None,
                "last_score": float(zi[-1]) if zi.size else None,
                "best_mu": float(mi.max()) if mi.size else None,
                "fst": float(fst[i]),
            }
        )
    finite = fst[np.isfinite(fst)]
    mech = run.config["mechanism"]
    eps = _num(mech.get("epsilon"))
    paper = paper_row(str(mech["name"]), eps) if eps is not None else None
    return {
        "status": "run",
        "trials": trials,
        "target_score": float(run.metrics.get("target_score", TARGET_SCORE)),
        "window": int(run.metrics.get("window", WINDOW)),
        "horizon": horizon,
        "success_ratio": float(finite.size / fst.size) if fst.size else None,
        "median_fst": float(np.median(fst)) if fst.size else None,
        "relative_auc": _num(run.metrics.get("relative_auc")),
        "extra_metrics": {
            k: v if isinstance(v, (int, float, str)) else json.dumps(v, default=str)
            for k, v in run.metrics.items()
            if k not in ("zeta", "mu", "fst", "privacy") and len(json.dumps(v, default=str)) <= 200
        },
        "paper": paper,
    }


def _claim_section(run: RunData) -> dict[str, Any] | None:
    """The trainer's own privacy statement (metrics.json ``privacy``), if it wrote one."""
    claim = run.metrics.get("privacy")
    if not isinstance(claim, dict):
        return None
    return {k: v for k, v in claim.items() if isinstance(v, (str, int, float, bool, list))}


def _fmt(v: float | None, nd: int = 3) -> str:
    if v is None:
        return "n/a"
    if math.isinf(v):
        return "inf"
    return f"{v:.{nd}g}"


def _verdict(model: dict[str, Any]) -> dict[str, Any]:
    led, aud, att = model["ledger"], model["audits"], model["attacks"]
    mech = model["run"]["mechanism"]
    guaranteed, verified, not_verified = [], [], []
    eps_sub = led["epsilon_per_submission"]
    guaranteed.append(
        f"Each report is randomised on the agent's side by the {mech['name']} mechanism, claimed "
        f"epsilon = {_fmt(eps_sub)} per submission (delta = {_fmt(led['delta'])}); the aggregator "
        "only ever sees the noisy report."
    )
    if led["agents"]:
        guaranteed.append(
            f"Per agent, composed over its submissions: at most {_fmt(led['basic']['max'])} under "
            f"basic sequential composition and {_fmt(led['best']['max'])} under the tightest valid "
            f"method ({', '.join(led['methods'])}), over {led['agents']} agents in the ledger."
        )
    claim = model.get("claim") or {}
    eps_agent = _num(claim.get("epsilon_per_agent"))
    if eps_agent is not None:
        how = f" ({claim['composition']})" if isinstance(claim.get("composition"), str) else ""
        guaranteed.append(
            f"The trainer claims each agent's reports are {_fmt(eps_agent)}-LDP{how}."
        )
        top = led["basic"]["max"]
        if top is not None and top > eps_agent * (1 + 1e-9):
            not_verified.append(
                f"LEDGER ABOVE CLAIM: an agent spent {_fmt(top)} under basic composition, more "
                f"than the trainer's per-agent claim {_fmt(eps_agent)}."
            )
        elif top is not None:
            verified.append(
                f"The ledger agrees with the trainer's claim: no agent spent more than "
                f"{_fmt(eps_agent)} (largest: {_fmt(top)})."
            )
    if led["budget"] is not None:
        over = led["over_budget"]
        msg = f"Budget {_fmt(led['budget'])} per agent: {over} agent(s) over budget."
        (not_verified if over else guaranteed).append(msg)
    else:
        guaranteed.append("No per-agent budget was set for this run.")
    if led["central"]:
        guaranteed.append(
            f"Central (model-level) claims are reported separately, never summed with the local "
            f"ones: {led['central']['agents']} ledger id(s), largest central epsilon "
            f"{_fmt(led['central']['max_epsilon'])}."
        )
    if model["run"]["submissions"] == 0:
        not_verified.append("The run made no submissions: nothing was released or learned.")
    if led["uncharged_agents"]:
        not_verified.append(
            f"{led['uncharged_agents']} agent(s) submitted reports that the ledger never charged "
            f"(e.g. {', '.join(led['uncharged_examples'])}): their spend is NOT accounted."
        )
    else:
        verified.append("Every agent that submitted a report was charged in the ledger.")
    violations = sum(1 for x in not_verified if x.startswith("LEDGER ABOVE CLAIM"))
    if aud["status"] == "run":
        for r in aud["results"]:
            if r["violation"]:
                violations += 1
                not_verified.append(
                    f"AUDIT VIOLATION: {r['mechanism']} leaks at least "
                    f"{_fmt(r['epsilon_lower_bound'])} > claimed {_fmt(r['claimed_epsilon'])}."
                )
            else:
                ex = r["exact_epsilon"]
                extra = f"; white-box exact epsilon {_fmt(ex)}" if ex is not None else ""
                verified.append(
                    f"Audit of {r['mechanism']}: empirical lower bound "
                    f"{_fmt(r['epsilon_lower_bound'])} <= claim {_fmt(r['claimed_epsilon'])}"
                    f"{extra} (consistent; a black-box audit cannot prove the claim)."
                )
    else:
        not_verified.append("No audit of the mechanism was run (audit.json absent).")
    if att["status"] == "run":
        for r in att["results"]:
            ci = (
                f" (CI {_fmt(r['ci_low'])}-{_fmt(r['ci_high'])})" if r["ci_low"] is not None else ""
            )
            if r["violation"]:
                violations += 1
                not_verified.append(
                    f"ATTACK EXCEEDS CEILING: {r['name']} accuracy {_fmt(r['accuracy'])}{ci} > "
                    f"ceiling {_fmt(r['ceiling'])} the guarantee allows."
                )
            else:
                verified.append(
                    f"Attack {r['name']}: accuracy {_fmt(r['accuracy'])}{ci} within the ceiling "
                    f"{_fmt(r['ceiling'])} the guarantee allows."
                )
    else:
        not_verified.append("No attack was run on the transcript (no attack_*.json).")
    not_verified.append(
        "Lower bounds and attacks can only find leaks, never prove their absence; the guarantee "
        "rests on the mechanism's proof and on every release being charged before it is made."
    )
    if violations:
        first = next(x for x in not_verified if x.split(":")[0].isupper())
        status = "violation"
        headline = f"{violations} privacy violation(s) found. {first.split(':')[0].capitalize()}: "
        headline += first.split(":", 1)[1].strip()
    elif aud["status"] == "run" and att["status"] == "run":
        status = "consistent"
        headline = "Claims consistent with every audit and attack that was run."
    else:
        status = "partially verified"
        headline = "Claims not contradicted, but parts were not checked (see below)."
    return {
        "status": status,
        "headline": headline,
        "guaranteed": guaranteed,
        "verified": verified,
        "not_verified": not_verified,
    }


def _generator() -> dict[str, str]:
    """What produced the report (the run's own versions are in ``run.versions``)."""
    import platform

    import matplotlib

    from ldp_audit import __version__

    return {
        "ldp_audit": __version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "matplotlib": matplotlib.__version__,
        "platform": f"{platform.system()} {platform.machine()}",
    }


def build_model(run: RunData, ledger: LedgerStats, *, top: int = 10) -> dict[str, Any]:
    """Build the JSON-able report model of one run.

    Args:
        run: the validated run directory.
        ledger: per-agent spend read from the run's ledger.
        top: number of agents in the top-spenders table.

    Returns:
        A dict with keys ``schema``, ``generated``, ``run_dir``, ``verdict``, ``run``,
        ``ledger``, ``audits``, ``attacks``, ``learning``.
    """
    model: dict[str, Any] = {
        "schema": SCHEMA,
        "generated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "generator": _generator(),
        "run_dir": str(run.path),
        "run": _run_section(run),
        "ledger": _ledger_section(run, ledger, top),
        "audits": _audit_section(run),
        "attacks": _attack_section(run),
        "learning": _learning_section(run),
        "claim": _claim_section(run),
    }
    model["verdict"] = _verdict(model)
    return model
