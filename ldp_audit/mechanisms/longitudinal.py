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

import functools
import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from scipy import special

from ldp_audit.errors import InvalidParameterError
from ldp_audit.mechanisms.base import check_epsilon_k, check_optional
from ldp_audit.mechanisms.frequency import (
    MAX_DOMAIN,
    ItemMechanism,
    check_bits,
    check_report_int,
    grr_reply,
    item_pairs,
    items_rng,
    one_item,
)
from ldp_audit.mechanisms.olh import SEED_RANGE, olh_hash
from ldp_audit.mechanisms.rappor import BasicRappor
from ldp_audit.mechanisms.unary import MAX_UNARY_K
from ldp_audit.validation import check_epsilon, check_int

__all__ = ["MemoisedRappor", "DBitFlipPM", "Loloha", "CountDifference"]

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
        m = self.mechanism
        v1, v2 = one_item(x, m.k, "x"), one_item(x_prime, m.k, "x_prime")
        return m.support_counts(outputs, v1) - m.support_counts(outputs, v2)


class _Longitudinal(ItemMechanism):
    """What the memoised protocols share: ``reports``, the items pairs and loss frame of
    :class:`~ldp_audit.mechanisms.frequency.ItemMechanism` and the count statistic
    :class:`CountDifference` (``support_counts`` per protocol). The accountant's event is
    Mechanism's, ``PureDpEvent(epsilon)`` of the cumulative claim."""

    reports: int

    def _check_reports_count(self, top: int) -> None:
        r = check_int(self.reports, "reports", minimum=1, maximum=top)
        object.__setattr__(self, "reports", r)

    def audit_statistics(self) -> list[Any]:
        """The report-count difference ``c_x - c_x'`` (the loss is increasing in it)."""
        return [CountDifference(self)]


@dataclass(frozen=True)
class MemoisedRappor(_Longitudinal):
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
        self._check_reports_count(MAX_REPORTS)
        one = self.one_report  # validates k, f, p, q
        for name in ("k", "f", "p", "q"):
            object.__setattr__(self, name, getattr(one, name))
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
        xi, rng = items_rng(x, self.k, rng)
        n, k, t = xi.shape[0], self.k, self.reports
        u = rng.random((n, (1 + t) * k))
        b = self.one_report._prr(xi, u[:, :k])[:, None, :]
        return self.one_report._irr(b, u[:, k:].reshape(n, t, k)).reshape(n, t * k)

    def _check_reports(self, y: Any, name: str) -> np.ndarray:
        return check_bits(y, self.reports * self.k, name).reshape(-1, self.reports, self.k)

    def support_counts(self, reports: Any, item: int) -> np.ndarray:
        """How many of each row's reports have bit ``item`` set: float64 (n,)."""
        return self._check_reports(reports, "outputs")[:, :, item].sum(axis=1).astype(np.float64)

    def _item_loss(self, a: np.ndarray, v1: np.ndarray, v2: np.ndarray) -> np.ndarray:
        """Exact ``log P(S_1..S_T | x) - log P(S_1..S_T | x2)``: ``g(c_x) - g(c_x2)``."""
        rows, c = np.arange(a.shape[0]), a.sum(axis=1)
        return self._g(c[rows, v1]) - self._g(c[rows, v2])


