"""Issue 36: the one-run audit of an Opacus loop covers every tensor, every update and every
lag of the released noise (ldp_audit.attacks.one_run_noise), and the smaller items (input
canaries after the loader, a dropped sampling test said, an aborted noise step, the report's
wording, the Python API's errors, no empty journal, one recommended canary count).

Statistical tests: fixed seeds; the bounds on simulated games are binomial quantiles with a
false-failure probability stated beside each (it would be at most that for an unseeded draw).
The broken trainers (tests/broken_opacus.py) are run at seed 5 here (seeds 0-2 in the slow
tests of tests/test_opacus_audit.py); each verdict is at 95 % confidence.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from opacus.optimizers import DPOptimizer
from scipy.stats import binom

from ldp_audit.attacks.one_run_noise import (
    coordinate_dependence_test,
    noise_shape_test,
    offset_dependence_test,
)
from ldp_audit.cli import main
from ldp_audit.errors import InvalidParameterError, RunDirectoryError
from ldp_audit.opacus import RECOMMENDED_CANARIES, CanaryAudit
from tests.broken_opacus import (
    BROKEN,
    LastGroupUnclipped,
    MomentumInSummedGrad,
    NeighbourCorrelatedNoise,
    NoisePoolOverlap,
)
from tests.opacus_loop import audited_run, make_loop, train

torch.set_num_threads(1)


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow),
                                  pytest.param(2, marks=pytest.mark.slow)])  # fmt: skip
@pytest.mark.parametrize("stride", [1, 500, 3000])
def test_pool_windows_flagged_at_small_and_large_offsets(
    stride: int, seed: int, tmp_path: Path
) -> None:
    """NoisePoolOverlap with offsets 1, 500 and 3,000 of the loop's 4,258 coordinates, seeds
    0-2 (1 and 2 under ``slow``: the nine runs took about 95 s of the default suite under load):
    flagged by the independence test through its shift part, at lag 1 and the shift 4,258 -
    offset the recorder found (``noise_shift_at``)."""
    cls = type("Pool", (NoisePoolOverlap,), {"STRIDE": stride})
    run = tmp_path / f"run{seed}"
    res = audited_run(run, seed, optimizer_class=cls)
    sh = res.extra["tests"]["independence"]["pairs"]["shifts"]
    assert res.violation and res.extra["decided_by"] == "independence", sh
    assert sh["rejected"] and sh["lag"] == 1, sh
    at = np.load(run / "transcript.npz")["noise_shift_at"]
    assert at[sh["update"], 0] == 4258 - stride
    assert sh["max_abs_rho"] == pytest.approx(1 - stride / 4258, abs=0.12)


# ------------------------------------------------------------------------------------------------
# on the loop: coverage in the result, the run's JSON and the report
# ------------------------------------------------------------------------------------------------


def test_correct_run_covers_every_tensor_and_reads_consistent(tmp_path: Path, copied_run) -> None:
    run = tmp_path / "run"
    res = copied_run("opacus-seed-0", lambda out: audited_run(out, 0), run)
    ex = res.extra
    assert not res.violation and ex["tests_not_run"] == {}
    cov = ex["coverage"]
    names = [r["tensor"] for r in cov["tensors"]]
    assert names == ["tensor 0 (64x32)", "tensor 1 (64)", "tensor 2 (32x64)", "tensor 3 (32)",
                     "tensor 4 (2x32)", "tensor 5 (2)"]  # fmt: skip
    assert cov["untested"] == [] and all(r["tested"] for r in cov["tensors"])
    assert [r["canaries"] for r in cov["tensors"]] == [True, False, True, False, False, False]
    # the residual is the optimizer's noise: its std is the claimed one in every tensor
    for r in cov["tensors"]:
        assert abs(r["std_ratio"] - 1) < 6 * (2 / (r["entries"] * 80)) ** 0.5 / 2 + 1e-3
    assert 0.09 < cov["dependence"][0]["detectable_correlation"] < 0.12
    assert ex["tests"]["noise"]["residual"]["updates"] == 80
    sh = ex["tests"]["independence"]["pairs"]["shifts"]
    assert sh["pairs"] == 79 + 78 and sh["shifts"] == 4258 and not sh["rejected"]
    assert "over 80 updates" in res.summary() and "T=1" not in res.summary()
    assert "ceiling=" not in res.summary() and "(at most 4.185 with 500 canaries)" in res.summary()
    d = json.loads((run / "attack_membership.json").read_text())
    assert d["extra"]["coverage"]["tensors"][5]["tensor"] == "tensor 5 (2)"
    assert not (run / "ledger.sqlite-journal").exists()  # no empty journal left
    rep = tmp_path / "rep"
    assert main(["report", str(run), "--out", str(rep)]) == 0
    md = (rep / "report.md").read_text()
    head = next(line for line in md.splitlines() if line.startswith("**Verdict"))
    assert head.startswith("**Verdict: consistent.**")
    assert "per-tensor coverage of the noise tests" in md and "| tensor 5 (2) | 2 | no | 80 |" in md
    row = next(line for line in md.splitlines() if line.startswith("| Sampling assumption"))
    assert "sampling test on the run's 80 batch sizes" in row and "not recorded" not in row


NEW = ["biases released without noise", "one update released without noise",
       "noise repeated at lag 17", "first tensor noised at 0.8 sigma",
       "noise generator reseeded each epoch", "uniform noise of the claimed std",
       "random-sign noise of the claimed std", "one noise draw in two tensors",
       # stop 46: missed before (consistent), plugged in as docs/opacus.md says
       "two sampled batches under one noise draw", "every other step past the audit's hooks",
       "noisy gradient released and clean one applied",
       "an extra noisy step past the hooks every 4th",
       # missed in stop 46, flagged by the shift test
       "noise windows of one pool overlapping at an offset",
       # missed in session 48's probe, flagged by the data-dependence test
       "raw gradient left in the released update",
       "running mean of the raw gradient mixed in",
       # missed in session 48's probe, flagged by the precision test
       "noise rounded to bfloat16 before it is added",
       # missed in session 50's probe, flagged by the clipping probe's large rows
       "per-sample norms above 50 C left unclipped",
       # missed in sessions 48-50 (0 of 4, 0 of 4, 0 of 3), flagged by the raw-gradient probe
       "raw gradient left in the 2-entry bias only",
       # missed in session 51's probe (the canaries, clipped to C, set the noise right), now
       # the raw-gradient probe's batch of zero gradients
       "noise std sigma times the batch's largest clipped norm"]  # fmt: skip


#: One broken trainer per statistic that decides it runs in the default suite (the noise size,
#: shape and precision tests; the lag, tensor-pair and shift tests; the sampling and ledger
#: tests; the data-dependence, large-row and raw-gradient probes); the others are slow here, and
#: every one of them runs at seeds 0-2 in tests/test_opacus_audit.py's slow test.
DEFAULT = {"one update released without noise", "uniform noise of the claimed std",
           "noise rounded to bfloat16 before it is added", "noise repeated at lag 17",
           "one noise draw in two tensors", "two sampled batches under one noise draw",
           "every other step past the audit's hooks", "raw gradient left in the released update",
           "per-sample norms above 50 C left unclipped",
           "raw gradient left in the 2-entry bias only"}  # fmt: skip


@pytest.mark.parametrize(
    "name", [n if n in DEFAULT else pytest.param(n, marks=pytest.mark.slow) for n in NEW]
)
def test_new_broken_trainers_flagged(name: str, tmp_path: Path) -> None:
    cls, test = BROKEN[name]
    res = audited_run(tmp_path / "run", 5, optimizer_class=cls)
    assert res.violation and res.extra["decided_by"] == test, res.extra["flagged_by"]


def test_noise_correlated_between_neighbouring_coordinates_is_flagged(tmp_path: Path) -> None:
    """Session 52's probe: noise correlated 0.15 between neighbouring coordinates of each
    tensor (every std, every update right) read consistent, below the coordinate test's
    threshold; the offset test flags it and names the offset (seed 5, 2 epochs: 32 updates)."""
    res = audited_run(tmp_path / "run", 5, optimizer_class=NeighbourCorrelatedNoise, epochs=2)
    ind = res.extra["tests"]["independence"]
    assert res.extra["decided_by"] == "independence", res.extra["flagged_by"]
    off = ind["pairs"]["offsets"]
    assert off["rejected"] and off["offset"] == 1 and not ind["pairs"]["coordinates"]["rejected"]
    assert any("with itself 1 coordinate(s) on" in w for w in ind["problems"]), ind["problems"]


def test_a_test_that_ran_on_nothing_is_named_not_run(tmp_path: Path) -> None:
    """2 canaries, seed 0: both excluded, so the f-DP test has no guess and the contribution
    test no join; before stop 46 the result said consistent with both silently p None."""
    run = tmp_path / "run"
    res = audited_run(run, 0, canaries=2)
    ex = res.extra
    assert ex["members"] == 0 and ex["tests"]["f-dp"] is None
    assert ex["tests"]["contribution"]["p_value"] is None
    assert list(ex["tests_not_run"]) == ["f-dp", "contribution"]
    assert "no included canary joined" in ex["tests_not_run"]["contribution"]
    assert main(["report", str(run), "--out", str(tmp_path / "rep")]) == 0
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "**Verdict: partially verified.**" in md


def test_parameters_changed_outside_a_released_update_are_named(tmp_path: Path) -> None:
    """Every change of the parameters is a released update: the clean step that replaced each
    recorded noisy one is seen before every next update and, at finish, after the last."""
    cls, _ = BROKEN["noisy gradient released and clean one applied"]
    res = audited_run(tmp_path / "run", 0, optimizer_class=cls)
    assert res.extra["flagged_by"] == ["ledger"]
    assert res.extra["tests"]["ledger"]["problems"] == [
        "the parameters or the optimizer's state changed 80 times outside a released update "
        "(first before update 1; 80: after the last)"
    ]


def test_a_raw_gradient_written_into_the_momentum_is_flagged(tmp_path: Path) -> None:
    """Session 50's probe: the correct update released, the raw mean gradient added to the
    wrapped SGD's momentum buffer before its step (the parameters carry it, the release does
    not) read consistent at seeds 0-2 (every p >= 0.086: no test reads the parameters' path).
    The momentum and Adam's moments are now compared between updates like the parameters.
    Deterministic (the ledger test); the correct optimizer with the same momentum: no change
    seen (its other tests' false alarm is at most 5 % and not asserted)."""
    from tests.broken_opacus import RawGradientInMomentum

    res = audited_run(tmp_path / "bad", 5, optimizer_class=RawGradientInMomentum, momentum=0.9)
    assert res.violation and res.extra["decided_by"] == "ledger", res.extra["flagged_by"]
    assert res.extra["tests"]["ledger"]["problems"] == [
        "the parameters or the optimizer's state changed 79 times outside a released update "
        "(first before update 1; 80: after the last)"
    ]
    # the report's verdict names the witness (it gave the ledger test's generic words only)
    assert main(["report", str(tmp_path / "bad"), "--out", str(tmp_path / "rep")]) == 1
    head = next(x for x in (tmp_path / "rep" / "report.md").read_text().splitlines()
                if x.startswith("**Verdict"))  # fmt: skip
    assert "a deterministic check: the parameters or the optimizer's state changed 79" in head
    ok = audited_run(tmp_path / "ok", 5, momentum=0.9)
    assert ok.extra["tests"]["ledger"]["problems"] == []


def test_an_edited_moved_unreleased_is_a_ledger_problem_not_a_crash(
    tmp_path: Path, copied_run
) -> None:
    """metrics.json's moved_unreleased edited to a non-list and read with --allow-unverified:
    named as a ledger problem (exit 1), never a raw TypeError (exit 3)."""
    import json

    run = tmp_path / "run"
    copied_run("opacus-seed-0-epochs-1", lambda out: audited_run(out, 0, epochs=1), run)
    met = json.loads((run / "metrics.json").read_text())
    (run / "metrics.json").write_text(json.dumps({**met, "moved_unreleased": 5}))
    out = tmp_path / "a.json"
    assert main(["attack", "membership", "--run-dir", str(run), "--out", str(out),
                 "--allow-unverified"]) == 1  # fmt: skip
    ledger = json.loads(out.read_text())["extra"]["tests"]["ledger"]
    assert ledger["problems"] == ["metrics.json: moved_unreleased 5"]


def test_noise_flagged_run_headline_names_the_test(tmp_path: Path) -> None:
    cls, _ = BROKEN["one update released without noise"]
    run = tmp_path / "run"
    res = audited_run(run, 0, optimizer_class=cls)
    assert res.extra["tests"]["noise"]["residual"]["worst_update"]["update"] == 37
    assert main(["report", str(run), "--out", str(tmp_path / "rep")]) == 1  # a violation
    md = (tmp_path / "rep" / "report.md").read_text()
    head = next(line for line in md.splitlines() if line.startswith("**Verdict"))
    assert "the noise test rejected the claimed DP-SGD" in head and "leaks at least" not in head


def test_tensor_without_a_clipped_sum_is_named_untested(tmp_path: Path) -> None:
    from opacus.optimizers import DPOptimizer

    class NoSummedGradForTheLast(DPOptimizer):
        def add_noise(self) -> None:
            super().add_noise()
            self.params[-1].summed_grad = None  # correct noise, but nothing to subtract

    run = tmp_path / "run"
    res = audited_run(run, 0, optimizer_class=NoSummedGradForTheLast)
    cov = res.extra["coverage"]
    assert not res.violation and cov["untested"] == ["tensor 5 (2)"]
    assert not cov["tensors"][5]["tested"] and all(r["tested"] for r in cov["tensors"][:5])
    assert "tensor 5 (2)" in res.extra["tests_not_run"]["noise (per tensor)"]
    assert main(["report", str(run), "--out", str(tmp_path / "rep")]) == 0
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "NOT TESTED" in md and "not tested: untested tensors: tensor 5 (2)" in md
    assert "**Verdict: consistent.**" not in md  # a part was not checked


def test_zero_grad_before_the_inner_step_is_audited_not_a_crash(tmp_path: Path) -> None:
    """Session 47 probe: a subclass that calls ``zero_grad`` between its noise and the inner
    step (keeping ``p.grad``) clears ``p.grad_sample``; Opacus's ``accumulated_iterations``
    then raised ``ValueError`` inside the audit's step hook (a raw traceback). Now
    the count read when the batch was clipped is used, and every tensor (no ``summed_grad``
    left) is named untested."""
    from opacus.optimizers import DPOptimizer

    class ZeroGradBeforeInnerStep(DPOptimizer):
        def step(self, closure: object = None) -> object:
            if self.pre_step():
                grads = [p.grad.clone() for p in self.params]
                self.zero_grad()
                for p, g in zip(self.params, grads, strict=True):
                    p.grad = g
                return self.original_optimizer.step()
            return None

    res = audited_run(tmp_path / "run", 0, optimizer_class=ZeroGradBeforeInnerStep, epochs=1)
    assert not res.violation and len(res.extra["coverage"]["untested"]) == 6
    assert "noise (per tensor)" in res.extra["tests_not_run"]


def test_a_bfloat16_model_is_audited(tmp_path: Path) -> None:
    """Session 47 probe: a model in bfloat16 (Opacus casts its per-sample gradients up to the
    parameters' dtype) crashed in the audit with NumPy's raw ``TypeError: Got unsupported
    ScalarType BFloat16`` (the parameters' float64 copy went through ``.numpy()`` first)."""
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer
    from torch import nn

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(64, 8, generator=gen).to(torch.bfloat16)
    y = (x[:, 0] > 0).long()
    model = GradSampleModule(nn.Linear(8, 2).to(torch.bfloat16))
    opt = DPOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), noise_multiplier=1.0,
                      max_grad_norm=1.0, expected_batch_size=16, generator=gen)  # fmt: skip
    audit = CanaryAudit(tmp_path / "run", canaries=4, seed=0, delta=1e-5)
    opt = audit.attach(opt, sample_rate=0.25, dataset_size=64)
    for _ in range(6):
        take = torch.rand(64, generator=gen) < 0.25
        opt.zero_grad()
        nn.functional.cross_entropy(model(x[take]), y[take]).backward()
        opt.step()
    res = audit.finish()
    assert res.extra["tests"]["ledger"]["p_value"] == 1.0
    assert (tmp_path / "run" / "model.npz").exists()


