"""Your own training loop, audited: open a run, release every report through it, close it.

A user's trainer (any environment, any update rule) writes a run directory that ``ldp-audit
report`` and the dynamics attack read (docs/own-loop.md)::

    from ldp_audit.mechanisms import Laplace
    from ldp_audit.run import open_run

    with open_run("runs/mine", system="my-reinforce", config={"lr": 0.1}, seed=0,
                  mechanism=Laplace(epsilon=1.0, clip=1.0),
                  private={"env_id": "MountainCar-v0", "name": "force",
                           "values": [0.0008, 0.0012]}) as run:
        for agent in range(100):
            grad = my_episode_gradient(theta, my_secret_force[agent])
            report = run.release(grad, agent=agent, theta=theta, secret=my_secret_force[agent])
            theta = theta - lr * report.values[0]      # the server sees only the sealed report

What :meth:`Run.release` does, in this order (:func:`ldp_audit.release.release`): charge the
agent's ledger entry durably (``ledger.sqlite``; a per-agent ``budget`` is enforced here, and a
refused charge releases nothing), randomise with the declared mechanism, seal, and record the
sealed report in the transcript (with the theta it was computed at and, for scoring attacks
only, the secret in ``secrets.npz``). Leaving the ``with`` block writes ``transcript.npz``,
``secrets.npz``, ``metrics.json`` and the manifest (status ``complete``; ``interrupted`` when the
block raised, after writing what was released).

The run's ``config.json`` has ``algorithm: "own-loop"``, the system name and config the user
gave, the mechanism and the declared private parameter, so the registered ``own-loop`` system
(:data:`OWN_LOOP`) lets ``ldp-audit report`` and ``ldp-audit audit --run-dir`` read it. The
dynamics attack needs the loop's own simulator (the public MDP and update rule), which a run
directory never names as code: call
:func:`ldp_audit.attacks.dynamics_run_dir.private_param_dynamics` with ``simulator=`` from Python.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit.config import config_from_dict, config_to_dict
from ldp_audit.errors import InvalidParameterError
from ldp_audit.parse import check_normal
from ldp_audit.release import Transcript, release
from ldp_audit.systems import ArraySpec, SystemSpec, TrainResult, TranscriptSchema
from ldp_audit.validation import (
    check_bool,
    check_int,
    check_numeric,
    check_positive,
    check_real,
)

__all__ = ["ALGORITHM", "OwnLoopConfig", "Run", "open_run", "OWN_LOOP"]

#: ``config.json``'s ``algorithm`` of an own-loop run.
ALGORITHM = "own-loop"


def _check_private(private: Any) -> dict[str, Any] | None:
    if private is None:
        return None
    if not isinstance(private, Mapping):
        raise InvalidParameterError(
            f"private must be a dict (private_parameter) with name and values, got {private!r}"
        )
    extra = sorted(map(str, set(private) - {"env_id", "name", "values", "env_module"}))
    if extra:  # a misspelt key ("env") would otherwise be dropped in silence
        raise InvalidParameterError(
            f"private has no key {extra[0]!r} (its keys: env_id, name, values), got {private!r}"
        )
    if private.get("env_module") is not None:  # the recorded form holds None
        raise InvalidParameterError(
            f"private has no key 'env_module' to set (an own-loop run names no module for its "
            f"readers to import: give the attack your simulator), got {private!r}"
        )
    name = private.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidParameterError(f"private['name'] must be a non-empty str, got {name!r}")
    vals = private.get("values")
    if isinstance(vals, (str, bytes)) or not isinstance(vals, (list, tuple)):
        raise InvalidParameterError(f"private['values'] must be a list of numbers, got {vals!r}")
    out = [check_real(v, f"private parameter {name!r}: value") for v in vals]
    for v in out:  # as the trainers' --private-param: a subnormal candidate is refused
        check_normal(abs(v), f"private parameter {name!r}: |value|", v, zero=True)
    if not all(map(math.isfinite, out)) or len(out) < 2 or len(set(out)) != len(out):
        raise InvalidParameterError(
            f"private parameter {name!r} needs at least two distinct finite candidate values, "
            f"got {out}"
        )
    env_id = private.get("env_id")
    if env_id is not None and not isinstance(env_id, str):
        raise InvalidParameterError(f"private['env_id'] must be a str, got {env_id!r}")
    return {"env_id": env_id, "name": name, "values": out, "env_module": None}


@dataclass(frozen=True)
class OwnLoopConfig:
    """The ``config`` of an own-loop run: the user's system name and config, the mechanism
    (``to_config()``) and the declared private parameter (or None)."""

    system: str
    params: dict[str, Any] = field(default_factory=dict)
    mechanism: dict[str, Any] = field(default_factory=dict)
    private_parameter: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.system, str) or not self.system.strip():
            raise InvalidParameterError(f"system must be a non-empty str, got {self.system!r}")
        for name in ("params", "mechanism"):
            if not isinstance(getattr(self, name), Mapping):
                raise InvalidParameterError(f"{name} must be a dict, got {getattr(self, name)!r}")
        object.__setattr__(self, "private_parameter", _check_private(self.private_parameter))

    def to_dict(self) -> dict[str, Any]:
        return config_to_dict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> OwnLoopConfig:
        return config_from_dict(cls, d)

    def make_mechanism(self) -> Any:
        from ldp_audit.mechanisms import from_config

        return from_config(self.mechanism)


class Run:
    """An open own-loop run directory (use :func:`open_run`); ``extra``: more keys for its
    ``config.json`` (a recorder's engine and protocol)."""

    def __init__(
        self,
        path: Any,
        *,
        system: str,
        config: Mapping[str, Any] | None = None,
        seed: int = 0,
        mechanism: Any,
        private: Mapping[str, Any] | None = None,
        budget: float | None = None,
        overwrite: bool = False,
        extra: Mapping[str, Any] = {},  # noqa: B006 - read, never mutated
    ) -> None:
        from ldp_audit.accountant.accountant import Accountant, Budget
        from ldp_audit.rundir import RunWriter, to_jsonable

        check_bool(overwrite, "overwrite")
        if mechanism is None:  # a baseline says so: its ledger records epsilon inf per report
            raise InvalidParameterError(
                "mechanism=None: a non-private baseline is declared explicitly, "
                "mechanism=ldp_audit.mechanisms.NoPrivacy() (reports released as they are, "
                "charged as non-private: epsilon inf in the ledger; docs/own-loop.md)"
            )
        # every argument's type before any work (raw TypeError / ValueError never reach a user;
        # the seed and the path: RunWriter, before it makes the folder)
        if config is not None and not isinstance(config, Mapping):
            raise InvalidParameterError(
                f"config must be a dict (or None), got {type(config).__name__}"
            )
        if not hasattr(mechanism, "privatize") or not hasattr(mechanism, "to_config"):
            raise InvalidParameterError(
                "mechanism must be an ldp_audit.mechanisms mechanism (privatize, to_config), "
                f"got {type(mechanism).__name__}"
            )
        if budget is not None:  # a Gaussian's: by RDP at its delta (the default, basic, refused it)
            budget = Budget.for_mechanism(check_positive(budget, "budget"), mechanism)
        self.cfg = OwnLoopConfig(
            system=system,
            params=to_jsonable(dict(config or {})),
            mechanism=mechanism.to_config(),
            private_parameter=private,
        )
        self.mechanism = mechanism
        existed = Path(path).exists()
        self.writer = RunWriter(
            path,
            algorithm=ALGORITHM,
            config=self.cfg.to_dict(),
            seed=seed,
            mechanism=mechanism.to_config(),
            mode="overwrite" if overwrite else "new",
            extra={"private_parameter": self.cfg.private_parameter, "system": system, **extra},
        )
        self.path = Path(self.writer.path)
        try:
            self.accountant = Accountant(ledger=self.writer.open_ledger(), budget=budget)
        except BaseException:
            if not existed:  # nothing was released: leave no half-made run behind
                import shutil

                shutil.rmtree(self.path, ignore_errors=True)
            raise
        self.rng = np.random.default_rng(np.random.SeedSequence(int(seed), spawn_key=(1,)))
        self.transcript = Transcript()
        self._thetas: list[np.ndarray] = []
        self._secrets: list[float] = []
        self._clean: list[np.ndarray] = []
        self._closed = False

    def _theta_index(self, t: np.ndarray) -> int:
        if not self._thetas or not np.array_equal(self._thetas[-1], t):
            self._thetas.append(t.copy())
        return len(self._thetas) - 1

    def check_secret(self, secret: Any, name: str = "secret") -> float:
        """``secret`` as a float: a real number (typed, never coerced) and, when the run declares
        a private parameter, one of its candidate values (what scoring compares guesses with)."""
        secret = check_real(secret, name)
        pp = self.cfg.private_parameter
        if pp is not None and secret not in pp["values"]:
            raise InvalidParameterError(
                f"{name} {secret!r} is not one of the declared candidate values {pp['values']}"
            )
        return secret

    def release(
        self,
        values: Any,
        *,
        agent: int,
        theta: Any,
        secret: float | None = None,
        score: float = math.nan,
    ) -> Any:
        """Charge ``agent``, randomise ``values`` (one report, shape (d,)), seal and record it.

        Args:
            values: the raw report (never leaves unrandomised).
            agent: the agent's id (an integer >= 0; its ledger entry is ``str(agent)``).
            theta: the parameters the report was computed at (recorded for attacks).
            secret: the agent's private value, for scoring attacks only (``secrets.npz``).
            score: the episode's return (recorded; NaN when not given).

        Returns:
            The :class:`~ldp_audit.release.SealedRelease` (``.values[0]`` is the noisy report).
        """

        if self._closed:
            raise InvalidParameterError("the run is closed; open a new one")
        agent = check_int(agent, "agent", minimum=0)
        x = check_numeric(values, "values").astype(np.float64).reshape(1, -1)  # one report
        if self._clean and x.shape[1] != self._clean[0].size:
            # refused before the charge: a transcript holds one report shape
            raise InvalidParameterError(
                f"values has {x.shape[1]} coordinates, but this run's reports have "
                f"{self._clean[0].size} (its first release); every release of a run has one "
                f"shape, and nothing was charged"
            )
        t = check_numeric(theta, "theta").astype(np.float64).reshape(-1)  # stacked: one size
        if not np.isfinite(t).all():  # recorded for the attack, which simulates at it
            i = int(np.argmax(~np.isfinite(t)))
            raise InvalidParameterError(f"theta must be finite; found {t[i]} at index {i}")
        if self._thetas and t.size != self._thetas[0].size:
            raise InvalidParameterError(
                f"theta has {t.size} numbers, but this run's have {self._thetas[0].size} (its "
                "first release); every release of a run has one theta size, and nothing was "
                "charged"
            )
        score = check_real(score, "score")  # before the charge: typed, never coerced
        if math.isinf(score):  # NaN is "not given"; no episode returns infinity
            raise InvalidParameterError(
                f"score must be finite (or NaN: not given), got {score!r}; nothing was charged"
            )
        secret = None if secret is None else self.check_secret(secret)
        rel = release(
            x,
            mechanism=self.mechanism,
            accountant=self.accountant,
            agent_ids=[str(agent)],
            rng=self.rng,
            meta={"trial": np.zeros(1, dtype=np.int64), "agent": np.array([agent])},
        )
        self.transcript.append(
            rel,
            submission=np.array([len(self.transcript)]),
            theta_index=np.array([self._theta_index(t)]),
            score=np.array([score]),
        )
        self._secrets.append(math.nan if secret is None else secret)
        self._clean.append(x[0].copy())
        return rel

    def close(self, status: str = "complete", metrics: Mapping[str, Any] | None = None) -> Path:
        """Write the transcript, secrets, metrics and the manifest; returns the run's path."""
        if self._closed:
            return self.path
        self._closed = True
        try:
            arr = self.transcript.arrays()
            if len(self.transcript):  # every release recorded its theta
                arr["thetas"] = np.stack(self._thetas)
                self.writer.write_npz("transcript.npz", arr)
                self.writer.write_npz(
                    "secrets.npz",
                    {"value": np.asarray(self._secrets), "gradient": np.stack(self._clean)},
                )
            self.writer.write_json(
                "metrics.json",
                {
                    "submissions": len(self.transcript),
                    "agents": len({int(a) for a in arr.get("agent", [])}),
                    "user": dict(metrics or {}),
                },
            )
            self.writer.finish(status=status)
        except BaseException:  # Ctrl-C while writing: marked interrupted, not left "running"
            from ldp_audit.rundir.writer import finish_unfinished

            finish_unfinished(path=self.path)
            raise
        return self.path

    def __enter__(self) -> Run:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.close(status="complete" if exc_type is None else "interrupted")


def open_run(path: Any, **kwargs: Any) -> Run:
    """Open a new own-loop run directory (see :class:`Run` for the arguments and the module
    docstring for the contract)."""
    return Run(path, **kwargs)


# ----------------------------------------------------------------------------------------------
# The registered system (ldp_audit.systems): report and audit read own-loop runs
# ----------------------------------------------------------------------------------------------


def _demo_train(
    cfg: OwnLoopConfig, *, seed: int, run_dir: Any, ledger: Any, progress: Any, run_mode: str
) -> Any:
    """The registry's trainer of ``own-loop``: a user's loop is trained by its own code; this
    runs the docs' demonstration loop (a linear softmax policy, REINFORCE, on the declared
    environment and parameter; ``params``: ``agents``, ``steps``, ``lr``) so the system can be
    exercised end to end (tests/test_systems.py's contract)."""
    import gymnasium as gym

    if ledger is not None or run_dir is None or run_mode not in ("new", "overwrite"):
        raise InvalidParameterError(
            "an own-loop run is trained by its own code (ldp_audit.run.open_run, "
            "docs/own-loop.md); the demonstration loop needs a new run_dir and no ledger"
        )
    pp = cfg.private_parameter
    if pp is None or not pp.get("env_id"):
        raise InvalidParameterError("the demonstration loop needs a private parameter with env_id")
    agents, steps = int(cfg.params.get("agents", 8)), int(cfg.params.get("steps", 50))
    lr = float(cfg.params.get("lr", 0.05))
    rng = np.random.default_rng(seed)
    import time

    t0 = time.perf_counter()
    with open_run(
        run_dir,
        system=cfg.system,
        config=cfg.params,
        seed=seed,
        mechanism=cfg.make_mechanism(),
        private=pp,
        overwrite=run_mode == "overwrite",
    ) as run:
        env = gym.make(pp["env_id"], max_episode_steps=steps)
        n_a = int(env.action_space.n)
        n_o = int(np.prod(env.observation_space.shape))
        theta = np.zeros(n_a * (n_o + 1))
        for agent in range(agents):
            value = float(pp["values"][int(rng.integers(len(pp["values"])))])
            setattr(env.unwrapped, pp["name"], value)
            obs, _ = env.reset(seed=int(rng.integers(2**31)))
            w, grad, ret = theta.reshape(n_a, n_o + 1), np.zeros((n_a, n_o + 1)), 0.0
            for _ in range(steps):
                x = np.append(np.asarray(obs, dtype=np.float64).reshape(-1), 1.0)
                p = np.exp(w @ x - (w @ x).max())
                p /= p.sum()
                a = int(rng.choice(n_a, p=p))
                grad += np.outer(np.eye(n_a)[a] - p, x)
                obs, r, term, trunc, _ = env.step(a)
                ret += float(r)
                if term or trunc:
                    break
            rel = run.release(
                (ret / steps) * grad.ravel(), agent=agent, theta=theta, secret=value, score=ret
            )
            theta = theta - lr * rel.values[0]
        env.close()
    return TrainResult(
        system=ALGORITHM,
        config=cfg,
        seed=int(seed),
        seconds=time.perf_counter() - t0,
        privacy={"mechanism": cfg.mechanism, "reports_per_agent": 1},
        metrics={"submissions": agents},
        run_dir=Path(run_dir),
        native={"theta": theta},  # the demonstration's final parameters
    )


def _targets(cfg: OwnLoopConfig) -> list[tuple[str, Any, dict[str, Any]]]:
    return [("report", cfg.make_mechanism(), {})]


_OWN_SCHEMA = TranscriptSchema(
    (
        ArraySpec("trial", "iu", 1, doc="always 0"),
        ArraySpec("agent", "iu", 1, doc="the agent's id (its ledger entry)"),
        ArraySpec("submission", "iu", 1, doc="release number"),
        ArraySpec("theta_index", "iu", 1, indexes="thetas", doc="thetas row of the report"),
        ArraySpec("report", "f", 2, doc="the randomised report (N, d)"),
        ArraySpec("score", "f", 1, doc="the episode's return (NaN if not given)"),
        ArraySpec("thetas", "f", 2, rows=None, doc="the parameters reports were computed at"),
    )
)

#: The registered ``own-loop`` system.
OWN_LOOP = SystemSpec(
    name=ALGORITHM,
    summary="a user's own training loop (ldp_audit.run.open_run; docs/own-loop.md)",
    config="ldp_audit.run:OwnLoopConfig",
    trainer="ldp_audit.run:_demo_train",
    schema=_OWN_SCHEMA,
    targets="ldp_audit.run:_targets",
    attacks={"dynamics": "ldp_audit.attacks.dynamics_run_dir:private_param_dynamics"},
    cli="ldp_audit.run:_no_cli",
    tiny_config={
        "system": "demo",
        "params": {"agents": 6, "steps": 30},
        "mechanism": {"name": "laplace", "epsilon": 1.0, "clip": 1.0},
        "private_parameter": {
            "env_id": "MountainCar-v0",
            "name": "force",
            "values": [0.0008, 0.0012],
        },
    },
)


def _no_cli(train_subparsers: Any, reproduce_subparsers: Any) -> None:
    """No ``train own-loop`` subcommand: the user's code is the trainer."""
