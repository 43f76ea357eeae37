"""DP-SGD REINFORCE / DQN (training/dprl/__init__.py): privacy plumbing, accounting, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from opacus.optimizers import DPOptimizer

from ldp_audit.accountant import (
    Accountant,
    GaussianEvent,
    Ledger,
    PoissonSampledEvent,
)
from ldp_audit.errors import BudgetExceeded, InvalidParameterError, RunDirectoryError
from ldp_audit.training.dprl.algos import convergence_episode
from ldp_audit.training.dprl.config import DprlConfig
from ldp_audit.training.dprl.privacy import TrainerHooks, canary_directions
from ldp_audit.training.dprl.trainer import read_run, train

torch.set_num_threads(1)

TINY_RF = dict(algo="reinforce", privacy="dpsgd", episodes=16, num_envs=4, hidden=16)
TINY_DQN = dict(
    algo="dqn",
    privacy="dpsgd",
    total_steps=400,
    learning_starts=100,
    buffer_size=200,
    batch_size=20,
    train_frequency=2,
    hidden=16,
)


# ------------------------------------------------------------------------------------------------
# bad input: clear errors naming parameter and value, before any episode
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw, needle",
    [
        (dict(noise_multiplier=-1.0), "noise_multiplier"),
        (dict(noise_multiplier=float("nan")), "noise_multiplier"),
        (dict(noise_multiplier="1"), "noise_multiplier"),
        (dict(noise_multiplier=True), "noise_multiplier"),
        (dict(clip=0.0), r"clip must be a real number in \(0, 1e\+06\], got 0.0"),
        (dict(clip=-2), "clip"),
        (dict(delta=0.0), r"delta must be a real number in \(0, 1\), got 0.0"),
        (dict(delta=1.0), r"delta must be a real number in \(0, 1\), got 1.0"),
        (dict(algo="ppo"), "algo"),
        (dict(privacy="ldp"), "privacy"),
        (dict(canaries=5, privacy="none"), "canaries"),
        (dict(canaries=10_000_000), "canaries"),
        (dict(budget_epsilon=-1.0), "budget_epsilon"),
        (dict(state_box=((-1, 1),) * 4), "state_box"),
        (
            dict(privacy="obs-noise", state_box=((-2.4, 2.4), (-3, 3), (-0.01, 0.01), (-3, 3))),
            "state_box must contain the declared IQRs",
        ),  # fmt: skip
        (dict(episodes=0), "episodes"),
    ],
)
def test_bad_config_names_parameter(kw: dict, needle: str) -> None:
    with pytest.raises(InvalidParameterError, match=needle):
        DprlConfig(**{**TINY_RF, **kw})


@pytest.mark.parametrize(
    "kw, needle",
    [
        (TINY_RF, "the policy's action probabilities are not finite at update 1"),
        ({**TINY_DQN, "privacy": "none", "total_steps": 150}, "the Q-values are not finite"),
    ],
)
def test_diverged_training_refused_naming_the_learning_rate(kw: dict, needle: str) -> None:
    """lr 1e30: REINFORCE died in torch.multinomial (a traceback, exit 3 'a bug in ldp-audit'),
    DQN without DP-SGD trained on NaN Q-values and wrote a NaN model with exit 0."""
    with pytest.raises(InvalidParameterError, match=rf"dprl diverged: {needle}.*lr=1e\+30"):
        train(DprlConfig(**{**kw, "lr": 1e30}), seed=0)


@pytest.mark.parametrize("seed", [-1, True, 1.0, "0"])
def test_bad_seed_refused_before_any_file(tmp_path, seed) -> None:
    with pytest.raises(InvalidParameterError, match=r"^seed must be an integer >= 0, got "):
        train(DprlConfig(**TINY_RF), seed=seed, run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_budget_already_spent_refused_before_any_episode(tmp_path) -> None:
    ledger = Ledger(str(tmp_path / "l.sqlite"))
    acc = Accountant(ledger=ledger)
    for _ in range(50):
        acc.charge("model", GaussianEvent(1.0), scope="central")
    before = len(acc.agents())
    cfg = DprlConfig(**TINY_RF, budget_epsilon=1.0)
    with pytest.raises(BudgetExceeded, match="already spent"):
        train(cfg, seed=0, ledger=Ledger(str(tmp_path / "l.sqlite")))
    acc2 = Accountant(ledger=Ledger(str(tmp_path / "l.sqlite")))
    assert len(acc2.agents()) == before
    assert acc2.spent_detail("model", delta=1e-5, method="rdp").charges == 50  # nothing charged


def test_budget_smaller_than_one_update_refused() -> None:
    with pytest.raises(InvalidParameterError, match="budget_epsilon must pay for at least one"):
        train(DprlConfig(**TINY_RF, noise_multiplier=0.5, budget_epsilon=0.01), seed=0)


def test_run_dir_of_another_algorithm_refused(tmp_path) -> None:
    from ldp_audit.rundir import RunWriter

    w = RunWriter(tmp_path / "r", algorithm="pgc-a3c", config={}, seed=0)
    w.finish()
    with pytest.raises(RunDirectoryError, match="'pgc-a3c' run, not a 'dprl' run"):
        read_run(tmp_path / "r")


def test_config_from_dict_round_trips_and_refuses_unknown_keys(tmp_path) -> None:
    cfg = DprlConfig(**{**TINY_RF, "privacy": "obs-noise"}, state_box=((-1.0, 1.0),) * 4)
    assert DprlConfig.from_dict(cfg.to_dict()) == cfg
    train(DprlConfig(**TINY_RF), seed=0, run_dir=tmp_path / "r")  # a run's config.json reads
    assert read_run(tmp_path / "r")["config"] == DprlConfig(**TINY_RF)
    with pytest.raises(InvalidParameterError, match="DprlConfig has no field 'noise_multiplyer'"):
        DprlConfig.from_dict({**cfg.to_dict(), "noise_multiplyer": 2.0})


# ------------------------------------------------------------------------------------------------
# the DP-SGD step: per-sample clipping on every update, charge before noise
# ------------------------------------------------------------------------------------------------


class _Recording(DPOptimizer):
    """Opacus's own clipping, recomputed independently and checked on every update."""

    log: list = []

    def clip_and_accumulate(self) -> None:
        gs = [self._get_flat_grad_sample(p).detach().clone() for p in self.params]
        norms = torch.stack([g.reshape(len(g), -1).norm(dim=1) for g in gs], dim=1).norm(dim=1)
        factor = (self.max_grad_norm / (norms + 1e-6)).clamp(max=1.0)
        clipped_norms = norms * factor
        super().clip_and_accumulate()
        summed = [p.summed_grad for p in self.params]
        expect = [torch.einsum("i,i...", factor, g) for g in gs]
        same = all(torch.allclose(a, b, atol=1e-5) for a, b in zip(summed, expect, strict=True))
        top = float(norms.max()) if len(norms) else 0.0
        top_clipped = float(clipped_norms.max()) if len(norms) else 0.0
        _Recording.log.append((len(norms), top, top_clipped, same))


