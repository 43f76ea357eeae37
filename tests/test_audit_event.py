"""The pre-registered event: ``audit(..., event=(x, x2, S))`` and ``ldp-audit audit --event``.

No search: every sample counts the one stated event and the whole ``1 - confidence`` is spent on
it, which is sound for any event fixed before the data (its indicator rows are independent
Bernoulli draws given the input).

False-failure probabilities: the validity test asserts that the one-sided 1e-3 Clopper-Pearson
lower bound on the flag rate over 120 fixed seeds is at most the stated level ``1 - confidence``:
for a sound audit (rate <= the level) it fails with probability <= 1e-3. The broken mechanism
(true epsilon 2, claiming 1, its optimal event) has an expected bound of about 1.95 at 50,000
samples per input; the chance its bound is below 1 is far below 1e-9.
"""

from __future__ import annotations

import json
import sys
import textwrap

import numpy as np
import pytest

from ldp_audit import mechanisms as m
from ldp_audit.audit import audit, max_refutable_epsilon, one_count_epsilon, tightness_ceiling
from ldp_audit.cli import main
from ldp_audit.errors import InvalidParameterError
from ldp_audit.stats import clopper_pearson_lower, clopper_pearson_upper, poisson_log_ratio_lower


class Overspending:
    """k-RR at epsilon 2 claiming 1 (k = 4)."""

    epsilon = 1.0

    def __init__(self) -> None:
        self.inner = m.RandomizedResponse(epsilon=2.0, k=4)

    def privatize(self, x, rng):
        return self.inner.privatize(x, rng)


def _hit0(y, x, x2):
    return np.asarray(y)[:, 0] == 0


def test_correct_mechanism_at_its_claim_is_flagged_within_the_stated_level():
    """k-RR (eps 1, k 4) with its ratio-exactly-e^eps event {y = 0}: on the boundary, the
    worst case for validity. Both forms of S and both ratio tests, 120 seeds."""
    mech, level, n = m.RandomizedResponse(epsilon=1.0, k=4), 0.2, 120
    forms = [([0.0], "clopper-pearson"), (_hit0, "clopper-pearson"), ([0.0], "poisson")]
    flagged = 0
    for seed in range(n):
        s, test = forms[seed % 3]
        r = audit(mech, samples=20_000, confidence=1 - level, rng=seed, event=([0], [1], s),
                  ratio_test=test)  # fmt: skip
        flagged += r.violation
    assert float(clopper_pearson_lower(flagged, n, 1e-3)) <= level, flagged


@pytest.mark.parametrize("s", [[0.0], [[0.0]], _hit0], ids=["numbers", "rows", "callable"])
def test_broken_mechanism_is_flagged_and_every_sample_counts_the_event(s):
    r = audit(Overspending(), samples=50_000, confidence=0.95, rng=1, event=([0], [1], s))
    assert r.violation and 1.0 < r.epsilon_lower_bound <= 2.0
    w = r.witness
    assert (w.n1, w.n2, r.selection_samples, r.events_estimated) == (50_000, 50_000, 0, 1)
    assert w.family == "event" and "pre-registered event" in w.event and w.x == (0.0,)
    assert r.implementation is None and r.profile is None and r.tradeoff is None
    # the whole alpha on the one event, half on each Clopper-Pearson bound
    lo = float(clopper_pearson_lower(w.k1, w.n1, 0.025))
    hi = float(clopper_pearson_upper(w.k2, w.n2, 0.025))
    assert r.epsilon_lower_bound == pytest.approx(np.log(lo / hi), rel=1e-12)


def test_a_weak_event_gives_a_weak_but_valid_bound():
    """{y in {0, 1}} for the pair (0, 1) has ratio 1: the bound is about 0, never above it."""
    r = audit(Overspending(), samples=50_000, rng=2, event=([0], [1], [0, 1]))
    assert r.epsilon_lower_bound < 0.05 and not r.violation


