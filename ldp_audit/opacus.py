"""Audit your own Opacus DP-SGD training in one run (docs/opacus.md).

Three lines in a user's Opacus loop::

    audit = CanaryAudit(out="runs/mine", canaries=1000, seed=0, delta=1e-5)
    model, optimizer, loader = privacy_engine.make_private(...)
    optimizer = audit.attach(optimizer, data_loader=loader)
    ... the user's loop, unchanged ...
    result = audit.finish()            # verdict, bounds, p-values; writes runs/mine

:class:`CanaryAudit` reads the claim from the optimizer (noise multiplier ``sigma``, clip norm
``C``, expected batch size) and the loader (Poisson sample rate ``q``, data set size), plants
``m`` **gradient canaries** (public orthonormal directions ``u_i``, each secretly included with
probability 1/2; an included canary joins each update with probability ``q``, like a record of
the data set, as one more per-sample gradient of norm ``canary_scale * C`` appended to
``p.grad_sample`` *before* the optimizer's own clipping and noise), charges the run's ledger
with the declared event ``PoissonSampledEvent(q, GaussianEvent(sigma))`` **before** every noise
draw, records what the audit needs, and writes a run directory (``algorithm: "opacus"``) that
``ldp-audit attack membership --run-dir`` and ``ldp-audit report`` read.

**Input canaries** (``kind="input"``): :meth:`CanaryAudit.insert` adds the included canary
examples to the data set before the loader is built; :meth:`CanaryAudit.finish` scores them on
the final model (black-box leakage bounds; the white-box noise, independence, sampling and
ledger tests still run on public directions).

The hooks are instance attributes on the optimizer around three public steps of Opacus's
``DPOptimizer`` (opacus 1.5-1.6): ``clip_and_accumulate`` (canaries appended to the per-sample
gradients first, so they are clipped like any sample, by the optimizer's own code, subclass
included), ``add_noise`` (the ledger charged first) and the wrapped optimizer's ``step`` (the
released noisy mean gradient recorded, whatever path produced it). A subclass that overrides
any of them is hooked the same way: the audit tests what the optimizer does, not what Opacus's
base class would do.

What each setting sees (:func:`audit_run`):

* **white-box** (every released update): the (eps, delta) bound of Steinke, Nasr & Jagielski
  (2023) and the f-DP one-run test on the summed projections ``sum_t <update_t, u_i>``; the
  noise magnitude, the independence of the noise across updates, a canary's contribution along
  its direction (per-sample clipping: neither more, per-layer or no clipping, nor less,
  aggregate clipping), the data loader's sampling (Poisson at the claimed rate) and the ledger
  (one charge of the declared event before every update);
* **black-box** (final model only): the (eps, delta) bound and the f-DP test on
  ``-<theta_T - theta_0, u_i>``.

Each test's soundness needs only the claim (worst-case data); they share ``1 - confidence`` by
Bonferroni (the ledger check is deterministic and takes no share).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError, RunDirectoryError
from ldp_audit.systems import SystemSpec

__all__ = [
    "ALGORITHM",
    "CanaryAudit",
    "canary_blocks",
    "audit_run",
    "membership",
    "OpacusRunConfig",
    "train_digits",
    "OPACUS",
    "report_sections",
]

ALGORITHM = "opacus"
_KINDS = ("gradient", "input")
_MARK = "_ldp_audit_canary_audit"


def _int(v: Any, name: str, minimum: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or int(v) < minimum:
        raise InvalidParameterError(f"{name} must be an int >= {minimum}, got {v!r}")
    return int(v)


def _real(v: Any, name: str, *, lo: float, lo_open: bool, hi: float | None = None,
          hi_open: bool = False) -> float:  # fmt: skip
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise InvalidParameterError(f"{name} must be a real number, got {v!r}")
    x = float(v)
    bad = (
        not math.isfinite(x)
        or (x <= lo if lo_open else x < lo)
        or (hi is not None and (x >= hi if hi_open else x > hi))
    )
    if bad:
        lo_s = f"> {lo:g}" if lo_open else f">= {lo:g}"
        hi_s = "" if hi is None else (f" and < {hi:g}" if hi_open else f" and <= {hi:g}")
        raise InvalidParameterError(f"{name} must be finite, {lo_s}{hi_s}, got {v!r}")
    return x


def canary_blocks(sizes: Any, m: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The public canary design: ``m`` orthonormal directions spanning every large tensor.

    ``sizes`` are the parameter tensors' sizes (flat layout in this order). Each tensor with at
    least ``m`` entries (``L`` of them) is cut, after a random permutation, into ``m`` blocks of
    ``b_l = size_l // m`` entries; canary ``i`` has random signs on its block of every such
    tensor, scaled so that each tensor holds ``1 / L`` of its squared norm (norm 1). Disjoint
    blocks make the directions orthonormal; a projection costs ``O(n_params)`` (not the
    ``O(n_params m)`` of a dense frame); and a canary clipped tensor by tensor (per-layer
    clipping) keeps ``sqrt(L)`` times the whole-gradient clip along its direction. When no
    tensor has ``m`` entries, blocks of the whole flat vector are used (``L = 1``).

    Returns:
        ``(idx, weight)``: (m, B) int64 flat coordinates and (m, B) float32 weights.
    """
    sizes = [int(_int(n, "tensor size", 1)) for n in np.atleast_1d(sizes).tolist()]
    d = sum(sizes)
    m = _int(m, "canaries", 2)
    if m > d:
        raise InvalidParameterError(
            f"canaries must be <= the number of trainable parameters ({d}: the canary "
            f"directions are orthonormal), got {m}"
        )
    rng = np.random.default_rng(_int(seed, "canary_seed", 0))
    offs = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    parts = [(o, n) for o, n in zip(offs, sizes, strict=True) if n >= m] or [(0, d)]
    L = len(parts)
    idx, wt = [], []
    for o, n in parts:
        b = n // m
        blk = (o + rng.permutation(n)[: m * b]).reshape(m, b).astype(np.int64)
        sgn = np.where(rng.random((m, b)) < 0.5, -1.0, 1.0) / math.sqrt(b * L)
        idx.append(blk)
        wt.append(sgn)
    return np.concatenate(idx, axis=1), np.concatenate(wt, axis=1).astype(np.float32)


