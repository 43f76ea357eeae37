"""Writing the run directory of a :class:`~ldp_audit.opacus.CanaryAudit` (docs/opacus.md).

The run is created at the first charge (:func:`open_run`: ``config.json``, the ledger), charged
with :func:`declared_event` before every noise draw, and completed by :func:`write_run` when
the audit finishes: ``transcript.npz`` (what the auditor sees), ``secrets.npz`` (the inclusion
bits and joins, read only to score guesses), ``metrics.json`` (updates, charges, the
accountant's epsilon) and ``model.npz`` (initial and final parameters, for black-box scores).
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from ldp_audit.opacus.canaries import ALGORITHM
from ldp_audit.opacus.embed import flat_params

__all__ = ["declared_event", "open_run", "privacy", "write_run"]


def declared_event(claim: dict[str, Any]) -> Any:
    """The event every update is charged with: ``PoissonSampledEvent(q, GaussianEvent(sigma))``
    (``GaussianEvent(sigma)`` when ``q = 1``)."""
    from ldp_audit.accountant import GaussianEvent, PoissonSampledEvent

    g = GaussianEvent(claim["noise_multiplier"])
    q = claim["sample_rate"]
    return g if q >= 1.0 else PoissonSampledEvent(q, g)


def open_run(audit: Any) -> tuple[Any, Any]:
    """Create the run directory of ``audit`` (config.json) and its ledger: ``(writer,
    accountant)``."""
    from ldp_audit.accountant import Accountant
    from ldp_audit.rundir import RunWriter

    writer = RunWriter(
        audit.out,
        algorithm=ALGORITHM,
        config=audit.config(),
        seed=audit.seed,
        mechanism=audit._mechanism(),
    )
    return writer, Accountant(ledger=writer.open_ledger(), run_id=str(audit.out))


def privacy(accountant: Any, claim: dict[str, Any], delta: float, updates: int) -> dict[str, Any]:
    """The accountant's guarantee for what was charged (metrics.json ``privacy``)."""
    by: dict[str, Any] = {}
    for m in ("rdp", "prv"):
        try:
            by[m] = accountant.spent("model", delta=delta, method=m)
        except Exception as exc:  # noqa: BLE001 - a method that cannot compose is reported
            by[m] = f"unavailable: {exc}"
    finite = [v for v in by.values() if isinstance(v, float)]
    eps = min(finite) if finite else math.inf
    return {
        "epsilon": eps,
        "delta": delta,
        "by_method": by,
        "unit": "one record of the data set (one per-sample gradient)",
        "words": (
            f"DP-SGD (Opacus {claim['optimizer'].rsplit('.', 1)[-1]}), one record = one "
            f"per-sample gradient clipped to C = {claim['max_grad_norm']:g}, noise multiplier "
            f"{claim['noise_multiplier']:g}, Poisson rate {claim['sample_rate']:g}: "
            f"({eps:.4g}, {delta:g})-DP over {updates} updates (ledger: "
            + ", ".join(
                f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in by.items()
            )  # fmt: skip
            + ")"
        ),
    }


def write_run(audit: Any, scores: np.ndarray | None) -> None:
    """Write the transcript, secrets, metrics and parameters of a finished ``audit`` and close
    the run (``scores``: the input canaries' scores on the final model, or None)."""
    audit._ensure_writer()
    w = audit._writer
    rec, sec = audit.records()
    T = int(rec["update_index"].shape[0])
    extra_tr = {} if scores is None else {"canary_score": scores}
    w.write_npz(
        "transcript.npz",
        {**rec, "ledger_charges": np.array([audit._charges], dtype=np.int64), **extra_tr},
    )
    w.write_npz("secrets.npz", sec)
    w.write_json(
        "metrics.json",
        {
            "updates": T,
            "charges": audit._charges,
            "prepaid_unused": audit._prepaid,
            "charges_aborted": audit._aborted,
            "prepay": audit.prepay,
            "physical_batches": audit._batches,
            "moved_unreleased": audit._moved,
            "clipped_sum_changed": audit._rec.changed(),
            **({} if audit._clip_check is None else {"clip_check": audit._clip_check}),
            "seconds": time.perf_counter() - audit._t0,
            "privacy": privacy(audit._accountant, audit._claim, audit.delta, T),
        },
    )
    w.write_npz(
        "model.npz",
        {"params": flat_params(audit._params), "initial": audit._initial},
    )
    w.finish()
