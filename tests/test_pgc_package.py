"""The PGC-A3C package's layout (issue 25): no room is over ~800 lines, the Gymnasium trainer
shares the config checks and the NumPy gradient, and the fused kernel is compiled once (and
cached), not per call."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ldp_audit.errors import InvalidParameterError
from ldp_audit.training import pgc_a3c
from ldp_audit.training.pgc_a3c.gradients import loss_gradients as engine_gradients
from ldp_audit.training.pgc_a3c.rollout import rollout

PACKAGE = Path(pgc_a3c.__file__).resolve().parent


def test_no_room_is_over_800_lines():
    sizes = {p.name: len(p.read_text().splitlines()) for p in PACKAGE.glob("*.py")}
    assert len(sizes) >= 10 and max(sizes.values()) <= 800, sizes


def _gym_config(**kw):
    from ldp_audit.training.pgc_a3c_gym.config import GymPgcConfig

    base = dict(env_id="MountainCar-v0", private_param="force", values=(0.0008, 0.001))
    return GymPgcConfig(**{**base, **kw})


@pytest.mark.parametrize(
    "bad",
    [
        {"mechanism": "gauss"},
        {"epsilon": -1.0},
        {"acting": "softmax"},
        {"clip": 0.0},
        {"buffer_size": 0},
        {"eta": 0.0},
        {"gamma": 1.5},
        {"beta": float("nan")},
        {"alpha_start": 2.0},
        {"trials": True},
    ],
)
def test_gym_and_cartpole_configs_refuse_the_same_values_with_the_same_words(bad):
    with pytest.raises(InvalidParameterError) as cartpole:
        pgc_a3c.PgcA3cConfig(**bad)
    with pytest.raises(InvalidParameterError) as gym:
        _gym_config(**bad)
    assert str(cartpole.value) == str(gym.value)


def test_gym_config_shares_the_paper_defaults_and_mechanism():
    for mech in ("laplace", "prs", "none"):
        g, c = (
            _gym_config(mechanism=mech, epsilon=2.0, rounds=2),
            pgc_a3c.PgcA3cConfig(mechanism=mech, epsilon=2.0, rounds=2),
        )
        assert (g.effective_clip, g.effective_buffer_size) == (
            c.effective_clip,
            c.effective_buffer_size,
        )
        assert g.make_mechanism() == c.make_mechanism()
        assert g.to_dict()["epsilon"] == c.to_dict()["epsilon"]


def test_gym_gradient_on_the_cartpole_network_equals_the_engines_kernel():
    """The Gymnasium trainer's NumPy gradient (any number of actions) on the CartPole network
    agrees with the engine's compiled two-action kernel (to 1e-11 relative; both are exact
    formulas of eqs. 15-18, only rounding differs)."""
    from ldp_audit.training.pgc_a3c_gym.model import Network, loss_gradients

    rng = np.random.default_rng(4)
    b, steps = 24, 20
    theta = np.stack([pgc_a3c.init_theta(rng) for _ in range(b)])
    ro = rollout(theta, rng.choice([9.7, 9.8, 9.9], b), rng.uniform(-0.05, 0.05, (b, 4)),
                         rng.random((steps, b)), 0.3, steps)  # fmt: skip
    big_l = int(ro["lengths"].max())
    args = (ro["obs"][:, : big_l + 1], ro["actions"][:, :big_l], ro["rewards"][:, :big_l],
            ro["lengths"], ro["bootstrap"])  # fmt: skip
    assert ro["bootstrap"].any() and (~ro["bootstrap"]).any()
    ours = engine_gradients(theta, *args, gamma=0.97, lam=0.4, beta=0.02)
    gym = loss_gradients(Network(4, 2, 16), theta, *args, gamma=0.97, lam=0.4, beta=0.02)
    scale = np.abs(ours).max(axis=1, keepdims=True)
    assert np.all(np.abs(gym - ours) <= 1e-11 * scale)


def test_fused_block_is_compiled_once_and_cached():
    from ldp_audit.training.pgc_a3c._fused_kernel import fused_block

    cfg = pgc_a3c.PgcA3cConfig(trials=1, n_agents=3, max_submissions=20, episode_steps=30)
    pgc_a3c.train(cfg, seed=0, engine="fused")
    n = len(fused_block.signatures)
    prs = pgc_a3c.PgcA3cConfig(mechanism="prs", trials=2, n_agents=2, max_submissions=30,
                               episode_steps=30, rounds=2)  # fmt: skip
    pgc_a3c.train(prs, seed=1, engine="fused", transcript=True)
    assert len(fused_block.signatures) == n == 1  # no new specialisation per call or config
    index = Path(fused_block._cache.cache_path)
    assert list(index.glob("_fused_kernel.fused_block-*.nbi"))  # Numba's on-disk cache