class CanaryAudit:
    """One-run audit of a user's Opacus training (see the module docstring).

    Args:
        out: the run directory to write (must not exist, or be empty; never overwritten).
        canaries: ``m >= 2`` gradient canaries (at most the trainable parameter count).
        seed: seed of the secret draws (inclusion bits, joins) and of the public directions
            (``canary_seed`` derives from it unless given).
        delta: the delta at which the claim (the accountant's epsilon) and the bounds are read.
        kind: ``"gradient"`` (canary gradients in the per-sample gradients; white-box and
            black-box) or ``"input"`` (canary examples inserted in the data set with
            :meth:`insert`, scored on the final model by :meth:`finish`; black-box leakage
            bounds, and the white-box noise, independence, sampling and ledger tests on public
            directions).
        confidence: the verdict's confidence (a correct trainer is flagged with probability at
            most ``1 - confidence``).
        canary_scale: a canary's gradient norm in units of ``C`` (> 1: clipping matters).
        canary_seed: public seed of the directions (default: derived from ``seed``).
        prepay: charges written per durable ledger transaction. When no prepaid charge is left
            at a noise draw, ``prepay`` charges of the declared event are committed (one fsync)
            before it: every update is charged before its noise, and at most ``prepay - 1``
            charges are left unused at the end (charged, never released: the safe direction;
            ``metrics.json`` ``prepaid_unused``). 1 = one durable transaction per update.
        example: the settings of the training loop, kept in config.json (the ``train opacus``
            example writes its own here; None for a user's loop).

    Bad input (a wrong type or value, an existing ``out``) raises
    :class:`~ldp_audit.errors.InvalidParameterError` or
    :class:`~ldp_audit.errors.RunDirectoryError` here or in :meth:`attach`, before any step:
    nothing is charged or written until the first noisy update.
    """

    def __init__(
        self,
        out: Any,
        *,
        canaries: int,
        seed: int,
        delta: float,
        kind: str = "gradient",
        confidence: float = 0.95,
        canary_scale: float = 10.0,
        canary_seed: int | None = None,
        prepay: int = 32,
        example: dict[str, Any] | None = None,
    ) -> None:
        from ldp_audit.rundir import check_new_dir

        if not isinstance(kind, str) or kind not in _KINDS:
            raise InvalidParameterError(f"kind must be one of {_KINDS}, got {kind!r}")
        self.canaries = _int(canaries, "canaries", 2)
        self.seed = _int(seed, "seed", 0)
        self.delta = _real(delta, "delta", lo=0.0, lo_open=True, hi=1.0, hi_open=True)
        self.confidence = _real(confidence, "confidence", lo=0.0, lo_open=True, hi=1.0,
                                hi_open=True)  # fmt: skip
        self.canary_scale = _real(canary_scale, "canary_scale", lo=1.0, lo_open=True)
        self.canary_seed = (
            _int(canary_seed, "canary_seed", 0)
            if canary_seed is not None
            else int(np.random.default_rng([self.seed, 26]).integers(2**31))
        )
        self.kind = kind
        self.prepay = _int(prepay, "prepay", 1)
        if example is not None and not isinstance(example, dict):
            raise InvalidParameterError(f"example must be a dict or None, got {example!r}")
        self.example = example
        self.out = check_new_dir(out, name="out")
        self._opt: Any = None
        self._inserted: Any = None
        self._writer: Any = None
        self._finished = False

    # ------------------------------------------------------------------ input canaries
    def insert(self, dataset: Any, canaries: Any) -> Any:
        """``kind="input"``: the training set with the included canary examples added.

        Call it before ``make_private`` and train on what it returns: each of the ``m`` canary
        examples (``canaries``, a dataset of ``m`` items like ``dataset``'s) is included with
        probability 1/2 (secret) and is then a record like any other (Poisson-sampled by the
        loader). :meth:`finish` scores every canary on the final model.
        """
        from torch.utils.data import ConcatDataset, Subset

        if self.kind != "input":
            raise InvalidParameterError(
                f"insert: only for kind='input' (this audit has kind={self.kind!r})"
            )
        if self._inserted is not None or self._opt is not None:
            raise InvalidParameterError("insert: call it once, before attach")
        try:
            n = len(canaries)
            n_data = len(dataset)
        except TypeError:
            raise InvalidParameterError(
                "insert: dataset and canaries must be datasets with a length, got "
                f"{type(dataset).__name__} and {type(canaries).__name__}"
            ) from None
        if n != self.canaries:
            raise InvalidParameterError(
                f"canaries: insert got {n} canary examples for canaries={self.canaries}"
            )
        if n_data < 1:
            raise InvalidParameterError(f"insert: dataset is empty, got {n_data} records")
        rng = np.random.default_rng([self.seed, 1])
        self._included = rng.random(self.canaries) < 0.5  # secret
        self._inserted = canaries
        return ConcatDataset([dataset, Subset(canaries, np.flatnonzero(self._included).tolist())])

    # ------------------------------------------------------------------ attach
    def attach(
        self,
        optimizer: Any,
        *,
        data_loader: Any = None,
        sample_rate: float | None = None,
        dataset_size: int | None = None,
    ) -> Any:
        """Hook the audit into an Opacus ``DPOptimizer`` (any subclass); returns it.

        The claim is read from the optimizer (``noise_multiplier``, ``max_grad_norm``,
        ``expected_batch_size``, ``loss_reduction``) and from ``data_loader`` (its
        ``sample_rate``, as Opacus's ``DPDataLoader`` has, and ``len(dataset)``) unless
        ``sample_rate`` / ``dataset_size`` are given. Everything is checked before any step.
        """
        import torch
        from opacus.optimizers import DPOptimizer

        import ldp_audit.accountant  # noqa: F401 - imported now, not inside the first step
        from ldp_audit.rundir import check_new_dir

        if self._opt is not None or self._finished:
            raise InvalidParameterError(
                "attach: this CanaryAudit is already attached to an optimizer; use one "
                "CanaryAudit per training run"
            )
        if not isinstance(optimizer, DPOptimizer):
            raise InvalidParameterError(
                f"optimizer must be an opacus.optimizers.DPOptimizer (what "
                f"PrivacyEngine.make_private returns), got {type(optimizer).__name__}"
            )
        if hasattr(optimizer, _MARK):
            raise InvalidParameterError(
                "optimizer is already attached to a CanaryAudit; attach one audit per optimizer"
            )
        if self.kind == "input" and self._inserted is None:
            raise InvalidParameterError(
                "attach: kind='input' needs insert(dataset, canary_examples) first (before "
                "make_private), so that the canaries are records of the loader"
            )
        try:
            from opacus.optimizers import DPOptimizerFastGradientClipping as _Ghost
        except ImportError:  # pragma: no cover - older opacus
            _Ghost = ()  # noqa: N806
        if _Ghost and isinstance(optimizer, _Ghost):
            raise InvalidParameterError(
                f"optimizer {type(optimizer).__name__} uses ghost clipping (no per-sample "
                f"gradients to add canaries to); make_private(..., grad_sample_mode='hooks')"
            )
        sigma = _real(optimizer.noise_multiplier, "optimizer.noise_multiplier", lo=0.0,
                      lo_open=True)  # fmt: skip
        clip = optimizer.max_grad_norm
        if isinstance(clip, (list, tuple)):
            raise InvalidParameterError(
                f"optimizer.max_grad_norm must be one number (per-sample clipping of the whole "
                f"gradient), got the per-layer list {clip!r}"
            )
        clip = _real(clip, "optimizer.max_grad_norm", lo=0.0, lo_open=True)
        reduction = getattr(optimizer, "loss_reduction", "mean")
        if reduction not in ("mean", "sum"):
            raise InvalidParameterError(
                f"optimizer.loss_reduction must be 'mean' or 'sum', got {reduction!r}"
            )
        batch = optimizer.expected_batch_size
        if reduction == "mean":
            batch = _int(batch, "optimizer.expected_batch_size", 1)
        if sample_rate is None:
            sample_rate = getattr(data_loader, "sample_rate", None)
            if sample_rate is None:
                raise InvalidParameterError(
                    f"sample_rate: data_loader {type(data_loader).__name__} has no sample_rate "
                    f"(not an Opacus DPDataLoader, e.g. make_private(..., "
                    f"poisson_sampling=False)); pass sample_rate= the rate the accountant uses"
                )
            q = _real(sample_rate, "data_loader.sample_rate", lo=0.0, lo_open=True, hi=1.0)
        else:
            q = _real(sample_rate, "sample_rate", lo=0.0, lo_open=True, hi=1.0)
        if dataset_size is None and data_loader is not None:
            try:
                dataset_size = len(data_loader.dataset)
            except (AttributeError, TypeError):
                dataset_size = None
        if dataset_size is not None:
            dataset_size = _int(dataset_size, "dataset_size", 1)
        params = [p for p in optimizer.params]
        n_params = int(sum(p.numel() for p in params))
        if self.canaries > n_params:
            raise InvalidParameterError(
                f"canaries must be <= the number of trainable parameters ({n_params}: the "
                f"canary directions are orthonormal), got {self.canaries}"
            )
        check_new_dir(self.out, name="out")  # again: it may have appeared since __init__
        sizes = [int(p.numel()) for p in params]
        idx, weight = canary_blocks(sizes, self.canaries, self.canary_seed)
        rng = np.random.default_rng([self.seed, 1])
        drawn = rng.random(self.canaries) < 0.5  # secret (insert drew the same bits)
        if self.kind == "gradient":
            self._included = drawn
        self._gen = torch.Generator().manual_seed(int(rng.integers(2**62)))  # joins (secret)
        self._claim = {
            "optimizer": f"{type(optimizer).__module__}.{type(optimizer).__qualname__}",
            "noise_multiplier": sigma,
            "max_grad_norm": clip,
            "expected_batch_size": batch,
            "loss_reduction": reduction,
            "sample_rate": q,
            "dataset_size": dataset_size,
            "n_params": n_params,
            "tensor_sizes": sizes,
        }
        self._params = params
        self._shapes = [tuple(p.shape) for p in params]
        self._sizes = [p.numel() for p in params]
        self._idx = torch.as_tensor(idx)
        # per tensor: the design's columns that fall in it (local coordinates and weights)
        offs = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        self._cols: list[Any] = []
        for o, n in zip(offs, sizes, strict=True):
            inside = (idx[0] >= o) & (idx[0] < o + n)
            if not inside.any():
                self._cols.append(None)
                continue
            loc = idx[:, inside] - o
            if not ((loc >= 0) & (loc < n)).all():  # whole-vector blocks (no tensor >= m)
                self._cols = None
                break
            self._cols.append((torch.as_tensor(loc), torch.as_tensor(weight[:, inside])))
        self._bufs: list[Any] = [None] * len(params)
        self._flat_idx = self._idx.reshape(-1)
        self._weight = torch.as_tensor(weight)
        inc_idx = np.flatnonzero(self._included)
        self._inc_idx = inc_idx
        # the included canaries' gradients, flat (n_in, d), built lazily per join
        self._initial = self._flat(params, grad=False)
        # records
        self._proj: list[np.ndarray] = []
        self._rows: list[dict[str, Any]] = []
        self._joins: list[np.ndarray] = []
        self._pending: dict[str, Any] | None = None
        self._charges_since = 0
        self._charges = 0
        self._prepaid = 0
        self._batches = 0
        self._data_rows = 0
        self._t0 = time.perf_counter()
        self._install(optimizer)
        return optimizer

    @staticmethod
    def _flat(params: list[Any], *, grad: bool) -> np.ndarray:
        import torch

        with torch.no_grad():
            t = torch.cat([(p.grad if grad else p).reshape(-1) for p in params])
        return t.detach().cpu().numpy().astype(np.float64)

    def _install(self, opt: Any) -> None:
        orig_clip = opt.clip_and_accumulate
        orig_noise = opt.add_noise
        inner = opt.original_optimizer
        orig_step = inner.step

        def clip_and_accumulate(*a: Any, **k: Any) -> Any:
            self._batches += 1
            gs = opt.grad_samples
            self._data_rows += int(len(gs[0])) if gs else 0
            check = getattr(opt, "_check_skip_next_step", None)
            if check is None or not check(pop_next=False):
                self._add_canaries(opt)
            return orig_clip(*a, **k)

        def add_noise(*a: Any, **k: Any) -> Any:
            self._charge(opt)  # durable, before the noise is drawn
            return orig_noise(*a, **k)

        def step(*a: Any, **k: Any) -> Any:
            self._record(opt)
            return orig_step(*a, **k)

        opt.clip_and_accumulate = clip_and_accumulate
        opt.add_noise = add_noise
        inner.step = step
        setattr(opt, _MARK, self)
        self._opt = opt

    def _uninstall(self) -> None:
        opt = self._opt
        if opt is None:
            return
        for name in ("clip_and_accumulate", "add_noise"):
            opt.__dict__.pop(name, None)
        opt.original_optimizer.__dict__.pop("step", None)
        opt.__dict__.pop(_MARK, None)

    # ------------------------------------------------------------------ per step
    def _add_canaries(self, opt: Any) -> None:
        """Record the data batch size, draw the joins, append joining canaries as samples."""
        import torch

        n_data, self._data_rows = self._data_rows, 0  # every physical batch of this step
        n_in = self._inc_idx.size
        q = self._claim["sample_rate"]
        sel = (torch.rand(n_in, generator=self._gen) < q).numpy() if q < 1 else np.ones(n_in, bool)
        joined = self._inc_idx[sel] if self.kind == "gradient" else self._inc_idx[:0]
        self._pending = {"batch": n_data, "joined": joined}
        k = joined.size
        if k == 0:
            return
        scale = self.canary_scale * self._claim["max_grad_norm"]
        sel_t = torch.as_tensor(joined)
        dense = None
        if self._cols is None:  # blocks across tensors: one dense (k, d) block of rows
            dense = torch.zeros((k, self._claim["n_params"]), dtype=torch.float32)
            dense.scatter_(1, self._idx[sel_t], self._weight[sel_t] * scale)
            offs = np.concatenate([[0], np.cumsum(self._sizes)])
        for i, (p, shape) in enumerate(zip(self._params, self._shapes, strict=True)):
            g = p.grad_sample
            if isinstance(g, list):
                g = torch.cat(g, dim=0)
            n = g.shape[0]
            buf = self._bufs[i]  # reused: no fresh allocation of a (rows, *shape) tensor a step
            if (
                buf is None
                or buf.shape[0] < n + k
                or buf.dtype != g.dtype
                or buf.device != g.device
            ):
                buf = torch.empty((int((n + k) * 1.5) + 1, *shape), dtype=g.dtype, device=g.device)
                self._bufs[i] = buf
            new = buf[: n + k]
            new[:n].copy_(g)
            tail = new[n:].view(k, -1)
            tail.zero_()
            if dense is not None:
                tail.copy_(dense[:, offs[i] : offs[i + 1]])
                p.grad_sample = new
                continue
            cols = self._cols[i]
            if cols is not None:
                local, w = cols
                tail.scatter_(1, local[sel_t].to(g.device),
                              (w[sel_t] * scale).to(dtype=g.dtype, device=g.device))  # fmt: skip
            p.grad_sample = new

    def _ensure_writer(self) -> None:
        if self._writer is not None:
            return
        from ldp_audit.rundir import RunWriter

        self._writer = RunWriter(
            self.out,
            algorithm=ALGORITHM,
            config=self.config(),
            seed=self.seed,
            mechanism=self._mechanism(),
        )
        from ldp_audit.accountant import Accountant

        self._accountant = Accountant(ledger=self._writer.open_ledger(), run_id=str(self.out))

    def _event(self) -> Any:
        from ldp_audit.accountant import GaussianEvent, PoissonSampledEvent

        g = GaussianEvent(self._claim["noise_multiplier"])
        q = self._claim["sample_rate"]
        return g if q >= 1.0 else PoissonSampledEvent(q, g)

    def _charge(self, opt: Any) -> None:
        if self._prepaid == 0:
            self._ensure_writer()
            ev = self._event()
            self._accountant.charge_many([("model", ev)] * self.prepay, scope="central")
            self._charges += self.prepay
            self._prepaid = self.prepay
        self._prepaid -= 1
        self._charges_since += 1

    def _record(self, opt: Any) -> None:
        import torch

        c = self._claim
        with torch.no_grad():
            g = torch.cat([p.grad.reshape(-1).float() for p in self._params])
        unit = (c["expected_batch_size"] if c["loss_reduction"] == "mean" else 1.0) / c[
            "max_grad_norm"
        ]
        acc = getattr(opt, "accumulated_iterations", 1) or 1
        y = (g[self._flat_idx].reshape(self._idx.shape) * self._weight).sum(dim=1)
        self._proj.append(y.numpy().astype(np.float64) * unit * acc)
        pend = self._pending or {"batch": -1, "joined": np.zeros(0, dtype=np.int64)}
        bs = getattr(opt, "expected_batch_size", None)
        self._rows.append(
            {
                "batch_size": pend["batch"],
                "charged": self._charges_since == 1,
                "noise_multiplier": float(opt.noise_multiplier),
                "max_grad_norm": float(opt.max_grad_norm)
                if not isinstance(opt.max_grad_norm, (list, tuple))
                else float("nan"),
                "expected_batch_size": float(bs) if bs is not None else float("nan"),
                "update_norm": float(g.norm()),
            }
        )
        j = np.zeros(self.canaries, dtype=bool)
        j[pend["joined"]] = True
        self._joins.append(j)
        self._pending = None
        self._charges_since = 0

    # ------------------------------------------------------------------ finish
    def config(self) -> dict[str, Any]:
        """The public design and the claim (config.json ``config``)."""
        return {
            "kind": self.kind,
            "canaries": self.canaries,
            "canary_scale": self.canary_scale,
            "canary_seed": self.canary_seed,
            "canary_design": "random blocks in every tensor of >= m entries (canary_blocks)",
            "delta": self.delta,
            "confidence": self.confidence,
            "claim": dict(self._claim),
            "example": self.example,
        }

    def _mechanism(self) -> dict[str, Any]:
        c = self._claim
        return {
            "name": "dp-sgd",
            "noise_multiplier": c["noise_multiplier"],
            "clip": c["max_grad_norm"],
            "sample_rate": c["sample_rate"],
            "expected_batch_size": c["expected_batch_size"],
        }

    def finish(self, *, audit: bool = True, model: Any = None, score_fn: Any = None) -> Any:
        """Write the run directory, run the one-run audit; the white-box result.

        The optimizer is unhooked (later steps are neither charged nor recorded). The result
        (an ``AttackResult``; black-box in ``extra["black_box"]``) is also written into the run
        as ``attack_membership.json``. ``audit=False`` writes the run only and returns its path
        (audit it later with ``ldp-audit attack membership --run-dir``).

        ``kind="input"``: ``model`` (the final model) scores every canary example, by default
        ``-cross_entropy(model(x), y)`` (an ``(x, y)`` dataset); or ``score_fn(model,
        canaries) -> (m,)`` scores, higher meaning "more likely trained on". The scores are
        kept in ``transcript.npz`` (``canary_score``: what a black-box auditor computes).
        """
        if not isinstance(audit, bool):
            raise InvalidParameterError(f"audit must be True or False, got {audit!r}")
        if self.kind == "input" and model is None and self._opt is not None and self._proj:
            raise InvalidParameterError(
                "model: finish() of kind='input' scores the canary examples on the final "
                "model; pass model= (and score_fn= unless the examples are (x, y) pairs)"
            )
        if score_fn is not None and not callable(score_fn):
            raise InvalidParameterError(f"score_fn must be callable, got {score_fn!r}")
        from ldp_audit.rundir import write_artifact

        if self._finished:
            raise InvalidParameterError("finish: this CanaryAudit is already finished")
        if self._opt is None:
            raise InvalidParameterError("finish: attach(optimizer, ...) was never called")
        if not self._proj:
            raise InvalidParameterError(
                f"finish: no optimizer step ran since attach (0 updates); nothing to audit, "
                f"nothing was written to {str(self.out)!r}"
            )
        scores = self._score_inputs(model, score_fn) if self.kind == "input" else None
        self._uninstall()
        self._ensure_writer()
        w = self._writer
        T = len(self._proj)
        rows = self._rows
        extra_tr = {} if scores is None else {"canary_score": scores}
        w.write_npz(
            "transcript.npz",
            {
                "canary_projection": np.stack(self._proj),
                "update_index": np.arange(T, dtype=np.int64),
                "batch_size": np.array([r["batch_size"] for r in rows], dtype=np.int64),
                "charged": np.array([r["charged"] for r in rows], dtype=bool),
                "noise_multiplier": np.array([r["noise_multiplier"] for r in rows]),
                "max_grad_norm": np.array([r["max_grad_norm"] for r in rows]),
                "expected_batch_size": np.array([r["expected_batch_size"] for r in rows]),
                "update_norm": np.array([r["update_norm"] for r in rows]),
                "ledger_charges": np.array([self._charges], dtype=np.int64),
                **extra_tr,
            },
        )
        joins = np.stack(self._joins)
        sec = {"canary_included": self._included.copy()}
        if self.kind == "gradient":
            sec["canary_joins"] = joins
            sec["canary_participations"] = joins.sum(axis=0).astype(np.int64)
        w.write_npz("secrets.npz", sec)
        w.write_json(
            "metrics.json",
            {
                "updates": T,
                "charges": self._charges,
                "prepaid_unused": self._prepaid,
                "prepay": self.prepay,
                "physical_batches": self._batches,
                "seconds": time.perf_counter() - self._t0,
                "privacy": self._privacy(),
            },
        )
        w.write_npz(
            "model.npz",
            {"params": self._flat(self._params, grad=False), "initial": self._initial},
        )
        w.finish()
        self._finished = True
        self._accountant.ledger.close()
        if not audit:
            return self.out
        res = membership(self.out, confidence=self.confidence)
        write_artifact(self.out, "attack_membership.json", res.to_dict())
        return res

    def _score_inputs(self, model: Any, score_fn: Any) -> np.ndarray:
        import torch

        data = self._inserted
        if score_fn is not None:
            s = np.asarray(score_fn(model, data), dtype=np.float64).reshape(-1)
        else:
            out = []
            with torch.no_grad():
                for i in range(0, len(data), 256):
                    items = [data[j] for j in range(i, min(i + 256, len(data)))]
                    try:
                        x = torch.stack([torch.as_tensor(it[0]) for it in items])
                        y = torch.as_tensor([int(it[1]) for it in items])
                    except (TypeError, IndexError, ValueError):
                        raise InvalidParameterError(
                            "score_fn: the canary examples are not (x, y) pairs; pass "
                            "score_fn(model, canaries) -> scores"
                        ) from None
                    loss = torch.nn.functional.cross_entropy(model(x), y, reduction="none")
                    out.append(-loss.double().numpy())
            s = np.concatenate(out)
        if s.shape != (self.canaries,) or not np.isfinite(s).all():
            raise InvalidParameterError(
                f"score_fn must give {self.canaries} finite scores, got shape {s.shape}"
            )
        return s

    def _privacy(self) -> dict[str, Any]:
        by: dict[str, Any] = {}
        for m in ("rdp", "prv"):
            try:
                by[m] = self._accountant.spent("model", delta=self.delta, method=m)
            except Exception as exc:  # noqa: BLE001 - a method that cannot compose is reported
                by[m] = f"unavailable: {exc}"
        finite = [v for v in by.values() if isinstance(v, float)]
        eps = min(finite) if finite else math.inf
        c = self._claim
        return {
            "epsilon": eps,
            "delta": self.delta,
            "by_method": by,
            "unit": "one record of the data set (one per-sample gradient)",
            "words": (
                f"DP-SGD (Opacus {c['optimizer'].rsplit('.', 1)[-1]}), one record = one "
                f"per-sample gradient clipped to C = {c['max_grad_norm']:g}, noise multiplier "
                f"{c['noise_multiplier']:g}, Poisson rate {c['sample_rate']:g}: "
                f"({eps:.4g}, {self.delta:g})-DP over {len(self._proj)} updates (ledger: "
                + ", ".join(
                    f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in by.items()
                )  # fmt: skip
                + ")"
            ),
        }


