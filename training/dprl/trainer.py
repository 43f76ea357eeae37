"""Differentially private single-agent deep RL on CartPole-v1 (Doulazmi & Odonnat slides).

Two algorithms, each readable top to bottom (CleanRL style): ``train_reinforce`` and
``train_dqn`` (in ``ldp_audit.training.dprl.algos``); three privacy modes:

* ``"none"``: the non-private baselines (epsilon = inf);
* ``"dpsgd"``: central DP by DP-SGD. **Opacus** computes the per-sample gradients
  (``GradSampleModule``), clips each to L2 norm ``clip`` over the *whole* parameter vector and
  adds ``N(0, (noise_multiplier * clip)^2)`` per coordinate (``DPOptimizer``, noise from a seeded
  ``torch.Generator``). Every update is charged to the ledger (agent ``"model"``,
  ``scope="central"``) through :func:`ldp_audit.release.release_with` *before* the noise is drawn;
  what crossed the boundary (the noisy mean gradient) is sealed and recorded.

  - REINFORCE: the privacy unit is an **episode**. A Gymnasium vector env plays
    ``num_envs`` episodes at once; each episode's whole gradient is one per-sample gradient. Every
    episode is used in exactly one update and every update uses all fresh episodes (no
    subsampling), so each update is charged ``GaussianEvent(noise_multiplier)``; the composition
    over all ``T`` updates bounds any unit contributing at most one clipped gradient per update
    (an episode, and also a canary replayed in every update).
  - DQN: the privacy unit is a **transition**. Each update takes a *Poisson* sample of the replay
    buffer: every stored transition is included independently with the fixed rate
    ``q = batch_size / buffer_size`` (expected batch ``batch_size`` once the buffer is full). So
    every update is exactly a Poisson-sampled Gaussian at rate ``q`` for every transition present,
    and is charged ``PoissonSampledEvent(q, GaussianEvent(noise_multiplier))``. A transition stays
    in the buffer for many updates; conservatively we compose over *all* ``T`` updates of the run
    (it cannot be present for more), never fewer.

* ``"obs-noise"``: "LDP" by Gaussian observation noise (:mod:`ldp_audit.training.dprl.obs_noise`):
  every observation is released through :func:`ldp_audit.release.release` (charged first, one
  ledger row per observation, agent = the episode); epsilon is inf on raw states and finite with
  a declared state box.

One-run audit (Steinke, Nasr & Jagielski 2023): with ``canaries = m > 0`` the trainer plants ``m``
gradient canaries. The public design (config): canary ``i`` is the gradient
``canary_scale * clip * u_i`` with orthonormal directions ``u_i`` drawn from ``canary_seed``
(:func:`canary_directions`). The secret (secrets.npz): each canary is included with probability
1/2. An included canary is one more per-sample gradient in every update (REINFORCE) or in a
Poisson sample of the updates at rate ``q`` (DQN), clipped like every other sample.
:mod:`ldp_audit.attacks.one_run` scores the canaries from the released updates (white-box) or the
final model (black-box).

Randomness: one ``numpy.random.Generator`` and ``torch.Generator`` seeded from the run seed; no
global seeding. Bad input raises ``InvalidParameterError`` in :class:`DprlConfig` before any
episode runs.
"""

from __future__ import annotations

import contextlib
import math
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit.errors import BudgetExceeded, InvalidParameterError, RunDirectoryError
from ldp_audit.interrupts import closing
from ldp_audit.rundir.files import fmt_number
from ldp_audit.training.dprl.algos import DprlResult, make_network, train_dqn, train_reinforce
from ldp_audit.training.dprl.config import DprlConfig
from ldp_audit.training.dprl.privacy import TrainerHooks
from ldp_audit.validation import check_int

__all__ = ["ALGORITHM", "DQN_PRESETS", "DQN_SOLVES", "train", "greedy_evaluate"]

ALGORITHM = "dprl"
#: DQN settings measured to solve CartPole-v1 (greedy mean of 25 episodes >= 475) at 100,000
#: environment steps: the DprlConfig defaults (CleanRL's DQN: buffer 10,000, batch 128, target
#: every 500 steps, epsilon 1 -> 0.05, gamma 0.99; our lr 1e-3, learning_starts 1,000,
#: train_frequency 4, hidden 128 x 128) with exploration over the first 20 % of the steps
#: instead of 50 %, then 25 greedy evaluation episodes. docs/dprl.md "Measured" has the runs.
DQN_SOLVES: dict[str, Any] = {"total_steps": 100_000, "exploration_fraction": 0.2,
                              "eval_episodes": 25}  # fmt: skip
