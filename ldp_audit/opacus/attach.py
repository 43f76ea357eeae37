"""Planting the canaries: :class:`CanaryAudit` and its hooks on an Opacus ``DPOptimizer``
(docs/opacus.md).

``attach`` reads the claim from the optimizer and the loader and wraps three public steps of
the optimizer (instance attributes): ``clip_and_accumulate`` (the joining canaries appended to
the per-sample gradients, which the optimizer's own code then clips), ``add_noise`` (the ledger
charged first) and the wrapped optimizer's ``step`` (the released update projected on the
canary directions). Per step the hooks gather precomputed canary rows into a reused buffer and
keep the projections as tensors; :meth:`CanaryAudit.records` converts them once.
:mod:`ldp_audit.opacus.writer` writes the run directory, :mod:`ldp_audit.opacus.scoring` audits it.
"""

from __future__ import annotations

import operator
import time
import types
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError
from ldp_audit.opacus.canaries import (
    AUDIT_MARK,
    CANARY_KINDS,
    MAX_CANARY_SCALE,
    NOISE_SKETCH,
    ROWS,
    ZERO_RELEASES,
    canary_blocks,
    check_out,
    dataset_holds,
    noise_sketch,
)
from ldp_audit.opacus.embed import AuditRecords, check_embedding, dense_rows, flat_params
from ldp_audit.opacus.recorder import NOISE_ARRAYS, UpdateRecorder
from ldp_audit.validation import check_bool, check_choice, check_int, check_real_in

__all__ = ["CanaryAudit", "read_claim"]


