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

import json
from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit.errors import RunDirectoryError
from ldp_audit.rundir import RunWriter, json_number, read_npz
from ldp_audit.rundir import read_config as _read_config

__all__ = [
    "TRANSCRIPT_KEYS",
    "SECRET_KEYS",
    "open_ledger",
    "open_writer",
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


def _dir(path: str | Path) -> Path:
    p = Path(path)
    if not p.is_dir():
        raise RunDirectoryError(f"run_dir must be an existing directory, got {str(p)!r}")
    return p


def open_writer(path: str | Path, cfg: Any, seed: int, *, mode: str = "new") -> RunWriter:
    """Start a PGC-A3C run directory (config.json now; ledger, outputs and manifest later).

    ``mode``: "new" (the path must not exist or be empty), "overwrite", "resume"
    (:class:`ldp_audit.rundir.RunWriter`).
    """
    return RunWriter(
        path,
        algorithm="pgc-a3c",
        config=cfg.to_dict(),
        seed=int(seed),
        mechanism=cfg.make_mechanism().to_config(),
        mode=mode,
    )


def open_ledger(path: str | Path | RunWriter) -> Any:
    """The run's ``ledger.sqlite`` as an ``ldp_audit.accountant.Ledger``."""
    if isinstance(path, RunWriter):
        return path.open_ledger()
    from ldp_audit.accountant.ledger import Ledger

    p = Path(path)
    p.mkdir(parents=True, exist_ok=True)
    return Ledger(str(p / "ledger.sqlite"))


def write_run(path: str | Path | RunWriter, result: Any, *, status: str = "complete") -> Path:
    """Write transcript.npz, secrets.npz, metrics.json and model.npz of ``result``, then the
    manifest. ``path`` is the :class:`RunWriter` the run was started with (a plain path starts a
    new run directory, which must not exist or be empty).

    The ledger (ledger.sqlite) is written by the accountant during training.
    """
    from ldp_audit.training.pgc_a3c.metrics import first_success_time

    cfg = result.config
    w = path if isinstance(path, RunWriter) else open_writer(path, cfg, result.seed)
    if result.transcript is not None:
        w.write_npz("transcript.npz", result.transcript)
        w.write_npz("secrets.npz", result.secrets)
    zeta = np.asarray(result.zeta)
    fst = np.atleast_1d(first_success_time(zeta, cfg.target_score, cfg.window))
    w.write_json(
        "metrics.json",
        {
            "zeta": [z[: int(n)].tolist() for z, n in zip(zeta, result.submissions, strict=True)],
            "fst": [json_number(float(f)) for f in fst],
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
    w.write_npz("model.npz", {"theta": np.asarray(result.theta)})
    w.finish(status=status)
    return w.path


def read_config(path: str | Path) -> dict[str, Any]:
    """config.json as a dict (``config`` rebuilds with ``PgcA3cConfig.from_dict``)."""
    return _read_config(path)


def _read_npz(f: Path, required: tuple[str, ...]) -> dict[str, np.ndarray]:
    return read_npz(f.parent, f.name, required)


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
