"""The questions every ledger answers from its verified per-agent state.

:class:`StateReads` derives them from one method, ``states(agents)`` (verified running state,
the caller's copies): which agents were charged (under which scopes) and each agent's grouped
history. :class:`~ldp_audit.accountant.ledger.Ledger` implements ``states`` over its store; a
test double needs no more.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable

from ldp_audit.accountant.ledger_format import AgentState

__all__ = ["StateReads"]


class StateReads(ABC):
    """Reads derived from ``states()`` (see the module docstring)."""

    @abstractmethod
    def states(self, agents: Iterable[str] | None = None) -> dict[str, AgentState]:
        """Verified running state of ``agents`` (every agent when None); absent: never charged."""

    def agents(self, scope: str | None = None) -> list[str]:
        """Every agent with at least one charge (sorted); only those of ``scope`` if given."""
        states = self.states()
        if scope is None:
            return sorted(states)
        return sorted(a for a, st in states.items() if any(s == scope for s, _ in st.events))

    def has_agent(self, agent: str) -> bool:
        """Whether ``agent`` has at least one charge."""
        return agent in self.states([agent])

    def history(self, agent: str, scope: str | None = None) -> list[tuple[str, int]]:
        """``[(event_json, count), ...]`` of one agent (all its charges, grouped)."""
        st = self.states([agent]).get(agent)
        return [] if st is None else st.history(scope)

    def histories(
        self, agents: Iterable[str] | None = None, scope: str | None = None
    ) -> dict[str, list[tuple[str, int]]]:
        """Grouped histories of many agents at once (all agents when ``agents`` is None)."""
        wanted = None if agents is None else list(dict.fromkeys(agents))
        if wanted is not None and not wanted:
            return {}
        out: dict[str, list[tuple[str, int]]] = {}
        for agent, st in self.states(wanted).items():
            h = st.history(scope)
            if h:
                out[agent] = h
        return out

    def agent_scopes(self, agent: str) -> set[str]:
        """The scopes ``agent`` was charged under (empty if never charged)."""
        st = self.states([agent]).get(agent)
        return set() if st is None else {s for s, _ in st.events}

    def scopes(self) -> dict[str, set[str]]:
        """``{agent: {scopes it was charged under}}``."""
        return {a: {s for s, _ in st.events} for a, st in self.states().items()}
