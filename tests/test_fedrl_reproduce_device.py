"""``reproduce fedrl --device {cpu,cuda,auto}``: CPU results unchanged bit for bit, ``cuda``
without CUDA refused before any work (exit 2), ``auto`` falls back to the CPU and says so.

Nothing here needs a GPU: ``torch.cuda.is_available`` is patched where a test needs "no CUDA".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from ldp_audit.cli import main  # noqa: E402
from ldp_audit.errors import InvalidParameterError  # noqa: E402
from ldp_audit.training.fedrl.reproduce import ReproConfig, reproduce  # noqa: E402
from tests.golden_machine import check_golden, machine_signature, tree_entries  # noqa: E402
from tests.test_device import policy_derived  # noqa: E402

#: a tiny reproduction: Table 1 (2 runs per method), Figure 4 at one more H, learning curves
#: and the epsilon-greedy evaluation; no attack and no audit (other libraries' arithmetic)
TINY = dict(sizes=(8,), runs=2, train_steps=(40,), n_envs=4, n_maps=100, eval_maps=6, hist_len=2,
            hist_lens=(1, 2), fig4_runs=1, attack_sigmas=(), audit_samples=0, curve_points=2,
            curve_maps=4, explore_eps=(0.2,))  # fmt: skip

#: golden entries of TINY's results (timings, machine, command and the device keys left out;
#: dtype-tagged, tests/golden_machine.py) made from the reproduction BEFORE the device option
#: existed (commit 3e8e38b's trainer, torch 2.13.0+cpu; rewritten per entry from the same run
#: after the former whole-result SHA-256 was checked equal on that machine): with
#: ``device="cpu"`` the reproduction must still give exactly these numbers (the floats on the
#: golden's CPU family, everything else on any machine)
GOLDEN_FILE = Path(__file__).parent / "data" / "fedrl_reproduce_golden.json"
pinned = pytest.mark.skipif(
    torch.__version__ != "2.13.0+cpu",
    reason=f"the digest was computed with torch 2.13.0+cpu, this is {torch.__version__}",
)

CLI_TINY = ["reproduce", "fedrl", "--sizes", "8", "--runs", "1", "--train-steps", "10",
            "--n-envs", "4", "--n-maps", "100", "--eval-maps", "5", "--hist-lens",
            "--attack-sigmas", "--audit-samples", "0", "--curve-points", "0", "--explore-eps",
            "--no-progress"]  # fmt: skip


def _strip(x: Any) -> Any:
    """The results without what differs between two identical runs (timings, load, command,
    machine) and without the device keys."""
    if isinstance(x, dict):
        return {
            k: _strip(v)
            for k, v in x.items()
            if "seconds" not in str(k)
            and not str(k).startswith("load_average")
            and k not in ("command", "machine", "fingerprint", "device", "device_name")
        }
    return [_strip(v) for v in x] if isinstance(x, list) else x


def _entries(res: dict[str, Any]) -> dict[str, str]:
    return tree_entries(_strip(res), machine_dependent=policy_derived)


@pytest.fixture
def no_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.mark.parametrize("bad", ["gpu", "CUDA", "", None, 0, True, ("cpu",)])
def test_bad_device_values_refused(bad: Any) -> None:
    assert ReproConfig().device == "cpu"
    with pytest.raises(InvalidParameterError, match="device must be one of cpu, cuda, auto"):
        ReproConfig(device=bad)


def test_every_stage_trains_on_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """Table 1's runs, Figure 4's and the attack's: each stage's FedRLConfig names the device
    (a config naming cuda is valid without CUDA; only training on it is refused)."""
    import ldp_audit.training.fedrl.runs as F
    from ldp_audit.training.fedrl.reproduce import _stage, _table1_config

    seen = []

    class Stop(Exception):
        pass

    def fake_run(cfg: Any, **kw: Any) -> None:
        seen.append(cfg.device)
        raise Stop

    monkeypatch.setattr(F, "run_fedrl", fake_run)
    rc = ReproConfig(**TINY, device="cuda")
    assert _table1_config(rc, 0).device == "cuda"
    items = [
        {"kind": "table1-run", "size": 8, "index": 0, "method": "fedrl", "run": 0},
        {"kind": "fig4", "size": 8, "hist_len": 1},
        {"kind": "attack", "size": 8, "clip": None, "sigma": 1.0},
    ]
    for item in items:
        with pytest.raises(Stop):
            _stage(dict(item, rc=rc))
    assert seen == ["cuda"] * 3


def test_cuda_without_cuda_refused_before_any_work(no_cuda: None, tmp_path: Path) -> None:
    with pytest.raises(InvalidParameterError, match="device 'cuda' needs a CUDA device"):
        reproduce(ReproConfig(**{**TINY, "audit_samples": 100}, device="cuda"),
                  out=tmp_path / "rep")  # fmt: skip
    assert not (tmp_path / "rep").exists()  # not even the audit (the first stage) was kept
    with pytest.raises(InvalidParameterError, match="rc must be a ReproConfig"):
        reproduce(TINY)  # type: ignore[arg-type]


@pinned
def test_cpu_results_bit_for_bit_as_before_the_option(no_cuda: None) -> None:
    """``device="cpu"`` (the default) and ``"auto"`` without CUDA: the numbers of before."""
    cpu = reproduce(ReproConfig(**TINY))
    assert cpu["device"] == "cpu" and cpu["config"]["device"] == "cpu"
    golden = json.loads(GOLDEN_FILE.read_text())
    check_golden(_entries(cpu), golden)
    auto = reproduce(ReproConfig(**TINY, device="auto"))
    assert auto["device"] == "cpu" and auto["config"]["device"] == "auto"
    check_golden(_entries(auto), golden)


def test_cli_cuda_without_cuda_exits_2_before_any_file(
    no_cuda: None, tmp_path: Any, capsys: Any
) -> None:
    out = tmp_path / "r"
    for bad in ("gpu", "CUDA", ""):
        with pytest.raises(SystemExit) as e:
            main([*CLI_TINY, "--device", bad, "--out", str(out)])
        assert e.value.code == 2
        assert "--device" in capsys.readouterr().err
    assert main([*CLI_TINY, "--device", "cuda", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--device 'cuda' needs a CUDA device" in err and "Traceback" not in err
    assert not out.exists()


def test_cli_auto_falls_back_to_cpu_says_so_and_matches_cpu(
    no_cuda: None, tmp_path: Any, capsys: Any
) -> None:
    docs = {}
    for dev in ("cpu", "auto"):
        out = tmp_path / dev
        assert main([*CLI_TINY, "--device", dev, "--out", str(out)]) == 0
        err = capsys.readouterr().err
        said = "reproduce fedrl: --device auto: running on the CPU: torch sees no CUDA device"
        assert (said in err) == (dev == "auto")
        docs[dev] = json.loads((out / "results.json").read_text())
        assert docs[dev]["device"] == "cpu" and docs[dev]["config"]["device"] == dev
        readme = (out / "README.md").read_text()
        assert "networks on" not in readme  # a CPU report's README is as before
    assert _strip(docs["auto"]) == _strip(docs["cpu"])


if __name__ == "__main__":  # PYTHONPATH=. python tests/test_fedrl_reproduce_device.py > GOLDEN_FILE
    print(json.dumps({"_machine": machine_signature(), **_entries(reproduce(ReproConfig(**TINY)))},
                     indent=1, sort_keys=True))  # fmt: skip