@pytest.mark.parametrize("base", [TINY_RF, TINY_DQN], ids=["reinforce", "dqn"])
def test_per_sample_norm_bound_holds_on_every_update(base: dict) -> None:
    _Recording.log = []
    cfg = DprlConfig(**base, clip=0.5, canaries=4)
    res = train(cfg, seed=1, hooks=TrainerHooks(optimizer_class=_Recording))
    assert res.updates == len(_Recording.log) > 0
    for _n, _raw, clipped, same in _Recording.log:
        assert clipped <= 0.5 * (1 + 1e-5)
        assert same  # what Opacus summed is exactly the clipped per-sample gradients
    assert max(r for _, r, _, _ in _Recording.log) > 0.5  # clipping was active (canaries: 5 C)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_every_update_charged_and_accountant_equals_opacus() -> None:
    from opacus.accountants import PRVAccountant, RDPAccountant

    for base, q in ((TINY_RF, 1.0), (TINY_DQN, 20 / 200)):
        cfg = DprlConfig(**base, noise_multiplier=1.3)
        ledger = Ledger(":memory:")
        res = train(cfg, seed=2, ledger=ledger)
        acc = Accountant(ledger=ledger)
        d = acc.spent_detail("model", delta=1e-5, method="rdp")
        assert d.charges == res.updates > 0
        rdp_acc, prv_acc = RDPAccountant(), PRVAccountant()
        for _ in range(res.updates):
            rdp_acc.step(noise_multiplier=1.3, sample_rate=q)
            prv_acc.step(noise_multiplier=1.3, sample_rate=q)
        assert acc.spent("model", delta=1e-5, method="rdp") == pytest.approx(
            rdp_acc.get_epsilon(1e-5), rel=1e-9
        )
        assert acc.spent("model", delta=1e-5, method="prv") == pytest.approx(
            prv_acc.get_epsilon(1e-5), rel=1e-6
        )
        assert res.privacy["by_method"]["rdp"] == pytest.approx(rdp_acc.get_epsilon(1e-5))
        assert res.privacy["unit"] == ("episode" if base is TINY_RF else "transition")
        ev = GaussianEvent(1.3) if q == 1.0 else PoissonSampledEvent(q, GaussianEvent(1.3))
        assert cfg.update_event() == ev


