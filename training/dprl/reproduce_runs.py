"""The runs of ``ldp-audit reproduce dprl``: its grid, each grid run and each audit cell, kept
in a cache folder as they finish.

:func:`grid` lists the runs of a :class:`~ldp_audit.training.dprl.config.ReproduceSettings`
(algorithm x noise family x level x seed); :func:`run_one` trains one of them (or reads it
from ``--cache``: :func:`ldp_audit.training.reproduction.cached`, keyed by its whole spec). The
one-run audit table trains the correct DP-SGD trainers (:data:`AUDIT_REINFORCE`,
:data:`AUDIT_DQN`) and the four broken ones of :func:`broken_hooks` (:func:`audit_cases`) and
audits each white- and black-box (:func:`audit_one`, :func:`audit_table`). Every task depends
only on its spec and seed, so the results do not depend on where
:func:`ldp_audit.backends.run_tasks` ran it.
:mod:`ldp_audit.training.dprl.reproduce` drives them and writes the report.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ldp_audit.training.dprl.config import (
    AUDIT_DQN,
    AUDIT_REINFORCE,
    DprlConfig,
    ReproduceSettings,
)
from ldp_audit.training.reproduction import cache_path, cached

__all__ = [
    "audit_cases",
    "audit_one",
    "audit_summary",
    "audit_table",
    "boxed_epsilon",
    "broken_hooks",
    "grid",
    "levels",
    "one_thread",
    "run_config",
    "run_one",
    "true_epsilon",
]


def broken_hooks() -> dict[str, Any]:
    """The four broken DP-SGD trainers of issue 13 (same as tests/broken_dprl.py)."""
    import torch
    from opacus.optimizers import DPOptimizer

    from ldp_audit.training.dprl.privacy import TrainerHooks, gaussian_noise

    class NoiseNotTimesClip(DPOptimizer):
        def add_noise(self) -> None:
            for p in self.params:
                g = p.summed_grad
                n = gaussian_noise(self.noise_multiplier, g.shape, g.dtype, self.generator)
                p.grad = (p.summed_grad + n).view_as(p)

    class NoClipping(DPOptimizer):
        def clip_and_accumulate(self) -> None:
            for p, g in zip(self.params, self.grad_samples, strict=True):
                p.summed_grad = g.to(p.dtype).sum(dim=0)

    class PerLayerClipping(DPOptimizer):
        def clip_and_accumulate(self) -> None:
            for p, g in zip(self.params, self.grad_samples, strict=True):
                g = g.to(p.dtype)
                f = (self.max_grad_norm / (g.reshape(len(g), -1).norm(dim=-1) + 1e-6)).clamp(
                    max=1.0
                )
                p.summed_grad = torch.einsum("i,i...", f, g)

    return {
        "noise not multiplied by C (C = 10)": TrainerHooks(optimizer_class=NoiseNotTimesClip),
        "no clipping": TrainerHooks(optimizer_class=NoClipping),
        "per-layer clipping, per-layer sigma*C noise": TrainerHooks(
            optimizer_class=PerLayerClipping
        ),
        "accountant charged q/2 (DQN)": TrainerHooks(charged_sample_rate=lambda q: q / 2),
    }


def levels(s: ReproduceSettings, fam: str) -> list[tuple[float, bool]]:
    """``(sigma, clip_only)`` of one family's rows, in order (clip-only after sigma 0)."""
    if fam == "obs-noise":
        return [(float(x), False) for x in s.obs_noise]
    out = [(float(x), False) for x in s.dpsgd_noise]
    if s.clip_only:
        at = 1 if out and out[0][0] == 0 else 0
        out.insert(at, (0.0, True))
    return out