def _batches(g: Any) -> tuple[list[Any], Any]:
    """A parameter's ``grad_sample`` as (the earlier accumulated batches, the last batch)."""
    return (list(g[:-1]), g[-1]) if isinstance(g, list) else ([], g)


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
        out: Any = None,
        *,
        canaries: int,
        seed: int,
        delta: float,
        kind: str = "gradient",
        confidence: float = 0.95,
        canary_scale: float = 10.0,
        canary_seed: int | None = None,
        prepay: int | None = None,
        example: dict[str, Any] | None = None,
        accountant: Any = None,
        writer: Any = None,
        charge: bool = True,
        directions: Any = None,
        rng: Any = None,
        generator: Any = None,
    ) -> None:
        check_choice(kind, "kind", CANARY_KINDS)
        self.canaries = check_int(canaries, "canaries", minimum=2)
        self.seed = check_int(seed, "seed", minimum=0)
        self.delta = check_real_in(delta, "delta", lo=0.0, lo_open=True, hi=1.0, hi_open=True)
        self.confidence = check_real_in(confidence, "confidence", lo=0.0, lo_open=True, hi=1.0,
                                        hi_open=True)  # fmt: skip
        self._embed = check_embedding(out, accountant=accountant, writer=writer, charge=charge,
                                      directions=directions, rng=rng, generator=generator,
                                      kind=kind, canaries=self.canaries)  # fmt: skip
        self.embedded = self._embed is not None
        # an embedding trainer may plant canaries of norm exactly C (DprlConfig allows 1)
        self.canary_scale = check_real_in(
            canary_scale, "canary_scale", lo=1.0, lo_open=not self.embedded, hi=MAX_CANARY_SCALE
        )
        self.canary_seed = (
            check_int(canary_seed, "canary_seed", minimum=0)
            if canary_seed is not None
            else int(np.random.default_rng([self.seed, 26]).integers(2**31))
        )
        self.kind = kind
        self.prepay = check_int(
            (1 if self.embedded else 32) if prepay is None else prepay, "prepay", minimum=1
        )
        if example is not None and not isinstance(example, dict):
            raise InvalidParameterError(f"example must be a dict or None, got {example!r}")
        self.example = example
        if out is None and not self.embedded:
            raise InvalidParameterError(
                "out must be a path (str) for the run directory, got None (or embed the audit "
                "in your trainer's run: accountant=..., docs/opacus.md)"
            )
        self.out = None if self.embedded else check_out(out)
        self._opt: Any = None
        self._inserted: Any = None
        self._writer: Any = None if not self.embedded else self._embed.writer
        self._accountant: Any = None if not self.embedded else self._embed.accountant
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
        self._inserted_into = ConcatDataset(
            [dataset, Subset(canaries, np.flatnonzero(self._included).tolist())]
        )
        return self._inserted_into

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
        if hasattr(optimizer, AUDIT_MARK):
            raise InvalidParameterError(
                "optimizer is already attached to a CanaryAudit; attach one audit per optimizer"
            )
        if self.kind == "input" and self._inserted is None:
            raise InvalidParameterError(
                "attach: kind='input' needs insert(dataset, canary_examples) first (before "
                "make_private), so that the canaries are records of the loader"
            )
        if self.kind == "input" and not dataset_holds(getattr(data_loader, "dataset", None),
                                               self._inserted_into):  # fmt: skip
            raise InvalidParameterError(
                "data_loader: kind='input' needs the loader built on the dataset insert() "
                f"returned (the canaries are records only there); got a "
                f"{type(data_loader).__name__} whose dataset does not hold it (was the loader "
                "built before insert? build it, and make_private, after insert)"
            )
        claim = read_claim(optimizer, data_loader, sample_rate, dataset_size, self.embedded)
        params = list(optimizer.params)
        n_params, sizes = claim["n_params"], claim["tensor_sizes"]
        clip = claim["max_grad_norm"]
        if self.canaries > n_params:
            raise InvalidParameterError(
                f"canaries must be <= the number of trainable parameters ({n_params}: the "
                f"canary directions are orthonormal), got {self.canaries}"
            )
        if self.canary_scale * clip * max(PROBE) > _F32_NORM_MAX:  # see MAX_CANARY_SCALE
            raise InvalidParameterError(
                f"canary_scale x optimizer.max_grad_norm = {self.canary_scale:g} x {clip:g} is "
                f"too large: canary norms up to {max(PROBE):g} times it (the clipping probe) "
                f"would overflow the float32 per-sample norms; keep the product <= "
                f"{_F32_NORM_MAX / max(PROBE):.3g}"
            )
        emb = self._embed
        u = None if emb is None else emb.directions
        if u is not None and u.shape[0] != n_params:
            raise InvalidParameterError(
                f"directions must have one row per trainable parameter ({n_params}), got "
                f"shape {u.shape}"
            )
        if not self.embedded:
            check_out(self.out)  # again: it may have appeared since __init__
        if u is None:
            idx, weight = canary_blocks(sizes, self.canaries, self.canary_seed)
        else:  # the caller's dense frame: no blocks (the projections are u^T g)
            idx, weight = np.zeros((self.canaries, 1), np.int64), np.zeros((self.canaries, 1))
        rng = np.random.default_rng([self.seed, 1])
        # the secret bits from the caller's generator, else from the seed (as insert drew them)
        drawn = (rng if emb is None or emb.rng is None else emb.rng).random(self.canaries) < 0.5
        if self.kind == "gradient":
            self._included = drawn
        self._gen = (  # joins (secret), in the caller's order of draws when it gives a generator
            torch.Generator().manual_seed(int(rng.integers(2**62)))
            if emb is None or emb.generator is None
            else emb.generator
        )
        self._claim = claim
        self._ghost = claim["ghost_clipping"]
        self._params = params
        self._idx = torch.as_tensor(idx)
        self._bufs: list[Any] = [None] * len(params)
        self._weight = torch.as_tensor(weight)
        self._scale = self.canary_scale * clip
        # per tensor, once: the canary rows' local coordinates and values (weight x scale) that
        # fall in it, so that a step only gathers the joining canaries' rows and scatters them
        offs = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        self._vals: list[Any] | None = []
        for o, n in zip(offs, sizes, strict=True):
            inside = (idx[0] >= o) & (idx[0] < o + n)
            loc = idx[:, inside] - o
            if not ((loc >= 0) & (loc < n)).all():  # whole-vector blocks (no tensor >= m)
                self._vals = None
                break
            w = torch.as_tensor(weight[:, inside]) * self._scale
            self._vals.append((torch.as_tensor(loc), w) if inside.any() else None)
        # a dense frame: per tensor, the included canaries' rows (n_included, *shape)
        self._dense = (
            None
            if u is None
            else dense_rows(torch.as_tensor(u[:, self._included].T * self._scale), params)
        )
        self._inc_idx = np.flatnonzero(self._included)
        self._inc_idx_t = torch.as_tensor(self._inc_idx, dtype=torch.int64)
        mean = claim["loss_reduction"] == "mean"
        self._unit = (claim["expected_batch_size"] if mean else 1.0) / clip
        self._initial = flat_params(params)
        # what each released update shows of the canaries and of the noise (ldp_audit.opacus.
        # recorder); the hooks' own records are Python scalars, converted once by records()
        self._rec = UpdateRecorder(
            params,
            idx=idx,
            weight=weight,
            dense=u,
            clip=clip,
            sketch=noise_sketch(sizes, NOISE_SKETCH, self.canary_seed)[0],
        )
        self._accs: list[int] = []  # accumulated iterations at each update
        self._acc_clip = 1  # as read when the update's last batch was clipped
        self._rows: list[tuple] = []  # (batch, charged, sigma, C, expected batch) per update
        self._joins: list[Any] = []  # the canaries that joined each update (indices)
        self._pending: Any = None  # the canaries drawn to join the update being summed
        self._after: list[Any] | None = None  # the parameters after the last released update
        self._snapped = False  # whether _after holds them (its buffers are reused)
        self._moved: list[int] = []  # updates before which the parameters changed unreleased
        self._charges_since = 0
        self._aborted = 0
        self._charges = 0
        self._prepaid = 0
        self._batches = 0
        self._data_rows = 0
        self._t0 = time.perf_counter()
        self._install(optimizer)
        return optimizer

    def _rows_now(self) -> int:
        """The per-sample rows of this physical batch (``len(opt.grad_samples[0])``, without
        concatenating accumulated batches; ghost clipping: the per-sample norms')."""
        g = getattr(self._params[0], "grad_sample", None)
        if g is None:
            # Opacus's public reader (get_norm_sample) is the wrapped model's, which attach
            # does not receive: the parameter's private field (docs/opacus.md, ghost clipping)
            g = getattr(self._params[0], "_norm_sample", None) if self._ghost else None
            return 0 if g is None else int(len(g))
        return int(sum(len(x) for x in g)) if isinstance(g, list) else int(len(g))

    def _install(self, opt: Any) -> None:
        # ghost clipping: pre_step calls accumulate() (p.grad, the clipped sum, into
        # summed_grad), not clip_and_accumulate; the canaries go into p.grad just before
        hook = "accumulate" if self._ghost else "clip_and_accumulate"
        self._hooked = (hook, "add_noise")
        orig_clip = getattr(opt, hook)
        orig_noise = opt.add_noise
        inner = opt.original_optimizer
        orig_step = inner.step

        def clip_and_accumulate(*a: Any, **k: Any) -> Any:
            self._same_tensors(opt)
            self._batches += 1
            if getattr(self._params[0], "summed_grad", None) is None:  # a fresh clipped sum
                self._data_rows, self._pending = 0, None
            # n_t counts every batch summed into this update; the canaries join it once, so
            # two sampled batches summed under one noise draw show as a batch of rate 2q
            self._data_rows += self._rows_now()
            # a peek at Opacus's skip queue: no public reader exists (signal_skip_step writes it)
            check = getattr(opt, "_check_skip_next_step", None)
            if self._pending is None and (check is None or not check(pop_next=False)):
                self._add_canaries(opt)
            out = orig_clip(*a, **k)
            self._acc_clip = _accumulated(opt, 1)  # as scale_grad will read it
            self._rec.clipped()
            return out

        def add_noise(*a: Any, **k: Any) -> Any:
            self._charge(opt)  # durable, before the noise is drawn
            try:
                return orig_noise(*a, **k)
            except BaseException:
                # charged, nothing released: the charge stays (the safe side) and is counted
                # as aborted, so the ledger test does not take it for an uncharged update
                self._charges_since -= 1
                self._aborted += 1
                raise

        def step(*a: Any, **k: Any) -> Any:
            self._record(opt)
            out = orig_step(*a, **k)
            now = self._watched()
            if self._after is None or len(self._after) != len(now):
                self._after = [v.detach().clone() for v in now]
            else:  # into the same buffers: no fresh copy of the model a step
                for b, v in zip(self._after, now, strict=True):
                    b.copy_(v.detach())
            self._snapped = True
            return out

        setattr(opt, hook, clip_and_accumulate)
        opt.add_noise = add_noise
        # a bound method, as torch's LR schedulers made after attach wrap it (step.__func__)
        self._inner_step = inner.__dict__.get("step")  # a scheduler's wrapper made before
        inner.step = types.MethodType(lambda _inner, *a, **k: step(*a, **k), inner)
        setattr(opt, AUDIT_MARK, self)
        self._opt = opt

    def _uninstall(self) -> None:
        opt = self._opt  # finish() calls it only once attached
        for name in self._hooked:
            opt.__dict__.pop(name, None)
        opt.original_optimizer.__dict__.pop("step", None)
        if self._inner_step is not None:
            opt.original_optimizer.step = self._inner_step
        opt.__dict__.pop(AUDIT_MARK, None)

    # ------------------------------------------------------------------ per step
    def _same_tensors(self, opt: Any) -> None:
        """The optimizer's trainable tensors are those of ``attach`` (a tensor frozen or thawed
        since, by ``requires_grad``, is refused by name before its update is charged)."""
        now = opt.params
        if len(now) == len(self._params) and all(map(operator.is_, now, self._params)):
            return
        ids = {id(p) for p in now}
        gone = [i for i, p in enumerate(self._params) if id(p) not in ids]
        shape = "x".join(map(str, self._params[gone[0]].shape)) if gone else ""
        what = f"tensor {gone[0]} ({shape})" if gone else f"{len(now) - len(self._params)} more"
        raise InvalidParameterError(
            f"optimizer.params: the trainable tensors changed since attach ({what}: "
            f"requires_grad toggled, or a parameter group added, after attach); the audit "
            f"follows the {len(self._params)} tensors trainable at attach: set requires_grad "
            f"before attach and keep it for the run"
        )

    def _add_canaries(self, opt: Any) -> None:
        """Record the data batch size, draw the joins, append joining canaries as samples."""
        import torch

        n_in = self._inc_idx.size
        q = self._claim["sample_rate"]
        sel = torch.rand(n_in, generator=self._gen) < q if q < 1 and n_in else None
        joined = self._inc_idx_t if sel is None else self._inc_idx_t[sel]
        if self.kind != "gradient":  # input canaries join as records of the loader
            joined = self._inc_idx_t[:0]
        self._pending = joined
        k = int(joined.numel())
        if k == 0:
            return
        if self._dense is not None or self._ghost or self._vals is None:
            self._add_rows(joined, sel)  # a dense frame, ghost clipping, blocks across tensors
            return
        for i, p in enumerate(self._params):
            # a list: accumulated backward passes; the canaries join its last batch and the
            # list stays (Opacus's accumulated_iterations, its scale_grad divisor and its
            # accountant's rate factor, is its length)
            head, g = _batches(p.grad_sample)
            n = len(g)
            buf = self._bufs[i]  # reused: no fresh allocation of a (rows, *shape) tensor a step
            if (
                buf is None
                or buf.shape[0] < n + k
                or (buf.dtype, buf.device) != (g.dtype, g.device)
            ):
                buf = torch.empty((int((n + k) * 1.5) + 1, *p.shape), dtype=g.dtype,
                                  device=g.device)  # fmt: skip
                self._bufs[i] = buf
            new = buf[: n + k]
            new[:n].copy_(g)  # straight into the buffer (one copy, not two)
            tail = new[n:].view(k, -1)
            tail.zero_()
            if self._vals[i] is not None:
                local, v = self._vals[i]
                if v.dtype != g.dtype or v.device != g.device:
                    local, v = local.to(g.device), v.to(dtype=g.dtype, device=g.device)
                    self._vals[i] = (local, v)
                tail.scatter_(1, local.index_select(0, joined), v.index_select(0, joined))
            p.grad_sample = [*head, new] if head else new

    def _add_rows(self, joined: Any, sel: Any) -> None:
        """Dense frame, ghost clipping or blocks across tensors: the joining canaries' rows
        (``sel``: the Poisson mask over the included canaries, None when all joined), as
        per-sample gradients (appended to ``p.grad_sample``, clipped by the optimizer's own
        code) or, under ghost clipping, clipped with Opacus's factor ``min(1, C / (norm +
        1e-6))`` and added to the clipped sum ``p.grad`` before the noise."""
        import torch

        if self._dense is None:  # per tensor, the joining canaries' gradients (k, *shape)
            dense = torch.zeros((int(joined.numel()), self._claim["n_params"]), dtype=torch.float32)
            dense.scatter_(1, self._idx[joined], self._weight[joined] * self._scale)
            rows = dense_rows(dense, self._params)
        elif sel is None:
            rows = list(self._dense)
        else:
            sel = sel.to(self._dense[0].device)  # drawn on the CPU generator
            rows = [r[sel] for r in self._dense]
        if not self._ghost:
            for p, r in zip(self._params, rows, strict=True):
                head, g = _batches(p.grad_sample)  # the list kept (above)
                new = torch.cat([g, r], dim=0)
                p.grad_sample = [*head, new] if head else new
            return
        n = int(joined.numel())
        norms = sum(r.reshape(n, -1).pow(2).sum(dim=1) for r in rows).sqrt()
        factor = (self._claim["max_grad_norm"] / (norms + 1e-6)).clamp(max=1.0)
        for p, r in zip(self._params, rows, strict=True):
            p.grad = p.grad + torch.einsum("i,i...", factor.to(r.dtype), r)

    def _ensure_writer(self) -> None:
        if self._writer is None and not self.embedded:
            from ldp_audit.opacus.writer import open_run

            self._writer, self._accountant = open_run(self)

    def _charge(self, opt: Any) -> None:
        if self.embedded and not self._embed.charge:  # the caller's door charges
            self._charges_since += 1
            return
        if self._prepaid == 0:
            from ldp_audit.opacus.writer import declared_event

            self._ensure_writer()
            ev = declared_event(self._claim)
            self._accountant.charge_many([("model", ev)] * self.prepay, scope="central")
            self._charges += self.prepay
            self._prepaid = self.prepay
        self._prepaid -= 1
        self._charges_since += 1

    def _watched(self) -> list:
        """The parameters and the wrapped optimizer's state tensors (momentum, Adam's
        moments): what the next step reads besides the released gradient."""
        import torch

        state = self._opt.original_optimizer.state
        return [*self._params, *(v for p in self._params for v in state.get(p, {}).values()
                                 if isinstance(v, torch.Tensor))]  # fmt: skip

    def _check_moved(self) -> None:
        """Note the update (its index; T: after the last) before which the parameters or the
        wrapped optimizer's state had changed since the last released update: a change no
        released update made (a hidden step, a step with another gradient than the one
        released, a raw gradient written into the momentum or Adam's moments)."""
        import torch

        if not self._snapped:
            return
        self._snapped = False
        now, after = self._watched(), self._after or []
        if len(now) != len(after) or bool(
            torch.stack(
                [torch.ne(v.detach(), b).any() for v, b in zip(now, after, strict=True)]
            ).any()
        ):
            self._moved.append(len(self._rows))  # one device sync above, not one per tensor

    def _record(self, opt: Any) -> None:
        """The released update recorded (:class:`~ldp_audit.opacus.recorder.UpdateRecorder`)
        with this update's batch size, joins, charge and the optimizer's claim fields."""
        acc = _accumulated(opt, self._acc_clip)
        self._rec.record(self._unit * acc)
        self._accs.append(acc)
        self._check_moved()
        joined = self._pending
        batch = -1 if joined is None else self._data_rows
        joined = self._inc_idx_t[:0] if joined is None else joined
        bs = getattr(opt, "expected_batch_size", None)
        clip = opt.max_grad_norm
        self._rows.append(
            (
                batch,
                self._charges_since == 1,
                float(opt.noise_multiplier),
                float("nan") if isinstance(clip, (list, tuple)) else float(clip),
                float(bs) if bs is not None else float("nan"),
            )
        )
        self._joins.append(joined)
        self._pending, self._data_rows = None, 0
        self._charges_since = 0

    def records(self) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """What the hooks recorded: the transcript's arrays, one row per released update, and
        the secrets (secrets.npz: the inclusion bits and, for gradient canaries, the joins and
        counts). Embedded: ``canary_projection`` in the caller's gradient units (``<g_t,
        u_i>``, float64), without ``update_index`` / ``update_norm`` (the caller's transcript
        has its own)."""
        rec = self._rec.arrays()
        T = rec["canary_projection"].shape[0]
        rows = list(zip(*self._rows, strict=True)) if T else [()] * len(ROWS)
        joins = np.zeros((T, self.canaries), dtype=bool)
        for t, j in enumerate(self._joins):
            joins[t, j.numpy()] = True
        out = {
            "canary_projection": rec["canary_projection"]
            if self.embedded
            else rec["canary_projection"] * self._unit * np.asarray(self._accs, float)[:, None],
            **{k: np.array(col, dtype=dt) for (k, dt), col in zip(ROWS, rows, strict=True)},
            **{k: rec[k] for k in NOISE_ARRAYS},
        }
        if not self.embedded:
            out["update_index"] = np.arange(T, dtype=np.int64)
            out["update_norm"] = rec["update_norm"]
        sec = {"canary_included": self._included.copy()}
        if self.kind == "gradient":
            sec["canary_joins"] = joins
            sec["canary_participations"] = joins.sum(axis=0).astype(np.int64)
        return out, sec

    def _embedded_records(self) -> AuditRecords:
        """An embedded audit's records (:class:`~ldp_audit.opacus.embed.AuditRecords`)."""
        rec, sec = self.records()
        charges = self._charges
        acc = self._accountant
        if not self._embed.charge and acc is not None:  # the caller's: count them once
            charges = sum(1 for r in acc.ledger.records("model") if r.get("scope") == "central")
        return AuditRecords(
            transcript=rec,
            secrets=sec,
            joins=sec["canary_joins"],
            design={
                **{k: v for k, v in self.config().items() if k != "example"},
                "directions": "blocks" if self._dense is None else "given",
            },
            ledger_charges=int(charges),
        )

    # ------------------------------------------------------------------ finish
    def config(self) -> dict[str, Any]:
        """The public design and the claim (config.json ``config``)."""
        return {
            "kind": self.kind,
            "canaries": self.canaries,
            "canary_scale": self.canary_scale,
            "canary_seed": self.canary_seed,
            "canary_design": "random blocks in every tensor of >= m entries (canary_blocks)",
            "noise_sketch": NOISE_SKETCH,
            "delta": self.delta,
            "confidence": self.confidence,
            "claim": dict(self._claim),
            "example": self.example,
        }

    def _mechanism(self) -> dict[str, Any]:
        return {
            "name": "dp-sgd",
            "noise_multiplier": self._claim["noise_multiplier"],
            "clip": self._claim["max_grad_norm"],
            "sample_rate": self._claim["sample_rate"],
            "expected_batch_size": self._claim["expected_batch_size"],
            "delta": self.delta,
        }

    def finish(self, *, audit: bool = True, model: Any = None, score_fn: Any = None,
               transcript: dict[str, Any] | None = None) -> Any:  # fmt: skip
        """Write the run directory, run the one-run audit; the white-box result.

        Embedded (``accountant=``, no ``out``): unhook and return the
        :class:`~ldp_audit.opacus.embed.AuditRecords`; with a ``writer``, also write
        ``transcript.npz`` (the caller's ``transcript`` arrays and ``canary_projection``) and
        ``secrets.npz`` through it. Nothing is audited here (``audit`` is ignored): the caller
        finishes its run and audits it with its own reader. Without updates the records are
        empty (no error: the caller's run may have stopped before its first update).

        The optimizer is unhooked (later steps are neither charged nor recorded). The result
        (an ``AttackResult``; black-box in ``extra["black_box"]``) is also written into the run
        as ``attack_membership.json``. ``audit=False`` writes the run only and returns its path
        (audit it later with ``ldp-audit attack membership --run-dir``).

        ``kind="input"``: ``model`` (the final model) scores every canary example, by default
        ``-cross_entropy(model(x), y)`` (an ``(x, y)`` dataset); or ``score_fn(model,
        canaries) -> (m,)`` scores, higher meaning "more likely trained on". The scores are
        kept in ``transcript.npz`` (``canary_score``: what a black-box auditor computes).
        """
        check_bool(audit, "audit")
        if self.kind == "input" and model is None and self._opt is not None and self._rec.updates:
            raise InvalidParameterError(
                "model: finish() of kind='input' scores the canary examples on the final "
                "model; pass model= (and score_fn= unless the examples are (x, y) pairs)"
            )
        if score_fn is not None and not callable(score_fn):
            raise InvalidParameterError(f"score_fn must be callable, got {score_fn!r}")
        from ldp_audit.opacus.scoring import membership, score_inputs
        from ldp_audit.opacus.writer import write_run
        from ldp_audit.rundir import write_artifact

        if transcript is not None and not (self.embedded and self._writer is not None):
            raise InvalidParameterError(
                "transcript: only for an embedded audit with a writer (the caller's arrays "
                "written beside the canaries' in transcript.npz)"
            )
        if self._finished:
            raise InvalidParameterError("finish: this CanaryAudit is already finished")
        if self._opt is None:
            raise InvalidParameterError("finish: attach(optimizer, ...) was never called")
        if self.embedded:
            self._uninstall()
            self._finished = True
            rec = self._embedded_records()
            if self._writer is not None:
                self._writer.write_npz("transcript.npz", {**(transcript or {}), **rec.transcript})
                self._writer.write_npz("secrets.npz", rec.secrets)
            return rec
        if not self._rec.updates:
            raise InvalidParameterError(
                f"finish: no optimizer step ran since attach (0 updates); nothing to audit, "
                f"nothing was written to {str(self.out)!r}"
            )
        scores = (
            score_inputs(self._inserted, model, score_fn, self.canaries)
            if self.kind == "input"
            else None
        )
        self._check_moved()
        self._uninstall()
        self._clip_check = None if self._ghost else clip_probe(self)  # ghost: the model clips
        write_run(self, scores)
        self._finished = True
        self._accountant.ledger.close()
        if not audit:
            return self.out
        res = membership(self.out, confidence=self.confidence)
        write_artifact(self.out, "attack_membership.json", res.to_dict())
        return res


