"""``benchmarks/bench_fedrl.py`` never silently replaces the committed results (issue 39): an
existing ``--out`` is refused before any benchmark runs, unless ``--overwrite``."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_fedrl", ROOT / "benchmarks/bench_fedrl.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_existing_out_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    bench = _bench()
    ran = []
    monkeypatch.setattr(bench, "bench_env", lambda *a: ran.append("env") or {})
    monkeypatch.setattr(bench, "bench_training", lambda *a: ran.append("training") or {})
    committed = ROOT / "benchmarks" / "results" / "bench_fedrl.json"
    assert committed.is_file()
    before = committed.read_bytes()
    for argv in ([], ["--out", str(committed)]):
        monkeypatch.setattr(sys, "argv", ["bench_fedrl.py", *argv])
        with pytest.raises(SystemExit) as exc:
            bench.main()
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert "bench_fedrl.json exists" in err and "--overwrite" in err
    assert ran == [] and committed.read_bytes() == before

    mine = tmp_path / "sub" / "mine.json"  # a new path: the benchmark runs and writes there
    env = {"batched_steps_per_s": 2.0, "gymnasium_steps_per_s": 1.0, "ratio": 2.0, "maps": 1}
    monkeypatch.setattr(bench, "bench_env", lambda *a: env)
    monkeypatch.setattr(bench, "bench_training", lambda *a: ran.append("training") or _FAKE)
    monkeypatch.setattr(sys, "argv", ["bench_fedrl.py", "--out", str(mine)])
    bench.main()
    assert mine.is_file() and f"wrote {mine}" in capsys.readouterr().out
    monkeypatch.setattr(sys, "argv", ["bench_fedrl.py", "--out", str(mine), "--overwrite"])
    bench.main()  # replaced only when asked
    assert ran == ["training", "training"]


_FAKE = {
    "runs": 1,
    "iterations": 1,
    "n_envs": 1,
    **{
        f"{k}_{m}_{u}": 1.0
        for k in ("ours", "vmap", "loop")
        for m in ("dqn-alpha", "dqn-full", "fedrl")
        for u in ("wall_s", "cpu_s")
    },
    **{
        f"ratio_{m}_vs_{b}_{u}": 1.0
        for m in ("dqn-alpha", "dqn-full", "fedrl")
        for b in ("vmap", "loop")
        for u in ("wall", "cpu")
    },
}


def test_gpu_bench_refuses_the_committed_record(monkeypatch, capsys):
    """``bench_gpu.py`` (a CPU smoke run here) never replaces the committed GPU record."""
    spec = importlib.util.spec_from_file_location("bench_gpu", ROOT / "benchmarks/bench_gpu.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    committed = ROOT / "benchmarks" / "results" / "gpu_check.json"
    before = committed.read_bytes()
    monkeypatch.setattr(mod, "Bench", lambda *a: pytest.fail("work started"))
    for argv in ([], ["--quick"], ["--self-test", "--out", str(committed)]):
        with pytest.raises(SystemExit) as exc:
            mod.main(argv)
        assert exc.value.code == 2
        assert "gpu_check.json exists" in capsys.readouterr().err
    assert committed.read_bytes() == before
