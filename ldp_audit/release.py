"""The one release path every trainer uses (design.md, "Four systems, one trust boundary").

Whatever crosses a trust boundary (a noisy gradient, a noisy Q output, a target Y, an uploaded
proxy memory, a DP-SGD noisy update) goes through this module, in this order:

1. **charge** the accountant durably for every row (one ledger transaction; a
   :class:`~ldp_audit.errors.BudgetExceeded` or any failure here means nothing is released);
2. **randomise** on the sender's side (``mechanism.privatize(x, rng)`` or a caller-given
   randomiser, e.g. an Opacus ``DPOptimizer.step``);
3. **seal**: hand out a read-only :class:`SealedRelease`, the only object a receiver accepts
   (:func:`require_sealed`); a raw array handed to a receiver is refused;
4. **record**: :class:`Transcript` appends what crossed the boundary, in arrival order, for the
   run directory (:mod:`ldp_audit.rundir`), the attacks and the auditor.

A release is never un-charged: a charge whose randomisation then fails stays on the ledger
(charged but not released is the safe direction; the opposite never happens).

Example::

    from ldp_audit.release import release, Transcript
    rel = release(grads, mechanism=mech, accountant=acc, agent_ids=["0/0", "0/1"], rng=rng,
                  meta={"agent": np.array([0, 1])})
    aggregator.receive(rel)          # receivers call require_sealed(rel)
    transcript.append(rel, round=np.array([0, 0]))
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError

__all__ = [
    "SealedRelease",
    "ReleaseRequest",
    "release",
    "release_many",
    "release_with",
    "require_sealed",
    "Transcript",
]

_SEAL = object()


def _readonly(a: Any, name: str) -> np.ndarray:
    arr = np.array(a, copy=True)
    if arr.dtype == object:
        raise InvalidParameterError(f"{name} must be a numeric array, got dtype object")
    arr.flags.writeable = False
    return arr


class SealedRelease:
    """A batch of randomised values that crossed the trust boundary (read-only).

    Only :func:`release`, :func:`release_many` and :func:`release_with` construct one, after the
    accountant charged every row. Attributes:

    - ``values``: (n, ...) read-only array of what was released;
    - ``meta``: dict of read-only (n,) arrays that travel with the rows (ids: trial, agent, ...);
    - ``epsilon``, ``delta``: the per-row guarantee of the mechanism (inf for an unbounded one);
    - ``event``: the ledger event charged per row; ``agent_ids``: the ledger agents charged.
    """

    __slots__ = ("_values", "_meta", "epsilon", "delta", "event", "agent_ids", "_sealed")

    def __init__(
        self,
        values: Any,
        *,
        meta: Mapping[str, Any],
        epsilon: float,
        delta: float,
        event: Any,
        agent_ids: tuple[str, ...],
        seal: Any,
    ) -> None:
        if seal is not _SEAL:
            raise TypeError(
                "SealedRelease is created only by ldp_audit.release (sender side, after the "
                "ledger charge)"
            )
        self._values = _readonly(values, "values")
        n = self._values.shape[0] if self._values.ndim else 1
        m = {}
        for k, v in meta.items():
            arr = _readonly(v, f"meta[{k!r}]")
            if arr.shape[:1] != (n,):
                raise InvalidParameterError(
                    f"meta[{k!r}] must have one entry per released row ({n}), got shape {arr.shape}"
                )
            m[k] = arr
        self._meta = m
        self.epsilon = float(epsilon)
        self.delta = float(delta)
        self.event = event
        self.agent_ids = agent_ids
        self._sealed = True

    @property
    def values(self) -> np.ndarray:
        """The released (randomised) values, read-only."""
        return self._values

    @property
    def noisy(self) -> np.ndarray:
        """Alias of :attr:`values` (the PGC-A3C name)."""
        return self._values

    @property
    def meta(self) -> dict[str, np.ndarray]:
        """Read-only id arrays travelling with the rows (a copy of the dict, same arrays)."""
        return dict(self._meta)

    def __getattr__(self, name: str) -> np.ndarray:
        # meta arrays are also attributes (rel.trial, rel.agent), read-only
        meta = object.__getattribute__(self, "_meta")
        if name in meta:
            return meta[name]
        raise AttributeError(name)

    def __len__(self) -> int:
        return int(self._values.shape[0]) if self._values.ndim else 1

    def __repr__(self) -> str:
        return (
            f"SealedRelease(n={len(self)}, shape={self._values.shape}, epsilon={self.epsilon:g}, "
            f"meta={sorted(self._meta)})"
        )


def require_sealed(obj: Any, who: str = "the receiver") -> SealedRelease:
    """Return ``obj`` if it is a :class:`SealedRelease`, else raise ``TypeError``.

    Receivers (aggregators, servers, the other party of a federated exchange) call this on
    everything they are handed: a raw gradient or Q output is refused.
    """
    if type(obj) is not SealedRelease or not getattr(obj, "_sealed", False):
        raise TypeError(
            f"{who} accepts only SealedRelease objects from ldp_audit.release, got "
            f"{type(obj).__name__}"
        )
    return obj


def _event_for(mechanism: Any) -> Any:
    from ldp_audit.accountant import event_for

    return event_for(mechanism)


def _check_ids(agent_ids: Sequence[str], n: int) -> tuple[str, ...]:
    if isinstance(agent_ids, str):
        raise InvalidParameterError(
            f"agent_ids must be a sequence of str (one per row), got the str {agent_ids!r}"
        )
    ids = tuple(agent_ids)
    if len(ids) != n:
        raise InvalidParameterError(f"agent_ids must have one id per row ({n}), got {len(ids)}")
    for a in ids:
        if not isinstance(a, str) or not a:
            raise InvalidParameterError(f"agent ids must be non-empty str, got {a!r}")
    return ids


@dataclass
class ReleaseRequest:
    """One group of rows for :func:`release_many` (all charged in ONE ledger transaction).

    Attributes:
        values: (n, ...) raw values; never leave the sender un-randomised.
        mechanism: ``privatize(x, rng)``, ``epsilon`` (and ``delta``).
        agent_ids: ledger agent id per row.
        rng: the sender's noise generator.
        event: ledger event of one row (default ``event_for(mechanism)``).
        preprocess: optional function applied to ``values`` before the mechanism (e.g. a clip
            that is part of the mechanism's sensitivity argument).
        meta: (n,) arrays carried with the rows.
    """

    values: Any
    mechanism: Any
    agent_ids: Sequence[str]
    rng: np.random.Generator
    event: Any = None
    preprocess: Callable[[np.ndarray], np.ndarray] | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)


def _check_values(values: Any, name: str) -> np.ndarray:
    """Refuse what no mechanism may release, BEFORE anything is charged or drawn.

    Values must be a non-empty real numeric array (a tensor is detached to NumPy) with every
    entry finite: a NaN or inf would pass through an additive mechanism un-noised, and a value a
    mechanism then refuses would leave the ledger recording a release that never happened.
    """
    if hasattr(values, "detach"):
        values = values.detach().cpu().numpy()
    try:
        x = np.asarray(values)
    except (TypeError, ValueError) as exc:
        raise InvalidParameterError(f"{name} must be a real numeric array: {exc}") from None
    if x.dtype == object or not (
        np.issubdtype(x.dtype, np.floating)
        or np.issubdtype(x.dtype, np.integer)
        or x.dtype == np.bool_
    ):
        raise InvalidParameterError(f"{name} must be a real numeric array, got dtype {x.dtype}")
    if x.size == 0:
        raise InvalidParameterError(f"{name} must be non-empty, got shape {x.shape}")
    if np.issubdtype(x.dtype, np.floating) and not np.isfinite(x).all():
        bad = tuple(int(i) for i in np.argwhere(~np.isfinite(x))[0])
        raise InvalidParameterError(f"{name} must be finite; found {float(x[bad])} at index {bad}")
    return x


def release_many(
    requests: Sequence[ReleaseRequest], *, accountant: Any, scope: str = "local"
) -> list[SealedRelease]:
    """Charge every row of every request in one ledger transaction, then randomise each group.

    If the charge raises (e.g. ``BudgetExceeded``), no noise is drawn and nothing is released.
    """
    if accountant is None:
        raise InvalidParameterError("accountant is required: every release is charged first")
    reqs = list(requests)
    charges: list[tuple[str, Any]] = []
    prepared = []
    for r in reqs:
        if not isinstance(r, ReleaseRequest):
            raise InvalidParameterError(
                f"requests must be ReleaseRequest objects, got {type(r).__name__}"
            )
        if not isinstance(r.rng, np.random.Generator):
            raise InvalidParameterError(
                f"rng must be a numpy.random.Generator, got {type(r.rng).__name__}"
            )
        x = _check_values(r.values, "values")
        n = x.shape[0] if x.ndim else 1
        ids = _check_ids(r.agent_ids, n)
        if r.preprocess is not None:  # deterministic (a clip): done before the charge so a
            x = _check_values(r.preprocess(x), "preprocess(values)")  # bad value costs nothing
        ev = r.event if r.event is not None else _event_for(r.mechanism)
        charges.extend((a, ev) for a in ids)
        prepared.append((r, x, ids, ev))
    if charges:
        accountant.charge_many(charges, scope=scope)  # durable, before any noise
    out = []
    for r, x, ids, ev in prepared:
        noisy = r.mechanism.privatize(x, r.rng)
        out.append(
            SealedRelease(
                noisy,
                meta=r.meta,
                epsilon=float(getattr(r.mechanism, "epsilon", np.inf)),
                delta=float(getattr(r.mechanism, "delta", 0.0)),
                event=ev,
                agent_ids=ids,
                seal=_SEAL,
            )
        )
    return out


def release(
    values: Any,
    *,
    mechanism: Any,
    accountant: Any,
    agent_ids: Sequence[str],
    rng: np.random.Generator,
    event: Any = None,
    preprocess: Callable[[np.ndarray], np.ndarray] | None = None,
    meta: Mapping[str, Any] | None = None,
    scope: str = "local",
) -> SealedRelease:
    """Sender side: charge the ledger (durably), then randomise, then seal.

    Args:
        values: (n, ...) raw values (never leave this function un-randomised).
        mechanism: ``privatize(x, rng)`` and ``epsilon`` (``delta`` if approximate).
        accountant: ``ldp_audit.accountant.Accountant``.
        agent_ids: ledger agent id per row.
        rng: noise generator.
        event: ledger event of one row (default ``event_for(mechanism)``).
        preprocess: applied to ``values`` before the mechanism (a clip, say).
        meta: (n,) arrays carried with the rows.
        scope: "local" (per-agent LDP claim) or "central" (DP-SGD).
    """
    req = ReleaseRequest(
        values=values,
        mechanism=mechanism,
        agent_ids=agent_ids,
        rng=rng,
        event=event,
        preprocess=preprocess,
        meta=dict(meta or {}),
    )
    return release_many([req], accountant=accountant, scope=scope)[0]


def release_with(
    randomise: Callable[[], Any],
    *,
    accountant: Any,
    charges: Sequence[tuple[str, Any]],
    epsilon: float,
    delta: float = 0.0,
    meta: Mapping[str, Any] | None = None,
    scope: str = "local",
) -> SealedRelease:
    """Charge ``charges`` durably, THEN call ``randomise()`` and seal what it returns.

    For releases whose randomisation is not a ``Mechanism.privatize`` call: a DP-SGD step
    (Opacus's ``DPOptimizer`` adds the noise), a noisy network output. ``randomise`` must return
    the randomised value (an array or tensor; tensors are detached and copied to NumPy).

    Args:
        randomise: zero-argument function that draws the noise and returns the released value.
        accountant: the ledger's accountant.
        charges: ``[(agent_id, event), ...]`` charged in one transaction before ``randomise``.
        epsilon, delta: the per-release guarantee, for the record.
        meta: arrays carried with the release (first axis = rows of the returned value).
        scope: "local" or "central".
    """
    if accountant is None:
        raise InvalidParameterError("accountant is required: every release is charged first")
    if not callable(randomise):
        raise InvalidParameterError(f"randomise must be callable, got {type(randomise).__name__}")
    charges = list(charges)
    if not charges:
        raise InvalidParameterError("charges must name at least one (agent, event)")
    accountant.charge_many(charges, scope=scope)  # durable, before any noise
    value = randomise()
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    events = {repr(e) for _, e in charges}
    return SealedRelease(
        np.asarray(value),
        meta=dict(meta or {}),
        epsilon=epsilon,
        delta=delta,
        event=charges[0][1] if len(events) == 1 else None,
        agent_ids=tuple(a for a, _ in charges),
        seal=_SEAL,
    )


class Transcript:
    """What crossed the trust boundary, in arrival order (written as ``transcript.npz``).

    ``append(rel, **columns)`` adds ``rel.values`` under the key ``values_key`` (default
    ``"report"``), every ``rel.meta`` array and the extra per-row ``columns``; :meth:`arrays`
    concatenates. Only sealed releases are accepted, so a raw value can never be recorded as if
    it had crossed the boundary. Arrays that are not per row (e.g. the broadcast parameters
    ``thetas``) are set with :meth:`set_static`.
    """

    def __init__(self, values_key: str = "report") -> None:
        self.values_key = values_key
        self._cols: dict[str, list[np.ndarray]] = {}
        self._static: dict[str, np.ndarray] = {}
        self._rows = 0

    def append(self, rel: SealedRelease, **columns: Any) -> None:
        require_sealed(rel, "the transcript")
        n = len(rel)
        new = {self.values_key: rel.values, **rel.meta}
        for k, v in columns.items():
            arr = np.asarray(v)
            if arr.ndim == 0:
                arr = np.full(n, arr)
            if arr.shape[:1] != (n,):
                raise InvalidParameterError(
                    f"transcript column {k!r} must have one entry per row ({n}), got {arr.shape}"
                )
            new[k] = arr
        if self._cols and set(new) != set(self._cols):
            raise InvalidParameterError(
                f"transcript columns must not change between appends: had {sorted(self._cols)}, "
                f"got {sorted(new)}"
            )
        for k, v in new.items():
            self._cols.setdefault(k, []).append(np.array(v, copy=True))
        self._rows += n

    def set_static(self, name: str, value: Any) -> None:
        """A transcript array that is not per row (e.g. ``thetas``, the broadcast parameters)."""
        self._static[name] = np.array(value, copy=True)

    def __len__(self) -> int:
        return self._rows

    def arrays(self) -> dict[str, np.ndarray]:
        """All columns concatenated (row order = arrival order) plus the static arrays."""
        out = {k: np.concatenate(v) for k, v in self._cols.items()}
        out.update(self._static)
        return out
