"""The privacy plumbing of a DP-RL run: DP-SGD updates, gradient canaries, observation noise.

- :class:`DpSgdUpdate`: one DP-SGD update (Opacus clips and noises; the ledger is charged through
  :func:`ldp_audit.release.release_with` before the noise is drawn; the sealed update recorded).
- :func:`plant_canaries` and :func:`canary_directions`: the one-run audit's gradient canaries
  (public directions, secret inclusion bits), planted and recorded by
  :class:`ldp_audit.opacus.CanaryAudit` embedded in the run (one implementation for a user's
  Opacus loop and for ``train dprl``).
- :class:`ObservationRelease`: every observation released through :func:`ldp_audit.release.release`.
- :class:`TrainerHooks`: test-only seams for the broken-trainer fixtures.

:mod:`ldp_audit.training.dprl.algos` uses these.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ldp_audit.errors import BudgetExceeded
from ldp_audit.training.dprl.config import DprlConfig

__all__ = [
    "DpSgdUpdate",
    "ObservationRelease",
    "TrainerHooks",
    "canary_directions",
    "cpu_noise_optimizer",
    "gaussian_noise",
    "plant_canaries",
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


def canary_directions(n_params: int, m: int, seed: int) -> np.ndarray:
    """The public canary design: (n_params, m) orthonormal columns from ``seed`` (QR)."""
    rng = np.random.default_rng(int(seed))
    a = rng.standard_normal((int(n_params), int(m)))
    q, r = np.linalg.qr(a)
    return q * np.sign(np.diag(r))  # a unique, uniformly distributed orthonormal frame


def plant_canaries(cfg: DprlConfig, accountant: Any, rng: np.random.Generator, gen: Any) -> Any:
    """The run's gradient canaries: an embedded :class:`ldp_audit.opacus.CanaryAudit` (attached
    to the DP optimizer by :class:`DpSgdUpdate`), or None without canaries.

    Public: the directions :func:`canary_directions` of ``cfg.canary_seed`` (a dense frame),
    the norm ``canary_scale * clip``. Secret: each canary included with probability 1/2 (drawn
    from ``rng``, the run's canary generator); an included canary joins each update with the
    run's sample rate, drawn from ``gen`` (the noise generator) just before the noise. The
    trainer's release door charges every update (``charge=False``: the audit charges nothing).
    """
    if not cfg.canaries:
        return None
    from ldp_audit.opacus import CanaryAudit

    return CanaryAudit(
        canaries=int(cfg.canaries),
        seed=0,  # unused: every draw comes from the run's generators below
        delta=float(cfg.delta),
        canary_scale=float(cfg.canary_scale),
        canary_seed=int(cfg.canary_seed),
        accountant=accountant,
        charge=False,
        directions=canary_directions(cfg.n_params, cfg.canaries, cfg.canary_seed),
        rng=rng,
        generator=gen,
    )


def gaussian_noise(
    std: float, shape: Any, dtype: Any, generator: Any, *, secure_mode: bool = False
) -> Any:
    """``N(0, std^2)`` noise of ``shape`` drawn on the CPU from ``generator``: the same draws, in
    the same order, as Opacus's DP optimizers make (opacus 1.6 ``optimizer.py``), so a run's
    noise stream does not depend on where its tensors live.

    With ``secure_mode`` (Opacus's defence against floating-point attacks, Holohan & Braghin
    2021, section 5.1, n = 2): one draw thrown away, then the sum of four draws halved.
    """
    import torch

    zeros = torch.zeros(shape, dtype=dtype)
    if std == 0:
        return zeros
    if not secure_mode:
        return torch.normal(mean=0, std=std, size=shape, generator=generator, dtype=dtype)
    torch.normal(mean=0, std=std, size=(1, 1), generator=generator)  # thrown away
    for _ in range(4):
        zeros += torch.normal(mean=0, std=std, size=shape, generator=generator)
    return zeros / 2


def cpu_noise_optimizer(cls: Any) -> Any:
    """``cls`` (an Opacus DP optimizer) with its noise drawn on the CPU and moved.

    Opacus draws ``torch.normal(..., device=grad.device, generator=gen)``, which a CPU generator
    refuses for a CUDA tensor. Drawing on the CPU from the same generator, in the same order and
    shape (:func:`gaussian_noise`), then moving, keeps the noise stream of a GPU run identical to
    the CPU run's. A summed gradient is noised once: noising it again before ``zero_grad`` (which
    drops it) raises, as Opacus does. Used only off the CPU (the CPU path is Opacus's own); an
    optimizer class whose ``add_noise`` is not Opacus's (a test fixture) is returned unchanged.
    """
    from opacus.optimizers import DPOptimizer, DPOptimizerFastGradientClipping

    if cls.add_noise not in (DPOptimizer.add_noise, DPOptimizerFastGradientClipping.add_noise):
        return cls

    def add_noise(self: Any) -> None:
        for p in self.params:
            g = p.summed_grad
            if getattr(g, "ldp_audit_noised", False):  # zero_grad drops a noised sum
                raise ValueError(
                    "gradients have not been cleared since the last optimizer step: call "
                    "optimizer.zero_grad() on each step (a gradient noised twice breaks the "
                    "privacy guarantee)"
                )
            noise = gaussian_noise(self.noise_multiplier * self.max_grad_norm, g.shape, g.dtype,
                                   self.generator, secure_mode=self.secure_mode)  # fmt: skip
            p.grad = (g + noise.to(g.device)).view_as(p)
            g.ldp_audit_noised = True

    return type(f"CpuNoise{cls.__name__}", (cls,), {"add_noise": add_noise})


class DpSgdUpdate:
    """One DP-SGD update: Opacus clip + noise, charged first, sealed and recorded."""

    def __init__(self, cfg: DprlConfig, model: Any, base_opt: Any, accountant: Any, gen: Any,
                 hooks: TrainerHooks, canaries: Any = None) -> None:  # fmt: skip
        from opacus.grad_sample import GradSampleModuleFastGradientClipping as Ghost
        from opacus.optimizers import DPOptimizer

        from ldp_audit.release import Transcript

        self.cfg = cfg
        self.params = [p for p in model.parameters() if p.requires_grad]
        if isinstance(model, Ghost):  # ghost clipping: Opacus's optimizer for it
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
        if canaries is not None:  # an embedded CanaryAudit (plant_canaries)
            canaries.attach(self.opt, sample_rate=self.q)
        self.transcript = Transcript(values_key="update") if cfg.keep_updates else None
        self.norms: list[float] = []
        self.t = 0

    def step(self) -> str | None:
        """Per-sample gradients are in ``p.grad_sample``: add canaries, charge, noise, step; the
        reason to stop training when the budget refuses the update (None: released)."""
        from ldp_audit.release import release_with

        def randomise() -> Any:
            # the audit's hooks add the joining canaries (drawn from gen) to the per-sample
            # gradients, or clipped to the clipped sum under ghost clipping, then Opacus clips
            # each per-sample gradient, sums, adds noise (from gen), / batch; the Adam step
            self.opt.step()
            import torch

            return torch.cat([p.grad.reshape(-1) for p in self.params]).reshape(1, -1)

        try:
            rel = release_with(
                randomise,
                accountant=self.accountant,
                charges=[("model", self.event)],
                epsilon=math.inf,  # per-update epsilon is not meaningful alone; see the ledger
                delta=float(self.cfg.delta),
                meta={"update_index": np.array([self.t])},
                scope="central",
            )
        except BudgetExceeded as exc:  # refused before the noise: nothing released
            return f"budget exhausted before update {self.t}: {exc}"
        v = rel.values  # the sealed noisy mean gradient (what crossed the boundary)
        self.norms.append(float(np.linalg.norm(v)))
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
