"""Embedding :class:`~ldp_audit.opacus.CanaryAudit` in a trainer that keeps its own run
directory and ledger (docs/opacus.md, "Inside your own trainer"; ``train dprl`` is one user).

``CanaryAudit(accountant=..., writer=..., ...)`` (no ``out``) plants and records the canaries
exactly as a stand-alone audit does, but writes nothing of its own: the caller's
:class:`~ldp_audit.rundir.RunWriter` (optional) and :class:`~ldp_audit.accountant.Accountant`
hold the evidence. One door charges each update:

* ``charge=True`` (default): the audit charges ``accountant`` with the declared event
  ``PoissonSampledEvent(q, GaussianEvent(sigma))`` before every noise draw (agent ``"model"``,
  scope ``"central"``), and the caller must not charge the updates again;
* ``charge=False``: the caller's own door charges ``accountant`` before every update (``train
  dprl``: :func:`ldp_audit.release.release_with` around ``optimizer.step()``); the audit charges
  nothing and only counts, at :meth:`~ldp_audit.opacus.CanaryAudit.finish`, the ledger's charges
  to ``"model"`` (:attr:`AuditRecords.ledger_charges`).

``finish()`` then returns :class:`AuditRecords` (the transcript's and the secrets' arrays, in
the keys a dprl run's readers use) and writes them through ``writer`` only when one was given.
A trainer may also fix the public directions (``directions=``: a dense (n_params, m)
orthonormal frame, e.g. :func:`ldp_audit.training.dprl.privacy.canary_directions`), the generator of
the inclusion bits (``rng=``, a NumPy Generator) and the torch generator of the Poisson joins
(``generator=``: ``train dprl`` passes its noise generator, so that the joins are drawn just
before the noise, in the order its runs always used).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError
from ldp_audit.validation import check_bool

__all__ = ["AuditRecords", "check_embedding", "dense_rows", "flat_params"]


@dataclass
class Embedding:
    """The caller's objects an embedded audit uses (checked by :func:`check_embedding`)."""

    accountant: Any
    writer: Any
    charge: bool
    directions: np.ndarray | None
    rng: Any
    generator: Any


@dataclass
class AuditRecords:
    """What an embedded audit recorded, returned by ``finish()`` (written only through the
    caller's writer).

    Attributes:
        transcript: ``canary_projection`` (T, m) float64: each released noisy mean gradient
            projected on the canary directions, ``<g_t, u_i>`` (gradient units: what a dprl
            run's ``transcript.npz`` holds).
        secrets: ``canary_included`` (m,) bool, ``canary_joins`` (T, m) bool and
            ``canary_participations`` (m,) int64 (the number of updates each canary joined):
            ``secrets.npz``, read only to score guesses.
        joins: (T, m) bool, which canaries joined each update (secret; ``canary_joins``).
        design: the public design (``canaries``, ``canary_scale``, ``canary_seed``,
            ``directions``: ``"given"`` or ``"blocks"``) and the claim read from the optimizer.
        ledger_charges: the charges to ``"model"`` in the accountant's ledger at ``finish()``
            (``charge=True``: the audit's own; ``charge=False``: the caller's).
    """

    transcript: dict[str, np.ndarray]
    secrets: dict[str, np.ndarray]
    joins: np.ndarray
    design: dict[str, Any] = field(default_factory=dict)
    ledger_charges: int = 0

    @property
    def updates(self) -> int:
        return int(self.transcript["canary_projection"].shape[0])


def check_embedding(
    out: Any,
    *,
    accountant: Any,
    writer: Any,
    charge: Any,
    directions: Any,
    rng: Any,
    generator: Any,
    kind: str,
    canaries: int,
) -> Embedding | None:
    """The embedding arguments of ``CanaryAudit`` checked; None for a stand-alone audit.

    Refused (naming the parameter and the value): ``out`` together with ``accountant`` or
    ``writer``; ``writer`` or the trainer's own generators without ``accountant``; a wrong type;
    ``directions`` that are not a finite (n, m) array of unit columns; ``kind="input"`` embedded.
    """
    from ldp_audit.accountant import Accountant

    charge = check_bool(charge, "charge")
    embedded = accountant is not None or writer is not None
    given = {"directions": directions, "rng": rng, "generator": generator}
    if not embedded:
        extra = [k for k, v in given.items() if v is not None] + ([] if charge else ["charge"])
        if extra:
            raise InvalidParameterError(
                f"{extra[0]}: only for an embedded audit (accountant=, no out), got "
                f"{given.get(extra[0], charge)!r}"
            )
        return None
    if out is not None:
        raise InvalidParameterError(
            f"out: an embedded audit (accountant=, writer=) writes through the caller's run "
            f"writer, not a directory of its own; got out={str(out)!r}"
        )
    if kind != "gradient":
        raise InvalidParameterError(
            f"kind: an embedded audit plants gradient canaries only, got kind={kind!r}"
        )
    from ldp_audit.rundir import RunWriter

    for name, v, what, ok in (  # the caller's objects: each of the class it must be, or refused
        ("accountant", accountant, "the caller's ldp_audit.accountant.Accountant", Accountant),
        ("writer", writer, "a RunWriter or None", (RunWriter, type(None))),
        ("rng", rng, "a numpy.random.Generator", (np.random.Generator, type(None))),
    ):
        if not isinstance(v, ok):
            raise InvalidParameterError(f"{name} must be {what}, got {v!r} ({type(v).__name__})")
    if generator is not None:
        import torch

        if not isinstance(generator, torch.Generator) or generator.device.type != "cpu":
            raise InvalidParameterError(
                f"generator must be a CPU torch.Generator (the joins are drawn on the CPU), "
                f"got {generator!r}"
            )
    u = None
    if directions is not None:
        if not isinstance(directions, np.ndarray) or directions.ndim != 2:
            raise InvalidParameterError(
                f"directions must be a 2-D numpy array (n_params, canaries), got "
                f"{type(directions).__name__}"
                + (f" of shape {directions.shape}" if isinstance(directions, np.ndarray) else "")
            )
        if directions.shape[1] != canaries or not np.issubdtype(directions.dtype, np.floating):
            raise InvalidParameterError(
                f"directions must be a float array with canaries={canaries} columns, got "
                f"dtype {directions.dtype} and shape {directions.shape}"
            )
        norms = np.sqrt(np.einsum("ij,ij->j", directions, directions))
        if not np.isfinite(directions).all() or not np.allclose(norms, 1.0, atol=1e-6):
            raise InvalidParameterError(
                f"directions must have finite unit columns (an orthonormal frame), got column "
                f"norms in [{norms.min():g}, {norms.max():g}]"
            )
        u = np.asarray(directions, dtype=np.float64)
    return Embedding(accountant, writer, charge, u, rng, generator)


def flat_params(params: Any) -> np.ndarray:
    """The tensors ``params`` (a model's ``parameters()``) as one flat float64 array (a copy)."""
    return np.concatenate([p.detach().double().cpu().numpy().reshape(-1) for p in params])


def dense_rows(g: Any, params: list[Any]) -> list[Any]:
    """Per parameter tensor, the rows of ``g`` (a (k, n_params) tensor of canary gradients, e.g.
    the included canaries' ``scale * u_i`` in float64) restricted to it: ``(k, *p.shape)`` in
    ``p``'s dtype and device (cast after the product)."""
    rows, off = [], 0
    for p in params:
        n = p.numel()
        rows.append(g[:, off : off + n].reshape((-1, *p.shape)).to(p.dtype).to(p.device))
        off += n
    return rows
