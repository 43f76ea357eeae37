"""The batched network evaluation of the FedRL trainer (training.fedrl._Stacked) computes exactly
the torch modules' function and gradients, for every architecture, and the trainer's thread
setting is validated and restored."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from ldp_audit.errors import InvalidParameterError  # noqa: E402
from ldp_audit.training.fedrl import networks as N  # noqa: E402
from ldp_audit.training.fedrl.config import FedRLConfig  # noqa: E402
from ldp_audit.training.fedrl.gridworld import ALPHA_VIEW, BETA_VIEW, generate_maps  # noqa: E402
from ldp_audit.training.fedrl.runs import run_fedrl, train_fedrl  # noqa: E402

K, B, H = 3, 7, 4


def _gens() -> list:
    return [torch.Generator().manual_seed(10 + i) for i in range(K)]


def _cases() -> list:
    g = torch.Generator().manual_seed(0)
    xa = torch.randint(0, 2, (K, B, H, ALPHA_VIEW, ALPHA_VIEW), generator=g).float()
    xb = torch.randint(0, 2, (K, B, H, BETA_VIEW, BETA_VIEW), generator=g).float()
    xm = torch.randn(K, B, 2 * 16, generator=g)
    return [
        ("qa", N.Stacked(lambda: N.local_q(ALPHA_VIEW, H), _gens(), N.fwd_local_q, 3), (xa,)),
        ("qb", N.Stacked(lambda: N.local_q(BETA_VIEW, H), _gens(), N.fwd_local_q, 5), (xb,)),
        ("qf", N.Stacked(lambda: N.full_q_class()(H), _gens(), N.fwd_full_q), (xa, xb)),
        ("g", N.Stacked(N.mlp, _gens(), N.fwd_mlp), (xm,)),
    ]


@pytest.mark.parametrize("case", range(4))
def test_stacked_forward_and_gradients_match_torch_modules(case: int) -> None:
    name, st, xs = _cases()[case]
    # reference: vmap(functional_call) of the module on the torch-layout parameters
    base = copy.deepcopy(st.module).to("meta")
    ref_p = {k: v.clone().requires_grad_(True) for k, v in st.torch_params().items()}
    ref = torch.vmap(lambda p, *x: torch.func.functional_call(base, p, x))(ref_p, *xs)
    out = st(*xs)
    assert out.shape == (K, B, 16)
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), atol=1e-5, rtol=1e-5)
    # the same weighted loss gives the same gradients (in torch's layout)
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    g_ours = torch.autograd.grad((out * w).sum(), list(st.params.values()))
    g_ref = torch.autograd.grad((ref * w).sum(), list(ref_p.values()))
    for (n, _), go, gr in zip(st.params.items(), g_ours, g_ref, strict=True):
        go = st.to_torch(n, go)
        np.testing.assert_allclose(go.numpy(), gr.numpy(), atol=1e-4, rtol=1e-4, err_msg=n)
    # state(k) is run k's module state dict: loading it reproduces run k's outputs
    for k in range(K):
        m = copy.deepcopy(st.module)
        m.load_state_dict({n: torch.as_tensor(v) for n, v in st.state(k).items()})
        with torch.no_grad():
            single = m(*(x[k] for x in xs))
        np.testing.assert_allclose(single.numpy(), out[k].detach().numpy(), atol=1e-5, rtol=1e-5)


def test_runs_are_independent() -> None:
    """Changing run 0's parameters changes nothing in runs 1.. (no mixing across K)."""
    _, st, xs = _cases()[1]
    before = st(*xs).detach().clone()
    with torch.no_grad():
        for v in st.params.values():
            v[0].add_(1.0)
    after = st(*xs).detach()
    assert not torch.allclose(after[0], before[0])
    assert torch.equal(after[1:], before[1:])


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True, 2**63 - 1])  # the last: torch ValueError
def test_threads_validated_before_work(bad: object, tmp_path) -> None:  # noqa: ANN001
    cfg = FedRLConfig(n_maps=20, eval_maps=1, train_steps=1, methods=("dqn-alpha",))
    with pytest.raises(InvalidParameterError, match="threads"):
        run_fedrl(cfg, seed=0, threads=bad)
    with pytest.raises(InvalidParameterError, match="threads"):
        train_fedrl(cfg, tmp_path / "run", threads=bad)
    assert not (tmp_path / "run").exists()


