"""The PGC-A3C network (section 4, "Implementation"): shapes, parameter packing, initialisation
and the greedy policy.

Parameters are packed as theta = [theta_c (16x4, row-major), theta_p (2x16), theta_v (1x16)],
d = 112, no biases; initialised Glorot-uniform (TensorFlow's default, the paper used TF 1.14).
The hidden layer is h = ReLU(theta_c s), the logits theta_p h and the value theta_v h.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError
from ldp_audit.training.pgc_a3c._kernels import act_and_record
from ldp_audit.validation import check_batch, check_rng

__all__ = ["DIM", "HIDDEN", "OBS_DIM", "N_ACTIONS", "init_theta", "unpack_theta", "greedy_actions"]

#: Shapes of the three weight matrices (section 4): theta_c 16x4, theta_p 2x16, theta_v 1x16.
HIDDEN, OBS_DIM, N_ACTIONS = 16, 4, 2
_SIZES = (HIDDEN * OBS_DIM, N_ACTIONS * HIDDEN, HIDDEN)
#: d = 112.
DIM = sum(_SIZES)


def glorot_uniform(
    rng: np.random.Generator, obs_dim: int, n_actions: int, hidden: int
) -> np.ndarray:
    """Glorot-uniform [theta_c (hidden x obs_dim), theta_p (n_actions x hidden), theta_v (1 x
    hidden)], flattened row-major and concatenated (shared with the Gymnasium trainer's
    :class:`ldp_audit.training.pgc_a3c_gym.model.Network`)."""
    parts = []
    for fan_out, fan_in in ((hidden, obs_dim), (n_actions, hidden), (1, hidden)):
        lim = math.sqrt(6.0 / (fan_in + fan_out))
        parts.append(rng.uniform(-lim, lim, size=fan_out * fan_in))
    return np.concatenate(parts)


def init_theta(rng: np.random.Generator) -> np.ndarray:
    """Glorot-uniform initial parameters (112,) in our packing [theta_c, theta_p, theta_v]."""
    return glorot_uniform(check_rng(rng), OBS_DIM, N_ACTIONS, HIDDEN)


def unpack_views(
    theta: np.ndarray, obs_dim: int, n_actions: int, hidden: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Views (B, hidden, obs_dim) theta_c, (B, n_actions, hidden) theta_p, (B, hidden) theta_v
    of a (B, d) batch packed [theta_c, theta_p, theta_v] (shared with the Gymnasium trainer)."""
    b = theta.shape[0]
    c, p = hidden * obs_dim, hidden * obs_dim + n_actions * hidden
    return (
        theta[:, :c].reshape(b, hidden, obs_dim),
        theta[:, c:p].reshape(b, n_actions, hidden),
        theta[:, p:].reshape(b, hidden),
    )


def unpack_theta(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Views (B,16,4) theta_c, (B,2,16) theta_p, (B,16) theta_v of a (B,112) parameter batch."""
    return unpack_views(theta, OBS_DIM, N_ACTIONS, HIDDEN)


def check_params(theta: Any, dim: int, name: str = "theta") -> np.ndarray:
    """A (B, dim) C-contiguous float64 batch of finite parameters (a (dim,) vector is one row)."""
    t = np.asarray(theta)
    return check_batch(t[None, :] if t.ndim == 1 else t, name, dim=dim)


def greedy_actions(theta: np.ndarray, obs: np.ndarray) -> np.ndarray:
    """argmax_a pi(a|s; theta) for rows of theta (B,112) and observations (B,4); ties -> 0.

    The observations are rounded to float32 first, as the engine does with the state."""
    t = check_params(theta, DIM)
    o = np.asarray(obs, dtype=np.float64)
    if o.shape != (t.shape[0], OBS_DIM):
        raise InvalidParameterError(
            f"obs must have shape ({t.shape[0]}, {OBS_DIM}), got shape {o.shape}"
        )
    b = t.shape[0]
    actions = np.empty(b, dtype=np.int64)
    zeros = np.zeros(b)
    act_and_record(
        np.ascontiguousarray(o.T),
        t,
        zeros,
        zeros,
        np.zeros(b, dtype=np.bool_),
        np.zeros(b, dtype=np.int64),
        np.empty((b, 1, OBS_DIM)),
        np.empty((b, 1), dtype=np.int8),
        actions,
        np.arange(b, dtype=np.int64),
    )
    return actions
