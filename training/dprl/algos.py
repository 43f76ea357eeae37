"""The two DP-SGD / observation-noise RL algorithms, each readable top to bottom (CleanRL style):
:func:`train_reinforce` and :func:`train_dqn`, with what they build: the networks
(:func:`make_network`, from the run's torch generator) and the result (:class:`DprlResult`,
:func:`convergence_episode`).

Part of :mod:`ldp_audit.training.dprl` (config, privacy plumbing, the run directory):
:func:`~ldp_audit.training.dprl.trainer.train` calls them (this module never imports the
trainer back).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError
from ldp_audit.opacus.embed import flat_params
from ldp_audit.training.dprl.config import DprlConfig
from ldp_audit.training.dprl.privacy import (
    DpSgdUpdate,
    ObservationRelease,
    TrainerHooks,
    plant_canaries,
)

__all__ = [
    "DprlResult",
    "convergence_episode",
    "window_means",
    "make_network",
    "quiet_opacus_warnings",
    "train_reinforce",
    "train_dqn",
]


#: CartPole-v1 is solved when the mean return over this many consecutive episodes is >= 475.
SOLVED_WINDOW = 25
SOLVED_RETURN = 475.0
MAX_EPISODE_STEPS = 500


@dataclass
class DprlResult:
    """What a run produced (also written to the run directory)."""

    config: DprlConfig
    seed: int
    returns: list[float]
    updates: int
    env_steps: int
    seconds: float
    privacy: dict[str, Any]
    stopped: str | None = None
    params: np.ndarray | None = None
    initial: np.ndarray | None = None
    transcript: dict[str, np.ndarray] = field(default_factory=dict)
    secrets: dict[str, np.ndarray] = field(default_factory=dict)
    device: str = "cpu"
    eval_returns: list[float] = field(default_factory=list)

    @property
    def convergence_episode(self) -> float:
        return convergence_episode(self.returns)


def window_means(returns: Any) -> np.ndarray:
    """The mean of every ``SOLVED_WINDOW`` consecutive returns (none with fewer returns)."""
    c = np.concatenate([[0.0], np.cumsum(np.asarray(returns, dtype=np.float64))])
    return (c[SOLVED_WINDOW:] - c[:-SOLVED_WINDOW]) / SOLVED_WINDOW


def convergence_episode(returns: Any) -> float:
    """1-based episode at which the mean of the last 25 returns first reaches 475; inf if never."""
    hit = np.flatnonzero(window_means(returns) >= SOLVED_RETURN)
    return float(hit[0] + SOLVED_WINDOW) if hit.size else math.inf


# ------------------------------------------------------------------------------------------------
# Networks (initialised from the run's torch.Generator: no global RNG) and the result
# ------------------------------------------------------------------------------------------------


def quiet_opacus_warnings() -> None:
    """Opacus's full backward hooks warn when inputs need no grad (ours never do): silence it."""
    import warnings

    warnings.filterwarnings("ignore", message="Full backward hook is firing")
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")


