"""Run-directory attacks of the shipped systems, with the one signature of
:attr:`ldp_audit.systems.System.attacks`::

    f(run_dir, *, seed=0, confidence=0.95, progress=False, **options) -> AttackResult

``options`` are the attack's own knobs (``n_shadow``, ``max_groups``, ...); ``ldp-audit attack
NAME --run-dir RUN`` calls the function its run's system registers under ``NAME``. Each reads
the run's transcript (what crossed the trust boundary) and opens ``secrets.npz`` only to score.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ldp_audit.errors import InvalidParameterError

__all__ = ["pgc_dynamics", "dprl_membership", "fedrl_transcript"]


def pgc_dynamics(
    run_dir: str | Path,
    *,
    seed: int = 0,
    confidence: float = 0.95,
    progress: bool = False,
    n_shadow: int = 1000,
    max_groups: int | None = 200,
    force: bool = False,
) -> Any:
    """Shadow-gradient dynamics inference on a PGC-A3C run (``attack dynamics --run-dir``;
    ``force``: past the memory limit of the shadows held at once,
    :func:`~ldp_audit.attacks.dynamics_run_dir.shadow_estimate`)."""
    from ldp_audit.attacks import dynamics_run_dir as D

    D.check_uniform_secrets(run_dir)  # before any work
    pred = D.attack_run_dir(
        run_dir, n_shadow=n_shadow, max_groups=max_groups, seed=seed, progress=progress, force=force
    )
    return D.score_run_dir(run_dir, pred, confidence=confidence)


def dprl_membership(
    run_dir: str | Path,
    *,
    seed: int = 0,
    confidence: float = 0.95,
    progress: bool = False,
) -> Any:
    """One-run canary audit of a DP-SGD run (white box; the black-box result in
    ``extra["black_box"]``), as ``attack membership --run-dir``."""
    from ldp_audit.attacks.one_run_dprl import dprl_evidence
    from ldp_audit.opacus.scoring import white_and_black

    return white_and_black(dprl_evidence(run_dir), confidence)


def fedrl_transcript(
    run_dir: str | Path,
    *,
    seed: int = 0,
    confidence: float = 0.95,
    progress: bool = False,
    audit_samples: int = 0,
) -> Any:
    """Both FedRL transcript attacks (beta's cells, alpha's rewards); the headline result. With
    ``audit_samples`` > 0 also a black-box audit of the (clipped) output mechanism beside it:
    ``extra["audit"]`` (its violation counts as the attack's) and its document as the run's
    ``audit.json`` (``extra["artefacts"]``, written by ``attack fedrl`` without ``--out``)."""
    from ldp_audit.attacks.fedrl import attack_run, to_attack_result
    from ldp_audit.rundir import RunDir

    if 0 < audit_samples < 1000:  # the audit's own minimum, refused before the attack runs
        raise InvalidParameterError(
            f"--audit-samples must be 0 (no audit) or >= 1000, got {audit_samples}"
        )
    res = attack_run(run_dir, seed=seed, confidence=confidence)
    mech = RunDir(run_dir).train_config.output_mechanism()
    if audit_samples > 0 and not mech.private:
        res["audit"] = {"skipped": f"no finite claim to audit: epsilon is {mech.why_infinite()}"}
    elif audit_samples > 0:
        from ldp_audit.audit import audit

        ar = audit(mech, mech.candidate_pairs(), samples=audit_samples, float_bits=False,
                   rng=seed, progress=progress)  # fmt: skip
        doc = {**ar.to_dict(), "mechanism_description": f"FedRL output mechanism: clip to "
               f"[-{mech.bound:g}, {mech.bound:g}]^16, N(0, {mech.sigma:g}^2)"}  # fmt: skip
        res["audit"] = {"violation": ar.violation, "summary": ar.summary()}
        res["artefacts"] = {"audit.json": [doc]}
    return to_attack_result(res, mech.to_config())  # the whole result is in its extra
