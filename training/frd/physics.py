"""Per-agent CartPole constants for the FRD engine (a private parameter other than gravity).

:class:`ldp_audit.training.cartpole.PrivateGravityCartPole` steps Gymnasium's vectorised
``CartPoleVectorEnv`` physics, whose step broadcasts every constant it reads (``gravity``,
``masscart``, ``masspole``, ``total_mass``, ``length``, ``polemass_length``, ``force_mag``) over
the rows. The wrapper sets a per-row gravity; :func:`set_row_constants` sets the others per row
too, with the two quantities CartPole derives in its constructor (``total_mass = masspole +
masscart``, ``polemass_length = masspole * length``) recomputed from them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError
from ldp_audit.training.frd.config import PRIVATE_PARAMS

__all__ = ["set_row_constants"]


def set_row_constants(env: Any, values: Mapping[str, Any]) -> None:
    """Give each row of ``env`` (a ``PrivateGravityCartPole`` of N rows) its own constants:
    ``values[name]`` is an (N,) array of finite values > 0 for every name of
    :data:`~ldp_audit.training.frd.config.PRIVATE_PARAMS` (the constants of the equations of
    motion; gravity included: the wrapper's reset writes it per row)."""
    inner = getattr(env, "_env", None)
    if inner is None or not hasattr(inner, "polemass_length"):
        raise InvalidParameterError(
            f"env must be a PrivateGravityCartPole (Gymnasium's CartPoleVectorEnv inside), got "
            f"{type(env).__name__}"
        )
    n = int(env.num_envs)
    arr: dict[str, np.ndarray] = {}
    for name in PRIVATE_PARAMS:
        if name not in values:
            raise InvalidParameterError(f"values must give {name!r} per row, got {sorted(values)}")
        a = np.asarray(values[name], dtype=np.float64)
        if a.shape != (n,) or not np.all(np.isfinite(a)) or np.any(a <= 0):
            raise InvalidParameterError(
                f"{name} must be ({n},) finite values > 0, got {values[name]!r}"
            )
        arr[name] = a.copy()
    for name, a in arr.items():
        setattr(inner, name, a)
    inner.total_mass = arr["masspole"] + arr["masscart"]
    inner.polemass_length = arr["masspole"] * arr["length"]