def read_claim(
    optimizer: Any, data_loader: Any, sample_rate: Any, dataset_size: Any, embedded: bool
) -> dict[str, Any]:
    """The DP-SGD claim of an Opacus optimizer and its loader (what :meth:`CanaryAudit.attach`
    audits), every value checked: the noise multiplier, one clip norm (no adaptive or per-layer
    clipping), the loss reduction and expected batch size, the Poisson rate (the loader's unless
    ``sample_rate`` is given) and the data set size (None, with a warning unless ``embedded``,
    when unknown), and the trainable tensors' sizes and shapes."""
    from opacus.optimizers import AdaClipDPOptimizer, DPOptimizerFastGradientClipping

    # ghost clipping (no per-sample gradients): the joining canaries are clipped with
    # Opacus's factor min(1, C / (norm + 1e-6)) and added to the clipped sum before noise
    ghost = isinstance(optimizer, DPOptimizerFastGradientClipping)
    sigma = check_real_in(optimizer.noise_multiplier, "optimizer.noise_multiplier", lo=0.0,
                          lo_open=True)  # fmt: skip
    if isinstance(optimizer, AdaClipDPOptimizer):
        raise InvalidParameterError(
            f"optimizer {type(optimizer).__name__} clips adaptively (its max_grad_norm "
            f"changes every step and part of the privacy budget goes to the clip counts): "
            f"the audit checks a fixed claim; use a DPOptimizer with a fixed max_grad_norm"
        )
    clip = optimizer.max_grad_norm
    # Opacus's DPPerLayerOptimizer keeps the per-layer bounds in max_grad_norms and their
    # root sum of squares in max_grad_norm: a canary clipped tensor by tensor contributes
    # less than that C along its direction, so the contribution test would flag it
    layers = getattr(optimizer, "max_grad_norms", None)
    if isinstance(clip, (list, tuple)) or isinstance(layers, (list, tuple)):
        name = "max_grad_norm" if isinstance(clip, (list, tuple)) else "max_grad_norms"
        raise InvalidParameterError(
            f"optimizer.{name} must be one number (per-sample clipping of the whole "
            f"gradient), got the per-layer list {getattr(optimizer, name)!r} "
            f"({type(optimizer).__name__}); make_private(..., clipping='flat')"
        )
    clip = check_real_in(clip, "optimizer.max_grad_norm", lo=0.0, lo_open=True)
    reduction = getattr(optimizer, "loss_reduction", "mean")
    check_choice(reduction, "optimizer.loss_reduction", ("mean", "sum"))
    batch = optimizer.expected_batch_size
    if reduction == "mean":
        batch = check_int(batch, "optimizer.expected_batch_size", minimum=1)
    name = "sample_rate" if sample_rate is not None else "data_loader.sample_rate"
    if sample_rate is None:
        sample_rate = getattr(data_loader, "sample_rate", None)
        if sample_rate is None:
            raise InvalidParameterError(
                f"sample_rate: data_loader {type(data_loader).__name__} has no sample_rate "
                f"(not an Opacus DPDataLoader, e.g. make_private(..., "
                f"poisson_sampling=False)); pass sample_rate= the rate the accountant uses"
            )
    q = check_real_in(sample_rate, name, lo=0.0, lo_open=True, hi=1.0)
    if dataset_size is None and data_loader is not None:
        try:
            dataset_size = len(data_loader.dataset)
        except (AttributeError, TypeError):
            dataset_size = None
    if dataset_size is not None:
        dataset_size = check_int(dataset_size, "dataset_size", minimum=1)
    elif not embedded:  # an embedding trainer names why in its audit (not_sampled)
        import warnings

        warnings.warn(
            "dataset_size unknown (sample_rate= given without dataset_size=, or a loader "
            "without a dataset length): the sampling test is dropped; pass dataset_size= "
            "so that the batch sizes are tested against Poisson sampling",
            UserWarning,
            stacklevel=3,  # the caller of CanaryAudit.attach
        )
    params = list(optimizer.params)
    return {
        "optimizer": f"{type(optimizer).__module__}.{type(optimizer).__qualname__}",
        "noise_multiplier": sigma,
        "max_grad_norm": clip,
        "expected_batch_size": batch,
        "loss_reduction": reduction,
        "sample_rate": q,
        "dataset_size": dataset_size,
        "n_params": int(sum(p.numel() for p in params)),
        "tensor_sizes": [int(p.numel()) for p in params],
        "tensor_shapes": [list(p.shape) for p in params],
        "ghost_clipping": ghost,
    }


