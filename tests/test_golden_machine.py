"""tests/golden_machine.py: integer entries are compared everywhere, float ones on the golden's
CPU family only (a golden float hash is one instruction set's rounding)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.golden_machine import check_golden, digest, machine_signature, tree_entries


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


def test_tree_entries_tag_floats_and_marked_integers():
    tree = {"a": [1, 2, 3], "b": {"x": 0.5, "n": None}, "c": [{"s": "w"}], "d": np.zeros(2)}
    e = tree_entries(tree, machine_dependent=lambda k: k == "a")
    assert sorted(e) == ["a", "b/n", "b/x", "c[0]/s", "d"]
    assert e["a"].startswith("~<i8:") and e["b/x"].startswith("<f8:") and e["d"].startswith("<f8")
    assert e["b/n"].startswith("|O:") and e["c[0]/s"].startswith("|O:")
    # a marked integer entry is compared on the golden's machine only, like a float
    want = {**e, "_machine": {**machine_signature(), "torch_cpu": "some-other-isa"}}
    other = {**e, "a": tree_entries({"a": [1, 2, 4]}, machine_dependent=lambda k: True)["a"]}
    with pytest.raises(pytest.skip.Exception):
        check_golden(other, want)
    with pytest.raises(AssertionError, match="differs from the golden run"):
        check_golden(other, {**e, "_machine": machine_signature()})
    # an unmarked integer entry is compared everywhere
    with pytest.raises(AssertionError, match="machine-independent"):
        check_golden({**e, "c[0]/s": tree_entries({"s": "v"})["s"]}, want)