def make_network(cfg: DprlConfig, gen: Any) -> Any:
    """REINFORCE: 4-h-2 MLP with dropout; DQN: 4-h-h-2 MLP. Init as nn.Linear, from ``gen``."""
    import torch
    from torch import nn

    class GenDropout(nn.Module):
        """Dropout whose masks come from the run's generator (nn.Dropout uses the global RNG).

        The masks drawn while acting are recorded (``record``) and replayed (``replay``) in the
        training forward, so the gradient is that of the very policy that acted (dropout is
        part of the stochastic policy, as in the slides' REINFORCE).
        """

        def __init__(self) -> None:
            super().__init__()
            self.p = cfg.dropout
            self.gen = gen
            self.record: list[torch.Tensor] | None = None
            self.replay: torch.Tensor | None = None

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if not self.training:
                return x
            if self.replay is not None:
                keep = self.replay
            else:
                keep = torch.rand(x.shape, generator=self.gen, dtype=x.dtype) >= self.p
                keep = keep.to(x.device)  # drawn on the CPU generator (no-op on the CPU)
                if self.record is not None:
                    self.record.append(keep)
            return x * keep / (1.0 - self.p)

    s = cfg.layer_sizes
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(s[:-1], s[1:], strict=False)):
        lin = nn.Linear(a, b)
        bound = 1.0 / math.sqrt(a)
        with torch.no_grad():
            lin.weight.uniform_(-bound, bound, generator=gen)
            lin.bias.uniform_(-bound, bound, generator=gen)
        layers.append(lin)
        if i < len(s) - 2:
            if cfg.algo == "reinforce" and cfg.dropout > 0:  # none at 0: no masks to replay
                layers.append(GenDropout())
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def _start(cfg: DprlConfig, seed: int, streams: int) -> tuple:
    """A run's start: the clock, the torch generator and ``streams`` numpy generators, then the
    env seed (in that order, from the run seed), the device and the vector env."""
    import gymnasium as gym
    import torch

    from ldp_audit.training.device import resolve_device

    quiet_opacus_warnings()
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(int(rng.integers(2**62)))
    spawned = rng.spawn(streams)
    env_seed = int(rng.integers(2**31))
    dev = torch.device(resolve_device(cfg.device))
    envs = gym.make_vec("CartPole-v1", num_envs=cfg.envs, vectorization_mode="vector_entry_point")
    return t0, gen, spawned, env_seed, dev, envs


def _private_parts(cfg, net, accountant, hooks, gen, canary_rng, obs_rng, ghost=False) -> tuple:  # noqa: ANN001
    """The model whose loss is differentiated (``net``, or under dpsgd its Opacus
    ``GradSampleModule``, ghost clipping's when ``ghost``), the optimizer of ``net``, the
    canaries (None without), the DP-SGD update of the model (None unless dpsgd) and the
    observation release (None unless obs-noise)."""
    import torch
    from opacus import GradSampleModule
    from opacus.grad_sample import GradSampleModuleFastGradientClipping

    model = net
    if ghost:
        model = GradSampleModuleFastGradientClipping(
            net, batch_first=True, loss_reduction="sum", max_grad_norm=float(cfg.clip)
        )
    elif cfg.privacy == "dpsgd":
        model = GradSampleModule(net, batch_first=True, loss_reduction="sum")
    optimizer = torch.optim.Adam(net.parameters(), lr=cfg.learning_rate)
    canaries = plant_canaries(cfg, accountant, canary_rng, gen)  # None without canaries
    dp = None
    if cfg.privacy == "dpsgd":
        dp = DpSgdUpdate(cfg, model, optimizer, accountant, gen, hooks, canaries)
    obs_release = (
        ObservationRelease(cfg, accountant, obs_rng) if cfg.privacy == "obs-noise" else None
    )
    return model, optimizer, canaries, dp, obs_release


# ------------------------------------------------------------------------------------------------
# REINFORCE (episode = privacy unit), vectorised over a Gymnasium vector env
# ------------------------------------------------------------------------------------------------


