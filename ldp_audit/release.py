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
(charged but not released is the safe direction; the opposite never happens). A block of future
releases can be charged ahead in one durable transaction with :func:`reserve`; each release then
draws its charges from the :class:`Reservation` (a release that was not reserved is refused).

Example::

    from ldp_audit.release import release, Transcript
    rel = release(grads, mechanism=mech, accountant=acc, agent_ids=["0/0", "0/1"], rng=rng,
                  meta={"agent": np.array([0, 1])})
    aggregator.receive(rel)          # receivers call require_sealed(rel)
    transcript.append(rel, round=np.array([0, 0]))
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from ldp_audit.errors import InvalidParameterError
from ldp_audit.validation import (
    check_bool,
    check_choice,
    check_numeric,
    check_probability,
    check_real,
    check_rng,
)

if TYPE_CHECKING:
    from ldp_audit.accountant.events import DpEvent

__all__ = [
    "Charging",
    "ReleaseMechanism",
    "SealedRelease",
    "ReleaseRequest",
    "release",
    "release_many",
    "release_with",
    "require_sealed",
    "Reservation",
    "reserve",
    "Transcript",
]

_SEAL = object()


@runtime_checkable
class ReleaseMechanism(Protocol):
    """What the release path needs of a mechanism: its ``epsilon`` and ``privatize(x, rng)``
    (each row randomised independently). Its ledger event is ``event()`` where it has one (every
    built-in :class:`~ldp_audit.mechanisms.Mechanism` does), else ``PureDpEvent(epsilon)``
    (:func:`ldp_audit.accountant.event_for`)."""

    @property
    def epsilon(self) -> float: ...

    def privatize(self, x: Any, rng: np.random.Generator) -> np.ndarray: ...


class Charging(Protocol):
    """What the release path needs of an accountant: one durable, all-or-nothing transaction
    for many charges, raising before anything is written when a budget would be exceeded
    (:class:`~ldp_audit.accountant.Accountant`, and a :class:`Reservation` drawing on charges
    made ahead)."""

    def charge_many(
        self, charges: Iterable[tuple[str, DpEvent]], *, scope: str = "local"
    ) -> int: ...


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
        self._meta = {k: _readonly(v, f"meta[{k!r}]") for k, v in _check_meta(meta, n).items()}
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


def _check_accountant(accountant: Any) -> None:
    if accountant is None:
        raise InvalidParameterError("accountant is required: every release is charged first")
    if not callable(getattr(accountant, "charge_many", None)):
        raise InvalidParameterError(
            "accountant must charge durably (an ldp_audit.accountant.Accountant or a "
            f"Reservation: charge_many(charges, scope=...)), got {type(accountant).__name__}"
        )


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


_SCOPES = ("local", "central")


def _check_charges(charges: Any, memo: dict[int, tuple[Any, str]]) -> list[tuple[str, Any]]:
    """``[(agent, event), ...]``: a sequence (not a str) of pairs, agents non-empty str, events
    ledger events (validated once per event object; ``memo`` maps id(event) -> (event, JSON))."""
    from ldp_audit.accountant.events import event_to_json

    if isinstance(charges, (str, bytes)) or not isinstance(charges, Iterable):
        raise InvalidParameterError(
            f"charges must be a sequence of (agent, event) pairs, got {type(charges).__name__}"
        )
    out = []
    for item in charges:
        if not isinstance(item, tuple) or len(item) != 2:
            raise InvalidParameterError(f"charges must be (agent, event) pairs, got {item!r}")
        agent, event = item
        if type(agent) is not str or not agent:
            raise InvalidParameterError(f"agent ids must be non-empty str, got {agent!r}")
        hit = memo.get(id(event))
        if hit is None or hit[0] is not event:
            try:
                text = event_to_json(event)
            except InvalidParameterError:
                raise
            except Exception as exc:  # noqa: BLE001 - any unsupported object is bad input
                raise InvalidParameterError(
                    f"charges must name ledger events (ldp_audit.accountant), got {event!r}: {exc}"
                ) from None
            memo[id(event)] = (event, text)  # the memo keeps the event alive: ids stay unique
        out.append((agent, event))
    return out