# ------------------------------------------------------------------------------------------------
# Reading and auditing a run
# ------------------------------------------------------------------------------------------------


def _read(run_dir: Path) -> dict[str, Any]:
    from ldp_audit.rundir import read_config, read_npz

    doc = read_config(run_dir)
    if doc.get("algorithm") != ALGORITHM:
        raise RunDirectoryError(
            f"run_dir {str(run_dir)!r} is a {doc.get('algorithm')!r} run, not an {ALGORITHM!r} run"
        )
    try:
        metrics = json.loads((run_dir / "metrics.json").read_text())
    except (OSError, ValueError) as exc:
        raise RunDirectoryError(f"cannot read {run_dir / 'metrics.json'}: {exc}") from None
    return {
        "doc": doc,
        "config": doc["config"],
        "metrics": metrics,
        "transcript": read_npz(run_dir, "transcript.npz", ("canary_projection", "batch_size")),
        "model": read_npz(run_dir, "model.npz", ("params", "initial")),
    }


def _ledger_test(run_dir: Path, cfg: dict, met: dict, tr: dict) -> dict[str, Any]:
    """The ledger against the transcript and the metrics (deterministic: p is 0 or 1)."""
    from ldp_audit.accountant import Ledger, event_from_json

    claim = cfg["claim"]
    led = Ledger(run_dir / "ledger.sqlite", readonly=True, create=False)
    try:
        hist = led.history("model")
    finally:
        led.close()
    n_charged = int(sum(n for _, n in hist))
    kinds = [event_from_json(e) for e, _ in hist]
    T = int(tr["canary_projection"].shape[0])
    problems = []
    unused = met.get("prepaid_unused", 0)
    prepay = met.get("prepay", 1)
    if not (isinstance(unused, int) and isinstance(prepay, int) and 0 <= unused < prepay):
        problems.append(f"metrics.json: prepaid_unused {unused!r} with prepay {prepay!r}")
    elif n_charged != T + unused:
        problems.append(
            f"{n_charged} charges for {T} released updates ({unused} prepaid charges unused)"
        )
    if met.get("updates") != T or met.get("charges") != n_charged:
        problems.append(
            f"metrics.json says {met.get('updates')} updates / {met.get('charges')} charges, "
            f"the transcript {T}, the ledger {n_charged}"
        )
    if "charged" in tr and not np.asarray(tr["charged"], dtype=bool).all():
        bad = np.flatnonzero(~np.asarray(tr["charged"], dtype=bool))
        problems.append(
            f"{bad.size} updates not preceded by exactly one charge (first: update {bad[0]})"
        )
    from ldp_audit.accountant import GaussianEvent, PoissonSampledEvent

    g = GaussianEvent(float(claim["noise_multiplier"]))
    q = float(claim["sample_rate"])
    declared = g if q >= 1.0 else PoissonSampledEvent(q, g)
    if any(k != declared for k in kinds):
        problems.append(f"charged events {kinds!r} differ from the declared {declared!r}")
    for key in ("noise_multiplier", "max_grad_norm", "expected_batch_size"):
        if key in tr and claim.get(key) is not None:
            v = np.asarray(tr[key], dtype=np.float64)
            if v.size and not np.all(v == float(claim[key])):
                i = int(np.flatnonzero(v != float(claim[key]))[0])
                problems.append(
                    f"optimizer.{key} was {v[i]:g} at update {i}, the claim (charged) "
                    f"{float(claim[key]):g}"
                )
    return {
        "rejected": bool(problems),
        "p_value": 0.0 if problems else 1.0,
        "level": 0.0,
        "charges": n_charged,
        "updates": T,
        "problems": problems,
    }


