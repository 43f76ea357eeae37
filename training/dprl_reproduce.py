"""``ldp-audit reproduce dprl``: the slides' Figures 8-9 and 12-13, with the epsilons.

Doulazmi & Odonnat (slides 22-23 and 27-28) plot reward and convergence time against the noise
level, for REINFORCE and DQN, under DP-SGD (Figures 8-9) and under observation noise (Figures
12-13). They give no epsilon. This module runs the same grid (several seeds per setting), and
writes beside each setting the epsilon it actually gets from the accountant:

* DP-SGD: the ledger's (epsilon, delta) of the whole run (RDP and PRV, the smaller reported);
* observation noise on raw states: infinite (said in words); and what a declared state box
  (:data:`ldp_audit.training.obs_noise.CARTPOLE_BOX`) would give per episode.

It also runs the one-run audit (white-box and black-box gradient canaries) of the correct
DP-SGD REINFORCE trainer and of the four broken fixtures of ``tests/broken_dprl.py`` (rebuilt
here from ``ldp_audit.training.dprl.TrainerHooks`` so the report does not import tests).

Outputs (``--out``): ``results.json``, ``figure8.png``, ``figure9.png``, ``figure12.png``,
``figure13.png``, ``README.md`` (generated; a hand-written ``notes.md`` is kept).
"""

from __future__ import annotations

import json
import math
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError

__all__ = [
    "ReproduceSettings",
    "reproduce",
    "broken_hooks",
    "audit_summary",
    "AUDIT_REINFORCE",
    "AUDIT_DQN",
]

#: One-run audit configuration of REINFORCE (40 updates of 4 episodes, sigma 6, C 10; 800
#: orthonormal gradient canaries of raw norm 10 C): few data episodes per update keep the
#: white-box mechanism test's worst-case data slack (``n_t ||w||`` per update) small.
AUDIT_REINFORCE: dict[str, Any] = dict(
    algo="reinforce", privacy="dpsgd", episodes=160, num_envs=4, canaries=800,
    noise_multiplier=6.0, clip=10.0,
)  # fmt: skip
#: One-run audit configuration of DQN: hidden 64, Poisson rate q = 1/2 from a 2-transition
#: buffer (at most 2 data transitions per update), 100 updates, sigma 3, C 1, 800 canaries.
AUDIT_DQN: dict[str, Any] = dict(
    algo="dqn", privacy="dpsgd", hidden=64, total_steps=102, learning_starts=2, buffer_size=2,
    batch_size=1, train_frequency=1, canaries=800, noise_multiplier=3.0, clip=1.0,
)  # fmt: skip