def _check_meta(meta: Any, n: int | None) -> dict[str, np.ndarray]:
    """Meta arrays: str keys, numeric arrays of equal length (``n`` rows when known)."""
    if meta is None:
        return {}
    if not isinstance(meta, Mapping):
        raise InvalidParameterError(f"meta must be a mapping of arrays, got {type(meta).__name__}")
    out: dict[str, np.ndarray] = {}
    rows = n
    for k, v in meta.items():
        if type(k) is not str or not k:
            raise InvalidParameterError(f"meta keys must be non-empty str, got {k!r}")
        arr = check_numeric(v, f"meta[{k!r}]")
        if arr.ndim == 0:
            raise InvalidParameterError(f"meta[{k!r}] must have one entry per row, got a scalar")
        if rows is None:
            rows = arr.shape[0]
        if arr.shape[0] != rows:
            raise InvalidParameterError(
                f"meta[{k!r}] must have one entry per released row ({rows}), got shape {arr.shape}"
            )
        out[k] = arr
    return out


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
    mechanism: ReleaseMechanism
    agent_ids: Sequence[str]
    rng: np.random.Generator
    event: DpEvent | None = None
    preprocess: Callable[[np.ndarray], np.ndarray] | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)


def _check_values(values: Any, name: str) -> np.ndarray:
    """Refuse what no mechanism may release, BEFORE anything is charged or drawn.

    Values must be a non-empty real numeric array (a tensor is detached to NumPy) with every
    entry finite: a NaN or inf would pass through an additive mechanism un-noised, and a value a
    mechanism then refuses would leave the ledger recording a release that never happened.
    """
    x = check_numeric(values, name)
    if x.size == 0:
        raise InvalidParameterError(f"{name} must be non-empty, got shape {x.shape}")
    if np.issubdtype(x.dtype, np.floating) and not np.isfinite(x).all():
        bad = tuple(int(i) for i in np.argwhere(~np.isfinite(x))[0])
        raise InvalidParameterError(f"{name} must be finite; found {float(x[bad])} at index {bad}")
    return x


def _check_guarantee(epsilon: Any, delta: Any, prefix: str = "") -> tuple[float, float]:
    """The per-release guarantee recorded on a seal: ``epsilon`` a real number >= 0 (inf
    allowed; NaN, ``'1'`` and ``True`` refused), ``delta`` in [0, 1]."""
    eps = check_real(epsilon, f"{prefix}epsilon")
    if not eps >= 0.0:  # also NaN
        raise InvalidParameterError(f"{prefix}epsilon must be >= 0 (inf allowed), got {epsilon!r}")
    return eps, check_probability(delta, f"{prefix}delta", open_interval=False)


def _check_released(value: Any, name: str, rows: int | None) -> np.ndarray:
    """What a randomiser returned, known only after the charge: a non-empty, real, finite array
    with ``rows`` rows (when given), else refused; the charge stands (the safe direction)."""
    try:
        x = _check_values(value, name)
        got = x.shape[0] if x.ndim else 1
        if rows is not None and got != rows:
            raise InvalidParameterError(
                f"{name} must have one row per charged row ({rows}), got shape {x.shape}"
            )
    except InvalidParameterError as exc:
        raise InvalidParameterError(
            f"{exc} (the ledger charge stands: charged, never released)"
        ) from None
    return x


def release_many(
    requests: Sequence[ReleaseRequest], *, accountant: Charging, scope: str = "local"
) -> list[SealedRelease]:
    """Charge every row of every request in one ledger transaction, then randomise each group.

    If the charge raises (e.g. ``BudgetExceeded``), no noise is drawn and nothing is released.
    What ``privatize`` returns must be a non-empty, real, finite array with one row per charged
    row; anything else is refused after the charge (charged, never released).
    """
    from ldp_audit.accountant import event_for

    _check_accountant(accountant)
    charges: list[tuple[str, Any]] = []
    prepared = []
    for r in requests:
        if not isinstance(r, ReleaseRequest):
            raise InvalidParameterError(
                f"requests must be ReleaseRequest objects, got {type(r).__name__}"
            )
        if not isinstance(r.mechanism, ReleaseMechanism):
            raise InvalidParameterError(
                "mechanism must have an epsilon and privatize(x, rng), got "
                f"{type(r.mechanism).__name__}"
            )
        check_rng(r.rng)
        x = _check_values(r.values, "values")
        n = x.shape[0] if x.ndim else 1
        ids = _check_ids(r.agent_ids, n)
        if r.preprocess is not None and not callable(r.preprocess):
            raise InvalidParameterError(
                f"preprocess must be callable or None, got {r.preprocess!r}"
            )
        if r.preprocess is not None:  # deterministic (a clip): done before the charge so a
            x = _check_values(r.preprocess(x), "preprocess(values)")  # bad value costs nothing
        _check_meta(r.meta, n)  # a bad id array is refused before the charge too
        guarantee = _check_guarantee(
            r.mechanism.epsilon, getattr(r.mechanism, "delta", 0.0), "mechanism."
        )
        ev = r.event if r.event is not None else event_for(r.mechanism)
        charges.extend((a, ev) for a in ids)
        prepared.append((r, x, ids, ev, guarantee))
    scope = check_choice(scope, "scope", _SCOPES)
    if charges:
        accountant.charge_many(charges, scope=scope)  # durable, before any noise
    out = []
    for r, x, ids, ev, (eps, dl) in prepared:
        value = r.mechanism.privatize(x, r.rng)
        out.append(
            SealedRelease(
                _check_released(value, "mechanism.privatize(values)", len(ids)),
                meta=r.meta,
                epsilon=eps,
                delta=dl,
                event=ev,
                agent_ids=ids,
                seal=_SEAL,
            )
        )
    return out


