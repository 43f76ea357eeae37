"""PGC-A3C on any Gymnasium environment with a discrete action space and a private parameter.

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
  n_actions + 1), Glorot-uniform;
- **the episode loss** (eqs. 15-18) over ``n_actions`` actions, by hand in NumPy (checked
  against torch autograd in tests/test_gym_pgc.py; the same formulation,
  ``ldp_audit.training.pgc_a3c.gradients.softmax_gradients``, is the reference the CartPole
  engine's compiled gradient is checked against): ``dL/dz_t = -A_t (onehot(a_t) - pi_t) + beta
  pi_t (log pi_t + H_t)``, ``dL/dV_t = -2 lambda A_t``, with ``A_t = V_hat_t - V(s_t)`` and
  ``V_hat_t = sum_{j>=t} gamma^{j-t} r_j + gamma^{T-t} V(s_T)`` (V(s_T) = 0 when the episode
  terminated, the network's value when it was cut).

Acting: one uniform u per agent-step; explore iff u < alpha (then the action is
``floor(u / alpha * n_actions)``), else argmax pi (ties to the lowest index) or, with
``acting="sample"``, the inverse CDF of pi at ``(u - alpha) / (1 - alpha)``; alpha =
max(0, alpha_start - n / alpha_decay) with n the trial's submissions so far.

Privacy: every report goes through :func:`ldp_audit.training.pgc_a3c.privatize_reports`, i.e.
:func:`ldp_audit.release.release_many`: the agent's ledger entry is charged durably, then the
report is randomised (Laplace, Alg. 2; PRS, Alg. 3; the non-private baseline is L1-clipped to
C/2 = 5), then sealed; the aggregator (eq. 22, :class:`~ldp_audit.training.pgc_a3c.Aggregator`)
accepts sealed reports only. The run directory (``algorithm: "pgc-a3c-gym"``) records the env
id, the parameter and its candidates in ``config.json`` (``private_parameter``), the transcript
in the PGC-A3C layout, and the secret value per report in ``secrets.npz`` (``value``).

Randomness: ``seed`` -> ``SeedSequence(seed, spawn_key=(0, k))`` per trial k (initial theta,
acting uniforms, values and reset seeds) and ``spawn_key=(1,)`` for the mechanism noise.
CartPole with its ``gravity`` is the paper's own task: the CLI sends it to the fused CartPole
engine (:mod:`ldp_audit.training.pgc_a3c`), whose results stay bit for bit what they were.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError
from ldp_audit.training.gym_envs import (
    EnvInfo,
    SyncParamVectorEnv,
    check_private_param,
    import_env_module,
    make_param_vector_env,
)

# the config checks, paper defaults and network initialisation shared with the CartPole engine
from ldp_audit.training.pgc_a3c.config import SharedFields, check_int, from_json_dict
from ldp_audit.training.pgc_a3c.gradients import softmax_gradients
from ldp_audit.training.pgc_a3c.model import check_params, glorot_uniform, unpack_views
from ldp_audit.validation import check_bool, check_positive, check_rng

__all__ = [
    "ALGORITHM",
    "GymPgcConfig",
    "GymTrainResult",
    "Network",
    "episode_gradients",
    "loss_gradients",
    "rollout",
    "train",
]

#: ``config.json``'s ``algorithm`` of a run of this trainer.
ALGORITHM = "pgc-a3c-gym"
BLOCK = 256  # acting uniforms drawn per trial in blocks of this many lock-steps
SEED_BOUND = 2**63 - 1


@dataclass(frozen=True, kw_only=True)
class GymPgcConfig(SharedFields):
    """A PGC-A3C run on a Gymnasium environment with one private parameter per agent.

    The privacy and learning hyper-parameters mean what they mean in
    :class:`ldp_audit.training.pgc_a3c.PgcA3cConfig` (paper defaults), and are checked by the
    same code (``ldp_audit.training.pgc_a3c.config``).
    """

    env_id: str
    """Gymnasium id (a discrete action space, a Box observation)."""
    private_param: str
    """The attribute of ``env.unwrapped`` that is each agent's secret."""
    values: tuple[float, ...]
    """Its candidate values; each agent draws one uniformly (at least two, distinct)."""
    env_module: str | None = None
    """A module to import first, which registers the environment (a user env)."""
    mechanism: str = "laplace"
    """"laplace" (Alg. 2), "prs" (Alg. 3) or "none" (L1-clipped, no noise)."""
    epsilon: float = 1.0
    """Total LDP budget of one agent over its ``rounds`` reports (inf for "none")."""
    trials: int = 1
    n_agents: int = 9
    max_submissions: int = 2000
    rounds: int = 1
    """Reports per agent (each at epsilon / rounds; the agent keeps its value)."""
    clip: float | None = None
    buffer_size: int | None = None
    eta: float = 0.5
    gamma: float = 0.99
    lam: float = 0.5
    beta: float = 0.01
    hidden: int = 16
    episode_steps: int | None = None
    """Episode cap (None: the env spec's ``max_episode_steps``, else 1000)."""
    alpha_start: float = 0.5
    alpha_decay: float = 1800.0
    acting: str = "argmax"
    budget: float | None = None

    def __post_init__(self) -> None:
        self._check_release_fields()
        for name, lo in (
            ("trials", 1),
            ("n_agents", 1),
            ("max_submissions", 1),
            ("rounds", 1),
            ("hidden", 1),
        ):
            check_int(getattr(self, name), name, lo)
        if self.episode_steps is not None:
            check_int(self.episode_steps, "episode_steps", 1)
        self._check_clip_and_buffer()
        self._check_learning_fields()
        if self.budget is not None:
            object.__setattr__(self, "budget", check_positive(self.budget, "budget"))
        if isinstance(self.values, np.ndarray):
            object.__setattr__(self, "values", tuple(self.values.tolist()))
        # the env, the parameter and every value, before any episode (names the bad one)
        info, vals = check_private_param(
            self.env_id,
            self.private_param,
            self.values,
            env_module=self.env_module,
            max_episode_steps=self.episode_steps,
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
        return Network(self.info.obs_dim, self.info.n_actions, self.hidden)

    @property
    def steps(self) -> int:
        """The episode cap actually used."""
        if self.episode_steps is not None:
            return int(self.episode_steps)
        m = self.info.max_episode_steps
        return int(m) if m is not None else 1000

    def make_mechanism(self) -> Any:
        """The per-report mechanism (:mod:`ldp_audit.mechanisms`)."""
        return self._paper_mechanism()

    def private_parameter(self) -> dict[str, Any]:
        """``config.json``'s ``private_parameter`` record (read by the generic attack)."""
        return {
            "env_id": self.env_id,
            "name": self.private_param,
            "values": list(self.values),
            "env_module": self.env_module,
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict (inf epsilon as the string "inf")."""
        d = self._json_dict()
        d["values"] = list(self.values)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GymPgcConfig:
        """Inverse of :meth:`to_dict`. A config read from a run directory never imports code:
        its ``env_module`` must already be imported (see :func:`config_from_run`)."""
        import sys

        d = from_json_dict(d)
        mod = d.get("env_module")
        if mod is not None and mod not in sys.modules:
            raise InvalidParameterError(
                f"this config's environment is registered by the module {mod!r}, which is not "
                f"imported; import it first (CLI: --env-module {mod}, e.g. `ldp-audit attack "
                f"dynamics --run-dir RUN --env-module {mod}`): a config read from a run "
                "directory never imports code by itself"
            )
        d["values"] = tuple(d["values"])
        return cls(**d)


# ==============================================================================================
# The network and the episode gradient (eqs. 15-18, any number of actions)
# ==============================================================================================


@dataclass(frozen=True)
class Network:
    """The paper's network sized from the spaces (no biases)."""

    obs_dim: int
    n_actions: int
    hidden: int = 16

    @property
    def dim(self) -> int:
        """d = hidden (obs_dim + n_actions + 1)."""
        return self.hidden * (self.obs_dim + self.n_actions + 1)

    def init(self, rng: np.random.Generator) -> np.ndarray:
        """Glorot-uniform parameters (d,) (TensorFlow's default, as the CartPole engine)."""
        return glorot_uniform(check_rng(rng), self.obs_dim, self.n_actions, self.hidden)

    def unpack(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Views (B, H, O), (B, A, H), (B, H) of a (B, d) batch."""
        return unpack_views(theta, self.obs_dim, self.n_actions, self.hidden)

    def check(self, theta: Any, name: str = "theta") -> np.ndarray:
        """``theta`` as a C-contiguous (B, d) float64 batch of finite values ((d,): one row)."""
        return check_params(theta, self.dim, name)

    def logits(self, theta: np.ndarray, obs: np.ndarray) -> np.ndarray:
        """Logits (B, A) of one observation per row (theta (B, d), obs (B, O))."""
        wc, wp, _ = self.unpack(theta)
        h = np.maximum(np.einsum("bho,bo->bh", wc, obs), 0.0)
        return np.einsum("bah,bh->ba", wp, h)

    def act(
        self, theta: np.ndarray, obs: np.ndarray, u: np.ndarray, alpha: np.ndarray, sample: bool
    ) -> np.ndarray:
        """The alpha-greedy action of each row from one uniform per row (see the module)."""
        z = self.logits(theta, obs)
        a_n = self.n_actions
        explore = u < alpha
        safe_alpha = np.where(alpha > 0, alpha, 1.0)
        rand_a = np.minimum((u / safe_alpha * a_n).astype(np.int64), a_n - 1)
        if sample:
            zz = z - z.max(axis=1, keepdims=True)
            p = np.exp(zz)
            cdf = np.cumsum(p / p.sum(axis=1, keepdims=True), axis=1)
            v = (u - alpha) / np.where(alpha < 1, 1.0 - alpha, 1.0)
            greedy = np.minimum((cdf <= v[:, None]).sum(axis=1), a_n - 1)
        else:
            greedy = np.argmax(z, axis=1)
        return np.where(explore, rand_a, greedy)


def loss_gradients(
    net: Network,
    theta: np.ndarray,
    obs: np.ndarray,
    actions: np.ndarray,
    rewards: np.ndarray,
    lengths: np.ndarray,
    bootstrap: np.ndarray,
    *,
    gamma: float = 0.99,
    lam: float = 0.5,
    beta: float = 0.01,
) -> np.ndarray:
    """Gradient of L = L_p + lambda L_v (eqs. 15-18) per episode row, by hand (the NumPy
    formulation shared with the CartPole engine's reference, see the module docstring).

    Args:
        net: the network.
        theta: (M, d) parameters each episode was played with.
        obs: (M, L+1, O) observations s_0..s_L (row m valid up to ``lengths[m]`` inclusive).
        actions: (M, L) actions; rewards: (M, L).
        lengths: (M,) T_m >= 1 actions taken.
        bootstrap: (M,) True where the episode was cut (use V(s_T)), False if it terminated.
        gamma, lam, beta: the loss hyper-parameters.

    Returns:
        (M, d) gradients.
    """
    theta = net.check(theta)
    m, big_l = np.shape(actions)
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.shape != (m,) or lengths.min() < 1 or lengths.max() > big_l:
        raise InvalidParameterError(f"lengths must be (M,) in [1, {big_l}], got {lengths!r}")
    return softmax_gradients(
        theta,
        obs,
        actions,
        rewards,
        lengths,
        bootstrap,
        shape=(net.obs_dim, net.n_actions, net.hidden),
        gamma=gamma,
        lam=lam,
        beta=beta,
    )


# ==============================================================================================
# Rollouts: the attacker's simulator (and the tests')
# ==============================================================================================


def rollout(
    cfg: GymPgcConfig,
    theta: np.ndarray,
    values: np.ndarray,
    rng: np.random.Generator,
    alpha: float | np.ndarray = 0.0,
) -> dict[str, np.ndarray]:
    """Play one episode per row (theta (B, d), private value (B,)), all rows in lock-step.

    Returns:
        obs (B, L+1, O), actions (B, L), rewards (B, L), lengths (B,), bootstrap (B,), score (B,).
    """
    rng = check_rng(rng)
    net = cfg.network
    th = net.check(theta)
    b = th.shape[0]
    vals = np.broadcast_to(np.asarray(values, dtype=np.float64).reshape(-1), (b,)).copy()
    alpha_b = np.broadcast_to(np.asarray(alpha, dtype=np.float64), (b,)).copy()
    steps = cfg.steps
    env = make_param_vector_env(cfg.info, cfg.private_param, b, max_episode_steps=steps)
    try:
        env.set_param(np.arange(b), vals)
        o, _ = env.reset(seed=rng.integers(0, SEED_BOUND, size=b).tolist())
        obs = np.zeros((b, steps + 1, net.obs_dim))
        acts = np.zeros((b, steps), dtype=np.int64)
        rews = np.zeros((b, steps))
        lengths = np.full(b, steps, dtype=np.int64)
        boot = np.ones(b, dtype=bool)
        alive = np.ones(b, dtype=bool)
        cur = np.asarray(o, dtype=np.float64).reshape(b, -1)
        sample = cfg.acting == "sample"
        for t in range(steps):
            u = rng.random(b)
            a = net.act(th, cur, u, alpha_b, sample)
            obs[alive, t] = cur[alive]
            acts[alive, t] = a[alive]
            nxt, r, term, trunc, _ = env.step(a)
            nxt = np.asarray(nxt, dtype=np.float64).reshape(b, -1)
            rews[alive, t] = r[alive]
            done = alive & (term | trunc | (t + 1 == steps))
            # rows whose episode is over keep stepping, ignored; Gymnasium's SyncVectorEnv
            # (autoreset DISABLED) must reset each row that ended, again and again
            again = (term | trunc) & ~alive if isinstance(env, SyncParamVectorEnv) else None
            if done.any():
                obs[done, t + 1] = nxt[done]
                lengths[done] = t + 1
                boot[done] = ~term[done]
                alive &= ~done
                if not alive.any():
                    break
            need = done if again is None else done | again
            if need.any():
                nxt[need], _ = _reset_rows(env, need, rng)
            cur = nxt
    finally:
        env.close()
    return {
        "obs": obs,
        "actions": acts,
        "rewards": rews,
        "lengths": lengths,
        "bootstrap": boot,
        "score": rews.sum(axis=1),
    }


def _reset_rows(env: Any, mask: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, Any]:
    rows = np.flatnonzero(mask)
    o, info = env.reset(
        seed=rng.integers(0, SEED_BOUND, size=rows.size).tolist(), options={"reset_mask": mask}
    )
    return np.asarray(o, dtype=np.float64).reshape(env.num_envs, -1)[rows], info


def episode_gradients(
    cfg: GymPgcConfig,
    theta: Any,
    values: Any,
    rng: np.random.Generator,
    alpha: float | np.ndarray = 0.0,
) -> tuple[np.ndarray, np.ndarray]:
    """The attacker's simulator: one episode per row at ``theta`` with private ``values``.

    The MDP is public except the parameter, so anyone holding a broadcast theta can simulate
    what an agent with a candidate value would have submitted before noise.

    Returns:
        (clean gradients (B, d), scores (B,)).
    """
    ro = rollout(cfg, theta, values, rng, alpha)
    big_l = int(ro["lengths"].max())
    th = cfg.network.check(theta)
    th = np.broadcast_to(th, (ro["lengths"].size, th.shape[1]))
    grads = loss_gradients(
        cfg.network,
        th,
        ro["obs"][:, : big_l + 1],
        ro["actions"][:, :big_l],
        ro["rewards"][:, :big_l],
        ro["lengths"],
        ro["bootstrap"],
        gamma=cfg.gamma,
        lam=cfg.lam,
        beta=cfg.beta,
    )
    return grads, ro["score"]


def simulator_for(cfg: GymPgcConfig) -> Any:
    """``simulator(theta (B, d), values (B,), rng, alpha) -> (grads, scores)`` for ``cfg``'s
    public MDP (the interface of :func:`ldp_audit.attacks.dynamics.simulate_shadow`)."""

    def sim(theta: np.ndarray, values: np.ndarray, rng: np.random.Generator, alpha: Any = 0.0):
        return episode_gradients(cfg, theta, values, rng, alpha)

    return sim


# ==============================================================================================
# Training: the lock-step engine over every agent of every trial
# ==============================================================================================


@dataclass
class GymTrainResult:
    """What :func:`train` returns (the fields of :class:`pgc_a3c.TrainResult` that apply)."""

    config: GymPgcConfig
    seed: int
    zeta: np.ndarray
    theta: np.ndarray
    submissions: np.ndarray
    privacy: dict[str, Any]
    env_steps: int
    seconds: float
    transcript: dict[str, np.ndarray] | None
    secrets: dict[str, np.ndarray] | None


def privacy_summary(c: GymPgcConfig, agents: np.ndarray) -> dict[str, Any]:
    fin = math.isfinite(c.epsilon)
    return {
        "mechanism": c.mechanism,
        "local": True,
        "epsilon_per_submission": c.epsilon_per_submission if fin else "inf",
        "rounds": c.rounds,
        "epsilon_per_agent": c.epsilon if fin else "inf",
        "composition": "sequential (basic), section 3.2.1",
        "agents_per_trial": agents.tolist(),
        "private_parameter": c.private_parameter(),
        "note": (
            f"each agent's reports satisfy epsilon_per_agent-LDP with respect to its "
            f"{c.private_param}; agents were charged on the ledger before every release"
            if fin
            else "non-private baseline: L1-clipped gradients (C = effective clip), no noise"
        ),
    }


def train(
    cfg: GymPgcConfig,
    *,
    seed: int = 0,
    run_dir: str | Path | None = None,
    ledger: Any = None,
    progress: bool = False,
    transcript: bool | None = None,
    overwrite: bool = False,
) -> GymTrainResult:
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
    seed = check_int(seed, "seed", 0)
    check_bool(progress, "progress")
    check_bool(overwrite, "overwrite")
    from ldp_audit.rundir import RunWriter, check_new_dir, json_number
    from ldp_audit.training.pgc_a3c.privacy import make_accountant

    writer = None
    if run_dir is not None:
        check_new_dir(run_dir, name="run_dir", overwrite=overwrite)
        writer = RunWriter(
            run_dir,
            algorithm=ALGORITHM,
            config=cfg.to_dict(),
            seed=seed,
            mechanism=cfg.make_mechanism().to_config(),
            mode="overwrite" if overwrite else "new",
            extra={"private_parameter": cfg.private_parameter()},
        )
        if ledger is None:
            ledger = writer.open_ledger()
    acc = make_accountant(ledger, cfg.budget)
    record = (run_dir is not None) if transcript is None else bool(transcript)
    from ldp_audit.training.pgc_a3c_gym.engine import Engine  # the engine imports this module

    eng = Engine(cfg, seed, acc, record)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=cfg.trials * cfg.max_submissions, desc=f"{cfg.env_id}", unit="sub")
    t0 = time.perf_counter()
    try:
        eng.run(bar)
    except BaseException:
        if writer is not None:
            res = eng.result(time.perf_counter() - t0)
            if res.transcript is not None:
                writer.write_npz("transcript.npz", res.transcript)
                writer.write_npz("secrets.npz", res.secrets)
            writer.finish(status="interrupted")
        raise
    finally:
        eng.env.close()
        if bar is not None:
            bar.close()
    res = eng.result(time.perf_counter() - t0)
    if writer is not None:
        if res.transcript is not None:
            writer.write_npz("transcript.npz", res.transcript)
            writer.write_npz("secrets.npz", res.secrets)
        subs = res.submissions
        w = min(10, cfg.max_submissions)
        writer.write_json(
            "metrics.json",
            {
                "zeta": [z[: int(n)].tolist() for z, n in zip(res.zeta, subs, strict=True)],
                "submissions": [int(n) for n in subs],
                "mean_last_scores": [
                    json_number(float(np.mean(z[max(0, int(n) - w) : int(n)])) if n else math.nan)
                    for z, n in zip(res.zeta, subs, strict=True)
                ],
                "max_submissions": int(cfg.max_submissions),
                "env_steps": int(res.env_steps),
                "seconds": float(res.seconds),
                "privacy": res.privacy,
            },
        )
        writer.write_npz("model.npz", {"theta": res.theta})
        writer.finish(status="complete")
    return res


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


# ==============================================================================================
# The system's parts (registered by ldp_audit.training.pgc_a3c_gym.system, light to import)
# ==============================================================================================


def _system_train(
    cfg: GymPgcConfig, *, seed: int, run_dir: Any, ledger: Any, progress: Any, run_mode: str
) -> Any:
    """:func:`train` with the registry's signature (``run_mode``: "new" or "overwrite")."""
    from ldp_audit.systems import TrainResult

    if run_mode not in ("new", "overwrite"):
        raise InvalidParameterError(
            f"run_mode must be 'new' or 'overwrite' for {ALGORITHM}, got {run_mode!r}"
        )
    res = train(
        cfg,
        seed=seed,
        run_dir=run_dir,
        ledger=ledger,
        progress=bool(progress),
        overwrite=run_mode == "overwrite",
    )
    return TrainResult(
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
            "mean_last_10_scores": [
                float(np.mean(z[max(0, int(n) - 10) : int(n)])) if n else math.nan
                for z, n in zip(res.zeta, res.submissions, strict=True)
            ],
        },
        run_dir=None if run_dir is None else Path(run_dir),
        native=res,
    )


def _system_targets(cfg: GymPgcConfig) -> list[tuple[str, Any, dict[str, Any]]]:
    """The per-submission report mechanism, audited in the report's dimension d."""
    return [("report", cfg.make_mechanism(), {"dim": cfg.network.dim})]


def _system_charges(tr: Any, cfg: GymPgcConfig) -> dict[str, int]:
    """One charge of ``<trial>/<agent>`` per submission."""
    from collections import Counter

    return dict(
        Counter(f"{int(t)}/{int(a)}" for t, a in zip(tr["trial"], tr["agent"], strict=True))
    )


def _system_cli(train_subparsers: Any, reproduce_subparsers: Any) -> None:
    """No subcommand of its own: ``ldp-audit train pgc-a3c --env ENV --private-param ...``."""
