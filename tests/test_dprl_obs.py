"""Observation-noise "LDP" (training/dprl/obs_noise.py) and its use by the dprl trainers."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from ldp_audit.accountant import Accountant, GaussianEvent, Ledger, NonPrivateEvent, compose
from ldp_audit.errors import InvalidParameterError
from ldp_audit.mechanisms import analytic_gaussian_epsilon
from ldp_audit.training.dprl.config import DprlConfig
from ldp_audit.training.dprl.obs_noise import (
    CARTPOLE_BOX,
    CARTPOLE_IQR,
    ObservationNoise,
    ObservationNoiseMechanism,
    measure_iqr,
)
from ldp_audit.training.dprl.trainer import train

torch.set_num_threads(1)


def test_stored_iqr_is_the_measured_one() -> None:
    np.testing.assert_allclose(measure_iqr(seed=0, steps=20_000), CARTPOLE_IQR, rtol=1e-12)


def test_raw_states_have_infinite_epsilon_in_words() -> None:
    m = ObservationNoiseMechanism(noise_multiplier=1.0)
    assert math.isinf(m.epsilon) and isinstance(m.event(), NonPrivateEvent)
    assert "epsilon = inf" in m.describe()


def test_boxed_states_are_a_gaussian_mechanism() -> None:
    m = ObservationNoiseMechanism(noise_multiplier=50.0, box=CARTPOLE_BOX)
    iqr = np.asarray(CARTPOLE_IQR)
    widths = np.array([hi - lo for lo, hi in CARTPOLE_BOX])
    diag = float(np.sqrt(((widths / iqr) ** 2).sum()))
    assert m.sensitivity == pytest.approx(diag)
    assert m.event() == GaussianEvent(50.0 / diag)
    assert m.epsilon == pytest.approx(analytic_gaussian_epsilon(50.0 / diag, 1.0, 1e-5))


def test_privatize_noise_scale_and_clip() -> None:
    m = ObservationNoiseMechanism(noise_multiplier=0.5, box=CARTPOLE_BOX)
    rng = np.random.default_rng(0)
    x = np.tile([[10.0, 0.0, 0.0, 0.0]], (20_000, 1))  # x far outside the box: clipped to 2.4
    y = m.privatize(x, rng)
    assert y[:, 0].mean() == pytest.approx(2.4, abs=0.01)
    np.testing.assert_allclose(y.std(axis=0), 0.5 * np.asarray(CARTPOLE_IQR), rtol=0.03)
    with pytest.raises(InvalidParameterError, match="shape"):
        m.privatize(np.zeros((3, 2)), rng)


@pytest.mark.parametrize("box", [None, CARTPOLE_BOX])
def test_privatize_refuses_non_finite_states_before_any_draw(box) -> None:
    """A NaN state came out as NaN and, raw, an inf as inf (the input itself, un-noised); the
    strings of ``[["1", "2", "3", "4"]]`` were read as numbers. Every other mechanism refuses
    them (check_batch)."""
    m = ObservationNoiseMechanism(noise_multiplier=1.0, box=box)
    rng = np.random.default_rng(0)
    before = rng.bit_generator.state
    for bad, words in [
        ([[np.nan, 0.0, 0.0, 0.0]], "x must be finite"),
        ([[0.0, 0.0, 0.0, np.inf]], "x must be finite"),
        ([["1", "2", "3", "4"]], "x must be a real numeric array"),
    ]:
        with pytest.raises(InvalidParameterError, match=words):
            m.privatize(np.array(bad), rng)
    assert rng.bit_generator.state == before


def test_bad_parameters_named() -> None:
    with pytest.raises(InvalidParameterError, match="noise_multiplier"):
        ObservationNoiseMechanism(noise_multiplier=-0.1)
    with pytest.raises(InvalidParameterError, match="noise_multiplier"):
        ObservationNoiseMechanism(noise_multiplier=float("nan"))
    # session 58: 1e308 was taken (outputs ~1e307, float32 networks inf); the trainer's bound
    with pytest.raises(InvalidParameterError, match=r"noise_multiplier must be .*<= 1e\+06"):
        ObservationNoiseMechanism(noise_multiplier=1e308)
    with pytest.raises(InvalidParameterError, match="noise_multiplier x iqr = .* too large"):
        ObservationNoiseMechanism(noise_multiplier=1.0, iqr=(1e307, 1.0, 1.0, 1.0))
    ObservationNoiseMechanism(noise_multiplier=1e6)  # the bound itself is taken
    from ldp_audit.training.dprl import config, obs_noise

    assert obs_noise.MAX_SCALE == config.MAX_SCALE  # one bound, written twice (no import circle)
    for iqr in ("abcd", ("a", 1, 1, 1), (None,) * 4):  # "abcd" was a raw ValueError
        with pytest.raises(InvalidParameterError, match="iqr must be finite positive numbers"):
            ObservationNoiseMechanism(noise_multiplier=1.0, iqr=iqr)
    with pytest.raises(InvalidParameterError, match="state_box must contain the declared IQRs"):
        ObservationNoiseMechanism(noise_multiplier=1.0, box=((-1, 1), (-1, 1), (0, 0.01), (-1, 1)))


def test_gymnasium_wrapper() -> None:
    m = ObservationNoiseMechanism(noise_multiplier=0.3)
    env = ObservationNoise(gym.make("CartPole-v1"), m, np.random.default_rng(1))
    raw = gym.make("CartPole-v1")
    o, _ = env.reset(seed=3)
    r, _ = raw.reset(seed=3)
    assert o.shape == (4,) and not np.allclose(o, r)
    assert np.abs(o - r).max() < 6 * 0.3 * max(CARTPOLE_IQR)


def test_trainer_charges_every_observation_and_composes_per_episode() -> None:
    cfg = DprlConfig(
        algo="reinforce", privacy="obs-noise", noise_multiplier=200.0, state_box=CARTPOLE_BOX,
        episodes=8, num_envs=4, hidden=16,
    )  # fmt: skip
    ledger = Ledger(":memory:")
    res = train(cfg, seed=0, ledger=ledger)
    acc = Accountant(ledger=ledger)
    obs = res.transcript["observation"]
    assert obs.shape[0] == sum(int(r) for r in res.returns)  # one release per observation seen
    ep = res.transcript["episode"]
    ev = cfg.obs_mechanism().event()
    for e in np.unique(ep)[:3]:
        n = int((ep == e).sum())
        d = acc.spent_detail(f"ep{int(e)}", delta=1e-5, method="rdp")
        assert d.charges == n
        assert d.epsilon == pytest.approx(compose([(ev, n)], delta=1e-5, method="rdp")[0])
    assert res.privacy["epsilon"] < math.inf


def test_dqn_obs_noise_raw_is_infinite() -> None:
    cfg = DprlConfig(algo="dqn", privacy="obs-noise", noise_multiplier=0.2, total_steps=300,
                     learning_starts=100, buffer_size=200, batch_size=20, hidden=16)  # fmt: skip
    res = train(cfg, seed=0)
    assert math.isinf(res.privacy["epsilon"])
    assert "epsilon = inf" in res.privacy["words"]
    assert res.transcript["observation"].shape[0] == 301  # every observation the learner saw


def test_every_reinforce_episode_starts_from_a_reset() -> None:
    """Each batch of episodes starts fresh: every step-0 state is a CartPole reset state."""
    cfg = DprlConfig(algo="reinforce", privacy="obs-noise", noise_multiplier=0.0, episodes=24,
                     num_envs=4, hidden=16)  # fmt: skip
    res = train(cfg, seed=0)
    tr = res.transcript
    first = tr["observation"][tr["step"] == 0]
    assert first.shape == (24, 4)
    assert np.abs(first).max() <= 0.05  # CartPole resets uniformly in [-0.05, 0.05]^4
    # and each episode's observations are its whole episode: lengths match the returns
    counts = np.bincount(tr["episode"], minlength=24)
    np.testing.assert_array_equal(counts, np.asarray(res.returns, dtype=int))


def test_the_auditor_takes_the_mechanism() -> None:
    """ldp_audit.audit.audit accepts the boxed mechanism (candidate_pairs = box corners) and
    finds no violation (seeded; the bound holds with 95% confidence); raw states are refused."""
    from ldp_audit.audit import audit

    m = ObservationNoiseMechanism(noise_multiplier=200.0, box=CARTPOLE_BOX)
    res = audit(m, samples=100_000, rng=0, dim=4, float_bits=False)
    assert 0.0 < res.epsilon_lower_bound <= m.epsilon and not res.violation
    with pytest.raises(InvalidParameterError, match="inf"):
        audit(ObservationNoiseMechanism(noise_multiplier=200.0), samples=1000, rng=0, dim=4)