@dataclass(frozen=True)
class ReproduceSettings:
    """Scale of the reproduction (defaults: what fits ~15 minutes on 2 shared cores)."""

    seeds: int = 3
    episodes: int = 600
    total_steps: int = 100_000
    dpsgd_noise: tuple[float, ...] = (0.0, 0.01, 0.03, 0.1, 0.5, 1.0)
    obs_noise: tuple[float, ...] = (0.0, 0.1, 0.5, 1.0)
    clip: float = 1.0
    delta: float = 1e-5
    audit_canaries: int = 800
    seed: int = 0
    clip_only: bool = False
    dqn_preset: str = "solves"
    eval_episodes: int = 25

    def __post_init__(self) -> None:
        from ldp_audit.training.dprl import DQN_PRESETS

        if self.dqn_preset not in DQN_PRESETS:
            raise InvalidParameterError(
                f"dqn_preset must be one of {tuple(DQN_PRESETS)}, got {self.dqn_preset!r}"
            )
        if not isinstance(self.clip_only, bool):
            raise InvalidParameterError(f"clip_only must be True or False, got {self.clip_only!r}")
        e = self.eval_episodes
        if isinstance(e, bool) or not isinstance(e, int) or e < 0:
            raise InvalidParameterError(f"eval_episodes must be an integer >= 0, got {e!r}")
        for name in ("seeds", "episodes", "total_steps"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InvalidParameterError(f"{name} must be an integer >= 1, got {v!r}")
        a = self.audit_canaries
        if isinstance(a, bool) or not isinstance(a, int) or a < 0 or a == 1:
            raise InvalidParameterError(f"audit_canaries must be 0 or an integer >= 2, got {a!r}")
        from ldp_audit.training.dprl_config import MAX_SCALE, check_int, check_real

        for name in ("dpsgd_noise", "obs_noise"):
            v = getattr(self, name)
            if not isinstance(v, (tuple, list)) or not v:
                raise InvalidParameterError(f"{name} must be a non-empty tuple of reals, got {v!r}")
            for x in v:
                check_real(x, name, lo=0.0, hi=MAX_SCALE)
        check_real(self.clip, "clip", lo=0.0, lo_open=True, hi=MAX_SCALE)
        check_real(self.delta, "delta", lo=0.0, lo_open=True, hi=1.0, hi_open=True)
        check_int(self.seed, "seed", minimum=0)


def broken_hooks() -> dict[str, Any]:
    """The four broken DP-SGD trainers of issue 13 (same as tests/broken_dprl.py)."""
    import torch
    from opacus.optimizers import DPOptimizer
    from opacus.optimizers.optimizer import _generate_noise

    from ldp_audit.training.dprl import TrainerHooks

    class NoiseNotTimesClip(DPOptimizer):
        def add_noise(self) -> None:
            for p in self.params:
                n = _generate_noise(
                    std=self.noise_multiplier, reference=p.summed_grad, generator=self.generator
                )
                p.grad = (p.summed_grad + n).view_as(p)

    class NoClipping(DPOptimizer):
        def clip_and_accumulate(self) -> None:
            for p in self.params:
                p.summed_grad = self._get_flat_grad_sample(p).to(p.dtype).sum(dim=0)

    class PerLayerClipping(DPOptimizer):
        def clip_and_accumulate(self) -> None:
            for p in self.params:
                g = self._get_flat_grad_sample(p).to(p.dtype)
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


def _moving(r: np.ndarray, w: int = 25) -> np.ndarray:
    if r.size < w:
        return np.full(r.size, np.nan)
    c = np.concatenate([[0.0], np.cumsum(r)])
    out = np.full(r.size, np.nan)
    out[w - 1 :] = (c[w:] - c[:-w]) / w
    return out


def _boot(values: np.ndarray, rng: np.random.Generator, n: int = 2000) -> tuple[float, float]:
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return (math.nan, math.nan)
    if v.size == 1:
        return (float(v[0]), float(v[0]))
    idx = rng.integers(0, v.size, (n, v.size))
    means = v[idx].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def _levels(s: ReproduceSettings, fam: str) -> list[tuple[float, bool]]:
    """``(sigma, clip_only)`` of one family's rows, in order (clip-only after sigma 0)."""
    if fam == "obs-noise":
        return [(float(x), False) for x in s.obs_noise]
    out = [(float(x), False) for x in s.dpsgd_noise]
    if s.clip_only:
        at = 1 if out and out[0][0] == 0 else 0
        out.insert(at, (0.0, True))
    return out


def _level_name(sigma: float, clip_only: bool) -> str:
    return "clip only" if clip_only else f"{sigma:g}"


def _grid(s: ReproduceSettings) -> list[dict[str, Any]]:
    runs = []
    for algo in ("reinforce", "dqn"):
        for fam in ("dpsgd", "obs-noise"):
            for sigma, clip_only in _levels(s, fam):
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


def _cache_path(cache: str | Path | None, kind: str, spec: dict[str, Any]) -> Path | None:
    """Where a finished run is kept (``--cache``): one JSON per run, keyed by its whole spec."""
    if cache is None:
        return None
    import hashlib

    key = hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()
    return Path(cache) / f"{kind}-{key[:24]}.json"


def _cached(path: Path | None, make: Any) -> dict[str, Any]:
    """``make()``, or the result a previous (interrupted) reproduction left in ``path``."""
    from ldp_audit.rundir import to_jsonable

    if path is not None and path.is_file():
        try:
            return _restore(json.loads(path.read_text()))
        except ValueError:
            pass  # a torn file: run again
    r = make()
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(to_jsonable(r)))
        tmp.replace(path)
    return r


