"""The composition methods: one agent's history composed by each method, and ``best``.

Pure functions, memoised on the (immutable) history signature; the accountant
(:mod:`~ldp_audit.accountant.accountant`) asks them for every spend and every budget check, and
:func:`compose` / :func:`supports` answer without any ledger. The maths of each method is its
own module's (``composition``, ``rdp``, ``prv``, ``pld``); this module picks which apply to a
history and takes their minimum.

========== ============================================================ =====================
method     result                                                       events
========== ============================================================ =====================
basic      sum of epsilons (PGC paper, Theorem 1)                       pure / Laplace
advanced   Dwork-Rothblum-Vadhan                                         pure / Laplace
optimal    Kairouz-Oh-Viswanath exact composition                        pure / Laplace
rdp        Renyi DP via Opacus (exact RR / Laplace / Gaussian curves)    all but non-private
prv        Opacus ``PRVAccountant``                                      (sampled) Gaussian
pld        dp_accounting privacy loss distributions                      all but non-private
best       the minimum of every method that supports the history         any
========== ============================================================ =====================

(When PLD's own planner refuses a history, ``best`` still computes a PLD at a mesh of 1e-4 of
the smallest epsilon found so far, see ``_pld_coarse``: for DP-SGD histories with a small noise
multiplier this costs under a second and is 10-60x tighter than RDP.)

(``best`` skips rdp/pld for plain ``PureDpEvent`` histories once ``optimal`` applies: the optimal
composition is exact there, so nothing valid can be smaller.)

Every method gives a valid upper bound for its events, so ``best`` (their minimum) is valid too,
for histories whose epsilons were fixed in advance. Poisson-sampled pure events count at the
amplified epsilon ``log(1 + q (e^eps - 1))``.

A history is a :data:`Signature`: sorted ``((event_json, count), ...)`` pairs
(:func:`signature`); :func:`evaluate_full` gives its epsilon, the winning method, every
method's value and the methods ``best`` skipped with the reason.
"""

from __future__ import annotations

import math
import sys
import warnings
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

import ldp_audit.accountant.composition as composition
import ldp_audit.accountant.pld as pld
import ldp_audit.accountant.prv as prv
import ldp_audit.accountant.rdp as rdp
from ldp_audit.accountant.composition import check_delta
from ldp_audit.accountant.events import (
    DpEvent,
    GaussianEvent,
    LaplaceEvent,
    NonPrivateEvent,
    PoissonSampledEvent,
    PureDpEvent,
    event_from_json,
    event_to_json,
    flatten,
    unsampled,
)
from ldp_audit.errors import InvalidParameterError
from ldp_audit.validation import check_choice

__all__ = [
    "METHODS",
    "ALL_METHODS",
    "NEEDS_DELTA",
    "PLD_COARSE_RELATIVE",
    "PLD_COARSE_TRIES",
    "Signature",
    "check_method",
    "signature",
    "pure_epsilon",
    "atoms_of",
    "method_value",
    "evaluate_full",
    "compose",
    "supports",
]

#: Composition methods in the order ``best`` reports ties (cheapest first).
METHODS = ("basic", "advanced", "optimal", "rdp", "prv", "pld")
#: Every method a spend may be asked under: :data:`METHODS` and ``"best"``.
ALL_METHODS = (*METHODS, "best")
#: The methods that need delta > 0 (a normal double: each refuses a subnormal delta).
NEEDS_DELTA = {"advanced", "rdp", "prv", "pld"}


def _no_delta(delta: float) -> bool:
    """A delta the methods of ``NEEDS_DELTA`` cannot use: 0, or a subnormal (< 2.2e-308)."""
    return delta < sys.float_info.min


def check_method(method: Any, allowed: Sequence[str] = ALL_METHODS) -> str:
    """``method`` when it is one of ``allowed``."""
    return check_choice(method, "method", tuple(allowed))


#: A history: sorted ``((event_json, count), ...)`` pairs, one per distinct event.
Signature = tuple[tuple[str, int], ...]


def signature(history: Iterable[tuple[str, int]]) -> Signature:
    """The signature of a history of ``(event_json, count)`` pairs (counts summed, sorted)."""
    c: Counter[str] = Counter()
    for ev, n in history:
        c[ev] += int(n)
    return tuple(sorted(c.items()))


def pure_epsilon(atom: DpEvent) -> float | None:
    """The pure epsilon of an atom of the pure family, else None."""
    if isinstance(atom, PureDpEvent | LaplaceEvent):
        return atom.epsilon
    if isinstance(atom, PoissonSampledEvent) and isinstance(atom.event, PureDpEvent | LaplaceEvent):
        return composition.amplified_epsilon(atom.event.epsilon, atom.sample_rate)
    return None


