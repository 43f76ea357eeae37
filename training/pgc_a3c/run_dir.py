"""Write a PGC-A3C run directory (layout pinned in docs/interfaces.md).

::

    RUN_DIR/
      config.json      {"algorithm", "config", "mechanism", "seed", "versions", "created"}
      ledger.sqlite    the accountant's ledger; agent id = ``"<trial>/<agent>"``
      transcript.npz   what crossed the trust boundary, one row per submission in arrival order:
                       trial, agent, worker, round, submission, theta_index (N,) int64,
                       report (N, 112), score (N,), and thetas (V, 112)
      secrets.npz      ground truth for scoring attacks only: gravity (N,), gradient (N, 112)
                       (the clean, unclipped gradient), aligned with the transcript rows
      metrics.json     zeta per trial (list, only submissions made), fst, submissions, ...
      model.npz        theta (K, 112): the final global parameters per trial

Attacks and reports read it through :class:`ldp_audit.rundir.RunDir` (the transcript checked
against the system's schema); they never import the trainer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit.rundir import RunWriter, json_number
from ldp_audit.training.systems import PGC_SCHEMA

__all__ = ["TRANSCRIPT_KEYS", "cartpole_metrics", "open_writer", "stack_records", "write_run"]

#: The arrays of training.systems.PGC_SCHEMA in the order the engines record them (``thetas``
#: has V rows, the others N).
TRANSCRIPT_KEYS = tuple(a.name for a in PGC_SCHEMA.arrays)
#: the transcript's integer arrays (int64 when recorded)
_INT_KEYS = tuple(a.name for a in PGC_SCHEMA.arrays if a.kinds == "iu")


def stack_records(
    rec: dict[str, list[np.ndarray]], thetas: list[np.ndarray], dim: int
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The transcript and the secrets of an engine's records (key -> batches in arrival order,
    the transcript's keys first): every key concatenated (int64 for the schema's integer
    arrays, float64 otherwise; "report" and "gradient" (N, d)), the transcript's ``thetas``
    the broadcast snapshots stacked (V, d); every other key is a secret."""

    def cat(k: str) -> np.ndarray:
        dtype = np.int64 if k in _INT_KEYS else np.float64
        if rec[k]:
            return np.concatenate(rec[k]).astype(dtype)
        return np.zeros((0, dim) if k in ("report", "gradient") else (0,), dtype=dtype)

    transcript = {k: cat(k) for k in TRANSCRIPT_KEYS if k != "thetas"}
    transcript["thetas"] = np.array(thetas, dtype=np.float64).reshape(-1, dim)
    return transcript, {k: cat(k) for k in rec if k not in TRANSCRIPT_KEYS}


def open_writer(
    path: str | Path,
    cfg: Any,
    seed: int,
    *,
    mode: str = "new",
    algorithm: str = "pgc-a3c",
    extra: dict[str, Any] | None = None,
) -> RunWriter:
    """Start a PGC-A3C run directory (config.json now; ledger, outputs and manifest later).

    ``mode``: "new" (the path must not exist or be empty), "overwrite", "resume"
    (:class:`ldp_audit.rundir.RunWriter`). ``algorithm`` and ``extra`` (more config.json keys):
    the Gymnasium trainer's ("pgc-a3c-gym" and its ``private_parameter``).
    """
    return RunWriter(
        path,
        algorithm=algorithm,
        config=cfg.to_dict(),
        seed=int(seed),
        mechanism=cfg.make_mechanism().to_config(),
        mode=mode,
        extra=extra,
    )


def cartpole_metrics(result: Any) -> dict[str, Any]:
    """The CartPole engine's metrics.json keys between ``zeta`` and ``env_steps`` (FST per
    trial, eq. 26, and the settings it was measured with)."""
    from ldp_audit.training.pgc_a3c.metrics import first_success_time

    cfg = result.config
    fst = np.atleast_1d(first_success_time(np.asarray(result.zeta), cfg.target_score, cfg.window))
    return {
        "fst": [json_number(float(f)) for f in fst],
        "submissions": [int(n) for n in result.submissions],
        "stopped_at_target": [bool(b) for b in result.stopped_at_target],
        "max_submissions": int(cfg.max_submissions),
        "target_score": float(cfg.target_score),
        "window": int(cfg.window),
    }


def write_run(
    w: RunWriter, result: Any, metrics: dict[str, Any] | None, *, status: str = "complete"
) -> Path:
    """Write transcript.npz and secrets.npz of ``result`` (when recorded); with ``metrics``
    (metrics.json's keys between ``zeta`` and ``env_steps``: :func:`cartpole_metrics`, or the
    Gymnasium trainer's) metrics.json and model.npz; then the manifest. ``w`` is the
    :class:`RunWriter` the run was started with (:func:`open_writer`).

    The ledger (ledger.sqlite) is written by the accountant during training.
    """
    if result.transcript is not None:
        w.write_npz("transcript.npz", result.transcript)
        w.write_npz("secrets.npz", result.secrets)
    if metrics is not None:
        zeta, subs = np.asarray(result.zeta), result.submissions
        w.write_json(
            "metrics.json",
            {
                "zeta": [z[: int(n)].tolist() for z, n in zip(zeta, subs, strict=True)],
                **metrics,
                "env_steps": int(result.env_steps),
                "seconds": float(result.seconds),
                "privacy": result.privacy,
            },
        )
        w.write_npz("model.npz", {"theta": np.asarray(result.theta)})
    w.finish(status=status)
    return w.path