def _restore(obj: Any) -> Any:
    """Undo the JSON convention of ``to_jsonable`` (infinite = "inf")."""
    if isinstance(obj, dict):
        return {k: _restore(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_restore(v) for v in obj]
    if obj in ("inf", "-inf"):
        return float(obj)
    return obj


def _one_thread() -> None:
    """One torch thread per worker: on 2 shared cores, more threads only contend (measured:
    a 30,000-step DQN took 98 CPU-s with torch's default threads, 17 CPU-s with one)."""
    import torch

    torch.set_num_threads(1)


def run_config(spec: dict[str, Any], s: ReproduceSettings) -> dict[str, Any]:
    """The DprlConfig keyword arguments of one grid run."""
    from ldp_audit.training.dprl import DQN_PRESETS

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
        kw["eval_episodes"] = s.eval_episodes
    return kw


def _run_one(spec: dict[str, Any], s: ReproduceSettings, cache: str | None = None) -> dict:
    kw = run_config(spec, s)
    return _cached(_cache_path(cache, "run", {**spec, **kw}), lambda: _train_one(spec, kw))


def _train_one(spec: dict[str, Any], kw: dict[str, Any]) -> dict[str, Any]:
    import time as _time

    from ldp_audit.training.dprl import DprlConfig, train

    _one_thread()
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


def _boxed_epsilon(sigma: float, delta: float, observations: int) -> float:
    """Per-episode epsilon had the states been clipped to CARTPOLE_BOX (RDP composition)."""
    from ldp_audit.accountant import compose
    from ldp_audit.training.obs_noise import CARTPOLE_BOX, ObservationNoiseMechanism

    if sigma == 0:
        return math.inf
    m = ObservationNoiseMechanism(noise_multiplier=sigma, box=CARTPOLE_BOX, target_delta=delta)
    return float(compose([(m.event(), int(observations))], delta=delta, method="rdp")[0])


def _true_epsilon(name: str, cfg: Any, T: int) -> float:
    """What the accountant should have said for the trainer that actually ran (T updates)."""
    from ldp_audit.accountant import GaussianEvent, PoissonSampledEvent, compose

    sigma = cfg.noise_multiplier
    if name.startswith("no clipping"):
        return math.inf  # unbounded sensitivity
    if name.startswith("noise not multiplied"):
        sigma = sigma / cfg.clip  # noise std sigma for sensitivity C
    elif name.startswith("per-layer"):
        sigma = sigma / math.sqrt(len(cfg.layer_sizes) - 1) / math.sqrt(2)  # 2 tensors per layer
    ev = GaussianEvent(sigma)
    if cfg.sample_rate < 1:
        ev = PoissonSampledEvent(cfg.sample_rate, ev)
    return float(compose([(ev, T)], delta=cfg.delta, method="prv")[0])


def audit_summary(a: Any) -> dict[str, Any]:
    """The audit table's cells from one ``audit_run`` result (white- or black-box)."""
    fdp = a.extra["f_dp"] or {}
    mech = a.extra["mechanism_test"] or {}
    return {
        "epsilon_lower_bound": a.epsilon_lower_bound,
        "accountant_epsilon": a.composed_epsilon,
        "violation": a.violation,
        "flagged_by": a.extra["flagged_by"],
        "auc": a.auc,
        "guesses": a.extra["guesses"],
        "correct": a.correct,
        "confidence_each": a.extra["confidence_each"],
        "fdp_min_p": min((r["p_value"] for r in fdp.get("p_values", [])), default=None),
        "fdp_level": fdp.get("level"),
        "fdp_mu_claimed": fdp.get("mu_claimed"),
        "fdp_mu_lower_bound": fdp.get("mu_lower_bound"),
        "mechanism_p_mean": mech.get("p_mean"),
        "mechanism_p_noise": mech.get("p_noise"),
        "mechanism_level": mech.get("level"),
        "mechanism_rate_lower_bound": mech.get("rate_lower_bound"),
        "mechanism_rate_claimed": mech.get("rate_claimed"),
        "mechanism_noise_upper_bound": mech.get("noise_upper_bound"),
    }


def _audit_cases(s: ReproduceSettings) -> list[dict[str, Any]]:
    """The audit table's runs: the correct trainers (3 seeds each) and the four broken ones."""
    m = s.audit_canaries
    rf = {**AUDIT_REINFORCE, "canaries": min(m, 898), "delta": s.delta}  # 898 parameters
    dqn = {**AUDIT_DQN, "canaries": m, "delta": s.delta}
    cases = [{"trainer": "correct REINFORCE", "kw": rf, "broken": None, "seed": s.seed + k}
             for k in range(3)]  # fmt: skip
    cases += [{"trainer": "correct DQN (q = 0.5)", "kw": dqn, "broken": None, "seed": s.seed + k}
              for k in range(3)]  # fmt: skip
    for name in broken_hooks():
        cases.append({"trainer": name, "kw": dqn if "DQN" in name else rf, "broken": name,
                      "seed": s.seed})  # fmt: skip
    return cases


def _describe_case(case: dict[str, Any]) -> str:
    return f"audit run {case['trainer']!r}, seed {case['seed']}"


def _audit_one(case: dict[str, Any], s: ReproduceSettings, cache: str | None = None) -> dict:
    """Train one audit run (in a temporary folder) and audit it white- and black-box (95 %)."""
    return _cached(_cache_path(cache, "audit", case), lambda: _audit_train(case, s))


def _audit_train(case: dict[str, Any], s: ReproduceSettings) -> dict[str, Any]:
    import tempfile

    _one_thread()

    from ldp_audit.attacks.one_run import audit_run
    from ldp_audit.training.dprl import DprlConfig, train

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
            "true_epsilon": _true_epsilon(case["trainer"], cfg, res.updates),
        }
        for setting in ("white-box", "black-box"):
            row[setting] = audit_summary(audit_run(run, setting=setting, confidence=0.95))
    return row


