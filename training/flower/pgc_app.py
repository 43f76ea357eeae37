"""PGC-A3C as a Flower app: one ClientApp per agent, the eq. 22 aggregator as the ServerApp.

Optional extra: ``pip install 'ldp-audit[flower]'`` (Flower 1.41.0; its simulation engine also
needs Ray). The same two app objects run in Flower's simulation engine
(:func:`run_simulation`) and under its deployment engine (a SuperLink and SuperNodes; see
docs/flower.md), and write a run directory that ``ldp-audit attack dynamics --run-dir`` and
``ldp-audit report`` read unchanged (algorithm ``"pgc-a3c"``, the transcript layout of
:mod:`ldp_audit.training.pgc_a3c.run_dir`).

Trust boundary. Each agent (a ClientApp on its SuperNode) owns its private CartPole gravity, its
noise generator and its own ledger (``<ledger-dir>/agent-<id>.sqlite``, a budget of its total
epsilon). Its train function plays one alpha-greedy episode at the broadcast theta
(:func:`ldp_audit.training.pgc_a3c.episode_gradients`) and hands the raw gradient to the
release mod :class:`LdpReleaseMod` through process memory, never through a Flower message. The
mod charges the agent's ledger durably, *then* randomises
(:func:`ldp_audit.training.pgc_a3c.privacy.privatize_reports`, i.e.
:func:`ldp_audit.release.release`), and only then puts the noisy report in the reply. Without the
mod, the reply holds no gradient, and the server refuses it.

Protocol (a synchronous-round version of Algorithm 1; the lock-step engine of
:mod:`ldp_audit.training.pgc_a3c` emulates the asynchronous one): round r = 0..T-1, the server
broadcasts theta to every agent; agent k (in node order) submits report number n = r*K + k of the
trial at alpha = max(0, alpha_start - n/alpha_decay); the server applies the reports in that order
with eq. 22 (buffer of MAX_BUF reports, theta <- theta - eta * mean). So every agent makes T
submissions at epsilon/T each (``rounds=T``, section 3.2.1) with one fixed private gravity.

The server records what crossed the boundary: ``transcript.npz`` (trial 0, agent, worker, round,
submission, theta_index, report, score, thetas), ``metrics.json``, ``model.npz`` and
``ledger.sqlite``: the server's record of every charge its clients declared (the guarantee is
enforced by the clients' own ledgers, charged before any noise; the test checks both agree).
``secrets.npz`` (the gravity per row, for scoring attacks only) is written only when the
experimenter hands the ground truth to the recorder (``ground_truth`` in
:func:`run_simulation`, run-config key ``scoring-gravities`` in a deployment): a real
federation's server never learns a gravity.
"""

from __future__ import annotations

import json
import math
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from ldp_audit.accountant import Accountant, Budget, Ledger
from ldp_audit.errors import BudgetExceeded, InvalidParameterError, LedgerError
from ldp_audit.rundir import check_new_dir, json_number
from ldp_audit.training.flower import client
from ldp_audit.training.flower import run as app_run
from ldp_audit.training.flower.protocol import (
    agent_rng,
    require_flwr,
    sealed_report,
    server_settings,
)
from ldp_audit.training.pgc_a3c._kernels import agg_one
from ldp_audit.training.pgc_a3c.aggregator import Aggregator
from ldp_audit.training.pgc_a3c.config import PgcA3cConfig
from ldp_audit.training.pgc_a3c.model import init_theta
from ldp_audit.training.pgc_a3c.privacy import privatize_reports
from ldp_audit.training.pgc_a3c.rollout import episode_gradients
from ldp_audit.training.pgc_a3c.run_dir import TRANSCRIPT_KEYS, stack_records
from ldp_audit.validation import check_bool, check_int, check_positive, check_real

__all__ = [
    "AgentSecrets",
    "LdpReleaseMod",
    "make_client_app",
    "make_server_app",
    "run_simulation",
    "write_app_project",
]

# Raw gradients between a train function and the release mod of the SAME process, keyed by the
# instruction message's id. Never serialised, never part of a Message or a Context.
_PENDING: dict[str, dict[str, Any]] = {}
_PENDING_LOCK = threading.Lock()