def _pure_pairs(atoms: Mapping[DpEvent, int]) -> tuple[np.ndarray, np.ndarray]:
    """Distinct pure epsilons and their counts (every atom of the pure family)."""
    eps: Counter[float] = Counter()
    for atom, n in atoms.items():
        eps[pure_epsilon(atom)] += n  # type: ignore[index]
    keys = sorted(eps)
    return np.array(keys, dtype=np.float64), np.array([eps[k] for k in keys], dtype=np.float64)


#: The atomic events (alone or Poisson-sampled) each general method composes; the others
#: (basic, advanced, optimal) compose the pure family (:func:`pure_epsilon`).
_EVENTS = {
    "rdp": (PureDpEvent, LaplaceEvent, GaussianEvent),
    "prv": (GaussianEvent,),
    "pld": (PureDpEvent, LaplaceEvent, GaussianEvent),
}


def _applies(atoms: Iterable[DpEvent], delta: float, method: str) -> bool:
    """Whether ``method`` composes histories of ``atoms`` at ``delta``."""
    if method in NEEDS_DELTA and _no_delta(delta):
        return False
    if method in _EVENTS:
        return all(isinstance(unsampled(a)[0], _EVENTS[method]) for a in atoms)
    return all(pure_epsilon(a) is not None for a in atoms)


#: Each method's epsilon of a history it applies to (``_applies``), at a delta.
_COMPUTE = {
    "basic": lambda atoms, delta: composition.basic_epsilon(*_pure_pairs(atoms)),
    "advanced": lambda atoms, delta: composition.advanced_epsilon(*_pure_pairs(atoms), delta=delta),
    "optimal": lambda atoms, delta: composition.optimal_epsilon_heterogeneous(
        *_pure_pairs(atoms), delta=delta
    ),
    "rdp": lambda atoms, delta: rdp.rdp_epsilon(atoms, delta=delta)[0],
    "prv": lambda atoms, delta: prv.prv_epsilon(atoms, delta=delta),
    "pld": lambda atoms, delta: pld.pld_epsilon(atoms, delta=delta),
}


class _Skip(Exception):
    """A method that applies to the history but is not computed (too expensive): the reason."""


#: ``best``'s coarse PLD (see :func:`_pld_coarse`): discretisation interval relative to the
#: smallest epsilon already found, i.e. a pessimistic rounding of 1e-4 of it per privacy-loss
#: value. Measured (benchmarks/bench_dprl.py, 2-core box): DQN histories of 2,250-24,750
#: Poisson-sampled Gaussian updates at sigma 0.01-0.1 compose in 0.02-0.7 CPU-s, where RDP
#: is 10-60x looser and PRV / the fine PLD refuse.
PLD_COARSE_RELATIVE = 1e-4
#: meshes ``best``'s coarse PLD tries, each 10x finer than the last
PLD_COARSE_TRIES = 4


def _pld_coarse(atoms: Mapping[DpEvent, int], delta: float, reference: float) -> float | None:
    """PLD at a mesh relative to ``reference`` (an epsilon already found), for ``best``.

    ``pld.pld_epsilon`` plans its mesh from a support estimate that, for Gaussians with a small
    noise multiplier, counts the privacy loss's exponential variance and refuses (or
    overflows), although dp_accounting's tail-truncated PLD is small there. A pessimistic PLD
    is a valid upper bound at any discretisation interval; at ``PLD_COARSE_RELATIVE *
    reference`` its support stays near 1/PLD_COARSE_RELATIVE points whenever the epsilon is of
    the order of ``reference``. None when the history is not PLD's, or ``reference`` is not a
    finite positive number.
    """
    if not (math.isfinite(reference) and reference > 0.0) or not _applies(atoms, delta, "pld"):
        return None
    # dp_accounting overflows when the mesh is far coarser than the losses (reference much
    # looser than the PLD): then 10x finer, at most PLD_COARSE_TRIES times (each try is cheap)
    for k in range(PLD_COARSE_TRIES):
        vdi = max(pld.DEFAULT_DISCRETIZATION, PLD_COARSE_RELATIVE * reference / 10.0**k)
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            try:
                total = pld.composed(atoms, vdi)
                if total is None:
                    return None
                v = float(total.get_epsilon_for_delta(delta))
            except (ArithmeticError, ValueError):
                v = math.nan
        if math.isfinite(v):
            return max(0.0, v)
        if vdi <= pld.DEFAULT_DISCRETIZATION:
            break
    return None


def method_value(atoms: Mapping[DpEvent, int], delta: float, method: str) -> float | None:
    """Epsilon of ``atoms`` under ``method`` (clamped at 0), None when the method does not apply.

    Raises:
        _Skip: the method applies but its estimated cost is out of bounds (the reason).
    """
    if not _applies(atoms, delta, check_method(method, METHODS)):
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Opacus / dp_accounting warnings never reach the user
            v = _COMPUTE[method](atoms, delta)
    except InvalidParameterError as exc:  # the planned mesh (prv, pld) or support (optimal)
        if method in ("basic", "advanced", "rdp"):
            raise
        if method == "optimal":
            raise _Skip(f"exact composition is too large for this history: {exc}") from None
        raise _Skip(str(exc)) from None
    except OverflowError as exc:  # pld: the planner's support estimate overflows (sigma << 1)
        if method != "pld":
            raise
        raise _Skip(f"method 'pld' cannot plan its mesh for this history: {exc}") from None
    return max(0.0, float(v))