PROBE = (1, 100, 100_000)  # the whole row's norms in canary norms (clip_probe)
# (clip_probe) a batch of this many rows of 10^-6 canary norms before one row of a canary's: a
# clip factor read from a batch statistic (the first row's, the mean or median norm) lets it by
LEAD_ROWS = 7
_F32_NORM_MAX = float(np.sqrt(np.finfo(np.float32).max))  # a norm whose square is a float32


def clip_probe(audit: CanaryAudit) -> dict:
    """The optimizer's own ``clip_and_accumulate`` (unhooked, after the run) on public
    per-sample gradients of a canary's norm, one at a time: one in each tensor alone, then one
    over every tensor, then one over every tensor at 100 and 100,000 times that norm (a
    clipping that lets very large norms through as if they were overflow); then (session 58)
    one over every tensor after ``LEAD_ROWS`` rows of 10^-6 times its norm in one batch (a
    clip factor read from the batch, not from each row). Per-sample clipping to ``C`` leaves
    each clipped sum of norm at most ``C`` (the small rows add at most 10^-5 C each); a tensor
    or parameter group left out of the clipping (or of its norm) shows as more. Returns the
    largest ``norm / C`` (``tensor``: the row's tensor, -1 for the whole row; ``row_norm``: its
    norm in units of C; ``batch_rows``: the rows of its batch) or, where the optimizer raises
    on a row, ``error``; the parameters' ``grad_sample`` and ``summed_grad`` are restored."""
    import torch

    opt, params, norm, clip = audit._opt, audit._params, audit._scale, audit._claim["max_grad_norm"]
    g = torch.Generator().manual_seed(audit.canary_seed)
    dirs = [torch.randn((1, *p.shape), generator=g).to(p.device, p.dtype) for p in params]
    sq = [float((d.double() ** 2).sum()) for d in dirs]
    small = [torch.randn((LEAD_ROWS, *p.shape), generator=g).to(p.device, p.dtype) for p in params]
    small_sq = sum((s.double() ** 2).flatten(1).sum(1) for s in small) ** 0.5
    saved = [(getattr(p, "grad_sample", None), getattr(p, "summed_grad", None)) for p in params]
    worst = (0.0, 0, norm, 1)
    rows = [*((t, norm, 0) for t in range(len(params))), *((-1, norm * f, 0) for f in PROBE)]
    try:
        for t, n, lead in [*rows, (-1, norm, LEAD_ROWS)]:
            part = (sq[t] if t >= 0 else sum(sq)) ** 0.5
            for i, (p, d, s) in enumerate(zip(params, dirs, small, strict=True)):
                r = d * (n / part) if t in (i, -1) else torch.zeros_like(d)
                if lead:  # the batch probe: the small rows first
                    scale = (1e-6 * n / small_sq).to(p.device, p.dtype).view(-1, *[1] * p.dim())
                    r = torch.cat([s * scale, r])
                p.grad_sample, p.summed_grad = r, None
            opt.clip_and_accumulate()
            out = sum(float((p.summed_grad.double() ** 2).sum()) for p in params) ** 0.5
            worst = max(worst, (out / clip, t, n, lead + 1))
    except Exception as e:  # the optimizer's own code refused the probe: named, not tested
        return {"error": f"{type(e).__name__}: {e}"[:300]}
    finally:
        for p, (gs, sg) in zip(params, saved, strict=True):
            p.grad_sample, p.summed_grad = gs, sg
    out = {"ratio": worst[0], "tensor": worst[1], "row_norm": worst[2] / clip,
           "batch_rows": worst[3]}  # fmt: skip
    return {**out, **raw_probe(audit, dirs)}