def train_reinforce(cfg: DprlConfig, *, seed: int, accountant: Any, hooks: TrainerHooks,
                    progress: bool = False) -> DprlResult:  # fmt: skip
    """REINFORCE on CartPole-v1, ``num_envs`` episodes per update (see the module docstring)."""
    import torch
    from scipy.signal import lfilter
    from tqdm.auto import tqdm

    t0, gen, (obs_rng, canary_rng), env_seed, dev, envs = _start(cfg, seed, 2)
    B = cfg.envs
    policy = make_network(cfg, gen).to(dev)  # initialised on the CPU generator, then moved
    initial = flat_params(policy.parameters())
    model, optimizer, canaries, dp, obs_release = _private_parts(
        cfg, policy, accountant, hooks, gen, canary_rng, obs_rng
    )

    returns: list[float] = []
    env_steps, stopped, n_updates = 0, None, cfg.n_updates
    bar = tqdm(total=cfg.episodes, desc="dprl reinforce", disable=not progress, leave=False)
    try:  # Ctrl-C: stop, keep what was released so far (train() writes it)
        for update in range(n_updates):
            # every batch starts B fresh episodes (the vector env's RNG continues)
            obs, _ = envs.reset(seed=env_seed if update == 0 else None)
            # --- roll out B episodes at once (masked after each one ends) ---
            n_ep = min(B, cfg.episodes - update * B)
            states = np.zeros((MAX_EPISODE_STEPS, B, 4), dtype=np.float32)
            actions = np.zeros((MAX_EPISODE_STEPS, B), dtype=np.int64)
            alive = np.zeros((MAX_EPISODE_STEPS, B), dtype=bool)
            done = np.zeros(B, dtype=bool)
            done[n_ep:] = True  # a last, smaller batch
            drops = [m for m in policy.modules() if hasattr(m, "record")]
            for m in drops:  # act with dropout on, recording the masks for the gradient
                m.record, m.replay = [], None
            policy.train()
            T = 0
            for t in range(MAX_EPISODE_STEPS):
                live = np.flatnonzero(~done)
                seen = np.asarray(obs, dtype=np.float64)
                if obs_release is not None:
                    seen = seen.copy()
                    seen[live] = obs_release(seen[live], update * B + live, np.full(live.size, t))
                states[t] = seen
                alive[t] = ~done
                with torch.no_grad():
                    probs = torch.softmax(policy(torch.as_tensor(states[t], device=dev)), dim=-1)
                if not bool(torch.isfinite(probs).all()):  # session 56: --lr 1e308 was exit 3
                    raise InvalidParameterError(
                        f"dprl diverged: the policy is not finite after {update} updates (nothing "
                        f"after them was released); likely cause: a learning rate too large "
                        f"(lr={cfg.learning_rate:g})"
                    )
                # drawn on the CPU generator (.cpu() is a no-op on the CPU)
                a = torch.multinomial(probs.cpu(), 1, generator=gen).reshape(-1).numpy()
                actions[t] = a
                obs, _, term, trunc, _ = envs.step(a)
                env_steps += live.size
                done |= term | trunc
                T = t + 1
                if done.all():
                    break
            lengths = alive[:T].sum(axis=0)[:n_ep]
            returns.extend(float(x) for x in lengths)
            bar.update(n_ep)

            # --- per-episode loss: -sum_t G_t log pi(a_t | s_t), normalised returns-to-go ---
            rew = alive[T - 1 :: -1].astype(np.float64)  # G_t = r_t + gamma G_{t+1}, backwards
            g = lfilter([1.0], [1.0, -cfg.gamma], rew, axis=0)[::-1]
            n = np.maximum(alive[:T].sum(axis=0), 1)
            mean = (g * alive[:T]).sum(axis=0) / n
            std = np.sqrt((((g - mean) ** 2) * alive[:T]).sum(axis=0) / n)
            adv = np.where(alive[:T], (g - mean) / (std + 1e-8), 0.0)
            x = torch.as_tensor(states[:T, :n_ep].transpose(1, 0, 2).copy(), device=dev)
            for m in drops:  # (T, B, h) masks of the rollout -> (episodes, T, h)
                m.replay = torch.stack(m.record)[:, :n_ep].transpose(0, 1)
                m.record = None
            logp = torch.log_softmax(model(x), dim=-1)
            for m in drops:
                m.replay = None
            act = torch.as_tensor(actions[:T, :n_ep].T.copy(), device=dev)
            lp = logp.gather(-1, act.unsqueeze(-1)).squeeze(-1)
            adv_t = torch.as_tensor(adv[:, :n_ep].T.copy(), dtype=lp.dtype, device=dev)
            per_episode = -(adv_t * lp).sum(dim=1)
            if dp is not None:
                dp.opt.zero_grad()
                per_episode.sum().backward()  # one per-sample gradient per episode
                if stopped := dp.step():
                    break
            else:
                optimizer.zero_grad()
                per_episode.mean().backward()
                optimizer.step()
            if progress and returns:
                bar.set_postfix(ret=f"{np.mean(returns[-SOLVED_WINDOW:]):.0f}")
    except KeyboardInterrupt:
        stopped = "interrupted"
    bar.close()
    envs.close()
    return collect_result(cfg, seed, returns, dp, obs_release, canaries, policy, initial, env_steps,
                   t0, stopped)  # fmt: skip


