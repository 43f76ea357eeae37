"""Shared pieces of the built-in mechanisms: the :class:`Mechanism` base, input validation,
overflow-safe clipping (eqs. 19 and its L2 twin) and the bit-flip probabilities of eqs. 4 / 24."""

from __future__ import annotations

import abc
import math
from dataclasses import fields
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from scipy import special

from ldp_audit.errors import InvalidParameterError
from ldp_audit.parse import INT_MAX
from ldp_audit.validation import (
    check_batch,
    check_epsilon,
    check_int,
    check_real,
)

if TYPE_CHECKING:
    from ldp_audit.accountant.events import DpEvent

SQRT3 = math.sqrt(3.0)

# ----------------------------------------------------------------------------------------------
# validation helpers local to the mechanisms
# ----------------------------------------------------------------------------------------------


def private_epsilon(value: Any, name: str = "epsilon") -> float:
    """Epsilon of a private mechanism: finite and > 0; inf is pointed at :class:`NoPrivacy`."""
    v = check_real(value, name)
    if v == math.inf:
        raise InvalidParameterError(
            f"{name} must be finite for a private mechanism, got {value!r}; for a non-private "
            "baseline use ldp_audit.mechanisms.NoPrivacy() explicitly"
        )
    return check_epsilon(v, name)


#: largest |noise| / scale a double-precision draw can reach, with margin: Generator.laplace is
#: -scale * log(u) with u >= 2^-53 (36.7 scales), standard_normal stays below 40.
_NOISE_TAIL = 64.0


def check_no_overflow(noise_scale: float, offset: float, what: str) -> None:
    """Refuse parameters whose outputs could overflow to inf (an inf output is not noise)."""
    with np.errstate(over="ignore"):
        top = float(np.float64(noise_scale) * _NOISE_TAIL + np.float64(offset))
    if not math.isfinite(top):
        raise InvalidParameterError(
            f"{what} = {noise_scale!r} is too large: outputs would overflow to inf in double "
            "precision (the noise scale times 64 must stay below 1.8e308); use a larger epsilon "
            "or a smaller clip"
        )


def check_epsilon_k(obj: Any, max_k: int = INT_MAX, epsilon_check: Any = private_epsilon) -> None:
    """Validate a frozen oracle's ``epsilon`` (``epsilon_check``) and domain size ``k`` (an
    integer in [2, max_k]) in place."""
    object.__setattr__(obj, "epsilon", epsilon_check(obj.epsilon))
    object.__setattr__(obj, "k", check_int(obj.k, "k", minimum=2, maximum=max_k))


def check_optional(obj: Any, name: str, check: Any, **kw: Any) -> None:
    """Validate a frozen ``obj``'s optional field ``name`` in place with ``check(value, name,
    **kw)``; None (a default worked out later) stays None."""
    if getattr(obj, name) is not None:
        object.__setattr__(obj, name, check(getattr(obj, name), name, **kw))


def check_dim(dim: Any) -> int:
    return check_int(dim, "dim", minimum=1)