def raw_probe(audit: CanaryAudit, dirs: list) -> dict:
    """The optimizer's own ``pre_step`` (unhooked, its ``step_hook`` off) run twice on a zero
    per-sample gradient, from the same generator state: once with ``p.grad`` (the backward
    pass's raw, unclipped gradient) set to a public ``G`` of up to ``10^6 sigma C`` a
    coordinate, once with it 0. ``add_noise`` replaces ``p.grad``, so under the claim the two
    releases are equal (the same noise; where the generator's state cannot be set, two fresh
    draws). Returns the largest ``|<difference, G / |G|>|`` over the tensors in units of the
    difference's std under fresh draws, ``sqrt(2) sigma C`` (over ``B`` for a mean reduction):
    above 50 (probability ``< 10^-500`` per tensor) the release kept some of the raw gradient
    (``raw_tensor``: which tensor), or ``raw_error``. Also the second release's noise std over
    the claimed one (``zero_batch_std``) and its ``chi^2(P)`` lower tail (``zero_batch_p``),
    and the coordinates equal in it and ``ZERO_RELEASES - 1`` more zero-batch releases from the
    generator as it advances (``zero_batch_equal``; fresh draws of one coordinate are equal
    with probability at most ``16 eps`` of the dtype, so all of them with ``(16 eps)^(R-1)``,
    and ``zero_batch_equal_p`` is the binomial tail over the coordinates: noise seeded from
    the data, reused, or missing in some coordinates). Gradients, generator and RNG restored."""
    import torch
    from scipy.stats import binom, chi2

    opt, params, cl = audit._opt, audit._params, audit._claim
    unit = 2**0.5 * cl["noise_multiplier"] * cl["max_grad_norm"]
    unit /= cl["expected_batch_size"] if cl["loss_reduction"] == "mean" else 1
    gen, hook = opt.generator, opt.step_hook
    try:
        state = gen.get_state() if isinstance(gen, torch.Generator) else None
    except RuntimeError:
        state = None
    big = [min(1e6 * unit, torch.finfo(p.dtype).max / 100) for p in params]
    raw = [d[0] * (m / float(d.abs().max())) for d, m in zip(dirs, big, strict=True)]
    saved = [(p.grad, getattr(p, "grad_sample", None), getattr(p, "summed_grad", None))
             for p in params]  # fmt: skip
    cuda = sorted({p.device.index or 0 for p in params if p.device.type == "cuda"})
    released = []
    try:
        opt.step_hook = None  # Opacus's accountant hook: the probe is no update
        for scales in ((1.0,), (0.0,) * ZERO_RELEASES):  # one state each, then as it advances
            with torch.random.fork_rng(devices=cuda):
                if state is not None:
                    gen.set_state(state)
                for scale in scales:
                    for p, r in zip(params, raw, strict=True):
                        p.grad, p.summed_grad = r * scale, None
                        p.grad_sample = torch.zeros((1, *p.shape), dtype=p.dtype,
                                                    device=p.device)  # fmt: skip
                    if not opt.pre_step():
                        return {"raw_error": "pre_step skipped the step"}
                    released.append([p.grad.detach().double().flatten() for p in params])
    except Exception as e:  # the optimizer's own code refused the probe: named, not tested
        return {"raw_error": f"{type(e).__name__}: {e}"[:300]}
    finally:
        opt.step_hook = hook
        if state is not None:
            gen.set_state(state)
        for p, (g, gs, sg) in zip(params, saved, strict=True):
            p.grad, p.grad_sample, p.summed_grad = g, gs, sg
    z = [abs(float((a - b) @ r.double().flatten())) / float(r.double().norm()) / unit
         for a, b, r in zip(*released[:2], raw, strict=True)]  # fmt: skip
    # the second release is the noise of a batch of zero gradients: chi^2(P) in units of
    # unit^2 / 2 under the claim (noise calibrated to the batch shows as too little)
    sq, n = sum(float((b**2).sum()) for b in released[1]) * 2 / unit**2, audit._claim["n_params"]
    same = sum(int(torch.stack([r[i] for r in released[1:]]).eq(released[1][i]).all(0).sum())
               for i in range(len(params)))  # fmt: skip
    eq = min(1.0, 16 * max(torch.finfo(p.dtype).eps for p in params)) ** (ZERO_RELEASES - 1)
    return {"raw": max(z), "raw_tensor": max(range(len(z)), key=z.__getitem__),
            "zero_batch_std": (sq / n) ** 0.5, "zero_batch_p": float(chi2.cdf(sq, n)),
            "zero_batch_equal": same, "zero_batch_equal_p": float(binom.sf(same - 1, n, eq)),
            "zero_batch_n": n, "zero_batch_releases": ZERO_RELEASES}  # fmt: skip


def _accumulated(opt: Any, default: int) -> int:
    """Opacus's ``accumulated_iterations`` (the batches summed into this update), or
    ``default`` where it cannot be read: a subclass that cleared ``p.grad_sample`` (a
    ``zero_grad``) before the inner step makes Opacus's property raise ``ValueError``."""
    try:
        return getattr(opt, "accumulated_iterations", default) or default
    except ValueError:
        return default
