"""The privacy plumbing of a DP-RL run: DP-SGD updates, gradient canaries, observation noise.

- :class:`DpSgdUpdate`: one DP-SGD update (Opacus clips and noises; the ledger is charged through
  :func:`ldp_audit.release.release_with` before the noise is drawn; the sealed update recorded).
- :class:`GradientCanaries` and :func:`canary_directions`: the one-run audit's gradient canaries
  (public directions, secret inclusion bits).
- :class:`ObservationRelease`: every observation released through :func:`ldp_audit.release.release`.
- :class:`TrainerHooks`: test-only seams for the broken-trainer fixtures.

:mod:`ldp_audit.training.dprl_algos` uses these; their names are importable from
:mod:`ldp_audit.training.dprl` too.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ldp_audit.training.dprl_config import DprlConfig

__all__ = [
    "DpSgdUpdate",
    "GradientCanaries",
    "ObservationRelease",
    "TrainerHooks",
    "add_canaries_to_clipped_sum",
    "canary_directions",
    "cpu_noise_optimizer",
    "flat_params",
]


@dataclass
class TrainerHooks:
    """Test-only seams for the broken-trainer fixtures (tests/broken_dprl.py).

    Attributes:
        optimizer_class: a ``DPOptimizer`` subclass used instead of Opacus's own (forces the
            materialised per-sample path: the fixtures rewrite its clipping).
        charged_sample_rate: maps the true sample rate to the one charged to the ledger.
        inspect_ghost: called on every ghost-clipped DQN update, after the clipped sum is in
            ``p.grad`` and before canaries and noise, as ``f(net, inputs, per_sample_norms,
            clipped_sum)`` (tests recompute the per-sample gradients independently).
    """

    optimizer_class: Any = None
    charged_sample_rate: Callable[[float], float] | None = None
    inspect_ghost: Callable[..., None] | None = None


def flat_params(model: Any) -> np.ndarray:
    return np.concatenate(
        [p.detach().cpu().numpy().reshape(-1).astype(np.float64) for p in model.parameters()]
    )


def canary_directions(n_params: int, m: int, seed: int) -> np.ndarray:
    """The public canary design: (n_params, m) orthonormal columns from ``seed`` (QR)."""
    rng = np.random.default_rng(int(seed))
    a = rng.standard_normal((int(n_params), int(m)))
    q, r = np.linalg.qr(a)
    return q * np.sign(np.diag(r))  # a unique, uniformly distributed orthonormal frame


class GradientCanaries:
    """Gradient canaries: public directions, secret inclusion bits (scoring only)."""

    def __init__(self, cfg: DprlConfig, params: list[Any], rng: np.random.Generator) -> None:
        import torch

        self.m = cfg.canaries
        self.u = canary_directions(cfg.n_params, self.m, cfg.canary_seed)  # public
        self.included = rng.random(self.m) < 0.5  # secret
        self.participations = np.zeros(self.m, dtype=np.int64)
        g = torch.as_tensor(self.u[:, self.included].T * (cfg.canary_scale * cfg.clip))
        rows, off = [], 0
        for p in params:
            n = p.numel()
            rows.append(g[:, off : off + n].reshape((-1, *p.shape)).to(p.dtype).to(p.device))
            off += n
        self.rows = rows  # per parameter: (n_included, *shape)
        self.u32 = torch.as_tensor(self.u, dtype=torch.float32)

    def append_to(self, params: list[Any], sample_rate: float, gen: Any) -> None:
        """Add the included canaries (a Poisson sample at ``sample_rate``) as per-sample rows."""
        import torch

        k = self.rows[0].shape[0]
        if k == 0:
            return
        if sample_rate >= 1.0:
            sel = torch.ones(k, dtype=torch.bool)
        else:
            sel = torch.rand(k, generator=gen) < sample_rate
        idx = np.flatnonzero(self.included)[sel.numpy()]
        self.participations[idx] += 1
        sel = sel.to(self.rows[0].device)  # drawn on the CPU generator (no-op on the CPU)
        for p, r in zip(params, self.rows, strict=True):
            p.grad_sample = torch.cat([p.grad_sample, r[sel]], dim=0)


def add_canaries_to_clipped_sum(canaries: Any, params: list[Any], sample_rate: float, gen: Any,
                          clip: float) -> None:  # fmt: skip
    """Ghost path: add the included canaries (Poisson sample at ``sample_rate``), each clipped
    with Opacus's factor ``min(1, C / (norm + 1e-6))``, straight into the clipped sum."""
    import torch

    k = canaries.rows[0].shape[0]
    if k == 0:
        return
    if sample_rate >= 1.0:
        sel = torch.ones(k, dtype=torch.bool)
    else:
        sel = torch.rand(k, generator=gen) < sample_rate
    idx = np.flatnonzero(canaries.included)[sel.numpy()]
    canaries.participations[idx] += 1
    if not sel.any():
        return
    sel = sel.to(canaries.rows[0].device)  # drawn on the CPU generator (no-op on the CPU)
    n = int(sel.sum())
    norms = sum(r[sel].reshape(n, -1).pow(2).sum(dim=1) for r in canaries.rows).sqrt()
    factor = (clip / (norms + 1e-6)).clamp(max=1.0)
    for p, r in zip(params, canaries.rows, strict=True):
        p.grad = p.grad + torch.einsum("i,i...", factor.to(r.dtype), r[sel])


