"""Longitudinal (memoised) protocols: many reports of one unchanged value by one client, as one
mechanism whose output is all of them and whose ``epsilon`` is their exact cumulative loss.

* :class:`MemoisedRappor` -- basic RAPPOR (Erlingsson, Pihur & Korolova, CCS 2014) as deployed:
  the permanent randomised response B' (PRR, ``f``) is drawn once and memoised; each of the
  ``reports`` reports is a fresh instantaneous response (IRR, ``p``, ``q``) of the same B'.
  Output: (n, reports * k) int8, report t in columns [t k, (t + 1) k).
* :class:`DBitFlipPM` -- dBitFlipPM (Ding, Kulkarni & Yekhanin, NeurIPS 2017): the domain is
  cut into ``buckets`` equal buckets; a client samples ``d`` distinct buckets once and reports
  for each one bit, 1 with probability e^{eps/2} / (e^{eps/2} + 1) if its value lies in that
  bucket, else 1 / (e^{eps/2} + 1); the bits are memoised per value, so every report of an
  unchanged value repeats the first. Output: (n, d + reports * d) int64: the d sampled bucket
  indices, then the bits of each report.

Exact cumulative losses (the claims):

* MemoisedRappor: per bit i, with c_i the number of ones among the T reports' bit i and
  h = f/2, the likelihood is ``P(B'_i = 1 | a) q^c (1-q)^(T-c) + P(B'_i = 0 | a) p^c (1-p)^(T-c)``
  (a the one-hot bit), so the loss between items v and v' is ``g(c_v) - g(c_v')`` with
  ``g(c) = ln((1-h) A + h B) - ln(h A + (1-h) B)``, A = q^c (1-q)^(T-c), B = p^c (1-p)^(T-c).
  g increases in c, so ``epsilon = g(T) - g(0)``: at T = 1 the one-report eps_1 of
  :class:`~ldp_audit.mechanisms.BasicRappor`, never above ``T eps_1`` (sequential composition)
  nor above ``permanent_epsilon`` = 2 ln((1-h)/h) (every report is post-processing of B': the
  memoisation cap), and tending to that cap as T grows.
* DBitFlipPM: ``(eps/2) sum_s (2 b_s - 1)([bucket(v) = j_s] - [bucket(v') = j_s])`` for any
  number of (identical) reports: at most eps, reached when both buckets are sampled (d >= 2);
  with d = 1 the exact bound is eps/2 (``exact_epsilon``); the claim ``epsilon`` is Ding et al.'s.

A client that re-draws its permanent response at every report is not memoising: its reports are
T independent one-report mechanisms, costing ``T eps_1`` (RAPPOR) or ``T eps`` (dBitFlipPM, up
to its cap), more than the claims above; the audit gallery shows one refuted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from scipy import special

from ldp_audit.errors import InvalidParameterError
from ldp_audit.mechanisms._base import Mechanism
from ldp_audit.mechanisms.frequency import (
    FrequencyOracle,
    check_bits,
    check_items,
    check_report_int,
    pair_items,
)
from ldp_audit.mechanisms.rappor import BasicRappor
from ldp_audit.mechanisms.unary import MAX_UNARY_K
from ldp_audit.validation import check_epsilon, check_int, check_rng

__all__ = ["MemoisedRappor", "DBitFlipPM", "CountDifference"]

#: the largest domain of DBitFlipPM (v * b stays exact in int64 for b <= 2^20).
MAX_DBITFLIP_K = 1 << 31

#: the most reports one longitudinal output may hold.
MAX_REPORTS = 1 << 16


def _log_mix(w1: float, a: np.ndarray, w0: float, b: np.ndarray) -> np.ndarray:
    """ln(w1 e^a + w0 e^b) elementwise."""
    return np.logaddexp(math.log(w1) + a, math.log(w0) + b)


@dataclass(frozen=True)
class CountDifference:
    """Audit statistic of a longitudinal output: (number of reports supporting x) - (number
    supporting x'), summed over the reports (picklable; holds the frozen mechanism)."""

    mechanism: Any
    name: str = "reports supporting x minus reports supporting x'"

    def __call__(self, outputs: Any, x: Any, x_prime: Any) -> np.ndarray:
        def item(v: Any, name: str) -> int:
            a = np.asarray(v, dtype=np.float64).reshape(-1)
            if a.size != 1:
                raise InvalidParameterError(f"{name} must be one item, got {a.tolist()!r}")
            return int(check_items(a.reshape(1, 1), self.mechanism.k, name)[0, 0])

        m = self.mechanism
        return m.support_counts(outputs, item(x, "x")) - m.support_counts(
            outputs, item(x_prime, "x_prime")
        )


@dataclass(frozen=True)
class MemoisedRappor(Mechanism):
    """Basic RAPPOR with a memoised permanent response: ``reports`` instantaneous responses of
    one PRR per row; ``epsilon`` is their exact cumulative loss (module docstring).

    Args:
        k: the domain size (integer >= 2, ``reports * k <= 2^20``).
        f, p, q: as for :class:`~ldp_audit.mechanisms.BasicRappor` (Chrome: 0.5, 0.5, 0.75).
        reports: T, the number of reports of the unchanged value (integer in [1, 2^16]).
    """

    k: int
    f: float = 0.5
    p: float = 0.5
    q: float = 0.75
    reports: int = 1
    name: ClassVar[str] = "memoised_rappor"

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "reports", check_int(self.reports, "reports", minimum=1, maximum=MAX_REPORTS)
        )
        one = self.one_report  # validates k, f, p, q
        object.__setattr__(self, "k", one.k)
        object.__setattr__(self, "f", one.f)
        object.__setattr__(self, "p", one.p)
        object.__setattr__(self, "q", one.q)
        if self.reports * self.k > MAX_UNARY_K:
            raise InvalidParameterError(
                f"reports * k must be <= {MAX_UNARY_K}, got reports = {self.reports!r}, "
                f"k = {self.k!r}"
            )

    @property
    def one_report(self) -> BasicRappor:
        """The one-report mechanism (a fresh PRR and one IRR): eps_1 is its epsilon."""
        return BasicRappor(k=self.k, f=self.f, p=self.p, q=self.q)

    @property
    def permanent_epsilon(self) -> float:
        """eps_inf = 2 ln((1 - f/2) / (f/2)): the memoisation cap for any number of reports."""
        return self.one_report.permanent_epsilon

    @property
    def composed_epsilon(self) -> float:
        """``reports * eps_1``: sequential composition, ignoring the memo."""
        return self.reports * self.one_report.epsilon

    def _g(self, c: np.ndarray) -> np.ndarray:
        """ln P(bit counts c | one-hot bit 1) - ln P(c | bit 0), per bit (nan where both are 0:
        counts that p = 0 or q = 1 make impossible)."""
        t, h = self.reports, self.f / 2.0
        c = np.asarray(c, dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            log_a = special.xlogy(c, self.q) + special.xlog1py(t - c, -self.q)
            log_b = special.xlogy(c, self.p) + special.xlog1py(t - c, -self.p)
            return _log_mix(1.0 - h, log_a, h, log_b) - _log_mix(h, log_a, 1.0 - h, log_b)

    @property
    def epsilon(self) -> float:
        """The exact bound of all ``reports`` reports together: g(T) - g(0)."""
        return float(self._g(np.array(float(self.reports))) - self._g(np.array(0.0)))

    def privatize(self, x: Any, rng: np.random.Generator) -> np.ndarray:
        """One PRR and ``reports`` IRRs of it per item of ``x`` (n, 1): (n, reports * k) int8.

        (1 + reports) k uniforms per row, drawn row by row (the PRR's k first)."""
        xi = check_items(x, self.k)
        rng = check_rng(rng)
        n, k, t = xi.shape[0], self.k, self.reports
        u = rng.random((n, (1 + t) * k))
        b = self.one_report._prr(xi, u[:, :k])
        v = u[:, k:].reshape(n, t, k)
        s = np.where(b[:, None, :] == 1, v < self.q, v < self.p)
        return s.reshape(n, t * k).astype(np.int8)

    def _bits(self, y: Any, name: str) -> np.ndarray:
        return check_bits(y, self.reports * self.k, name).reshape(-1, self.reports, self.k)

    def support_counts(self, reports: Any, item: int) -> np.ndarray:
        """How many of each row's reports have bit ``item`` set: float64 (n,)."""
        return self._bits(reports, "outputs")[:, :, item].sum(axis=1).astype(np.float64)

    def privacy_loss(self, x: Any, x2: Any, y: Any) -> np.ndarray:
        """Exact ``log P(S_1..S_T | x) - log P(S_1..S_T | x2)``: ``g(c_x) - g(c_x2)``."""
        yb = self._bits(y, "y")
        n = yb.shape[0]
        v1, v2 = pair_items(x, x2, n, self.k)
        rows = np.arange(n)
        c = yb.sum(axis=1)
        loss = self._g(c[rows, v1]) - self._g(c[rows, v2])
        return np.where(v1 == v2, 0.0, loss)

    def event(self) -> Any:
        """``PureDpEvent(epsilon)``: all ``reports`` reports of one memoised value."""
        from ldp_audit.accountant.events import PureDpEvent

        return PureDpEvent(self.epsilon)

    def candidate_pairs(self, dim: int = 1) -> list[tuple[np.ndarray, np.ndarray]]:
        return FrequencyOracle.candidate_pairs(self, dim)  # type: ignore[arg-type]

    def audit_statistics(self) -> list[Any]:
        """The report-count difference ``c_x - c_x'`` (the loss is increasing in it)."""
        return [CountDifference(self)]

    def to_config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "k": self.k,
            "f": self.f,
            "p": self.p,
            "q": self.q,
            "reports": self.reports,
        }


