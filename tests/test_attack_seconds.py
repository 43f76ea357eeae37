"""An attack's recorded ``seconds`` is its real duration (issue 39: a 37 CPU-s dynamics attack
on a run directory recorded 0.03 s, the time of its scoring only): the attack's own time
(simulation and fit) is carried from the prediction into the scored result."""

from __future__ import annotations

import time

import numpy as np

from ldp_audit.attacks.dynamics_run_dir import attack_run_dir, score_run_dir
from ldp_audit.attacks.dynamics_shadow import GRAVITIES
from ldp_audit.attacks.membership import FixedThetaTrainer
from ldp_audit.mechanisms import RandomizedResponse
from tests.test_attacks_dynamics import index_simulator

SPENT: list[float] = []


def busy_simulator(theta, gravity, rng, alpha=0.0):
    """index_simulator plus some real work, its own time measured inside it."""
    t0 = time.perf_counter()
    m = np.random.default_rng(0).normal(size=(150, 150))
    for _ in range(20):
        m = np.tanh(m @ m / 150.0)
    out = index_simulator(theta, gravity, rng, alpha)
    SPENT.append(time.perf_counter() - t0)
    return out


def test_run_dir_attack_seconds_include_the_simulation(tmp_path) -> None:
    mech = RandomizedResponse(epsilon=2.0, k=3)
    rng = np.random.default_rng(8)
    gravities = rng.choice(np.array(GRAVITIES), size=40)
    FixedThetaTrainer(
        theta=np.zeros(1), mechanism=mech, reports_per_agent=2, simulator=index_simulator
    )(gravities, tmp_path, rng)
    SPENT.clear()
    pred = attack_run_dir(tmp_path, n_shadow=5, max_groups=None, simulator=busy_simulator)
    res = score_run_dir(tmp_path, pred)
    assert SPENT, "the simulator was not called"
    # every simulator second happened inside the attack: the recorded time holds them all
    assert pred["seconds"] >= sum(SPENT)
    assert res.seconds >= pred["seconds"]
    assert res.to_dict()["seconds"] == res.seconds


def test_frd_attack_seconds_carry_the_prediction(tmp_path) -> None:
    """FRD's scoring adds its own time to the attack's (the prediction's ``seconds``)."""
    from ldp_audit.attacks.frd import score_run_dir

    np.savez(tmp_path / "secrets.npz", agent_gravity=np.array([[9.7, 9.9]]))
    cfg = '{"algorithm": "frd", "config": {}, "mechanism": null, "seed": 0}'
    (tmp_path / "config.json").write_text(cfg)  # a run directory: RunDir reads its secrets
    pred = {
        "groups": np.array([[0, 0], [0, 1]]),
        "guess": np.array([9.7, 9.8]),
        "candidates": [9.7, 9.8, 9.9],
        "reports_per_group": np.array([2, 2]),
        "epsilon": 1.0,
        "mechanism": {"name": "laplace", "epsilon": 1.0, "clip": 1.0},
        "mode": "frd",
        "private_param": "gravity",
        "seconds": 37.0,  # what the shadow training and the fit took
    }
    res = score_run_dir(tmp_path, pred)
    assert res.n == 2 and res.correct == 1
    assert 37.0 <= res.seconds < 37.0 + 60.0
