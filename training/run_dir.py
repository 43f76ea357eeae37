"""Write and read a PGC-A3C run directory (layout pinned in docs/interfaces.md).

::

    RUN_DIR/
      config.json      {"algorithm", "config", "mechanism", "seed", "versions", "created"}
      ledger.sqlite    the accountant's ledger; agent id = "<trial>/<agent>"
      transcript.npz   what crossed the trust boundary, one row per submission in arrival order:
                       trial, agent, worker, round, submission, theta_index (N,) int64,
                       report (N, 112), score (N,), and thetas (V, 112)
      secrets.npz      ground truth for scoring attacks only: gravity (N,), gradient (N, 112)
                       (the clean, unclipped gradient), aligned with the transcript rows
      metrics.json     zeta per trial (list, only submissions made), fst, submissions, ...
      model.npz        theta (K, 112): the final global parameters per trial

Attacks and reports read through :func:`read_transcript`, :func:`read_secrets`,
:func:`read_config`, :func:`read_metrics` and :func:`read_model`; they never import the trainer.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit.errors import RunDirectoryError

__all__ = [
    "TRANSCRIPT_KEYS",
    "SECRET_KEYS",
    "open_ledger",
    "write_run",
    "read_config",
    "read_transcript",
    "read_secrets",
    "read_metrics",
    "read_model",
]

#: Arrays of transcript.npz (``thetas`` has V rows; the others one row per submission).
TRANSCRIPT_KEYS = (
    "trial",
    "agent",
    "worker",
    "round",
    "submission",
    "theta_index",
    "report",
    "score",
    "thetas",
)
_REQUIRED_TRANSCRIPT = ("trial", "agent", "submission", "theta_index", "report", "score", "thetas")
#: Arrays of secrets.npz.
SECRET_KEYS = ("gravity", "gradient")


def _dir(path: str | Path, *, create: bool = False) -> Path:
    p = Path(path)
    if create:
        p.mkdir(parents=True, exist_ok=True)
    elif not p.is_dir():
        raise RunDirectoryError(f"run_dir must be an existing directory, got {str(p)!r}")
    return p


def open_ledger(path: str | Path) -> Any:
    """The run's ``ledger.sqlite`` as an ``ldp_audit.accountant.Ledger`` (created if missing)."""
    from ldp_audit.accountant.ledger import Ledger

    return Ledger(str(_dir(path, create=True) / "ledger.sqlite"))


def _versions() -> dict[str, str]:
    import gymnasium
    import scipy

    import ldp_audit

    return {
        "ldp_audit": getattr(ldp_audit, "__version__", "unknown"),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "gymnasium": gymnasium.__version__,
        "python": platform.python_version(),
    }


def _atomic_json(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, allow_nan=False))
    os.replace(tmp, path)


def _atomic_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez_compressed(tmp, **arrays)
    os.replace(tmp, path)


def _json_num(v: float) -> float | str | None:
    if math.isnan(v):
        return None
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return float(v)


def write_run(path: str | Path, result: Any) -> Path:
    """Write config.json, transcript.npz, secrets.npz, metrics.json and model.npz of ``result``.

    The ledger (ledger.sqlite) is written by the accountant during training.
    """
    from ldp_audit.training.metrics import first_success_time

    p = _dir(path, create=True)
    cfg = result.config
    _atomic_json(
        p / "config.json",
        {
            "algorithm": "pgc-a3c",
            "config": cfg.to_dict(),
            "mechanism": cfg.make_mechanism().to_config(),
            "seed": int(result.seed),
            "versions": _versions(),
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(),
        },
    )
    if result.transcript is not None:
        _atomic_npz(p / "transcript.npz", result.transcript)
        _atomic_npz(p / "secrets.npz", result.secrets)
    zeta = np.asarray(result.zeta)
    fst = np.atleast_1d(first_success_time(zeta, cfg.target_score, cfg.window))
    _atomic_json(
        p / "metrics.json",
        {
            "zeta": [z[: int(n)].tolist() for z, n in zip(zeta, result.submissions, strict=True)],
            "fst": [_json_num(float(f)) for f in fst],
            "submissions": [int(n) for n in result.submissions],
            "stopped_at_target": [bool(b) for b in result.stopped_at_target],
            "max_submissions": int(cfg.max_submissions),
            "target_score": float(cfg.target_score),
            "window": int(cfg.window),
            "env_steps": int(result.env_steps),
            "seconds": float(result.seconds),
            "privacy": result.privacy,
        },
    )
    _atomic_npz(p / "model.npz", {"theta": np.asarray(result.theta)})
    return p


def read_config(path: str | Path) -> dict[str, Any]:
    """config.json as a dict (``config`` rebuilds with ``PgcA3cConfig.from_dict``)."""
    f = _dir(path) / "config.json"
    try:
        d = json.loads(f.read_text())
    except (OSError, ValueError) as exc:
        raise RunDirectoryError(f"cannot read {f}: {exc}") from None
    for k in ("algorithm", "config", "mechanism", "seed"):
        if k not in d:
            raise RunDirectoryError(f"{f} lacks the key {k!r}")
    return d


def _read_npz(f: Path, required: tuple[str, ...]) -> dict[str, np.ndarray]:
    try:
        with np.load(f, allow_pickle=False) as z:
            out = {k: z[k] for k in z.files}
    except (OSError, ValueError) as exc:
        raise RunDirectoryError(f"cannot read {f}: {exc}") from None
    missing = [k for k in required if k not in out]
    if missing:
        raise RunDirectoryError(f"{f} lacks the arrays {missing}")
    return out


def read_transcript(path: str | Path) -> dict[str, np.ndarray]:
    """transcript.npz as a dict of arrays, shapes checked against each other."""
    f = _dir(path) / "transcript.npz"
    t = _read_npz(f, _REQUIRED_TRANSCRIPT)
    n = t["report"].shape[0]
    for k in ("trial", "agent", "submission", "theta_index", "score"):
        if t[k].shape != (n,):
            raise RunDirectoryError(f"{f}: {k} has shape {t[k].shape}, expected ({n},)")
    if t["report"].ndim != 2 or t["thetas"].ndim != 2:
        raise RunDirectoryError(f"{f}: report and thetas must be 2-D")
    if n and (t["theta_index"].min() < 0 or t["theta_index"].max() >= t["thetas"].shape[0]):
        raise RunDirectoryError(f"{f}: theta_index points outside thetas")
    return t


def read_secrets(path: str | Path) -> dict[str, np.ndarray]:
    """secrets.npz (ground truth for scoring only: gravity, clean gradient)."""
    return _read_npz(_dir(path) / "secrets.npz", ("gravity",))


def read_metrics(path: str | Path) -> dict[str, Any]:
    """metrics.json as a dict; ``zeta`` lists are per trial (only the submissions made)."""
    f = _dir(path) / "metrics.json"
    try:
        return json.loads(f.read_text())
    except (OSError, ValueError) as exc:
        raise RunDirectoryError(f"cannot read {f}: {exc}") from None


def read_model(path: str | Path) -> np.ndarray:
    """model.npz's theta (K, 112)."""
    return _read_npz(_dir(path) / "model.npz", ("theta",))["theta"]
