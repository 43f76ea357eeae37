"""The ``pgc-a3c-gym`` system: PGC-A3C on any Gymnasium environment with a private parameter.

Its rooms:

- :mod:`~ldp_audit.training.pgc_a3c_gym.system`: the :class:`~ldp_audit.systems.SystemSpec`
  the registry lists (``"module:attr"`` strings only, so listing it imports nothing heavy);
- :mod:`~ldp_audit.training.pgc_a3c_gym.trainer`: :class:`GymPgcConfig`, the network sized from
  the spaces, the episode gradient, :func:`train` and the system's parts;
- :mod:`~ldp_audit.training.pgc_a3c_gym.engine`: the lock-step engine over a
  :class:`~ldp_audit.training.gym_envs.ParamVectorEnv`.

It reuses PGC-A3C's privatisation, aggregator and report (:mod:`ldp_audit.training.pgc_a3c`);
this package's ``__init__`` imports nothing, so the registry can list the system cheaply.
"""
