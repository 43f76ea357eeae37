"""The fused PGC-A3C engine (``train_grid(..., engine="fused")``): its CartPole physics is
Gymnasium's step for step, and the whole run is the lock-step engine's bit for bit (zeta, final
theta, transcript, secrets) on small grids that cover every option; its ledger charges every
released report before release; Ctrl-C stops it at a block boundary with a consistent run."""

from __future__ import annotations

import json
import math
import os
import signal
import warnings

import numpy as np
import pytest
from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv

from ldp_audit.errors import InvalidParameterError
from ldp_audit.training.pgc_a3c import _fused_kernel as K
from ldp_audit.training.pgc_a3c.config import PgcA3cConfig
from ldp_audit.training.pgc_a3c.fused import _FUSED_RESERVE
from ldp_audit.training.pgc_a3c.grid import train, train_grid
from ldp_audit.training.pgc_a3c.privacy import PrivacyClaimWarning


# ------------------------------------------------------------------------------------ physics
def test_physics_constants_are_gymnasiums():
    env = CartPoleVectorEnv(num_envs=1)
    assert env.kinematics_integrator == "euler"
    for ours, name in (
        (K._MASSCART, "masscart"),
        (K._MASSPOLE, "masspole"),
        (K._TOTAL_MASS, "total_mass"),
        (K._LENGTH, "length"),
        (K._POLEMASS_LENGTH, "polemass_length"),
        (K._FORCE_MAG, "force_mag"),
        (K._TAU, "tau"),
        (K._THETA_THRESHOLD, "theta_threshold_radians"),
        (K._X_THRESHOLD, "x_threshold"),
        (K._INIT_LOW, "low"),
    ):
        assert ours == getattr(env, name), name
    assert K._INIT_LOW + K._INIT_SPAN == env.high


@pytest.mark.parametrize("spread", [0.05, 1.5])
def test_fused_physics_equals_gymnasium_step_for_step(spread):
    """Same states, gravities and actions -> bit-for-bit the same next states, terminated and
    truncated flags at every step, over 300 steps with rows restarted whenever they end (the
    reference is Gymnasium's own CartPoleVectorEnv; spread 1.5 drives many rows far out)."""
    n, cap = 257, 60
    rng = np.random.default_rng(11 if spread < 1 else 12)
    gravity = rng.choice([9.7, 9.8, 9.9, 3.7], n)
    env = CartPoleVectorEnv(num_envs=n, max_episode_steps=cap)
    env.gravity = gravity.copy()
    state = rng.uniform(-spread, spread, (4, n))
    env.state = state.copy()
    env.steps = np.zeros(n, dtype=np.int32)
    env.prev_done = np.zeros(n, dtype=np.bool_)
    ours = state.copy()
    steps = np.zeros(n, dtype=np.int64)
    ended = 0
    for _ in range(300):
        a = rng.integers(0, 2, n)
        obs, rew, g_term, g_trunc, _ = env.step(a)
        term = np.array([K._cartpole_row(ours, i, int(a[i]), gravity[i]) for i in range(n)])
        steps += 1
        trunc = steps >= cap
        np.testing.assert_array_equal(ours, env.state)  # bit for bit, not approximately
        np.testing.assert_array_equal(obs, ours.T.astype(np.float32))
        np.testing.assert_array_equal(term, g_term)
        np.testing.assert_array_equal(trunc, g_trunc)
        assert np.all(rew == 1.0)
        done = g_term | g_trunc
        ended += int(done.sum())
        fresh = rng.uniform(-spread, spread, (4, int(done.sum())))
        env.state[:, done] = fresh  # restart ended rows in both, identically
        ours[:, done] = fresh
        env.steps[done] = 0
        steps[done] = 0
        env.prev_done[:] = False
    assert ended > n  # episodes ended (terminated and, with cap 60, truncated) and restarted


def test_pairwise_abs_sum_is_numpys():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((500, 112)) * 10.0 ** rng.uniform(-8, 8, (500, 112))
    ref = np.abs(x).sum(axis=1)
    got = np.array([K._pairwise_sum_abs(row, 0, 112) for row in x])
    np.testing.assert_array_equal(got, ref)
    y = x[:3].reshape(-1)
    for n in (1, 7, 8, 9, 15, 100, 127, 128):
        np.testing.assert_array_equal(K._pairwise_sum_abs(y, 5, n), np.abs(y[5 : 5 + n]).sum())