def grid(s: ReproduceSettings) -> list[dict[str, Any]]:
    """Every run of the grid: (algo, family, privacy, sigma, clip_only, seed) per setting and
    seed, REINFORCE then DQN, DP-SGD then observation noise (sigma 0: privacy none)."""
    runs = []
    for algo in ("reinforce", "dqn"):
        for fam in ("dpsgd", "obs-noise"):
            for sigma, clip_only in levels(s, fam):
                privacy = "dpsgd" if clip_only else ("none" if sigma == 0 else fam)
                for k in range(s.seeds):
                    runs.append(
                        {
                            "algo": algo,
                            "family": fam,
                            "privacy": privacy,
                            "sigma": float(sigma),
                            "clip_only": clip_only,
                            "seed": s.seed + k,
                        }  # fmt: skip
                    )
    return runs


def one_thread() -> None:
    """One torch thread per worker: on 2 shared cores, more threads only contend (measured:
    a 30,000-step DQN took 98 CPU-s with torch's default threads, 17 CPU-s with one)."""
    import torch

    torch.set_num_threads(1)


def run_config(spec: dict[str, Any], s: ReproduceSettings) -> dict[str, Any]:
    """The DprlConfig keyword arguments of one grid run."""
    from ldp_audit.training.dprl.trainer import DQN_PRESETS

    kw: dict[str, Any] = {
        "algo": spec["algo"],
        "privacy": spec["privacy"],
        "noise_multiplier": spec["sigma"],
        "clip": s.clip,
        "delta": s.delta,
        "eval_episodes": s.eval_episodes,
    }
    if spec["algo"] == "reinforce":
        kw["episodes"] = s.episodes
    else:
        kw.update(DQN_PRESETS[s.dqn_preset])
        kw["total_steps"] = s.total_steps
    return kw


def run_one(spec: dict[str, Any], s: ReproduceSettings, cache: str | None = None) -> dict:
    """One grid run's result, or the one kept in ``cache`` for its spec: the run
    (``DprlConfig(**run_config(spec, s))``, seed ``spec['seed']``, no run directory) trained, its
    returns, convergence, evaluation, epsilon, privacy summary, updates and times."""
    kw = run_config(spec, s)

    def train_one() -> dict[str, Any]:
        import time as _time

        from ldp_audit.training.dprl.trainer import train

        one_thread()
        c0 = _time.process_time()
        res = train(DprlConfig(**kw), seed=spec["seed"])
        return {
            **spec,
            "returns": res.returns,
            "convergence_episode": res.convergence_episode,
            "eval_returns": res.eval_returns,
            "epsilon": res.privacy.get("epsilon", math.inf),
            "privacy": res.privacy,
            "updates": res.updates,
            "seconds": res.seconds,
            "cpu_seconds": _time.process_time() - c0,
        }

    return cached(cache_path(cache, "run", {**spec, **kw}), train_one)


def boxed_epsilon(sigma: float, delta: float, observations: int) -> float:
    """Per-episode epsilon had the states been clipped to CARTPOLE_BOX: exact, the Gaussian
    mechanism of L2 sensitivity sqrt(observations) x the box diagonal (every observation of the
    episode replaced) and noise std sigma (Balle & Wang 2018; RDP said 9% more at sigma 1)."""
    from ldp_audit.mechanisms import analytic_gaussian_epsilon
    from ldp_audit.training.dprl.obs_noise import CARTPOLE_BOX, ObservationNoiseMechanism

    if sigma == 0:
        return math.inf
    m = ObservationNoiseMechanism(noise_multiplier=sigma, box=CARTPOLE_BOX, target_delta=delta)
    return analytic_gaussian_epsilon(sigma, math.sqrt(observations) * m.sensitivity, delta)


def true_epsilon(name: str, cfg: Any, T: int) -> float:
    """What the accountant should have said for the trainer that actually ran (T updates)."""
    from ldp_audit.accountant import compose
    from ldp_audit.opacus.writer import declared_event

    sigma = cfg.noise_multiplier
    if name.startswith("no clipping"):
        return math.inf  # unbounded sensitivity
    if name.startswith("noise not multiplied"):
        sigma = sigma / cfg.clip  # noise std sigma for sensitivity C
    elif name.startswith("per-layer"):
        sigma = sigma / math.sqrt(len(cfg.layer_sizes) - 1) / math.sqrt(2)  # 2 tensors per layer
    ev = declared_event({"noise_multiplier": sigma, "sample_rate": cfg.sample_rate})
    return float(compose([(ev, T)], delta=cfg.delta, method="prv")[0])