# ------------------------------------------------------------------------------------------------
# the smaller items
# ------------------------------------------------------------------------------------------------


def test_input_canaries_inserted_after_the_loader_are_refused(tmp_path: Path) -> None:
    from opacus.data_loader import DPDataLoader
    from torch.utils.data import DataLoader, TensorDataset

    model, opt, loader = make_loop(0)
    audit = CanaryAudit(tmp_path / "i", canaries=10, seed=0, delta=1e-5, kind="input")
    audit.insert(loader.dataset, TensorDataset(torch.zeros(10, 32), torch.zeros(10).long()))
    with pytest.raises(InvalidParameterError, match="data_loader: .*built before insert"):
        audit.attach(opt, data_loader=loader)  # the loader built before insert
    assert "add_noise" not in opt.__dict__ and not (tmp_path / "i").exists()
    data = audit._inserted_into
    good = DPDataLoader.from_data_loader(DataLoader(data, batch_size=16))
    assert audit.attach(opt, data_loader=good) is opt  # the same audit, the right loader


def test_sample_rate_without_dataset_size_says_the_sampling_test_was_dropped(
    tmp_path: Path,
) -> None:
    model, opt, loader = make_loop(0)
    audit = CanaryAudit(tmp_path / "run", canaries=20, seed=0, delta=1e-5)
    with pytest.warns(UserWarning, match="sampling test is dropped; pass dataset_size="):
        opt = audit.attach(opt, sample_rate=1 / 16)
    train(model, opt, loader, 1)
    res = audit.finish()
    assert "sampling" not in res.extra["tests"]
    assert "dataset_size" in res.extra["tests_not_run"]["sampling"]
    rep = tmp_path / "rep"
    assert main(["report", str(tmp_path / "run"), "--out", str(rep)]) == 0
    md = (rep / "report.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith("| Sampling assumption"))
    assert "not tested" in row and "dataset_size" in row
    assert "sampling not tested" in md and "**Verdict: partially verified.**" in md


def test_an_exception_in_the_noise_step_after_the_charge_is_no_violation(tmp_path: Path) -> None:
    """The user catches an error raised inside add_noise (after the ledger was charged) and
    carries on: the charge stays (the safe side), counted as aborted, not as an uncharged
    update."""
    from opacus.optimizers import DPOptimizer

    class FailsOnce(DPOptimizer):
        def add_noise(self) -> None:
            self._calls = getattr(self, "_calls", 0) + 1
            if self._calls == 5:
                raise RuntimeError("out of memory (simulated)")
            super().add_noise()

    model, opt, loader = make_loop(0, optimizer_class=FailsOnce)
    audit = CanaryAudit(tmp_path / "run", canaries=50, seed=0, delta=1e-5, prepay=1)
    opt = audit.attach(opt, data_loader=loader)
    errors = 0
    for x, y in loader:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        try:
            opt.step()
        except RuntimeError:
            errors += 1
    res = audit.finish()
    met = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert errors == 1 and met["charges_aborted"] == 1 and met["charges"] == met["updates"] + 1
    assert res.extra["tests"]["ledger"]["problems"] == [] and not res.violation


def test_python_api_errors_name_no_cli_flags(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "x.txt").write_text("evidence")
    with pytest.raises(RunDirectoryError) as e:
        CanaryAudit(out, canaries=10, seed=0, delta=1e-5)
    assert "--" not in str(e.value) and "out=" in str(e.value)
    late = tmp_path / "late"
    audit = CanaryAudit(late, canaries=10, seed=0, delta=1e-5)
    late.mkdir()
    (late / "y.txt").write_text("evidence")
    _, opt, loader = make_loop(0)
    with pytest.raises(RunDirectoryError) as e:
        audit.attach(opt, data_loader=loader)
    assert "--overwrite" not in str(e.value) and "--resume" not in str(e.value)


def test_one_recommended_canary_count() -> None:
    """The snippet of docs/opacus.md, its digits example and the measurements use the count
    ldp_audit.opacus recommends."""
    from tests import opacus_loop

    md = (Path(__file__).parents[1] / "docs" / "opacus.md").read_text()
    counts = {int(c) for c in re.findall(r"CanaryAudit\([^)]*canaries=(\d+)", md)}
    assert RECOMMENDED_CANARIES == 500 and opacus_loop.CANARIES == RECOMMENDED_CANARIES
    three = re.search(r"## Three lines.*?```python\n(.*?)```", md, re.S).group(1)
    digits = re.search(r"<!-- digits-example -->\n```python\n(.*?)```", md, re.S).group(1)
    want = f"canaries={RECOMMENDED_CANARIES}"
    assert want in three and want in digits
    assert RECOMMENDED_CANARIES in counts
    bench = (Path(__file__).parents[1] / "benchmarks" / "bench_opacus_audit.py").read_text()
    assert "RECOMMENDED_CANARIES" in bench


@pytest.mark.parametrize("how", ["ghost clipping", "BatchMemoryManager"])
def test_residual_is_the_noise_under_ghost_clipping_and_accumulation(
    how: str, tmp_path: Path
) -> None:
    """Ghost clipping (the clipped sum built by accumulate) and physical batches of 4 (Opacus's
    BatchMemoryManager): every tensor's released noise is recorded and has the claimed std
    (ratio within 6 standard deviations of 1), and the correct run is not flagged."""
    from opacus.utils.batch_memory_manager import BatchMemoryManager

    from tests.opacus_loop import train_ghost

    ghost = how == "ghost clipping"
    model, opt, loader = make_loop(0, ghost=ghost)
    audit = CanaryAudit(tmp_path / "run", canaries=40, seed=0, delta=1e-5)
    opt = audit.attach(opt, data_loader=loader)
    if ghost:
        train_ghost(model, opt, loader, 2)
    else:
        with BatchMemoryManager(
            data_loader=loader, max_physical_batch_size=4, optimizer=opt
        ) as physical:
            train(model, opt, physical, 2)
    res = audit.finish()
    cov = res.extra["coverage"]
    assert cov["untested"] == [] and not res.violation, res.extra["flagged_by"]
    for r in cov["tensors"]:
        n = r["entries"] * r["updates_tested"]
        assert r["updates_tested"] == 32 and abs(r["std_ratio"] - 1) < 6 / (2 * n) ** 0.5


def test_noise_shape_test_holds_its_level_on_exact_noise() -> None:
    """300 games of exact N(0, sigma^2) noise at level 0.1: rejections <= 45 (the one-sided
    Clopper-Pearson 0.999 bound of Binomial(300, 0.1) is below 45/300; false failure < 1e-3)."""
    rng = np.random.default_rng(7)
    g = np.repeat([0, 1, 2], [40, 5, 1])
    rej = sum(noise_shape_test(rng.normal(0, 2.0, (30, 46)), g, sigma=2.0,
                               confidence=0.9)["rejected"] for _ in range(300))  # fmt: skip
    assert rej <= 45


def test_noise_shape_test_flags_bounded_noise_of_the_claimed_std() -> None:
    rng = np.random.default_rng(3)
    g = np.repeat([0, 1], [500, 20])
    exact = noise_shape_test(rng.normal(0, 1.0, (80, 520)), g, sigma=1.0)
    assert not exact["rejected"] and exact["families"][0]["values"] == 80 * 520
    uni = rng.uniform(-(3**0.5), 3**0.5, (80, 520))  # std 1 exactly, bounded
    sign = rng.choice([-1.0, 1.0], (80, 520))
    for z in (uni, sign):
        r = noise_shape_test(z, g, sigma=1.0)
        assert r["rejected"] and r["p_value"] < 1e-6
        # the critical distance is what the test needs: the pooled family's distance exceeds it
        fam = r["families"][0]
        assert fam["ks_distance"] > fam["detectable_distance"]
    # only the second tensor bounded (20 coordinates x 80 updates): seen in its own family
    z = rng.normal(0, 1.0, (80, 520))
    z[:, 500:] = rng.choice([-1.0, 1.0], (80, 20))
    r = noise_shape_test(z, g, sigma=1.0, names=["w", "b"])
    assert r["rejected"] and r["families"][2]["name"] == "b" and r["families"][2]["p_value"] < 1e-6
    # NaN cells (an untested tensor) are left out, a bad sigma named
    z[:10, :] = np.nan
    assert noise_shape_test(z, g, sigma=1.0)["families"][0]["values"] == 70 * 520
    with pytest.raises(InvalidParameterError, match="sigma"):
        noise_shape_test(z, g, sigma=True)


def test_coordinate_dependence_test_holds_its_level_and_finds_a_shared_draw() -> None:
    """Fresh noise: 200 games at level 0.1, rejections <= 32 (Clopper-Pearson as above, false
    failure < 1e-3); one draw added to two coordinates of different tensors is flagged and
    named, in any block size."""
    rng = np.random.default_rng(11)
    g = np.repeat([0, 1, 2], [50, 10, 3])
    rej = sum(coordinate_dependence_test(rng.normal(0, 1, (12, 63)), g, confidence=0.9,
                                         block=16)["rejected"] for _ in range(200))  # fmt: skip
    assert rej <= 32
    z = rng.normal(0, 1, (40, 63))
    z[:, 61] = z[:, 7]
    for block in (5, 512):
        r = coordinate_dependence_test(z, g, names=["w", "b", "out"], block=block)
        assert r["rejected"] and r["coordinates"] == [7, 61] and r["tensors"] == ["w", "out"]
        assert r["pairs"] == 63 * 62 // 2 and r["max_abs_rho"] == pytest.approx(1.0)
    # a correlation of 0.9 between two coordinates is above the stated 95 %-power correlation
    w = rng.normal(0, 1, (80, 63))
    w[:, 3] = 0.9 * w[:, 2] + np.sqrt(1 - 0.81) * w[:, 3]
    r = coordinate_dependence_test(w, g)
    assert r["detectable_correlation"] < 0.9 and r["rejected"]


def _correlated(rng: np.random.Generator, rho: float, k: int, sizes: tuple = (480, 40, 120, 3),
                T: int = 75, wrap: int = 0) -> tuple:  # fmt: skip
    """A (T, sum sizes) sketch of every coordinate, its tensors and positions: the first
    tensor's noise correlated ``rho`` at offset ``k`` (circular), or only between its last and
    first ``wrap`` coordinates (across the end of the flattened tensor)."""
    z = rng.normal(0, 1, (T, sum(sizes)))
    c = (1 - np.sqrt(1 - 4 * rho * rho)) / (2 * rho) if rho else 0.0
    w = z[:, : sizes[0]]
    if wrap:
        w[:, -wrap:] = (w[:, -wrap:] + c * w[:, :wrap]) / np.sqrt(1 + c * c)
    else:
        z[:, : sizes[0]] = (w + c * np.roll(w, -k, axis=1)) / np.sqrt(1 + c * c)
    g = np.repeat(np.arange(len(sizes)), sizes)
    return z, g, np.concatenate([np.arange(n) for n in sizes])


def test_offset_dependence_test_holds_its_level_and_finds_correlated_coordinates() -> None:
    """Session 52's probe: noise ``z_i + c z_{i+1}`` along a tensor (neighbour correlation
    0.15, every std and update right) read consistent (the coordinate test's threshold 0.61).
    The offset test flags it at every offset it is put, and correlations of 0.05 at the
    probe's size (T = 75, tensors 480, 40, 120, 3; level 0.05 / 48 as in the audit), and one
    only across the end of a tensor (its last 40 coordinates with its first 40: offset 440).
    Fresh noise: 200 games at level 0.5, rejections <= 129 (binomial, false failure < 1e-4:
    the bound is conservative, so its level holds)."""
    rng = np.random.default_rng(52)
    level = 0.05 / 48
    z, g, at = _correlated(rng, 0.0, 1, sizes=(30, 10, 3), T=12)
    rej = sum(offset_dependence_test(rng.normal(0, 1, z.shape), g, at, confidence=0.5,
                                     block=7)["rejected"] for _ in range(200))  # fmt: skip
    assert rej <= binom.isf(1e-4, 200, 0.5)
    r = offset_dependence_test(z, g, at)
    assert r["offsets"] == 29 + 9 + 2 and not r["rejected"]
    for rho, k, wrap, offset in [(0.15, 1, 0, 1), (0.05, 1, 0, 1), (0.15, 7, 0, 7),
                                 (0.05, 7, 0, 7), (0.15, 0, 40, 440)]:  # fmt: skip
        z, g, at = _correlated(rng, rho, k, wrap=wrap)
        r = offset_dependence_test(z, g, at, confidence=1 - level, names=["w", "b", "v", "c"])
        assert r["rejected"] and r["tensor"] == "w" and r["offset"] == offset, (rho, k, r)
        assert r["rho"] == pytest.approx(rho, abs=0.05)
    # a sketch holding part of a tensor: only the pairs it holds, each offset once; NaN rows
    # (an untested tensor at an update) are left out, and the scale does not matter
    z, g, at = _correlated(rng, 0.3, 2, sizes=(400, 40))
    keep = np.sort(rng.permutation(400)[:200])
    z, g, at = z[:, keep], g[keep], at[keep]
    z[:5] = np.nan
    r = offset_dependence_test(1e-3 * z, g, at, confidence=1 - level)
    assert r["rejected"] and r["offset"] == 2 and r["offsets"] == np.unique(
        np.subtract.outer(at, at)[np.subtract.outer(at, at) > 0]).size  # fmt: skip


@pytest.mark.parametrize("backend", ["scipy", "torch"])
def test_recorder_shift_statistic_is_the_brute_force_cross_correlation(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``UpdateRecorder._shifts`` (FFT of a fast length, folded to circular) equals the
    normalised circular cross-correlation written out shift by shift, at lags 1 and 2, with
    scipy's FFT (the CPU's) and torch's (a GPU's, run here on CPU tensors)."""
    import torch

    from ldp_audit.opacus import recorder
    from ldp_audit.opacus.recorder import UpdateRecorder

    if backend == "torch":
        monkeypatch.setattr(
            recorder, "fft_backend", lambda x: (torch.fft, x, float(torch.linalg.vector_norm(x)))
        )

    P = 301  # odd and not 5-smooth: the padded length differs from 2P - 1
    pool = torch.randn(4 * P, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    xs = [pool[70 * i : 70 * i + P].clone() for i in range(3)]
    rec = UpdateRecorder.__new__(UpdateRecorder)
    rec._ffts = []
    got = [rec._shifts(x) for x in xs]
    assert np.isnan(got[0][0][0]) and got[0][0][1] == -1 and got[1][1][1] == -1

    def brute(a: np.ndarray, b: np.ndarray) -> tuple[float, int]:
        c = np.array([abs(a @ np.roll(b, -s)) for s in range(P)])
        c /= np.linalg.norm(a) * np.linalg.norm(b)
        return float(c.max()), int(c.argmax())

    x = [v.numpy() for v in xs]
    for t, lag in ((1, 1), (2, 1), (2, 2)):
        rho, s = brute(x[t - lag], x[t])
        assert got[t][lag - 1][1] == s == P - 70 * lag
        assert abs(got[t][lag - 1][0] - rho) < 1e-12


def test_noise_permuted_at_a_lag_is_flagged_by_the_same_values_test(tmp_path: Path) -> None:
    """Session 47 probe: every 8th update's noise a permutation of the noise 4 updates before
    (no correlation at any offset: the pair, coordinate and shift tests cannot line it up)
    read consistent; the squared norms of the two updates' noise are equal, which the
    same-values test sees (p <= its level 0.05 / 144 at 95 % confidence: a third of the shift
    share since session 48, half before; the shift share an eighth of the independence test's
    level since session 52, a sixth before: 0.05 / 108)."""
    cls, test = BROKEN["every 8th update's noise a permutation of the 4th before"]
    res = audited_run(tmp_path / "run", 0, optimizer_class=cls, epochs=3)
    same = res.extra["tests"][test]["pairs"]["shifts"]["same_values"]
    assert same["rejected"] and same["level"] == pytest.approx(0.05 / 144)
    assert res.violation and res.extra["decided_by"] == test
    assert same["pair"][1] % 8 == 7 and same["pair"][1] - same["pair"][0] == 4


def test_same_values_test_holds_its_level_on_exact_noise() -> None:
    """400 games of exact noise (T = 80 updates, the audit's six tensors, a tensor untested in
    a tenth of the cells) at level 0.1: the test is a conservative union bound, so at most
    ``binom.isf(1e-6, 400, 0.1)`` games may reject (false failure <= 1e-6)."""
    from ldp_audit.attacks.one_run_noise import same_values_test

    rng = np.random.default_rng(47)
    sizes, sigma = [2048, 64, 2048, 32, 64, 2], 1.3
    rejected = 0
    for _ in range(400):
        sq = sigma**2 * rng.chisquare(sizes, size=(80, len(sizes)))
        sq[rng.random(sq.shape) < 0.1] = np.nan
        rejected += same_values_test(sq, sizes, sigma=sigma, confidence=0.9)["rejected"]
    assert rejected <= binom.isf(1e-6, 400, 0.1)
    # update 40's noise the values of update 10's shuffled across the tensors: flagged, named
    z = rng.normal(0.0, sigma, (80, sum(sizes)))
    z[40] = rng.permutation(z[10])
    sq = np.stack([(c * c).sum(1) for c in np.split(z, np.cumsum(sizes)[:-1], axis=1)], 1)
    same = same_values_test(sq, sizes, sigma=sigma)
    assert same["rejected"] and same["pair"] == [10, 40] and same["min_gap"] < same["gap"]
    same = same_values_test(np.ones((5, 1)), [1], sigma=1.0, confidence=0.9)
    assert same["p_value"] is None  # fewer than 3 coordinates an update: not run


def test_a_parameter_group_left_unclipped_is_flagged_by_the_clipping_probe(
    tmp_path: Path,
) -> None:
    """Session 47 probe: per-sample clipping of the body only, the head (a second parameter
    group, 66 entries, no canary coordinate) summed unclipped, read consistent (every test p
    >= 0.6). At finish the optimizer's own clip_and_accumulate clips one public row of norm
    10 C per tensor and one over all: the head's row comes out at 10 C. Since session 50 it
    also clips rows over every tensor of norm 1,000 C and 1,000,000 C: the worst is now the
    head's part of the 1,000,000 C row, unclipped (the head holds 66 of 4,258 entries of a
    Gaussian row: about 12 % of its norm; well above 1 % here). The correct optimizer
    on the same two groups keeps every probe at <= C; one that raises is named, not passed."""
    res = audited_run(tmp_path / "bad", 0, optimizer_class=LastGroupUnclipped, head_lr=0.05)
    clip = res.extra["tests"]["clipping"]
    assert res.violation and res.extra["decided_by"] == "clipping"
    assert 1e4 < clip["ratio"] < 1e6 and clip["worst"] == "a row over every tensor"
    assert "of norm 1e+06 C (in a row over every tensor) was clipped to" in clip["problems"][0]
    good = audited_run(tmp_path / "good", 0, head_lr=0.05)
    assert not good.violation and good.extra["tests"]["clipping"]["p_value"] == 1.0
    assert 0.99 < good.extra["tests"]["clipping"]["ratio"] <= 1.0 + 1e-6  # float32 rounding

    class Refuses(DPOptimizer):
        def clip_and_accumulate(self) -> None:
            if self.grad_samples[0].shape[0] == 1:
                raise RuntimeError("one row")
            super().clip_and_accumulate()

    res = audited_run(tmp_path / "refuses", 0, optimizer_class=Refuses, epochs=1)
    assert res.extra["tests"]["clipping"]["p_value"] is None
    assert "RuntimeError: one row" in res.extra["tests_not_run"]["clipping"]


def test_a_clipped_sum_changed_before_its_release_is_flagged(tmp_path: Path) -> None:
    """Session 47 probe: momentum 0.9 on the clipped sums written into ``p.summed_grad`` in
    ``add_noise`` (each record's gradient released again in every later update) read
    consistent: the residual tests take ``summed_grad`` as the clipped sum. The audit now
    compares it on the sketch at the clipping and at the release: every update from the
    second is named; the correct run names none."""
    res = audited_run(tmp_path / "bad", 0, optimizer_class=MomentumInSummedGrad, epochs=2)
    clip = res.extra["tests"]["clipping"]
    assert res.violation and res.extra["decided_by"] == "clipping"
    assert "at 31 updates (first: update 1)" in clip["problems"][0] and clip["ratio"] < 1.01
    good = audited_run(tmp_path / "good", 0, epochs=2)
    assert good.extra["tests"]["clipping"]["problems"] == []


def test_data_dependence_test_holds_its_level_and_sees_a_data_term() -> None:
    """400 games of exact noise (T = 80 updates, six tensors of 674 coordinates, a tensor
    untested in a tenth of the cells, at scale 1 or 3: the test is scale-free) against clipped
    sums drawn before it: at level 0.1 at most ``binom.isf(1e-6, 400, 0.1)`` reject (false
    failure <= 1e-6; the bound is sub-Gaussian, conservative). The same noise plus a data term
    of norm 1 along each update's clipped sum (beside noise of norm about 26: the cosines sum
    to about 3.1, 9 sd, against the threshold's 1.26 at 5 %; the smallest of the 50 measured
    2.17) is flagged in each of 50 games (a miss is a 5.3 sd shortfall: < 1e-5 in all)."""
    from ldp_audit.attacks.one_run_noise import data_dependence_test

    rng = np.random.default_rng(48)
    sizes = [256, 64, 256, 32, 64, 2]
    cut = np.cumsum(sizes)[:-1]

    def game(scale: float, leak: float) -> dict:
        s = rng.normal(size=(80, sum(sizes))) * rng.uniform(0.5, 20.0, size=(80, 1))
        r = scale * rng.normal(size=s.shape) + leak * s / np.linalg.norm(s, axis=1)[:, None]
        rs, ss = np.split(r, cut, 1), np.split(s, cut, 1)
        nd = np.stack(
            [np.stack([(a * b).sum(1), (b * b).sum(1)], 1) for a, b in zip(rs, ss, strict=True)], 1
        )
        sq = np.stack([(a * a).sum(1) for a in rs], 1)
        sq[rng.random(sq.shape) < 0.1] = np.nan
        return data_dependence_test(nd, sq, sizes, confidence=0.9 if leak == 0 else 0.95)

    rejected = sum(game(1.0 + 2.0 * (g % 2), 0.0)["rejected"] for g in range(400))
    assert rejected <= binom.isf(1e-6, 400, 0.1)
    for _ in range(50):
        r = game(1.0, 1.0)
        assert r["rejected"] and r["families"][0]["name"] == "all tensors", r
    with pytest.raises(InvalidParameterError, match="noise_data"):
        data_dependence_test(np.zeros((80, 6)), np.zeros((80, 6)), sizes)


def _recorded_noise(
    rng: np.random.Generator,
    rounding: Callable,
    *,
    clip: float,
    batch: float,
    dtype: torch.dtype = torch.float32,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """12 updates of two tensors (300 and 2 entries) through the recorder's own arithmetic:
    clipped sums of up to 40 C per coordinate, noise ``N(0, (2 C)^2)`` passed through
    ``rounding``, the released mean over ``batch``; (sketch, grain, groups)."""
    from ldp_audit.opacus.recorder import UpdateRecorder

    gen = torch.Generator().manual_seed(int(rng.integers(2**31)))
    ps = [torch.zeros(300, dtype=dtype), torch.zeros(2, dtype=dtype)]
    rec = UpdateRecorder(ps, idx=np.zeros((1, 1), dtype=np.int64), weight=np.ones((1, 1)),
                         dense=None, clip=clip, sketch=np.arange(302))  # fmt: skip
    for _ in range(12):
        for p in ps:
            scale = torch.rand(1, generator=gen) * 40 * clip
            p.summed_grad = (torch.randn(p.shape, generator=gen) * scale).to(p.dtype)
            n = rounding(torch.randn(p.shape, generator=gen) * 2.0 * clip).to(p.dtype)
            p.grad = (p.summed_grad + n) / batch
        rec.record(batch / clip)
    a = rec.arrays()
    return a["noise_sketch"], a["noise_grain"], np.repeat([0, 1], [300, 2])


def test_precision_test_holds_its_level_and_sees_rounded_noise() -> None:
    """Session 48's probe missed noise rounded to bfloat16 before it is added (the shape test
    cannot see a relative rounding of 2^-9). 200 games of correct float32 noise through the
    recorder (clip 0.7, a batch of 13: neither a power of two; clipped sums up to 40 C) at
    level 0.1: at most ``binom.isf(1e-6, 200, 0.1)`` reject (false failure <= 1e-6; the
    precision part is conservative, its null rate twice the bound). Noise rounded to bfloat16
    or float16 is flagged every time (3,624 values within 1/32 of a grid step, p about 0.16^n),
    also when only the 2-entry tensor's noise is rounded; a float16 model noised in float16
    shows its values on the grid. Session 54's probe: a standard normal rounded to float16,
    then scaled by sigma C (``torch.randn(..., dtype=float16) * std``) lies on no grid in
    gradient units (0 of 2 probe runs flagged); the units ``(C, 1 / sigma)`` read it, and the
    level check above runs with both."""
    import torch
    from scipy.stats import binom

    rng = np.random.default_rng(49)
    kw = {"clip": 0.7, "batch": 13.0}

    def shape(z: np.ndarray, grain: np.ndarray, g: np.ndarray, conf: float = 0.95) -> dict:
        return noise_shape_test(z, g, sigma=2.0, confidence=conf, grain=grain, unit=(0.7, 0.5))

    rej = sum(shape(*_recorded_noise(rng, lambda n: n, **kw), conf=0.9)["rejected"]
              for _ in range(200))  # fmt: skip
    assert rej <= binom.isf(1e-6, 200, 0.1)
    for dt in (torch.bfloat16, torch.float16):
        r = shape(*_recorded_noise(rng, lambda n, dt=dt: n.to(dt).float(), **kw))
        assert r["rejected"] and r["precision"]["p_value"] < 1e-100
        assert r["families"][0]["p_value"] > 1e-3  # the distribution test cannot see it
    z, grain, g = _recorded_noise(rng, lambda n: n, **kw)
    z2, grain2, _ = _recorded_noise(rng, lambda n: n.to(torch.bfloat16).float(), **kw)
    z[:, 300:], grain[:, 300:] = z2[:, 300:], grain2[:, 300:]  # only the 2-entry tensor's
    r = shape(z, grain, g)
    worst = min(r["precision"]["families"], key=lambda f: f["p_value"])
    assert r["rejected"] and worst["name"] == "tensor 1" and worst["on_grid"] == worst["values"]
    # a float16 model noised in float16 (Opacus's own noise in the model's dtype): since
    # session 51 the residual's grain is its released value's, and every value read at 11 bits
    # lies on the grid (before: none read)
    z, grain, g = _recorded_noise(rng, lambda n: n, dtype=torch.float16, **kw)
    fam = shape(z, grain, g)["precision"]["families"][3]
    assert fam["bits"] == 11 and fam["values"] == fam["on_grid"] > 0, fam
    # a standard normal rounded to float16, then times the std 2 x 0.7 (session 54's probe)
    z, grain, g = _recorded_noise(rng, lambda n: (n / 1.4).half().float() * 1.4, **kw)
    r = noise_shape_test(z, g, sigma=2.0, grain=grain, unit=0.7)
    assert r["precision"]["p_value"] > 1e-3  # gradient units alone cannot see it
    r = shape(z, grain, g)
    assert r["rejected"] and r["precision"]["p_value"] < 1e-100
    with pytest.raises(InvalidParameterError, match="grain"):
        noise_shape_test(z, g, sigma=2.0, grain=grain[:3])


def test_a_statistical_test_that_flagged_names_its_witness(tmp_path: Path) -> None:
    """Session 52: a run flagged by a statistical test had no witness in its verdict (only
    the ledger and clipping checks had ``problems``), and the independence test's words said
    'correlated across updates' for noise that is fresh every update but shared between two
    coordinates. Now each flagged test names where it saw it (its part, tensor, update or
    coordinates), quoted by the report. Seed 5: the coordinates part rejects (level 0.05 / 48)."""
    from ldp_audit.report._verdict import _TEST_WORDS
    from tests.broken_opacus import OneDrawTwoTensors

    res = audited_run(tmp_path / "run", 5, optimizer_class=OneDrawTwoTensors)
    ind = res.extra["tests"]["independence"]
    assert res.extra["decided_by"] == "independence", res.extra["flagged_by"]
    assert any("two coordinates' noise correlated" in w and "tensor 0 (64x32)" in w
               and "tensor 2 (32x64)" in w for w in ind["problems"]), ind["problems"]  # fmt: skip
    assert "coordinates" in _TEST_WORDS["independence"]
