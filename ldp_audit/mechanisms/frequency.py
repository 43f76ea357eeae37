"""What the LDP frequency oracles share: the item checks, the "pure protocol" estimator and the
statistics each oracle ships to the auditor.

A frequency oracle (Wang et al., USENIX Security 2017, "Locally differentially private protocols
for frequency estimation") privatises one item ``v`` of a finite domain ``{0, ..., k-1}`` per
report; the server estimates how often each item occurs. Every oracle here is *pure* in their
sense: a report ``y`` *supports* a set of items (:meth:`FrequencyOracle.support`) with

    P(y supports v | input v) = p*,    P(y supports v | input u != v) = q*    (p* > q*),

so the mean support of ``v`` over ``n`` reports has expectation ``q* + f_v (p* - q*)`` and

    f_hat_v = (mean support of v - q*) / (p* - q*)

is an unbiased estimate of the frequency ``f_v`` of ``v`` (:meth:`FrequencyOracle.estimate`),
with variance ``(q*(1 - q*) + f_v (p* - q*)(1 - p* - q*)) / (n (p* - q*)^2)``.

The same support function gives each oracle's audit statistics
(:meth:`FrequencyOracle.audit_statistics`): for a pair of inputs (x, x'), the per-report scores
``1{y supports x} - 1{y supports x'}`` and ``1{y supports x}``. The event ``{score > 0}`` of the
first is the worst-case event of every oracle here (its probability ratio is exactly e^eps), and
it needs the oracle's own decoding (the hash of a local-hashing report, the Hadamard code of a
Hadamard response), which no generic statistic of the auditor computes.

Inputs are items as an (n, 1) array of integers in {0, ..., k-1} (floats holding integers are
accepted, as :class:`~ldp_audit.mechanisms.RandomizedResponse` does: the auditor passes float64).
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError
from ldp_audit.mechanisms.base import Mechanism, check_dim, one_or_n_rows
from ldp_audit.validation import check_batch, check_choice, check_rng

__all__ = ["FrequencyOracle", "SupportStatistic"]

#: the largest domain size an oracle accepts (items are int64; sizes above 2^53 would not survive
#: the auditor's float64 inputs).
MAX_DOMAIN = 1 << 53


def check_items(x: Any, k: int, name: str = "x") -> np.ndarray:
    """``x`` (n, 1) as int64 items in {0, ..., k-1}; anything else raises, naming ``name``."""
    xb = check_batch(x, name, dim=1)
    ok = (xb == np.rint(xb)) & (xb >= 0) & (xb <= k - 1)
    if not np.all(ok):
        bad = xb[~ok][0]
        raise InvalidParameterError(
            f"{name} must hold integers in {{0, ..., {k - 1}}} (k = {k}), got {bad!r}"
        )
    return xb.astype(np.int64)


def items_rng(x: Any, k: int, rng: Any) -> tuple[np.ndarray, np.random.Generator]:
    """``privatize``'s inputs checked: the items of ``x`` (:func:`check_items`), then ``rng``."""
    return check_items(x, k), check_rng(rng)