#: Named DQN presets of ``reproduce dprl --dqn-preset`` (``legacy``: the DprlConfig defaults).
DQN_PRESETS: dict[str, dict[str, Any]] = {"legacy": {}, "solves": DQN_SOLVES}


def greedy_evaluate(cfg: DprlConfig, params: Any, *, seed: int, episodes: int) -> list[float]:
    """Returns of ``episodes`` greedy episodes of the network ``params`` on CartPole-v1.

    DQN acts by argmax Q, REINFORCE by the argmax of its policy (dropout off), on the true
    states. The episodes run side by side in one vector env seeded from
    ``SeedSequence([seed, 1])`` (independent of the training's draws); each env's first episode
    counts. Post-processing of the model: no privacy cost.
    """
    import gymnasium as gym
    import torch

    check_int(episodes, "episodes", minimum=1)
    flat = np.asarray(params, dtype=np.float64).reshape(-1)
    if flat.size != cfg.n_params:
        raise InvalidParameterError(
            f"params must hold the config's {cfg.n_params} parameters, got {flat.size}"
        )
    net = make_network(cfg, torch.Generator().manual_seed(0))
    torch.nn.utils.vector_to_parameters(torch.as_tensor(flat, dtype=torch.float32),
                                        net.parameters())  # fmt: skip
    net.eval()
    env_seed = int(np.random.SeedSequence([int(seed), 1]).generate_state(1)[0])
    envs = gym.make_vec("CartPole-v1", num_envs=int(episodes),
                        vectorization_mode="vector_entry_point")  # fmt: skip
    try:
        obs, _ = envs.reset(seed=env_seed)
        alive = np.ones(int(episodes), dtype=bool)
        ret = np.zeros(int(episodes))
        while alive.any():
            with torch.no_grad():
                a = net(torch.as_tensor(obs, dtype=torch.float32)).argmax(dim=1).numpy()
            obs, rew, term, trunc, _ = envs.step(a)
            ret += np.where(alive, rew, 0.0)
            alive &= ~(np.asarray(term) | np.asarray(trunc))
    finally:
        envs.close()
    return [float(r) for r in ret]


# ------------------------------------------------------------------------------------------------
# Results, privacy, run directory
# ------------------------------------------------------------------------------------------------


def privacy_summary(cfg: DprlConfig, accountant: Any, result: DprlResult) -> dict:
    """The run's guarantee from the ledger, with the privacy unit and a sentence in words."""
    from ldp_audit.accountant import compose

    out: dict[str, Any] = {"privacy": cfg.privacy, "delta": float(cfg.delta)}
    if cfg.privacy == "none":
        out.update(epsilon=math.inf, unit=None, words="non-private baseline: epsilon = inf")
        return out
    if cfg.privacy == "dpsgd":
        unit = "episode" if cfg.algo == "reinforce" else "transition"
        # the ledger's "best": RDP, PRV and PLD (a coarse PLD where PLD's planner refuses:
        # at sigma <= 0.1 it is 10-60x tighter than RDP for well under a second; docs/dprl.md)
        det = accountant.spent_detail("model", delta=cfg.delta, method="best")
        by: dict[str, Any] = {m: float(v) for m, v in det.by_method.items()}
        by.update({m: f"unavailable: {why}" for m, why in det.skipped.items()})
        eps = float(det.epsilon)
        ledger = ", ".join(
            f"{k} {fmt_epsilon(v) if isinstance(v, float) else v}" for k, v in by.items()
        ) or ("nothing charged" if eps == 0 else "noise multiplier 0: epsilon inf")
        out.update(
            epsilon=eps,
            by_method=by,
            unit=unit,
            updates=result.updates,
            sample_rate=cfg.sample_rate,
            noise_multiplier=float(cfg.noise_multiplier),
            clip=float(cfg.clip),
            method=det.method,
            words=f"central DP-SGD, privacy unit = one {unit}: ({fmt_epsilon(eps)}, "
            f"{cfg.delta:g})-DP over {result.updates} updates (ledger: {ledger})",
        )
        return out
    mech = cfg.obs_mechanism()
    per_obs = mech.epsilon
    ep_len = int(max(result.returns)) + 1 if result.returns else 501
    ep_eps = math.inf
    if math.isfinite(per_obs):
        ep_eps, _ = compose([(mech.event(), ep_len)], delta=cfg.delta, method="rdp")
    out.update(
        epsilon=ep_eps,
        per_observation_epsilon=per_obs,
        observations_per_episode=ep_len,
        unit="episode (its states)",
        iqr=list(mech.iqr),
        box=None if mech.box is None else [list(b) for b in mech.box],
        words=mech.describe()
        + (
            ""
            if math.isinf(ep_eps)
            else f"; the longest episode's {ep_len} observations compose to "
            f"({fmt_epsilon(ep_eps)}, {cfg.delta:g}) (RDP). Rewards and episode ends are not "
            "noised."
        ),
    )
    return out


