"""What the Flower client mod and the server agree on: settings, the release record, the flat
vector.

Shared by the client side (:mod:`~ldp_audit.training.flower.client`: the mod that releases
every train reply) and the server side (:mod:`~ldp_audit.training.flower.server`: the
strategy that checks and records the releases); docs/flower.md lists the run-config keys each
side reads (the client's: ``ldp-mechanism``, ``ldp-budget``, ``ldp-release`` (a node config
may pin these three), ``ldp-ledger-dir``, ``ldp-public-metrics``, ``ldp-arrays-key``; the
server's: ``run-dir``, ``overwrite``, ``num-server-rounds``, ``min-nodes``, ``timeout``).
Here: the parsing of the ``ldp-mechanism`` and ``ldp-budget`` settings (the same rules on
both sides), the check of a reply's release record, and the model's arrays as one flat
float64 vector (what is released) and back.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError
from ldp_audit.validation import check_bool, check_int, check_real, check_real_in

__all__ = [
    "RELEASES",
    "require_flwr",
    "agent_rng",
    "sealed_report",
    "flatten",
    "unflatten",
    "mechanism_from",
    "budget_from",
    "server_settings",
    "absolute_folder",
]

#: What a client may release (``ldp-release``): its update or its parameters.
RELEASES = ("update", "parameters")


def require_flwr() -> Any:
    """The ``flwr`` package (an optional extra); InvalidParameterError saying how to install it."""
    try:
        import flwr
    except ImportError:
        raise InvalidParameterError(
            "the Flower integration needs Flower: pip install 'ldp-audit[flower]' "
            "(flwr[simulation]==1.41.0)"
        ) from None
    return flwr


def agent_rng(seed: int | None, *key: int) -> np.random.Generator:
    """A client's own generator: ``SeedSequence(seed, spawn_key=key)``, or OS entropy without a
    seed (nobody, the server included, can replay it)."""
    return np.random.default_rng(
        None if seed is None else np.random.SeedSequence(seed, spawn_key=key)
    )


def sealed_report(
    content: Any, report: str, release: str, mechanism: Mapping[str, Any], epsilon: float, d: int
) -> np.ndarray:
    """The noisy report (``d`` finite float64 values, ArrayRecord ``report``) of a reply whose
    release record (ConfigRecord ``release``) is sealed, of the declared mechanism's config and
    epsilon (to 1e-12), or InvalidParameterError saying what differs."""
    if report not in content.array_records or release not in content.config_records:
        raise InvalidParameterError("reply has no sealed report (the release mod did not run)")
    rel = content[release]
    if rel.get("sealed") is not True:
        raise InvalidParameterError("reply's release is not sealed")
    # a client's record, checked, not coerced: a missing key or a mechanism that is not JSON
    # raised KeyError / JSONDecodeError out of the server's round (one reply ended the run),
    # and an epsilon '2.0' or True was read as a number (session 58 probe)
    try:
        got = json.loads(rel.get("mechanism")) if isinstance(rel.get("mechanism"), str) else None
    except ValueError:
        got = None
    if got != mechanism:
        raise InvalidParameterError(
            f"reply's mechanism {rel.get('mechanism')!r} differs from the declared {mechanism}"
        )
    eps = check_real(rel.get("epsilon"), "reply's epsilon")
    if not (eps == epsilon or math.isclose(eps, epsilon, rel_tol=1e-12)):
        raise InvalidParameterError(f"reply's epsilon {eps!r} differs from {epsilon!r}")
    y = np.asarray(content[report].to_numpy_ndarrays()[0], dtype=np.float64).reshape(-1)
    if y.shape != (d,) or not np.all(np.isfinite(y)):
        raise InvalidParameterError(
            f"reply's report must be {d} finite values, got shape {y.shape}"
        )
    return y


# ==============================================================================================
# Arrays <-> one flat vector
# ==============================================================================================


def flatten(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """Concatenate arrays (in order) into one float64 vector."""
    if not arrays:
        raise InvalidParameterError("the model has no arrays to release")
    parts = []
    for i, a in enumerate(arrays):
        a = np.asarray(a)
        if a.dtype.kind not in "fiu":
            raise InvalidParameterError(f"array {i} must be numeric, got dtype {a.dtype}")
        parts.append(a.astype(np.float64).reshape(-1))
    return np.concatenate(parts)


def unflatten(vector: np.ndarray, like: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Split ``vector`` into arrays shaped and typed like ``like`` (the inverse of flatten)."""
    out, i = [], 0
    for a in like:
        a = np.asarray(a)
        n = a.size
        out.append(np.asarray(vector[i : i + n]).reshape(a.shape).astype(a.dtype))
        i += n
    if i != np.asarray(vector).size:
        raise InvalidParameterError(f"vector has {np.asarray(vector).size} values, model {i}")
    return out


# ==============================================================================================
# Settings read from the run config and the node config
# ==============================================================================================


def mechanism_from(text: Any, where: str) -> Any:
    """The mechanism of an ``ldp-mechanism`` setting (a JSON str or a mapping); ``where`` names
    the config it came from in the error."""
    from ldp_audit.mechanisms import from_config

    if isinstance(text, Mapping):
        cfg = dict(text)
    elif isinstance(text, str):
        try:
            cfg = json.loads(text)
        except json.JSONDecodeError:
            raise InvalidParameterError(
                f"{where} 'ldp-mechanism' must be a mechanism config as JSON "
                f'(e.g. {{"name": "laplace", "epsilon": 1.0, "clip": 1.0}}), got {text!r}'
            ) from None
    else:
        raise InvalidParameterError(f"{where} 'ldp-mechanism' must be a JSON str, got {text!r}")
    return from_config(cfg)


def budget_from(value: Any, where: str) -> float:
    """An ``ldp-budget`` setting as a finite float > 0 (a number or a numeric str; bool refused:
    an infinite budget is no budget, and every client's ledger would refuse it)."""
    b = math.nan
    if not isinstance(value, bool) and isinstance(value, (int, float, str)):
        try:
            b = float(value)
        except ValueError:
            pass
    if not 0 < b < math.inf:  # NaN included
        raise InvalidParameterError(
            f"{where} 'ldp-budget' must be a finite number > 0, got {value!r}"
        )
    return b


def server_settings(rc: Mapping[str, Any]) -> tuple[int, float, bool]:
    """A run config's ``seed`` (int >= 0, default 0), ``timeout`` (seconds > 0, default 600)
    and ``overwrite`` (bool, default false), checked: both apps' servers read them."""
    return (
        check_int(rc.get("seed", 0), "run config 'seed'", minimum=0),
        check_real_in(rc.get("timeout", 600.0), "run config 'timeout'", lo=0.0, lo_open=True),
        check_bool(rc.get("overwrite", False), "run config 'overwrite'"),
    )


def absolute_folder(value: Any, name: str) -> str:
    """A folder setting (``run-dir``, a ledger folder): a non-empty absolute path, since Flower
    runs every app in a process whose working folder is not the user's; else
    InvalidParameterError naming ``name`` and the value."""
    if not isinstance(value, str) or not value or not os.path.isabs(value):
        raise InvalidParameterError(
            f"{name} must be an absolute path to a folder (Flower runs the app in a process "
            f"whose working folder is not yours), got {value!r}"
        )
    return value
