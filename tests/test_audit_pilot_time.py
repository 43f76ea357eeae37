"""The early time pilot (ldp_audit.audit.search._pilot_time): a slow mechanism is refused from
its first small calls, before the fit half is drawn; a fast vectorised one whose calls are all
overhead is not refused, and the pilot leaves the audit's draws unchanged. The time limit is
lowered to 20 s so each test runs in seconds."""

from __future__ import annotations

import time

import numpy as np
import pytest

from ldp_audit.audit import audit, from_scalar, search
from ldp_audit.errors import InvalidParameterError, UserCodeError

PAIR = [(np.array([0.0]), np.array([1.0]))]


class _Stop(Exception):
    pass


def _slow_scalar(rows: list[int], stop_after: int | None = None):
    """A scalar Laplace through from_scalar that sleeps 2 ms a call (a call is a row)."""

    def factory(rng):
        def f(v):
            rows[0] += 1
            if stop_after is not None and rows[0] > stop_after:
                raise _Stop("stop")
            time.sleep(0.002)
            return v + rng.laplace()

        return f

    return from_scalar(factory, epsilon=1.0, domain=(0.0, 1.0), seeding="generator")


def test_slow_scalar_refused_from_its_first_calls_unless_forced(monkeypatch):
    monkeypatch.setattr(search, "_MAX_SECONDS", 20.0)
    rows = [0]
    # about 80,000 outputs at >= 2 ms each: >= 160 s, over twice the 20 s limit (a sleep is never
    # shorter than asked, so the per-row cost measured is >= 2 ms: no false failure)
    with pytest.raises(InvalidParameterError, match=r"samples=20000 would take .*force=True"):
        audit(_slow_scalar(rows), samples=20_000, rng=0)
    # the three 8-row checks and one pilot of at most 1,000 rows: the fit half (thousands of
    # rows per input) was never drawn
    assert rows[0] <= 3 * 8 + 1000
    # force=True: no pilot, no refusal; the audit goes on into the fit half (stopped there)
    rows = [0]
    with pytest.raises(UserCodeError, match="stop"):
        audit(_slow_scalar(rows, stop_after=1100), samples=20_000, rng=0, force=True)
    assert rows[0] == 1101


class _Overhead:
    """Vectorised Laplace with a 50 ms fixed cost per call and fast rows: its 8-row calls alone
    look like 6 ms a row, but the pilot shows the cost is per call."""

    epsilon = 1.0
    delta = 0.0

    def __init__(self) -> None:
        self.calls: list[int] = []

    def privatize(self, x, rng):
        self.calls.append(x.shape[0])
        time.sleep(0.05)
        return x + rng.laplace(size=x.shape)


def test_fast_vectorised_mechanism_with_call_overhead_not_refused_and_draws_unchanged(
    monkeypatch,
):
    monkeypatch.setattr(search, "_MAX_SECONDS", 20.0)
    m, forced = _Overhead(), _Overhead()
    r = audit(m, PAIR, samples=4_000, rng=0)
    r_forced = audit(forced, PAIR, samples=4_000, rng=0, force=True)
    # the pilot ran (one more call than the forced audit, which has no time checks) ...
    assert len(m.calls) == len(forced.calls) + 1
    # ... and did not change the audit's draws: the same result, bit for bit
    d, d_forced = r.to_dict(), r_forced.to_dict()
    assert d.pop("seconds") > 0 and d_forced.pop("seconds") > 0
    assert d == d_forced


@pytest.mark.parametrize("pilot", [True, False])
def test_a_slow_user_statistic_counts_in_the_projection(pilot, monkeypatch):
    """Session 54: the pilot timed privatize only, so a fast mechanism with a user statistic
    costing 2 ms a row (about 80,000 rows scored at samples=20,000: >= 160 s, over twice the
    20 s limit) ran with no projection or refusal. Now the statistics' time on the 8-row
    check and on the pilot's rows counts: refused after at most 8 + 1,000 rows scored (a sleep
    is never shorter than asked: no false failure). Without the pilot (``pilot=False``) the
    fit half's projection, which timed the draws only, counts them too (8 rows scored)."""
    monkeypatch.setattr(search, "_MAX_SECONDS", 20.0)
    monkeypatch.setattr(search, "_PILOT_SECONDS", 0.2)  # a pilot of about 100 rows
    if not pilot:
        monkeypatch.setattr(search, "_pilot_time", lambda *a, **k: None)
    scored = [0]

    def slow(y, x, x2):
        scored[0] += len(y)
        if scored[0] > 8 + 1000:
            raise _Stop("the audit went on past the pilot")
        time.sleep(0.002 * len(y))
        return y[:, 0].astype(float)

    class Fast:
        epsilon = 1.0

        def privatize(self, x, rng):
            return x + rng.laplace(size=x.shape)

    with pytest.raises(InvalidParameterError, match=r"samples=20000 would take .*force=True"):
        audit(Fast(), PAIR, samples=20_000, rng=0, statistics=[slow])


def test_a_slow_mechanism_with_a_pre_registered_event_is_refused_early(monkeypatch):
    """Session 54: ``event=`` (``--event``) skipped every time check, so a slow mechanism (or a
    slow event function) ran for hours with no projection: ``ldp-audit audit --mechanism
    mymod:SlowRR --event '1;0;1'`` at 10 ms a row was still running after 60 s. Now the early
    pilot runs there too: 2 ms a row at samples=20,000 (40,000 rows: >= 80 s, over twice the
    20 s limit) is refused after the 8-row checks and one pilot (no false failure: a sleep is
    never shorter than asked)."""
    monkeypatch.setattr(search, "_MAX_SECONDS", 20.0)
    monkeypatch.setattr(search, "_PILOT_SECONDS", 0.2)  # a pilot of about 100 rows
    rows = [0]
    with pytest.raises(InvalidParameterError, match=r"samples=20000 would take .*force=True"):
        audit(_slow_scalar(rows, stop_after=3 * 8 + 1000), samples=20_000, rng=0,
              event=([0.0], [1.0], lambda y, x, x2: y[:, 0] > 0.5))  # fmt: skip
    assert rows[0] <= 3 * 8 + 1000