def test_charge_precedes_noise() -> None:
    """A refused charge means the noisy step never ran (parameters unchanged)."""

    class Refusing:
        ledger = Ledger(":memory:")

        def charge_many(self, charges, scope="local"):  # noqa: ANN001
            raise BudgetExceeded("refused")

        def agents(self, scope=None):  # noqa: ANN001
            return []

    from ldp_audit.training.dprl.algos import train_reinforce

    cfg = DprlConfig(**TINY_RF)
    res = train_reinforce(cfg, seed=0, accountant=Refusing(), hooks=TrainerHooks())
    assert res.updates == 0 and res.stopped and "budget" in res.stopped
    np.testing.assert_array_equal(res.params, res.initial)


def test_a_diverged_policy_is_refused_by_name_not_a_torch_error() -> None:
    """Session 56 probe: ``train dprl --algo reinforce --privacy dpsgd --lr 1e308`` trained one
    update, then exit 3 with torch.multinomial's "probability tensor contains either inf, nan
    or element < 0"."""
    cfg = DprlConfig(**{**TINY_RF, "episodes": 8, "lr": 1e308})
    with pytest.raises(InvalidParameterError, match=r"dprl diverged: .*\(lr=1e\+308\)"):
        train(cfg, seed=0)


def test_budget_stops_training_cleanly(tmp_path) -> None:
    cfg = DprlConfig(**{**TINY_RF, "episodes": 200}, noise_multiplier=2.0, budget_epsilon=3.0)
    res = train(cfg, seed=0, run_dir=tmp_path / "run")
    assert res.stopped and "budget" in res.stopped
    assert 0 < res.updates < cfg.n_updates
    assert res.privacy["by_method"]["rdp"] <= 3.0
    from ldp_audit.rundir import verify_manifest

    assert verify_manifest(tmp_path / "run")["status"] == "complete"


def test_seeded_and_independent_of_global_rng() -> None:
    cfg = DprlConfig(**TINY_DQN, canaries=3)
    torch.manual_seed(123)
    np.random.seed(5)
    state = torch.get_rng_state()
    a = train(cfg, seed=7)
    # nor does it draw from them (nn.Linear's default init drew from torch's, then overwritten)
    assert torch.equal(torch.get_rng_state(), state)
    torch.manual_seed(999)
    np.random.seed(6)
    b = train(cfg, seed=7)
    np.testing.assert_array_equal(a.params, b.params)
    assert a.returns == b.returns
    c = train(cfg, seed=8)
    assert not np.array_equal(a.params, c.params)


