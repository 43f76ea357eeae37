"""``device`` of the torch trainers (FedRL, DP-SGD RL): CPU results unchanged, clear refusals.

Nothing here needs a GPU: ``torch.cuda.is_available`` is patched where a test needs "no CUDA",
and the GPU path itself is measured by ``benchmarks/gpu_check.sh`` on a machine that has one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from ldp_audit.cli import main
from ldp_audit.errors import InvalidParameterError
from ldp_audit.training.device import resolve_device
from ldp_audit.training.dprl.config import DprlConfig
from ldp_audit.training.dprl.privacy import cpu_noise_optimizer as _cpu_noise
from ldp_audit.training.dprl.trainer import train
from ldp_audit.training.fedrl.config import FedRLConfig
from ldp_audit.training.fedrl.runs import log_arrays, run_fedrl, train_fedrl
from tests.golden_machine import check_golden, machine_signature, tree_entries

torch.set_num_threads(1)

FEDRL = dict(size=8, n_maps=100, train_steps=30, n_envs=4, batch_size=8, learning_starts=16,
             eval_maps=5, target_update=5, prepay_block=7, clip_outputs=1.0, runs=2)  # fmt: skip
RF = dict(algo="reinforce", privacy="dpsgd", episodes=16, num_envs=4, hidden=16, clip=0.5,
          canaries=4)  # fmt: skip
DQN = dict(algo="dqn", privacy="dpsgd", total_steps=240, learning_starts=100, buffer_size=200,
           batch_size=20, train_frequency=4, hidden=16, canaries=3)  # fmt: skip

#: golden entries (tests/data/device_golden.json, dtype-tagged: tests/golden_machine.py) of every
#: output of the tiny runs below, made from the trainers BEFORE the device option existed
#: (commit a8a46b9, torch 2.13.0+cpu; the file's entries were rewritten from the same runs after
#: the former whole-run SHA-256 was checked equal on that machine): with ``device="cpu"`` the
#: trainers must still produce exactly these bytes. Integer and boolean arrays (actions, Poisson
#: joins, canary bits) are compared on every machine, float arrays on the golden's CPU family.
GOLDEN_FILE = Path(__file__).parent / "data" / "device_golden.json"
#: the digests are bytes of float32 arithmetic: another torch build may round differently
pinned = pytest.mark.skipif(
    torch.__version__ != "2.13.0+cpu",
    reason=f"goldens were computed with torch 2.13.0+cpu, this is {torch.__version__}",
)


def policy_derived(key: str) -> bool:
    """Integer outputs of FedRL that follow the learned policy (successes, visited states,
    bumps, rewards): bit for bit on the golden's CPU family only."""
    return any(w in key for w in ("successes", "path_ratio", "obs", "bump", "reward", "loss"))


def _fedrl_entries(**kw: Any) -> dict[str, str]:
    res = run_fedrl(FedRLConfig(**FEDRL, **kw), seed=5, record=True)
    tr, sec = log_arrays(res["log"])
    runs = []
    for r in res["results"]:
        run = {"state": r["state"], "loss": r["final_loss"], "curve": r["curve_success"]}
        methods = ("DQN-alpha", "DQN-full", "FedRL-1", "FedRL-2")
        run.update({k: dict(r[k]) for k in methods if k in r})
        runs.append(run)
    return tree_entries({"tr": tr, "sec": sec, "runs": runs}, machine_dependent=policy_derived)


def _dprl_entries(**kw: Any) -> dict[str, str]:
    from tests.dprl_canary_golden import NEWER_ARRAYS  # written since the golden: not in it

    res = train(DprlConfig(**kw), seed=3)
    tr, sec = ({k: v for k, v in d.items() if k not in NEWER_ARRAYS}
               for d in (res.transcript, res.secrets))  # fmt: skip
    return tree_entries({"returns": res.returns, "params": res.params, "initial": res.initial,
                         "tr": tr, "sec": sec})  # fmt: skip


CASES = {
    "fedrl": lambda: _fedrl_entries(device="cpu"),
    "reinforce-dpsgd": lambda: _dprl_entries(**RF, device="cpu"),
    "dqn-ghost": lambda: _dprl_entries(**DQN, device="cpu"),
    "dqn-materialize": lambda: _dprl_entries(**DQN, per_sample="materialize", device="cpu"),
    "dqn-none": lambda: _dprl_entries(**{**DQN, "privacy": "none", "canaries": 0}, device="cpu"),
}


def _golden(name: str) -> dict[str, str]:
    g = json.loads(GOLDEN_FILE.read_text())
    return {**g[name], "_machine": g["_machine"]}


@pinned
def test_fedrl_cpu_bit_for_bit() -> None:
    """All three methods, two batched runs, clipped noisy exchanges: transcript, secrets,
    final weights, evaluations and curves are the bytes the trainer gave before ``device``."""
    check_golden(CASES["fedrl"](), _golden("fedrl"))


@pinned
@pytest.mark.parametrize(
    "name",
    [
        "reinforce-dpsgd",  # dropout masks, multinomial actions, canaries, Opacus noise
        "dqn-ghost",  # ghost clipping, Poisson batches, canaries
        pytest.param("dqn-materialize", marks=pytest.mark.slow),
        pytest.param("dqn-none", marks=pytest.mark.slow),
    ],
)
def test_dprl_cpu_bit_for_bit(name: str) -> None:
    check_golden(CASES[name](), _golden(name))


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


def test_gpu_check_frd_stage_runs(tmp_path: Any) -> None:
    """benchmarks/gpu_check.sh's FRD stage (its Python heredoc) runs on this tree's names: a
    renamed import there broke it silently once (``_Nets``), since only a GPU run calls it."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    text = (root / "benchmarks" / "gpu_check.sh").read_text()
    code = text.split("<<'PYEOF'\n", 1)[1].split("\nPYEOF\n", 1)[0]
    out = tmp_path / "frd.json"
    r = subprocess.run(
        [sys.executable, "-u", "-", str(out), "1", "60"],
        input=code, capture_output=True, text=True, timeout=300, cwd=root,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert not doc["failures"] and len(doc["cases"]) == 2
    assert all(c["cpu_s_per_round"] > 0 for c in doc["cases"])


# PYTHONPATH=. python tests/test_device.py > tests/data/device_golden.json
if __name__ == "__main__":
    print(json.dumps({"_machine": machine_signature(), **{n: f() for n, f in CASES.items()}},
                     indent=1, sort_keys=True))  # fmt: skip
