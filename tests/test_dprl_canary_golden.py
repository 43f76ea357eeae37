"""train dprl plants its gradient canaries through ldp_audit.opacus without changing a bit.

The golden hashes (tests/data/dprl_canary_golden.json) were computed by
tests/dprl_canary_golden.py on the trainer's own canary code (commit 76ddc30, before the
integration): a tiny REINFORCE run (q = 1: no join draw), a REINFORCE run with clipping active,
a DQN run on the ghost-clipping path and one on the materialized path (Poisson joins drawn from
the noise generator). Every array of transcript.npz, secrets.npz and model.npz, the returns and
the ledger's row count must be the same, bit for bit (the float arrays on the golden's CPU
family only: tests/golden_machine.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.dprl_canary_golden import CASES, run_case
from tests.golden_machine import check_golden

GOLDEN = json.loads((Path(__file__).parent / "data" / "dprl_canary_golden.json").read_text())


@pytest.mark.parametrize("name", sorted(CASES))
def test_dprl_canary_run_bit_identical_to_golden(name: str) -> None:
    got = run_case(name)
    assert got["updates"] == got["ledger_rows"]  # one charge per released update
    check_golden(got, {**GOLDEN[name], "_machine": GOLDEN["_machine"]})