# ------------------------------------------------------------------------------ whole engine
_GRIDS = {
    "laplace": ([PgcA3cConfig(trials=2, max_submissions=150)], 0),
    "uneven": (  # trials end at different times: rows of ended trials kept, then dropped
        [
            PgcA3cConfig(trials=4, max_submissions=40, epsilon=3.0),
            PgcA3cConfig(trials=1, max_submissions=400, acting="sample"),
        ],
        2,
    ),
    "none-prs": (
        [
            PgcA3cConfig(mechanism="none", trials=3, max_submissions=200),
            PgcA3cConfig(mechanism="prs", epsilon=10.0, trials=2, max_submissions=120),
        ],
        1,
    ),
    "ablations": (
        [
            PgcA3cConfig(
                trials=2,
                max_submissions=240,
                rounds=3,
                n_agents=4,
                acting="sample",
                aggregator="adam",
                target="literal-eq18",
                episode_steps=60,
            ),
            PgcA3cConfig(
                trials=2,
                max_submissions=160,
                clip_kind="coordinate",
                agent_gravities=(9.7, 9.9, 1.0),
                stop_at_target=True,
                target_score=20.0,
                window=3,
                aggregator="rmsprop",
                buffer_size=3,
                episode_steps=60,
            ),
            PgcA3cConfig(
                mechanism="none", trials=1, max_submissions=90, episode_steps=60, clip=20.0
            ),
        ],
        5,
    ),
}


def _same(a, b) -> None:
    for x, y in zip(a, b, strict=True):
        for f in ("zeta", "theta", "submissions", "stopped_at_target"):
            np.testing.assert_array_equal(getattr(x, f), getattr(y, f), err_msg=f)
        assert x.env_steps == y.env_steps
        assert x.privacy == y.privacy
        assert x.transcript.keys() == y.transcript.keys()
        for k in x.transcript:
            np.testing.assert_array_equal(x.transcript[k], y.transcript[k], err_msg=k)
        for k in x.secrets:
            np.testing.assert_array_equal(x.secrets[k], y.secrets[k], err_msg=k)


@pytest.mark.parametrize("name", sorted(_GRIDS))
def test_fused_engine_is_the_lockstep_engine_bit_for_bit(name):
    cfgs, seed = _GRIDS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyClaimWarning)
        a = train_grid(cfgs, seed=seed, transcript=True)
        b = train_grid(cfgs, seed=seed, transcript=True, engine="fused")
    assert all(r.submissions.sum() > 0 for r in a)
    _same(a, b)


def test_the_ablations_grid_exercises_the_stop_and_the_canary_gravities():
    """The bit-for-bit comparison above means something only if the ablations grid reaches the
    stop criterion and releases reports of its fixed per-agent (canary) gravities."""
    cfgs, seed = _GRIDS["ablations"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyClaimWarning)
        r = train_grid(cfgs, seed=seed, transcript=True, engine="fused")[1]
    assert r.stopped_at_target.any()
    fixed = np.asarray(cfgs[1].agent_gravities)
    agent, gravity = r.transcript["agent"], r.secrets["gravity"]
    planted = agent < fixed.size
    assert planted.any() and (~planted).any()
    np.testing.assert_array_equal(gravity[planted], fixed[agent[planted]])
    assert set(gravity[~planted].tolist()) <= set(cfgs[1].gravities)


def test_fused_engine_with_workers_is_the_same():
    cfgs = [PgcA3cConfig(trials=2, max_submissions=60, epsilon=e) for e in (1.0, 5.0)]
    a = train_grid(cfgs, seed=3, transcript=True)
    b = train_grid(cfgs, seed=3, transcript=True, engine="fused", workers=2)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x.zeta, y.zeta)
        np.testing.assert_array_equal(x.theta, y.theta)
        np.testing.assert_array_equal(x.transcript["report"], y.transcript["report"])


@pytest.mark.parametrize("engine", ["fast", 1, None])
def test_engine_is_validated_before_any_work(engine, tmp_path):
    with pytest.raises(InvalidParameterError, match="engine must be one of"):
        train(PgcA3cConfig(trials=1, max_submissions=5), engine=engine, run_dir=tmp_path / "r")
    assert not (tmp_path / "r").exists()