def test_threads_restored_after_training() -> None:
    old = torch.get_num_threads()
    cfg = FedRLConfig(
        n_maps=20, eval_maps=1, train_steps=2, learning_starts=1, methods=("dqn-alpha",)
    )
    maps = generate_maps(8, 20, seed=0)
    run_fedrl(cfg, seed=0, maps=maps, record=False, threads=1)
    assert torch.get_num_threads() == old


@pytest.mark.parametrize(
    ("args", "msg"),
    [
        (["train", "fedrl", "--threads", "0"], "--threads must be an integer >= 1, got '0'"),
        (["reproduce", "fedrl", "--threads", "x"], "--threads must be an integer >= 1, got 'x'"),
        (["reproduce", "fedrl", "--fig4-steps", "0"], "--fig4-steps must be an integer >= 1"),
    ],
)
def test_cli_new_options_refuse_bad_values(tmp_path, capsys, args, msg) -> None:  # noqa: ANN001
    from ldp_audit.cli import main

    out = tmp_path / "never"
    with pytest.raises(SystemExit) as e:
        main([*args, "--out", str(out)])
    assert e.value.code == 2 and msg in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("verb", ["train", "reproduce"])
def test_cli_threads_far_above_the_cores_are_refused_before_any_work(
    verb: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Session 56 probe: ``reproduce fedrl --threads 9223372036854775807`` reached
    torch.set_num_threads: exit 3 ("Overflow when unpacking long") after the report folder was
    made. Refused like ``--workers``: at most 4 x the cores."""
    import os

    from ldp_audit.cli import main

    out = tmp_path / "never"
    n = 4 * (os.cpu_count() or 1) + 1
    assert main([verb, "fedrl", "--threads", str(n), "--out", str(out)]) == 2
    assert f"--threads must be <= {n - 1} (4 x the" in capsys.readouterr().err
    assert not out.exists()


def test_cli_reproduce_fig4_steps_and_cpu_time(tmp_path, capsys) -> None:  # noqa: ANN001
    """--fig4-steps trains Figure 4 at its own scale (Table 1's H is then retrained, not
    reused); the report records wall and CPU time and the threads."""
    import json

    from ldp_audit.cli import main

    out = tmp_path / "rep"
    args = ["reproduce", "fedrl", "--sizes", "8", "--runs", "2", "--train-steps", "12"]
    args += ["--n-envs", "4", "--n-maps", "100", "--eval-maps", "3", "--hist-lens", "4"]
    args += ["--fig4-runs", "1", "--fig4-steps", "8", "--attack-sigmas", "--audit-samples", "0"]
    assert main([*args, "--no-progress", "--out", str(out)]) == 0
    capsys.readouterr()
    res = json.loads((out / "results.json").read_text())
    fig4 = res["fig4"]["4"]
    assert "reused" not in fig4 and fig4["train_steps"] == 8
    assert next(iter(fig4["table"].values()))["runs"] == 1
    assert res["table1"]["8"]["train_steps"] == 12
    assert 0 < res["cpu_seconds_total"] and res["config"]["threads"] == 1
    rp = res["table1"]["8"]["random_policy"]
    assert rp["episodes"] == 3 * 3 and 0 <= rp["successes"] <= 9
    assert rp["cp95"][0] <= rp["successes"] / 9 <= rp["cp95"][1]
    md = (out / "README.md").read_text()
    flat = " ".join(md.split())  # prose is wrapped at 100 columns
    assert "CPU time of the command's own process" in flat and "H = 4: 1 x 8 iterations" in md
    assert "Uniformly random joint policy on the same test maps" in md


def test_one_fedrl_update_is_the_straightforward_step_of_eqs_4_to_7() -> None:
    """The shipped minibatch step (trainer._update, K runs at once, noise-free exchange: sigma 0,
    no clip) is, for every run, the plain step on torch modules: Y = r + gamma (1 - d) max_a
    MLP'([Q'_alpha(s'), Q'_beta(s')]) from the target networks, loss = mean over the batch of
    (MLP([Q_alpha(s), Q_beta(s)])[a] - Y)^2, each network's gradient through its own output."""
    from ldp_audit.accountant import Accountant
    from ldp_audit.training.fedrl.exchange import Exchange, Log
    from ldp_audit.training.fedrl.trainer import _Replay, _update

    cfg = FedRLConfig(sigma=0.0, n_maps=20, eval_maps=1, batch_size=B, gamma=0.9)
    nets = {name: st for name, st, _ in _cases() if name != "qf"}
    nets["qa"], nets["qb"], nets["g"] = nets.pop("qa"), nets.pop("qb"), nets.pop("g")
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():  # online networks apart from their targets, as after some training
        for st in nets.values():
            for v in st.params.values():
                v.add_(0.05 * torch.randn(v.shape, generator=g))
    targets = {n: {p: st.to_torch(p, v) for p, v in st.target.items()} for n, st in nets.items()}
    online = {n: {p: v.clone() for p, v in st.torch_params().items()} for n, st in nets.items()}
    rng = np.random.default_rng(3)
    reps = []
    for _ in range(K):
        rep = _Replay(B, H)
        sa, sa2 = (rng.integers(0, 2, (B, H, ALPHA_VIEW, ALPHA_VIEW)) for _ in range(2))
        sb, sb2 = (rng.integers(0, 2, (B, H, BETA_VIEW, BETA_VIEW)) for _ in range(2))
        rep.add(sa, sb, rng.integers(0, 16, B), rng.normal(size=B), sa2, sb2,
                rng.random(B) < 0.3, np.zeros(B))  # fmt: skip
        reps.append(rep)
    j = np.stack([rng.permutation(B) for _ in range(K)])
    rngs = {"alpha": np.random.default_rng(4), "beta": np.random.default_rng(5)}
    ex = Exchange(cfg, range(K), Accountant(), rngs, Log(record=False))
    ex.prepay_training(0, 1)
    params = [p for st in nets.values() for p in st.params.values()]
    # SGD at lr 1 (the trainer's Adam is torch's, element-wise: its first step is sign(gradient),
    # which float32 summation order flips on gradients near 0): the parameters move by -gradient
    loss = _update("fedrl", cfg, nets, reps, j, torch.optim.SGD(params, lr=1.0), ex)

    def module(name: str, state: dict, k: int):  # run k's network as a torch module
        m = copy.deepcopy(nets[name].module)
        m.load_state_dict({p: v[k].clone() for p, v in state.items()})
        return m

    want = 0.0
    for k, rep in enumerate(reps):
        x = {n: torch.as_tensor(getattr(rep, n)[j[k]]) for n in ("sa", "sb", "sa2", "sb2")}
        qa, qb, mlp = (module(n, online[n], k) for n in ("qa", "qb", "g"))
        with torch.no_grad():
            t = {n: module(n, targets[n], k) for n in ("qa", "qb", "g")}
            nxt = t["g"](torch.cat([t["qa"](x["sa2"]), t["qb"](x["sb2"])], -1)).max(-1).values
        y = rep.r[j[k]] + cfg.gamma * (1.0 - rep.d[j[k]]) * nxt.double().numpy()
        q = mlp(torch.cat([qa(x["sa"]), qb(x["sb"])], -1))
        taken = q.gather(-1, torch.as_tensor(rep.a[j[k]])[:, None]).squeeze(-1)
        lk = ((taken - torch.as_tensor(y, dtype=torch.float32)) ** 2).mean()
        mods = (qa, qb, mlp)
        opt = torch.optim.SGD([p for m in mods for p in m.parameters()], lr=1.0)
        lk.backward()
        opt.step()
        want += float(lk.detach())
        for name, m in zip(("qa", "qb", "g"), mods, strict=True):
            for p, v in m.state_dict().items():
                got = nets[name].state(k)[p]
                np.testing.assert_allclose(got, v.numpy(), rtol=1e-4, atol=1e-5, err_msg=p)
    assert loss == pytest.approx(want, rel=1e-5)


def test_a_diverged_run_is_refused_by_name_before_its_release() -> None:
    """Session 56 probe: ``train fedrl --lr 1e308`` (or 1e6) was refused as "x must be finite;
    found nan at index (0, 0)" (the release's input check), naming no option."""
    cfg = FedRLConfig(
        n_maps=20, eval_maps=1, train_steps=20, learning_starts=1, methods=("fedrl",), lr=1e308
    )
    maps = generate_maps(8, 20, seed=0)
    with pytest.raises(InvalidParameterError, match=r"fedrl diverged: .*\(lr=1e\+308\)"):
        run_fedrl(cfg, seed=0, maps=maps, record=False, threads=1)