@dataclass(frozen=True)
class DBitFlipPM(_Longitudinal):
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
        check_epsilon_k(self, MAX_DBITFLIP_K, check_epsilon)
        check_optional(self, "buckets", check_int, minimum=2, maximum=min(self.k, MAX_UNARY_K))
        if self.buckets is None and self.k > MAX_UNARY_K:
            raise InvalidParameterError(
                f"buckets must be given when k > {MAX_UNARY_K} (default b = k), got k = {self.k!r}"
            )
        object.__setattr__(self, "d", check_int(self.d, "d", minimum=1, maximum=self.b))
        self._check_reports_count(MAX_REPORTS)
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

    def privatize(self, x: Any, rng: np.random.Generator) -> np.ndarray:
        """(n, d + reports * d) int64: sampled buckets, then the memoised bits per report.

        b + d uniforms per row, drawn row by row (the bucket keys first)."""
        xi, rng = items_rng(x, self.k, rng)
        n, d = xi.shape[0], self.d
        u = rng.random((n, self.b + d))
        js = np.sort(np.argpartition(u[:, : self.b], d - 1, axis=1)[:, :d], axis=1)
        p, v = self.bit_probability, u[:, self.b :]
        bits = np.where(js == self.bucket(xi), v < p, v < 1.0 - p).astype(np.int64)
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

    def _check_reports(self, y: Any, name: str) -> np.ndarray:
        """(n, 2d): the sampled buckets and the one copy of their bits (all copies must agree:
        a differing copy has probability 0 under memoisation, which is refused)."""
        js, bits = self._split(y, name)
        if not np.all(bits == bits[:, :1, :]):
            raise InvalidParameterError(
                f"{name}'s reports differ within a row: impossible for memoised dBitFlipPM"
            )
        return np.hstack([js, bits[:, 0, :]])

    def _item_loss(self, a: np.ndarray, v1: np.ndarray, v2: np.ndarray) -> np.ndarray:
        """eps/2 per sampled bucket of v1 or v2, signed by its bit."""
        js, sign = a[:, : self.d], 2 * a[:, self.d :] - 1
        own1 = js == self.bucket(v1)[:, None]
        own2 = js == self.bucket(v2)[:, None]
        return (self.epsilon / 2.0) * (sign * (own1.astype(np.int64) - own2)).sum(axis=1)

    def candidate_pairs(self, dim: int = 1) -> list[tuple[np.ndarray, np.ndarray]]:
        """(0, first item of bucket 1) and (0, k-1): items in different buckets."""
        # ceil(k / b): the smallest v with floor(v b / k) = 1
        return item_pairs(self, dim, (-(-self.k // self.b), self.k - 1))


@dataclass(frozen=True)
class Loloha(_Longitudinal):
    """LOLOHA, longitudinal local hashing (Arcolezi, Couchot, Gambs, Palamidessi & Zolfaghari,
    EDBT 2023): a client hashes its value once (``H_seed``, seed drawn once, into {0..g-1}),
    memoises a permanent GRR of the hash at ``eps_perm`` and sends, per report, a GRR of that
    memo whose chain with the permanent step is exactly ``eps_1``-LDP (``p2`` below).
    Output: (n, 1 + reports) int64 ``[seed, z_1, ..., z_T]``.

    Exact cumulative loss of the T reports of an unchanged value (the claim ``epsilon``): with
    ``c_w`` the reports equal to w and ``A(c) = p2^c q2^(T-c)``, the likelihood given the hash h
    is ``q1 S + (p1 - q1) A(c_h)``, ``S = sum_w A(c_w)``, so the loss between items hashing to
    h != h' is ``ln(q1 S + d A(c_h)) - ln(q1 S + d A(c_h'))`` (``d = p1 - q1``). It grows as S
    shrinks, and S is least with the other reports spread evenly over the other g - 2 values (A
    is convex), so ``epsilon`` is its maximum over (c_h, c_h') with that spread: ``eps_1`` at
    T = 1, at most the memoisation cap ``eps_perm`` and tending to it. It is *not* bounded by
    ``T eps_1``: the reports share the memo, so report 2 given report 1 is no eps_1 mechanism
    (g = 7, eps_perm 2, eps_1 0.5: 1.035 > 2 eps_1 at T = 2); with g = 2 it stays below.

    Args:
        eps_perm: the permanent GRR's epsilon, the cap over any number of reports (> eps_1).
        eps_1: one report's epsilon (finite, > 0).
        k: the domain size (integer in [2, 2^53]).
        g: the hash range (integer in [2, 2^10]; 2 is BiLOLOHA).
        reports: T (integer in [1, 2^10]).
    """

    eps_perm: float
    eps_1: float
    k: int
    g: int = 2
    reports: int = 1
    name: ClassVar[str] = "loloha"

    def __post_init__(self) -> None:
        object.__setattr__(self, "eps_perm", check_epsilon(self.eps_perm, "eps_perm"))
        object.__setattr__(self, "eps_1", check_epsilon(self.eps_1, "eps_1"))
        if not self.eps_1 < self.eps_perm:
            raise InvalidParameterError(
                f"eps_1 must be below eps_perm, got eps_1 = {self.eps_1!r}, "
                f"eps_perm = {self.eps_perm!r}"
            )
        object.__setattr__(self, "k", check_int(self.k, "k", minimum=2, maximum=MAX_DOMAIN))
        object.__setattr__(self, "g", check_int(self.g, "g", minimum=2, maximum=1 << 10))
        self._check_reports_count(1 << 10)
        # epsilon takes the logs of q1, p1 - q1, p2 and q2: a huge eps_perm rounds q1 to 0, an
        # eps_1 within rounding of eps_perm q2 (session 58: eps_perm=1e20 or eps_1 = eps_perm
        # - 1e-9 crashed .epsilon with 'math domain error')
        p1, q1 = self.permanent_probabilities
        p2, q2 = self.report_probabilities if 0.0 < q1 else (math.nan, math.nan)
        if not (0.0 < q1 < p1 < 1.0 and 0.0 < q2 < p2 <= 1.0):
            raise InvalidParameterError(
                f"eps_perm = {self.eps_perm!r} and eps_1 = {self.eps_1!r} (g = {self.g}) give "
                f"GRR probabilities a double cannot hold (permanent {p1!r}, {q1!r}; report "
                f"{p2!r}, {q2!r}): keep eps_perm - ln(g - 1) below 36 and eps_1 further below "
                "eps_perm"
            )

    @property
    def permanent_probabilities(self) -> tuple[float, float]:
        """(p1, q1): the permanent GRR keeps the hash w.p. e^eps_perm / (e^eps_perm + g - 1)."""
        p1 = float(special.expit(self.eps_perm - math.log(self.g - 1)))
        return p1, (1.0 - p1) / (self.g - 1)

    @property
    def report_probabilities(self) -> tuple[float, float]:
        """(p2, q2) of each report's GRR, solving ``(p1 p2 + (1 - p1) q2) / (q1 p2 + (1 - q1)
        q2) = e^eps_1`` with ``q2 = (1 - p2) / (g - 1)``."""
        (p1, q1), e, g = self.permanent_probabilities, math.exp(self.eps_1), self.g
        num = e * (1.0 - q1) - 1.0 + p1
        p2 = num / ((p1 - e * q1) * (g - 1) + num)
        return p2, (1.0 - p2) / (g - 1)

    @property
    def composed_epsilon(self) -> float:
        """``reports * eps_1``: T independent one-report chains (a client that re-draws the
        permanent GRR; not a bound on the memoised reports, see the class docstring)."""
        return self.reports * self.eps_1

    def _log_a(self, c: np.ndarray) -> np.ndarray:
        p2, q2 = self.report_probabilities
        return c * math.log(p2) + (self.reports - c) * math.log(q2)

    def _loss(self, log_s: np.ndarray, la_h: np.ndarray, la_j: np.ndarray) -> np.ndarray:
        p1, q1 = self.permanent_probabilities
        lq, ld = math.log(q1), math.log(p1 - q1)
        return np.logaddexp(lq + log_s, ld + la_h) - np.logaddexp(lq + log_s, ld + la_j)

    @functools.cached_property
    def epsilon(self) -> float:  # type: ignore[override]
        """The exact bound of all ``reports`` reports together (class docstring)."""
        t, m = self.reports, self.g - 2
        ch, cj = (a.ravel() for a in np.meshgrid(np.arange(t + 1), np.arange(t + 1)))
        r = t - ch - cj
        keep = (r >= 0) if m else (r == 0)
        ch, cj, r = ch[keep], cj[keep], r[keep]
        la_h, la_j = self._log_a(ch), self._log_a(cj)
        log_s = np.logaddexp(la_h, la_j)
        if m:
            base, extra = r // m, r % m
            with np.errstate(divide="ignore"):
                rest = np.logaddexp(
                    np.log(extra) + self._log_a(base + 1), np.log(m - extra) + self._log_a(base)
                )
            log_s = np.logaddexp(log_s, rest)
        # never above the cap (post-processing of the permanent GRR): clipped to it (rounding)
        return min(float(self._loss(log_s, la_h, la_j).max()), self.eps_perm)

    def privatize(self, x: Any, rng: np.random.Generator) -> np.ndarray:
        """(n, 1 + reports) int64: the seed, then the reports of the memoised permanent GRR.

        3 + 2 reports uniforms per row, drawn row by row (seed, permanent GRR, then each
        report's keep-or-not and replacement)."""
        xi, rng = items_rng(x, self.k, rng)
        n, g = xi.shape[0], self.g
        u = rng.random((n, 3 + 2 * self.reports))
        seeds = np.floor(u[:, 0] * SEED_RANGE).astype(np.int64)
        memo = grr_reply(olh_hash(seeds, xi[:, 0], g), self.permanent_probabilities[0], u[:, 1],
                    u[:, 2], g)  # fmt: skip
        z = grr_reply(memo[:, None], self.report_probabilities[0], u[:, 3::2], u[:, 4::2], g)
        return np.hstack([seeds[:, None], z])

    def _check_reports(self, y: Any, name: str) -> np.ndarray:
        a = check_report_int(y, name, 1 + self.reports)
        if not np.all((a[:, 0] >= 0) & (a[:, 0] < SEED_RANGE)):
            raise InvalidParameterError(f"{name}[:, 0] must hold seeds in [0, 2^32)")
        if not np.all((a[:, 1:] >= 0) & (a[:, 1:] < self.g)):
            raise InvalidParameterError(f"{name}[:, 1:] must hold hash values in [0, {self.g})")
        return a

    def support_counts(self, reports: Any, item: int) -> np.ndarray:
        """How many of each row's reports equal ``H_seed(item)``: float64 (n,)."""
        a = self._check_reports(reports, "outputs")
        return (a[:, 1:] == olh_hash(a[:, 0], item, self.g)[:, None]).sum(axis=1).astype(np.float64)

    def _item_loss(self, a: np.ndarray, v1: np.ndarray, v2: np.ndarray) -> np.ndarray:
        """Exact ``log P(seed, z_1..z_T | x) - log P(seed, z_1..z_T | x2)`` (class docstring)."""
        seeds, z = a[:, 0], a[:, 1:]
        n = z.shape[0]
        rows = np.arange(n)
        c = np.zeros((n, self.g))
        np.add.at(c, (rows[:, None], z), 1.0)
        la = self._log_a(c)
        h1, h2 = olh_hash(seeds, v1, self.g), olh_hash(seeds, v2, self.g)
        loss = self._loss(special.logsumexp(la, axis=1), la[rows, h1], la[rows, h2])
        return np.where(h1 == h2, 0.0, loss)
