"""A small user's Opacus loop for the CanaryAudit tests and benchmark (not a test module).

The audit configuration documented in docs/opacus.md ("Tests and their power"): 256 records of
32 features, an MLP 32-64-32-2 (4,258 parameters; two tensors of at least 500 entries), Poisson
sampling at q = 1/16 (expected batch 16), sigma 1, C 1, 5 epochs (80 updates), 500 gradient
canaries.
"""

from __future__ import annotations

from typing import Any

import torch
from opacus import GradSampleModule
from opacus.data_loader import DPDataLoader
from opacus.optimizers import DPOptimizer
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ldp_audit.opacus import RECOMMENDED_CANARIES, CanaryAudit

CANARIES = RECOMMENDED_CANARIES  # 500: the count docs/opacus.md recommends and measures


def make_loop(
    seed: int,
    *,
    optimizer_class: type = DPOptimizer,
    n: int = 256,
    batch: int = 16,
    sigma: float = 1.0,
    clip: float = 1.0,
    poisson: bool = True,
    ghost: bool = False,
    head_lr: float | None = None,
    momentum: float = 0.0,
) -> tuple[Any, Any, Any]:
    """(model, optimizer, loader) as ``make_private`` builds them, with the optimizer class
    given (a user's subclass); every draw from generators seeded by ``seed``. ``head_lr``: the
    last layer in a second parameter group at that learning rate. ``ghost``: Opacus's
    ghost clipping (``GradSampleModuleFastGradientClipping`` and, unless ``optimizer_class`` is
    given, ``DPOptimizerFastGradientClipping``); train it with :func:`train_ghost`.
    ``momentum``: the inner SGD's."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 32, generator=g)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).long()
    model = nn.Sequential(
        nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 2)
    )
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)
    if ghost:
        from opacus.grad_sample import GradSampleModuleFastGradientClipping
        from opacus.optimizers import DPOptimizerFastGradientClipping

        model = GradSampleModuleFastGradientClipping(
            model, batch_first=True, loss_reduction="sum", max_grad_norm=clip
        )
        if optimizer_class is DPOptimizer:
            optimizer_class = DPOptimizerFastGradientClipping
    else:
        model = GradSampleModule(model)
    loader = DataLoader(TensorDataset(x, y), batch_size=batch, shuffle=not poisson, generator=g)
    if poisson:
        loader = DPDataLoader.from_data_loader(
            loader, generator=torch.Generator().manual_seed(seed + 1)
        )
    ps = list(model.parameters())
    groups = [{"params": ps[:-2]}, {"params": ps[-2:], "lr": head_lr}] if head_lr else ps
    base = torch.optim.SGD(groups, lr=0.2, momentum=momentum)
    opt = optimizer_class(base, noise_multiplier=sigma, max_grad_norm=clip,
                          expected_batch_size=batch,
                          generator=torch.Generator().manual_seed(seed + 2))  # fmt: skip
    return model, opt, loader


def train(model: Any, opt: Any, loader: Any, epochs: int) -> int:
    """The user's loop, unchanged by the audit; returns the number of steps."""
    steps = 0
    for _ in range(epochs):
        for x, y in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            steps += 1
    return steps


def train_ghost(model: Any, opt: Any, loader: Any, epochs: int) -> int:
    """The same loop under ghost clipping (Opacus's two backward passes: the per-sample norms,
    then the sum of the per-sample losses weighted by ``min(1, C / (norm + 1e-6))``)."""
    steps = 0
    for _ in range(epochs):
        for x, y in loader:
            opt.zero_grad()
            per = nn.functional.cross_entropy(model(x), y, reduction="none")
            per.sum().backward(retain_graph=True)
            coef = model.get_clipping_coef().detach()
            for p in opt.params:
                p.grad = None
            model.disable_hooks()
            try:
                (coef * per).sum().backward()
            finally:
                model.enable_hooks()
            opt.step()
            steps += 1
    return steps


def audited_run(out: Any, seed: int, *, optimizer_class: type = DPOptimizer, epochs: int = 5,
                canaries: int = CANARIES, confidence: float = 0.95, **kw: Any) -> Any:  # fmt: skip
    """Train with the audit attached and return ``audit.finish()``."""
    model, opt, loader = make_loop(seed, optimizer_class=optimizer_class, **kw)
    audit = CanaryAudit(out, canaries=canaries, seed=seed, delta=1e-5, confidence=confidence)
    opt = audit.attach(opt, data_loader=loader, sample_rate=None if kw.get("poisson", True)
                       else loader.batch_size / len(loader.dataset))  # fmt: skip
    train(model, opt, loader, epochs)
    return audit.finish()


def audited_input_run(out: Any, seed: int, *, optimizer_class: type = DPOptimizer,
                      epochs: int = 5, canaries: int = 100, **kw: Any) -> Any:  # fmt: skip
    """``kind="input"``: canary examples (random inputs, random labels) inserted in the data
    set before the loader is built; scored on the final model by their loss."""
    g = torch.Generator().manual_seed(10_000 + seed)
    cx = 3.0 * torch.randn(canaries, 32, generator=g)
    cy = torch.randint(0, 2, (canaries,), generator=g)
    model, opt, loader = make_loop(seed, optimizer_class=optimizer_class, **kw)
    audit = CanaryAudit(out, canaries=canaries, seed=seed, delta=1e-5, kind="input")
    data = audit.insert(loader.dataset, TensorDataset(cx, cy))
    from opacus.data_loader import DPDataLoader

    loader = DPDataLoader.from_data_loader(
        DataLoader(data, batch_size=16), generator=torch.Generator().manual_seed(seed + 1)
    )
    opt = audit.attach(opt, data_loader=loader)
    train(model, opt, loader, epochs)
    return audit.finish(model=model)