def test_an_event_stated_the_wrong_way_round_says_why_its_bound_is_0():
    """{y = 1} for the pair (0, 1) of a broken k-RR is likelier under x2 (ratio e^-2): the
    one-sided bound is exactly 0 (counts about 5,960 and 44,000 of 50,000: a bound above 0
    would need the first count above the second, probability far below 1e-9). It said a
    plain "no violation" with no word on why; now a warning names the counts and the way out.
    The right way round, the same event refutes the claim (as in the test above)."""
    r = audit(Overspending(), samples=50_000, rng=3, event=([0], [1], [1]))
    assert r.epsilon_lower_bound == 0.0 and not r.violation
    (w,) = [w for w in r.warnings if "pre-registered event's lower bound is exactly 0" in w]
    assert f"{r.witness.k1} of 50000 times under x = [0.0]" in w and "x2 swapped" in w
    assert r.witness.k1 < r.witness.k2
    ok = audit(Overspending(), samples=50_000, rng=3, event=([1], [0], [1]))
    assert ok.violation and not any("exactly 0" in w for w in ok.warnings)


class LargeDelta(Overspending):
    """The same k-RR claiming (1, 0.7): no event's bound ln((p1 - 0.7) / p2) exceeds 0 here."""

    delta = 0.7


def test_a_zero_bound_at_a_large_claimed_delta_is_not_blamed_on_a_pre_registered_event():
    """Session 58 probe: a searched audit (no event=) of a delta > 0 claim whose bound is 0
    while the profile separates the pair warned "the pre-registered event's lower bound is
    exactly 0 ... not clearly more often under x" (the piecewise mechanism claiming (1, 0.5):
    13,887 against 6,701 of 18,000). A pre-registered event of such a claim names the delta."""
    pair = [(np.array([0.0]), np.array([1.0]))]
    r = audit(LargeDelta(), pair, samples=2_000, rng=0, float_bits=False, tradeoff=False)
    assert r.epsilon_lower_bound == 0.0 and max(r.profile.epsilon_lower) > 0.5
    assert not any("pre-registered" in w for w in r.warnings)
    r = audit(LargeDelta(), samples=2_000, rng=0, event=([0], [1], [0]))
    (w,) = [w for w in r.warnings if "pre-registered event's lower bound is exactly 0" in w]
    assert r.witness.k1 > 2 * r.witness.k2 and "by more than the claimed delta 0.7" in w
    assert "(P[M(x) in S] - delta) / P[M(x2) in S]" in w


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"event": (0, 1)}, "event must be (x, x2, S)"),
        ({"event": ([0], [0], [0])}, "event: x == x2"),
        ({"event": ([0], [0, 1], [0])}, "event x and x2 must have the same length"),
        ({"event": (["a"], [1], [0])}, "event x must be a 1-D array of real numbers"),
        ({"event": ([0], [1], [])}, "event: S must be a callable"),
        ({"event": ([0], [1], [np.nan])}, "event: S must be a callable"),
        ({"event": ([0], [1], "y")}, "event: S must be a callable"),
        ({"event": ([0], [1], [0]), "pairs": [([0], [1])]}, "event: pairs= cannot be used"),
        ({"event": ([0], [1], [0]), "statistics": [_hit0]}, "event: statistics= cannot"),
        ({"event": ([0], [1], [0]), "sequential": True}, "event: sequential= cannot"),
        ({"event": ([0], [1], [0]), "pool": True}, "event: pool= cannot"),
    ],
)  # fmt: skip
def test_bad_events_are_refused_before_any_randomness(kw, message):
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    with pytest.raises(InvalidParameterError) as err:
        audit(m.RandomizedResponse(epsilon=1.0, k=4), samples=10_000, rng=rng, **kw)
    assert message in str(err.value)
    assert rng.bit_generator.state == state