def opposites(*points: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """The candidate pairs ``(v, -v)`` of ``points``, in their order."""
    return [(v, -v) for v in points]


def as_pair_batches(
    x: Any, x2: Any, y: Any, *, y_name: str = "y"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validate (x, x2, y) for ``privacy_loss``; x and x2 may be (1, d) and broadcast over y."""
    yb = check_batch(y, y_name)
    n = yb.shape[0]
    out = []
    for arr, name in ((x, "x"), (x2, "x2")):
        a = np.asarray(arr)
        if a.ndim == 1:
            a = a[None, :]
        out.append(one_or_n_rows(check_batch(a, name), name, n))
    return out[0], out[1], yb


def one_or_n_rows(a: np.ndarray, name: str, n: int) -> np.ndarray:
    """``a`` when it has 1 row (broadcast) or ``n`` (one per output), else an error."""
    if a.shape[0] not in (1, n):
        raise InvalidParameterError(
            f"{name} must have 1 or {n} rows (one per output), got shape {a.shape}"
        )
    return a


# ----------------------------------------------------------------------------------------------
# numerically safe clipping (inputs may be as large as 1e308 without overflow or NaN)
# ----------------------------------------------------------------------------------------------


def row_scale(x: np.ndarray) -> np.ndarray:
    """Max |x_ij| per row, shape (n, 1), with zero rows mapped to 1 (so x / scale is safe)."""
    m = np.abs(x).max(axis=1, keepdims=True)
    return np.where(m > 0, m, 1.0)


def _clip_rows(x: np.ndarray, bound: float, norm: Any) -> np.ndarray:
    """``g / max{1, norm(g) / bound}`` row-wise, without overflow for huge inputs (``norm``
    of an (n, d) array: one value per row)."""
    with np.errstate(over="ignore"):
        s = norm(x)
    if np.isfinite(s).all():  # fast path: one pass, rows inside the ball are returned exactly
        return x * np.minimum(1.0, bound / np.where(s > 0, s, bound))[:, None]
    m = row_scale(x)  # some row's norm overflowed: rescale by its largest entry first
    xs = x / m
    s = norm(xs)[:, None]  # in [1, d] (or 0): the row's norm is m * s
    with np.errstate(over="ignore"):
        over = (m * s) > bound  # m * s may be inf: then it is over
    scaled = xs * (bound / np.where(s > 0, s, 1.0))
    return np.where(over, scaled, x)


def clip_l1(x: np.ndarray, bound: float) -> np.ndarray:
    """Eq. 19: ``g / max{1, ||g||_1 / bound}`` row-wise, without overflow for huge inputs."""
    return _clip_rows(x, bound, lambda v: np.abs(v).sum(axis=1))


def clip_l2(x: np.ndarray, bound: float) -> np.ndarray:
    """``g / max{1, ||g||_2 / bound}`` row-wise, without overflow for huge inputs."""
    return _clip_rows(x, bound, lambda v: np.sqrt(np.einsum("ij,ij->i", v, v)))


def bitflip_log_probs(a: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """log P(+1) and log P(-1) of eq. 4 / eq. 24 for ``a = (x + 1) / 2`` in [0, 1].

    P(+1) = 1/(e^eps + 1) + a (e^eps - 1)/(e^eps + 1) = ((1 - a) + a e^eps) / (1 + e^eps), written
    in log space so that it stays exact for any finite eps (no overflow of e^eps).
    """
    with np.errstate(divide="ignore"):
        log_a = np.log(a)
        log_1ma = np.log1p(-a)
    norm_ = np.logaddexp(0.0, eps)
    log_plus = np.logaddexp(log_1ma, log_a + eps) - norm_
    log_minus = np.logaddexp(log_a, log_1ma + eps) - norm_
    return log_plus, log_minus


def bitflip_prob_plus(a: np.ndarray, eps: float) -> np.ndarray:
    """P(+1) of eq. 4 / eq. 24: ``1/(e^eps+1) + a (e^eps-1)/(e^eps+1)`` for a in [0, 1]."""
    return special.expit(-eps) + a * math.tanh(eps / 2.0)


# ----------------------------------------------------------------------------------------------
# base class
# ----------------------------------------------------------------------------------------------


class Mechanism(abc.ABC):
    """Common behaviour of the built-in mechanisms (a user's mechanism needs only ``epsilon``
    and ``privatize``)."""

    name: ClassVar[str] = "mechanism"

    @property
    def delta(self) -> float:
        """The delta of the guarantee: 0.0 for pure epsilon-LDP mechanisms."""
        return 0.0

    def to_config(self) -> dict[str, Any]:
        """JSON-able description with a ``"name"`` key; :func:`from_config` inverts it: the
        name, then every dataclass field in declaration order."""
        return {"name": self.name, **{f.name: getattr(self, f.name) for f in fields(self)}}  # type: ignore[arg-type]

    @abc.abstractmethod
    def privatize(self, x: Any, rng: np.random.Generator) -> np.ndarray:
        """Randomise each row of ``x`` (n, d) independently with ``rng``."""

    def event(self) -> DpEvent:
        """The accounting event of one report, charged on the release path
        (:func:`ldp_audit.accountant.event_for`): ``PureDpEvent(epsilon)`` here; a mechanism
        with a sharper analysis (Laplace, Gaussian) or none (``NoPrivacy``) overrides it."""
        from ldp_audit.accountant.events import PureDpEvent

        if self.delta != 0.0:
            raise InvalidParameterError(
                f"{type(self).__name__} has delta={self.delta!r} > 0: it must define event()"
            )
        return PureDpEvent(self.epsilon)
