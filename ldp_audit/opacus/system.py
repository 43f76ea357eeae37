"""The ``opacus`` system (:mod:`ldp_audit.systems`): the config of a run written by
:class:`~ldp_audit.opacus.CanaryAudit`, its transcript schema and ledger charges, and the worked
example trainer (``ldp-audit train opacus``: scikit-learn's digits, an MLP, Opacus, the audit).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit.config import config_from_dict
from ldp_audit.errors import InvalidParameterError
from ldp_audit.opacus.attach import CanaryAudit
from ldp_audit.opacus.canaries import ALGORITHM, CANARY_KINDS, MAX_CANARY_SCALE, NOISE_SKETCH
from ldp_audit.rundir import RunDir
from ldp_audit.systems import Command, SystemSpec
from ldp_audit.validation import check_choice, check_int, check_real_in

__all__ = [
    "EXAMPLE_DEFAULTS",
    "OPACUS",
    "OpacusRunConfig",
    "ledger_charges",
    "train_digits",
    "transcript_schema",
]

#: The example trainer's settings (``OpacusRunConfig.example``) and their defaults.
EXAMPLE_DEFAULTS: dict[str, Any] = {
    "epochs": 8,
    "batch_size": 64,
    "hidden": 32,
    "lr": 0.5,
    "noise_multiplier": 1.0,
    "max_grad_norm": 1.0,
}


@dataclass(frozen=True)
class OpacusRunConfig:
    """The config of an ``opacus`` run (``config.json`` ``"config"``, written by
    :meth:`CanaryAudit.config`); also the ``train opacus`` example's config.

    Attributes:
        canaries, delta, kind, confidence, canary_scale, canary_seed: as :class:`CanaryAudit`.
        claim: what :meth:`CanaryAudit.attach` read (None before training).
        canary_design: the direction design's name (informative).
        noise_sketch: the coordinates of the released noise kept per update for the all-lags
            dependence test, an int >= 1 (a run records
            :data:`ldp_audit.opacus.canaries.NOISE_SKETCH`); None: not recorded (a run written
            before it was, read with its transcript's width), and in a config to train, the
            audit's NOISE_SKETCH, the only width ``train opacus`` keeps (another is refused).
        example: the example trainer's settings (:data:`EXAMPLE_DEFAULTS`); None for a run of
            a user's own loop.
    """

    canaries: int = 200
    delta: float = 1e-5
    kind: str = "gradient"
    confidence: float = 0.95
    canary_scale: float = 10.0
    canary_seed: int | None = None
    claim: dict | None = None
    canary_design: str | None = None
    noise_sketch: int | None = None
    example: dict | None = None

    def __post_init__(self) -> None:
        check_int(self.canaries, "canaries", minimum=2)
        check_real_in(self.delta, "delta", lo=0.0, lo_open=True, hi=1.0, hi_open=True)
        check_choice(self.kind, "kind", CANARY_KINDS)
        check_real_in(self.confidence, "confidence", lo=0.0, lo_open=True, hi=1.0, hi_open=True)
        check_real_in(self.canary_scale, "canary_scale", lo=1.0, lo_open=True, hi=MAX_CANARY_SCALE)
        if self.canary_seed is not None:
            check_int(self.canary_seed, "canary_seed", minimum=0)
        if self.noise_sketch is not None:
            check_int(self.noise_sketch, "noise_sketch", minimum=1)
        for name, typ in (("claim", dict), ("canary_design", str)):
            if not isinstance(getattr(self, name), (typ, type(None))):
                raise InvalidParameterError(
                    f"{name} must be a {typ.__name__} or None, got {getattr(self, name)!r}"
                )
        if self.example is not None:
            if not isinstance(self.example, dict):
                raise InvalidParameterError(f"example must be a dict, got {self.example!r}")
            bad = sorted(set(self.example) - set(EXAMPLE_DEFAULTS))
            if bad:
                raise InvalidParameterError(
                    f"example has unknown settings {bad}; known: {sorted(EXAMPLE_DEFAULTS)}"
                )

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> OpacusRunConfig:
        return config_from_dict(cls, d)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def train_digits(
    cfg: OpacusRunConfig,
    *,
    seed: int,
    run_dir: Any = None,
    ledger: Any = None,
    progress: Any = None,
    run_mode: str = "new",
) -> Any:
    """The worked example as a system trainer: an MLP on scikit-learn's digits (no download),
    trained by Opacus (Poisson sampling) with :class:`CanaryAudit` attached; the run is written
    to ``run_dir`` and audited later (``attack membership --run-dir``)."""
    import contextlib
    import tempfile

    import torch
    from opacus import PrivacyEngine
    from sklearn.datasets import load_digits
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from ldp_audit.systems import TrainResult

    if ledger is not None:
        raise InvalidParameterError(
            "opacus: the run directory's ledger.sqlite is charged by CanaryAudit; pass run_dir, "
            "not a ledger"
        )
    if run_mode != "new":
        raise InvalidParameterError(f"opacus runs are new runs only, got run_mode={run_mode!r}")
    if not isinstance(cfg, OpacusRunConfig):
        raise InvalidParameterError(f"cfg must be an OpacusRunConfig, got {type(cfg).__name__}")
    if cfg.noise_sketch not in (None, NOISE_SKETCH):
        raise InvalidParameterError(
            f"noise_sketch: the audit keeps NOISE_SKETCH = {NOISE_SKETCH} coordinates (or None), "
            f"got {cfg.noise_sketch!r}"
        )
    ex = {**EXAMPLE_DEFAULTS, **(cfg.example or {})}
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:  # no run_dir: the run in a temporary folder
        tmp = None if run_dir is not None else stack.enter_context(tempfile.TemporaryDirectory())
        run_dir = run_dir if tmp is None else Path(tmp) / "run"
        x, y = load_digits(return_X_y=True)
        data = TensorDataset(torch.tensor(x / 16.0, dtype=torch.float32), torch.tensor(y))
        gen = torch.Generator().manual_seed(int(seed))
        model = nn.Sequential(nn.Linear(64, int(ex["hidden"])), nn.ReLU(),
                              nn.Linear(int(ex["hidden"]), 10))  # fmt: skip
        with torch.no_grad():  # nn.Linear's default init, drawn from the run's generator
            for lin in (model[0], model[2]):
                bound = 1.0 / math.sqrt(lin.in_features)
                lin.weight.uniform_(-bound, bound, generator=gen)
                lin.bias.uniform_(-bound, bound, generator=gen)
        opt = torch.optim.SGD(model.parameters(), lr=float(ex["lr"]))
        loader = DataLoader(data, batch_size=int(ex["batch_size"]), generator=gen)
        model, opt, loader = PrivacyEngine().make_private(
            module=model, optimizer=opt, data_loader=loader,
            noise_multiplier=float(ex["noise_multiplier"]),
            max_grad_norm=float(ex["max_grad_norm"]),
            noise_generator=torch.Generator().manual_seed(int(seed) + 1),
        )  # fmt: skip
        audit = CanaryAudit(run_dir, canaries=cfg.canaries, seed=int(seed), delta=cfg.delta,
                            confidence=cfg.confidence, canary_scale=cfg.canary_scale,
                            canary_seed=cfg.canary_seed, example=ex)  # fmt: skip
        opt = audit.attach(opt, data_loader=loader)
        try:
            for _ in range(int(ex["epochs"])):
                for xb, yb in loader:
                    opt.zero_grad()
                    nn.functional.cross_entropy(model(xb), yb).backward()
                    opt.step()
            audit.finish(audit=False)
        except BaseException:  # Ctrl-C, SIGTERM: like every trainer's, the run (once charged)
            if audit._writer is not None:  # is marked interrupted, every charge kept
                with contextlib.suppress(Exception):  # finished already: the signal matters more
                    audit._writer.finish(status="interrupted")
            raise
        with torch.no_grad():
            acc = float((model(data.tensors[0]).argmax(1) == data.tensors[1]).float().mean())
        met = RunDir(run_dir).metrics()
        return TrainResult(
            system=ALGORITHM,
            config=cfg,
            seed=int(seed),
            seconds=time.perf_counter() - t0,
            privacy=met["privacy"],
            metrics={"updates": met["updates"], "train_accuracy": acc},
            run_dir=None if tmp is not None else Path(run_dir),
            native=met,
        )


def transcript_schema(cfg: Any) -> Any:
    """One row per released update."""
    from ldp_audit.systems import ArraySpec, TranscriptSchema

    return TranscriptSchema(
        (
            ArraySpec("canary_projection", "f", 2, doc="update x canary directions, units of C"),
            ArraySpec("update_index", "iu", 1, doc="update number"),
            ArraySpec("batch_size", "iu", 1, doc="data samples in the update (-1: unknown)"),
            ArraySpec("charged", "b", 1, doc="one ledger charge preceded the update"),
            ArraySpec("noise_multiplier", "f", 1, doc="the optimizer's value at the update"),
            ArraySpec("max_grad_norm", "f", 1, doc="the optimizer's value at the update"),
            ArraySpec("expected_batch_size", "f", 1, doc="the optimizer's value at the update"),
            ArraySpec("update_norm", "f", 1, doc="L2 norm of the released noisy mean gradient"),
            ArraySpec(
                "ledger_charges", "iu", 1, rows=None, doc="charges made (updates + unused prepaid)"
            ),
            ArraySpec(
                "canary_score",
                "f",
                1,
                rows=None,
                optional=True,
                doc="kind input: each canary example's score on the final model",
            ),  # fmt: skip
        )
    )


def ledger_charges(tr: Any, cfg: Any) -> dict[str, int]:
    """``model`` once per released update, plus the prepaid charges left unused at the end
    (``ledger_charges``: charged before any release, never released)."""
    n = int(np.asarray(tr.get("update_index", ())).shape[0])
    if "ledger_charges" in tr:
        n = int(np.asarray(tr["ledger_charges"]).reshape(-1)[0])
    return {"model": n} if n else {}


#: The ``opacus`` system (registered in :data:`ldp_audit.systems.BUILTIN`).
OPACUS = SystemSpec(
    name=ALGORITHM,
    summary="your own Opacus DP-SGD loop audited in one run (CanaryAudit); train: the digits "
    "example",
    config="ldp_audit.opacus.system:OpacusRunConfig",
    trainer="ldp_audit.opacus.system:train_digits",
    schema="ldp_audit.opacus.system:transcript_schema",
    charges="ldp_audit.opacus.system:ledger_charges",
    attacks={"membership": "ldp_audit.opacus.scoring:membership"},
    report_sections="ldp_audit.opacus.scoring:report_sections",
    tiny_config={"canaries": 20, "example": {"epochs": 1, "batch_size": 256, "hidden": 4}},
    train_command=Command(resume=False, overwrite=False),  # train_digits writes new runs only
)