# ==============================================================================================
# Configuration
# ==============================================================================================


@dataclass(frozen=True)
class AgentSecrets:
    """What only an agent knows: its gravity and its noise/episode seed (None = OS entropy)."""

    gravity: float
    seed: int | None = None

    def __post_init__(self) -> None:
        check_positive(self.gravity, "gravity")
        if self.seed is not None:
            check_int(self.seed, "seed", minimum=0)


def _gravities(value: Any, name: str) -> list[float]:
    """A comma list of gravities (``"9.7,9.9"``, or a list of numbers) as floats: an item that
    is empty or not a number is refused, naming ``name`` and the value (``float()`` of each
    item raised a bare ValueError in the ServerApp, and the command dropped an empty item)."""
    if isinstance(value, (list, tuple)):  # numbers, checked (a '9.7' or True item refused)
        return [check_real(x, f"{name} item") for x in value]
    try:
        if not isinstance(value, str):
            raise ValueError
        return [float(x) for x in value.split(",")]  # text: each item parsed, none dropped
    except ValueError:
        raise InvalidParameterError(
            f"{name} must be a comma list of numbers, got {value!r}"
        ) from None


def _pgc_config(cfg: Any, n_agents: int) -> Any:
    """The PgcA3cConfig of a Flower run: 1 trial, n_agents workers, T = cfg.rounds rounds."""

    if isinstance(cfg, Mapping):
        cfg = PgcA3cConfig.from_dict(dict(cfg))
    if not isinstance(cfg, PgcA3cConfig):
        raise InvalidParameterError(f"config must be a PgcA3cConfig, got {type(cfg).__name__}")
    if cfg.agent_gravities is not None:
        raise InvalidParameterError(
            "config.agent_gravities must be None in a Flower run: gravities are the agents' "
            "secrets (give them to the clients as AgentSecrets / node config 'gravity')"
        )
    if cfg.stop_at_target:
        raise InvalidParameterError("config.stop_at_target is not supported by the Flower app")

    return replace(cfg, trials=1, n_agents=n_agents, max_submissions=n_agents * cfg.rounds)


# ==============================================================================================
# Client side: the agent and its release mod
# ==============================================================================================


def _agent_state(context: Any) -> tuple[int, AgentSecrets, Path]:
    """(agent id, AgentSecrets, ledger dir) from the node config, else from the run config."""
    nc, rc = dict(context.node_config), dict(context.run_config)
    if "partition-id" not in nc:
        raise InvalidParameterError("node config must give 'partition-id' (the agent id)")
    # types checked, not coerced: '1' and True are refused, named with their key
    agent = check_int(nc["partition-id"], "node config 'partition-id'", minimum=0)
    if "gravity" in nc:  # a node that gives its gravity never reads a file the run config names
        seed = nc.get("agent-seed")
        sec = AgentSecrets(
            check_positive(nc["gravity"], "node config 'gravity'"),
            None if seed is None else check_int(seed, "node config 'agent-seed'", minimum=0),
        )
    else:
        # the simulated agents' secrets (run_simulation writes this file for the ClientApps;
        # a real SuperNode gives its own in its node config; the ServerApp never reads it)
        path = rc.get("agents-file")
        data = json.loads(Path(str(path)).read_text()) if path else {}
        if str(agent) not in data:
            raise InvalidParameterError(
                f"agent {agent} has no private gravity (node config 'gravity' or AgentSecrets)"
            )
        sec = AgentSecrets(data[str(agent)]["gravity"], data[str(agent)].get("seed"))
    ldir = nc.get("ledger-dir", rc.get("ledger-dir") or None)
    if ldir is None:
        raise InvalidParameterError(f"agent {agent} has no ledger dir (node config 'ledger-dir')")
    if not isinstance(ldir, str) or not ldir:  # was str()-coerced: ledger-dir=5 was folder '5'
        raise InvalidParameterError(f"node config 'ledger-dir' must be a folder path, got {ldir!r}")
    return agent, sec, Path(ldir)


