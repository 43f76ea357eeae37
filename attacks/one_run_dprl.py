"""The one-run audit of a ``train dprl`` run (issue 36 item 7): its public parts read from the
run directory (scores never touch secrets.npz), its evidence for
:func:`ldp_audit.opacus.scoring.audit_evidence` (the same door as a user's Opacus loop), with
the canaries' black-box membership scores (the white-box ones are the audit's sums of the
released projections). The statistics are :mod:`ldp_audit.attacks.one_run`'s."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit.errors import RunDirectoryError

__all__ = ["dprl_evidence", "audit_run"]


def dprl_evidence(run_dir: str | Path) -> Any:
    """A dprl run's :class:`ldp_audit.opacus.scoring.Evidence`: the audit of ``train dprl``
    goes through the same door as a user's Opacus loop (its embedded ``CanaryAudit`` recorded
    the same per-update records). The claim is the run's DprlConfig (sigma, C, the expected
    batch, the rate ``q``) and the public directions are dense (:func:`canary_directions`)."""
    from ldp_audit.opacus.canaries import NOISE_SKETCH
    from ldp_audit.opacus.scoring import TRANSCRIPT_ARRAYS, Evidence
    from ldp_audit.rundir import RunDir
    from ldp_audit.training.dprl.privacy import canary_directions
    from ldp_audit.training.dprl.trainer import read_run

    run_dir = Path(run_dir)
    run = read_run(run_dir)
    cfg = run["config"]
    if cfg.canaries < 2:
        raise RunDirectoryError(
            f"run {str(run_dir)!r} has no canaries (trained with canaries={cfg.canaries}); "
            f"train with --canaries M to audit it in one run"
        )
    tr = RunDir(run_dir).arrays("transcript.npz", *TRANSCRIPT_ARRAYS)
    batch = cfg.envs if cfg.algo == "reinforce" else cfg.batch_size
    s = cfg.layer_sizes
    shapes = [sh for a, b in zip(s[:-1], s[1:], strict=False) for sh in ([b, a], [b])]
    claim = {
        "optimizer": f"train dprl {cfg.algo} (Opacus DPOptimizer)",
        "noise_multiplier": float(cfg.noise_multiplier),
        "max_grad_norm": float(cfg.clip),
        "expected_batch_size": int(batch),
        "loss_reduction": "mean",
        "sample_rate": float(cfg.sample_rate),
        "dataset_size": None,
        "n_params": int(cfg.n_params),
        "tensor_sizes": [int(np.prod(sh)) for sh in shapes],
        "tensor_shapes": shapes,
    }
    y = np.asarray(tr["canary_projection"], dtype=np.float64) * (batch / cfg.clip)
    why = (
        "REINFORCE uses every episode in exactly one update (q = 1): no sampling to test"
        if cfg.algo == "reinforce"
        else "the replay buffer fills during the run (the batch sizes are Bin(fill, q), not "
        "Bin(buffer_size, q)); the charged rate is checked by the ledger test"
    )
    return Evidence(
        run_dir=run_dir,
        config={
            "kind": "gradient",
            "canaries": int(cfg.canaries),
            "canary_scale": float(cfg.canary_scale),
            "canary_seed": int(cfg.canary_seed),
            "delta": float(cfg.delta),
            "noise_sketch": NOISE_SKETCH,
            "directions": "given",
            "claim": claim,
        },  # fmt: skip
        metrics=run["metrics"],
        transcript={**tr, "canary_projection": y},
        # black-box scores -<theta_T - theta_0, u_i> on the public directions
        black_box=-(np.asarray(run["model"]["params"]) - np.asarray(run["model"]["initial"]))
        @ canary_directions(cfg.n_params, cfg.canaries, cfg.canary_seed),
        algorithm="dprl",
        mechanism=cfg.mechanism_config(),
        not_sampled=why,
    )


def audit_run(run_dir: str | Path, *, setting: str = "white-box", confidence: float = 0.95) -> Any:
    """The one-run audit of a dprl run: :func:`ldp_audit.opacus.scoring.audit_evidence` of
    :func:`dprl_evidence`, the same tests, coverage and family bound as a user's Opacus loop
    (docs/opacus.md); ``violation`` is true when any test flags (``extra["flagged_by"]``), at
    most ``1 - confidence`` on a correct trainer (Bonferroni)."""
    from ldp_audit.opacus.scoring import audit_evidence, check_setting

    check_setting(setting)
    return audit_evidence(dprl_evidence(run_dir), setting=setting, confidence=confidence)
