"""Privacy events: immutable descriptions of what an agent released (after Google's dp_accounting).

An event's meaning never changes; new behaviour gets a new class. Every event round-trips through
JSON (``to_dict`` / ``event_from_dict``), which is how the ledger stores it.

Atomic events:
    PureDpEvent(epsilon)            any epsilon-DP release (PRS, bit flip, randomized response);
    LaplaceEvent(epsilon)           a Laplace release with L1-sensitivity / scale = epsilon
                                    (PGC paper eqs. 19-21), which composes more tightly;
    GaussianEvent(noise_multiplier) a Gaussian release, noise std / L2-sensitivity;
    NonPrivateEvent()               a release with no privacy (epsilon = infinity).
Combinators:
    PoissonSampledEvent(sample_rate, event)  the event run on a Poisson subsample (DP-SGD step);
    SelfComposedEvent(event, count)          ``count`` independent repetitions;
    ComposedEvent(events)                    the events one after another.
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar

from ldp_audit.errors import InvalidParameterError
from ldp_audit.validation import check_epsilon, check_int, check_real_in

__all__ = [
    "DpEvent",
    "PureDpEvent",
    "LaplaceEvent",
    "GaussianEvent",
    "NonPrivateEvent",
    "PoissonSampledEvent",
    "SelfComposedEvent",
    "ComposedEvent",
    "event_from_dict",
    "event_from_json",
    "event_to_json",
    "event_for",
    "flatten",
    "unsampled",
]


class DpEvent:
    """Base class of all privacy events (frozen dataclasses)."""

    #: The event's ``"type"`` in JSON (each event class's own).
    TYPE: ClassVar[str]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able description of the event (round-trips through the ledger): its ``type``
        and its fields, inner events as their dicts."""
        out: dict[str, Any] = {"type": self.TYPE}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            v = getattr(self, f.name)
            if isinstance(v, DpEvent | tuple):
                v = v.to_dict() if isinstance(v, DpEvent) else [e.to_dict() for e in v]
            out[f.name] = v
        return out


@dataclass(frozen=True)
class PureDpEvent(DpEvent):
    """An ``epsilon``-DP release with nothing more known about the mechanism.

    Composed with the tight generic curve of randomized response (Kairouz-Oh-Viswanath 2015:
    randomized response dominates every epsilon-DP mechanism).
    """

    TYPE = "pure"

    epsilon: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon, "epsilon"))


@dataclass(frozen=True)
class LaplaceEvent(DpEvent):
    """A Laplace release whose L1-sensitivity / noise-scale ratio is ``epsilon``.

    PGC paper eqs. 19-21: gradients clipped to L1 norm C/2 (sensitivity C) plus Lap(C/epsilon) per
    coordinate. It is epsilon-DP, and its exact privacy-loss distribution composes more tightly.
    """

    TYPE = "laplace"

    epsilon: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon, "epsilon"))


@dataclass(frozen=True)
class GaussianEvent(DpEvent):
    """A Gaussian release: noise standard deviation / L2-sensitivity = ``noise_multiplier``,
    in [1e-100, 1e100] (:data:`NOISE_MULTIPLIER_RANGE`)."""

    TYPE = "gaussian"

    noise_multiplier: float

    def __post_init__(self) -> None:
        lo, hi = NOISE_MULTIPLIER_RANGE
        nm = check_real_in(self.noise_multiplier, "noise_multiplier", lo=lo, lo_open=False, hi=hi)
        object.__setattr__(self, "noise_multiplier", nm)


#: the noise multipliers a :class:`GaussianEvent` takes: every composition method squares it
#: (RDP is alpha / (2 nm^2)), a finite normal double in this range (session 58: 1e-300 was
#: charged, then every method raised ZeroDivisionError; 1e300 an OverflowError)
NOISE_MULTIPLIER_RANGE = (1e-100, 1e100)


@dataclass(frozen=True)
class NonPrivateEvent(DpEvent):
    """A release with no privacy guarantee: every composition method reports infinity."""

    TYPE = "non_private"


@dataclass(frozen=True)
class PoissonSampledEvent(DpEvent):
    """``event`` applied to a Poisson subsample with inclusion probability ``sample_rate``."""

    TYPE = "poisson_sampled"

    sample_rate: float
    event: DpEvent

    def __post_init__(self) -> None:
        q = check_real_in(self.sample_rate, "sample_rate", lo=0.0, lo_open=True, hi=1.0)
        object.__setattr__(self, "sample_rate", q)
        _check_event(self.event, "event")


@dataclass(frozen=True)
class SelfComposedEvent(DpEvent):
    """``count`` independent repetitions of ``event``."""

    TYPE = "self_composed"

    event: DpEvent
    count: int

    def __post_init__(self) -> None:
        _check_event(self.event, "event")
        count = self.count  # an integer >= 1 (a float of integer value too; bool refused)
        if isinstance(count, float) and count.is_integer():
            count = int(count)
        object.__setattr__(self, "count", check_int(count, "count", minimum=1))


@dataclass(frozen=True)
class ComposedEvent(DpEvent):
    """The ``events`` applied one after another (a tuple; order does not change the guarantee)."""

    TYPE = "composed"

    events: tuple[DpEvent, ...]

    def __post_init__(self) -> None:
        if isinstance(self.events, DpEvent) or not isinstance(self.events, Iterable):
            raise InvalidParameterError(
                f"events must be a sequence of events, got {type(self.events).__name__}"
            )
        events = tuple(self.events)
        if not events:  # it would compose to epsilon 0: a charge that charges nothing
            raise InvalidParameterError("events must name at least one event, got none")
        for i, e in enumerate(events):
            _check_event(e, f"events[{i}]")
        object.__setattr__(self, "events", events)