class LdpReleaseMod(client.LdpReleaseMod):
    """Flower client mod: the release path of :mod:`ldp_audit.release` around a train function
    (the generic mod's steps, :class:`ldp_audit.training.flower.client.LdpReleaseMod`).

    After the train function returns, the mod takes the raw gradient it left in process memory,
    charges the agent's own ledger (``<ledger_dir>/agent-<id>.sqlite``, budget = the config's
    ``budget`` or its total epsilon) durably, randomises with the config's mechanism and the
    agent's noise generator, and puts the sealed, noisy report in the reply. A charge refused
    (budget) or any failure gives an error reply: nothing is released.
    """

    def _before(self, msg: Any, context: Any) -> None:
        return None

    def _taken(self, msg: Any, job: Any) -> Any:
        with _PENDING_LOCK:  # the gradient never outlives this call, whatever happens
            return _PENDING.pop(msg.metadata.message_id, None)

    def _sealed(self, out: Any, context: Any, raw: Any) -> Any:
        from flwr.app import ArrayRecord, ConfigRecord

        if raw is None:
            raise InvalidParameterError("no gradient to release")
        rel = self._release(raw, context)
        out.content["report"] = ArrayRecord([np.ascontiguousarray(rel.values)])
        out.content["release"] = ConfigRecord(
            {
                "sealed": True,
                "epsilon": float(rel.epsilon),
                "mechanism": json.dumps(raw["mechanism"]),
                "agent": int(raw["agent"]),
            }
        )
        return out.content

    def _refusal(self, exc: Exception) -> str:
        if isinstance(exc, (BudgetExceeded, LedgerError)):  # about the ledger, not the data
            return f"{type(exc).__name__}: {exc}"
        # a message may quote the private gravity
        return f"{type(exc).__name__} (its message may quote private values: not sent)"

    def _release(self, raw: dict[str, Any], context: Any) -> Any:

        cfg = raw["config"]
        agent, sec, ldir = _agent_state(context)
        ldir.mkdir(parents=True, exist_ok=True)
        total = cfg.budget if cfg.budget is not None else cfg.epsilon
        budget = None if math.isinf(total) else Budget(float(total))
        with Ledger(str(ldir / f"agent-{agent}.sqlite")) as ledger:
            return privatize_reports(
                raw["grad"],
                mechanism=cfg.make_mechanism(),
                accountant=Accountant(ledger=ledger, budget=budget),
                agent_ids=[f"0/{agent}"],
                trial=np.zeros(1, dtype=np.int64),
                agent=np.array([agent], dtype=np.int64),
                # stream 1: the noise; the ledger's row count: a rerun never reuses it
                rng=agent_rng(sec.seed, agent, raw["submission"], 1, len(ledger)),
                clip=cfg.effective_clip if cfg.mechanism == "none" else None,
            )


def _train(msg: Any, context: Any) -> Any:
    """The agent's train function: one episode at the broadcast theta; the raw gradient goes to
    this process's release mod (module-level, so that pickling the app never copies it)."""
    from flwr.app import Message, MetricRecord, RecordDict

    agent, sec, _ = _agent_state(context)
    cfg = _pgc_config(json.loads(str(msg.content["config"]["pgc-config"])), 1)
    submission = int(msg.content["config"]["submission"])
    theta = msg.content["theta"].to_numpy_ndarrays()[0].astype(np.float64).reshape(1, -1)
    grad, score = episode_gradients(
        theta,
        sec.gravity,
        agent_rng(sec.seed, agent, submission, 0),  # stream 0: the episode
        max(0.0, float(cfg.alpha_start) - submission / float(cfg.alpha_decay)),  # alpha_n
        cfg.episode_steps,
        gamma=cfg.gamma,
        lam=cfg.lam,
        beta=cfg.beta,
        acting=cfg.acting,
    )
    with _PENDING_LOCK:  # to the release mod of this process; never into the message
        _PENDING[msg.metadata.message_id] = {
            "grad": grad,
            "config": cfg,
            "agent": agent,
            "submission": submission,
            "mechanism": cfg.make_mechanism().to_config(),
        }
    return Message(
        RecordDict({"result": MetricRecord({"score": float(score[0]), "submission": submission})}),
        reply_to=msg,
    )


