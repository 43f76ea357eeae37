"""Broken variants from LDP-Auditor's paper (Arcolezi & Gambs, "Revealing the True Cost of Locally
Differentially Private Protocols: An Auditing Perspective", PETS 2024; public code at
github.com/hharcolezi/ldp-audit), rebuilt here from their descriptions on our oracles (no code of
theirs or of pure-LDP is copied), plus the non-memoising longitudinal clients.

* :class:`PureLdpSue` / :class:`PureLdpOue` -- the unary-encoding clients of pure-LDP 1.1.2
  (their section 6, Figure 8): the item's bit starts from the same q-coin as every other bit and
  is then *set* with probability p, never cleared, so P(item bit = 1) = p + (1 - p) q instead
  of p. True epsilon: ``ln((p + q - p q) / (q (1 - p)))`` (:func:`pure_ldp_true_epsilon`).
* :class:`LocalHashingOnly` -- local hashing with no randomisation after the hash (their LHO,
  Figure 5): the report is ``(H_seed(v), seed)``; ``{y = H_seed(v) != H_seed(v')}`` happens with
  probability 1 - 1/g under v and never under v', so the true epsilon is infinite whatever it
  claims.
* :class:`RedrawingRappor` / :class:`RedrawingDBitFlip` -- a client that re-draws its permanent
  response at every report: the reports are independent, costing ``reports * eps_1``
  (RAPPOR) or ``reports`` times the one-report loss (dBitFlipPM), while claiming the memoised
  cumulative epsilon; :class:`RedrawingLoloha` likewise (``reports * eps_1``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ldp_audit import mechanisms as m
from ldp_audit.mechanisms.frequency import check_items, grr_reply


def pure_ldp_true_epsilon(p: float, q: float) -> float:
    """The exact epsilon of a unary encoding whose item bit is 1 with p + (1 - p) q."""
    p1 = p + q - p * q
    return math.log(p1 / q) + math.log((1.0 - q) / (1.0 - p1))


class _SetNeverClear:
    """The item's bit: the q-coin first, then set with probability p (never cleared)."""

    def privatize(self, x: Any, rng: np.random.Generator) -> np.ndarray:
        xi = check_items(x, self.k)  # type: ignore[attr-defined]
        p, q = self.bit_probabilities  # type: ignore[attr-defined]
        u = rng.random((xi.shape[0], self.k + 1))  # type: ignore[attr-defined]
        out = (u[:, :-1] < q).astype(np.int8)
        rows = np.arange(xi.shape[0])
        set_it = u[:, -1] < p
        out[rows, xi[:, 0]] = np.where(set_it, 1, out[rows, xi[:, 0]])
        return out

    @property
    def true_epsilon(self) -> float:
        return pure_ldp_true_epsilon(*self.bit_probabilities)  # type: ignore[attr-defined]

    def privacy_loss(self, x: Any, x2: Any, y: Any) -> np.ndarray:
        raise NotImplementedError("a broken fixture has no exact loss to offer")


@dataclass(frozen=True)
class PureLdpSue(_SetNeverClear, m.SymmetricUnaryEncoding):
    pass


@dataclass(frozen=True)
class PureLdpOue(_SetNeverClear, m.OptimizedUnaryEncoding):
    pass


@dataclass(frozen=True)
class LocalHashingOnly(m.OptimalLocalHashing):
    """Hash, no randomisation (``keep_probability`` 1); claims ``epsilon``; true: infinite."""

    @property
    def keep_probability(self) -> float:
        return 1.0

    def privacy_loss(self, x: Any, x2: Any, y: Any) -> np.ndarray:
        raise NotImplementedError("infinite: the hash alone is reported")


@dataclass(frozen=True)
class RedrawingRappor(m.MemoisedRappor):
    """Claims the memoised epsilon but draws a fresh permanent response for every report."""

    @property
    def true_epsilon(self) -> float:
        return self.composed_epsilon

    def privatize(self, x: Any, rng: np.random.Generator) -> np.ndarray:
        xi = check_items(x, self.k)
        one = self.one_report
        rows = np.repeat(xi, self.reports, axis=0)  # report t of row i is row i*T + t
        return one.privatize(rows, rng).reshape(xi.shape[0], self.reports * self.k)

    def privacy_loss(self, x: Any, x2: Any, y: Any) -> np.ndarray:
        raise NotImplementedError("the memoised loss does not describe this client")


@dataclass(frozen=True)
class RedrawingDBitFlip(m.DBitFlipPM):
    """Claims the memoised epsilon but re-draws the bits at every report (same buckets)."""

    @property
    def true_epsilon(self) -> float:
        return self.reports * self.exact_epsilon

    def privatize(self, x: Any, rng: np.random.Generator) -> np.ndarray:
        xi = check_items(x, self.k)
        n, d, t = xi.shape[0], self.d, self.reports
        u = rng.random((n, self.b + t * d))
        js = np.sort(np.argpartition(u[:, : self.b], d - 1, axis=1)[:, :d], axis=1)
        own = js == self.bucket(xi)
        p = self.bit_probability
        v = u[:, self.b :].reshape(n, t, d)
        bits = np.where(own[:, None, :], v < p, v < 1.0 - p).astype(np.int64)
        return np.hstack([js, bits.reshape(n, t * d)])

    def privacy_loss(self, x: Any, x2: Any, y: Any) -> np.ndarray:
        raise NotImplementedError("the memoised loss does not describe this client")


@dataclass(frozen=True)
class RedrawingLoloha(m.Loloha):
    """Claims LOLOHA's memoised epsilon but re-draws the permanent GRR at every report (the
    hash seed is kept): T independent one-report chains, costing ``reports * eps_1``."""

    @property
    def true_epsilon(self) -> float:
        return self.composed_epsilon

    def privatize(self, x: Any, rng: np.random.Generator) -> np.ndarray:
        xi = check_items(x, self.k)
        n, t = xi.shape[0], self.reports
        seed = m.Loloha(self.eps_perm, self.eps_1, self.k, self.g, 1).privatize(xi, rng)[:, :1]
        rows = np.repeat(xi, t, axis=0)
        # a fresh permanent GRR per report of the same hash: privatize with the client's seed
        h = m.olh_hash(np.repeat(seed[:, 0], t), rows[:, 0], self.g)
        u = rng.random((n * t, 4))
        p1, p2 = self.permanent_probabilities[0], self.report_probabilities[0]
        memo = grr_reply(h, p1, u[:, 0], u[:, 1], self.g)
        z = grr_reply(memo, p2, u[:, 2], u[:, 3], self.g).reshape(n, t)
        return np.hstack([seed, z])

    def privacy_loss(self, x: Any, x2: Any, y: Any) -> np.ndarray:
        raise NotImplementedError("the memoised loss does not describe this client")
