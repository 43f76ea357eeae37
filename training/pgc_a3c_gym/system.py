"""The ``pgc-a3c-gym`` system (:mod:`ldp_audit.systems`): PGC-A3C on any Gymnasium environment.

Declared with ``"module:attr"`` strings, so listing the systems imports neither the trainer nor
Gymnasium; the parts live in :mod:`ldp_audit.training.pgc_a3c_gym`. Its runs are
trained with ``ldp-audit train pgc-a3c --env ENV_ID --private-param NAME=V1,V2,...``
(docs/gymnasium.md)
and attacked with ``ldp-audit attack dynamics --run-dir RUN``
(:func:`ldp_audit.attacks.dynamics_run_dir.private_param_dynamics`).
"""

from __future__ import annotations

from ldp_audit.systems import Command, SystemSpec
from ldp_audit.training.systems import PGC_SCHEMA

__all__ = ["GYM_PGC"]

GYM_PGC = SystemSpec(
    name="pgc-a3c-gym",
    summary="PGC-A3C on any Gymnasium env with a Discrete or Box action space, one private "
    "parameter per agent (train pgc-a3c --env ENV --private-param NAME=V1,V2,...)",
    config="ldp_audit.training.pgc_a3c_gym.config:GymPgcConfig",
    trainer="ldp_audit.training.pgc_a3c_gym.trainer:_system_train",
    schema=PGC_SCHEMA,  # the PGC-A3C layout (d = hidden (obs + actions + 1) [+ actions])
    targets="ldp_audit.training.pgc_a3c_gym.trainer:_system_targets",
    charges="ldp_audit.training.systems:pgc_charges",  # one charge of <trial>/<agent> a report
    attacks={"dynamics": "ldp_audit.attacks.dynamics_run_dir:private_param_dynamics"},
    report_sections="ldp_audit.training.pgc_a3c.report:gym_report",  # PGC-A3C statement rows
    reproduce=None,
    cli="ldp_audit.training.pgc_a3c_gym.trainer:_system_cli",
    # trained by `train pgc-a3c --env ENV --private-param ...` (its config names this system)
    train_command=Command(
        out="runs/pgc-a3c",
        sizes="ldp_audit.training.pgc_a3c.command:sizes",
        show="ldp_audit.training.pgc_a3c.command:show_gym",
        set_option=False,
        flat_json=True,
        resume=False,  # the trainer refuses "resume": a non-empty --out suggests --overwrite only
    ),
    tiny_config={
        "env_id": "MountainCar-v0",
        "private_param": "force",
        "values": [0.0008, 0.0012],
        "mechanism": "laplace",
        "epsilon": 1.0,
        "trials": 2,
        "n_agents": 3,
        "max_submissions": 6,
        "episode_steps": 30,
    },
)