def _audit_table(
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
        functools.partial(_audit_one, s=s, cache=cache),
        _audit_cases(s),
        progress="dprl audit table" if progress else None,
        describe=_describe_case,
        **(where or {}),
    )


def _figures(out: Path, runs: list[dict[str, Any]], s: ReproduceSettings) -> dict[str, str]:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN windows of short runs
        return _figures_inner(out, runs, s)


def _figures_inner(out: Path, runs: list[dict[str, Any]], s: ReproduceSettings) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = {}
    for fam, (fr, fc) in (
        ("dpsgd", ("figure8", "figure9")),
        ("obs-noise", ("figure12", "figure13")),
    ):
        levels = _levels(s, fam)
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
        for ax, algo in zip(axes, ("reinforce", "dqn"), strict=True):
            for sigma, clip_only in levels:
                rs = [r for r in runs if r["algo"] == algo and r["family"] == fam
                      and r["sigma"] == sigma
                      and bool(r.get("clip_only")) == clip_only]  # fmt: skip
                n = min(len(r["returns"]) for r in rs)
                if n == 0:
                    continue
                mv = np.stack([_moving(np.asarray(r["returns"][:n])) for r in rs])
                x = np.arange(1, n + 1)
                mean = np.nanmean(mv, axis=0) if np.isfinite(mv).any() else mv[0]
                eps = rs[0]["epsilon"]
                lab = (
                    "clip only (sigma=0)"
                    if clip_only
                    else f"sigma={sigma:g}" + ("" if sigma else " (non-private)")
                )
                if fam == "dpsgd" and sigma:
                    lab += f", eps={eps:.3g}" if math.isfinite(eps) else ", eps=inf"
                ax.plot(x, mean, label=lab)
                ax.fill_between(x, np.nanmin(mv, axis=0), np.nanmax(mv, axis=0), alpha=0.2)
            ax.axhline(475, ls=":", color="k")
            ax.set_title(f"{algo.upper()} ({'DP-SGD' if fam == 'dpsgd' else 'observation noise'})")
            ax.set_xlabel("episode")
            ax.set_ylabel("return (mean of 25; band: min-max over seeds)")
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / f"{fr}.png", dpi=100)
        plt.close(fig)
        names[fr] = f"{fr}.png"

        fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
        for ax, algo in zip(axes, ("reinforce", "dqn"), strict=True):
            xs, ys, lo, hi, miss = [], [], [], [], []
            for sigma, clip_only in levels:
                if clip_only:
                    continue  # the x axis is sigma: clip-only is in the table and Figure 8
                rs = [r for r in runs if r["algo"] == algo and r["family"] == fam
                      and r["sigma"] == sigma and not r.get("clip_only")]  # fmt: skip
                horizon = max(len(r["returns"]) for r in rs)
                c = np.array([min(r["convergence_episode"], horizon) for r in rs], dtype=float)
                xs.append(sigma)
                ys.append(c.mean())
                lo.append(c.min())
                hi.append(c.max())
                miss.append(sum(math.isinf(r["convergence_episode"]) for r in rs))
            ax.errorbar(xs, ys, yerr=[np.subtract(ys, lo), np.subtract(hi, ys)], marker="o",
                        capsize=3)  # fmt: skip
            for x, y, k in zip(xs, ys, miss, strict=True):
                if k:
                    ax.annotate(f"{k}/{s.seeds} unsolved", (x, y), fontsize=7)
            ax.set_title(f"{algo.upper()}: convergence ({'DP-SGD' if fam == 'dpsgd' else 'obs.'})")
            ax.set_xlabel("noise multiplier sigma")
            ax.set_ylabel("episodes to solve (unsolved = run length)")
        fig.tight_layout()
        fig.savefig(out / f"{fc}.png", dpi=100)
        plt.close(fig)
        names[fc] = f"{fc}.png"
    return names