def _decided_by(tests: dict[str, dict | None]) -> str | None:
    """The flagged test with the smallest p / level (else the closest one, for the record)."""
    best, key = None, math.inf
    for name, t in tests.items():
        if not t or t.get("p_value") is None:
            continue
        lv = t.get("level") or 0.0
        r = (t["p_value"] / lv) if lv > 0 else (0.0 if t["rejected"] else math.inf)
        if t["rejected"] and r < key:
            best, key = name, r
    return best


def audit_run(run_dir: Any, *, setting: str = "white-box", confidence: float = 0.95) -> Any:
    """The one-run audit of an ``opacus`` run; an ``AttackResult`` (``violation`` = any test).

    ``extra`` holds every test (``tests``: p-value, level, rejected), ``flagged_by``,
    ``decided_by``, the perfect-attacker ceiling of the (eps, delta) bound for this canary
    count (``steinke_ceiling``) and the canary count a refutation of the claim by that bound
    would need (``canaries_to_refute``, None when no count does). White-box results also carry
    the black-box result in ``extra["black_box"]`` when called through
    :func:`membership` or :meth:`CanaryAudit.finish`.
    """
    from ldp_audit._validation import check_probability
    from ldp_audit.attacks import one_run as O  # noqa: N812
    from ldp_audit.attacks.membership import membership_metrics
    from ldp_audit.rundir import read_npz

    if setting not in ("white-box", "black-box"):
        raise InvalidParameterError(f"setting must be 'white-box' or 'black-box', got {setting!r}")
    confidence = check_probability(confidence, "confidence")
    t0 = time.perf_counter()
    run_dir = Path(run_dir)
    run = _read(run_dir)
    cfg, met, tr, model = run["config"], run["metrics"], run["transcript"], run["model"]
    claim = cfg["claim"]
    m = int(cfg["canaries"])
    idx, weight = canary_blocks(claim["tensor_sizes"], m, int(cfg["canary_seed"]))
    y = np.asarray(tr["canary_projection"], dtype=np.float64)
    white = setting == "white-box"
    kind = cfg.get("kind", "gradient")
    if kind == "input":  # the examples' scores on the final model (white-box can do no better)
        if "canary_score" not in tr:
            raise RunDirectoryError(f"{run_dir}/transcript.npz lacks canary_score (kind input)")
        scores = np.asarray(tr["canary_score"], dtype=np.float64)
    elif white:
        scores = y.sum(axis=0)
    else:
        delta_theta = np.asarray(model["params"]) - np.asarray(model["initial"])
        scores = -(delta_theta[idx] * weight).sum(axis=1)
    sigma = float(claim["noise_multiplier"])
    q = float(claim["sample_rate"])
    N = claim.get("dataset_size")
    names = ["steinke", "f-dp"]
    if white:
        names += ["noise", "independence"] + (["contribution"] if kind == "gradient" else [])
        names += ["sampling"] if N else []
    conf_each = 1.0 - (1.0 - confidence) / len(names)
    beta = 1.0 - conf_each
    delta = float(cfg["delta"])
    try:
        claimed = O.claimed_lines(run_dir)
    except RunDirectoryError:  # nothing (or several kinds) charged: the ledger test says so
        claimed = None
    ledger = _ledger_test(run_dir, cfg, met, tr) if white else None
    # --- scoring only: the secret bits ---
    sec = read_npz(run_dir, "secrets.npz", ("canary_included",))
    included = np.asarray(sec["canary_included"], dtype=bool)
    one = O.audit_scores(scores, included, delta=delta, confidence=conf_each)
    priv = met.get("privacy", {})
    eps_ub = priv.get("epsilon", math.inf)
    eps_ub = math.inf if eps_ub in ("inf", None) else float(eps_ub)
    both = bool(included.any() and (~included).any())
    tests: dict[str, dict | None] = {}
    stein_rej = one["epsilon_lower_bound"] > eps_ub * (1.0 + 1e-12)
    tests["steinke"] = {"rejected": bool(stein_rej), "p_value": None, "level": beta,
                        "epsilon_lower_bound": one["epsilon_lower_bound"]}  # fmt: skip
    tests["f-dp"] = (
        O.fdp_audit_scores(scores, included, claimed["lines"], confidence=conf_each)
        if both and claimed is not None
        else None
    )
    if tests["f-dp"] is not None:
        tests["f-dp"]["p_value"] = min((r["p_value"] for r in tests["f-dp"]["p_values"]),
                                       default=1.0)  # fmt: skip
        # the f-DP test rejects when one of its fractions is below level / fractions
        tests["f-dp"]["level_each"] = tests["f-dp"]["level"]
    if white:
        tests["noise"] = O.noise_test(y, sigma=sigma, confidence=conf_each)
        tests["independence"] = O.independence_test(y, sigma=sigma, confidence=conf_each)
        if kind == "gradient":
            joins = read_npz(run_dir, "secrets.npz", ("canary_joins",))["canary_joins"]
            bs = np.maximum(np.asarray(tr["batch_size"], dtype=np.int64), 0)
            tests["contribution"] = O.contribution_test(
                y, joins, included, bs, sigma=sigma, sample_rate=q,
                canary_norm=float(cfg["canary_scale"]), confidence=conf_each,
            )  # fmt: skip
        if N:
            known = np.asarray(tr["batch_size"]) >= 0
            tests["sampling"] = (
                O.sampling_test(
                    np.asarray(tr["batch_size"])[known],
                    dataset_size=int(N),
                    sample_rate=q,
                    confidence=conf_each,
                )  # fmt: skip
                if known.any()
                else None
            )
        tests["ledger"] = ledger
    flagged = [k for k, t in tests.items() if t and t.get("rejected")]
    mm = membership_metrics(scores, included) if both else {"auc": None, "advantage": 0.0,
                                                           "tpr_at_fpr": {}}  # fmt: skip
    ceiling_eps = O.steinke_ceiling(m, delta=delta, beta=beta / len(O.FRACTIONS))
    need = O.canaries_to_refute(eps_ub, delta=delta, beta=beta / len(O.FRACTIONS))
    r = one["guesses"]
    return O.one_run_result(
        attack=f"one-run-{setting}",
        mechanism={
            "name": "dp-sgd",
            **{
                k: claim[k]
                for k in ("noise_multiplier", "max_grad_norm", "sample_rate", "expected_batch_size")
            },
        },  # fmt: skip
        epsilon=eps_ub,
        canaries=m,
        one=one,
        membership=mm,
        confidence=confidence,
        seconds=time.perf_counter() - t0,
        extra={
            "setting": setting,
            "algorithm": ALGORITHM,
            "method": "Steinke, Nasr & Jagielski 2023, Cor. 5.4 (eps, delta)",
            "delta": delta,
            "guesses": r,
            "guess_fraction": one["fraction"],
            "per_fraction": one["per_fraction"],
            "members": int(included.sum()),
            "accountant": priv.get("by_method"),
            "updates": met.get("updates"),
            "privacy_unit": priv.get("unit"),
            "claim": claim,
            "n_tests": len(names),
            "confidence_each": conf_each,
            "tests": tests,
            "f_dp": tests["f-dp"],
            "steinke_ceiling": ceiling_eps,
            "canaries_to_refute": need,
            "flagged_by": flagged,
            "decided_by": _decided_by(tests),
        },
    )


