"""Audit your own Opacus DP-SGD training in one run (docs/opacus.md).

Three lines in a user's Opacus loop::

    audit = CanaryAudit(out="runs/mine", canaries=RECOMMENDED_CANARIES, seed=0, delta=1e-5)
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
included; under ghost clipping, ``accumulate``: each joining canary clipped with Opacus's factor
and added to the clipped sum), ``add_noise`` (the ledger charged first) and the wrapped
optimizer's ``step`` (the released noisy mean gradient recorded, whatever path produced it).
A subclass that overrides any of them is hooked the same way: the audit tests what the
optimizer does, not what Opacus's base class would do.

What each setting sees (:func:`audit_run`):

* **white-box** (every released update): the (eps, delta) bound of Steinke, Nasr & Jagielski
  (2023) and the f-DP one-run test on the summed projections ``sum_t <update_t, u_i>``; the
  noise magnitude, the independence of the noise across updates and coordinates, a canary's
  contribution along its direction (per-sample clipping: neither more, per-layer or no
  clipping, nor less, aggregate clipping), the data loader's sampling (Poisson at the claimed
  rate) and the ledger (one charge of the declared event before every update);
* **black-box** (final model only): the (eps, delta) bound and the f-DP test on
  ``-<theta_T - theta_0, u_i>``.

Each test's soundness needs only the claim (worst-case data); they share ``1 - confidence`` by
Bonferroni (the ledger check is deterministic and takes no share).

The package's modules: :mod:`~ldp_audit.opacus.canaries` (the public canary design),
:mod:`~ldp_audit.opacus.attach` (:class:`CanaryAudit`: planting the canaries, the hooks),
:mod:`~ldp_audit.opacus.recorder` (what each released update shows of the canaries and the noise),
:mod:`~ldp_audit.opacus.embed` (the audit embedded in a trainer's own run directory and ledger,
``CanaryAudit(accountant=..., writer=...)``: :class:`AuditRecords`; ``train dprl`` uses it),
:mod:`~ldp_audit.opacus.writer` (the run directory), :mod:`~ldp_audit.opacus.scoring` (the
audit of a run's evidence, a stand-alone run's or a trainer's such as ``train dprl``, with the
stated-family bound beside the assumption-free one; the report sections),
:mod:`~ldp_audit.opacus.ledger_accountant` (Opacus's accountant door:
``PrivacyEngine(accountant=register_ledger_accountant(path))``, imported from that module
because it loads Opacus) and
:mod:`~ldp_audit.opacus.system` (the ``opacus`` system and the digits example). This package
gives the public names of ``__all__``; every other name is imported from the module that
defines it.
"""

from __future__ import annotations

from ldp_audit.opacus.attach import CanaryAudit
from ldp_audit.opacus.canaries import (
    NOISE_SKETCH,
    RECOMMENDED_CANARIES,
    canary_blocks,
    noise_sketch,
)
from ldp_audit.opacus.embed import AuditRecords
from ldp_audit.opacus.scoring import audit_run, membership, report_sections
from ldp_audit.opacus.system import OpacusRunConfig, train_digits

__all__ = [
    "CanaryAudit",
    "AuditRecords",
    "canary_blocks",
    "noise_sketch",
    "NOISE_SKETCH",
    "RECOMMENDED_CANARIES",
    "audit_run",
    "membership",
    "OpacusRunConfig",
    "train_digits",
    "report_sections",
]