def make_client_app() -> Any:
    """The agents' ClientApp (with :class:`LdpReleaseMod`): each agent's gravity, agent-seed and
    ledger dir come from its node config (``gravity``, ``agent-seed``, ``ledger-dir``), else, in
    a simulation, from the run config's ``agents-file`` and ``ledger-dir``."""
    require_flwr()
    from flwr.clientapp import ClientApp

    app = ClientApp(mods=[LdpReleaseMod()])
    app.train()(_train)
    return app


# ==============================================================================================
# Server side: eq. 22 and the recorder
# ==============================================================================================


def _run_server(grid: Any, context: Any) -> Path:
    """The ServerApp's main: broadcast, receive, aggregate, record."""
    from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, RecordDict

    from ldp_audit.training.pgc_a3c.run_dir import cartpole_metrics, open_writer

    rc = dict(context.run_config)
    for key in ("pgc-config", "run-dir"):
        if key not in rc:
            raise InvalidParameterError(f"run config must give {key!r}")
    seed, timeout, overwrite = server_settings(rc)
    want = check_int(rc.get("num-agents", 0), "run config 'num-agents'", minimum=0)
    wait_until = time.monotonic() + timeout
    while len(nodes := sorted(grid.get_node_ids())) < want and time.monotonic() < wait_until:
        time.sleep(0.5)  # for the SuperNodes the run config names (num-agents)
    if not nodes:
        raise InvalidParameterError("no SuperNode connected")
    k_agents = len(nodes)
    raw_cfg = rc["pgc-config"]
    cfg = _pgc_config(json.loads(raw_cfg) if isinstance(raw_cfg, str) else raw_cfg, k_agents)
    gravities = None
    if gt := rc.get("scoring-gravities"):  # "" is the app project's default: no ground truth
        name = "run config 'scoring-gravities'"
        gravities = [check_positive(g, f"{name} item") for g in _gravities(gt, name)]
        if len(gravities) != k_agents:
            raise InvalidParameterError(
                f"{name} must give one gravity per agent ({k_agents}), got {gt!r}"
            )
    mech = cfg.make_mechanism()
    w = open_writer(
        rc["run-dir"],
        cfg,
        seed,
        mode="overwrite" if overwrite else "new",
        extra={"engine": f"flower {require_flwr().__version__}", "protocol": "synchronous rounds"},
    )
    acc = Accountant(ledger=w.open_ledger())
    event = mech.event()  # what one report charges (the clients' ledgers charge the same)
    t0 = time.perf_counter()
    # eq. 22 as the engine's Aggregator steps it (the config's aggregator and step size), one
    # trial, reports arriving as arrays (agg_one: the Aggregator's compiled step on a report)
    agg = Aggregator(
        init_theta(agent_rng(seed, 0, 0))[None, :],
        cfg.effective_aggregator_lr,
        cfg.effective_buffer_size,
        optimizer=cfg.aggregator,
    )
    theta, d, cfg_json = agg.theta[0], agg.theta.shape[1], json.dumps(cfg.to_dict())
    declared, eps = mech.to_config(), cfg.epsilon_per_submission  # what a reply must carry
    # the transcript's columns, one row per accepted report (thetas: one row per round)
    rows: dict[str, list[Any]] = {k: [] for k in TRANSCRIPT_KEYS if k != "thetas"}
    thetas: list[np.ndarray] = []
    agent_of_node: dict[int, int] = {}
    rejected: list[dict[str, Any]] = []
    status = "failed"
    try:
        for r in range(cfg.rounds):
            thetas.append(theta.copy())  # row r of thetas: the reports of round r
            msgs = []
            for k, node in enumerate(nodes):
                n = r * k_agents + k
                rec = ConfigRecord({"pgc-config": cfg_json, "submission": n, "round": r})
                content = RecordDict({"theta": ArrayRecord([theta.copy()]), "config": rec})
                msgs.append(Message(content, node, MessageType.TRAIN, group_id=str(r)))
            replies = list(grid.send_and_receive(msgs, timeout=timeout))
            by_node = {rep.metadata.src_node_id: rep for rep in replies}
            ok: list[tuple[str, Any]] = []
            seen: set[int] = set()  # one report per agent id and round (not two nodes' with one)
            for k, node in enumerate(nodes):
                n = r * k_agents + k
                rep = by_node.get(node)
                try:
                    if rep is None:
                        raise InvalidParameterError("no reply within the timeout")
                    if rep.has_error():
                        raise InvalidParameterError(f"client error: {rep.error.reason}")
                    y = sealed_report(rep.content, "report", "release", declared, eps, d)
                    if "result" not in rep.content.metric_records:
                        raise InvalidParameterError("reply has no MetricRecord 'result'")
                    res = rep.content["result"]  # a client's values: checked, never coerced
                    score = check_real(res.get("score"), "reply's score")
                    sub = check_int(res.get("submission"), "reply's submission", minimum=0)
                    if sub != n:
                        raise InvalidParameterError(f"reply for submission {sub}, expected {n}")
                    agent = check_int(
                        rep.content["release"].get("agent"), "reply's agent id", minimum=0
                    )
                    if agent_of_node.setdefault(node, agent) != agent:
                        raise InvalidParameterError("agent id changed between rounds")
                    if agent in seen:
                        raise InvalidParameterError(f"agent {agent} already replied in round {r}")
                    seen.add(agent)
                except InvalidParameterError as exc:
                    rejected.append({"round": r, "node": int(node), "reason": str(exc)})
                    continue
                ok.append((f"0/{agent}", event))
                for key, v in zip(rows, (0, agent, k, r, n, r, y[None, :], score), strict=True):
                    rows[key].append(np.atleast_1d(v))
                agg_one(*agg.state, 0, y)  # eq. 22, in node order
            if ok:  # the server's record of the charges its clients declared
                acc.charge_many(ok)
        # a run in which no report was accepted released nothing usable: say so in its status
        status = "complete" if rows["agent"] or not rejected else "failed"
    finally:
        transcript, _ = stack_records(rows, thetas, d)
        n_rows = transcript["agent"].size
        w.write_npz("transcript.npz", transcript)
        if gravities is not None:
            g = np.asarray(gravities, dtype=np.float64)
            w.write_npz("secrets.npz", {"gravity": g[transcript["agent"]]})
        # the engine's metrics of one trial (FST over zeta, NaN where no report came)
        zeta = np.full((1, cfg.max_submissions), np.nan)
        zeta[0, :n_rows] = transcript["score"]
        done = SimpleNamespace(config=cfg, zeta=zeta, submissions=[n_rows], stopped_at_target=[0])
        spent = acc.spent_all(delta=0.0)
        w.write_json(
            "metrics.json",
            {
                "zeta": [transcript["score"].tolist()],
                **cartpole_metrics(done),
                "seconds": time.perf_counter() - t0,
                "engine": "flower",
                "agents": k_agents,
                "rounds": int(cfg.rounds),
                "rejected": rejected,
                "privacy": {
                    "epsilon_per_submission": json_number(cfg.epsilon_per_submission),
                    "rounds": int(cfg.rounds),
                    "epsilon_total": json_number(cfg.epsilon),
                    "agents": len(spent),
                    "max_spent_epsilon": json_number(max(spent.values(), default=0.0)),
                },
            },
        )
        w.write_npz("model.npz", {"theta": agg.theta.copy()})
        w.finish(status=status)
        acc.close()
    return w.path