def cpu_noise_optimizer(cls: Any) -> Any:
    """``cls`` (an Opacus DP optimizer) with its noise drawn on the CPU and moved.

    Opacus draws ``torch.normal(..., device=grad.device, generator=gen)``, which a CPU generator
    refuses for a CUDA tensor. Drawing on the CPU from the same generator, in the same order and
    shape, then moving, keeps the noise stream of a GPU run identical to the CPU run's. Used only
    off the CPU (the CPU path is Opacus's own); an optimizer class whose ``add_noise`` is not
    Opacus's (a test fixture) is returned unchanged.
    """
    from opacus.optimizers import DPOptimizer, DPOptimizerFastGradientClipping
    from opacus.optimizers.optimizer import (
        _check_processed_flag,
        _generate_noise,
        _mark_as_processed,
    )

    if cls.add_noise not in (DPOptimizer.add_noise, DPOptimizerFastGradientClipping.add_noise):
        return cls

    def add_noise(self: Any) -> None:
        import torch

        nm = getattr(self, "_adjusted_noise_multiplier", self.noise_multiplier)
        for p in self.params:
            _check_processed_flag(p.summed_grad)
            ref = torch.empty(p.summed_grad.shape, dtype=p.summed_grad.dtype)  # on the CPU
            noise = _generate_noise(
                std=nm * self.max_grad_norm,
                reference=ref,
                generator=self.generator,
                secure_mode=self.secure_mode,
            )
            p.grad = (p.summed_grad + noise.to(p.summed_grad.device)).view_as(p)
            _mark_as_processed(p.summed_grad)

    return type(f"CpuNoise{cls.__name__}", (cls,), {"add_noise": add_noise})


class DpSgdUpdate:
    """One DP-SGD update: Opacus clip + noise, charged first, sealed and recorded."""

    def __init__(self, cfg: DprlConfig, model: Any, base_opt: Any, accountant: Any, gen: Any,
                 hooks: TrainerHooks, canaries: GradientCanaries | None) -> None:  # fmt: skip
        from opacus.optimizers import DPOptimizer

        from ldp_audit.release import Transcript

        self.cfg = cfg
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.ghost = bool(getattr(model, "_ghost", False))
        if self.ghost:
            from opacus.optimizers import DPOptimizerFastGradientClipping as DPOptimizer
        cls = hooks.optimizer_class or DPOptimizer
        if self.params[0].device.type != "cpu":
            cls = cpu_noise_optimizer(cls)
        self.q = cfg.sample_rate
        expected = cfg.envs if cfg.algo == "reinforce" else cfg.batch_size
        self.opt = cls(
            base_opt,
            noise_multiplier=float(cfg.noise_multiplier),
            max_grad_norm=float(cfg.clip),
            expected_batch_size=int(expected),
            loss_reduction="mean",
            generator=gen,
        )
        q_charged = hooks.charged_sample_rate(self.q) if hooks.charged_sample_rate else self.q
        self.event = cfg.update_event(q_charged)
        self.accountant = accountant
        self.gen = gen
        self.canaries = canaries
        self.transcript = Transcript(values_key="update") if cfg.keep_updates else None
        self.proj: list[np.ndarray] = []
        self.norms: list[float] = []
        self.t = 0

    def zero_grad(self) -> None:
        self.opt.zero_grad()

    def step(self) -> None:
        """Per-sample gradients are in ``p.grad_sample``: add canaries, charge, noise, step."""
        from ldp_audit.release import release_with

        if self.canaries is not None:
            if self.ghost:
                add_canaries_to_clipped_sum(self.canaries, self.params, self.q, self.gen,
                                      float(self.cfg.clip))  # fmt: skip
            else:
                self.canaries.append_to(self.params, self.q, self.gen)

        def randomise() -> Any:
            self.opt.step()  # clip each per-sample gradient, sum, add noise, / batch, Adam step
            import torch

            return torch.cat([p.grad.reshape(-1) for p in self.params]).reshape(1, -1)

        rel = release_with(
            randomise,
            accountant=self.accountant,
            charges=[("model", self.event)],
            epsilon=math.inf,  # per-update epsilon is not meaningful alone; see the ledger
            delta=float(self.cfg.delta),
            meta={"update_index": np.array([self.t])},
            scope="central",
        )
        v = rel.values  # the sealed noisy mean gradient (what crossed the boundary)
        self.norms.append(float(np.linalg.norm(v)))
        if self.canaries is not None:
            self.proj.append((v.astype(np.float64) @ self.canaries.u).reshape(-1))
        if self.transcript is not None:
            self.transcript.append(rel)
        self.opt.zero_grad()
        self.t += 1

    def arrays(self) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {"update_norm": np.asarray(self.norms, dtype=np.float64)}
        if self.transcript is not None and len(self.transcript):
            out.update(self.transcript.arrays())
        else:
            out["update_index"] = np.arange(self.t, dtype=np.int64)
        if self.canaries is not None:
            out["canary_projection"] = (
                np.stack(self.proj) if self.proj else np.zeros((0, self.canaries.m))
            )
        return out


class ObservationRelease:
    """Every observation the agent sees goes through ldp_audit.release (charged first)."""

    def __init__(self, cfg: DprlConfig, accountant: Any, rng: np.random.Generator) -> None:
        from ldp_audit.release import Transcript

        self.mech = cfg.obs_mechanism()
        self.event = self.mech.event()
        self.accountant = accountant
        self.rng = rng
        self.transcript = Transcript(values_key="observation")

    def __call__(self, obs: np.ndarray, episodes: np.ndarray, steps: np.ndarray) -> np.ndarray:
        from ldp_audit.release import release

        if len(episodes) == 0:
            return np.zeros((0, obs.shape[1]))
        rel = release(
            np.asarray(obs, dtype=np.float64),
            mechanism=self.mech,
            accountant=self.accountant,
            agent_ids=[f"ep{int(e)}" for e in episodes],
            rng=self.rng,
            event=self.event,
            meta={"episode": episodes.astype(np.int64), "step": steps.astype(np.int64)},
            scope="local",
        )
        self.transcript.append(rel)
        return rel.values
