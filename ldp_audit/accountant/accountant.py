"""The accountant: charges agents durably, composes their histories, enforces budgets.

Data flow (design.md): ``Mechanism.privatize`` -> ``Accountant.charge`` (durable, before release)
-> the aggregator sees the noisy report. ``charge`` returns only after the charge has been
committed to the ledger's main file (SQLite rollback journal, ``synchronous=FULL``); the caller
releases the report after that. When a budget is set, the check runs inside the same
``BEGIN IMMEDIATE`` transaction as the write, so concurrent processes cannot both pass the check
and overshoot.

Composition methods (``spent(..., method=...)``): ``basic``, ``advanced``, ``optimal``, ``rdp``,
``prv``, ``pld`` and ``best`` (their minimum); which events each supports, and how ``best`` is
computed, is :mod:`~ldp_audit.accountant.methods`' (``compose`` and ``supports`` live there).

Adaptive choice of epsilons (privacy filters): when the epsilon of a round may depend on earlier
outputs, only ``Budget(method="basic")`` (sequential composition is a valid filter) and
``Budget(method="filter")`` (Rogers-Roth-Ullman-Vadhan 2016, Theorem 5.1) are valid stopping
rules; ``Accountant(adaptive=True)`` refuses any other budget method.

What lives where: this module holds the budget (:class:`Budget`), the spend report
(:class:`SpentDetail`) and :class:`Accountant` (charging with the budget check, reading spend);
the composition of one history is :mod:`~ldp_audit.accountant.methods`'; the durable record is
:class:`~ldp_audit.accountant.ledger.Ledger`'s.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from ldp_audit.accountant.composition import check_delta, filter_epsilon
from ldp_audit.accountant.events import DpEvent, event_to_json
from ldp_audit.accountant.ledger import Ledger
from ldp_audit.accountant.ledger_format import SCOPES, AgentState, check_scope, check_text
from ldp_audit.accountant.methods import (
    ALL_METHODS,
    NEEDS_DELTA,
    Signature,
    atoms_of,
    check_method,
    evaluate_full,
    pure_epsilon,
    signature,
)
from ldp_audit.errors import BudgetExceeded, InvalidParameterError, LedgerError
from ldp_audit.validation import check_bool, check_epsilon

__all__ = ["Budget", "SpentDetail", "Accountant"]

_BUDGET_METHODS = (*ALL_METHODS, "filter")
_ADAPTIVE_METHODS = ("basic", "filter")
# Relative slack of the budget check so that T charges of total/T fit into total exactly.
_BUDGET_RTOL = 1e-9


@dataclass(frozen=True)
class Budget:
    """A per-agent privacy budget: every agent may spend at most ``epsilon`` at ``delta``.

    Args:
        epsilon: the total epsilon each agent may spend.
        delta: the delta at which spending is measured (0 for pure DP).
        method: the composition used for the check (see ``Accountant``); ``"filter"`` is the
            Rogers-Roth-Ullman-Vadhan privacy filter for adaptively chosen epsilons (needs
            delta in (0, 1/e)).
    """

    epsilon: float
    delta: float = 0.0
    method: str = "basic"

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon, "budget epsilon"))
        object.__setattr__(self, "delta", check_delta(self.delta))
        check_method(self.method, _BUDGET_METHODS)
        if (self.method in NEEDS_DELTA or self.method == "filter") and (
            self.delta < sys.float_info.min  # 0, or a subnormal no such method computes with
        ):
            raise InvalidParameterError(
                f"budget delta must be > 0 (a normal double, >= {sys.float_info.min:g}) for "
                f"method {self.method!r}, got {self.delta!r}"
            )
        if self.method == "filter" and self.delta >= 1.0 / math.e:
            raise InvalidParameterError(
                f"budget delta must be in (0, 1/e) for method 'filter', got {self.delta!r}"
            )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def limit(self) -> float:
        """The largest spend the budget check accepts: ``epsilon``, with a relative slack of
        1e-9 so that T charges of epsilon/T fit (none for the filter, checked exactly)."""
        return self.epsilon * (1.0 if self.method == "filter" else 1.0 + _BUDGET_RTOL)

    @classmethod
    def for_mechanism(cls, epsilon: float, mechanism: Any) -> Budget:
        """``epsilon`` per agent, spent as ``mechanism``'s releases compose: sequentially for a
        pure-epsilon mechanism, by RDP at its delta for an (epsilon, delta) one (Gaussian)."""
        delta = float(getattr(mechanism, "delta", 0.0) or 0.0)
        return cls(epsilon, delta=delta, method="basic" if delta == 0.0 else "rdp")


@dataclass(frozen=True)
class SpentDetail:
    """What an agent has spent, and which composition gave the number.

    Attributes:
        agent: the agent id.
        epsilon: the reported epsilon (the winner's for ``method="best"``).
        delta: the delta it holds at.
        method: the composition that gave ``epsilon``.
        by_method: every method that supports the history -> its epsilon.
        charges: number of ledger rows of the agent.
        scope: ``"local"``, ``"central"`` or ``"mixed"``.
        remaining: budget epsilon minus spent under the budget's own method (None without budget).
        skipped: methods ``best`` did not compute, each with the reason (e.g. estimated cost).
    """

    agent: str
    epsilon: float
    delta: float
    method: str
    by_method: dict[str, float] = field(default_factory=dict)
    charges: int = 0
    scope: str = "local"
    remaining: float | None = None
    skipped: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# ---------------------------------------------------------------------------------------------
# The accountant
# ---------------------------------------------------------------------------------------------


class Accountant:
    """Per-agent privacy accounting over a durable ledger (after Opacus's ``IAccountant``).

    Args:
        ledger: a ``Ledger``, a path to one, or None for a private in-memory ledger; a
            ``TallyLedger`` keeps per-agent counts only (budgets enforced the same way, but
            no rows, no chain, nothing on disk: for runs whose ledger nobody reads).
        budget: the budget of ``scope="local"`` charges (per-agent LDP): None, a real number
            (epsilon, pure, basic composition) or a ``Budget``. It applies to every agent
            separately, over that agent's local charges only. The durable budget is the
            ledger's: the first accountant with a budget records it in the ledger; a later one
            may restate the same budget or pass None (the recorded budget is then enforced),
            and a different budget is refused (``LedgerError``).
        run_id: stored with every charge (e.g. the trainer's run directory name).
        adaptive: the epsilons may be chosen adaptively (privacy filter mode): the budget methods
            must then be ``"basic"`` or ``"filter"``.
        central_budget: the budget of ``scope="central"`` charges (e.g. a DP-SGD model), checked
            over central charges only; local and central claims are never summed.

    Example:
        >>> acc = Accountant(budget=Budget(epsilon=1.0))
        >>> acc.charge("0/3", PureDpEvent(0.5))
        >>> acc.spent("0/3", method="basic")
        0.5
    """

    def __init__(
        self,
        ledger: Ledger | str | os.PathLike[str] | None = None,
        budget: Budget | float | None = None,
        run_id: str | None = None,
        *,
        adaptive: bool = False,
        central_budget: Budget | float | None = None,
    ) -> None:
        budgets: dict[str, Budget | None] = {}
        for name, b in (("budget", budget), ("central_budget", central_budget)):
            if b is not None and not isinstance(b, Budget):  # a number: its epsilon
                b = Budget(epsilon=check_epsilon(b, name))
            budgets[name] = b
        adaptive = check_bool(adaptive, "adaptive")
        if run_id is not None:
            check_text(run_id, "run_id")
        if ledger is None:
            ledger = Ledger(":memory:")
        elif not isinstance(ledger, Ledger):
            ledger = Ledger(ledger)
        self.ledger = ledger
        meta = self.ledger.meta()
        for name, b in budgets.items():
            b = budgets[name] = self._durable_budget(name, b, meta.get(name), adaptive)
            if adaptive and b is not None and b.method not in _ADAPTIVE_METHODS:
                raise InvalidParameterError(
                    f"{name} method must be one of {_ADAPTIVE_METHODS} when epsilons are chosen "
                    f"adaptively (adaptive=True), got {b.method!r}"
                )
        self.budget: Budget | None = budgets["budget"]
        self.central_budget: Budget | None = budgets["central_budget"]
        self.adaptive = adaptive
        self.run_id = run_id
        self._cache: dict[tuple, dict[str, tuple[float, str]]] = {}
        self._meta_writes = self.ledger.meta_writes

    def _durable_budget(
        self, name: str, b: Budget | None, stored: str | None, adaptive: bool
    ) -> Budget | None:
        """The budget this accountant enforces: the ledger's, recorded on first use."""
        want = None if b is None else {**b.to_dict(), "adaptive": adaptive}
        if stored is None:
            if want is None:
                return None
            if self.ledger.readonly:
                return b  # nothing can be charged anyway
            # Recorded atomically (two processes racing to record different budgets: one wins).
            stored = self.ledger.set_meta_once(name, json.dumps(want, sort_keys=True))
        try:
            rec = json.loads(stored)
            recorded = Budget(epsilon=rec["epsilon"], delta=rec["delta"], method=rec["method"])
            rec_adaptive = bool(rec.get("adaptive", False))
        except (TypeError, ValueError, KeyError, InvalidParameterError) as exc:
            raise LedgerError(
                f"ledger {self.ledger.path!r} records an unreadable {name} {stored!r}: {exc}"
            ) from None
        if want is not None and {**recorded.to_dict(), "adaptive": rec_adaptive} != want:
            raise LedgerError(
                f"ledger {self.ledger.path!r} enforces {name} {recorded.to_dict()} (adaptive="
                f"{rec_adaptive}); Accountant({name}={b.to_dict() if b else b!r}, adaptive="
                f"{adaptive}) would replace it. The durable budget is the ledger's: pass "
                f"{name}=None (or the same budget) to use it, or start a new ledger"
            )
        return recorded

    @property
    def durable(self) -> bool:
        """Whether the charges are kept in a ledger file (evidence that outlives the process)."""
        return bool(self.ledger.durable and self.ledger.evidence)

    def _budget_for(self, scope: str) -> Budget | None:
        return self.central_budget if scope == "central" else self.budget

    # ---- charging ----------------------------------------------------------------------------

    def charge(self, agent: str, event: DpEvent, *, scope: str = "local") -> None:
        """Record that ``agent`` releases ``event``; returns once the charge is durable.

        Raises:
            BudgetExceeded: the charge would take the agent past the budget; nothing recorded.
            InvalidParameterError: bad agent, event or scope, or the budget's method cannot
                compose the agent's history.
            LedgerError: the ledger cannot be written.
        """
        self.charge_many([(agent, event)], scope=scope)

    def charge_many(self, charges: Iterable[tuple[str, DpEvent]], *, scope: str = "local") -> int:
        """Record many charges in one durable transaction, all or nothing.

        The budget is checked for every agent (with all of the batch's charges to that agent
        added) before anything is written, inside the write transaction.

        Returns:
            The number of charges recorded.

        Raises:
            BudgetExceeded: some agent would exceed the budget; nothing of the batch is recorded.
        """
        scope = check_scope(scope)
        if not isinstance(charges, Iterable):
            raise InvalidParameterError(
                f"charges must be an iterable of (agent, event) pairs, got {charges!r}"
            )
        rows: list[tuple[str, str, str]] = []
        # JSON per event object, by identity (a trainer charges the same event object at every
        # step); the memo holds the event, so its id cannot be reused while it is cached.
        json_of = self.__dict__.setdefault("_event_json_memo", {})
        if len(json_of) > 1024:
            json_of.clear()
        for item in charges:
            try:
                agent, event = item
            except (TypeError, ValueError):
                raise InvalidParameterError(
                    f"charges must be (agent, event) pairs, got {item!r}"
                ) from None
            hit = json_of.get(id(event))
            if hit is None or hit[0] is not event:
                hit = json_of[id(event)] = (event, event_to_json(event))  # validates the event
            if type(agent) is not str or not agent or not agent.isprintable():  # fast path
                check_text(agent, "agent id", agent=True)
            rows.append((agent, hit[1], scope))
        if not rows:
            return 0
        budget = self._budget_for(scope)  # checked inside the write, before anything is written
        check = None if budget is None else partial(self._check_budget, rows, budget, scope)
        if budget is None and (self.ledger.durable or self.ledger.meta_writes != self._meta_writes):
            check = partial(self._check_recorded_budget, rows, scope)
        return self.ledger.charge_rows(rows, run_id=self.run_id, check=check)

    def _check_recorded_budget(
        self, rows: Sequence[tuple[str, str, str]], scope: str, states: dict[str, AgentState]
    ) -> None:
        """Without a budget of its own: the budget another accountant (or process) recorded
        since this one opened is the ledger's, so it is enforced from then on (read inside the
        write transaction: the metadata as this charge commits against it)."""
        self._meta_writes = self.ledger.meta_writes
        meta = self.ledger.meta()
        for name in ("budget", "central_budget"):
            if getattr(self, name) is None and meta.get(name) is not None:
                setattr(self, name, self._durable_budget(name, None, meta[name], self.adaptive))
        budget = self._budget_for(scope)
        if budget is not None:
            self._check_budget(rows, budget, scope, states)

    def _check_budget(
        self,
        rows: Sequence[tuple[str, str, str]],
        budget: Budget,
        scope: str,
        states: dict[str, AgentState],
    ) -> None:
        batch: dict[str, list[str]] = {}
        for agent, text, _ in rows:
            batch.setdefault(agent, []).append(text)
        memo: dict[Signature, float] = {}
        limit = budget.limit
        for agent, texts in batch.items():
            st = states.get(agent)
            hist = () if st is None else st.history(scope)
            if len(texts) == 1:
                t = texts[0]
                if not hist:
                    sig = ((t, 1),)
                elif len(hist) == 1 and hist[0][0] == t:
                    sig = ((t, hist[0][1] + 1),)
                else:
                    sig = signature([*hist, (t, 1)])
            else:
                sig = signature([*hist, *((t, 1) for t in texts)])
            eps = memo.get(sig)
            if eps is None:
                eps = memo[sig] = self._spend(sig, budget)
            if not eps <= limit:
                raise BudgetExceeded(
                    f"charging agent {agent!r} with {sorted(set(texts))} would spend epsilon "
                    f"{eps:.6g} (delta={budget.delta:g}, method={budget.method!r}) > budget "
                    f"{budget.epsilon:g}; nothing was recorded"
                )

    @staticmethod
    def _spend(sig: Signature, budget: Budget) -> float:
        """The spend of history ``sig`` under ``budget``'s method ("filter": the filter's
        statistic, which must stay <= the budget's epsilon)."""
        if budget.method != "filter":
            return evaluate_full(sig, budget.delta, budget.method)[0]
        eps_list: list[float] = []
        for atom, n in atoms_of(sig).items():
            e = pure_epsilon(atom)
            if e is None:
                raise InvalidParameterError(
                    f"budget method 'filter' supports pure-DP and Laplace events, got {atom!r}"
                )
            eps_list.extend([e] * n)
        return filter_epsilon(eps_list, epsilon_budget=budget.epsilon, delta=budget.delta)

    # ---- reading -----------------------------------------------------------------------------

    def agents(self, scope: str | None = None) -> list[str]:
        """Every charged agent (sorted), optionally only those charged under ``scope``."""
        return self.ledger.agents(None if scope is None else check_scope(scope))

    def spent(self, agent: str, *, delta: float = 0.0, method: str = "best") -> float:
        """Epsilon ``agent`` has spent at ``delta`` under ``method`` (0.0 if never charged)."""
        return self.spent_detail(agent, delta=delta, method=method).epsilon

    def spent_detail(self, agent: str, *, delta: float = 0.0, method: str = "best") -> SpentDetail:
        """Like ``spent`` with the winning method, every method's value and the remaining budget."""
        delta = check_delta(delta)
        method = check_method(method)
        st = self.ledger.states([agent]).get(agent) or AgentState()  # checks the agent id
        sig = signature(st.history())
        eps, winner, values, skipped = evaluate_full(sig, delta, method)
        scopes = {s for s, _ in st.events} or {"local"}
        scope = next(iter(scopes)) if len(scopes) == 1 else "mixed"
        return SpentDetail(
            agent=agent,
            epsilon=eps,
            delta=delta,
            method=winner,
            by_method=dict(values),
            charges=st.n,
            scope=scope,
            remaining=self._remaining(agent, "central" if scope == "central" else "local", st),
            skipped=dict(skipped),
        )

    def _remaining(self, agent: str, scope: str, st: AgentState | None = None) -> float | None:
        b = self._budget_for(scope)
        if b is None:
            return None
        if st is None:
            st = self.ledger.states([agent]).get(agent) or AgentState()
        sig = signature(st.history(scope))
        try:
            return b.epsilon - self._spend(sig, b) if sig else b.epsilon
        except InvalidParameterError:
            return None  # the budget's method cannot compose this history

    def remaining(self, agent: str, *, scope: str = "local") -> float:
        """Budget epsilon left to ``agent`` (over its ``scope`` charges) under that budget.

        Raises:
            InvalidParameterError: no budget for ``scope``, or its method cannot compose the
                agent's history.
        """
        scope = check_scope(scope)
        if self._budget_for(scope) is None:
            raise InvalidParameterError(
                f"remaining() needs a {scope} budget; this accountant has none"
            )
        out = self._remaining(check_text(agent, "agent id", agent=True), scope)
        if out is None:
            raise InvalidParameterError(
                f"the {scope} budget's method cannot compose the history of agent {agent!r}"
            )
        return float(out)

    def spent_all(
        self, *, delta: float = 0.0, method: str = "best", scope: str | None = None
    ) -> dict[str, float]:
        """``{agent: epsilon}`` for every agent, computed in bulk (:meth:`spent_all_detail`).

        An agent whose history ``method`` cannot compose (e.g. ``basic`` for a Gaussian) gets
        ``inf`` (``spent`` would raise).
        """
        detail = self.spent_all_detail(delta=delta, method=method, scope=scope)
        return {agent: eps for agent, (eps, _) in detail.items()}

    def spent_all_detail(
        self, *, delta: float = 0.0, method: str = "best", scope: str | None = None
    ) -> dict[str, tuple[float, str]]:
        """``{agent: (epsilon, winning method)}`` for every agent, in bulk.

        Agents with identical histories share one computation, and the result is cached on the
        ledger's row count (rows are only appended), so repeated calls are free until a new
        charge lands. A method that cannot compose an agent's history gives ``(inf,
        "unsupported")``: in bulk, one Gaussian agent must not hide every other number.
        """
        delta, method = check_delta(delta), check_method(method)
        key = (len(self.ledger), delta, method, None if scope is None else check_scope(scope))
        out = self._cache.get(key)
        if out is None:
            memo: dict[Any, tuple[float, str]] = {}
            out = {}
            for agent, hist in self.ledger.histories(None, scope).items():
                sig = tuple(hist)  # AgentState.history: sorted, one pair per event (a Signature)
                res = memo.get(sig)
                if res is None:
                    try:
                        res = evaluate_full(sig, delta, method)[:2]
                    except InvalidParameterError:
                        res = (math.inf, "unsupported")
                    memo[sig] = res
                out[agent] = res
            if len(self._cache) > 16:
                self._cache.clear()
            self._cache[key] = out
        return dict(out)

    def summary(self, *, delta: float = 0.0, method: str = "best") -> dict[str, Any]:
        """Local (per-agent LDP) and central (DP-SGD) claims side by side, never summed.

        Returns:
            ``{"local": {...}, "central": {...}, "delta": d, "method": m, "budget": ...}`` where
            each scope holds ``agents`` (count), ``max_epsilon`` (the guarantee every agent of the
            scope has), ``max_agent`` and ``methods`` (winning method -> number of agents). Each
            scope is composed only over that scope's charges.
        """
        out: dict[str, Any] = {"delta": check_delta(delta), "method": check_method(method)}
        for scope in SCOPES:
            detail = self.spent_all_detail(delta=delta, method=method, scope=scope)
            winners: Counter[str] = Counter(w for _, w in detail.values())
            top = max(detail, key=lambda a: detail[a][0], default=None)
            out[scope] = {
                "agents": len(detail),
                "max_epsilon": detail[top][0] if detail else 0.0,
                "max_agent": top,
                "methods": dict(winners),
            }
        for name in ("budget", "central_budget"):
            b = getattr(self, name)
            out[name] = None if b is None else b.to_dict()
        return out

    # ---- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Close the ledger connection."""
        self.ledger.close()

    def __enter__(self) -> Accountant:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Accountant(ledger={self.ledger!r}, budget={self.budget!r}, "
            f"central_budget={self.central_budget!r}, run_id={self.run_id!r})"
        )
