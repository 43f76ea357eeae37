"""The compiled inner loops of the PGC-A3C engine (training/pgc_a3c/_kernels.py) vs NumPy."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from ldp_audit.errors import InvalidParameterError
from ldp_audit.training.pgc_a3c._kernels import act_and_record, aggregate
from ldp_audit.training.pgc_a3c.config import PgcA3cConfig
from ldp_audit.training.pgc_a3c.gradients import loss_gradients
from ldp_audit.training.pgc_a3c.grid import train_grid
from ldp_audit.training.pgc_a3c.model import DIM, greedy_actions, init_theta, unpack_theta
from ldp_audit.training.pgc_a3c.rollout import rollout


def _reference():
    """benchmarks/reference_pgc.py: the batched NumPy reference beside the torch one."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "reference_pgc.py"
    spec = importlib.util.spec_from_file_location("reference_pgc", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _episodes(seed: int, b: int, steps: int):
    rng = np.random.default_rng(seed)
    theta = np.stack([init_theta(rng) for _ in range(b)])
    ro = rollout(
        theta,
        rng.choice([9.7, 9.8, 9.9], b),
        rng.uniform(-0.05, 0.05, (b, 4)),
        rng.random((steps, b)),
        rng.uniform(0.0, 1.0, b),
        steps,
    )
    big_l = int(ro["lengths"].max())
    args = (
        theta,
        ro["obs"][:, : big_l + 1],
        ro["actions"][:, :big_l],
        ro["rewards"][:, :big_l],
        ro["lengths"],
        ro["bootstrap"],
    )
    return rng, ro, args


@pytest.mark.parametrize("steps", [200, 15])
def test_kernel_gradient_equals_numpy_formulation(steps):
    rng, ro, args = _episodes(1, 40, steps)
    b = args[0].shape[0]
    per = dict(gamma=rng.uniform(0.9, 1.0, b), lam=rng.uniform(0.1, 1.0, b), beta=0.02)
    g = loss_gradients(*args, **per)
    ref = _reference().loss_gradients_numpy(*args, **per)
    scale = np.abs(ref).max(axis=1, keepdims=True)
    assert np.all(np.abs(g - ref) <= 1e-11 * scale)
    # the two policy rows of the gradient are opposite (two-action softmax)
    np.testing.assert_array_equal(g[:, 64:80], -g[:, 80:96])
    if steps == 15:  # the bootstrap path (episodes cut at the cap) is exercised
        assert ro["bootstrap"].any() and (~ro["bootstrap"]).any()


def test_kernel_gradient_is_batch_independent():
    _, _, args = _episodes(2, 12, 200)
    g = loss_gradients(*args)
    for i in (0, 5, 11):
        one = loss_gradients(*(a[i : i + 1] for a in args))
        np.testing.assert_array_equal(one[0], g[i])  # bit for bit, whatever shares the batch


def _forward_greedy(theta, obs32):
    wc, wp, _ = unpack_theta(theta)
    h = np.maximum(np.einsum("bjk,bk->bj", wc, obs32), 0.0)
    z = np.einsum("baj,bj->ba", wp, h)
    return z, (z[:, 1] > z[:, 0]).astype(np.int64)


def test_act_kernel_greedy_exploration_and_recording():
    rng = np.random.default_rng(3)
    e = 500
    theta = np.stack([init_theta(rng) for _ in range(e)])
    state = rng.normal(0, 0.2, (4, e))
    obs32 = state.T.astype(np.float32).astype(np.float64)
    u = rng.random(e)
    alpha = rng.choice([0.0, 0.3, 1.0], e)
    t = rng.integers(0, 7, e)
    obs_buf = np.full((e, 8, 4), np.nan)
    acts_buf = np.full((e, 7), -1, dtype=np.int8)
    actions = np.empty(e, dtype=np.int64)
    sample = np.zeros(e, dtype=bool)
    act_and_record(state, theta, u, alpha, sample, t, obs_buf, acts_buf, actions, np.arange(e))
    np.testing.assert_array_equal(obs_buf[np.arange(e), t], obs32)  # float32-rounded state
    np.testing.assert_array_equal(acts_buf[np.arange(e), t], actions)
    z, greedy = _forward_greedy(theta, obs32)
    explore = u < alpha
    np.testing.assert_array_equal(actions[explore], (u[explore] >= alpha[explore] / 2))
    clear = ~explore & (np.abs(z[:, 1] - z[:, 0]) > 1e-9)  # not a numerical tie
    assert clear.sum() > 150
    np.testing.assert_array_equal(actions[clear], greedy[clear])
    np.testing.assert_array_equal(greedy_actions(theta, state.T)[clear], greedy[clear])
    # acting="sample": the non-exploring action is drawn from pi with the same uniform
    sampled = np.empty(e, dtype=np.int64)
    act_and_record(state, theta, u, alpha, ~sample, t, obs_buf, acts_buf, sampled, np.arange(e))
    np.testing.assert_array_equal(sampled[explore], actions[explore])
    pi1 = 1.0 / (1.0 + np.exp(-(z[:, 1] - z[:, 0])))
    v = (u - alpha) / np.where(alpha < 1.0, 1.0 - alpha, 1.0)
    far = ~explore & (np.abs(v - pi1) > 1e-9)
    assert far.sum() > 150
    np.testing.assert_array_equal(sampled[far], (v[far] < pi1[far]).astype(np.int64))
    assert (sampled[~explore] != actions[~explore]).any()  # sampling is not the argmax
    # ties (e.g. a dead ReLU layer) go to action 0
    assert greedy_actions(np.zeros((3, DIM)), np.ones((3, 4))).tolist() == [0, 0, 0]
    with pytest.raises(InvalidParameterError, match="obs"):
        greedy_actions(theta[:2], np.ones((3, 4)))


@pytest.mark.parametrize("buffer_size", [1, 3])
def test_aggregate_kernel_equals_report_by_report_loop(buffer_size):
    rng = np.random.default_rng(4)
    g, n = 5, 40
    theta0 = rng.normal(size=(g, DIM))
    eta = rng.uniform(0.1, 1.0, g)
    trial = rng.integers(0, g, n)
    y = rng.normal(size=(n, DIM))
    th, buf = theta0.copy(), np.zeros((g, DIM))
    cnt, ver = np.zeros(g, dtype=np.int64), np.zeros(g, dtype=np.int64)
    zero, none = np.zeros(g, dtype=np.int64), np.zeros((g, 0))  # kind 0: plain SGD (eq. 22)
    aggregate(
        trial, y, th, buf, cnt, ver, eta, np.full(g, buffer_size), zero, none, none, zero.copy()
    )
    ref, rbuf = theta0.copy(), [[] for _ in range(g)]
    for i in range(n):  # the straightforward aggregator, eq. 22
        k = trial[i]
        rbuf[k].append(y[i])
        if len(rbuf[k]) >= buffer_size:
            ref[k] = ref[k] - eta[k] * (np.sum(rbuf[k], axis=0) / len(rbuf[k]))
            rbuf[k] = []
    np.testing.assert_allclose(th, ref, rtol=1e-12, atol=1e-12)
    assert ver.tolist() == [int(np.sum(trial == k)) // buffer_size for k in range(g)]
    assert cnt.tolist() == [int(np.sum(trial == k)) % buffer_size for k in range(g)]


def test_train_grid_workers_give_the_same_results():
    cfgs = [
        PgcA3cConfig(mechanism="laplace", epsilon=1.0, trials=3, max_submissions=80),
        PgcA3cConfig(mechanism="prs", epsilon=10.0, trials=2, max_submissions=60),
        PgcA3cConfig(mechanism="none", trials=2, max_submissions=70, stop_at_target=True),
    ]
    one = train_grid(cfgs, seed=[1, 2, 3])
    two = train_grid(cfgs, seed=[1, 2, 3], workers=2)
    for a, b in zip(one, two, strict=True):
        np.testing.assert_array_equal(a.zeta, b.zeta)
        np.testing.assert_array_equal(a.theta, b.theta)
        np.testing.assert_array_equal(a.submissions, b.submissions)
    assert two[0].env_steps == two[2].env_steps == one[0].env_steps  # the grid's total
    with pytest.raises(InvalidParameterError, match="workers"):
        train_grid(cfgs, workers=0)


def test_train_grid_workers_write_the_run_directories(tmp_path: Path) -> None:
    """workers > 1 with run directories: each part writes its configs' runs at the paths given
    (run_mode "overwrite" replaces the finished runs there), the transcripts those of one
    batch."""
    cfgs = [PgcA3cConfig(mechanism="laplace", epsilon=e, trials=1, max_submissions=20)
            for e in (1.0, 5.0)]  # fmt: skip
    dirs = [tmp_path / "a", tmp_path / "b"]
    one = train_grid(cfgs, seed=[4, 5], transcript=True)
    train_grid(cfgs, seed=[4, 5], run_dirs=dirs, workers=2)
    two = train_grid(cfgs, seed=[4, 5], run_dirs=dirs, workers=2, run_mode="overwrite")
    for a, b, d in zip(one, two, dirs, strict=True):
        np.testing.assert_array_equal(a.transcript["report"], b.transcript["report"])
        assert json.loads((d / "manifest.json").read_text())["status"] == "complete"
