"""tests/golden_machine.py: integer entries are compared everywhere, float ones on the golden's
CPU family only (a golden float hash is one instruction set's rounding)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.golden_machine import check_golden, digest, machine_signature


def _golden(sig):
    return {"_machine": sig, "bits": digest(np.array([1, 0, 1])), "x": digest(np.ones(3)), "n": 4}


def test_the_same_machine_compares_every_entry():
    want = _golden(machine_signature())
    check_golden({"bits": digest(np.array([1, 0, 1])), "x": digest(np.ones(3)), "n": 4}, want)
    with pytest.raises(AssertionError, match="differs from the golden run"):
        check_golden({"bits": want["bits"], "x": digest(np.ones(3) * 2), "n": 4}, want)
    with pytest.raises(AssertionError, match="machine-independent"):
        check_golden({"bits": want["bits"], "x": want["x"], "n": 5}, want)


def test_another_machine_checks_the_integers_then_skips_the_floats():
    want = _golden({**machine_signature(), "torch_cpu": "some-other-isa"})
    with pytest.raises(AssertionError, match="machine-independent"):
        check_golden({"bits": digest(np.array([1, 1, 1])), "x": want["x"], "n": 4}, want)
    with pytest.raises(pytest.skip.Exception, match="float entries are bit for bit only"):
        check_golden({"bits": want["bits"], "x": digest(np.ones(3) * 2), "n": 4}, want)
    assert digest(np.ones(3)).startswith("<f8:") and digest(np.array([True])).startswith("|b1:")
