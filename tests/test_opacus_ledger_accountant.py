"""Opacus's accountant door (issue 36 item 5): ``PrivacyEngine(accountant=...)`` backed by the
durable ledger (ldp_audit/opacus/ledger_accountant.py), on a tiny Opacus loop."""

from __future__ import annotations

import uuid
import warnings
from pathlib import Path

import pytest
import torch
from opacus import PrivacyEngine
from opacus.accountants import PRVAccountant, RDPAccountant
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ldp_audit.accountant import Accountant, GaussianEvent, Ledger, PoissonSampledEvent
from ldp_audit.errors import BudgetExceeded, InvalidParameterError
from ldp_audit.opacus.ledger_accountant import LedgerAccountant, register_ledger_accountant

warnings.filterwarnings("ignore", message=".*Secure RNG.*")


def _loop(engine: PrivacyEngine, *, epsilon: float | None = None):  # noqa: ANN202
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 8, generator=g)
    y = (x[:, 0] > 0).long()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(x, y), batch_size=16)
    kw = dict(module=model, optimizer=opt, data_loader=loader, max_grad_norm=1.0,
              noise_generator=torch.Generator().manual_seed(1))  # fmt: skip
    if epsilon is None:
        return engine.make_private(noise_multiplier=1.0, **kw)
    return engine.make_private_with_epsilon(target_epsilon=epsilon, target_delta=1e-5,
                                            epochs=2, **kw)  # fmt: skip


def _steps(model, opt, loader, n: int) -> None:  # noqa: ANN001
    done = 0
    while done < n:
        for xb, yb in loader:
            if done == n:
                return
            opt.zero_grad()
            nn.functional.cross_entropy(model(xb), yb).backward()
            opt.step()
            done += 1


def _name() -> str:
    return f"ledger_{uuid.uuid4().hex[:8]}"


def test_every_step_charged_and_get_epsilon_from_the_ledger(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    engine = PrivacyEngine(accountant=register_ledger_accountant(path, mechanism=_name()))
    assert isinstance(engine.accountant, LedgerAccountant) and not path.exists()
    model, opt, loader = _loop(engine)
    _steps(model, opt, loader, 10)
    q = 1 / len(loader)
    led = Ledger(path, readonly=True, create=False)
    try:
        hist = led.history("model")
    finally:
        led.close()
    assert [(e, n) for e, n in hist] and sum(n for _, n in hist) == 10
    assert len(engine.accountant) == 10
    assert engine.accountant.history == [(1.0, q, 10)]
    # Opacus's own accountants after the same ten steps
    prv, rdp = PRVAccountant(), RDPAccountant()
    for _ in range(10):
        prv.step(noise_multiplier=1.0, sample_rate=q)
        rdp.step(noise_multiplier=1.0, sample_rate=q)
    eps = engine.get_epsilon(1e-5)
    assert eps == pytest.approx(prv.get_epsilon(1e-5), rel=1e-9)
    with Accountant(ledger=path) as acc:
        assert acc.spent("model", delta=1e-5, method="prv") == eps
    # durable: another accountant on the same file (a new process) reads the same
    again = LedgerAccountant(path, method="rdp")
    assert len(again) == 10 and again.get_epsilon(1e-5) == pytest.approx(
        rdp.get_epsilon(1e-5), rel=1e-6
    )
    engine.accountant.close()
    again.close()


def test_a_refused_charge_stops_the_update_before_it_is_applied(tmp_path: Path) -> None:
    """Budget 6 at delta 1e-5: the step that would exceed it raises out of optimizer.step()
    and the parameters keep their values (the hook runs after the noise, before the update)."""
    from ldp_audit.accountant import Budget

    path = tmp_path / "ledger.sqlite"
    budget = Budget(epsilon=6.0, delta=1e-5, method="rdp")
    name = register_ledger_accountant(path, mechanism=_name(), budget=budget)
    engine = PrivacyEngine(accountant=name)
    model, opt, loader = _loop(engine)
    charged = 0
    with pytest.raises(BudgetExceeded):
        for _ in range(100):
            for xb, yb in loader:
                before = [p.detach().clone() for p in model.parameters()]
                opt.zero_grad()
                nn.functional.cross_entropy(model(xb), yb).backward()
                opt.step()
                charged += 1
    assert all(torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True))
    assert 0 < charged == len(engine.accountant) < 100
    engine.accountant.close()


def test_make_private_with_epsilon_plans_without_touching_the_ledger(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    name = register_ledger_accountant(path, mechanism=_name(), method="rdp")
    engine = PrivacyEngine(accountant=name)
    _, opt, _ = _loop(engine, epsilon=3.0)
    assert not path.exists()  # get_noise_multiplier composed assigned histories in memory
    ref_engine = PrivacyEngine(accountant="rdp")
    _, ref, _ = _loop(ref_engine, epsilon=3.0)
    assert opt.noise_multiplier == pytest.approx(ref.noise_multiplier, rel=1e-9)


def test_checkpoint_state_is_checked_against_the_ledger(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    acc = LedgerAccountant(path, method="rdp")
    for _ in range(3):
        acc.step(noise_multiplier=1.0, sample_rate=0.25)
    state = acc.state_dict()
    assert state["history"] == [(1.0, 0.25, 3)] and state["ledger"] == str(path)
    acc.load_state_dict(state)  # the same steps: accepted
    with pytest.raises(InvalidParameterError, match="were not charged"):
        acc.load_state_dict({**state, "history": [(1.0, 0.25, 5)]})
    with pytest.raises(InvalidParameterError, match="mechanism"):
        acc.load_state_dict({**state, "mechanism": "prv"})
    ev = PoissonSampledEvent(0.25, GaussianEvent(1.0))
    with Accountant(ledger=path) as other:
        assert other.ledger.history("model")
        assert other.spent("model", delta=1e-5, method="rdp") == acc.get_epsilon(1e-5)
        assert ev == ev
    acc.close()


def test_bad_input_refused_before_anything_is_charged(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    with pytest.raises(InvalidParameterError, match="already registered"):
        register_ledger_accountant(path, mechanism="prv")
    with pytest.raises(InvalidParameterError, match="ledger"):
        register_ledger_accountant(3, mechanism=_name())
    with pytest.raises(InvalidParameterError, match="method"):
        register_ledger_accountant(path, mechanism=_name(), method="basic")
    with pytest.raises(InvalidParameterError, match="force"):
        register_ledger_accountant(path, mechanism=_name(), force="yes")
    with pytest.raises(InvalidParameterError, match="ledger"):
        LedgerAccountant()
    with pytest.raises(InvalidParameterError, match="does not exist"):
        register_ledger_accountant(tmp_path / "no" / "ledger.sqlite", mechanism=_name())
    acc = LedgerAccountant(path)
    with pytest.raises(InvalidParameterError, match="noise_multiplier"):
        acc.step(noise_multiplier=True, sample_rate=0.1)
    with pytest.raises(InvalidParameterError, match="sample_rate"):
        acc.step(noise_multiplier=1.0, sample_rate=1.5)
    with pytest.raises(InvalidParameterError, match="steps"):
        acc.history = [(1.0, 0.1, 0)]
    assert not path.exists() and len(acc) == 0 and acc.get_epsilon(1e-5) == 0.0
