"""The accountant: events, the durable SQLite ledger, composition and budgets.

A thin façade (Opacus style): the maths lives side-effect free in ``composition``, ``rdp``,
``prv`` and ``pld``; ``ledger`` records charges (its rules written once over a store:
``ledger_store`` is the interface, ``ledger_sqlite`` the file, ``ledger_tally`` counts in
memory); ``accountant`` ties them together; ``planning`` answers "how many rounds fit".
Importing this package needs only numpy and scipy: Opacus (torch) and dp_accounting load
lazily when an ``rdp``/``prv``/``pld`` number is first asked for.

Example:
    >>> from ldp_audit.accountant import Accountant, Budget, LaplaceEvent
    >>> acc = Accountant(budget=Budget(epsilon=1.0))
    >>> acc.charge_many([("0/1", LaplaceEvent(0.5)), ("0/2", LaplaceEvent(1.0))])
    2
    >>> acc.spent("0/2", method="basic")
    1.0
"""

from __future__ import annotations

from ldp_audit.accountant.accountant import Accountant, Budget, SpentDetail
from ldp_audit.accountant.events import (
    ComposedEvent,
    DpEvent,
    GaussianEvent,
    LaplaceEvent,
    NonPrivateEvent,
    PoissonSampledEvent,
    PureDpEvent,
    SelfComposedEvent,
    event_for,
)
from ldp_audit.accountant.ledger import Ledger, TallyLedger
from ldp_audit.accountant.ledger_sqlite import SqliteStore
from ldp_audit.accountant.ledger_store import CountStore, RowStore
from ldp_audit.accountant.ledger_tally import TallyStore
from ldp_audit.accountant.methods import compose
from ldp_audit.accountant.planning import epsilon_per_round, rounds_for_budget

__all__ = [
    "Accountant",
    "Budget",
    "SpentDetail",
    "compose",
    "DpEvent",
    "PureDpEvent",
    "LaplaceEvent",
    "GaussianEvent",
    "NonPrivateEvent",
    "PoissonSampledEvent",
    "SelfComposedEvent",
    "ComposedEvent",
    "event_for",
    "Ledger",
    "TallyLedger",
    "RowStore",
    "CountStore",
    "SqliteStore",
    "TallyStore",
    "rounds_for_budget",
    "epsilon_per_round",
]
