"""``device`` of the torch trainers (FedRL, DP-SGD RL): CPU results unchanged, clear refusals.

Nothing here needs a GPU: ``torch.cuda.is_available`` is patched where a test needs "no CUDA",
and the GPU path itself is measured by ``benchmarks/gpu_check.sh`` on a machine that has one.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import pytest
import torch

from ldp_audit.cli import main
from ldp_audit.errors import InvalidParameterError
from ldp_audit.training.device import resolve_device
from ldp_audit.training.dprl import DprlConfig, train
from ldp_audit.training.dprl_privacy import cpu_noise_optimizer as _cpu_noise
from ldp_audit.training.fedrl import FedRLConfig, run_fedrl, train_fedrl
from ldp_audit.training.fedrl.runs import log_arrays

torch.set_num_threads(1)

FEDRL = dict(size=8, n_maps=100, train_steps=30, n_envs=4, batch_size=8, learning_starts=16,
             eval_maps=5, target_update=5, prepay_block=7, clip_outputs=1.0, runs=2)  # fmt: skip
RF = dict(algo="reinforce", privacy="dpsgd", episodes=16, num_envs=4, hidden=16, clip=0.5,
          canaries=4)  # fmt: skip
DQN = dict(algo="dqn", privacy="dpsgd", total_steps=240, learning_starts=100, buffer_size=200,
           batch_size=20, train_frequency=4, hidden=16, canaries=3)  # fmt: skip

#: sha256 of every output of the tiny runs below, computed with the trainers BEFORE the device
#: option existed (commit a8a46b9, torch 2.13.0+cpu, this repository's .venv): with
#: ``device="cpu"`` the trainers must still produce exactly these bytes.
PRE_CHANGE = {
    "fedrl": "c9436e15c96c87e2029b5cc5a90d49a6b5703940566376ea375e702e224470b6",
    "reinforce-dpsgd": "acf612ab94c11f1d2b9d4e3e02cf2b4ce81c586ecb5f9333ee144b2dc6524804",
    "dqn-ghost": "64a78e9ed855246342e138bc3d5d9c63e4cc52a15c857add1841831979d7334f",
    "dqn-materialize": "744a4bcd6bc6c7c402ff8fbfbbcf8aadf07cf5de08065f22774f2a480701fb82",
    "dqn-none": "1e845cc726d8a456a1543b0804225a8acd1de85a9db92aa4bd138d6c50a5c160",
}
#: the digests are bytes of float32 arithmetic: another torch build may round differently
pinned = pytest.mark.skipif(
    torch.__version__ != "2.13.0+cpu",
    reason=f"digests were computed with torch 2.13.0+cpu, this is {torch.__version__}",
)


def _feed(h: Any, key: str, v: Any) -> None:
    """Hash ``v`` (nested dicts / lists of dicts / arrays / scalars) with its key, dtype, shape."""
    h.update(key.encode())
    if isinstance(v, dict):
        for k in sorted(v):
            _feed(h, f"{key}/{k}", v[k])
        return
    if isinstance(v, (list, tuple)) and v and isinstance(v[0], dict):
        for i, x in enumerate(v):
            _feed(h, f"{key}[{i}]", x)
        return
    if v is None:
        h.update(b"None")
        return
    a = np.asarray(v)
    if a.dtype == object:
        h.update(repr(v).encode())
        return
    h.update(str(a.dtype).encode())
    h.update(str(a.shape).encode())
    h.update(np.ascontiguousarray(a).tobytes())


def _fedrl_digest(**kw: Any) -> str:
    res = run_fedrl(FedRLConfig(**FEDRL, **kw), seed=5, record=True)
    h = hashlib.sha256()
    tr, sec = log_arrays(res["log"])
    _feed(h, "tr", tr)
    _feed(h, "sec", sec)
    for r in res["results"]:
        _feed(h, "state", r["state"])
        for k in ("DQN-alpha", "DQN-full", "FedRL-1", "FedRL-2"):
            if k in r:
                _feed(h, k, dict(r[k]))
        _feed(h, "loss", r["final_loss"])
        _feed(h, "curve", r["curve_success"])
    return h.hexdigest()


def _dprl_digest(**kw: Any) -> str:
    res = train(DprlConfig(**kw), seed=3)
    h = hashlib.sha256()
    _feed(h, "returns", res.returns)
    _feed(h, "params", res.params)
    _feed(h, "initial", res.initial)
    _feed(h, "tr", res.transcript)
    _feed(h, "sec", res.secrets)
    return h.hexdigest()


@pinned
def test_fedrl_cpu_bit_for_bit() -> None:
    """All three methods, two batched runs, clipped noisy exchanges: transcript, secrets,
    final weights, evaluations and curves are the bytes the trainer gave before ``device``."""
    assert _fedrl_digest(device="cpu") == PRE_CHANGE["fedrl"]


@pinned
@pytest.mark.parametrize(
    "name, kw",
    [
        ("reinforce-dpsgd", RF),  # dropout masks, multinomial actions, canaries, Opacus noise
        ("dqn-ghost", DQN),  # ghost clipping, Poisson batches, canaries
        pytest.param(
            "dqn-materialize", {**DQN, "per_sample": "materialize"}, marks=pytest.mark.slow
        ),
        pytest.param("dqn-none", {**DQN, "privacy": "none", "canaries": 0}, marks=pytest.mark.slow),
    ],
)
def test_dprl_cpu_bit_for_bit(name: str, kw: dict) -> None:
    assert _dprl_digest(**kw, device="cpu") == PRE_CHANGE[name]


@pytest.mark.parametrize("bad", ["gpu", "CUDA", "", None, 0, True, ("cpu",)])
def test_bad_device_values_refused(bad: Any) -> None:
    with pytest.raises(InvalidParameterError, match="device must be one of cpu, cuda, auto"):
        FedRLConfig(device=bad)
    with pytest.raises(InvalidParameterError, match="device must be one of cpu, cuda, auto"):
        DprlConfig(device=bad)


@pytest.fixture
def no_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_resolve_without_cuda(no_cuda: None) -> None:
    assert resolve_device("auto") == "cpu"
    assert resolve_device("cpu") == "cpu"
    with pytest.raises(InvalidParameterError, match=r"device 'cuda' needs a CUDA device.*torch"):
        resolve_device("cuda")


def test_cuda_without_cuda_refused_before_work(no_cuda: None, tmp_path: Any) -> None:
    """A config naming cuda is a valid config (a run directory made on a GPU can be read back
    anywhere); training it without CUDA is refused before any file or draw."""
    cfg = FedRLConfig(**FEDRL, device="cuda")
    assert FedRLConfig.from_dict(cfg.to_dict()).device == "cuda"
    with pytest.raises(InvalidParameterError, match="device 'cuda' needs a CUDA device"):
        run_fedrl(cfg, seed=0)
    with pytest.raises(InvalidParameterError, match="device 'cuda' needs a CUDA device"):
        train_fedrl(cfg, tmp_path / "f")
    assert not (tmp_path / "f").exists()
    d = DprlConfig(**RF, device="cuda")
    with pytest.raises(InvalidParameterError, match="device 'cuda' needs a CUDA device"):
        train(d, seed=0, run_dir=tmp_path / "d")
    assert not (tmp_path / "d").exists()


def test_device_recorded(tmp_path: Any) -> None:
    import json

    cfg = FedRLConfig(**{**FEDRL, "train_steps": 2, "runs": 1}, methods=("dqn-alpha",),
                      device="auto")  # fmt: skip
    want = "cuda" if torch.cuda.is_available() else "cpu"
    metrics = train_fedrl(cfg, tmp_path / "f")
    doc = json.loads((tmp_path / "f" / "config.json").read_text())
    assert doc["config"]["device"] == "auto" and doc["device"] == want
    assert metrics["device"] == want
    train(DprlConfig(**{**RF, "episodes": 4, "canaries": 0}), seed=0, run_dir=tmp_path / "d")
    doc = json.loads((tmp_path / "d" / "config.json").read_text())
    assert doc["config"]["device"] == "cpu" and doc["device"] == "cpu"
    assert json.loads((tmp_path / "d" / "metrics.json").read_text())["device"] == "cpu"


@pytest.mark.parametrize("algo", ["fedrl", "dprl"])
def test_cli_device(algo: str, no_cuda: None, tmp_path: Any, capsys: Any) -> None:
    base = ["train", "fedrl", "--n-maps", "100", "--eval-maps", "5", "--train-steps", "2"]
    if algo == "dprl":
        base = ["train", "dprl", "--algo", "reinforce", "--privacy", "dpsgd", "--episodes", "4"]
    for bad in ("gpu", "CUDA", ""):
        with pytest.raises(SystemExit) as e:
            main([*base, "--device", bad, "--out", str(tmp_path / "x")])
        assert e.value.code == 2
        assert "--device" in capsys.readouterr().err
    code = main([*base, "--device", "cuda", "--out", str(tmp_path / "x"), "--no-progress"])
    assert code == 2
    err = capsys.readouterr().err
    assert "--device 'cuda' needs a CUDA device" in err and "Traceback" not in err
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("secure", [False, True])
@pytest.mark.parametrize("ghost", [False, True])
def test_cpu_noise_is_opacus_noise(ghost: bool, secure: bool) -> None:
    """Off the CPU the DP-SGD noise is drawn on the CPU generator and moved (our own draws, no
    Opacus private name): on the CPU that optimizer gives exactly Opacus's own noisy gradient
    (same generator, order and shape), in secure mode too; a sum noised twice is refused."""
    from opacus.optimizers import DPOptimizer, DPOptimizerFastGradientClipping

    base = DPOptimizerFastGradientClipping if ghost else DPOptimizer
    out, opts = [], []
    for cls in (base, _cpu_noise(base)):
        net = torch.nn.Linear(5, 3)
        opt = cls(
            torch.optim.SGD(net.parameters(), lr=0.1),
            noise_multiplier=1.3,
            max_grad_norm=0.7,
            expected_batch_size=4,
            generator=torch.Generator().manual_seed(11),
            secure_mode=secure,
        )
        for i, p in enumerate(net.parameters()):
            p.summed_grad = torch.full(p.shape, 0.25 * (i + 1))
        opt.add_noise()
        out.append([p.grad.clone() for p in net.parameters()])
        opts.append(opt)
    assert all(torch.equal(a, b) for a, b in zip(*out, strict=True))
    assert not torch.equal(out[0][1], torch.full_like(out[0][1], 0.5))  # noise was added
    for opt in opts:  # noising the same sum again (no zero_grad between) is refused by both
        with pytest.raises(ValueError, match="zero_grad"):
            opt.add_noise()
    opts[1].zero_grad()  # drops the sums; a new sum is noised again
    for p in opts[1].params:
        p.summed_grad = torch.zeros(p.shape)
    opts[1].add_noise()

    class Fixture(DPOptimizer):  # a test fixture's own add_noise is left alone
        def add_noise(self) -> None:
            pass

    assert _cpu_noise(Fixture) is Fixture


@pytest.mark.slow
def test_gpu_bench_self_test(tmp_path: Any) -> None:
    """benchmarks/bench_gpu.py's closeness checks, with the CPU standing in for CUDA: every
    check runs and passes (differences are 0), so the script's plumbing works without a GPU."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    out = tmp_path / "g.json"
    r = subprocess.run(
        [sys.executable, str(root / "benchmarks" / "bench_gpu.py"), "--quick", "--self-test",
         "--out", str(out)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    doc = json.loads(out.read_text())
    checks = [c for st in doc["stages"].values() for c in st.get("checks", [])]
    assert len(checks) == 15 and all(c["ok"] for c in checks) and not doc["failures"]
