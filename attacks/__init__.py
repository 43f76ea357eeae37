"""Attacks on locally private distributed RL, scored against the guarantee they attack.

Submodules:
    scoring: the accuracy ceiling e^eps/(e^eps + k - 1), composition, Clopper-Pearson epsilon
        lower bounds, the membership TPR ceiling and :class:`AttackResult`.
    dynamics_shadow, dynamics_experiment, dynamics_run_dir: shadow-gradient dynamics inference
        (recover each agent's gravity from its noisy gradients): the scikit-learn estimator
        :class:`ShadowGradientAttack` and the threat model; one-shot ``run``, continuous
        variant, malicious aggregator (``craft_theta``); the run-directory attacks.
    membership: canary membership inference with one-run auditing (Steinke, Nasr & Jagielski
        2023); any trainer that writes a run directory plugs in.
    sweep: the eps x mechanism x reports sweep (``ldp-audit attack sweep``).

Attacks read only what crossed the trust boundary (the transcript, the broadcast thetas, the
mechanism's public parameters) and use the public MDP simulator
``ldp_audit.training.pgc_a3c.episode_gradients``; ground truth (``secrets.npz``) is read only to
score. Each name is imported from the submodule that defines it.
"""
