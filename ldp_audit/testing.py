"""A conformance checker for epsilon-LDP mechanisms, in the spirit of Gymnasium's ``check_env``.

Run it on your own mechanism -- anything with ``epsilon`` and ``privatize(x, rng)``::

    from ldp_audit.testing import check_mechanism
    report = check_mechanism(my_mechanism, dim=16)   # raises MechanismCheckError on failure
    print(report)

What it checks (each a :class:`CheckResult` in the returned :class:`MechanismCheckReport`):

* ``interface``: ``epsilon`` is a number > 0 (inf allowed), ``privatize`` is callable, ``delta``
  (0 if absent) is in [0, 1).
* ``output``: ``privatize`` of an (n, d) batch returns a 2-D ndarray with n finite rows.
* ``determinism``: the same seed gives the same output; ``randomness``: another seed gives a
  different one (skipped for epsilon = inf).
* ``rejects_nan`` / ``rejects_inf``: a NaN/inf anywhere in the batch raises a ``ValueError``
  (``InvalidParameterError`` is one) *before any randomness is drawn* (the generator's state is
  unchanged), so a non-finite input can never reach an output.
* ``rejects_1d``: a 1-D input raises; ``rejects_non_generator``: an int seed instead of a
  ``numpy.random.Generator`` raises.
* ``exact_loss``: where the mechanism has an exact ``privacy_loss`` (pure epsilon only), the loss
  at sampled and probe outputs never exceeds epsilon (:func:`ldp_audit.audit.exact_epsilon`;
  PRS-like mechanisms with ``privatize_with_matrices`` are checked conditional on M).
* ``empirical_ratio``: the distribution verdict of :func:`ldp_audit.audit.audit` on the pairs
  at confidence ``1 - alpha`` (events chosen on selection samples, ``ln(P(S|x) - delta) -
  ln P(S|x2)`` bounded from below on fresh ones). For an (epsilon, delta)-LDP mechanism the
  bound exceeds epsilon with probability <= ``alpha``, so a failure is strong evidence of a
  violation. A pass proves nothing: it only means these samples and events found no violation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError, LdpAuditError
from ldp_audit.validation import check_bool, check_int, check_probability

__all__ = ["CheckResult", "MechanismCheckReport", "MechanismCheckError", "check_mechanism"]


@dataclass(frozen=True)
class CheckResult:
    """One check: its name, whether it passed (None = skipped), and a human-readable detail."""

    name: str
    passed: bool | None
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "detail": self.detail}


@dataclass(frozen=True)
class MechanismCheckReport:
    """All check results for one mechanism."""

    mechanism: str
    results: tuple[CheckResult, ...]

    @property
    def passed(self) -> bool:
        """True when no check failed (skipped checks do not fail)."""
        return all(r.passed is not False for r in self.results)

    @property
    def failures(self) -> tuple[CheckResult, ...]:
        return tuple(r for r in self.results if r.passed is False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "mechanism": self.mechanism,
            "passed": self.passed,
            "results": [r.to_dict() for r in self.results],
        }

    def __str__(self) -> str:
        lines = [f"check_mechanism({self.mechanism}): {'PASS' if self.passed else 'FAIL'}"]
        for r in self.results:
            mark = {True: "ok  ", False: "FAIL", None: "skip"}[r.passed]
            lines.append(f"  [{mark}] {r.name}: {r.detail}")
        return "\n".join(lines)


class MechanismCheckError(LdpAuditError, AssertionError):
    """Raised by :func:`check_mechanism` when a check fails; ``.report`` holds every result."""

    def __init__(self, report: MechanismCheckReport) -> None:
        self.report = report
        super().__init__(str(report))


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------


def _ratio_check(
    mech: Any,
    pairs: Sequence[tuple[np.ndarray, np.ndarray]],
    n_samples: int,
    alpha: float,
    rng: np.random.Generator,
) -> CheckResult:
    """The distribution verdict of :func:`ldp_audit.audit.audit` at confidence ``1 - alpha``
    on ``pairs`` (events chosen on selection samples, bounded on fresh ones)."""
    from ldp_audit.audit import audit

    eps = float(mech.epsilon)
    try:
        r = audit(
            mech,
            pairs,
            samples=n_samples,
            confidence=1.0 - alpha,
            rng=rng,
            float_bits=False,
            profile=False,
            tradeoff=False,
        )
    except LdpAuditError as exc:
        return CheckResult("empirical_ratio", False, f"the audit refused it: {exc}")
    v, w = r.distribution, r.distribution.witness
    where = "no event" if w is None else f"'{w.event}': {w.k1}/{w.n1} vs {w.k2}/{w.n2}"
    return CheckResult(
        "empirical_ratio",
        not v.violation,
        f"epsilon lower bound {v.epsilon_lower_bound:.4g} {'>' if v.violation else '<='} "
        f"claimed {eps:.4g} at confidence {1 - alpha:.7g} over {len(pairs)} pair(s); worst: "
        + where
        + (" -- the mechanism violates its claim" if v.violation else ""),
    )


def _exact_check(
    mech: Any, pairs: Sequence[tuple[np.ndarray, np.ndarray]], rng: np.random.Generator
) -> CheckResult:
    """:func:`ldp_audit.audit.exact_epsilon` on 500 outputs of each input (and its probes)."""
    from ldp_audit.audit import exact_epsilon

    eps = float(mech.epsilon)
    if not callable(getattr(mech, "privacy_loss", None)):
        return CheckResult("exact_loss", None, "no privacy_loss method")
    if float(getattr(mech, "delta", 0.0) or 0.0) > 0.0:
        return CheckResult("exact_loss", None, "delta > 0: the privacy loss is not bounded")
    try:
        worst = exact_epsilon(mech, pairs, samples=500, rng=rng)
    except (TypeError, NotImplementedError) as exc:
        return CheckResult("exact_loss", None, f"privacy_loss not usable: {exc}")
    passed = worst <= eps * (1 + 1e-9) + 1e-12
    return CheckResult(
        "exact_loss",
        passed,
        f"max |privacy loss| at 500 sampled outputs per input and probe outputs = {worst:.6g} "
        f"{'<=' if passed else '>'} epsilon {eps:.6g}",
    )


def _expect_raise(
    name: str, fn: Callable[[np.random.Generator], Any], seed: int, *, check_state: bool
) -> CheckResult:
    rng = np.random.default_rng(seed)
    before = rng.bit_generator.state
    try:
        fn(rng)
    except (ValueError, TypeError) as exc:
        if check_state and rng.bit_generator.state != before:
            return CheckResult(name, False, "raised, but only after drawing randomness")
        return CheckResult(name, True, f"raised {type(exc).__name__}: {exc}")
    except Exception as exc:  # noqa: BLE001 - a user mechanism may raise anything
        return CheckResult(
            name, False, f"raised {type(exc).__name__} (expected ValueError/TypeError): {exc}"
        )
    return CheckResult(name, False, "accepted the input and returned an output")


# ----------------------------------------------------------------------------------------------
# public entry point
# ----------------------------------------------------------------------------------------------


def check_mechanism(
    mechanism: Any,
    dim: int | None = None,
    *,
    pairs: Sequence[tuple[Any, Any]] | None = None,
    n_samples: int = 20_000,
    alpha: float = 1e-6,
    seed: int = 0,
    raise_on_failure: bool = True,
) -> MechanismCheckReport:
    """Check that ``mechanism`` keeps the mechanism contract and does not visibly violate its
    epsilon claim (see the module docstring for the list of checks).

    Args:
        mechanism: anything with ``epsilon`` and ``privatize(x, rng)``; ``delta``,
            ``privacy_loss``, ``candidate_pairs`` and ``privatize_with_matrices`` are used when
            present.
        dim: input dimension d; default 1 for mechanisms with a category count ``k``, else 8.
        pairs: input pairs (x, x2) of shape (d,) to test; default ``mechanism.candidate_pairs(d)``
            when available, else unit vectors, sign vectors and a huge input.
        n_samples: outputs drawn per input of each pair for the ratio check (>= 1000).
        alpha: probability that the ratio check fails a correct mechanism, in (0, 1).
        seed: seed of every generator the checker creates.
        raise_on_failure: raise :class:`MechanismCheckError` when a check fails.

    Returns:
        The :class:`MechanismCheckReport`.

    Raises:
        MechanismCheckError: a check failed (only when ``raise_on_failure``).
        InvalidParameterError: bad arguments to the checker itself.
    """
    a = check_probability(alpha, "alpha")
    raise_on_failure = check_bool(raise_on_failure, "raise_on_failure")
    n_samples = check_int(n_samples, "n_samples", minimum=1000)
    seed = check_int(seed, "seed", minimum=0)
    if dim is None:
        dim = 1 if hasattr(mechanism, "k") else 8
    dim = check_int(dim, "dim", minimum=1)
    label = repr(mechanism)
    results: list[CheckResult] = []

    def finish() -> MechanismCheckReport:
        report = MechanismCheckReport(label, tuple(results))
        if raise_on_failure and not report.passed:
            raise MechanismCheckError(report)
        return report

    # -- interface
    eps = getattr(mechanism, "epsilon", None)
    problems = []
    if not isinstance(eps, (int, float, np.floating)) or isinstance(eps, bool):
        problems.append(f"epsilon must be a number, got {eps!r}")
    elif math.isnan(eps) or eps <= 0:
        problems.append(f"epsilon must be > 0, got {eps!r}")
    if not callable(getattr(mechanism, "privatize", None)):
        problems.append("privatize(x, rng) is missing")
    delta = getattr(mechanism, "delta", 0.0)
    if not isinstance(delta, (int, float, np.floating)) or not 0.0 <= float(delta) < 1.0:
        problems.append(f"delta must be in [0, 1), got {delta!r}")
    results.append(CheckResult("interface", not problems, "; ".join(problems) or "ok"))
    if problems:
        return finish()
    private = math.isfinite(float(eps))

    # -- input pairs
    if pairs is None:
        cand = getattr(mechanism, "candidate_pairs", None)
        e0, ones = np.eye(dim)[0], np.ones(dim)  # unit, sign and huge inputs by default
        default = [(e0, -e0), (ones, -ones), (1e6 * e0, -1e6 * e0), (np.zeros(dim), e0)]
        pairs = cand(dim) if callable(cand) else default
    pairs = [(np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)) for p, q in pairs]
    if not pairs or any(p.shape != (dim,) or q.shape != (dim,) for p, q in pairs):
        raise InvalidParameterError(f"pairs must be a non-empty list of (x, x2) of shape ({dim},)")
    usable = []
    for p, q in pairs:
        try:
            mechanism.privatize(np.vstack([p, q]), np.random.default_rng(seed))
            usable.append((p, q))
        except (ValueError, TypeError):
            continue
    if not usable:
        results.append(CheckResult("output", False, "privatize rejected every input pair"))
        return finish()
    pairs = usable
    x = np.vstack([np.vstack([p, q]) for p, q in pairs])
    x = np.vstack([x] * max(1, 16 // x.shape[0]))

    # -- output shape, determinism, randomness
    y = mechanism.privatize(x, np.random.default_rng(seed))
    ok = isinstance(y, np.ndarray) and y.ndim == 2 and y.shape[0] == x.shape[0]
    if ok and np.issubdtype(y.dtype, np.number):
        ok = bool(np.isfinite(y).all())
    expect = " (expected a finite 2-D ndarray with one row per input row)"
    shape = f"{type(y).__name__} of shape {getattr(y, 'shape', None)} for input {x.shape}"
    results.append(CheckResult("output", ok, shape + ("" if ok else expect)))
    y_same = mechanism.privatize(x, np.random.default_rng(seed))
    same = np.array_equal(np.asarray(y), np.asarray(y_same))
    how = "same output" if same else "different output"
    results.append(CheckResult("determinism", same, f"same seed, {how}"))
    if private:
        y_other = mechanism.privatize(x, np.random.default_rng(seed + 1))
        differ = not np.array_equal(np.asarray(y), np.asarray(y_other))
        how = "another output" if differ else "the same output (randomness not from rng?)"
        results.append(CheckResult("randomness", differ, f"another seed gives {how}"))
    else:
        results.append(CheckResult("randomness", None, "epsilon = inf: non-private baseline"))

    # -- bad input: (name, the call, whether it must raise before drawing randomness)
    bad_calls = []
    for name, bad in (("rejects_nan", np.nan), ("rejects_inf", np.inf)):
        xb = x.copy()
        xb[x.shape[0] // 2, dim - 1] = bad
        bad_calls.append((name, lambda r, xb=xb: mechanism.privatize(xb, r), True))
    bad_calls.append(("rejects_1d", lambda r: mechanism.privatize(x[0], r), False))
    bad_calls.append(("rejects_non_generator", lambda r: mechanism.privatize(x, seed), False))
    for name, call, before in bad_calls:
        results.append(_expect_raise(name, call, seed, check_state=before))

    # -- privacy
    if private:
        streams = np.random.default_rng(seed).spawn(2)
        results.append(_exact_check(mechanism, pairs, streams[0]))
        results.append(_ratio_check(mechanism, pairs, n_samples, a, streams[1]))
    else:
        results.append(CheckResult("exact_loss", None, "epsilon = inf"))
        results.append(CheckResult("empirical_ratio", None, "epsilon = inf"))
    return finish()