def audit_summary(a: Any) -> dict[str, Any]:
    """The audit table's cells from one ``audit_run`` result (white- or black-box)."""
    ex = a.extra
    fdp, fam, cov = ex["f_dp"] or {}, ex["family_bound"] or {}, ex["coverage"] or {}
    return {
        "epsilon_lower_bound": a.epsilon_lower_bound,
        "accountant_epsilon": a.composed_epsilon,
        "violation": a.violation,
        "flagged_by": ex["flagged_by"],
        "auc": a.auc,
        "guesses": ex["guesses"],
        "correct": a.correct,
        "confidence_each": ex["confidence_each"],
        "fdp_min_p": fdp.get("p_value"),
        "fdp_level": fdp.get("level"),
        "family": fam.get("family"),
        "family_epsilon_lower_bound": fam.get("epsilon_lower_bound"),
        "tests": {k: None if t is None else t.get("p_value") for k, t in ex["tests"].items()},
        "contribution": (ex["tests"].get("contribution") or {}).get("contribution"),
        "tensors_tested": [sum(bool(r.get("tested")) for r in cov["tensors"]), len(cov["tensors"])]
        if cov
        else None,  # fmt: skip
    }


def audit_cases(s: ReproduceSettings) -> list[dict[str, Any]]:
    """The audit table's runs: the correct trainers (3 seeds each) and the four broken ones."""
    m = s.audit_canaries
    rf = {**AUDIT_REINFORCE, "canaries": min(m, 898), "delta": s.delta}  # 898 parameters
    dqn = {**AUDIT_DQN, "canaries": m, "delta": s.delta}
    correct = (("correct REINFORCE", rf), ("correct DQN (q = 0.5)", dqn))
    cases = [{"trainer": name, "kw": kw, "broken": None, "seed": s.seed + k}
             for name, kw in correct for k in range(3)]  # fmt: skip
    for name in broken_hooks():
        cases.append({"trainer": name, "kw": dqn if "DQN" in name else rf, "broken": name,
                      "seed": s.seed})  # fmt: skip
    return cases


def audit_one(case: dict[str, Any], s: ReproduceSettings, cache: str | None = None) -> dict:
    """One audit case's row of the audit table, or the one kept in ``cache`` for it: the case
    trained in a temporary run directory and audited white- and black-box (95 %)."""

    def audit_train() -> dict[str, Any]:
        import tempfile

        one_thread()

        from ldp_audit.attacks.one_run_dprl import audit_run
        from ldp_audit.training.dprl.trainer import train

        hooks = broken_hooks()[case["broken"]] if case["broken"] else None  # rebuilt: picklable
        with tempfile.TemporaryDirectory() as tmp:
            run = Path(tmp) / "run"
            cfg = DprlConfig(**case["kw"])
            res = train(cfg, seed=case["seed"], run_dir=run, hooks=hooks)
            row: dict[str, Any] = {
                "trainer": case["trainer"],
                "seed": case["seed"],
                "config": case["kw"],
                "updates": res.updates,
                "true_epsilon": true_epsilon(case["trainer"], cfg, res.updates),
            }
            for setting in ("white-box", "black-box"):
                row[setting] = audit_summary(audit_run(run, setting=setting, confidence=0.95))
        return row

    return cached(cache_path(cache, "audit", case), audit_train)


def audit_table(
    s: ReproduceSettings,
    progress: bool,
    where: dict[str, Any] | None = None,
    cache: str | None = None,
) -> list[dict[str, Any]]:
    """One-run audits of the correct and broken trainers, as tasks of ``run_tasks``."""
    import functools

    from ldp_audit.backends import run_tasks

    if s.audit_canaries == 0:
        return []
    return run_tasks(
        functools.partial(audit_one, s=s, cache=cache),
        audit_cases(s),
        progress="dprl audit table" if progress else None,
        describe=lambda case: f"audit run {case['trainer']!r}, seed {case['seed']}",
        **(where or {}),
    )