@pytest.mark.parametrize(
    ("s", "message"),
    [
        ([[0.0, 1.0]], "the output set's rows have 2 value(s), the mechanism's outputs 1"),
        (lambda y, x, x2: np.full(len(y), 2.0), "event: event(y, x, x2) must return n booleans"),
        # session 54: an event's own faults were worded as a "statistic" the user never passed
        (lambda y, x, x2: 1 / 0, "event: event(y, x, x2) raised ZeroDivisionError on 8 outputs"),
        (lambda y, x, x2: np.full(len(y), np.nan), "event: event(y, x, x2) returned 8 non-finite"),
        (lambda y, x, x2: np.ones(3, bool), "event: event(y, x, x2) must return one score per"),
    ],
)
def test_events_that_do_not_fit_the_outputs_are_refused_on_the_first_8(s, message):
    with pytest.raises(InvalidParameterError) as err:
        audit(m.RandomizedResponse(epsilon=1.0, k=4), samples=10_000, rng=0, event=([0], [1], s))
    assert message in str(err.value)


EVENT_MODULE = textwrap.dedent(
    """
    import numpy as np

    from ldp_audit.mechanisms import RandomizedResponse


    class Overspending:
        epsilon = 1.0

        def __init__(self):
            self.inner = RandomizedResponse(epsilon=2.0, k=4)

        def privatize(self, x, rng):
            return self.inner.privatize(x, rng)

        def candidate_pairs(self, dim):
            return [(np.array([0.0]), np.array([1.0]))]


    def hit0(outputs, x, x_prime):
        return outputs[:, 0] == 0


    def boom(outputs, x, x_prime):
        raise ValueError("no")


    NOT_CALLABLE = 3
    """
)


@pytest.fixture()
def event_dir(tmp_path, monkeypatch):
    (tmp_path / "event_cli_mod.py").write_text(EVENT_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "event_cli_mod", raising=False)
    return tmp_path


BASE = ["audit", "--mechanism", "event_cli_mod:Overspending", "--samples", "50000"]


@pytest.mark.parametrize("s", ["0", " 0 | 3 ", "event_cli_mod:hit0"])
def test_cli_event_refutes_the_broken_mechanism_as_the_api_does(s, event_dir, capsys):
    code = main([*BASE, "--json", "--event", f"0;1;{s}"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and out["violation"] is True and out["witness"]["family"] == "event"
    s_api = {"0": [0], " 0 | 3 ": [0, 3]}.get(s, _hit0)
    mech = __import__("event_cli_mod").Overspending()  # importable once the CLI loaded it
    r = audit(mech, samples=50_000, rng=0, event=([0], [1], s_api))
    assert out["epsilon_lower_bound"] == r.epsilon_lower_bound


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("0;1", "argument --event: --event must be X;X2;S"),
        ("0;x;0", "argument --event: --event must be a finite number, got 'x'"),
        ("0;1;nan", "argument --event: --event must be a finite number, got 'nan'"),
        ("0;1;event_cli_mod:NOT_CALLABLE", "--event 'event_cli_mod:NOT_CALLABLE' must name a "
         "function event(outputs, x, x_prime), got int"),
        ("0;1;no_such_event_mod:f", "--event 'no_such_event_mod:f': importing "
         "'no_such_event_mod' failed"),
        ("0;1;event_cli_mod:missing", "--event 'event_cli_mod:missing': 'event_cli_mod' has no "
         "attribute 'missing'"),
        ("0;0;0", "event: x == x2"),
        ("0;1;0,1", "event: the output set's rows have 2 value(s)"),
        ("0;1;event_cli_mod:boom", "event: boom(y, x, x2) raised ValueError on 8 outputs: no"),
    ],
)  # fmt: skip
def test_cli_bad_events_exit_2_naming_the_option(spec, message, event_dir, capsys):
    try:  # argparse's own errors (the syntax) leave through SystemExit(2), as in the shell
        code = main([*BASE, "--event", spec])
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err and "Traceback" not in err


def test_cli_event_with_search_options_exits_2(event_dir, capsys):
    assert main([*BASE, "--event", "0;1;0", "--pool"]) == 2
    assert "event: pool= cannot be used" in capsys.readouterr().err
    assert main(["audit", "--run-dir", str(event_dir), "--event", "0;1;0"]) == 2
    assert "--event cannot be used with --run-dir" in capsys.readouterr().err