def test_run_directory_contents(tmp_path) -> None:
    cfg = DprlConfig(**TINY_RF, canaries=6)
    train(cfg, seed=0, run_dir=tmp_path / "run")
    from ldp_audit.rundir import read_config, read_npz, verify_manifest

    assert read_config(tmp_path / "run")["algorithm"] == "dprl"
    tr = read_npz(tmp_path / "run", "transcript.npz")
    assert tr["update"].shape == (4, cfg.n_params)  # every released noisy update
    assert tr["canary_projection"].shape == (4, 6)
    np.testing.assert_allclose(
        tr["update"].astype(np.float64) @ canary_directions(cfg.n_params, 6, cfg.canary_seed),
        tr["canary_projection"],
        rtol=1e-5,
        atol=1e-6,
    )
    sec = read_npz(tmp_path / "run", "secrets.npz")
    assert sec["canary_included"].shape == (6,)
    assert verify_manifest(tmp_path / "run")["ok"]
    # a run directory is never overwritten silently
    with pytest.raises(RunDirectoryError):
        train(cfg, seed=0, run_dir=tmp_path / "run")


def test_non_private_reinforce_learns() -> None:
    """Sanity: plain REINFORCE improves on CartPole within 240 episodes (seeded)."""
    cfg = DprlConfig(algo="reinforce", privacy="none", episodes=240, num_envs=8)
    res = train(cfg, seed=0)
    r = np.asarray(res.returns)
    assert r[-40:].mean() > 2 * r[:40].mean()
    assert res.privacy["epsilon"] == math.inf


def test_dqn_env_steps_count_transitions_not_autoresets() -> None:
    """DQN's ``env_steps`` is the transitions the agent acted in, as REINFORCE's: Gymnasium's
    vector env spends the step after an episode's end on the reset (no transition), so the
    total_steps vector steps are the transitions plus one per ended episode (but the last, if it
    ended on the final step). It was total_steps, over by one per episode (about 10% for a
    collapsed DP-SGD policy of 11-step episodes)."""
    kw = {**TINY_DQN, "privacy": "none", "total_steps": 160}
    res = train(DprlConfig(**kw), seed=3)
    assert len(res.returns) >= 3  # random play: about 22 steps an episode
    assert res.env_steps + len(res.returns) in (160, 161)
    assert res.env_steps >= sum(res.returns)  # CartPole pays 1 per transition


def test_convergence_episode() -> None:
    assert convergence_episode([500.0] * 25) == 25
    # window ending at episode 34 holds one 10 and 24 x 500: mean 480.4 >= 475
    assert convergence_episode([10.0] * 10 + [500.0] * 30) == 34
    assert convergence_episode([10.0] * 11 + [500.0] * 30) == 35
    assert math.isinf(convergence_episode([474.0] * 100))


def test_canary_directions_orthonormal_and_public() -> None:
    u = canary_directions(50, 7, 3)
    np.testing.assert_allclose(u.T @ u, np.eye(7), atol=1e-12)
    np.testing.assert_array_equal(u, canary_directions(50, 7, 3))


class _InterruptOnThird(DPOptimizer):
    calls = 0

    def pre_step(self, closure=None):  # noqa: ANN001, ANN201
        _InterruptOnThird.calls += 1
        if _InterruptOnThird.calls == 3:
            raise KeyboardInterrupt
        return super().pre_step(closure)


def test_ctrl_c_writes_what_was_released_and_marks_interrupted(tmp_path, npz_writes) -> None:
    from ldp_audit.rundir import read_npz, verify_manifest

    _InterruptOnThird.calls = 0
    cfg = DprlConfig(**{**TINY_RF, "episodes": 40})
    with pytest.raises(KeyboardInterrupt):
        train(cfg, seed=0, run_dir=tmp_path / "run",
              hooks=TrainerHooks(optimizer_class=_InterruptOnThird))  # fmt: skip
    assert verify_manifest(tmp_path / "run")["status"] == "interrupted"
    tr = read_npz(tmp_path / "run", "transcript.npz")
    assert tr["update"].shape[0] == 2  # the two released updates
    acc = Accountant(ledger=Ledger(str(tmp_path / "run" / "ledger.sqlite")))
    # the third update was charged before its noise: charged-not-released is the safe side
    assert acc.spent_detail("model", delta=1e-5, method="rdp").charges == 3
    assert ("transcript.npz", True) in npz_writes and all(
        c for _, c in npz_writes
    )  # session 58: the close inside closing()


