"""Budget planning: how many rounds fit a total budget, and the per-round epsilon for T rounds.

The PGC paper's multi-round extension (section 3.2.1) splits a total epsilon evenly: T
submissions at epsilon/T each (sequential composition, Theorem 1). With a delta > 0 and a tighter
composition (``optimal``, ``pld``, ...) more rounds fit, or each round may use a larger epsilon.
"""

from __future__ import annotations

import math

from ldp_audit.accountant.composition import check_delta
from ldp_audit.accountant.events import LaplaceEvent, PureDpEvent, SelfComposedEvent
from ldp_audit.accountant.methods import check_method, compose
from ldp_audit.validation import check_choice, check_epsilon, check_int

__all__ = ["rounds_for_budget", "epsilon_per_round"]

_MAX_ROUNDS = 10**9


#: The event of one round of each ``mechanism``.
_ROUND_EVENTS = {"pure": PureDpEvent, "laplace": LaplaceEvent}


def _total(epsilon: float, rounds: int, delta: float, method: str, mechanism: str) -> float:
    ev = _ROUND_EVENTS[check_choice(mechanism, "mechanism", tuple(_ROUND_EVENTS))](epsilon)
    return compose(SelfComposedEvent(ev, rounds), delta=delta, method=method)[0]


def rounds_for_budget(
    total_epsilon: float,
    epsilon_per_round: float,
    *,
    delta: float = 0.0,
    method: str = "basic",
    mechanism: str = "pure",
) -> int:
    """The largest T such that T rounds at ``epsilon_per_round`` stay within ``total_epsilon``.

    Args:
        total_epsilon: the total budget.
        epsilon_per_round: the epsilon of each round's release.
        delta: the total delta (0 for pure DP).
        method: composition method (``basic``: floor(total / per round), PGC Theorem 1).
        mechanism: ``"pure"`` (any epsilon-DP release) or ``"laplace"``.

    Returns:
        T >= 0 (0 when one round already exceeds the budget).
    """
    total = check_epsilon(total_epsilon, "total_epsilon")
    eps = check_epsilon(epsilon_per_round, "epsilon_per_round")
    delta = check_delta(delta)
    method = check_method(method)
    tol = total * 1e-9
    if method == "basic":
        return int(math.floor(total / eps * (1 + 1e-12)))
    if _total(eps, 1, delta, method, mechanism) > total + tol:
        return 0
    lo, hi = 1, 2
    while hi < _MAX_ROUNDS and _total(eps, hi, delta, method, mechanism) <= total + tol:
        lo, hi = hi, hi * 2
    while hi - lo > 1:  # total(lo) fits, total(hi) does not
        mid = (lo + hi) // 2
        if _total(eps, mid, delta, method, mechanism) <= total + tol:
            lo = mid
        else:
            hi = mid
    return lo


def epsilon_per_round(
    total_epsilon: float,
    rounds: int,
    *,
    delta: float = 0.0,
    method: str = "basic",
    mechanism: str = "pure",
    rtol: float = 1e-6,
) -> float:
    """The largest per-round epsilon such that ``rounds`` rounds fit ``total_epsilon``.

    With ``method="basic"`` this is the paper's epsilon / T (section 3.2.1). Other methods use
    bisection to relative precision ``rtol``, rounding down (the answer always fits).
    """
    total = check_epsilon(total_epsilon, "total_epsilon")
    rounds = check_int(rounds, "rounds", minimum=1)
    delta = check_delta(delta)
    method = check_method(method)
    if method == "basic":
        return total / rounds

    def fits(e: float) -> bool:
        return _total(e, rounds, delta, method, mechanism) <= total * (1 + 1e-12)

    # Every method gives at most the basic bound here, except advanced for large epsilons.
    lo = total / rounds if fits(total / rounds) else 0.0
    hi = 2 * total / rounds if lo > 0 else total / rounds
    for _ in range(64):
        if not fits(hi):
            break
        lo, hi = hi, 2 * hi
    for _ in range(200):  # bisection: fits(lo) (or lo == 0) and not fits(hi)
        if hi - lo <= rtol * hi:
            break
        mid = 0.5 * (lo + hi)
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo
