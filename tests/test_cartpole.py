"""The batched private-gravity CartPole equals Gymnasium's single CartPole step for step."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from ldp_audit.errors import InvalidParameterError
from ldp_audit.training.cartpole import PrivateGravityCartPole, initial_states


def _single_env_trajectory(gravity, state, actions, steps):
    env = gym.make("CartPole-v1", max_episode_steps=steps)
    env.unwrapped.gravity = float(gravity)
    env.reset(seed=0)
    env.unwrapped.state = np.array(state, dtype=np.float64)
    out = []
    for a in actions:
        obs, r, term, trunc, _ = env.step(int(a))
        out.append((obs, r, term, trunc, np.array(env.unwrapped.state, dtype=np.float64)))
        if term or trunc:
            break
    env.close()
    return out


def test_step_for_step_equal_to_gymnasium_cartpole():
    rng = np.random.default_rng(11)
    n, steps = 6, 60
    gravity = np.array([9.7, 9.8, 9.9, 9.7, 9.8, 9.9])
    states = initial_states(rng.random((n, 4)))
    states[0] = [0.0, 0.0, 0.2, 1.0]  # falls within a few steps: exercises `terminated`
    actions = rng.integers(0, 2, size=(steps, n))
    refs = [_single_env_trajectory(gravity[i], states[i], actions[:, i], steps) for i in range(n)]

    env = PrivateGravityCartPole(gravity, episode_steps=steps)
    env.reset_rows(np.arange(n), states)
    alive = np.arange(n)
    compared = 0
    for t in range(steps):
        obs, r, term, trunc = env.step(actions[t, alive])
        st = env.state
        for j, i in enumerate(alive):
            r_obs, r_r, r_term, r_trunc, r_state = refs[i][t]
            np.testing.assert_array_equal(obs[j], r_obs)  # same float32 observation
            # same float64 physics up to libm rounding of cos/sin
            np.testing.assert_allclose(st[j], r_state, rtol=0, atol=1e-12)
            assert (bool(term[j]), bool(trunc[j]), float(r[j])) == (r_term, r_trunc, r_r)
            compared += 1
        keep = np.flatnonzero(~(term | trunc))
        if keep.size < alive.size:
            alive = alive[keep]
            env.select(keep)
        if alive.size == 0:
            break
    assert len(refs[0]) <= 5  # row 0 terminated early ...
    assert compared >= 60  # ... and the others were compared for many steps


def test_truncation_at_episode_steps_and_no_silent_autoreset():
    env = PrivateGravityCartPole([9.8, 9.8], episode_steps=3)
    env.reset_rows([0, 1], np.zeros((2, 4)))
    for _ in range(2):
        _, _, term, trunc = env.step(np.array([0, 1]))
        assert not trunc.any() and not term.any()
    _, _, term, trunc = env.step(np.array([0, 1]))
    assert trunc.all() and not term.any()
    with pytest.raises(InvalidParameterError, match="reset_rows"):
        env.step(np.array([0, 1]))
    env.reset_rows([0, 1], np.zeros((2, 4)), gravity=[9.7, 9.9])
    np.testing.assert_array_equal(env.gravity, [9.7, 9.9])
    np.testing.assert_array_equal(env.steps, [0, 0])


def test_state_roundtrip_seeded_reset_and_validation():
    env = PrivateGravityCartPole(np.full(3, 9.8))
    s = np.arange(12, dtype=np.float64).reshape(3, 4) / 100
    env.state = s
    np.testing.assert_array_equal(env.state, s)
    a = env.reset(rng=np.random.default_rng(5))
    b = PrivateGravityCartPole(np.full(3, 9.8)).reset(rng=np.random.default_rng(5))
    np.testing.assert_array_equal(a, b)
    assert np.all(np.abs(a) <= 0.05)
    with pytest.raises(InvalidParameterError, match="gravity"):
        PrivateGravityCartPole([9.8, -1.0])
    with pytest.raises(InvalidParameterError, match="episode_steps"):
        PrivateGravityCartPole([9.8], episode_steps=0)
    with pytest.raises(InvalidParameterError, match="shape"):
        env.state = np.zeros((2, 4))
    with pytest.raises(InvalidParameterError, match="actions"):
        env.step(np.zeros(2, dtype=np.int64))
    with pytest.raises(InvalidParameterError, match="rng"):
        env.reset(rng=5)


def test_select_keeps_rows_in_order():
    env = PrivateGravityCartPole([9.7, 9.8, 9.9])
    env.reset_rows([0, 1, 2], np.array([[0.01, 0, 0, 0], [0.02, 0, 0, 0], [0.03, 0, 0, 0]]))
    env.select([2, 0])
    assert env.num_envs == 2
    np.testing.assert_array_equal(env.gravity, [9.9, 9.7])
    np.testing.assert_array_equal(env.state[:, 0], [0.03, 0.01])
    obs, *_ = env.step(np.array([1, 0]))
    assert obs.shape == (2, 4)