def _check_event(event: Any, name: str) -> None:
    if not isinstance(event, DpEvent):
        raise InvalidParameterError(
            f"{name} must be a privacy event (e.g. PureDpEvent(epsilon=1.0)), "
            f"got {type(event).__name__}"
        )


def event_from_dict(d: Mapping[str, Any]) -> DpEvent:
    """Invert ``DpEvent.to_dict``.

    Raises:
        InvalidParameterError: ``d`` does not describe a known event.
    """
    if not isinstance(d, Mapping) or "type" not in d:
        raise InvalidParameterError(f"event must be a mapping with a 'type' key, got {d!r}")
    kind = d["type"]
    cls = next((c for c in DpEvent.__subclasses__() if getattr(c, "TYPE", None) == kind), None)
    if cls is None:
        raise InvalidParameterError(f"event type must be a known event type, got {kind!r}")
    try:
        args = {f.name: d[f.name] for f in dataclasses.fields(cls)}
    except KeyError as exc:
        raise InvalidParameterError(f"event of type {kind!r} lacks field {exc.args[0]!r}") from None
    if "event" in args:
        args["event"] = event_from_dict(args["event"])
    if "events" in args:
        args["events"] = tuple(event_from_dict(e) for e in args["events"])
    return cls(**args)


def event_to_json(event: DpEvent) -> str:
    """Canonical JSON of an event (sorted keys, no spaces): equal events give equal strings."""
    _check_event(event, "event")
    return json.dumps(event.to_dict(), sort_keys=True, separators=(",", ":"))


@lru_cache(maxsize=4096)
def event_from_json(text: str) -> DpEvent:
    """Parse the canonical JSON written by ``event_to_json`` (cached: events are immutable)."""
    try:
        d = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise InvalidParameterError(f"event JSON must be valid JSON, got {text!r}") from exc
    return event_from_dict(d)


def unsampled(event: DpEvent) -> tuple[DpEvent, float]:
    """``(inner event, sample rate)`` of a Poisson-sampled event; ``(event, 1.0)`` otherwise."""
    if isinstance(event, PoissonSampledEvent):
        return event.event, event.sample_rate
    return event, 1.0


def flatten(events: Iterable[tuple[DpEvent, int]] | DpEvent) -> Counter[DpEvent]:
    """Reduce a history to a multiset of atomic events: ``{atomic_event: count}``.

    Atomic events are ``PureDpEvent``, ``LaplaceEvent``, ``GaussianEvent``, ``NonPrivateEvent`` and
    ``PoissonSampledEvent`` of an atomic event. ``SelfComposedEvent`` multiplies counts and
    ``ComposedEvent`` concatenates; a ``PoissonSampledEvent`` of a composite is kept whole.

    Args:
        events: an event, or pairs ``(event, count)``.
    """
    out: Counter[DpEvent] = Counter()
    pairs = [(events, 1)] if isinstance(events, DpEvent) else events
    stack = list(pairs)
    while stack:
        ev, n = stack.pop()
        if isinstance(ev, SelfComposedEvent):
            stack.append((ev.event, n * ev.count))
        elif isinstance(ev, ComposedEvent):
            stack.extend((e, n) for e in ev.events)
        else:
            out[ev] += n
    return out


# ---------------------------------------------------------------------------------------------
# mechanism -> event (``mechanism.event()``, duck typed so that we do not import mechanisms)
# ---------------------------------------------------------------------------------------------


def event_for(mechanism: Any) -> DpEvent:
    """The event one report of ``mechanism`` releases: ``mechanism.event()``.

    Every built-in mechanism owns its event (``Laplace`` -> ``LaplaceEvent(epsilon)``,
    ``Gaussian`` -> ``GaussianEvent(noise_multiplier / 2)``, ``NoPrivacy`` ->
    ``NonPrivateEvent()``, the others ``PureDpEvent(epsilon)``: see each class's ``event``). A
    user's mechanism may define ``event()`` too; one that has only ``epsilon`` (and ``delta``
    0) is charged ``PureDpEvent(epsilon)``, and ``NonPrivateEvent()`` when epsilon is inf.

    Raises:
        InvalidParameterError: ``event()`` returned something that is not a ``DpEvent``, or the
            mechanism has no ``event()`` and no finite pure epsilon.
    """
    make = getattr(mechanism, "event", None)
    if callable(make):
        ev = make()
        if not isinstance(ev, DpEvent):
            raise InvalidParameterError(
                f"{type(mechanism).__name__}.event() must return a DpEvent "
                f"(ldp_audit.accountant), got {ev!r}"
            )
        return ev
    eps = getattr(mechanism, "epsilon", None)
    delta = getattr(mechanism, "delta", 0.0) or 0.0
    if isinstance(eps, numbers.Real) and not isinstance(eps, bool):
        if math.isinf(eps) and eps > 0:
            return NonPrivateEvent()
        if float(delta) == 0.0:
            return PureDpEvent(float(eps))
    raise InvalidParameterError(
        "mechanism must define event() (its accounting event) or have a finite pure epsilon "
        f"(delta 0), got {mechanism!r}"
    )
