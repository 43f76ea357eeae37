"""FedRL GridWorld: generated maps, dynamics, batched == Gymnasium, bad input."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from ldp_audit.errors import InvalidParameterError
from ldp_audit.training.fedrl.gridworld import (
    T_MAX,
    GridWorldEnv,
    VectorGridWorld,
    generate_maps,
    step_reward,
    validate_starts,
)


@pytest.fixture(scope="module")
def maps8():
    return generate_maps(8, 8000, seed=3)


def test_paper_split_and_valid_starts(maps8):
    assert len(maps8) == 8000
    assert [len(maps8.split[k]) for k in ("train", "valid", "test")] == [6400, 800, 800]
    allidx = np.concatenate([maps8.split[k] for k in ("train", "valid", "test")])
    assert np.array_equal(np.sort(allidx), np.arange(8000))
    i = np.arange(8000)
    assert not maps8.obstacles[i, maps8.alpha_start[:, 0], maps8.alpha_start[:, 1]].any()
    assert not maps8.obstacles[i, maps8.beta_start[:, 0], maps8.beta_start[:, 1]].any()
    assert (maps8.shortest >= 2).all()
    assert maps8.t_max == T_MAX[8] == 38
    # BFS lengths agree with scipy's shortest paths on the grid graph, on a sample
    for j in range(0, 8000, 397):
        d = _grid_shortest(maps8.obstacles[j], maps8.alpha_start[j])
        assert d[tuple(maps8.beta_start[j])] == maps8.shortest[j]


def _grid_shortest(obstacles, start):
    """Shortest 4-neighbour path lengths from ``start`` (scipy.sparse.csgraph; inf: unreachable),
    an implementation independent of the maps' own BFS."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import shortest_path

    n = obstacles.shape[0]
    free, idx = obstacles == 0, np.arange(n * n).reshape(n, n)
    src, dst = [], []
    for dr, dc in ((0, 1), (1, 0)):
        both = free[: n - dr, : n - dc] & free[dr:, dc:]
        src.append(idx[: n - dr, : n - dc][both])
        dst.append(idx[dr:, dc:][both])
    src, dst = np.concatenate(src), np.concatenate(dst)
    g = coo_matrix((np.ones(src.size), (src, dst)), shape=(n * n, n * n))
    d = shortest_path(g, directed=False, unweighted=True, indices=int(idx[tuple(start)]))
    return d.reshape(n, n)


def test_maps_are_seeded():
    a, b, c = (generate_maps(16, 50, seed=s) for s in (7, 7, 8))
    assert np.array_equal(a.obstacles, b.obstacles) and np.array_equal(a.beta_start, b.beta_start)
    assert not np.array_equal(a.obstacles, c.obstacles)


def test_reward_terms():
    # two free moves at distance 4 on an 8x8 map: -1 -1 + 8/4
    assert step_reward(8, False, False, 4) == pytest.approx(0.0)
    # alpha bumps, beta moves, distance 2: -10 - 1 + 4
    assert step_reward(8, True, False, 2) == pytest.approx(-7.0)
    # meeting (distance 1): -2 + 50 + 8
    assert step_reward(8, False, False, 1) == pytest.approx(56.0)
    assert step_reward(16, False, False, 0) == pytest.approx(64.0)


def test_dynamics_by_hand():
    obs = np.zeros((1, 8, 8), dtype=np.uint8)
    obs[0, 0, 2] = 1
    maps = generate_maps(8, 1, seed=0)
    object.__setattr__(maps, "obstacles", obs)
    object.__setattr__(maps, "alpha_start", np.array([[0, 1]]))
    object.__setattr__(maps, "beta_start", np.array([[0, 5]]))
    env = VectorGridWorld(maps, [0], hist_len=2)
    oa, ob = env.reset()
    assert oa.shape == (1, 2, 3, 3) and ob.shape == (1, 2, 5, 5)
    # alpha's window: row above is outside (0), obstacle east of alpha (0)
    assert oa[0, -1, 0].tolist() == [0, 0, 0] and oa[0, -1, 1].tolist() == [1, 1, 0]
    # alpha east -> bump (stays); beta west -> moves to (0, 4); distance 3
    r, done, met, _ = env.step([4 * 0 + 2])
    assert env.pos[0].tolist() == [[0, 1], [0, 4]]
    assert r[0] == pytest.approx(-10 - 1 + 8 / 3) and not done[0] and not met[0]
    # alpha south (1,1), beta west (0,3): distance 3; then beta south -> (1,3), alpha east (1,2)
    env.step([4 * 1 + 2])
    r, done, met, _ = env.step([4 * 0 + 1])
    assert env.pos[0].tolist() == [[1, 2], [1, 3]] and met[0] and done[0]
    assert r[0] == pytest.approx(-2 + 50 + 8)
    # a finished slot does not move any more
    r, done, met, active = env.step([0])
    assert not active[0] and r[0] == 0 and not done[0]