def test_nonfinite_gradient_is_refused_like_the_lockstep_engine():
    """Unclipped, eta = 50: theta diverges to NaN; both engines refuse to release it."""
    cfg = PgcA3cConfig(mechanism="none", trials=1, max_submissions=400, clip=1e300, eta=50.0)
    for engine in ("lockstep", "fused"):
        with pytest.raises(InvalidParameterError, match="diverged"):
            train(cfg, seed=0, engine=engine)


# --------------------------------------------------------------------------- ledger, Ctrl-C
def test_fused_ledger_charges_every_released_report(tmp_path):
    from ldp_audit.accountant import Accountant

    cfg = PgcA3cConfig(epsilon=2.0, rounds=2, trials=2, max_submissions=100, n_agents=5)
    res = train(cfg, seed=4, run_dir=tmp_path / "run", engine="fused")
    acc = Accountant(ledger=str(tmp_path / "run" / "ledger.sqlite"))
    charged = set(acc.agents())
    t_, a_ = res.transcript["trial"], res.transcript["agent"]
    released = {f"{t}/{a}" for t, a in zip(t_, a_, strict=True)}
    assert released <= charged
    for aid in sorted(released)[:20]:  # every agent is charged for all its rounds: eps in all
        assert math.isclose(acc.spent(aid), 2.0, rel_tol=1e-12)
    # the extra charges (started or reserved agents that never submitted) are bounded
    extra = len(charged - released)
    assert extra <= cfg.trials * (_FUSED_RESERVE + 1) * cfg.n_agents
    acc.close()


def test_ctrl_c_stops_the_fused_engine_with_a_consistent_run(tmp_path):
    """A SIGINT during training: the run is written with status interrupted, the transcript
    holds every report released before the stop, each of them charged, and the engine stops
    well before its 20,000 submissions."""
    from ldp_audit.accountant import Accountant

    class Sink:
        n = 0

        def update(self, k: int) -> None:
            self.n += k
            if 0 < self.n < 10_000 and k:
                os.kill(os.getpid(), signal.SIGINT)
                self.n = 10_000  # once

    run = tmp_path / "run"
    cfg = PgcA3cConfig(trials=2, max_submissions=10_000)
    with pytest.raises(KeyboardInterrupt):
        train_grid([cfg], seed=0, run_dirs=[run], engine="fused", _sink=Sink())
    assert json.loads((run / "config.json").read_text())["status"] == "interrupted"
    with np.load(run / "transcript.npz") as z:
        released = {f"{t}/{a}" for t, a in zip(z["trial"], z["agent"], strict=True)}
        n_released = z["trial"].size
    assert 0 < n_released < 20_000
    acc = Accountant(ledger=str(run / "ledger.sqlite"))
    assert released <= set(acc.agents())
    acc.close()


def test_laplace_clip_row_is_the_mechanisms_clip_also_on_overflow():
    """Rows as ``ldp_audit.mechanisms._clip_l1`` clips them, in a batch without and with an
    overflowing row (which sends every row of the batch through the rescaling path)."""
    from ldp_audit.mechanisms.base import clip_l1
    from ldp_audit.mechanisms.laplace import laplace_kernels

    lap = laplace_kernels()

    rng = np.random.default_rng(8)
    x = rng.standard_normal((6, 112)) * np.array([1e-4, 1e-3, 1.0, 50.0, 0.0, 1.0])[:, None]
    x[5, :3] = 1e308  # its L1 norm overflows
    for batch in (x[:5], x):
        with np.errstate(over="ignore"):
            ref = clip_l1(batch, 0.005)
            slow = not np.isfinite(np.abs(batch).sum(axis=1)).all()
        out = np.empty(112)
        for i, row in enumerate(batch):
            lap.clip_row(row, lap.l1_norm(row, 0, 112), 0.005, slow, out)
            np.testing.assert_array_equal(out, ref[i])


# ------------------------------------------------------------- one implementation (issue 25)
def test_engine_calls_the_mechanisms_own_kernels():
    """The fused engine's Laplace and PRS are the mechanisms' compiled kernels (the same
    objects), and no copy of them is left in the engine's module."""
    import inspect

    from ldp_audit.mechanisms.laplace import laplace_kernels
    from ldp_audit.mechanisms.prs import prs_kernels

    lap, prs = laplace_kernels(), prs_kernels()
    assert lap is laplace_kernels() and prs is prs_kernels()  # compiled once, the same after
    assert K._laplace_row is lap.row
    assert K._pairwise_sum_abs is lap.l1_norm
    assert K._prs_row is prs.row
    src = inspect.getsource(K)
    for name in ("_laplace_row", "_pairwise_sum_abs", "_prs_row"):
        assert f"def {name}(" not in src


