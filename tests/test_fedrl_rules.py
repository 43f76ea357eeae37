"""FedRL: the meeting rule option (the paper's Manhattan vs the authors' code's |dx + dy|), the
further evaluations of Table 1's networks (learning curves, epsilon-greedy) and single-run
training for the reproduction's independent tasks."""

from __future__ import annotations

import numpy as np
import pytest

from ldp_audit.errors import InvalidParameterError
from ldp_audit.training.fedrl.gridworld import (
    MOVES,
    MapSet,
    VectorGridWorld,
    agent_distance,
    generate_maps,
    step_reward,
)

TINY = {
    "size": 8,
    "n_maps": 100,
    "train_steps": 40,
    "n_envs": 4,
    "batch_size": 8,
    "learning_starts": 16,
    "eval_maps": 5,
    "target_update": 5,
    "hist_len": 2,
    "eps_decay": 20,
}


def _all_pairs_map(n: int) -> MapSet:
    """An empty n x n map once per ordered pair of distinct start cells."""
    cells = np.array([(r, c) for r in range(n) for c in range(n)])
    a, b = np.meshgrid(np.arange(len(cells)), np.arange(len(cells)), indexing="ij")
    keep = a.ravel() != b.ravel()
    pa, pb = cells[a.ravel()[keep]], cells[b.ravel()[keep]]
    k = len(pa)
    return MapSet(
        size=n,
        t_max=10,
        density=0.0,
        seed=0,
        obstacles=np.zeros((k, n, n), np.uint8),
        alpha_start=pa,
        beta_start=pb,
        shortest=np.abs(pa - pb).sum(1),
        split={"train": np.arange(k), "valid": np.arange(0), "test": np.arange(0)},
    )


def test_rules_differ_exactly_where_abs_sum_differs_from_manhattan():
    """Exhaustive on a 5x5 grid: every ordered start pair x every joint action, one step under
    each rule. Same moves; met, the +50 and the shaping follow each rule's distance; the two
    rules' rewards and meetings differ exactly where |dx + dy| != |dx| + |dy|."""
    n = 5
    maps = _all_pairs_map(n)
    k = len(maps)
    idx = np.repeat(np.arange(k), 16)
    acts = np.tile(np.arange(16), k)
    envs = {
        rule: VectorGridWorld(maps, idx, hist_len=1, meeting_rule=rule)
        for rule in ("manhattan", "public-code")
    }
    out = {}
    for rule, env in envs.items():
        env.reset()
        out[rule] = env.step(acts)
    pos = envs["manhattan"].pos
    assert np.array_equal(pos, envs["public-code"].pos)  # the rule changes no move
    # the expected moves, by hand: blocked only by the border on an empty map
    start = np.stack([maps.alpha_start[idx], maps.beta_start[idx]], axis=1)
    new = start + np.stack([MOVES[acts // 4], MOVES[acts % 4]], axis=1)
    inside = ((new >= 0) & (new < n)).all(axis=2)
    assert np.array_equal(pos, np.where(inside[..., None], new, start))
    dx, dy = (pos[:, 1] - pos[:, 0]).T
    manh, pub = np.abs(dx) + np.abs(dy), np.abs(dx + dy)
    assert np.array_equal(agent_distance(pos[:, 0], pos[:, 1], "manhattan"), manh)
    assert np.array_equal(agent_distance(pos[:, 0], pos[:, 1], "public-code"), pub)
    for rule, d in (("manhattan", manh), ("public-code", pub)):
        r, done, met, active = out[rule]
        assert active.all()
        assert np.array_equal(met, d <= 1) and np.array_equal(done, d <= 1)
        assert np.array_equal(r, step_reward(n, ~inside[:, 0], ~inside[:, 1], d))
    differ = pub != manh
    assert differ.any() and (~differ).any()
    r_m, r_p = out["manhattan"][0], out["public-code"][0]
    assert np.array_equal(r_m != r_p, differ)
    # where they differ the code's rule is the looser: it meets whenever Manhattan does
    assert not (out["manhattan"][2] & ~out["public-code"][2]).any()
    assert (out["public-code"][2] & ~out["manhattan"][2]).any()


def test_default_rule_is_manhattan_and_unchanged():
    maps = generate_maps(8, 30, seed=3)
    rng = np.random.default_rng(0)
    acts = rng.integers(16, size=(38, 30))
    a = VectorGridWorld(maps, np.arange(30), hist_len=2)
    b = VectorGridWorld(maps, np.arange(30), hist_len=2, meeting_rule="manhattan")
    assert a.meeting_rule == "manhattan"
    a.reset(), b.reset()
    for t in range(38):
        ra, rb = a.step(acts[t]), b.step(acts[t])
        for x, y in zip(ra, rb, strict=True):
            assert np.array_equal(x, y)
        md = np.abs(a.pos[:, 0] - a.pos[:, 1]).sum(1)  # the paper's |dx| + |dy|
        assert np.array_equal(ra[2], ra[3] & (md <= 1))
    from ldp_audit.training.fedrl.config import FedRLConfig

    assert FedRLConfig().meeting_rule == "manhattan"


@pytest.mark.parametrize("bad", ["Manhattan", "l1", "", None, 1, True])
def test_bad_meeting_rule_is_refused(bad):
    from ldp_audit.training.fedrl.config import FedRLConfig
    from ldp_audit.training.fedrl.reproduce import ReproConfig

    with pytest.raises(InvalidParameterError, match="meeting_rule"):
        agent_distance(np.zeros(2), np.ones(2), bad)
    with pytest.raises(InvalidParameterError, match="meeting_rule"):
        FedRLConfig(meeting_rule=bad)
    with pytest.raises(InvalidParameterError, match="meeting_rule"):
        ReproConfig(meeting_rule=bad)
    maps = generate_maps(8, 10, seed=0)
    with pytest.raises(InvalidParameterError, match="meeting_rule"):
        VectorGridWorld(maps, [0], meeting_rule=bad)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"explore_eps": (0.0,)}, "explore_eps"),
        ({"explore_eps": (1.5,)}, "explore_eps"),
        ({"explore_eps": (True,)}, "explore_eps"),
        ({"explore_eps": 0.1}, "explore_eps"),
        ({"curve_points": -1}, "curve_points"),
        ({"curve_maps": 0}, "curve_maps"),
    ],
)
def test_bad_reproduction_evaluations_are_refused(kwargs, match):
    from ldp_audit.training.fedrl.reproduce import ReproConfig

    with pytest.raises(InvalidParameterError, match=match):
        ReproConfig(**kwargs)