def make_server_app() -> Any:
    """The aggregator's ServerApp; the run config gives ``pgc-config`` (a PgcA3cConfig dict or
    its JSON), ``run-dir``, ``seed``, ``overwrite``, ``scoring-gravities``, ``timeout``,
    ``num-agents``."""
    require_flwr()
    from flwr.serverapp import ServerApp

    app = ServerApp()
    app.main()(_run_server)
    return app


_APP_PYPROJECT = app_run.app_pyproject(
    "ldp-pgc-a3c",
    "PGC-A3C (locally private A3C) on Flower, from ldp-audit",
    "pgc_app",
    """\
pgc-config = "{}"
run-dir = ""
seed = 0
num-agents = 0
scoring-gravities = ""
timeout = 600.0
overwrite = false
agents-file = ""   # simulation only: the ClientApps' secrets file (run_simulation writes it)
ledger-dir = ""    # simulation only: the agents' ledgers (a SuperNode's node config overrides)
""",
)

_APP_MODULE = '''"""PGC-A3C on Flower (ldp-audit): the app objects the deployment engine loads."""

from ldp_audit.training.flower.pgc_app import make_client_app, make_server_app

client_app = make_client_app()  # gravity, agent-seed, ledger-dir from the node config
server_app = make_server_app()  # pgc-config, run-dir, seed, ... from the run config
'''