def test_laplace_kernel_report_is_the_mechanisms_report():
    """``laplace_kernels().row`` with the mechanism's own noise draws gives
    ``Laplace.privatize``'s reports bit for bit, also in a batch with an overflowing row."""
    from ldp_audit.mechanisms.laplace import Laplace, laplace_kernels

    lap = laplace_kernels()
    mech = Laplace(epsilon=2.0, clip=0.01)
    rng = np.random.default_rng(9)
    x = rng.standard_normal((5, 112)) * np.array([1e-4, 1e-3, 1.0, 0.0, 1.0])[:, None]
    x[4, :3] = 1e308
    for batch in (x[:4], x):
        with np.errstate(over="ignore"):
            ref = mech.privatize(batch, np.random.default_rng(3))
            slow = not np.isfinite(np.abs(batch).sum(axis=1)).all()
        z = np.random.default_rng(3).laplace(0.0, mech.scale, size=batch.shape)
        out = np.empty(112)
        for i, row in enumerate(batch):
            lap.row(row, lap.l1_norm(row, 0, 112), mech.clip / 2.0, slow, z[i], out)
            np.testing.assert_array_equal(out, ref[i])


def test_prs_row_kernel_is_the_mechanisms_report():
    """``prs_kernels().row`` on a report's uniforms gives ``ProjectedRandomSign``'s report and
    bits bit for bit (the mechanism's batch kernel calls the same row kernel)."""
    from scipy import special

    from ldp_audit.mechanisms.prs import ProjectedRandomSign, prs_kernels

    row = prs_kernels().row
    mech = ProjectedRandomSign(epsilon=10.0, clip=0.5)
    x = np.random.default_rng(4).standard_normal((6, 112)) * 0.1
    ref, bits_ref, _ = mech.privatize_with_matrices(x, np.random.default_rng(5))
    dh = mech.effective_reduced_dim(112)
    uni = np.random.default_rng(5).random((6, dh * 112 + dh))
    eb = mech.bit_epsilon(112)
    p0, slope = float(special.expit(-eb)), math.tanh(eb / 2.0)  # as privatize computes them
    out, bits = np.empty(112), np.empty(dh)
    for i in range(6):
        assert row(uni[i], x[i], dh, mech.clip, p0, slope, bits, out)
        np.testing.assert_array_equal(out, ref[i])
        np.testing.assert_array_equal(bits, bits_ref[i])


def test_fused_blocks_cache_is_dropped_when_a_mechanism_kernel_changes(tmp_path, monkeypatch):
    """Numba keys fused_block's cache on its own file only: a changed fingerprint of the kernels
    compiled into it (the mechanisms' and _kernels.py's) flushes it (once), an unchanged one
    leaves it."""

    class _Cache:
        cache_path = str(tmp_path)
        flushes = 0

        def flush(self):
            _Cache.flushes += 1

    class _Dispatcher:
        _cache = _Cache()

    monkeypatch.setattr(K, "fused_block", _Dispatcher())
    stamp = tmp_path / "_fused_kernel.fused_block.kernels.sha256"
    stamp.write_text("an older kernel")
    K._flush_if_mechanisms_changed()
    assert _Cache.flushes == 1 and stamp.read_text() != "an older kernel"
    K._flush_if_mechanisms_changed()  # the same kernels: the cache is kept
    assert _Cache.flushes == 1


def test_more_agents_than_a_reset_block_train_on_both_engines():
    """300 agents restart at once at the start: the reset block holds any step's restarts (it
    once held 256 and both engines raised IndexError), and the engines still agree bit for bit."""
    cfg = PgcA3cConfig(n_agents=300, trials=1, max_submissions=350)
    a, b = (train(cfg, seed=3, engine=e) for e in ("lockstep", "fused"))
    assert a.submissions.tolist() == [350]
    np.testing.assert_array_equal(a.zeta, b.zeta)
    np.testing.assert_array_equal(a.theta, b.theta)
