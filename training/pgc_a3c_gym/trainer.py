"""PGC-A3C on any Gymnasium environment (Discrete, MultiDiscrete, MultiBinary or Box actions,
or a Tuple or Dict of them) with a private parameter.

The generic path of ``ldp-audit train pgc-a3c --env ENV_ID --private-param NAME=V1,V2,...``
(docs/gymnasium.md). It is Ono & Takahashi's (2020) Algorithms 1-3 exactly as
:mod:`ldp_audit.training.pgc_a3c` runs them on CartPole, with three things generalised:

- **the task**: each agent's environment is ``gymnasium.make(env_id)`` with one attribute of
  ``env.unwrapped`` set to the agent's private value, drawn uniformly (seeded) from the
  candidates; the agents of all trials step together through one
  :class:`~ldp_audit.training.gym_envs.ParamVectorEnv` (Gymnasium's vector API: native NumPy
  physics for Acrobot and MountainCar, ``SyncVectorEnv`` for anything else);
- **the network**, sized from the spaces: the paper's two-layer net without biases,
  ``h = ReLU(theta_c s)`` (hidden x obs_dim), logits ``theta_p h`` (n_actions x hidden),
  value ``theta_v h``; packed ``[theta_c, theta_p, theta_v]``, d = hidden (obs_dim +
  n_actions + 1), Glorot-uniform; a ``Box`` action space (n_actions its dimensions) gets a
  diagonal-Gaussian head: the mean ``theta_p h`` and one learned log-std per dimension packed
  last (d + n_actions, starting at 0); an observation other than a ``Box`` goes through
  Gymnasium's ``FlattenObservation`` (``Discrete``: one-hot);
- **the episode loss** (eqs. 15-18) over ``n_actions`` actions, by hand in NumPy (checked
  against torch autograd in tests/test_gym_pgc.py; the same function,
  ``ldp_audit.training.pgc_a3c_gym.model.loss_gradients``, is the reference the CartPole
  engine's compiled gradient is checked against): ``dL/dz_t = -A_t (onehot(a_t) - pi_t) + beta
  pi_t (log pi_t + H_t)``, ``dL/dV_t = -2 lambda A_t``, with ``A_t = V_hat_t - V(s_t)`` and
  ``V_hat_t = sum_{j>=t} gamma^{j-t} r_j + gamma^{T-t} V(s_T)`` (V(s_T) = 0 when the episode
  terminated, the network's value when it was cut).

Acting: one uniform u per agent-step; explore iff u < alpha (then the action is
``floor(u / alpha * n_actions)``), else argmax pi (ties to the lowest index) or, with
``acting="sample"``, the inverse CDF of pi at ``(u - alpha) / (1 - alpha)``. A ``Box``: one
more uniform per dimension; explore: ``low + u (high - low)``, else the mean (``sample``: mean +
std N^-1(u)); the env is sent the action clipped to the bounds, the loss sees it unclipped (as
Stable-Baselines3 and CleanRL do). alpha =
max(0, alpha_start - n / alpha_decay) with n the trial's submissions so far.

Privacy: every report goes through :func:`ldp_audit.training.pgc_a3c.privacy.privatize_reports`,
i.e. :func:`ldp_audit.release.release_many`: the agent's ledger entry is charged durably, then the
report is randomised (Laplace, Alg. 2; PRS, Alg. 3; the non-private baseline is L1-clipped to C/2 =
5), then sealed; the aggregator (eq. 22, :class:`~ldp_audit.training.pgc_a3c.aggregator.Aggregator`)
accepts sealed reports only. The run directory (``algorithm: "pgc-a3c-gym"``) records the env id,
the parameter and its candidates in ``config.json`` (``private_parameter``), the transcript in the
PGC-A3C layout, and the secret value per report in ``secrets.npz`` (``value``).

Randomness: ``seed`` -> ``SeedSequence(seed, spawn_key=(0, k))`` per trial k (initial theta,
acting uniforms, values and reset seeds) and ``spawn_key=(1,)`` for the mechanism noise.
CartPole with its ``gravity`` is the paper's own task: the CLI sends it to the fused CartPole
engine (:mod:`ldp_audit.training.pgc_a3c`), whose results stay bit for bit what they were.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from ldp_audit.errors import InvalidParameterError
from ldp_audit.training.pgc_a3c.config import TrainResult
from ldp_audit.training.pgc_a3c_gym.config import ALGORITHM, GymPgcConfig
from ldp_audit.training.pgc_a3c_gym.engine import Engine
from ldp_audit.validation import check_bool, check_int

__all__ = ["train"]


def train(
    cfg: GymPgcConfig,
    *,
    seed: int = 0,
    run_dir: str | Path | None = None,
    ledger: Any = None,
    progress: bool = False,
    transcript: bool | None = None,
    overwrite: bool = False,
) -> TrainResult:
    """Run ``cfg.trials`` seeded PGC-A3C trials on ``cfg.env_id`` with private parameters.

    Args:
        cfg: the config (its env, parameter and values were validated when it was built).
        seed: the run's seed.
        run_dir: if given, write a run directory (``config.json`` first, the ledger charged
            during training, then transcript.npz, secrets.npz, metrics.json, model.npz and the
            manifest); the path must be new or empty (``overwrite=True`` replaces a run).
        ledger: an ``ldp_audit.accountant.Ledger`` to charge (default: the run's
            ``ledger.sqlite``, else an in-process tally).
        progress: a tqdm bar on stderr (submissions).
        transcript: record the transcript (default: when ``run_dir`` is given).
        overwrite: replace an earlier run at ``run_dir``.
    """
    if not isinstance(cfg, GymPgcConfig):
        raise InvalidParameterError(f"cfg must be a GymPgcConfig, got {type(cfg).__name__}")
    seed = check_int(seed, "seed", minimum=0)
    check_bool(progress, "progress")
    check_bool(overwrite, "overwrite")
    from ldp_audit.training.pgc_a3c.privacy import make_accountant
    from ldp_audit.training.pgc_a3c.run_dir import open_writer, write_run

    writer = None
    if run_dir is not None:  # RunWriter checks the path first (new or empty; no resume)
        extra = {"private_parameter": cfg.private_parameter()}
        mode = "overwrite" if overwrite else "new"
        writer = open_writer(run_dir, cfg, seed, mode=mode, algorithm=ALGORITHM, extra=extra)
        if ledger is None:
            ledger = writer.open_ledger()
    acc = make_accountant(ledger, cfg.budget)
    record = (run_dir is not None) if transcript is None else bool(transcript)
    eng = Engine(cfg, seed, acc, record)
    total = cfg.trials * cfg.max_submissions
    bar = tqdm(total=total, desc=cfg.env_id, unit="sub", disable=not progress)
    t0 = time.perf_counter()
    try:
        eng.run(bar)
    except BaseException:
        if writer is not None:
            write_run(writer, eng.result(time.perf_counter() - t0), None, status="interrupted")
        raise
    finally:
        eng.env.close()
        bar.close()
    res = eng.result(time.perf_counter() - t0)
    if writer is not None:
        write_run(writer, res, _metrics(res))
    return res


def _mean_last_scores(res: TrainResult) -> list[float]:
    """Each trial's mean score of its last (up to) 10 submissions (NaN for none)."""
    return [
        float(np.mean(z[max(0, int(n) - 10) : int(n)])) if n else math.nan
        for z, n in zip(res.zeta, res.submissions, strict=True)
    ]