def write_app_project(path: str | Path) -> Path:
    """Write a Flower app project (``pyproject.toml`` + ``pgc_app.py``) for ``flwr run``.

    The deployment engine loads ``pgc_app:server_app`` / ``pgc_app:client_app`` from it; the
    run config (``--run-config``) gives ``pgc-config`` (a PgcA3cConfig as JSON), ``run-dir``,
    ``seed``, ``num-agents`` (wait for that many SuperNodes), ``scoring-gravities`` (experiment
    mode only), ``timeout``; each SuperNode's ``--node-config`` gives ``partition-id``,
    ``gravity``, ``agent-seed`` and ``ledger-dir``. ``path`` must not exist or be empty.
    """
    return app_run.write_app_project(path, _APP_PYPROJECT, "pgc_app", _APP_MODULE)


# ==============================================================================================
# Simulation
# ==============================================================================================


def run_simulation(
    config: Any,
    run_dir: str | Path,
    *,
    agents: Sequence[AgentSecrets],
    ledger_dir: str | Path,
    seed: int = 0,
    ground_truth: bool = True,
    overwrite: bool = False,
    log: str | Path | None = None,
) -> Path:
    """Train PGC-A3C with Flower's simulation engine (one SuperNode per agent), run the current
    Flower way: ``flwr run`` on a local simulation SuperLink
    (:func:`ldp_audit.training.flower.run.flwr_run`).

    Args:
        config: a :class:`~ldp_audit.training.pgc_a3c.PgcA3cConfig` (``rounds`` = T, the
            submissions per agent; ``trials``, ``n_agents`` and ``max_submissions`` follow from
            the federation).
        run_dir: the server's run directory (new, or ``overwrite``).
        agents: one :class:`AgentSecrets` per agent (gravity, seed): client-side only.
        ledger_dir: the agents' ledgers (``agent-<id>.sqlite``; must not hold them yet).
        seed: the server's seed (initial theta).
        ground_truth: let the recorder write ``secrets.npz`` (the agents' gravities, for
            scoring attacks only).
        log: a file for Flower's output (default: discarded).

    Returns:
        The run directory.
    """
    require_flwr()
    import tempfile

    agents = list(agents)
    if not agents or not all(isinstance(a, AgentSecrets) for a in agents):
        raise InvalidParameterError("agents must be a non-empty list of AgentSecrets")
    cfg = _pgc_config(config, len(agents))
    seed, overwrite = check_int(seed, "seed", minimum=0), check_bool(overwrite, "overwrite")
    run_dir = check_new_dir(run_dir, name="run_dir", overwrite=overwrite, can_resume=False)
    run_dir = run_dir.resolve()
    ldir = Path(ledger_dir).resolve()
    if ldir.exists() and any(ldir.glob("agent-*.sqlite")):
        raise InvalidParameterError(
            f"ledger_dir {str(ldir)!r} already holds agent ledgers; use a new folder"
        )
    settings: dict[str, Any] = {
        "pgc-config": json.dumps(cfg.to_dict()),
        "run-dir": str(run_dir),
        "seed": seed,
        "overwrite": overwrite,
        "num-agents": len(agents),
        "ledger-dir": str(ldir),
        "timeout": 600.0,
    }
    if ground_truth:
        settings["scoring-gravities"] = ",".join(repr(float(a.gravity)) for a in agents)
    with tempfile.TemporaryDirectory(prefix="ldp-pgc-flower-") as tmp:
        secrets_file = Path(tmp, "agents.json")  # for the simulated ClientApps only
        secrets = {str(k): {"gravity": a.gravity, "seed": a.seed} for k, a in enumerate(agents)}
        secrets_file.write_text(json.dumps(secrets))
        settings["agents-file"] = str(secrets_file)
        rejected = app_run.run_app_project(
            write_app_project, run_dir, run_config=settings, clients=len(agents), log=log
        )
    if rejected:
        print(
            f"flower.pgc_app: {len(rejected)} replies refused (see metrics.json 'rejected'); "
            f"the first: {rejected[0]['reason'][:300]}",
            file=sys.stderr,
        )
    return run_dir