def test_ghost_clipping_bound_and_sum_on_every_dqn_update() -> None:
    """DQN's default (ghost clipping): on every update the per-sample norms Opacus computed
    without per-sample gradients, and the clipped sum it produced, equal a per-sample loop's;
    every clipped per-sample gradient has norm <= C."""
    from ldp_audit.training.dprl.algos import make_network

    log: list = []
    clip = 0.05

    def check(net, inputs, norms, clipped_sum) -> None:  # noqa: ANN001
        s, a, y = inputs
        ref = make_network(cfg, torch.Generator())  # a hook-free copy of the network
        ref.load_state_dict(net.state_dict())
        # The residuals q - y come from ONE batched forward, as in training: q and y nearly
        # cancel (norms ~1e-4), so a per-row forward, whose float32 rounding differs from the
        # batched kernel's by ~eps * |q|, would change the residual by a relative 1e-3 and
        # the comparison would test the CPU's kernels instead of the clipping.
        q = ref(s).gather(1, a).squeeze(1)
        params = list(ref.parameters())
        rows = []
        for i in range(len(y)):
            grads = torch.autograd.grad((q[i] - y[i]) ** 2, params, retain_graph=True)
            rows.append(torch.cat([gr.reshape(-1) for gr in grads]))
        g = torch.stack(rows)
        n = g.norm(dim=1)
        f = (clip / (n + 1e-6)).clamp(max=1.0)
        got = torch.cat([t.reshape(-1) for t in clipped_sum])
        want = (g * f[:, None]).sum(0)
        # float32 arithmetic: a norm sums p ~ 1e3 non-negative products (relative error
        # <= p * eps32 ~ 1e-4) and the clipped sum adds len(y) rows of magnitude <= clip; both
        # bounds are scaled by the batch's largest term, not by one machine's rounding.
        eps32 = float(torch.finfo(torch.float32).eps)
        p = g.shape[1]
        log.append(
            (
                bool(((norms - n).abs() <= p * eps32 * n.max()).all()),
                bool(((got - want).abs() <= 4 * len(y) * eps32 * clip + 1e-4 * want.abs()).all()),
                float((n * f).max()),
                float(n.max()),
            )
        )

    cfg = DprlConfig(**TINY_DQN, clip=clip, canaries=4)
    assert cfg.ghost
    res = train(cfg, seed=1, hooks=TrainerHooks(inspect_ghost=check))
    assert len(log) > 0 and res.updates >= len(log)
    for same_norms, same_sum, top_clipped, _ in log:
        assert same_norms and same_sum
        assert top_clipped <= clip * (1 + 1e-5)
    assert max(r for *_, r in log) > clip  # clipping was active


def test_ghost_and_materialized_paths_release_the_same_update() -> None:
    """Same seed, same data: the first released noisy update (canaries included) agrees."""
    out = []
    for mode in ("ghost", "materialize"):
        cfg = DprlConfig(**TINY_DQN, clip=0.5, canaries=4, per_sample=mode, store_updates=True)
        out.append(train(cfg, seed=3).transcript["update"][0])
    np.testing.assert_allclose(out[0], out[1], rtol=1e-4, atol=1e-6)
    with pytest.raises(InvalidParameterError, match="per_sample"):
        DprlConfig(**TINY_DQN, per_sample="fast")


@pytest.mark.parametrize(
    "kw, words",
    [
        (dict(TINY_RF, noise_multiplier=0.0), "(inf, 1e-05)-DP over 4 updates (ledger: noise "),
        (dict(TINY_DQN, total_steps=1), "(0, 1e-05)-DP over 0 updates (ledger: nothing charged)"),
    ],
)
def test_privacy_words_say_why_no_method_is_listed(kw: dict, words: str) -> None:
    """sigma 0 or no update: the ledger lists no method; the words say why (was "(ledger: )")."""
    assert words in train(DprlConfig(**kw), seed=0).privacy["words"]