def atoms_of(sig: Signature) -> Counter[DpEvent]:
    """The history's atomic events with their counts (composed events flattened)."""
    return flatten([(event_from_json(ev), n) for ev, n in sig])


@lru_cache(maxsize=65536)
def evaluate_full(sig: Signature, delta: float, method: str) -> tuple[float, str, tuple, tuple]:
    """``(epsilon, winning method, ((method, epsilon), ...), ((skipped method, reason), ...))``
    for one history signature."""
    if not sig:
        return 0.0, "basic" if method == "best" else method, (), ()
    atoms = atoms_of(sig)
    if any(isinstance(unsampled(a)[0], NonPrivateEvent) for a in atoms):  # sampled or not
        return math.inf, "non_private", (), ()
    if method != "best":
        try:
            v = method_value(atoms, delta, method)
        except _Skip as exc:
            raise InvalidParameterError(
                f"method {method!r} cannot compose this history: {exc}"
            ) from None
        if v is None:
            kinds = sorted({type(a).__name__ for a in atoms})
            need = ""
            if method in NEEDS_DELTA and delta == 0.0:
                need = ", needs delta > 0"
            elif method in NEEDS_DELTA and _no_delta(delta):
                need = f", needs delta >= {sys.float_info.min:g} (a normal double)"
            raise InvalidParameterError(
                f"method {method!r} does not support this history (events {kinds}, "
                f"delta={delta!r}){need}; use method='best' or one of {METHODS}"
            )
        return float(v), method, ((method, float(v)),), ()
    values: dict[str, float] = {}
    skipped: dict[str, str] = {}
    # For plain PureDpEvent histories the optimal composition is exact (Kairouz-Oh-Viswanath):
    # no valid bound can be smaller, so the slower rdp/pld bounds are not computed for "best".
    exact = all(type(a) is PureDpEvent for a in atoms)
    for m in METHODS:
        if exact and m in ("rdp", "prv", "pld") and "optimal" in values:
            continue
        try:
            v = method_value(atoms, delta, m)
        except _Skip as exc:
            skipped[m] = str(exc)
            continue
        if v is not None:
            values[m] = float(v)
    if "pld" in skipped and values:
        # PLD's planner refused: a coarse PLD costs well under a second where the others are
        # loosest (see _pld_coarse), so best computes it rather than report RDP's looseness.
        v = _pld_coarse(atoms, delta, min(values.values()))
        if v is not None:
            values["pld"] = v
            del skipped["pld"]
    if not values:
        if _no_delta(delta) and not skipped:
            # Gaussian-type events have no pure-DP guarantee: epsilon(delta=0) is infinite (at a
            # subnormal delta no method computes it: inf is the bound kept).
            return math.inf, "none", (), ()
        kinds = sorted({type(a).__name__ for a in atoms})
        why = "".join(f"; {m}: {r}" for m, r in skipped.items())
        raise InvalidParameterError(f"no composition method supports events {kinds}{why}")
    winner = min(values, key=values.__getitem__)
    return values[winner], winner, tuple(values.items()), tuple(skipped.items())


def compose(
    events: DpEvent | Iterable[DpEvent] | Iterable[tuple[DpEvent, int]],
    *,
    delta: float = 0.0,
    method: str = "best",
) -> tuple[float, str]:
    """Epsilon (and the method that gave it) of a history, without any ledger.

    Args:
        events: an event, a list of events, or ``(event, count)`` pairs.
        delta: target delta (methods other than basic/optimal need delta > 0).
        method: one of ``basic, advanced, optimal, rdp, prv, pld, best``.
    """
    delta = check_delta(delta)
    method = check_method(method)
    if isinstance(events, DpEvent):
        pairs = [(events, 1)]
    else:
        pairs = [(e, 1) if isinstance(e, DpEvent) else (e[0], int(e[1])) for e in events]
    sig = signature((event_to_json(e), n) for e, n in pairs)
    eps, winner, *_ = evaluate_full(sig, delta, method)
    return eps, winner


def supports(event: DpEvent, method: str, *, delta: float = 1e-5) -> bool:
    """Whether ``method`` can compose histories made of ``event`` (at ``delta``)."""
    method = check_method(method)
    delta = check_delta(delta)
    atoms = flatten(event)
    if any(isinstance(unsampled(a)[0], NonPrivateEvent) for a in atoms):
        return True  # every method reports infinity (as evaluate_full does)
    return any(_applies(atoms, delta, m) for m in (METHODS if method == "best" else (method,)))
