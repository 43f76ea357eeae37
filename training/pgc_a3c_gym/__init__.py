"""The ``pgc-a3c-gym`` system: PGC-A3C on any Gymnasium environment with a private parameter.

Its rooms:

- :mod:`~ldp_audit.training.pgc_a3c_gym.system`: the :class:`~ldp_audit.systems.SystemSpec`
  the registry lists (``"module:attr"`` strings only, so listing it imports nothing heavy);
- :mod:`~ldp_audit.training.pgc_a3c_gym.config`: :class:`GymPgcConfig` (checked by PGC-A3C's
  shared config code);
- :mod:`~ldp_audit.training.pgc_a3c_gym.model`: the network sized from the spaces, the episode
  gradient, the rollout and the attacker's simulator;
- :mod:`~ldp_audit.training.pgc_a3c_gym.engine`: the lock-step engine over a
  :class:`~ldp_audit.training.gym_envs.ParamVectorEnv`;
- :mod:`~ldp_audit.training.pgc_a3c_gym.trainer`: :func:`train` (the run directory) and the
  system's parts (the overview of the whole path is its docstring).

Arrows point one way: trainer -> engine -> model, config; config -> model.

It reuses PGC-A3C's privatisation, aggregator and report (:mod:`ldp_audit.training.pgc_a3c`);
this package's ``__init__`` imports nothing, so the registry can list the system cheaply.
"""
