"""CartPole with a private gravity per agent, batched (Ono & Takahashi 2020, section 4).

A thin wrapper around Gymnasium's own vectorised physics (``CartPoleVectorEnv``): we do not write
the equations of motion again. What the wrapper adds for PGC-A3C:

- a private gravity psi_n per row (the task of the paper: psi_n uniform in {9.7, 9.8, 9.9});
- 200-step episodes (``episode_steps``): an episode ends when the pole falls (|angle| > 12 deg or
  |x| > 2.4, Gymnasium's ``terminated``) or after ``episode_steps`` steps (``truncated``);
- no hidden auto-reset and no hidden random state: the caller resets the rows it chooses, with the
  initial states it chooses (drawn from its own seeded ``numpy.random.Generator``), and stepping a
  row whose episode ended without resetting it raises;
- a readable and settable ``state`` (N, 4) float64 (x, x_dot, angle, angle_dot), so tests can put
  Gymnasium's single-environment CartPole and this wrapper in the same state and compare them step
  for step;
- ``select(rows)`` keeps a subset of rows (the trainer drops the rows of finished trials).

Observations are what Gymnasium gives an agent: the float64 state rounded to float32.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv
from gymnasium.spaces import MultiDiscrete

from ldp_audit.errors import InvalidParameterError
from ldp_audit.validation import check_int, check_rng

__all__ = ["PAPER_GRAVITIES", "INIT_LOW", "INIT_HIGH", "PrivateGravityCartPole", "initial_states"]

#: psi_n in {9.7, 9.8, 9.9}, each equally likely (section 4, "Evaluation Task").
PAPER_GRAVITIES: tuple[float, ...] = (9.7, 9.8, 9.9)
#: Gymnasium's reset distribution: every state component uniform in [-0.05, 0.05].
INIT_LOW, INIT_HIGH = -0.05, 0.05


def initial_states(uniforms: np.ndarray) -> np.ndarray:
    """Map uniforms in [0, 1) of shape (n, 4) to Gymnasium's initial-state distribution."""
    return INIT_LOW + (INIT_HIGH - INIT_LOW) * np.asarray(uniforms, dtype=np.float64)


def _check_gravity(gravity: Any, n: int | None = None) -> np.ndarray:
    g = np.array(gravity, dtype=np.float64, copy=True).reshape(-1)
    if n is not None and g.shape[0] != n:
        raise InvalidParameterError(
            f"gravity must have {n} entries (one per row), got {g.shape[0]}"
        )
    if g.size == 0 or not np.all(np.isfinite(g)) or np.any(g <= 0):
        raise InvalidParameterError(f"gravity must be finite and > 0 for every row, got {g!r}")
    return g


class _CheckedActions(MultiDiscrete):
    """Gymnasium's ``MultiDiscrete([2] * N)`` action space whose ``contains`` (asserted by
    ``CartPoleVectorEnv.step`` at every step) trusts the wrapper: ``PrivateGravityCartPole.step``
    has already checked shape and values, and the trainer's actions are 0/1 by construction.
    Skipping the second check saves a quarter of the per-step cost of the physics call."""

    def contains(self, x: Any) -> bool:
        return True


