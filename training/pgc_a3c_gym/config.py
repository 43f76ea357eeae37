"""The ``pgc-a3c-gym`` config: :class:`GymPgcConfig` (the environment, its private parameter
and PGC-A3C's hyper-parameters, checked once) and :func:`config_from_run`.

Part of :mod:`ldp_audit.training.pgc_a3c_gym` (overview in
:mod:`~ldp_audit.training.pgc_a3c_gym.trainer`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ldp_audit.config import bounds, config_from_dict
from ldp_audit.errors import InvalidParameterError
from ldp_audit.training.gym_envs import EnvInfo, check_private_param, import_env_module

# the config checks and paper defaults shared with the CartPole engine
from ldp_audit.training.pgc_a3c.config import SharedFields
from ldp_audit.training.pgc_a3c_gym.model import Network

__all__ = ["ALGORITHM", "GymPgcConfig", "config_from_run"]

#: ``config.json``'s ``algorithm`` of a run of this trainer.
ALGORITHM = "pgc-a3c-gym"


@dataclass(frozen=True, kw_only=True)
class GymPgcConfig(SharedFields):
    """A PGC-A3C run on a Gymnasium environment with one private parameter per agent.

    The privacy and learning hyper-parameters mean what they mean in
    :class:`ldp_audit.training.pgc_a3c.PgcA3cConfig` (paper defaults), and are checked by the
    same code (``ldp_audit.training.pgc_a3c.config``).
    """

    env_id: str
    """Gymnasium id (a ``Discrete``, ``MultiDiscrete``, ``MultiBinary`` or bounded ``Box`` action
    space; any observation Gymnasium can flatten)."""
    private_param: str
    """The attribute of ``env.unwrapped`` that is each agent's secret."""
    values: Sequence[float]
    """Its candidate values; each agent draws one uniformly (at least two, distinct; checked
    and kept as a tuple of floats by :func:`~ldp_audit.training.gym_envs.check_private_param`)."""
    env_module: str | None = None
    """A module to import first, which registers the environment (a user env)."""
    trials: int = 1
    """Independent training runs K (the paper's engine: 20)."""
    max_submissions: int = 2000
    """Submissions per trial before training stops."""
    eta: float = 0.5
    gamma: float = 0.99
    lam: float = 0.5
    beta: float = 0.01
    hidden: int = field(default=16, metadata=bounds(minimum=1))
    episode_steps: int | None = None
    """Episode cap (None: the env spec's ``max_episode_steps``, else 1000)."""
    alpha_start: float = 0.5
    alpha_decay: float = 1800.0
    acting: str = "argmax"
    budget: float | None = None
    probe_timeout: float = field(
        default=60.0, metadata=bounds(minimum=0, open_min=True, maximum=1e6)
    )
    """Seconds each call of the env's code may take in the parameter probe (an endless loop in
    its step is refused naming the call, not waited on forever)."""

    def __post_init__(self) -> None:
        self._check_shared()
        # the env, the parameter and every value, before any episode (names the bad one)
        info, vals = check_private_param(
            self.env_id,
            self.private_param,
            self.values,
            env_module=self.env_module,
            max_episode_steps=self.episode_steps,
            probe_timeout=self.probe_timeout,
        )
        object.__setattr__(self, "values", vals)
        object.__setattr__(self, "_info", info)

    # ------------------------------------------------------------------------------ derived
    @property
    def info(self) -> EnvInfo:
        """The validated environment's shapes (:class:`~ldp_audit.training.gym_envs.EnvInfo`)."""
        return self._info  # type: ignore[attr-defined]

    @property
    def network(self) -> Network:
        """The network sized from the spaces."""
        i = self.info
        return Network(i.obs_dim, i.n_actions, self.hidden, i.box, i.nvec)

    @property
    def steps(self) -> int:
        """The episode cap actually used (a spec's cap is >= 1, as Gymnasium's TimeLimit
        requires)."""
        return int(self.episode_steps or self.info.max_episode_steps or 1000)

    def private_parameter(self) -> dict[str, Any]:
        """``config.json``'s ``private_parameter`` record (read by the generic attack)."""
        return {
            "env_id": self.env_id,
            "name": self.private_param,
            "values": list(self.values),
            "env_module": self.env_module,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GymPgcConfig:
        """Inverse of :meth:`to_dict`. A config read from a run directory never imports code:
        its ``env_module`` must already be imported (see :func:`config_from_run`)."""
        import sys

        mod = d.get("env_module") if isinstance(d, Mapping) else None
        if isinstance(mod, str) and mod not in sys.modules:
            raise InvalidParameterError(
                f"{cls.__name__}: this config's environment is registered by the module "
                f"{mod!r}, which is not imported; import it first (CLI: --env-module {mod}, as "
                f"in `ldp-audit audit --run-dir RUN --env-module {mod}` or `ldp-audit attack "
                f"dynamics --run-dir RUN --env-module {mod}`): a config read from a run "
                "directory never imports code by itself"
            )
        return config_from_dict(cls, d, epsilon=math.inf)


def config_from_run(doc: dict[str, Any], env_module: str | None = None) -> GymPgcConfig:
    """The :class:`GymPgcConfig` of a run's ``config.json`` (its env module imported only if
    the caller names it: a run directory never makes this process import code)."""
    d = dict(doc["config"])
    want = d.get("env_module")
    if want is not None and env_module != want:
        raise InvalidParameterError(
            f"this run's environment is registered by the module {want!r}; pass "
            f"--env-module {want} to import it (a run directory never imports code by itself)"
        )
    import_env_module(env_module)
    return GymPgcConfig.from_dict(d)