def pair_items(x: Any, x2: Any, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Items of ``privacy_loss``'s x and x2: (1, 1) or (n, 1) each, returned as int64 (n,)."""
    out = []
    for v, name in ((x, "x"), (x2, "x2")):
        a = one_or_n_rows(check_items(np.asarray(v).reshape(-1, 1), k, name), name, n)
        out.append(np.broadcast_to(a[:, 0], (n,)))
    return out[0], out[1]


def check_domain(domain: Any, k: int) -> np.ndarray:
    """The items to estimate: None -> all of {0, ..., k-1}; else a 1-D array of such items."""
    if domain is None:
        return np.arange(k, dtype=np.int64)
    d = np.asarray(domain)
    if d.ndim == 0:
        d = d.reshape(1)
    if d.ndim != 1 or d.size == 0:
        raise InvalidParameterError(
            f"domain must be a non-empty 1-D array of items, got shape {np.shape(domain)}"
        )
    return check_items(d.reshape(-1, 1), k, "domain")[:, 0]


def one_item(v: Any, k: int, name: str) -> int:
    """``v`` (a statistic's x or x') as one item of {0..k-1}, else InvalidParameterError."""
    a = np.asarray(v, dtype=np.float64).reshape(-1)
    if a.size != 1:
        raise InvalidParameterError(f"{name} must be one item, got {a.tolist()!r}")
    return int(check_items(a.reshape(1, 1), k, name)[0, 0])


def item_pairs(mech: Any, dim: Any, items: Any) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(0, v)`` for the distinct ``items`` v, in order: a frequency oracle's candidate pairs
    (``dim`` must be 1)."""
    if check_dim(dim) != 1:
        raise InvalidParameterError(f"dim must be 1 for {type(mech).__name__}, got {dim!r}")
    return [(np.array([0.0]), np.array([float(v)])) for v in dict.fromkeys(items)]


def one_hot(xi: np.ndarray, k: int) -> np.ndarray:
    """bool (n, k): column ``xi[i, 0]`` of row i (the items' one-hot encodings)."""
    return np.arange(k) == xi


def grr_reply(h: Any, p: float, u_keep: Any, u_other: Any, g: int) -> np.ndarray:
    """Randomised response over {0..g-1} from two uniforms per value: keep h when
    ``u_keep < p``, else the ``u_other``-th of the g - 1 other values (int64)."""
    other = np.minimum(np.floor(u_other * (g - 1)), g - 2).astype(np.int64)
    return np.where(u_keep < p, h, other + (other >= h))


def check_report_int(y: Any, name: str, shape1: int) -> np.ndarray:
    """(n, shape1) reports of integers (any integer, bool or integral-float dtype) as int64."""
    a = np.asarray(y)
    if a.dtype == object or a.dtype.kind not in "biuf":
        raise InvalidParameterError(f"{name} must be a numeric array, got dtype {a.dtype}")
    if a.ndim == 1 and shape1 == 1:
        a = a[:, None]
    if a.ndim != 2 or a.shape[1] != shape1 or a.shape[0] == 0:
        raise InvalidParameterError(
            f"{name} must have shape (n, {shape1}) (one report per row), got shape {a.shape}"
        )
    if a.dtype.kind == "f":
        if not np.all(np.isfinite(a)) or not np.all(a == np.rint(a)):
            raise InvalidParameterError(f"{name} must hold integers")
    return a.astype(np.int64)


def check_bits(y: Any, k: int, name: str = "y") -> np.ndarray:
    """(n, k) reports of bits in {0, 1} as int8."""
    a = check_report_int(y, name, k)
    if not np.all((a == 0) | (a == 1)):
        raise InvalidParameterError(f"{name} must hold bits in {{0, 1}}")
    return a.astype(np.int8)


class ItemMechanism(Mechanism):
    """Base of the mechanisms on items of {0, ..., k-1} (the frequency oracles, histogram
    encoding, the longitudinal protocols): their candidate pairs and the frame of their exact
    :meth:`privacy_loss` (a subclass defines ``_check_reports`` and ``_item_loss``)."""

    k: int

    def _check_reports(self, y: Any, name: str) -> np.ndarray:
        """Validated reports (here (n, k) bits; a mechanism with other reports overrides it)."""
        return check_bits(y, self.k, name)

    @abc.abstractmethod
    def _item_loss(self, a: np.ndarray, v1: np.ndarray, v2: np.ndarray) -> np.ndarray:
        """The exact loss of each validated report ``a`` between its items v1 and v2 (n,)."""

    def privacy_loss(self, x: Any, x2: Any, y: Any) -> np.ndarray:
        """Exact ``log P(y | x) - log P(y | x2)`` per report (0 where the two items are equal):
        the reports checked, the items of x and x2 ((1, 1) or (n, 1) each), then
        ``_item_loss``."""
        a = self._check_reports(y, "y")
        v1, v2 = pair_items(x, x2, a.shape[0], self.k)
        return np.where(v1 == v2, 0.0, self._item_loss(a, v1, v2))

    def candidate_pairs(self, dim: int = 1) -> list[tuple[np.ndarray, np.ndarray]]:
        """Pairs of distinct items (dim must be 1): (0, 1) and (0, k-1)."""
        return item_pairs(self, dim, (1, self.k - 1))


class FrequencyOracle(ItemMechanism):
    """Base of the frequency oracles: items in {0, ..., k-1}, a support function, the unbiased
    estimator, the pure accounting event and the audit statistics.

    A subclass defines ``epsilon``, ``k`` and :attr:`support_probabilities`; its reports'
    check and support test (``_check_reports``, ``_supports``) when they are not (n, k) bits;
    and :attr:`loss_weights` when its report is not independent bits (then the exact
    :meth:`privacy_loss` follows from :meth:`support`'s test).
    """

    def _supports(self, a: np.ndarray, v: np.ndarray) -> np.ndarray:
        """Whether each validated report supports its item ``v`` (n,) (here: bit v is 1)."""
        return a[np.arange(a.shape[0]), v] == 1

    def support(self, reports: Any, items: Any) -> np.ndarray:
        """Whether each report supports its item: bool (n,), ``items`` broadcast to (n,)."""
        a = self._check_reports(reports, "reports")
        v = np.broadcast_to(np.asarray(items, dtype=np.int64).reshape(-1), (a.shape[0],))
        return self._supports(a, v)

    @property
    def loss_weights(self) -> tuple[float, float]:
        """(w1, w0): the exact loss of a report is ``w(supports x) - w(supports x2)`` with
        ``w(True) = w1``, ``w(False) = w0``. Here for reports of independent bits, bit v set
        with probability p* under v and q* otherwise: ``(ln(p*/q*), ln((1-p*)/(1-q*)))``; an
        oracle whose report is one value in or out of v's set overrides it with (epsilon, 0)."""
        p, q = self.support_probabilities
        return math.log(p) - math.log(q), math.log1p(-p) - math.log1p(-q)

    def _item_loss(self, a: np.ndarray, v1: np.ndarray, v2: np.ndarray) -> np.ndarray:
        """The exact loss (bounded by epsilon) from the report's support of the two items
        (:attr:`loss_weights`)."""
        w1, w0 = self.loss_weights
        return np.where(self._supports(a, v1), w1, w0) - np.where(self._supports(a, v2), w1, w0)

    @property
    @abc.abstractmethod
    def support_probabilities(self) -> tuple[float, float]:
        """(p*, q*): P(a report supports v | input v) and P(... | input u != v)."""

    def support_matrix(self, reports: Any, domain: Any = None) -> np.ndarray:
        """bool (n, len(domain)): report i supports item domain[j]."""
        items = check_domain(domain, self.k)
        return np.stack([self.support(reports, np.full(1, v)) for v in items], axis=1)

    def estimate(self, reports: Any, domain: Any = None) -> np.ndarray:
        """The server side: unbiased frequency estimates (fractions of the reports).

        ``f_hat_v = (mean_i 1{report i supports v} - q*) / (p* - q*)`` for every v in ``domain``
        (default: all k items; see the module docstring for the variance). Estimates are not
        clipped to [0, 1] (clipping would bias them).

        Args:
            reports: outputs of :meth:`privatize` (any number of rows, stacked).
            domain: the items to estimate (a 1-D array of items in {0, ..., k-1}), or None.

        Returns:
            float64 array of len(domain).
        """
        p_s, q_s = self.support_probabilities
        counts = self.support_matrix(reports, domain).mean(axis=0)
        return (counts - q_s) / (p_s - q_s)

    def estimator_variance(self, n: int, frequency: float) -> float:
        """Var(f_hat_v) for ``n`` reports when v has true frequency ``frequency``."""
        p_s, q_s = self.support_probabilities
        f = float(frequency)
        return (q_s * (1 - q_s) + f * (p_s - q_s) * (1 - p_s - q_s)) / (n * (p_s - q_s) ** 2)

    def audit_statistics(self) -> list[SupportStatistic]:
        """The statistics the auditor should try (``audit(..., statistics=...)`` contract):
        ``1{y supports x} - 1{y supports x'}`` and ``1{y supports x}`` per report."""
        return [SupportStatistic(self, "difference"), SupportStatistic(self, "x")]


@dataclass(frozen=True)
class SupportStatistic:
    """An audit statistic ``stat(outputs, x, x_prime) -> scores`` built on an oracle's
    :meth:`FrequencyOracle.support` (picklable: it holds only the frozen oracle).

    ``mode = "difference"``: ``1{y supports x} - 1{y supports x'}`` in {-1, 0, 1}, whose event
    ``{score > 0}`` has probability ratio exactly e^eps between the two inputs for every oracle
    here. ``mode = "x"``: ``1{y supports x}``.
    """

    oracle: FrequencyOracle
    mode: str = "difference"

    def __post_init__(self) -> None:
        check_choice(self.mode, "mode", ("difference", "x"))

    @property
    def name(self) -> str:
        o = type(self.oracle).__name__
        if self.mode == "x":
            return f"{o} support of x"
        return f"{o} support of x minus support of x'"

    def __call__(self, outputs: Any, x: Any, x_prime: Any) -> np.ndarray:
        k = self.oracle.k
        s = self.oracle.support(outputs, np.array([one_item(x, k, "x")])).astype(np.float64)
        if self.mode == "x":
            return s
        return s - self.oracle.support(outputs, np.array([one_item(x_prime, k, "x_prime")]))
