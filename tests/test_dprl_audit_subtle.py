"""The subtle broken DP-SGD trainers (per-layer clipping, accountant charged q/2) are flagged in
one run by the audit of ``train dprl``, which goes through the Opacus integration's door
(``ldp_audit.opacus.scoring.audit_evidence``): per-layer clipping by the contribution test, the
understated rate by the ledger test; the correct trainers are not flagged, and every tensor of
their networks is covered by the noise tests. (The broken trainers are the reproduction's
copies of tests/broken_dprl.py, run by its own audit task.)

Configurations (also the reproduction's audit table, ``training/dprl/reproduce.py``):
REINFORCE 40 updates of 4 episodes, sigma 6, C 10, 800 orthonormal gradient canaries; DQN
(hidden 64) 100 updates, Poisson rate q = 1/2 from a 2-transition buffer, sigma 3, 800 canaries.
Every verdict is at 99% confidence (Bonferroni over the tests): over the 12 correct runs of the
slow test the chance of any false alarm is at most 12%.
"""

from __future__ import annotations

import pytest
import torch

from ldp_audit.attacks.one_run_dprl import audit_run
from ldp_audit.training.dprl.config import (
    AUDIT_DQN,
    AUDIT_REINFORCE,
    DprlConfig,
    ReproduceSettings,
)
from ldp_audit.training.dprl.reproduce_report import readme
from ldp_audit.training.dprl.reproduce_runs import audit_cases, audit_one
from ldp_audit.training.dprl.trainer import train

torch.set_num_threads(1)
CONF = 0.99


def _audit(tmp_path, kw, hooks, seed):  # noqa: ANN001, ANN202
    run = tmp_path / f"{kw['algo']}-{seed}-{id(hooks)}"
    train(DprlConfig(**kw), seed=seed, run_dir=run, hooks=hooks)
    return audit_run(run, setting="white-box", confidence=CONF)


def _check_correct(tmp_path, seeds) -> None:  # noqa: ANN001
    for kw in (AUDIT_REINFORCE, AUDIT_DQN):
        for seed in seeds:
            res = _audit(tmp_path, kw, None, seed)
            assert not res.violation, res.extra["flagged_by"]
            ex = res.extra
            assert set(ex["tests"]) == {"steinke", "f-dp", "noise", "independence",
                                        "contribution", "ledger"}  # fmt: skip
            assert ex["coverage"]["untested"] == [] and all(
                r["tested"] and r["canaries"] for r in ex["coverage"]["tensors"]
            )
            assert ex["tests"]["ledger"]["p_value"] == 1.0  # deterministic: one charge each
            assert "sampling" in ex["tests_not_run"]  # named, with its reason
            fam = ex["family_bound"]
            assert fam["family"] == "subsampled Gaussian" and fam["epsilon_lower_bound"] >= 0


@pytest.mark.slow
def test_correct_trainers_not_flagged_over_seeded_repeats(tmp_path) -> None:  # noqa: ANN001
    """Slow (30 s a DQN run on the 2-core machine): the default suite's correct DP-SGD runs are
    tests/test_dprl_audit.py's (REINFORCE); its DQN audits are the broken trainers' below."""
    _check_correct(tmp_path, range(6))


@pytest.mark.parametrize(
    "name, by",
    [("per-layer clipping, per-layer sigma*C noise", "contribution"),
     ("accountant charged q/2 (DQN)", "ledger")],
)  # fmt: skip
def test_subtle_bugs_flagged_in_one_run(name: str, by: str) -> None:
    """The reproduction's own audit task (``audit_one``, 95 %): flagged white-box by the test
    that sees the bug, far beyond its level; the README renders the row."""
    s = ReproduceSettings()
    case = next(c for c in audit_cases(s) if c["trainer"] == name)
    row = audit_one(case, s)
    w = row["white-box"]
    assert w["violation"] and by in w["flagged_by"]
    assert w["tests"][by] < 1e-3  # the level is 0.05 / 5
    assert row["true_epsilon"] > w["accountant_epsilon"]
    doc = {"table": [], "audits": [row], "command": "c", "wall_seconds": 1.0, "machine": "m"}
    md = readme(doc, s)
    assert f"| {name} | 0 | {row['updates']} |" in md and f"VIOLATION ({by}" in md
    assert "broken trainers flagged in one run" in md and name in md.split("Reading:")[1]


def test_run_without_updates_is_audited_by_the_bound_alone(tmp_path) -> None:  # noqa: ANN001
    """No update was made (learning never started): nothing for the curve and noise tests."""
    run = tmp_path / "idle"
    cfg = DprlConfig(algo="dqn", privacy="dpsgd", hidden=8, total_steps=50, canaries=6)
    assert train(cfg, seed=0, run_dir=run).updates == 0
    res = audit_run(run, setting="white-box", confidence=CONF)
    assert res.extra["f_dp"] is None and res.extra["coverage"] is None
    assert set(res.extra["tests"]) == {"steinke", "f-dp", "ledger"}
    assert "white-box tests" in res.extra["tests_not_run"]
    assert not res.violation and res.epsilon_lower_bound == 0.0