@dataclass(frozen=True)
class DBitFlipPM(Mechanism):
    """dBitFlipPM with memoised bits: ``d`` sampled buckets per client, one bit per bucket at
    eps/2, repeated unchanged in each of ``reports`` reports (module docstring).

    Args:
        epsilon: the claim (finite, > 0): each bit is randomised at eps/2.
        k: the domain size (integer in [2, 2^31]).
        buckets: b, the number of equal buckets (integer in [2, min(k, 2^20)]); None means k.
        d: the buckets sampled per client (integer in [1, b]); default 2.
        reports: T (integer in [1, 2^16]).
    """

    epsilon: float
    k: int
    buckets: int | None = None
    d: int = 2
    reports: int = 1
    name: ClassVar[str] = "dbitflip_pm"

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon))
        object.__setattr__(self, "k", check_int(self.k, "k", minimum=2, maximum=MAX_DBITFLIP_K))
        if self.buckets is not None:
            top = min(self.k, MAX_UNARY_K)
            object.__setattr__(
                self, "buckets", check_int(self.buckets, "buckets", minimum=2, maximum=top)
            )
        elif self.k > MAX_UNARY_K:
            raise InvalidParameterError(
                f"buckets must be given when k > {MAX_UNARY_K} (default b = k), got k = {self.k!r}"
            )
        object.__setattr__(self, "d", check_int(self.d, "d", minimum=1, maximum=self.b))
        object.__setattr__(
            self, "reports", check_int(self.reports, "reports", minimum=1, maximum=MAX_REPORTS)
        )
        if self.d * (1 + self.reports) > MAX_UNARY_K:
            raise InvalidParameterError(
                f"d * (1 + reports) must be <= {MAX_UNARY_K}, got d = {self.d!r}, "
                f"reports = {self.reports!r}"
            )

    @property
    def b(self) -> int:
        """The number of buckets."""
        return self.buckets if self.buckets is not None else self.k

    @property
    def exact_epsilon(self) -> float:
        """The exact worst-case loss: eps when d >= 2, eps / 2 when d = 1."""
        return self.epsilon if self.d >= 2 else self.epsilon / 2.0

    @property
    def bit_probability(self) -> float:
        """e^{eps/2} / (e^{eps/2} + 1): P(bit = 1) for the value's own bucket."""
        return 1.0 / (1.0 + math.exp(-self.epsilon / 2.0))

    def bucket(self, items: Any) -> np.ndarray:
        """floor(v b / k) elementwise (int64)."""
        v = np.asarray(items, dtype=np.int64)
        return (v * self.b) // self.k

    def _draw_buckets(self, n: int, u: np.ndarray) -> np.ndarray:
        return np.sort(np.argpartition(u, self.d - 1, axis=1)[:, : self.d], axis=1)

    def _bits(self, own: np.ndarray, u: np.ndarray) -> np.ndarray:
        p = self.bit_probability
        return np.where(own, u < p, u < 1.0 - p).astype(np.int64)

    def privatize(self, x: Any, rng: np.random.Generator) -> np.ndarray:
        """(n, d + reports * d) int64: sampled buckets, then the memoised bits per report.

        b + d uniforms per row, drawn row by row (the bucket keys first)."""
        xi = check_items(x, self.k)
        rng = check_rng(rng)
        n, d = xi.shape[0], self.d
        u = rng.random((n, self.b + d))
        js = self._draw_buckets(n, u[:, : self.b])
        bits = self._bits(js == self.bucket(xi), u[:, self.b :])
        return np.hstack([js, np.tile(bits, (1, self.reports))])

    def _split(self, y: Any, name: str) -> tuple[np.ndarray, np.ndarray]:
        d, t = self.d, self.reports
        a = check_report_int(y, name, d * (1 + t))
        js, bits = a[:, :d], a[:, d:].reshape(-1, t, d)
        if not np.all((js >= 0) & (js < self.b)):
            raise InvalidParameterError(f"{name}[:, :{d}] must hold buckets in [0, {self.b})")
        if not np.all((bits == 0) | (bits == 1)):
            raise InvalidParameterError(f"{name}[:, {d}:] must hold bits in {{0, 1}}")
        return js, bits

    def support_counts(self, reports: Any, item: int) -> np.ndarray:
        """Sum over reports of +1 (bit 1) / -1 (bit 0) on the item's bucket, if sampled."""
        js, bits = self._split(reports, "outputs")
        own = js == self.bucket(np.int64(item))
        return ((2 * bits - 1) * own[:, None, :]).sum(axis=(1, 2)).astype(np.float64)

    def privacy_loss(self, x: Any, x2: Any, y: Any) -> np.ndarray:
        """Exact loss of the memoised reports (all copies must agree: a differing copy has
        probability 0 under memoisation, which is refused)."""
        js, bits = self._split(y, "y")
        if not np.all(bits == bits[:, :1, :]):
            raise InvalidParameterError(
                "y's reports differ within a row: impossible for memoised dBitFlipPM"
            )
        n = js.shape[0]
        v1, v2 = pair_items(x, x2, n, self.k)
        sign = 2 * bits[:, 0, :] - 1
        own1 = js == self.bucket(v1)[:, None]
        own2 = js == self.bucket(v2)[:, None]
        return (self.epsilon / 2.0) * (sign * (own1.astype(np.int64) - own2)).sum(axis=1)

    def event(self) -> Any:
        """``PureDpEvent(epsilon)``: all reports of one memoised value."""
        from ldp_audit.accountant.events import PureDpEvent

        return PureDpEvent(self.epsilon)

    def candidate_pairs(self, dim: int = 1) -> list[tuple[np.ndarray, np.ndarray]]:
        """(0, first item of bucket 1) and (0, k-1): items in different buckets."""
        if check_int(dim, "dim", minimum=1) != 1:
            raise InvalidParameterError(f"dim must be 1 for DBitFlipPM, got {dim!r}")
        first = -(-self.k // self.b)  # ceil(k / b): the smallest v with floor(v b / k) = 1
        pairs = [(np.array([0.0]), np.array([float(first)]))]
        if first != self.k - 1:
            pairs.append((np.array([0.0]), np.array([float(self.k - 1)])))
        return pairs

    def audit_statistics(self) -> list[Any]:
        """The signed vote difference of the two items' buckets over all reports."""
        return [CountDifference(self)]

    def to_config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "epsilon": self.epsilon,
            "k": self.k,
            "buckets": self.buckets,
            "d": self.d,
            "reports": self.reports,
        }
