"""DP-SGD and observation-noise RL on CartPole-v1 (Doulazmi & Odonnat slides), one room each:

- :mod:`~ldp_audit.training.dprl.config` — ``DprlConfig`` (every check, no torch);
- :mod:`~ldp_audit.training.dprl.trainer` — ``train`` (one run: ledger, run directory, result),
  ``read_run``, the presets;
- :mod:`~ldp_audit.training.dprl.algos` — ``train_reinforce`` and ``train_dqn``, each readable
  top to bottom (CleanRL style), the networks and ``DprlResult``;
- :mod:`~ldp_audit.training.dprl.privacy` — the DP-SGD update (Opacus), gradient canaries,
  observation release, trainer hooks;
- :mod:`~ldp_audit.training.dprl.obs_noise` — observation-noise "LDP" (a Gymnasium wrapper);
- :mod:`~ldp_audit.training.dprl.report` — the ``dprl`` sections of ``ldp-audit report``;
- :mod:`~ldp_audit.training.dprl.reproduce` (with ``reproduce_runs`` and ``reproduce_report``) —
  ``ldp-audit reproduce dprl``.

Importing this package loads nothing: import from the room that defines a name
(``from ldp_audit.training.dprl.trainer import train``).
"""