def test_resolution_figures_are_the_events_own():
    """All samples on one event, half of 1 - confidence on each Clopper-Pearson bound: the event
    cannot refute a claim at or above its own ceilings (about 0.17 below the search's at
    confidence 0.95), so k-RR exactly at epsilon 6 with the claim inside that margin is
    inconclusive, while epsilon 2 stays a plain verdict. Deterministic given the figures (the
    verdicts below are not violations: a bound above 6 needs a zero count, fixed seed)."""
    n, kw = 2000, {"samples": 2000, "rng": 0, "event": ([0], [1], [0])}
    r = audit(m.RandomizedResponse(epsilon=6.0, k=2), **kw)
    cp_zero, cp_one = clopper_pearson_upper(np.array([0.0, 1.0]), n, 0.025)  # the event's test
    assert r.max_refutable_epsilon == pytest.approx(-np.log(cp_zero), rel=1e-9)
    assert r.inconclusive_epsilon == pytest.approx(-np.log(cp_one), rel=1e-9)
    assert r.inconclusive_epsilon == one_count_epsilon(n, event_test="clopper-pearson")
    assert r.inconclusive_epsilon <= 6.0 < one_count_epsilon(n)  # inside the old margin
    assert max_refutable_epsilon(n) - r.max_refutable_epsilon == pytest.approx(0.173, abs=1e-3)
    assert r.tightness_ceiling == tightness_ceiling(6.0, 0.0, n, 0.05, event=True)
    assert r.tightness_ceiling < tightness_ceiling(6.0, 0.0, n, 0.05)  # no 0.9 split to choose
    assert not r.violation and r.inconclusive
    assert r.distribution.consequence.startswith("INCONCLUSIVE")
    assert [w for w in r.warnings if w.startswith("inconclusive: ")]
    # the joint Poisson test spends all of 1 - confidence: its bounds at counts (n, 0), (n, 1)
    p = audit(m.RandomizedResponse(epsilon=6.0, k=2), **kw, ratio_test="poisson")
    assert p.max_refutable_epsilon == poisson_log_ratio_lower(n, 0, 0.05)
    assert p.inconclusive_epsilon == poisson_log_ratio_lower(n, 1, 0.05)
    assert p.inconclusive_epsilon > 6.0 and not p.inconclusive  # the joint test resolves 6
    low = audit(m.RandomizedResponse(epsilon=2.0, k=2), **kw)
    assert not low.violation and not low.inconclusive and not low.warnings
    assert low.distribution.consequence.startswith("No violation found")


RR6 = ["audit", "--mechanism", "rr", "--categories", "2", "--samples", "2000", "--seed", "0"]


def test_cli_event_uses_the_events_ceilings(capsys):
    """Exit 0 with the INCONCLUSIVE text inside the old margin (as the search's inconclusive
    verdicts); the refusal of a too-large claim at the event's own ceiling: 6.33 is above the
    Clopper-Pearson event's 6.297 (refused, exit 2) and below the joint Poisson test's 6.503
    (run: inconclusive, exit 0); the old figure (the search's, 1800 estimation samples) was
    6.364 for both."""
    assert main([*RR6, "--epsilon", "6", "--event", "0;1;0", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["inconclusive"] is True and out["violation"] is False
    assert main([*RR6, "--epsilon", "2", "--event", "0;1;0", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["inconclusive"] is False and out["warnings"] == []
    assert main([*RR6, "--epsilon", "6.33", "--event", "0;1;0"]) == 2
    err = capsys.readouterr().err
    assert "--samples 2000 (2000 estimation samples per input)" in err
    assert "no bound can exceed 6.3," in err and "Traceback" not in err
    assert main([*RR6, "--epsilon", "6.33", "--event", "0;1;0", "--ratio-test", "poisson"]) == 0
    assert "INCONCLUSIVE" in capsys.readouterr().out
