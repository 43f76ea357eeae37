"""The trainer's DP-SGD step against a plain one written with torch autograd (issue: probe s46).

One REINFORCE batch (4 episodes of synthetic states, actions and advantages) through the
trainer's own pieces (``make_network``, Opacus ``GradSampleModule``, :class:`DpSgdUpdate`) and
through a loop: each episode's whole gradient by ``torch.autograd.grad``, clipped to C with
Opacus's factor ``min(1, C / (norm + 1e-6))``, summed, plus N(0, (sigma C)^2) drawn from a copy
of the run's generator (per tensor, in parameter order), divided by the batch; then one Adam
step. The released update, the charge and the new parameters must agree to float tolerance.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from opacus import GradSampleModule

from ldp_audit.accountant import Accountant, GaussianEvent, Ledger
from ldp_audit.training.dprl.algos import make_network, quiet_opacus_warnings
from ldp_audit.training.dprl.config import DprlConfig
from ldp_audit.training.dprl.privacy import DpSgdUpdate, TrainerHooks

B, T = 4, 7


def _loss(net, x, act, adv):  # noqa: ANN001, ANN202
    """The trainer's REINFORCE loss per episode: -sum_t A_t log pi(a_t | s_t)."""
    lp = torch.log_softmax(net(x), dim=-1).gather(-1, act.unsqueeze(-1)).squeeze(-1)
    return -(adv * lp).sum(dim=-1)


@pytest.mark.parametrize("sigma, clip", [(0.0, 0.5), (1.3, 0.5), (0.7, 1e3), (1e-6, 1e-3)])
def test_dpsgd_step_equals_a_plain_per_sample_clip_and_noise_step(sigma: float, clip: float):
    quiet_opacus_warnings()
    cfg = DprlConfig(algo="reinforce", privacy="dpsgd", noise_multiplier=sigma, clip=clip,
                     num_envs=B, hidden=8, dropout=0.0, episodes=B)  # fmt: skip
    data = torch.Generator().manual_seed(5)
    x = torch.randn(B, T, 4, generator=data)
    act = torch.randint(0, 2, (B, T), generator=data)
    adv = torch.randn(B, T, generator=data, dtype=torch.float64).float()

    gen = torch.Generator().manual_seed(11)
    net = make_network(cfg, gen)
    ref = make_network(cfg, torch.Generator().manual_seed(11))  # the same initial weights
    ref_params = list(ref.parameters())
    ref_gen = torch.Generator().manual_seed(0)
    ref_gen.set_state(gen.get_state())  # the noise draws the optimizer will make

    # the trainer's step
    ledger = Ledger(":memory:")
    model = GradSampleModule(net, batch_first=True, loss_reduction="sum")
    opt = torch.optim.Adam(net.parameters(), lr=cfg.learning_rate)
    dp = DpSgdUpdate(cfg, model, opt, Accountant(ledger=ledger), gen, TrainerHooks())
    dp.opt.zero_grad()
    _loss(model, x, act, adv).sum().backward()
    assert dp.step() is None
    released = dp.arrays()["update"][0]

    # the plain step
    total = [torch.zeros_like(p) for p in ref_params]
    for i in range(B):
        grads = torch.autograd.grad(_loss(ref, x[i : i + 1], act[i : i + 1], adv[i : i + 1]).sum(),
                                    ref_params)  # fmt: skip
        norm = torch.sqrt(sum((g.double() ** 2).sum() for g in grads))
        factor = min(1.0, clip / (float(norm) + 1e-6))
        total = [s + factor * g for s, g in zip(total, grads, strict=True)]
    noisy = []
    for s in total:
        noise = torch.normal(0.0, sigma * clip, size=s.shape, generator=ref_gen) if sigma else 0
        noisy.append((s + noise) / B)
    expected = torch.cat([g.reshape(-1) for g in noisy]).numpy()
    tol = 1e-6 * max(1.0, sigma * clip)
    np.testing.assert_allclose(released, expected, rtol=1e-5, atol=tol)

    ref_opt = torch.optim.Adam(ref_params, lr=cfg.learning_rate)
    for p, g in zip(ref_params, noisy, strict=True):
        p.grad = g.clone()
    ref_opt.step()
    for p, r in zip(net.parameters(), ref_params, strict=True):
        torch.testing.assert_close(p.detach(), r.detach(), rtol=1e-5, atol=1e-6)

    acc = Accountant(ledger=ledger)
    assert acc.spent_detail("model", delta=1e-5, method="rdp").charges == 1
    if sigma:
        assert cfg.update_event() == GaussianEvent(sigma)


def test_trainer_update_equals_textbook_reinforce_of_the_played_episodes(monkeypatch) -> None:
    """``train`` end to end (dropout 0: no layer, it crashed on an empty mask list before) against
    textbook REINFORCE of the episodes the env actually played (recorded at the env): returns
    G_t = 1 + gamma G_{t+1}, normalised per episode (population std), loss -sum_t A_t log pi,
    each episode's gradient clipped to C, averaged; sigma 0, so the released update is exact."""
    import gymnasium as gym

    from ldp_audit.training.dprl.trainer import train

    steps: list[tuple] = []
    make = gym.make_vec

    class Recorder(gym.vector.VectorWrapper):
        def reset(self, **kw):  # noqa: ANN003, ANN202
            obs, info = self.env.reset(**kw)
            steps.append((obs.copy(), None, None))
            return obs, info

        def step(self, actions):  # noqa: ANN001, ANN202
            obs, rew, term, trunc, info = self.env.step(actions)
            steps.append((obs.copy(), np.array(actions), term | trunc))
            return obs, rew, term, trunc, info

    monkeypatch.setattr(gym, "make_vec", lambda *a, **k: Recorder(make(*a, **k)))
    clip = 0.05
    cfg = DprlConfig(algo="reinforce", privacy="dpsgd", noise_multiplier=0.0, clip=clip,
                     num_envs=2, hidden=8, dropout=0.0, episodes=2, store_updates=True)  # fmt: skip
    res = train(cfg, seed=3)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    torch.nn.utils.vector_to_parameters(torch.tensor(res.initial, dtype=torch.float32),
                                        net.parameters())  # fmt: skip
    total = 0.0
    for e in range(2):
        states, actions = [steps[0][0][e]], []
        for obs, act, done in steps[1:]:
            actions.append(int(act[e]))
            if done[e]:
                break
            states.append(obs[e])
        g = np.zeros(len(actions))
        for t in reversed(range(len(actions))):
            g[t] = 1.0 + cfg.gamma * (g[t + 1] if t + 1 < len(actions) else 0.0)
        adv = torch.tensor((g - g.mean()) / (g.std() + 1e-8), dtype=torch.float32)
        logp = torch.log_softmax(net(torch.tensor(np.array(states))), -1)
        loss = -(adv * logp[torch.arange(len(actions)), torch.tensor(actions)]).sum()
        grads = torch.autograd.grad(loss, list(net.parameters()))
        flat = torch.cat([x.reshape(-1) for x in grads]).double().numpy()
        assert res.returns[e] == len(actions)
        total = total + flat * min(1.0, clip / (np.linalg.norm(flat) + 1e-6))
    np.testing.assert_allclose(res.transcript["update"][0], total / 2, rtol=1e-4, atol=1e-7)
