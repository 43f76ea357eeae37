"""FRD's private CartPole constant other than gravity (``FrdConfig.private_param``,
``train frd --private-param NAME=V1,V2,...``): validation before any episode, the per-row
physics, the secret in the run directory, and ``attack dynamics --run-dir`` on such a run."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ldp_audit.cli import main
from ldp_audit.errors import InvalidParameterError
from ldp_audit.training.frd.config import CARTPOLE_DEFAULTS, PRIVATE_PARAMS, FrdConfig

pytest.importorskip("torch")


@pytest.mark.parametrize(
    "kw, needle",
    [
        ({"private_param": "tau", "private_values": (0.01, 0.02)}, "private_param must be one of"),
        ({"private_param": "x_threshold", "private_values": (2, 3)}, "got 'x_threshold'"),
        ({"private_param": "length", "private_values": (0.5,)}, "at least two candidate values"),
        ({"private_param": "length", "private_values": ()}, "at least two candidate values"),
        ({"private_param": "length", "private_values": (0.5, 0.5, 1)}, "[0.5] repeated"),
        ({"private_param": "length", "private_values": (0.5, "1")}, "real number, got '1'"),
        ({"private_param": "length", "private_values": (0.5, True)}, "real number, got True"),
        ({"private_param": "masspole", "private_values": (0.1, -1.0)}, "-1.0 must be > 0"),
        ({"private_param": "length", "private_values": (1e-300, 0.5)}, "value 1e-300"),
        ({"private_param": "length", "private_values": (0.5, 1), "gravities": (9, 10)},
         "give one value (default 9.8)"),
        ({"private_param": "gravity", "private_values": (9, 10), "gravities": (4.9, 9.8)},
         "give its candidates once"),
        ({"gravities": (9.8,)}, "'gravity' needs at least two candidate values (gravities)"),
    ],
)  # fmt: skip
def test_config_refuses_bad_private_parameter_naming_it(kw, needle):
    with pytest.raises(InvalidParameterError) as e:
        FrdConfig(**kw)
    assert needle in str(e.value)


def test_config_normalises_and_round_trips():
    c = FrdConfig(private_param="length", private_values=(0.25, 0.5, 1))
    assert c.candidates == (0.25, 0.5, 1.0) and c.gravities == (9.8,)
    assert c.physics() == {k: v for k, v in CARTPOLE_DEFAULTS.items() if k != "length"}
    assert FrdConfig.from_dict(json.loads(json.dumps(c.to_dict()))) == c
    assert c.private_parameter() == {"env_id": "CartPole-v1", "name": "length",
                                     "values": [0.25, 0.5, 1.0]}  # fmt: skip
    g = FrdConfig(private_param="gravity", private_values=(4.9, 19.6))
    assert (
        g.gravities == (4.9, 19.6)
        and g.private_values == ()
        and g == FrdConfig(gravities=(4.9, 19.6))
    )
    # a gravity run's config.json is what it was before private_param existed
    assert "private_param" not in FrdConfig().to_dict()
    fixed = FrdConfig(private_param="force_mag", private_values=(5, 10), gravities=(4.9,))
    assert fixed.physics()["gravity"] == 4.9 and set(PRIVATE_PARAMS) == set(CARTPOLE_DEFAULTS)


def test_row_constants_step_like_gymnasiums_cartpole_with_that_constant():
    """Each row of the batch steps as a Gymnasium CartPoleEnv whose constant was set (and its
    derived total_mass / polemass_length recomputed), from the same state and action."""
    import gymnasium as gym

    from ldp_audit.training.cartpole import PrivateGravityCartPole
    from ldp_audit.training.frd.engine import set_row_constants

    n = 4
    vals = {k: np.full(n, v) for k, v in CARTPOLE_DEFAULTS.items()}
    vals["length"] = np.array([0.25, 0.5, 1.0, 2.0])
    vals["masspole"] = np.array([0.1, 0.3, 0.1, 0.05])
    env = PrivateGravityCartPole(vals["gravity"], episode_steps=500)
    set_row_constants(env, vals)
    inner = env._env  # Gymnasium's CartPoleVectorEnv, stepping with the per-row constants
    np.testing.assert_array_equal(inner.polemass_length, vals["masspole"] * vals["length"])
    state = np.tile([0.01, -0.2, 0.05, 0.3], (n, 1))
    env.reset_rows(np.arange(n), state)
    obs, *_ = env.step(np.array([1, 0, 1, 0]))
    for i in range(n):
        single = gym.make("CartPole-v1").unwrapped
        single.reset(seed=0)
        single.length, single.masspole = float(vals["length"][i]), float(vals["masspole"][i])
        single.total_mass = single.masspole + single.masscart
        single.polemass_length = single.masspole * single.length
        single.state = state[i].copy()
        o, *_ = single.step(int([1, 0, 1, 0][i]))
        np.testing.assert_allclose(obs[i], o, rtol=0, atol=1e-6)
    # the rows differ: the pole length changes the angular acceleration
    assert len({float(x) for x in obs[:, 3]}) == n
    with pytest.raises(InvalidParameterError, match="length must be"):
        set_row_constants(env, {**vals, "length": np.array([0.5, 0.5, 0.0, 1.0])})


def test_train_many_draws_the_secret_and_keeps_gravity_fixed():
    from ldp_audit.training.frd.engine import train_many

    cfg = FrdConfig(private_param="masspole", private_values=(0.05, 0.1, 0.4), n_agents=3,
                    groups=4, max_episodes=3, sections=10, hidden=8, layers=1)  # fmt: skip
    res = train_many([cfg], seed=2)[0]
    assert res.secret.shape == (4, 3) and set(np.unique(res.secret)) <= {0.05, 0.1, 0.4}
    assert np.unique(res.secret).size > 1
    np.testing.assert_array_equal(res.gravity, np.full((4, 3), 9.8))
    again = train_many([cfg], seed=2)[0]
    np.testing.assert_array_equal(again.scores, res.scores)
    np.testing.assert_array_equal(again.secret, res.secret)


TINY = ["--setting", "5", "--agents", "2", "--groups", "3", "--sections", "10",
        "--exchange-period", "3", "--initial-episodes", "1", "--hidden", "8", "--layers", "1",
        "--max-episodes", "8", "--no-stop-at-mission", "--no-progress"]  # fmt: skip


def test_cli_run_stores_the_secret_and_attack_dynamics_scores_it(tmp_path, capsys):
    rd = tmp_path / "run"
    argv = ["train", "frd", *TINY, "--private-param", "length=0.25,1", "--seed", "3"]
    assert main([*argv, "--out", str(rd)]) == 0
    doc = json.loads((rd / "config.json").read_text())
    assert doc["private_parameter"] == {"env_id": "CartPole-v1", "name": "length",
                                        "values": [0.25, 1.0]}  # fmt: skip
    assert doc["config"]["private_param"] == "length"
    with np.load(rd / "secrets.npz") as sec:
        assert set(sec.files) == {"length", "agent_length"}
        assert set(np.unique(sec["agent_length"])) <= {0.25, 1.0}
        with np.load(rd / "transcript.npz") as tr:  # one secret per uploaded row
            assert sec["length"].shape == tr["trial"].shape
            np.testing.assert_array_equal(
                sec["length"], sec["agent_length"][tr["trial"], tr["agent"]]
            )
    capsys.readouterr()
    assert main(["attack", "dynamics", "--run-dir", str(rd), "--shadow", "4", "--seed", "1"]) == 0
    res = json.loads((rd / "attack_dynamics.json").read_text())
    assert res["n"] == 6 and res["k"] == 2 and res["extra"]["private_param"] == "length"
    assert res["extra"]["candidates"] == [0.25, 1.0]


@pytest.mark.parametrize(
    "extra, needle, code",
    [
        (["--private-param", "tau=0.01,0.02"], "--private-param must be one of", 2),
        (["--private-param", "length=abc,1"], "--private-param length must be a finite", 2),
        (["--private-param", "length=0.5"], "needs at least two candidate values", 2),
        (["--private-param", "length=0.5,0.5"], "[0.5] repeated", 2),
        (["--private-param", "length=1e-300,0.5"], "value 1e-300", 2),
        (["--private-param", "length=1,2", "--gravities", "9,10"], "both declare the secret", 2),
    ],
)
def test_cli_bad_private_param_exit_2_before_any_work(extra, needle, code, tmp_path, capsys):
    out = tmp_path / "run"
    try:
        rc = main(["train", "frd", *TINY, *extra, "--out", str(out)])
    except SystemExit as e:  # argparse's usage errors
        rc = e.code
    assert rc == code
    assert needle in capsys.readouterr().err
    assert not out.exists()