def test_truncation_at_t_max():
    maps = generate_maps(8, 4, seed=1)
    obs = np.zeros((4, 8, 8), dtype=np.uint8)
    object.__setattr__(maps, "obstacles", obs)
    object.__setattr__(maps, "alpha_start", np.tile([[0, 0]], (4, 1)))
    object.__setattr__(maps, "beta_start", np.tile([[7, 7]], (4, 1)))
    env = VectorGridWorld(maps, np.arange(4), hist_len=1)
    env.reset()
    for t in range(38):
        _, done, met, _ = env.step(np.full(4, 4 * 3 + 3))  # both north: never meet
        assert done.all() == (t == 37)
    assert not met.any()


def test_vector_equals_gymnasium(maps8):
    rng = np.random.default_rng(0)
    idx = maps8.split["test"][:20]
    vec = VectorGridWorld(maps8, idx, hist_len=3)
    va, vb = vec.reset()
    envs = [gym.make("ldp_audit/FedRLGridWorld-v0", maps=maps8, hist_len=3) for _ in idx]
    for k, (e, i) in enumerate(zip(envs, idx, strict=True)):
        o0, info = e.reset(options={"map_index": int(i)})
        assert np.array_equal(o0["alpha"], va[k]) and np.array_equal(o0["beta"], vb[k])
        assert info["shortest"] == maps8.shortest[i]
    finished = np.zeros(len(idx), dtype=bool)
    for _ in range(40):
        a = rng.integers(16, size=len(idx))
        r, done, _met, active = vec.step(a)
        for k, e in enumerate(envs):
            if finished[k]:
                assert not active[k]
                continue
            o, rr, term, trunc, _ = e.step(int(a[k]))
            assert rr == pytest.approx(r[k])
            assert np.array_equal(o["alpha"], vec.hist_a[k])
            assert np.array_equal(o["beta"], vec.hist_b[k])
            assert (term or trunc) == done[k]
            finished[k] = term or trunc
    assert isinstance(envs[0].unwrapped, GridWorldEnv)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"size": 10}, "size must be one of 8, 16, 32.*got 10"),
        ({"size": 8, "density": 1.0}, r"density must be finite, >= 0 and < 1, got 1.0"),
        ({"size": 8, "density": -0.1}, r"density must be finite, >= 0 and < 1, got -0.1"),
        ({"size": 8, "density": True}, "density must be a real number"),
        ({"size": "8"}, "size must be an integer >= 3, got '8'"),
        ({"size": 8, "n_maps": 0}, "n_maps must be an integer >= 1, got 0"),
    ],
)
def test_bad_generation_input(kwargs, match):
    with pytest.raises(InvalidParameterError, match=match):
        generate_maps(**kwargs)


def test_other_size_needs_t_max():
    m = generate_maps(10, 5, seed=0, t_max=40)
    assert m.t_max == 40 and m.obstacles.shape == (5, 10, 10)


def test_bad_starts_and_history():
    obs = np.zeros((5, 5), dtype=np.uint8)
    obs[:, 2] = 1  # a wall cuts the map in two
    with pytest.raises(InvalidParameterError, match="unreachable map"):
        validate_starts(obs, [0, 0], [0, 4])
    with pytest.raises(InvalidParameterError, match=r"alpha start \[0, 2\] is on an obstacle"):
        validate_starts(obs, [0, 2], [0, 4])
    assert validate_starts(obs, [0, 0], [4, 1]) == 5
    maps = generate_maps(8, 10, seed=0)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(InvalidParameterError, match="hist_len must be an integer >= 1"):
            VectorGridWorld(maps, [0], hist_len=bad)