fmt_epsilon = partial(fmt_number, nd=4, nan="nan")


def _check_budget_before(cfg: DprlConfig, accountant: Any) -> None:
    """Refuse, before any episode, a budget that cannot pay for even one more update."""
    if cfg.budget_epsilon is None or cfg.privacy != "dpsgd":
        return
    from ldp_audit.accountant import compose

    if "model" in accountant.agents(scope="central"):
        try:
            cur = accountant.spent("model", delta=cfg.delta, method="rdp")
        except Exception:  # noqa: BLE001
            cur = math.inf
        if cur >= cfg.budget_epsilon:
            raise BudgetExceeded(
                f"budget_epsilon {cfg.budget_epsilon:g} is already spent ({fmt_epsilon(cur)} at "
                f"delta {cfg.delta:g}); nothing was trained or charged"
            )
    one, _ = compose([(cfg.update_event(), 1)], delta=cfg.delta, method="rdp")
    if one > cfg.budget_epsilon:
        raise InvalidParameterError(
            f"budget_epsilon must pay for at least one update ({fmt_epsilon(one)} at delta "
            f"{cfg.delta:g}), got {cfg.budget_epsilon!r}"
        )


def train(
    cfg: DprlConfig,
    *,
    seed: int = 0,
    run_dir: str | Path | None = None,
    progress: bool = False,
    run_mode: str = "new",
    hooks: TrainerHooks | None = None,
    ledger: Any = None,
    force: bool = False,
) -> DprlResult:
    """Train one run; with ``run_dir`` write the run directory (docs/dprl.md).

    Args:
        cfg: the configuration (already validated).
        seed: the run seed (every random draw derives from it).
        run_dir: where to write the run (None: nothing written, in-memory ledger).
        progress: a tqdm bar on stderr.
        run_mode: "new", "overwrite" or "resume" (:class:`ldp_audit.rundir.RunWriter`).
        hooks: test-only seams (broken-trainer fixtures).
        ledger: an explicit ledger when ``run_dir`` is None (tests).
        force: run even when the estimated memory or time exceeds this machine's limits
            (:mod:`ldp_audit.limits`; otherwise InvalidParameterError before any work).

    Returns:
        :class:`DprlResult`; ``result.privacy`` holds the accountant's guarantee.
    """
    from ldp_audit.accountant import Accountant, Budget, Ledger
    from ldp_audit.rundir import RunWriter

    if not isinstance(cfg, DprlConfig):
        raise InvalidParameterError(f"cfg must be a DprlConfig, got {type(cfg).__name__}")
    check_int(seed, "seed", minimum=0)
    from ldp_audit.limits import check_resources
    from ldp_audit.training.sizes import dprl_estimates

    check_resources(dprl_estimates(cfg), force=force)  # absurd sizes: refused before any allocation
    hooks = hooks or TrainerHooks()
    from ldp_audit.training.device import load_libraries, resolve_device

    device = resolve_device(cfg.device)  # "cuda" without CUDA: refused before any file
    libs = ("gymnasium", "opacus.grad_sample", "opacus.optimizers", "opacus.accountants")
    load_libraries(*libs, "dp_accounting.pld.privacy_loss_distribution")  # before the folder
    if run_dir is not None and run_mode != "resume":  # refused before any file is written
        _check_budget_before(cfg, Accountant(ledger=Ledger(":memory:")))
    writer = None
    if run_dir is not None:
        writer = RunWriter(
            run_dir,
            algorithm=ALGORITHM,
            config=cfg.to_dict(),
            seed=int(seed),
            mechanism=cfg.mechanism_config(),
            mode=run_mode,
            extra={"device": device},
        )
        ledger = writer.open_ledger()
    elif ledger is None:
        ledger = Ledger(":memory:")
    budget = (
        Budget(epsilon=float(cfg.budget_epsilon), delta=float(cfg.delta), method="rdp")
        if cfg.budget_epsilon is not None
        else None
    )
    status = "failed"  # the budget refused before any episode; then, a training cut short
    try:
        accountant = Accountant(ledger=ledger, central_budget=budget, run_id=str(run_dir or ""))
        _check_budget_before(cfg, accountant)
        status = "interrupted"
        fn = train_reinforce if cfg.algo == "reinforce" else train_dqn
        res = fn(cfg, seed=int(seed), accountant=accountant, hooks=hooks, progress=progress)
        res.privacy = privacy_summary(cfg, accountant, res)
        if cfg.eval_episodes and res.stopped != "interrupted":
            res.eval_returns = greedy_evaluate(cfg, res.params, seed=int(seed),
                                               episodes=cfg.eval_episodes)  # fmt: skip
    except BaseException:
        if writer is not None:
            writer.finish(status=status)
        raise
    interrupted = res.stopped == "interrupted"
    if writer is not None:  # Ctrl-C: what was released so far (the forced exit waits), re-raise
        with closing() if interrupted else contextlib.nullcontext():
            write_run(writer, res, status="interrupted" if interrupted else "complete")
    if interrupted:
        raise KeyboardInterrupt
    return res