def reproduce(
    settings: ReproduceSettings,
    *,
    out: str | Path,
    progress: bool = False,
    argv: list[str] | None = None,
    backend: str = "local",
    address: str | None = None,
    workers: int | None = None,
    cache: str | Path | None = None,
) -> dict[str, Any]:
    """Run the grid and the audit table; write the report to ``out`` (checked by the caller).

    ``cache``: a folder where every finished run and audit is kept as it finishes (JSON keyed
    by its whole configuration); a rerun with the same ``cache`` reuses them, so an interrupted
    reproduction resumes where it stopped. Nothing in it is committed.

    The grid's runs and the audit table's runs are tasks of :func:`ldp_audit.backends.run_tasks`
    (``backend``, ``address``, ``workers``: this process, a local pool or Ray); each depends only
    on its spec and seed, so the results do not depend on where they ran. A failing run names
    its spec and seed.
    """
    import functools

    from ldp_audit.backends import backend_options, describe_spec, run_tasks
    from ldp_audit.rundir import to_jsonable

    where = backend_options(backend=backend, address=address, workers=workers)  # before work

    t0 = time.perf_counter()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(settings.seed)
    runs = []
    baseline: dict[tuple[str, int], dict[str, Any]] = {}  # sigma 0: one run per (algo, seed)
    specs = _grid(settings)
    todo, seen = [], set()  # the runs to make: sigma 0 once per (algo, seed)
    for spec in specs:
        key = (spec["algo"], spec["seed"])
        if spec["privacy"] == "none":
            if key in seen:
                continue
            seen.add(key)
        todo.append(spec)
    cache = None if cache is None else str(cache)

    # DQN first, the non-private baseline, then DP-SGD seed by seed (every level of seed 0,
    # then seed 1, ...), then observation noise, then REINFORCE: the costly runs keep the pool
    # busy, and an interrupted reproduction (--cache) has whole trade-off curves kept
    def rank(i: int) -> tuple:
        t = todo[i]
        return (t["algo"] != "dqn", {"none": 0, "dpsgd": 1}.get(t["privacy"], 2), t["seed"], i)

    order = sorted(range(len(todo)), key=rank)
    done = run_tasks(
        functools.partial(_run_one, s=settings, cache=cache),
        [todo[i] for i in order],
        progress="reproduce dprl" if progress else None,
        describe=describe_spec,
        **where,
    )
    by_index = dict(zip(order, done, strict=True))
    made = iter([by_index[i] for i in range(len(todo))])
    for spec in specs:
        key = (spec["algo"], spec["seed"])
        if spec["privacy"] == "none" and key in baseline:
            runs.append({**baseline[key], "family": spec["family"]})
            continue
        r = next(made)
        if spec["privacy"] == "none":
            baseline[key] = r
        runs.append(r)
    audits = _audit_table(settings, progress, where, cache)
    table = []
    for algo in ("reinforce", "dqn"):
        for fam in ("dpsgd", "obs-noise"):
            for sigma, clip_only in _levels(settings, fam):
                rs = [r for r in runs if r["algo"] == algo and r["family"] == fam
                      and r["sigma"] == sigma
                      and bool(r.get("clip_only")) == clip_only]  # fmt: skip
                last = np.array([np.mean(r["returns"][-50:]) for r in rs])
                ev = np.array([np.mean(r["eval_returns"]) for r in rs if r.get("eval_returns")])
                conv = np.array([r["convergence_episode"] for r in rs])
                lens = [int(max(r["returns"])) + 1 for r in rs if r["returns"]]
                row = {
                    "algo": algo,
                    "family": fam,
                    "sigma": sigma,
                    "clip_only": clip_only,
                    "seeds": len(rs),
                    "eval_mean": float(ev.mean()) if ev.size else None,
                    "eval_ci95": _boot(ev, rng) if ev.size else None,
                    "eval_solved": int((ev >= 475.0).sum()),
                    "eval_per_seed": [float(x) for x in ev],
                    "epsilon_by_method": {
                        k: v for k, v in (rs[0].get("privacy") or {}).get("by_method", {}).items()
                    },
                    "epsilon_method": (rs[0].get("privacy") or {}).get("method"),
                    "cpu_seconds": float(np.sum([r.get("cpu_seconds", 0.0) for r in rs])),
                    "final_return_mean": float(last.mean()),
                    "final_return_ci95": _boot(last, rng),
                    "solved": int(np.isfinite(conv).sum()),
                    "convergence_median": float(np.median(conv)),
                    "convergence_ci95": _boot(conv, rng),
                    "epsilon": float(np.max([r["epsilon"] for r in rs])),
                    "updates": int(np.max([r["updates"] for r in rs])),
                    "seconds": float(np.sum([r["seconds"] for r in rs])),
                }
                if fam == "obs-noise" and sigma:
                    row["boxed_epsilon_per_episode"] = _boxed_epsilon(
                        sigma, settings.delta, max(lens)
                    )
                    row["boxed_observations"] = max(lens)
                table.append(row)
    figs = _figures(out, runs, settings)
    wall = time.perf_counter() - t0
    results = {
        "settings": asdict(settings),
        "table": table,
        "audits": audits,
        "figures": figs,
        "wall_seconds": wall,
        "cpu_seconds": float(
            sum(
                r.get("cpu_seconds", 0.0)
                for r in runs
                if not (r["sigma"] == 0 and not r.get("clip_only") and r["family"] == "obs-noise")
            )
        ),
        "machine": f"{platform.machine()} {platform.system()}, 2 shared cores (loaded)",
        "command": "ldp-audit " + " ".join(argv or []),
        "runs": [{k: v for k, v in r.items() if k != "privacy"} for r in runs],
    }
    (out / "results.json").write_text(json.dumps(to_jsonable(results), indent=1, allow_nan=False))
    (out / "README.md").write_text(_readme(results, settings))
    return {k: v for k, v in results.items() if k != "runs"}