# ==============================================================================================
# Command line
# ==============================================================================================


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m ldp_audit.training.flower.pgc_app``: a Flower simulation of PGC-A3C into a run
    directory. Exit 0 ok, 2 usage or input error (no traceback), 130 / 143 Ctrl-C / SIGTERM."""
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m ldp_audit.training.flower.pgc_app",
        description="PGC-A3C in Flower's simulation engine: one SuperNode per agent, the "
        "release (charge the agent's ledger, then randomise) as a client mod.",
    )
    p.add_argument("--out", required=True, help="the server's run directory (new or empty)")
    p.add_argument("--ledger-dir", default=None, help="the agents' ledgers (default: OUT-agents)")
    p.add_argument("--gravities", default="9.7,9.8,9.9", help="one private gravity per agent")
    p.add_argument("--mechanism", choices=("laplace", "prs", "none"), default="laplace")
    p.add_argument("--epsilon", type=float, default=None, help="total epsilon per agent (5)")
    p.add_argument("--rounds", type=int, default=3, help="submissions per agent T")
    p.add_argument("--buffer-size", type=int, default=None, help="MAX_BUF (paper default)")
    p.add_argument("--seed", type=int, default=0, help="server seed; agent k uses seed+1+k")
    p.add_argument("--overwrite", action="store_true", help="replace an earlier run in --out")
    p.add_argument("--log", default=None, help="file for Flower's output (default: discarded)")
    p.add_argument(
        "--no-ground-truth", action="store_true", help="do not write secrets.npz (scoring)"
    )
    a = p.parse_args(argv)

    def body() -> int:
        grav = _gravities(a.gravities, "--gravities")
        if a.mechanism == "none" and a.epsilon is not None and not math.isinf(a.epsilon):
            raise InvalidParameterError(  # as `ldp-audit train pgc-a3c`: none is epsilon = inf
                f"--epsilon must be omitted or inf with --mechanism none, got {a.epsilon!r}"
            )
        cfg = PgcA3cConfig(
            mechanism=a.mechanism,
            epsilon=5.0 if a.epsilon is None else a.epsilon,
            rounds=a.rounds,
            buffer_size=a.buffer_size,
        )
        agents = [AgentSecrets(g, a.seed + 1 + k) for k, g in enumerate(grav)]
        ledger_dir = a.ledger_dir or f"{str(a.out).rstrip('/')}-agents"
        run = run_simulation(
            cfg,
            a.out,
            agents=agents,
            ledger_dir=ledger_dir,
            seed=a.seed,
            ground_truth=not a.no_ground_truth,
            overwrite=a.overwrite,
            log=a.log,
        )
        from ldp_audit.training.flower.server import summary

        print(summary(run, ledger_dir))
        return 0

    return app_run.run_command("flower.pgc_app", body)


if __name__ == "__main__":  # pragma: no cover
    # run the module under its import name, so that the apps Ray pickles refer to
    # ldp_audit.training.flower.pgc_app, not to __main__ (whose globals hold a lock)
    from ldp_audit.training.flower.pgc_app import main as _main

    sys.exit(_main())