def _learning(res: DprlResult) -> dict[str, Any]:
    """The run's returns, convergence, updates and environment steps (its metrics' head)."""
    from ldp_audit.rundir import json_number

    conv = res.convergence_episode
    return {"returns": res.returns, "episodes": len(res.returns),
            "convergence_episode": json_number(conv), "solved": bool(math.isfinite(conv)),
            "updates": res.updates, "env_steps": res.env_steps}  # fmt: skip


def write_run(writer: Any, res: DprlResult, *, status: str = "complete") -> Path:
    """transcript.npz, secrets.npz, metrics.json, model.npz, then the manifest."""
    if res.transcript:
        writer.write_npz("transcript.npz", res.transcript)
    if res.secrets:
        writer.write_npz("secrets.npz", res.secrets)
    writer.write_json(
        "metrics.json",
        {
            **_learning(res),
            "seconds": res.seconds,
            "stopped": res.stopped,
            "privacy": res.privacy,
            "algo": res.config.algo,
            "n_params": res.config.n_params,
            "device": res.device,
            **(
                {"eval_returns": res.eval_returns, "eval_mean": float(np.mean(res.eval_returns))}
                if res.eval_returns
                else {}
            ),
        },
    )
    writer.write_npz("model.npz", {"params": res.params, "initial": res.initial})
    writer.finish(status=status)
    return writer.path


def read_run(run_dir: str | Path) -> dict[str, Any]:
    """config, metrics and model of a dprl run (refuses other algorithms' runs)."""
    from ldp_audit.rundir import RunDir

    rd = RunDir(run_dir)
    doc = rd.config
    if doc.get("algorithm") != ALGORITHM:
        raise RunDirectoryError(
            f"run_dir {str(run_dir)!r} is a {doc.get('algorithm')!r} run, not a {ALGORITHM!r} run"
        )
    return {
        "config": DprlConfig.from_dict(doc["config"]),
        "metrics": rd.metrics(),
        "model": rd.arrays("model.npz", "params", "initial"),
    }


def train_run(
    cfg: DprlConfig,
    *,
    seed: int,
    run_dir: str | Path | None = None,
    ledger: Any = None,
    progress: bool | None = None,
    run_mode: str = "new",
) -> Any:
    """:func:`train` under the System contract (:meth:`ldp_audit.systems.System.train`): the
    run's metrics and privacy as a :class:`~ldp_audit.systems.TrainResult` (``native``: the
    :class:`DprlResult`)."""
    from ldp_audit.systems import TrainResult

    res = train(cfg, seed=seed, run_dir=run_dir, progress=bool(progress), run_mode=run_mode,
                ledger=ledger)  # fmt: skip
    last = res.returns[-25:]
    metrics = {**_learning(res), "last25_mean_return": float(sum(last) / max(1, len(last))),
               "stopped": res.stopped}  # fmt: skip
    return TrainResult(system=ALGORITHM, config=cfg, seed=int(seed), seconds=float(res.seconds),
                       privacy=res.privacy, metrics=metrics,
                       run_dir=None if run_dir is None else Path(run_dir), native=res)  # fmt: skip


def summary_lines(res: Any) -> list[str]:
    """``train dprl``'s text: episodes, updates, the last returns, convergence, privacy."""
    m, cfg = res.metrics, res.config
    solved = f"solved at episode {m['convergence_episode']:g}" if m["solved"] else "not solved"
    lines = [
        f"  {cfg.algo} / {cfg.privacy}: {m['episodes']} episodes, {m['updates']} private "
        f"updates, mean return of the last 25 = {m['last25_mean_return']:.1f}, {solved}",
        f"  privacy: {res.privacy.get('words')}",
    ]
    return lines + ([f"  stopped: {m['stopped']}"] if m["stopped"] else [])
