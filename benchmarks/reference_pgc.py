"""The straightforward PGC-A3C worker, kept as the reference (not used by the library).

One ``gymnasium.make("CartPole-v1")`` and one torch ``nn.Module`` per agent, a Python loop per
environment step, torch autograd for the loss of eqs. 15-18. ``benchmarks/bench_pgc.py`` times it
against the batched engine of ``ldp_audit.training.pgc_a3c`` in the same run, and
``tests/test_pgc_a3c.py``
checks both give the same gradient for the same episode (same theta, gravity, initial state and
acting uniforms).
"""

from __future__ import annotations

import math
import time
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from ldp_audit.training.cartpole import initial_states
from ldp_audit.training.pgc_a3c.config import PgcA3cConfig
from ldp_audit.training.pgc_a3c.model import DIM, init_theta


class A3CNet(nn.Module):
    """theta_c 16x4 (ReLU), theta_p 2x16 (softmax), theta_v 1x16; no biases; d = 112."""

    def __init__(self) -> None:
        super().__init__()
        self.c = nn.Linear(4, 16, bias=False)
        self.p = nn.Linear(16, 2, bias=False)
        self.v = nn.Linear(16, 1, bias=False)
        self.double()

    def load_flat(self, theta: np.ndarray) -> None:
        t = torch.as_tensor(np.asarray(theta, dtype=np.float64))
        with torch.no_grad():
            self.c.weight.copy_(t[:64].reshape(16, 4))
            self.p.weight.copy_(t[64:96].reshape(2, 16))
            self.v.weight.copy_(t[96:].reshape(1, 16))

    def flat_grad(self) -> np.ndarray:
        return torch.cat(
            [
                self.c.weight.grad.reshape(-1),
                self.p.weight.grad.reshape(-1),
                self.v.weight.grad.reshape(-1),
            ]
        ).numpy()

    def forward(self, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.relu(self.c(s))
        return self.p(h), self.v(h).squeeze(-1)


def run_episode(
    env: Any,
    net: A3CNet,
    theta: np.ndarray,
    gravity: float,
    init_state: np.ndarray,
    uniforms: np.ndarray,
    alpha: float,
    *,
    steps: int = 200,
    gamma: float = 0.99,
    lam: float = 0.5,
    beta: float = 0.01,
) -> tuple[np.ndarray, float]:
    """One alpha-greedy episode with a Python loop per step; returns (gradient (112,), score)."""
    net.load_flat(theta)
    env.unwrapped.gravity = float(gravity)
    env.reset()
    env.unwrapped.state = np.array(init_state, dtype=np.float64)
    obs = np.array(env.unwrapped.state, dtype=np.float32)
    states, actions, rewards = [obs], [], []
    terminated = False
    for t in range(steps):
        with torch.no_grad():
            logits, _ = net(torch.as_tensor(obs, dtype=torch.float64))
        u = uniforms[t]
        if u < alpha:
            a = int(u >= alpha / 2.0)
        else:
            a = int(torch.argmax(logits).item())
        obs, r, terminated, truncated, _ = env.step(a)
        states.append(obs)
        actions.append(a)
        rewards.append(float(r))
        if terminated:
            break
    T = len(actions)
    s = torch.as_tensor(np.array(states), dtype=torch.float64)
    logits, v = net(s)
    with torch.no_grad():
        v_last = 0.0 if terminated else float(v[T])
        target = np.zeros(T)
        acc = v_last
        for t in reversed(range(T)):  # eq. 18 with the bootstrap discounted as in eq. 12
            acc = rewards[t] + gamma * acc
            target[t] = acc
        target_t = torch.as_tensor(target)
        adv = target_t - v[:T]
    logp = torch.log_softmax(logits[:T], dim=-1)
    pi = torch.exp(logp)
    ent = -(pi * logp).sum(-1)
    a_t = torch.as_tensor(actions)
    loss_p = -(logp[torch.arange(T), a_t] * adv).sum() - beta * ent.sum()  # eq. 16
    loss_v = ((target_t - v[:T]) ** 2).sum()  # eq. 17
    loss = loss_p + lam * loss_v  # eq. 15
    net.zero_grad()
    loss.backward()
    return net.flat_grad(), float(sum(rewards))


def reference_train(cfg: PgcA3cConfig, *, seed: int = 0, max_seconds: float = math.inf) -> dict:
    """Single-trial PGC-A3C, one agent at a time (no batching); for timing only."""
    rng = np.random.default_rng(seed)
    mech = cfg.make_mechanism()
    theta = init_theta(rng)
    env = gym.make("CartPole-v1", max_episode_steps=cfg.episode_steps)
    net = A3CNet()
    buf, n, steps, scores = [], 0, 0, []
    t0 = time.perf_counter()
    while n < cfg.max_submissions and time.perf_counter() - t0 < max_seconds:
        alpha = max(0.0, cfg.alpha_start - n / cfg.alpha_decay)
        g, score = run_episode(
            env,
            net,
            theta,
            rng.choice(cfg.gravities),
            initial_states(rng.random(4)),
            rng.random(cfg.episode_steps),
            alpha,
            steps=cfg.episode_steps,
            gamma=cfg.gamma,
            lam=cfg.lam,
            beta=cfg.beta,
        )
        if cfg.mechanism == "none":
            g = g / max(1.0, np.abs(g).sum() / (cfg.effective_clip / 2.0))
        buf.append(mech.privatize(g[None, :], rng)[0])
        steps += int(score)
        scores.append(score)
        n += 1
        if len(buf) >= cfg.effective_buffer_size:
            theta = theta - cfg.eta * np.mean(buf, axis=0)  # eq. 22
            buf = []
    return {
        "seconds": time.perf_counter() - t0,
        "submissions": n,
        "env_steps": steps,
        "scores": np.array(scores),
        "theta": theta.reshape(DIM),
    }


def bucket_length(lengths: np.ndarray) -> np.ndarray:
    """Padded length 2^ceil(log2 T) (at least 16) of the bucket an episode of length T goes to."""
    b = np.maximum(4, np.ceil(np.log2(np.maximum(np.asarray(lengths), 1))).astype(np.int64))
    return np.left_shift(1, b)


def loss_gradients_numpy(
    theta: np.ndarray,
    obs: np.ndarray,
    actions: np.ndarray,
    rewards: np.ndarray,
    lengths: np.ndarray,
    bootstrap: np.ndarray,
    *,
    gamma: float | np.ndarray = 0.99,
    lam: float | np.ndarray = 0.5,
    beta: float | np.ndarray = 0.01,
) -> np.ndarray:
    """``ldp_audit.training.pgc_a3c.gradients.loss_gradients`` in batched NumPy
    (``pgc_a3c_gym.model.loss_gradients`` with two actions, the formulation the Gymnasium
    trainer uses), the reference the compiled kernel is checked against (tests/test_pgc_kernels.py,
    ``bench_pgc.py``). Inputs as ``loss_gradients`` takes them (valid, not checked here).

    Rows are grouped by ``bucket_length`` (and by gamma) and each group padded to exactly that
    length, so a row's result never depends on the other rows or on how far the inputs were
    padded.
    """
    from ldp_audit.training.pgc_a3c.model import DIM, HIDDEN, N_ACTIONS, OBS_DIM, check_params
    from ldp_audit.training.pgc_a3c_gym.model import Network, loss_gradients

    theta = check_params(theta, DIM)
    m, big_l = np.shape(actions)
    lengths = np.asarray(lengths, dtype=np.int64)
    boot = np.asarray(bootstrap, dtype=bool)
    gam, lam_b, beta_b = (
        np.broadcast_to(np.asarray(x, dtype=np.float64), (m,)) for x in (gamma, lam, beta)
    )
    obs = np.asarray(obs, dtype=np.float64)
    actions, rewards = np.asarray(actions), np.asarray(rewards, dtype=np.float64)
    out = np.empty((m, DIM))
    blen = bucket_length(lengths)
    for lb in np.unique(blen).tolist():
        for g_val in np.unique(gam[blen == lb]).tolist():
            sel = np.flatnonzero((blen == lb) & (gam == g_val))
            o = np.zeros((sel.size, lb + 1, OBS_DIM))
            a = np.zeros((sel.size, lb), dtype=np.int64)
            r = np.zeros((sel.size, lb))
            k = min(lb, big_l)
            o[:, : k + 1] = obs[sel, : k + 1]
            a[:, :k] = actions[sel, :k]
            r[:, :k] = rewards[sel, :k]
            out[sel] = loss_gradients(
                Network(OBS_DIM, N_ACTIONS, HIDDEN), theta[sel], o, a, r, lengths[sel], boot[sel],
                gamma=g_val, lam=lam_b[sel], beta=beta_b[sel],
            )  # fmt: skip
    return out