class PrivateGravityCartPole:
    """N CartPoles stepped together, row i with its own gravity, no auto-reset.

    Args:
        gravity: (N,) gravity per row (the agent's private psi_n).
        episode_steps: an episode is truncated after this many steps (200 in the paper).

    Example:
        >>> env = PrivateGravityCartPole(np.array([9.7, 9.9]))
        >>> obs = env.reset(rng=np.random.default_rng(0))
        >>> obs, reward, terminated, truncated = env.step(np.array([0, 1]))
    """

    def __init__(self, gravity: Any, *, episode_steps: int = 200) -> None:
        g = _check_gravity(gravity)
        self.episode_steps = check_int(episode_steps, "episode_steps", minimum=1)
        self._env = CartPoleVectorEnv(num_envs=g.shape[0], max_episode_steps=self.episode_steps)
        self._env.action_space = _CheckedActions(np.full(g.shape[0], 2))
        # Gymnasium's vectorised physics broadcasts a (N,) gravity over the rows.
        self._env.gravity = g
        self._env.state = np.zeros((4, g.shape[0]))
        self._env.steps = np.zeros(g.shape[0], dtype=np.int32)
        self._env.prev_done = np.zeros(g.shape[0], dtype=np.bool_)
        self._ended = np.ones(g.shape[0], dtype=np.bool_)  # nothing may step before a reset

    # ----------------------------------------------------------------------------- properties
    @property
    def num_envs(self) -> int:
        """Number of rows N."""
        return int(self._env.num_envs)

    @property
    def gravity(self) -> np.ndarray:
        """(N,) gravity per row (a copy)."""
        return np.array(self._env.gravity, dtype=np.float64, copy=True)

    @property
    def state(self) -> np.ndarray:
        """(N, 4) float64 physical state (x, x_dot, angle, angle_dot), a copy."""
        return np.array(self._env.state.T, dtype=np.float64, copy=True)

    @state.setter
    def state(self, value: Any) -> None:
        s = np.asarray(value, dtype=np.float64)
        if s.shape != (self.num_envs, 4) or not np.all(np.isfinite(s)):
            raise InvalidParameterError(
                f"state must be a finite array of shape ({self.num_envs}, 4), got shape {s.shape}"
            )
        self._env.state = np.ascontiguousarray(s.T)
        self._ended[:] = False

    @property
    def steps(self) -> np.ndarray:
        """(N,) steps taken in the current episode of each row (a copy)."""
        return self._env.steps.astype(np.int64)

    @property
    def observation(self) -> np.ndarray:
        """(N, 4) what the agents observe: the state rounded to float32, as Gymnasium gives it."""
        return self._env.state.T.astype(np.float32)

    # -------------------------------------------------------------------------------- methods
    def reset(self, *, rng: np.random.Generator) -> np.ndarray:
        """Reset every row to a fresh initial state drawn from ``rng``; returns observations."""
        rng = check_rng(rng)
        self.reset_rows(np.arange(self.num_envs), initial_states(rng.random((self.num_envs, 4))))
        return self.observation

    def reset_rows(self, rows: Any, states: Any, gravity: Any = None) -> None:
        """Start a new episode in ``rows`` from ``states`` (len(rows), 4), maybe a new gravity."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        s = np.asarray(states, dtype=np.float64)
        if s.shape != (rows.shape[0], 4):
            raise InvalidParameterError(
                f"states must have shape ({rows.shape[0]}, 4), got shape {s.shape}"
            )
        if rows.size and (rows.min() < 0 or rows.max() >= self.num_envs):
            raise InvalidParameterError(f"rows must be in [0, {self.num_envs}), got {rows!r}")
        g = self._env.gravity[rows] if gravity is None else _check_gravity(gravity, rows.shape[0])
        self._reset_rows_unchecked(rows, s, g)

    def _reset_rows_unchecked(
        self, rows: np.ndarray, states: np.ndarray, gravity: np.ndarray
    ) -> None:
        """``reset_rows`` for callers that validated their inputs (the trainer's hot loop)."""
        self._env.state[:, rows] = states.T
        self._env.steps[rows] = 0
        self._env.gravity[rows] = gravity
        self._ended[rows] = False

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Step every row with ``actions`` (N,) in {0, 1}.

        Returns:
            (observation (N, 4) float32, reward (N,) float32, terminated (N,), truncated (N,)).
            Rows that terminated or were truncated must be reset (``reset_rows``) before the next
            step; the wrapper never resets a row by itself.
        """
        if self._ended.any():
            bad = np.flatnonzero(self._ended)[:5]
            raise InvalidParameterError(
                f"rows {bad.tolist()} ended (or were never reset); call reset_rows before step"
            )
        a = np.asarray(actions)
        if a.shape != (self.num_envs,):
            raise InvalidParameterError(
                f"actions must have shape ({self.num_envs},), got shape {a.shape}"
            )
        if a.dtype.kind not in "iub" or (a.size and (a.min() < 0 or a.max() > 1)):
            raise InvalidParameterError(f"actions must be integers in {{0, 1}}, got {a!r}")
        return self._step_unchecked(a.astype(np.int64, copy=False))

    def _step_unchecked(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``step`` for the trainer's hot loop: ``actions`` is an (N,) int64 array of 0/1 and no
        row has ended (the trainer restarts every ended row before the next step)."""
        obs, reward, terminated, truncated, _ = self._env.step(actions)
        # Gymnasium auto-resets rows one step after they end; we reset explicitly instead.
        self._env.prev_done[:] = False
        self._ended = terminated | truncated
        return obs, reward, terminated, truncated

    def select(self, rows: Any) -> None:
        """Keep only ``rows`` (in that order); the others are dropped."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        env = self._env
        env.state = np.ascontiguousarray(env.state[:, rows])
        env.steps = env.steps[rows].copy()
        env.prev_done = env.prev_done[rows].copy()
        env.gravity = np.asarray(env.gravity)[rows].copy()
        env.num_envs = int(rows.shape[0])
        env.action_space = _CheckedActions(np.full(env.num_envs, 2))
        self._ended = self._ended[rows].copy()
