"""The gradient of the PGC-A3C episode loss L = L_p + lambda L_v (eqs. 12-18), by hand.

:func:`loss_gradients` is the engine's own code path (the compiled
:func:`ldp_audit.training.pgc_a3c._kernels.episode_gradients_kernel`). The batched NumPy
formulation (any number of actions) is the Gymnasium trainer's
(:func:`ldp_audit.training.pgc_a3c_gym.model.loss_gradients`) and, with two actions, the
reference the kernel is checked against (``loss_gradients_numpy`` in
``benchmarks/reference_pgc.py``: they agree to 1e-11 relative, measured about 1e-15). Both equal
torch autograd of ``benchmarks/reference_pgc.py`` (tests/test_pgc_a3c.py).

The loss sums run over the T_n steps at which an action was taken. The target of eq. 18 is
V_hat(s_t) = sum_{j=t}^{T-1} gamma^{j-t} r_j + gamma^{T-t} V(s_T), the discount on the bootstrap
taken from eq. 12 so that A(s_t) = V_hat(s_t) - V(s_t) (eq. 12 and eq. 18 then agree); V(s_T) is
0 when the pole fell (a terminal state has value 0, eq. 8) and the network's value when the
episode was cut. Advantage and target are constants (no gradient). ``target="literal-eq18"``
is eq. 18 as printed (+ V(s_T), undiscounted, also after a failure), an ablation.
"""

from __future__ import annotations

import numpy as np

from ldp_audit.errors import InvalidParameterError
from ldp_audit.training.pgc_a3c._kernels import episode_gradients_kernel
from ldp_audit.training.pgc_a3c.config import TARGETS
from ldp_audit.training.pgc_a3c.model import DIM, OBS_DIM, check_params
from ldp_audit.validation import check_choice

__all__ = ["loss_gradients"]


def loss_gradients(
    theta: np.ndarray,
    obs: np.ndarray,
    actions: np.ndarray,
    rewards: np.ndarray,
    lengths: np.ndarray,
    bootstrap: np.ndarray,
    *,
    gamma: float | np.ndarray = 0.99,
    lam: float | np.ndarray = 0.5,
    beta: float | np.ndarray = 0.01,
    target: str = "engine",
) -> np.ndarray:
    """Gradient of the episode loss L = L_p + lambda L_v (eqs. 15-18) per row, by hand.

    The engine's own code path
    (:func:`ldp_audit.training.pgc_a3c._kernels.episode_gradients_kernel`): a row's result
    never depends on the other rows or on how far the inputs were padded.

    Args:
        theta: (M, 112) parameters each episode was played with.
        obs: (M, L+1, 4) observations s_0..s_L (row m valid up to ``lengths[m]``, inclusive).
        actions: (M, L) actions a_0..a_{L-1}.
        rewards: (M, L) rewards r_0..r_{L-1}.
        lengths: (M,) T_m >= 1, the number of actions taken in row m's episode.
        bootstrap: (M,) True where the episode was cut (use V(s_T)), False where it terminated
            (V(s_T) = 0).
        gamma, lam, beta: scalars or (M,) per row.
        target: "engine" (eq. 18 with the bootstrap discounted as in eq. 12, V(s_T) = 0 after a
            failure) or "literal-eq18" (eq. 18 as printed: + V(s_T), undiscounted, always).

    Returns:
        (M, 112) gradients dL/dtheta in our packing.
    """
    check_choice(target, "target", TARGETS)
    theta = check_params(theta, DIM)
    # the shapes and values of the episode batch
    m = theta.shape[0]
    a = np.asarray(actions)
    if a.ndim != 2 or a.shape[0] != m:
        raise InvalidParameterError(f"actions must have shape ({m}, L), got shape {a.shape}")
    big_l = a.shape[1]
    ln = np.asarray(lengths)
    if ln.shape != (m,) or ln.min() < 1 or ln.max() > big_l:
        raise InvalidParameterError(f"lengths must be (M,) in [1, {big_l}], got {lengths!r}")
    if not np.isin(a, (0, 1)).all():
        raise InvalidParameterError("actions must be 0 or 1")
    o = np.asarray(obs)
    if o.ndim != 3 or o.shape[0] != m or o.shape[2] != OBS_DIM or o.shape[1] <= ln.max():
        raise InvalidParameterError(
            f"obs must have shape ({m}, >= {int(ln.max()) + 1}, {OBS_DIM}), got shape {o.shape}"
        )
    r = np.asarray(rewards)
    if r.ndim != 2 or r.shape[0] != m or r.shape[1] < ln.max():
        raise InvalidParameterError(
            f"rewards must have shape ({m}, >= {int(ln.max())}), got shape {r.shape}"
        )
    if not (np.all(np.isfinite(o)) and np.all(np.isfinite(r))):
        raise InvalidParameterError("obs and rewards must be finite")
    if np.shape(bootstrap) != (m,):
        raise InvalidParameterError(
            f"bootstrap must have shape ({m},), got shape {np.shape(bootstrap)}"
        )
    per = [
        np.ascontiguousarray(np.broadcast_to(np.asarray(x, dtype=np.float64), (m,)))
        for x in (gamma, lam, beta)
    ]
    out = np.empty((m, DIM))
    episode_gradients_kernel(
        theta,
        np.arange(m, dtype=np.int64),
        np.ascontiguousarray(obs, dtype=np.float64),
        np.ascontiguousarray(actions, dtype=np.int8),
        np.ascontiguousarray(rewards, dtype=np.float64),
        np.ascontiguousarray(lengths, dtype=np.int64),
        np.ascontiguousarray(bootstrap, dtype=np.bool_),
        (*per, np.full(m, target == "literal-eq18", dtype=np.bool_)),
        out,
        np.empty(m),
    )
    return out