def _metrics(res: TrainResult) -> dict[str, Any]:
    """metrics.json's keys between ``zeta`` and ``env_steps``
    (:func:`ldp_audit.training.pgc_a3c.run_dir.write_run`)."""
    from ldp_audit.rundir import json_number

    return {
        "submissions": [int(n) for n in res.submissions],
        "mean_last_scores": [json_number(v) for v in _mean_last_scores(res)],
        "max_submissions": int(res.config.max_submissions),
    }


# ==============================================================================================
# The system's parts (registered by ldp_audit.training.pgc_a3c_gym.system, light to import)
# ==============================================================================================


def _system_train(
    cfg: GymPgcConfig, *, seed: int, run_dir: Any, ledger: Any, progress: Any, run_mode: str
) -> Any:
    """:func:`train` with the registry's signature (``run_mode``: "new" or "overwrite")."""
    from ldp_audit.systems import TrainResult as SystemResult

    if run_mode not in ("new", "overwrite"):  # the CLI's --resume
        raise InvalidParameterError(
            f"--resume: an interrupted {ALGORITHM} run (--env) cannot be continued (run_mode "
            f"{run_mode!r}); start it again with --overwrite"
        )
    res = train(
        cfg,
        seed=seed,
        run_dir=run_dir,
        ledger=ledger,
        progress=bool(progress),
        overwrite=run_mode == "overwrite",
    )
    return SystemResult(
        system=ALGORITHM,
        config=cfg,
        seed=int(seed),
        seconds=float(res.seconds),
        privacy=res.privacy,
        metrics={
            "env_id": cfg.env_id,
            "private_parameter": cfg.private_parameter(),
            "mechanism": cfg.mechanism,
            "epsilon": None if cfg.mechanism == "none" else cfg.epsilon,
            "rounds": cfg.rounds,
            "trials": cfg.trials,
            "n_agents": cfg.n_agents,
            "max_submissions": cfg.max_submissions,
            "submissions": res.submissions.tolist(),
            "env_steps": int(res.env_steps),
            "network_dim": cfg.network.dim,
            "mean_last_10_scores": _mean_last_scores(res),
        },
        run_dir=None if run_dir is None else Path(run_dir),
        native=res,
    )


def _system_targets(cfg: GymPgcConfig) -> list[tuple[str, Any, dict[str, Any]]]:
    """The per-submission report mechanism, audited in the report's dimension d."""
    return [("report", cfg.make_mechanism(), {"dim": cfg.network.dim})]


def _system_cli(train_subparsers: Any, reproduce_subparsers: Any) -> None:
    """No subcommand of its own: ``ldp-audit train pgc-a3c --env ENV --private-param ...``."""