def release(
    values: Any,
    *,
    mechanism: ReleaseMechanism,
    accountant: Charging,
    agent_ids: Sequence[str],
    rng: np.random.Generator,
    event: DpEvent | None = None,
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
        values, mechanism, agent_ids, rng, event, preprocess, {} if meta is None else meta
    )
    return release_many([req], accountant=accountant, scope=scope)[0]


def release_with(
    randomise: Callable[[], Any],
    *,
    accountant: Charging,
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

    Validated like :func:`release`: before anything is charged, the accountant, ``randomise``,
    every charge (a pair of a non-empty str agent id and a ledger event), ``epsilon`` (a real
    number >= 0, inf allowed) and ``delta`` (in [0, 1]), ``scope`` and the ``meta`` arrays
    (numeric, one entry per row); after ``randomise()``, its value must be a non-empty, real,
    finite array with one row per ``meta`` entry. A value refused there was charged and is not
    released (the safe direction), and the error says so.

    Args:
        randomise: zero-argument function that draws the noise and returns the released value.
        accountant: the ledger's accountant, or a :class:`Reservation` drawn from.
        charges: ``[(agent_id, event), ...]`` charged in one transaction before ``randomise``.
        epsilon, delta: the per-release guarantee, for the record.
        meta: arrays carried with the release (first axis = rows of the returned value).
        scope: "local" or "central".

    Raises:
        InvalidParameterError: bad input (nothing charged), or a value ``randomise`` returned
            that may not be released (charged, not released).
    """
    _check_accountant(accountant)
    if not callable(randomise):
        raise InvalidParameterError(f"randomise must be callable, got {type(randomise).__name__}")
    memo = getattr(accountant, "_release_event_memo", {})
    charges = _check_charges(charges, memo if len(memo) < 1024 else {})
    if not charges:
        raise InvalidParameterError("charges must name at least one (agent, event)")
    eps, dl = _check_guarantee(epsilon, delta)  # the per-release guarantee, for the record
    scope = check_choice(scope, "scope", _SCOPES)
    meta_arrays = _check_meta(meta, None)
    accountant.charge_many(charges, scope=scope)  # durable, before any noise
    x = _check_released(randomise(), "randomise()'s value", None)
    try:
        _check_meta(meta_arrays, x.shape[0] if x.ndim else 1)
    except InvalidParameterError as exc:
        raise InvalidParameterError(
            f"{exc} (the ledger charge stands: charged, never released)"
        ) from None
    events = {repr(e) for _, e in charges}
    return SealedRelease(
        x,
        meta=meta_arrays,
        epsilon=eps,
        delta=dl,
        event=charges[0][1] if len(events) == 1 else None,
        agent_ids=tuple(a for a, _ in charges),
        seal=_SEAL,
    )


class Reservation:
    """Budget charged durably up front for a block of releases (made by :func:`reserve`).

    A durable ledger charge is one SQLite transaction with fsync; a trainer that releases many
    times per step charges a whole block of its future releases in ONE transaction
    (:meth:`add`), then releases through :func:`release` / :func:`release_with` with the
    reservation as their ``accountant``: each release draws its charges from the reserved ones
    (:meth:`charge_many`), and a release that was not reserved is refused before its noise is
    drawn. Charges always precede releases; what is reserved and never drawn stays charged on
    the ledger, never released (the conservative direction), and :meth:`unused` counts it.

    ``itemised=False`` is for an engine whose releases happen inside compiled code (the fused
    PGC-A3C engine): :meth:`add` charges durably as above, the engine keeps its own count of
    what it may release (its kernel stops before a release that was not reserved), and the
    reservation refuses draws through :func:`release_with`.

    Attributes:
        accountant: the accountant charged.
        scope: "local" or "central": every charge and draw of the reservation has this scope.
        charged: charges reserved so far (all durable); drawn: charges drawn by releases.
    """

    def __init__(self, accountant: Charging, scope: str, itemised: bool, token: Any) -> None:
        if token is not _SEAL:
            raise TypeError("a Reservation is made by ldp_audit.release.reserve()")
        self.accountant = accountant
        self.scope = scope
        self.itemised = itemised
        self.charged = 0
        self.drawn = 0
        self.closed = False
        self._balance: Counter[tuple[str, str]] = Counter()
        self._release_event_memo: dict[int, tuple[Any, str]] = {}
        # one add, draw or close at a time: two threads drawing the last reserved charge both
        # passed the balance check before either subtracted (a release never charged)
        self._lock = threading.RLock()

    def _keys(self, charges: Any) -> list[tuple[str, str]]:
        """``[(agent, event JSON), ...]`` of checked ``charges`` (the memo holds every event)."""
        memo = self._release_event_memo
        return [(a, memo[id(e)][1]) for a, e in _check_charges(charges, memo)]

    def _open(self) -> None:
        if self.closed:
            raise InvalidParameterError("this reservation is closed: reserve a new block")

    def add(self, charges: Iterable[tuple[str, Any]]) -> int:
        """Charge ``charges`` durably (ONE ledger transaction, in this order) and reserve them.

        Returns:
            The number of charges added.
        """
        with self._lock:
            self._open()
            if len(self._release_event_memo) > 1024:
                self._release_event_memo.clear()
            ch = _check_charges(charges, self._release_event_memo)
            if not ch:
                return 0
            self.accountant.charge_many(ch, scope=self.scope)  # durable, before any release
            self.charged += len(ch)
            if self.itemised:
                self._balance.update(self._keys(ch))
            return len(ch)

    def charge_many(self, charges: Iterable[tuple[str, Any]], *, scope: str = "local") -> int:
        """Draw ``charges`` from the reservation (what :func:`release` and :func:`release_with`
        call on their ``accountant``); nothing is drawn unless all of them were reserved.

        Raises:
            InvalidParameterError: a charge was not reserved (or not enough times), the scope
                differs from the reservation's, or the reservation is closed or not itemised.
        """
        with self._lock:
            self._open()
            if not self.itemised:
                raise InvalidParameterError(
                    "this reservation is not itemised: its releases are counted by the engine "
                    "that made it, not drawn through ldp_audit.release"
                )
            if check_choice(scope, "scope", _SCOPES) != self.scope:
                raise InvalidParameterError(
                    f"scope {scope!r} differs from the reservation's {self.scope!r}"
                )
            need = Counter(self._keys(charges))
            for k, n in need.items():
                if self._balance[k] < n:
                    raise InvalidParameterError(
                        f"release of {k[0]!r} ({k[1]}) was not charged to the ledger first"
                    )
            self._balance.subtract(need)
            drawn = sum(need.values())
            self.drawn += drawn
            return drawn

    def unused(self) -> int | None:
        """Reserved charges not (yet) drawn: charged, never released (None if not itemised)."""
        return self.charged - self.drawn if self.itemised else None

    def close(self) -> int | None:
        """End the block: later adds and draws are refused. Returns :meth:`unused`."""
        with self._lock:
            self.closed = True
            return self.unused()

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Reservation(scope={self.scope!r}, charged={self.charged}, drawn={self.drawn}, "
            f"itemised={self.itemised}, closed={self.closed})"
        )


def reserve(
    accountant: Charging,
    charges: Iterable[tuple[str, Any]] = (),
    *,
    scope: str = "local",
    itemised: bool = True,
) -> Reservation:
    """Reserve budget for a block of releases: charge ``charges`` durably now, release later.

    Example::

        with reserve(acc, [(f"0/{a}", ev) for a in agents for _ in range(steps)]) as block:
            for _ in range(steps):
                rel = release_with(draw, accountant=block, charges=[...], epsilon=eps)
        # block.unused(): reserved, never released (still charged on the ledger)

    Args:
        accountant: the ledger's accountant (``charge_many``).
        charges: ``[(agent_id, event), ...]`` charged now in one transaction (more with
            :meth:`Reservation.add`).
        scope: "local" or "central".
        itemised: track each reserved charge so releases draw them (default); False for an
            engine that releases inside compiled code and counts its reservations itself.

    Raises:
        InvalidParameterError: bad input (nothing charged).
        BudgetExceeded: the accountant's budget refuses the block (nothing charged).
    """
    _check_accountant(accountant)
    scope = check_choice(scope, "scope", _SCOPES)
    block = Reservation(accountant, scope, check_bool(itemised, "itemised"), _SEAL)
    block.add(charges)
    return block


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