def _ghost_backward(model: Any, per_sample_loss: Any, params: list[Any]) -> None:
    """Opacus ghost clipping (``DPTensorFastGradientClipping.backward``'s two passes).

    First backward: the hooks compute each sample's whole-gradient norm from the layer inputs and
    output gradients (no per-sample gradient is materialised). Second backward (hooks off) of
    ``sum_i min(1, C / (norm_i + 1e-6)) loss_i``: ``p.grad`` is the clipped sum.
    """
    per_sample_loss.sum().backward(retain_graph=True)
    coef = model.get_clipping_coef().detach()
    for p in params:
        p.grad = None
    model.disable_hooks()
    try:
        (coef * per_sample_loss).sum().backward()
    finally:
        model.enable_hooks()


# ------------------------------------------------------------------------------------------------
# DQN (transition = privacy unit), Poisson-sampled replay, CleanRL-style loop
# ------------------------------------------------------------------------------------------------


def train_dqn(cfg: DprlConfig, *, seed: int, accountant: Any, hooks: TrainerHooks,
              progress: bool = False) -> DprlResult:  # fmt: skip
    """DQN on CartPole-v1 (see the module docstring for the privacy unit and sampling)."""
    import torch
    from tqdm.auto import tqdm

    t0, gen, (obs_rng, canary_rng, sample_rng, act_rng), env_seed, dev, envs = _start(cfg, seed, 4)
    N = cfg.envs
    q_net = make_network(cfg, gen).to(dev)  # initialised on the CPU generator, then moved
    target = make_network(cfg, gen).to(dev)
    target.load_state_dict(q_net.state_dict())
    initial = flat_params(q_net.parameters())
    ghost = cfg.privacy == "dpsgd" and cfg.ghost and hooks.optimizer_class is None
    model, optimizer, canaries, dp, obs_release = _private_parts(
        cfg, q_net, accountant, hooks, gen, canary_rng, obs_rng, ghost
    )

    # replay buffer (what the learner stores: the observations it saw)
    cap = cfg.buffer_size
    b_obs = np.zeros((cap, 4), dtype=np.float32)
    b_next = np.zeros((cap, 4), dtype=np.float32)
    b_act = np.zeros(cap, dtype=np.int64)
    b_rew = np.zeros(cap, dtype=np.float32)
    b_term = np.zeros(cap, dtype=np.float32)
    pos = size = transitions = 0  # transitions: env steps the agent acted in (not resets)

    returns: list[float] = []
    ep_ret = np.zeros(N)
    ep_id = np.arange(N)  # the episode each env is playing (obs-noise ledger agents)
    ep_step = np.zeros(N, dtype=np.int64)
    next_ep = N
    stopped = None
    obs, _ = envs.reset(seed=env_seed)
    if obs_release is not None:
        obs = obs_release(np.asarray(obs), ep_id, ep_step)
    prev_done = np.zeros(N, dtype=bool)
    vec_steps = -(-cfg.total_steps // N)
    first_update = -(-cfg.learning_starts // N)
    bar = tqdm(total=vec_steps, desc="dprl dqn", disable=not progress, leave=False)
    try:  # Ctrl-C: stop, keep what was released so far (train() writes it)
        for step in range(vec_steps):
            global_step = step * N
            # --- act: epsilon-greedy, linear schedule ---
            frac = min(global_step / (cfg.exploration_fraction * cfg.total_steps), 1.0)
            eps = cfg.start_e + frac * (cfg.end_e - cfg.start_e)
            with torch.no_grad():
                o = torch.as_tensor(obs, dtype=torch.float32, device=dev)
                greedy = q_net(o).argmax(dim=1).cpu().numpy()
            explore = act_rng.random(N) < eps
            actions = np.where(explore, act_rng.integers(0, 2, N), greedy)
            raw_next, rew, term, trunc, _ = envs.step(actions)
            # envs that ended last step were reset by this step (autoreset): no transition there
            ep_step = np.where(prev_done, 0, ep_step + 1)
            if prev_done.any():
                ep_id[prev_done] = next_ep + np.arange(prev_done.sum())
                next_ep += int(prev_done.sum())
            nxt = np.asarray(raw_next, dtype=np.float64)
            if obs_release is not None:
                nxt = obs_release(nxt, ep_id, ep_step)
            for i in np.flatnonzero(~prev_done):
                b_obs[pos], b_next[pos], b_act[pos] = obs[i], nxt[i], actions[i]
                b_rew[pos], b_term[pos] = rew[i], float(term[i])
                pos, size = (pos + 1) % cap, min(size + 1, cap)
                ep_ret[i] += rew[i]
                transitions += 1
            done = (term | trunc) & ~prev_done
            for i in np.flatnonzero(done):
                returns.append(float(ep_ret[i]))
                ep_ret[i] = 0.0
            prev_done = done
            obs = nxt

            # --- learn ---
            if step >= first_update and (step - first_update) % cfg.train_frequency == 0:
                if dp is not None:
                    # Poisson sample: each stored transition independently at rate q
                    idx = np.flatnonzero(sample_rng.random(size) < cfg.sample_rate)
                else:
                    idx = sample_rng.integers(0, size, cfg.batch_size)
                s = torch.as_tensor(b_obs[idx], device=dev)
                a_t = torch.as_tensor(b_act[idx], device=dev).unsqueeze(1)
                with torch.no_grad():
                    tq = target(torch.as_tensor(b_next[idx], device=dev)).max(dim=1).values
                    y = torch.as_tensor(b_rew[idx], device=dev) + cfg.gamma * tq * (
                        1 - torch.as_tensor(b_term[idx], device=dev)
                    )
                if dp is not None:
                    dp.opt.zero_grad()
                    if idx.size:
                        qsa = model(s).gather(1, a_t).squeeze(1)
                        per = (qsa - y) ** 2  # per-transition squared TD error
                        if ghost:
                            _ghost_backward(model, per, dp.params)
                            if hooks.inspect_ghost is not None:
                                g = [p.grad.clone() for p in dp.params]
                                hooks.inspect_ghost(q_net, (s, a_t, y), model.get_norm_sample(), g)
                        else:
                            per.sum().backward()
                    elif ghost:  # an empty Poisson sample: the update is noise (and canaries)
                        for p in dp.params:
                            p.grad = torch.zeros_like(p)
                    else:
                        for p in dp.params:
                            p.grad_sample = torch.zeros((0, *p.shape), dtype=p.dtype, device=dev)
                    if stopped := dp.step():
                        break
                else:
                    qsa = q_net(s).gather(1, a_t).squeeze(1)
                    loss = torch.nn.functional.mse_loss(qsa, y)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
            if global_step // cfg.target_frequency != (global_step + N) // cfg.target_frequency:
                target.load_state_dict(q_net.state_dict())
            if step % 200 == 0 and returns:
                bar.set_postfix(ret=f"{np.mean(returns[-SOLVED_WINDOW:]):.0f}")
            bar.update(1)
    except KeyboardInterrupt:
        stopped = "interrupted"
    bar.close()
    envs.close()
    return collect_result(cfg, seed, returns, dp, obs_release, canaries, q_net, initial,
                   transitions, t0, stopped)  # fmt: skip


def collect_result(
    cfg, seed, returns, dp, obs_release, canaries, net, initial, env_steps, t0, stopped
):  # noqa: ANN001
    transcript: dict[str, np.ndarray] = {}
    secrets: dict[str, np.ndarray] = {}
    if dp is not None:
        transcript.update(dp.arrays())
    if canaries is not None:  # the embedded CanaryAudit's records (ldp_audit.opacus)
        rec = canaries.finish()
        transcript.update(rec.transcript)  # canary_projection
        secrets.update(rec.secrets)  # canary_included, canary_participations
    if obs_release is not None and len(obs_release.transcript):
        transcript.update(obs_release.transcript.arrays())
    return DprlResult(
        config=cfg,
        seed=int(seed),
        returns=[float(r) for r in returns],
        updates=dp.t if dp is not None else 0,
        env_steps=int(env_steps),
        seconds=time.perf_counter() - t0,
        privacy={},
        stopped=stopped,
        params=flat_params(net.parameters()),
        initial=initial,
        transcript=transcript,
        secrets=secrets,
        device=str(next(net.parameters()).device.type),
    )
