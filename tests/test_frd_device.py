"""FRD's ``device`` (``train frd --device``, ``reproduce frd --device``; issue 29).

What moves: the distillation (eq. 2, the torch part) runs on the device on its agents' rows
copied there and back; the compiled acting kernels and every random draw stay on the CPU. On
the CPU the results are bit for bit those of the former in-place distillation (kept below as
the reference); ``auto`` on a machine without CUDA is the CPU run; ``cuda`` without CUDA is
refused before any work or file, naming the option. The device path is exercised without a
GPU on torch's ``meta`` device: every torch call of the distillation is checked to run there.
Nothing here needs a GPU; the tests that need its absence skip where CUDA is present.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from ldp_audit.cli import main  # noqa: E402
from ldp_audit.errors import InvalidParameterError  # noqa: E402
from ldp_audit.training.frd import engine as E  # noqa: E402
from ldp_audit.training.frd.config import FrdConfig  # noqa: E402
from ldp_audit.training.frd.engine import train_many  # noqa: E402
from ldp_audit.training.frd.nets import Nets  # noqa: E402
from ldp_audit.training.frd.run import train  # noqa: E402

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")


def _tiny(**kw):
    """Small runs that distil often (2 epochs, minibatches of 16 over hundreds of cells)."""
    base = dict(n_agents=3, groups=2, sections=6, exchange_period=3, initial_episodes=2,
                hidden=8, layers=2, max_episodes=12, stop_at_mission=False, distil_batch=16,
                distil_epochs=2)  # fmt: skip
    return FrdConfig(**{**base, **kw})


CFGS = [_tiny(), _tiny(mode="fedavg"), _tiny(ldp_epsilon=2.0, ldp_samples=5)]


def _former_distil(self, agents, states, pol, c):
    """The distillation before the device option (commit 8952e1c), verbatim but for the Adam
    step written out: in place on the whole CPU buffers, rows gathered per minibatch."""
    if states.shape[0] == 0:
        raise InvalidParameterError("global proxy memory is empty: nothing to distil")
    rows = torch.from_numpy(np.asarray(agents, dtype=np.int64))
    target = np.stack([pol, 1.0 - pol], axis=1).astype(np.float32)
    X = torch.from_numpy(states.astype(np.float32))
    T = torch.from_numpy(target)
    n = X.shape[0]
    opt, flat, cols, lr = self, self.nets.flat, self.nets.actor_size, c.distil_lr
    for _ in range(c.distil_epochs):
        perm = torch.from_numpy(self.rng.permutation(n))
        for s in range(0, n, c.distil_batch):
            b = perm[s : s + c.distil_batch]
            xb = X[b][None].expand(len(agents), -1, -1)
            logits, cache = self.nets.forward("actor", xb, flat[rows])
            p = torch.softmax(logits, dim=2)
            g = torch.cat(Nets.backward((p - T[b][None]) / b.numel(), cache), dim=1)
            b1, b2 = 0.9, 0.999
            t = opt.t[rows] + 1.0
            opt.t[rows] = t
            bc = (lr * torch.sqrt(1.0 - b2**t) / (1.0 - b1**t)).to(torch.float32)
            m = opt.m[rows, :cols].mul_(b1).add_(g, alpha=1 - b1)
            v = opt.v[rows, :cols].mul_(b2).addcmul_(g, g, value=1 - b2)
            opt.m[rows, :cols] = m
            opt.v[rows, :cols] = v
            flat[rows, :cols] = flat[rows, :cols] - bc * m / (v.sqrt() + 1e-8)


def _same(a, b):
    """Two FrdResults equal bit for bit: missions, scores, secrets, transcripts, models."""
    for name in ("mission", "scores", "gravity", "uploads"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert a.memory_sizes == b.memory_sizes and a.agent_episodes == b.agent_episodes
    for da, db in ((a.transcript, b.transcript), (a.secrets, b.secrets), (a.model, b.model)):
        assert da.keys() == db.keys()
        for k in da:
            assert da[k].dtype == db[k].dtype, k
            np.testing.assert_array_equal(da[k], db[k], err_msg=k)


def test_cpu_and_auto_are_bit_for_bit_the_former_distillation(monkeypatch):
    """The default, ``device="cpu"`` and (without CUDA) ``"auto"``: FRD, FedAvg and the LDP
    variant give exactly what the former in-place distillation gave (the same draws, the same
    float32 arithmetic on copies of the same rows)."""
    now = {d: train_many([dataclasses.replace(c, device=d) for c in CFGS], seed=7, record=True)
           for d in ("cpu", "auto")}  # fmt: skip
    default = train_many(CFGS, seed=7, record=True)
    monkeypatch.setattr(E._Engine, "_distil", _former_distil)
    before = train_many(CFGS, seed=7, record=True)
    assert all(len(s) >= 2 for s in before[0].memory_sizes)  # FRD distilled, twice per group
    assert before[2].transcript["report"].shape[0] > 0  # the LDP variant uploaded
    for i in range(len(CFGS)):
        _same(default[i], before[i])
        _same(now["cpu"][i], before[i])
        if not torch.cuda.is_available():
            _same(now["auto"][i], before[i])
    # a distillation changed the actors (the comparison is not of untouched parameters)
    monkeypatch.setattr(E._Engine, "_distil", lambda *a, **k: None)
    skipped = train_many(CFGS[:1], seed=7, record=True)[0]
    assert not np.array_equal(skipped.model["flat"], before[0].model["flat"])


class _OnlyOn(torch.overrides.TorchFunctionMode):
    """Fails on any torch call with a tensor argument or result on another device."""

    def __init__(self, device):
        super().__init__()
        self.device, self.calls = torch.device(device), 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        leaves = torch.utils._pytree.tree_leaves((args, kwargs, out))
        for x in leaves:
            if isinstance(x, torch.Tensor) and x.device != self.device:
                raise AssertionError(f"{func} touched a tensor on {x.device}, not {self.device}")
        self.calls += 1
        return out


def test_distil_rows_runs_every_torch_call_on_the_device():
    """``distil_rows`` on torch's ``meta`` device (shapes only, no GPU): each of its torch
    calls sees tensors on that device only, and the rows keep their shapes and dtypes."""
    nets = Nets(8, 2, 3, np.random.default_rng(0))
    dev = torch.device("meta")
    flat, m, v = (torch.zeros_like(nets.flat, device=dev) for _ in range(3))
    t = torch.zeros((3, 1), dtype=torch.float64, device=dev)
    X, T = torch.zeros((40, 4), device=dev), torch.zeros((40, 2), device=dev)
    perms = [torch.from_numpy(np.random.default_rng(1).permutation(40)).to(dev)] * 2
    mode = _OnlyOn(dev)
    with mode:
        E.distil_rows(nets, flat, m, v, t, X, T, perms, 16, 1e-3)
    assert mode.calls > 50  # 2 epochs x 3 minibatches of forward, backward and Adam
    for x, ref in ((flat, nets.flat), (m, nets.flat), (v, nets.flat)):
        assert x.device == dev and x.shape == ref.shape and x.dtype == torch.float32
    assert t.device == dev and t.dtype == torch.float64
    # a CPU tensor handed in is caught (the check can fail)
    x_cpu = torch.zeros((40, 4))
    with pytest.raises(AssertionError, match="on cpu"), _OnlyOn(dev):
        E.distil_rows(nets, flat, m, v, t, x_cpu, T, perms, 16, 1e-3)


def test_engine_hands_the_distillation_its_rows_on_the_device(monkeypatch):
    """The engine's own device path, on ``meta``: the agents' rows, the proxy set and the
    permutations reach ``distil_rows`` on the engine's device, every torch call there runs on
    it, and the permutations were drawn from the engine's CPU generator (one per epoch)."""
    seen = []

    class Stop(Exception):
        pass

    real = E.distil_rows

    def on_meta(nets, flat, m, v, t, X, T, perms, batch, lr):
        seen.append([x.device.type for x in (flat, m, v, t, X, T, *perms)])
        seen.append((flat.shape[0], X.shape[0], len(perms), [p.numel() for p in perms]))
        with _OnlyOn("meta"):
            real(nets, flat, m, v, t, X, T, perms, batch, lr)
        raise Stop  # a meta tensor holds no numbers to copy back

    monkeypatch.setattr(E, "distil_rows", on_meta)
    monkeypatch.setattr(E, "batch_device", lambda cfgs: "meta")
    snap = {}
    real_distil = E._Engine._distil

    def keep_state(self, *a, **k):
        snap["engine"], snap["state"] = self, self.rng.bit_generator.state
        return real_distil(self, *a, **k)

    monkeypatch.setattr(E._Engine, "_distil", keep_state)
    with pytest.raises(Stop):
        train_many([CFGS[0]], seed=7)
    assert snap["engine"].device == torch.device("meta")
    assert set(seen[0]) == {"meta"}
    agents, n, epochs, sizes = seen[1]
    assert agents == CFGS[0].n_agents and epochs == CFGS[0].distil_epochs == 2
    assert sizes == [n, n]
    # the distillation drew exactly its two permutations of range(n) from the CPU generator
    g = np.random.default_rng()
    g.bit_generator.state = snap["state"]
    g.permutation(n), g.permutation(n)
    assert g.bit_generator.state == snap["engine"].rng.bit_generator.state


