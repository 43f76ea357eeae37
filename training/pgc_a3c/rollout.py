"""Alpha-greedy episodes on CartPole with a private gravity: :func:`rollout`, and
:func:`episode_gradients`, the attacker's simulator (the MDP is public, only the gravity is
private, so anyone holding a broadcast theta can simulate what an agent would have submitted).

Acting (section 4): with probability alpha a uniformly random action, else argmax pi (ties ->
action 0). One uniform u per agent-step decides both: explore iff u < alpha, and then action = 1
iff u >= alpha/2. ``acting="sample"`` (an ablation) draws the non-exploring action from pi with
the same uniform. The acting kernel is the engine's own.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ldp_audit.training.cartpole import PrivateGravityCartPole, initial_states
from ldp_audit.training.pgc_a3c._kernels import act_and_record
from ldp_audit.training.pgc_a3c.config import ACTING
from ldp_audit.training.pgc_a3c.gradients import loss_gradients
from ldp_audit.training.pgc_a3c.model import DIM, OBS_DIM, check_params
from ldp_audit.validation import check_choice, check_int, check_rng

__all__ = ["rollout", "episode_gradients"]


def rollout(
    theta: np.ndarray,
    gravity: np.ndarray,
    init_states: np.ndarray,
    uniforms: np.ndarray,
    alpha: float | np.ndarray,
    steps: int = 200,
    *,
    acting: str = "argmax",
) -> dict[str, np.ndarray]:
    """Play one alpha-greedy episode per row, all rows in lock-step.

    Args:
        theta: (B, 112) parameters per row.
        gravity: (B,) gravity per row.
        init_states: (B, 4) initial physical states.
        uniforms: (steps, B) in [0, 1): explore iff u < alpha, then action = 1 iff u >= alpha/2.
        alpha: exploration probability, scalar or (B,).
        steps: episode cap.
        acting: "argmax" or "sample" (see ``PgcA3cConfig.acting``).

    Returns:
        dict with obs (B, steps+1, 4), actions (B, steps), rewards (B, steps), lengths (B,),
        bootstrap (B,) (True where cut at ``steps``), score (B,).
    """
    theta = check_params(theta, DIM)
    b = theta.shape[0]
    check_choice(acting, "acting", ACTING)
    sample = np.full(b, acting == "sample")
    env = PrivateGravityCartPole(gravity, episode_steps=steps)
    env.reset_rows(np.arange(b), init_states)
    alpha_b = np.ascontiguousarray(np.broadcast_to(np.asarray(alpha, dtype=np.float64), (b,)))
    uniforms = np.asarray(uniforms, dtype=np.float64)
    obs = np.zeros((b, steps + 1, OBS_DIM))
    acts = np.zeros((b, steps), dtype=np.int8)
    rews = np.zeros((b, steps))
    lengths = np.zeros(b, dtype=np.int64)
    boot = np.zeros(b, dtype=bool)
    alive = np.arange(b)
    th = theta
    a = np.empty(b, dtype=np.int64)
    for t in range(steps):
        n = alive.size
        # the engine's own acting kernel (same observation rounding, greedy rule and ties),
        # recording s_t and a_t of each row alive[i] into obs and acts
        act_and_record(
            env._env.state,
            th,
            np.ascontiguousarray(uniforms[t, alive]),
            alpha_b[alive],
            sample[:n],
            np.full(n, t, dtype=np.int64),
            obs,
            acts,
            a[:n],
            alive,
        )
        nxt, r, term, trunc = env.step(a[:n])
        rews[alive, t] = r
        done = term | trunc
        if done.any():
            ended = alive[done]
            obs[ended, t + 1] = nxt[done].astype(np.float64)
            lengths[ended] = t + 1
            boot[ended] = trunc[done] & ~term[done]
            keep = np.flatnonzero(~done)
            alive = alive[keep]
            if alive.size == 0:
                break
            env.select(keep)
            th = np.ascontiguousarray(th[keep])
    return {
        "obs": obs,
        "actions": acts.astype(np.int64),
        "rewards": rews,
        "lengths": lengths,
        "bootstrap": boot,
        "score": rews.sum(axis=1),
    }


def episode_gradients(
    theta: Any,
    gravity: Any,
    rng: np.random.Generator,
    alpha: float | np.ndarray = 0.0,
    steps: int = 200,
    *,
    gamma: float = 0.99,
    lam: float = 0.5,
    beta: float = 0.01,
    acting: str = "argmax",
) -> tuple[np.ndarray, np.ndarray]:
    """The attacker's simulator: one episode per row, returns raw gradients and scores.

    The MDP is public; only the gravity is private, so anyone holding a broadcast theta can
    simulate what an agent with a candidate gravity would have submitted (before noise).

    Args:
        theta: (B, 112) (or (112,)) parameters.
        gravity: (B,) candidate gravity per row (a scalar is broadcast).
        rng: generator for the initial states and the alpha-greedy uniforms.
        alpha: exploration probability (scalar or (B,)).
        steps: episode cap (200 in the paper).
        gamma, lam, beta: loss hyper-parameters (paper defaults).
        acting: "argmax" (the paper) or "sample" (``PgcA3cConfig.acting``).

    Returns:
        (grads (B, 112), scores (B,)).
    """
    rng = check_rng(rng)
    t = check_params(theta, DIM)
    g = np.broadcast_to(np.asarray(gravity, dtype=np.float64).reshape(-1), (t.shape[0],))
    steps = check_int(steps, "steps", minimum=1)
    init = initial_states(rng.random((t.shape[0], OBS_DIM)))
    uni = rng.random((steps, t.shape[0]))
    ro = rollout(t, g.copy(), init, uni, alpha, steps, acting=acting)
    big_l = int(ro["lengths"].max())
    grads = loss_gradients(
        t,
        ro["obs"][:, : big_l + 1],
        ro["actions"][:, :big_l],
        ro["rewards"][:, :big_l],
        ro["lengths"],
        ro["bootstrap"],
        gamma=gamma,
        lam=lam,
        beta=beta,
    )
    return grads, ro["score"]
