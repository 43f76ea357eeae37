"""Attacks on locally private distributed RL, scored against the guarantee they attack.

Submodules:
    scoring: the accuracy ceiling e^eps/(e^eps + k - 1), composition, Clopper-Pearson epsilon
        lower bounds, the membership TPR ceiling and :class:`AttackResult`.
    dynamics: shadow-gradient dynamics inference (recover each agent's gravity from its noisy
        gradients), scikit-learn estimator :class:`ShadowGradientAttack`, one-shot ``run``,
        continuous variant, malicious aggregator (``craft_theta``), run-directory attack.
    membership: canary membership inference with one-run auditing (Steinke, Nasr & Jagielski
        2023); any trainer that writes a run directory plugs in.
    sweep: the eps x mechanism x reports sweep (``ldp-audit attack sweep``).

Attacks read only what crossed the trust boundary (the transcript, the broadcast thetas, the
mechanism's public parameters) and use the public MDP simulator
``ldp_audit.training.pgc_a3c.episode_gradients``; ground truth (``secrets.npz``) is read only to
score.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "AttackResult": "ldp_audit.attacks.scoring",
    "accuracy_ceiling": "ldp_audit.attacks.scoring",
    "ShadowGradientAttack": "ldp_audit.attacks.dynamics",
    "craft_theta": "ldp_audit.attacks.dynamics",
    "FixedThetaTrainer": "ldp_audit.attacks.membership",
    "TranscriptScorer": "ldp_audit.attacks.membership",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ldp_audit.attacks' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
