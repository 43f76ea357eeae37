"""The report compares the ledger with the transcript per agent (issue 28): an agent that
released more reports than the ledger charged is named (its spend is not fully accounted); more
charges than releases (a prepaid block, an interrupted release) is the safe side and said so."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from ldp_audit.report._ledger import LedgerStats
from ldp_audit.report._model import _ledger_section


def _stats(counts: dict[str, int] | None) -> LedgerStats:
    agents = ["0/0", "0/1", "0/2"]
    one = np.ones(len(agents))
    return LedgerStats(agents, one, one, ["basic"] * 3, 0.0, None, charge_counts=counts)


RUN = SimpleNamespace(config={"mechanism": {"epsilon": 1.0}})
RELEASES = ["0/0", "0/0", "0/1", "0/2", "0/2"]  # 2, 1 and 2 releases


def test_undercharged_agent_is_named() -> None:
    sec = _ledger_section(RUN, _stats({"0/0": 2, "0/1": 1, "0/2": 1}), 10, RELEASES)
    assert sec["charges_compared"] is True
    assert sec["undercharged_agents"] == 1 and sec["overcharged_agents"] == 0
    assert sec["undercharged_examples"] == ["0/2 (1 charges for 2 releases)"]


def test_equal_and_prepaid_counts_pass() -> None:
    sec = _ledger_section(RUN, _stats({"0/0": 2, "0/1": 1, "0/2": 2}), 10, RELEASES)
    assert sec["undercharged_agents"] == 0 and sec["overcharged_agents"] == 0
    sec = _ledger_section(RUN, _stats({"0/0": 5, "0/1": 1, "0/2": 2}), 10, RELEASES)
    assert sec["undercharged_agents"] == 0 and sec["overcharged_agents"] == 1


def test_not_compared_without_histories_or_releases() -> None:
    sec = _ledger_section(RUN, _stats(None), 10, RELEASES)
    assert sec["charges_compared"] is False and sec["undercharged_agents"] == 0
    sec = _ledger_section(RUN, _stats({"0/0": 0}), 10, None)
    assert sec["charges_compared"] is False