def test_cli_meeting_rule_is_a_choice(capsys):
    from ldp_audit.cli import main

    for sub in ("train", "reproduce"):
        with pytest.raises(SystemExit) as ei:
            main([sub, "fedrl", "--meeting-rule", "euclid", "--out", "/nonexistent/x"])
        assert ei.value.code == 2
        assert "--meeting-rule" in capsys.readouterr().err


def test_random_policy_under_the_code_rule_succeeds_at_least_as_often():
    """Same random actions under both rules; trajectories agree until the first meeting, so
    the code's looser rule succeeds on every episode Manhattan does, and on more."""
    from ldp_audit.training.fedrl.reproduce import random_policy_success

    maps = generate_maps(8, 200, seed=0)
    m = random_policy_success(8, 200, 0, 20, maps=maps)
    p = random_policy_success(8, 200, 0, 20, maps=maps, meeting_rule="public-code")
    assert m["meeting_rule"] == "manhattan" and p["meeting_rule"] == "public-code"
    assert m["episodes"] == p["episodes"] == 60
    assert all(b >= a for a, b in zip(m["per_seed"], p["per_seed"], strict=True))
    assert p["successes"] > m["successes"]


def test_extra_evaluations_leave_training_and_table1_unchanged():
    """Curves and epsilon-greedy evaluation draw from their own generators: the networks,
    losses and Table 1's evaluations are identical with and without them."""
    pytest.importorskip("torch")
    from ldp_audit.training.fedrl.config import FedRLConfig
    from ldp_audit.training.fedrl.metrics import table_metrics
    from ldp_audit.training.fedrl.runs import run_fedrl

    cfg = FedRLConfig(**TINY, runs=2, methods=("dqn-alpha", "fedrl"))
    maps = generate_maps(8, 100, seed=0)
    extras = {"curve_points": 3, "curve_maps": 4, "explore": (0.1, 0.5)}
    a = run_fedrl(cfg, seed=4, maps=maps, record=False)["results"]
    b = run_fedrl(cfg, seed=4, maps=maps, record=False, extras=extras)["results"]
    for x, y in zip(a, b, strict=True):
        assert x["final_loss"] == y["final_loss"]
        for lab in ("DQN-alpha", "FedRL-1", "FedRL-2"):
            assert x.get(lab) == y.get(lab)
        for net in x["state"]:
            for k in x["state"][net]:
                assert np.array_equal(x["state"][net][k], y["state"][net][k])
        assert "eval_curve" not in x and "explore_eval" not in x
        c = y["eval_curve"]
        assert c["iterations"] == [13, 27, 40] and c["maps"] == 4
        labs = ["DQN-alpha"] if y["method"] == "dqn-alpha" else ["FedRL-1", "FedRL-2"]
        assert sorted(c["methods"]) == labs
        assert all(len(v) == 3 and v[0]["episodes"] == 4 for v in c["methods"].values())
        ex = y["explore_eval"]
        greedy = "DQN-alpha" if y["method"] == "dqn-alpha" else "FedRL-2"
        assert list(ex) == [greedy] and list(ex[greedy]) == ["0", "0.1", "0.5"]
        assert ex[greedy]["0"]["successes"] == y[greedy]["successes"]  # greedy = Table 1's
    m = table_metrics(cfg, b)
    assert set(m["explore"]) == {"DQN-alpha", "FedRL-2"}
    assert m["explore"]["DQN-alpha"]["0.5"]["episodes"] == 2 * cfg.eval_maps
    assert set(m["curves"]["converged"]) == {"DQN-alpha", "FedRL-1", "FedRL-2"}
    assert "curves" not in table_metrics(cfg, a) and "explore" not in table_metrics(cfg, a)


def test_only_trains_one_run_alone_and_refuses_a_bad_choice():
    pytest.importorskip("torch")
    from ldp_audit.training.fedrl.config import FedRLConfig
    from ldp_audit.training.fedrl.runs import run_fedrl

    cfg = FedRLConfig(**TINY, runs=2, methods=("dqn-alpha",))
    maps = generate_maps(8, 100, seed=0)
    one = run_fedrl(cfg, seed=4, maps=maps, record=False, only=("dqn-alpha", 1))["results"]
    again = run_fedrl(cfg, seed=4, maps=maps, record=False, only=("dqn-alpha", 1))["results"]
    assert len(one) == 1 and one[0]["trial"] == 1 and one[0]["runs_batched"] == 1
    assert one[0]["final_loss"] == again[0]["final_loss"]
    for bad in (("fedrl", 0), ("dqn-alpha", 2), ("dqn-alpha", True), ["dqn-alpha", 0]):
        with pytest.raises(InvalidParameterError, match=r"only(\[1\] \(the run\))? must be"):
            run_fedrl(cfg, seed=4, maps=maps, record=False, only=bad)