@pytest.mark.parametrize("bad", ["gpu", "CUDA", "", None, 0, ("cpu",)])
def test_bad_device_refused_by_the_config(bad):
    with pytest.raises(InvalidParameterError, match="device must be one of cpu, cuda, auto"):
        FrdConfig(device=bad)


@no_cuda
def test_cuda_without_cuda_refused_before_any_work_or_file(tmp_path, monkeypatch):
    def boom(*a, **k):
        raise AssertionError("an engine was built")

    monkeypatch.setattr(E, "_Engine", boom)
    cfg = _tiny(device="cuda")
    with pytest.raises(InvalidParameterError, match="device 'cuda' needs a CUDA device"):
        train_many([cfg], seed=0)
    with pytest.raises(InvalidParameterError, match="device 'cuda' needs a CUDA device"):
        E.train_batch([cfg], rng=np.random.default_rng(0))
    with pytest.raises(InvalidParameterError, match="device 'cuda' needs a CUDA device"):
        train(cfg, seed=0, run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()
    from ldp_audit.training.frd import reproduce as R

    with pytest.raises(InvalidParameterError, match="device 'cuda' needs a CUDA device"):
        R.reproduce(R.ReproduceSettings(device="cuda", leak=False), out=tmp_path / "rep")
    assert not (tmp_path / "rep").exists()
    with pytest.raises(InvalidParameterError, match="device must be one of"):
        R.ReproduceSettings(device="gpu")


def test_configs_of_one_batch_must_resolve_to_one_device(monkeypatch):
    """cpu and auto together are one batch without CUDA; with CUDA (pretended: nothing runs)
    they would be two devices, refused naming both."""
    pair = [_tiny(), _tiny(device="auto")]
    if not torch.cuda.is_available():
        assert E.batch_device(pair) == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert E.batch_device([_tiny(device="auto")]) == "cuda"
    with pytest.raises(InvalidParameterError, match=r"one device, got \['cpu', 'cuda'\]"):
        E.batch_device(pair)


def test_config_json_of_a_cpu_run_is_as_before_and_auto_says_where():
    assert "device" not in FrdConfig().to_dict()
    for d in ("auto", "cuda"):
        c = FrdConfig(device=d)
        assert c.to_dict()["device"] == d and FrdConfig.from_dict(c.to_dict()) == c


CLI = ["train", "frd", "--agents", "3", "--groups", "2", "--sections", "6",
       "--exchange-period", "3", "--initial-episodes", "2", "--hidden", "8",
       "--max-episodes", "12", "--no-stop-at-mission", "--distil-batch", "16",
       "--no-progress"]  # fmt: skip


@no_cuda
def test_train_frd_device_option(tmp_path, capsys):
    """``--device cuda`` exits 2 naming the option before any file; a bad value is a usage
    error; ``--device auto`` runs on the CPU, says so, records it, and its run directory holds
    the default run's arrays bit for bit."""
    out = tmp_path / "cuda"
    assert main([*CLI, "--device", "cuda", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--device 'cuda' needs a CUDA device" in err and "Traceback" not in err
    assert not out.exists()
    with pytest.raises(SystemExit) as e:
        main([*CLI, "--device", "gpu", "--out", str(out)])
    assert e.value.code == 2 and "--device" in capsys.readouterr().err and not out.exists()
    runs = {}
    for name, extra in (("default", []), ("cpu", ["--device", "cpu"]),
                        ("auto", ["--device", "auto"])):  # fmt: skip
        rd = tmp_path / name
        assert main([*CLI, *extra, "--out", str(rd)]) == 0
        runs[name] = rd
    err = capsys.readouterr().err
    assert "train frd: --device auto: running on the CPU: torch sees no CUDA device" in err
    docs = {k: json.loads((rd / "config.json").read_text()) for k, rd in runs.items()}
    assert "device" not in docs["default"] and "device" not in docs["default"]["config"]
    assert docs["cpu"]["config"] == docs["default"]["config"]
    assert docs["auto"]["device"] == "cpu" and docs["auto"]["config"]["device"] == "auto"
    met = json.loads((runs["auto"] / "metrics.json").read_text())
    assert met["device"] == "cpu"
    assert "device" not in json.loads((runs["default"] / "metrics.json").read_text())
    for f in ("transcript.npz", "secrets.npz", "model.npz"):
        ref = np.load(runs["default"] / f)
        for k in ("cpu", "auto"):
            got = np.load(runs[k] / f)
            assert sorted(got.files) == sorted(ref.files)
            for a in ref.files:
                np.testing.assert_array_equal(got[a], ref[a], err_msg=f"{k} {f} {a}")


@no_cuda
def test_reproduce_frd_device(tmp_path, capsys):
    """``reproduce frd --device cuda``: exit 2 before any file; ``auto``: the cpu numbers, the
    resolved device recorded (a cpu report's results.json has no device key, as before)."""
    base = ["reproduce", "frd", "--settings", "5", "--agents", "1,2", "--groups", "1",
            "--max-episodes", "15", "--ldp-epsilons", "1", "--no-leak",
            "--no-progress"]  # fmt: skip
    assert main([*base, "--device", "cuda", "--out", str(tmp_path / "c")]) == 2
    assert "--device 'cuda' needs a CUDA device" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()
    docs = {}
    for d in ("cpu", "auto"):
        assert main([*base, "--device", d, "--out", str(tmp_path / d)]) == 0
        docs[d] = json.loads((tmp_path / d / "results.json").read_text())
    assert "device" not in docs["cpu"] and "device" not in docs["cpu"]["settings"]
    assert docs["auto"]["device"] == "cpu" and docs["auto"]["settings"]["device"] == "auto"
    assert docs["auto"]["rows"] == docs["cpu"]["rows"]
    assert any(r["kind"] == "frd" and r["agents"] == 2 for r in docs["cpu"]["rows"])


def test_attack_on_a_cuda_run_trains_its_shadows_where_this_machine_can(tmp_path, monkeypatch):
    """A run whose config says ``device="cuda"`` is attacked on a machine without CUDA: the
    shadow agents get ``auto`` (here the CPU) instead of a refusal."""
    import ldp_audit.attacks.frd as A
    import ldp_audit.training.frd.engine as frd_engine
    from ldp_audit.rundir import reader

    tiny = dict(n_agents=2, groups=2, sections=10, exchange_period=3, initial_episodes=2,
                hidden=8, max_episodes=12)  # fmt: skip
    rd = tmp_path / "run"
    train(FrdConfig(**tiny), seed=0, run_dir=rd)
    real_read = reader.read_config

    def read_as_cuda(path):  # the run's config as a --device cuda run records it
        doc = real_read(path)
        return {**doc, "config": {**doc["config"], "device": "cuda"}}

    seen = []

    def spy(cfgs, **kw):
        seen.extend(c.device for c in cfgs)
        return train_many(cfgs, **kw)

    monkeypatch.setattr(reader, "read_config", read_as_cuda)  # RunDir reads config.json with it
    monkeypatch.setattr(frd_engine, "train_many", spy)
    res = A.attack_run_dir(rd, n_shadow=2, seed=0)
    assert seen == ["auto"]  # the shadows' config; "cuda" would have been refused here
    assert len(res["guess"]) == 4  # one guess per victim agent (2 agents x 2 groups)