def membership(
    run_dir: Any, *, seed: int = 0, confidence: float = 0.95, progress: bool = False
) -> Any:
    """``ldp-audit attack membership --run-dir RUN`` of an opacus run: the white-box result,
    the black-box one in ``extra["black_box"]`` (``seed`` and ``progress`` are unused: the
    audit draws nothing)."""
    white = audit_run(run_dir, setting="white-box", confidence=confidence)
    black = audit_run(run_dir, setting="black-box", confidence=confidence)
    white.extra["black_box"] = black.to_dict()
    return white


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    v = float(v)
    return "inf" if math.isinf(v) else f"{v:.4g}"


def report_sections(run_dir: Path, extra: list[Path] | None = None) -> list[dict]:
    """The claim, the accountant's guarantee and the one-run audit, for ``ldp-audit report``."""
    run_dir = Path(run_dir)
    run = _read(run_dir)
    cfg, met = run["config"], run["metrics"]
    priv = met.get("privacy", {})
    claim = cfg["claim"]
    rows = [[k, v if isinstance(v, str) else str(v) if isinstance(v, list) else _fmt(v)]
            for k, v in claim.items()]  # fmt: skip
    rows += [["epsilon (accountant)", _fmt(priv.get("epsilon"))], ["delta", _fmt(cfg["delta"])],
             ["updates", met.get("updates")], ["canaries", cfg["canaries"]]]  # fmt: skip
    sections = [
        {
            "id": "opacus-claim",
            "title": "DP-SGD claim read from the Opacus optimizer",
            "paragraphs": [str(priv.get("words", ""))],
            "tables": [{"caption": "claim", "header": ["quantity", "value"], "rows": rows}],
            "figures": {},
            "data": {"claim": claim, "privacy": priv},
        }
    ]
    audits = []
    cands = [run_dir / "attack_membership.json"]
    for e in extra or []:
        e = Path(e)
        cands.extend(sorted(e.glob("*.json")) if e.is_dir() else [e])
    for f in cands:
        try:
            d = json.loads(Path(f).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(d, dict) and str(d.get("attack", "")).startswith("one-run"):
            audits.append(d)
    arows = []
    for top in audits:
        bb = top.get("extra", {}).get("black_box")
        for d in [top] + ([bb] if isinstance(bb, dict) else []):
            ex = d.get("extra", {})
            for name, t in (ex.get("tests") or {}).items():
                if not t:
                    continue
                arows.append(
                    [
                        ex.get("setting", d.get("attack")),
                        name,
                        _fmt(t.get("epsilon_lower_bound", t.get("p_value"))),
                        _fmt(t.get("level")),
                        "REJECTED" if t.get("rejected") else "consistent",
                    ]
                )
            arows.append(
                [
                    ex.get("setting", d.get("attack")),
                    "verdict",
                    f"eps lb {_fmt(d.get('epsilon_lower_bound'))} vs accountant "
                    f"{_fmt(d.get('composed_epsilon'))} (ceiling {_fmt(ex.get('steinke_ceiling'))}"
                    f", canaries to refute {_fmt(ex.get('canaries_to_refute'))})",
                    _fmt(d.get("confidence")),
                    ("VIOLATION" if d.get("violation") else "consistent")
                    + (f" (decided by {ex['decided_by']})" if ex.get("decided_by") else ""),
                ]
            )
    if arows:
        sections.append(
            {
                "id": "opacus-audit",
                "title": "One-run audit of the Opacus training",
                "paragraphs": [
                    "Each test reads the same run and takes a Bonferroni share of 1 - "
                    "confidence (the ledger check is deterministic): a correct trainer is "
                    "flagged with probability at most 1 - confidence. For the (eps, delta) bound "
                    "the value is the lower bound on epsilon; for the others the p-value."
                ],
                "tables": [
                    {
                        "caption": "one-run audit",
                        "header": ["setting", "test", "value", "level", "result"],
                        "rows": arows,
                    }
                ],
                "figures": {},
                "data": {"audits": audits},
            }
        )
    return sections


# ------------------------------------------------------------------------------------------------
# The "opacus" system (ldp_audit.systems): a run written by CanaryAudit, and a worked example
# trainer (`ldp-audit train opacus`: scikit-learn's digits, an MLP, Opacus, the audit)
# ------------------------------------------------------------------------------------------------

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
    example: dict | None = None

    def __post_init__(self) -> None:
        _int(self.canaries, "canaries", 2)
        _real(self.delta, "delta", lo=0.0, lo_open=True, hi=1.0, hi_open=True)
        if self.kind not in _KINDS:
            raise InvalidParameterError(f"kind must be one of {_KINDS}, got {self.kind!r}")
        _real(self.confidence, "confidence", lo=0.0, lo_open=True, hi=1.0, hi_open=True)
        _real(self.canary_scale, "canary_scale", lo=1.0, lo_open=True)
        if self.canary_seed is not None:
            _int(self.canary_seed, "canary_seed", 0)
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
        known = {f.name for f in fields(cls)}
        bad = sorted(set(d) - known)
        if bad:
            raise InvalidParameterError(f"unknown opacus config keys {bad}; known: {sorted(known)}")
        return cls(**d)

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
    ex = {**EXAMPLE_DEFAULTS, **(cfg.example or {})}
    t0 = time.perf_counter()
    tmp = None
    if run_dir is None:
        tmp = tempfile.TemporaryDirectory()
        run_dir = Path(tmp.name) / "run"
    try:
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
        for _ in range(int(ex["epochs"])):
            for xb, yb in loader:
                opt.zero_grad()
                nn.functional.cross_entropy(model(xb), yb).backward()
                opt.step()
        audit.finish(audit=False)
        with torch.no_grad():
            acc = float((model(data.tensors[0]).argmax(1) == data.tensors[1]).float().mean())
        met = json.loads((Path(run_dir) / "metrics.json").read_text())
        metrics = {"updates": met["updates"], "train_accuracy": acc}
        return TrainResult(
            system=ALGORITHM,
            config=cfg,
            seed=int(seed),
            seconds=time.perf_counter() - t0,
            privacy=met["privacy"],
            metrics=metrics,
            run_dir=None if tmp is not None else Path(run_dir),
            native=met,
        )
    finally:
        if tmp is not None:
            tmp.cleanup()


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
    config="ldp_audit.opacus:OpacusRunConfig",
    trainer="ldp_audit.opacus:train_digits",
    schema="ldp_audit.opacus:transcript_schema",
    charges="ldp_audit.opacus:ledger_charges",
    attacks={"membership": "ldp_audit.opacus:membership"},
    report_sections="ldp_audit.opacus:report_sections",
    tiny_config={"canaries": 20, "example": {"epochs": 1, "batch_size": 256, "hidden": 4}},
)