def _f(v: Any, nd: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    if isinstance(v, float) and math.isnan(v):
        return "n/a"
    return f"{v:.{nd}g}"


def _reading(audits: list[dict[str, Any]]) -> str:
    """What the audit table says, from the numbers (no fixed claims)."""
    flagged = [a["trainer"] for a in audits if not a["trainer"].startswith("correct")
               and a["white-box"]["violation"]]  # fmt: skip
    false = [
        a for a in audits if a["trainer"].startswith("correct") and a["white-box"]["violation"]
    ]
    n_ok = sum(a["trainer"].startswith("correct") for a in audits)
    missed = [a for a in audits if not a["trainer"].startswith("correct")
              and not a["white-box"]["violation"]]  # fmt: skip
    parts = [
        "Reading: broken trainers flagged in one run at 95% confidence (white-box, any of the "
        "three tests): "
        + (", ".join(flagged) if flagged else "none")
        + f"; false alarms on the {n_ok} correct runs: {len(false)} (each run's verdict has "
        "false-alarm probability <= 5%)."
    ]
    for a in missed:
        parts.append(f" Not flagged: {a['trainer']}.")
    by = {a["trainer"]: a["white-box"] for a in audits}
    sub = [n for n in by if n.startswith(("per-layer", "accountant charged"))]
    for n in sub:
        w = by[n]
        parts.append(
            f" {n}: Steinke (eps, delta) bound {w['epsilon_lower_bound']:.2f} vs claimed "
            f"{_f(w['accountant_epsilon'])}; f-DP test smallest p-value {_f(w['fdp_min_p'])} "
            f"(level {_f(w['fdp_level'])}); mechanism test p = {_f(w['mechanism_p_mean'])} "
            f"(level {_f(w['mechanism_level'])}), a canary's mean contribution per update "
            f">= {_f(w['mechanism_rate_lower_bound'])} C against <= "
            f"{_f(w['mechanism_rate_claimed'])} C claimed."
        )
    return "".join(parts)


def _preset_words(name: str) -> str:
    from ldp_audit.training.dprl import DQN_PRESETS

    kw = {k: v for k, v in DQN_PRESETS[name].items() if k not in ("total_steps", "eval_episodes")}
    if not kw:
        return "the DprlConfig defaults"
    return "the DprlConfig defaults with " + ", ".join(f"{k} = {v}" for k, v in kw.items())


def _readme(res: dict[str, Any], s: ReproduceSettings) -> str:
    L = [
        "# DP in RL (Doulazmi & Odonnat slides): Figures 8-9 and 12-13, with epsilons",
        "",
        "Generated by `ldp_audit.training.dprl_reproduce` (hand-written notes go in notes.md).",
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
        "| convergence episode (median, 95% CI) | epsilon at delta (best; RDP) | updates | CPU-s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in res["table"]:
        lo, hi = r["final_return_ci95"]
        clo, chi = r["convergence_ci95"]
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
            elo, ehi = r["eval_ci95"]
            ev_s = f"{r['eval_mean']:.1f} [{_f(elo, 4)}, {_f(ehi, 4)}]"
            es_s = f"{r['eval_solved']}/{r['seeds']}"
        else:
            ev_s = es_s = "-"
        L.append(
            f"| {r['algo']} | {r['family']} | {_level_name(r['sigma'], r.get('clip_only', False))} "
            f"| {ev_s} | {es_s} | {r['final_return_mean']:.1f} "
            f"[{_f(lo, 4)}, {_f(hi, 4)}] | {r['solved']}/{r['seeds']} | "
            f"{_f(r['convergence_median'], 4)} [{_f(clo, 4)}, {_f(chi, 4)}] | {eps_s} | "
            f"{r['updates']} | {r.get('cpu_seconds', 0.0):.0f} |"
        )
    L += [
        "",
        "Sigma 0 is the non-private baseline (epsilon = inf); 'clip only' clips every per-sample "
        "gradient to C and adds no noise (epsilon = inf). The greedy evaluation plays the final "
        "network (argmax, dropout off) on the true states; a seed counts as solved there when its "
        f"{s.eval_episodes} episodes average >= 475. The epsilon is the ledger's `best` (RDP, "
        "PRV and PLD; a coarse PLD where PLD's own planner refuses, see docs/dprl.md), with "
        "RDP beside it where another method won. The bootstrap intervals are over "
        f"only {s.seeds} seeds: read them as a spread, not as a precise interval. Unsolved runs "
        "count as infinite in the median (a median of inf means most seeds did not solve).",
        "",
        "![Figure 8](figure8.png)",
        "![Figure 9](figure9.png)",
        "![Figure 12](figure12.png)",
        "![Figure 13](figure13.png)",
        "",
    ]
    if res["audits"]:
        L += [
            "## One-run audit of correct and broken trainers, 95% confidence",
            "",
            "Three tests per run, each at level 5%/3 (Bonferroni), so a correct trainer's verdict "
            "is a false alarm with probability <= 5%: the (eps, delta) bound of Steinke, Nasr & "
            "Jagielski (2023); the f-DP one-run test of the ledger's whole claimed curve (after "
            "Mahloujifar, Melis & Chaudhuri 2024; an LP, `attacks/one_run.py`); the white-box "
            "claimed-mechanism test (clip C, noise sigma C, charged rate q, on the canary "
            "directions, data gradients bounded in the worst case). Black-box: the first two.",
            "",
            "| trainer | seed | updates | claimed eps | true eps | Steinke eps lb (white / black) "
            "| f-DP min p (white / black) | GDP mu lb / claimed | mechanism p (mean / noise) "
            "| canary contribution lb / claimed (C per update) | verdict white (by) / black |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for a in res["audits"]:
            w, b = a["white-box"], a["black-box"]
            mu = (
                f"{_f(w['fdp_mu_lower_bound'])} / {_f(w['fdp_mu_claimed'])}"
                if w.get("fdp_mu_claimed")
                else "-"
            )
            L.append(
                f"| {a['trainer']} | {a['seed']} | {a['updates']} | "
                f"{_f(w['accountant_epsilon'], 4)} | {_f(a['true_epsilon'], 4)} | "
                f"{w['epsilon_lower_bound']:.3f} / {b['epsilon_lower_bound']:.3f} | "
                f"{_f(w['fdp_min_p'])} / {_f(b['fdp_min_p'])} | {mu} | "
                f"{_f(w['mechanism_p_mean'])} / {_f(w['mechanism_p_noise'])} | "
                f"{_f(w['mechanism_rate_lower_bound'])} / {_f(w['mechanism_rate_claimed'])} | "
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
            "f-DP level: 5%/3/4 (four guess fractions).",
            "",
            _reading(res["audits"]),
            "",
        ]
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
        "(`ldp_audit.training.obs_noise.CARTPOLE_IQR`); the slides measured them during "
        "training (their Figure 11).",
        "",
    ]
    return "\n".join(L)
