"""Local DP for any Flower app: a client mod that releases the train reply, a server-side recorder.

Optional extra: ``pip install 'ldp-audit[flower]'`` (Flower 1.41.0). This module works with any
Flower ``ClientApp`` whose train function replies with its model parameters in an
``ArrayRecord`` (Flower's ``Message`` API convention: ``msg.content["arrays"]`` in,
``reply.content["arrays"]`` out), whatever the model or the data (docs/flower.md, "Any Flower
app"; the example app in ``examples/flower_digits/`` is a FedAvg on scikit-learn's digits).

Client side, :class:`LdpReleaseMod` (``ClientApp(mods=[LdpReleaseMod()])``), for every train
instruction:

1. reads the mechanism (``ldp-mechanism``, a :func:`ldp_audit.mechanisms.from_config` dict as
   JSON), the client's total budget (``ldp-budget``) and what is released (``ldp-release``:
   ``"update"``, the local parameters minus the broadcast ones, or ``"parameters"``) from the
   run config; a SuperNode may pin any of them in its node config, and then a run config that
   asks for something else is refused;
2. runs the train function, flattens its reply's arrays (in the record's order) and computes
   the update;
3. releases it through :func:`ldp_audit.release.release`: the client's **own** durable ledger
   (``<ledger dir>/client-<id>.sqlite``, the budget enforced there) is charged first, then the
   mechanism randomises (clip included), then the report is sealed;
4. replaces the whole reply by: the noisy report (``ldp-report``, float64), the arrays the
   strategy aggregates rebuilt from it (broadcast + noisy update, in the original dtypes and
   shapes), the release's description (``ldp-release``: sealed, epsilon, delta, mechanism,
   agent, round) and ``num-examples = 1`` (the true count is data-dependent). Metrics named in
   ``ldp-public-metrics`` pass in clear (the user declares them public); everything else the
   train function returned is dropped. Nothing un-noised leaves. A refused charge, a bad
   setting or an error gives an error reply: nothing is released. Evaluate and query
   instructions get an error reply too (their metrics would be un-noised).

Server side, :func:`ldp_server_main` wraps a Flower strategy (default ``FedAvg``) in
:class:`LdpStrategy`, which refuses replies without a sealed release of the declared mechanism,
records every accepted report with the parameters it was computed at and writes a run
directory in the own-loop layout (``ldp_audit.run``, algorithm ``own-loop``: config, manifest,
the server's record ledger, transcript, metrics, model), so ``ldp-audit report`` and ``ldp-audit
audit --run-dir`` read it and the generic dynamics attack
(:func:`ldp_audit.attacks.dynamics.private_param_dynamics`) scores it when the app declares a
private parameter per client. ``secrets.npz`` (the private value per row, for scoring only) is
written only when the experimenter gives the recorder the ground truth.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError

__all__ = [
    "ClientSettings",
    "LdpReleaseMod",
    "FlowerRecorder",
    "flatten",
    "unflatten",
    "release_reply",
    "sealed_content",
    "ldp_server_main",
    "summary",
]

#: Run-config keys read by the client mod (a node config may pin the first three).
RUN_CONFIG_KEYS = (
    "ldp-mechanism",
    "ldp-budget",
    "ldp-release",
    "ldp-ledger-dir",
    "ldp-public-metrics",
    "ldp-arrays-key",
)
#: Run-config keys read by :func:`ldp_server_main`.
SERVER_CONFIG_KEYS = ("run-dir", "overwrite", "num-server-rounds", "min-nodes", "timeout")
_RELEASES = ("update", "parameters")


def _flwr() -> Any:
    try:
        import flwr
    except ImportError:
        raise InvalidParameterError(
            "the Flower integration needs Flower: pip install 'ldp-audit[flower]' "
            "(flwr[simulation]==1.41.0)"
        ) from None
    return flwr


# ==============================================================================================
# Arrays <-> one flat vector
# ==============================================================================================


def flatten(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """Concatenate arrays (in order) into one float64 vector."""
    if not arrays:
        raise InvalidParameterError("the model has no arrays to release")
    parts = []
    for i, a in enumerate(arrays):
        a = np.asarray(a)
        if a.dtype.kind not in "fiu":
            raise InvalidParameterError(f"array {i} must be numeric, got dtype {a.dtype}")
        parts.append(a.astype(np.float64).reshape(-1))
    return np.concatenate(parts)


def unflatten(vector: np.ndarray, like: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Split ``vector`` into arrays shaped and typed like ``like`` (the inverse of flatten)."""
    out, i = [], 0
    for a in like:
        a = np.asarray(a)
        n = a.size
        out.append(np.asarray(vector[i : i + n]).reshape(a.shape).astype(a.dtype))
        i += n
    if i != np.asarray(vector).size:
        raise InvalidParameterError(f"vector has {np.asarray(vector).size} values, model {i}")
    return out


# ==============================================================================================
# Client side
# ==============================================================================================


def _mechanism_from(text: Any, where: str) -> Any:
    from ldp_audit.mechanisms import from_config

    if isinstance(text, Mapping):
        cfg = dict(text)
    elif isinstance(text, str):
        try:
            cfg = json.loads(text)
        except json.JSONDecodeError:
            raise InvalidParameterError(
                f"{where} 'ldp-mechanism' must be a mechanism config as JSON "
                f'(e.g. {{"name": "laplace", "epsilon": 1.0, "clip": 1.0}}), got {text!r}'
            ) from None
    else:
        raise InvalidParameterError(f"{where} 'ldp-mechanism' must be a JSON str, got {text!r}")
    return from_config(cfg)


def _budget_from(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise InvalidParameterError(f"{where} 'ldp-budget' must be a number > 0, got {value!r}")
    try:
        b = float(value)
    except ValueError:
        raise InvalidParameterError(
            f"{where} 'ldp-budget' must be a number > 0, got {value!r}"
        ) from None
    if not b > 0 or math.isnan(b):
        raise InvalidParameterError(f"{where} 'ldp-budget' must be a number > 0, got {value!r}")
    return b


@dataclass(frozen=True)
class ClientSettings:
    """What one client releases, and how (from the run config and the node config).

    Attributes:
        mechanism: the :mod:`ldp_audit.mechanisms` mechanism (clip included).
        budget: the client's total epsilon (its ledger refuses a release beyond it).
        release: ``"update"`` (local minus broadcast parameters) or ``"parameters"``.
        agent: the client's id (node config ``partition-id``, or ``agent-id``).
        ledger: the client's own ledger file (node config ``ledger-dir``; the run config's
            ``ldp-ledger-dir`` is for simulations: in a deployment a folder the server names
            could be a fresh one each run, resetting the client's spend).
        public_metrics: metric names the user declares public (passed in clear).
        arrays_key: the ArrayRecord holding the model (``"arrays"``).
        seed: the client's noise seed (node config ``agent-seed``); None = OS entropy.
    """

    mechanism: Any
    budget: float
    release: str
    agent: int
    ledger: Path
    public_metrics: tuple[str, ...] = ()
    arrays_key: str = "arrays"
    seed: int | None = None

    @classmethod
    def from_configs(
        cls, run_config: Mapping[str, Any], node_config: Mapping[str, Any]
    ) -> ClientSettings:
        """Validate the settings; a node-config pin of ``ldp-mechanism``, ``ldp-budget`` or
        ``ldp-release`` must agree with the run config (which the server writes)."""
        rc, nc = dict(run_config), dict(node_config)
        for key in ("ldp-mechanism", "ldp-budget", "ldp-release"):
            if key in nc and key in rc:
                if key == "ldp-mechanism":
                    same = (
                        _mechanism_from(nc[key], "node config").to_config()
                        == _mechanism_from(rc[key], "run config").to_config()
                    )
                elif key == "ldp-budget":
                    same = _budget_from(nc[key], "node config") == _budget_from(rc[key], "run")
                else:
                    same = str(nc[key]) == str(rc[key])
                if not same:
                    raise InvalidParameterError(
                        f"the run config asks for {key} = {rc[key]!r}, but this node is pinned to "
                        f"{nc[key]!r}: refused"
                    )
        merged = {**rc, **nc}
        for key in ("ldp-mechanism", "ldp-budget"):
            if key not in merged:
                raise InvalidParameterError(f"the run config must give {key!r}")
        mech = _mechanism_from(merged["ldp-mechanism"], "run config")
        budget = _budget_from(merged["ldp-budget"], "run config")
        rel = merged.get("ldp-release", "update")
        if rel not in _RELEASES:
            raise InvalidParameterError(f"'ldp-release' must be one of {_RELEASES}, got {rel!r}")
        agent_raw = nc.get("agent-id", nc.get("partition-id"))
        if isinstance(agent_raw, bool) or not isinstance(agent_raw, int) or agent_raw < 0:
            raise InvalidParameterError(
                f"node config must give 'partition-id' (or 'agent-id'), an int >= 0, "
                f"got {agent_raw!r}"
            )
        ldir = nc.get("ledger-dir", rc.get("ldp-ledger-dir"))
        if not isinstance(ldir, str) or not ldir:
            raise InvalidParameterError(
                f"client {agent_raw} has no ledger folder (node config 'ledger-dir' or run "
                f"config 'ldp-ledger-dir'), got {ldir!r}"
            )
        if not Path(ldir).is_absolute():
            raise InvalidParameterError(
                f"the ledger folder must be an absolute path (Flower runs the ClientApp in a "
                f"process whose working folder is not yours), got {ldir!r}"
            )
        pub = merged.get("ldp-public-metrics", "")
        if not isinstance(pub, str):
            raise InvalidParameterError(f"'ldp-public-metrics' must be a str, got {pub!r}")
        key = merged.get("ldp-arrays-key", "arrays")
        if not isinstance(key, str) or not key:
            raise InvalidParameterError(f"'ldp-arrays-key' must be a non-empty str, got {key!r}")
        seed = nc.get("agent-seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise InvalidParameterError(f"node config 'agent-seed' must be an int, got {seed!r}")
        return cls(
            mechanism=mech,
            budget=budget,
            release=rel,
            agent=int(agent_raw),
            ledger=Path(ldir) / f"client-{int(agent_raw)}.sqlite",
            public_metrics=tuple(s.strip() for s in pub.split(",") if s.strip()),
            arrays_key=key,
            seed=seed,
        )

    def rng(self, server_round: int) -> np.random.Generator:
        """The client's noise generator for one round (OS entropy without ``agent-seed``:
        nobody, the server included, can replay it)."""
        if self.seed is None:
            return np.random.default_rng()
        return np.random.default_rng(
            np.random.SeedSequence(self.seed, spawn_key=(self.agent, int(server_round)))
        )


def release_reply(
    broadcast: Sequence[np.ndarray],
    local: Sequence[np.ndarray],
    settings: ClientSettings,
    server_round: int,
) -> tuple[list[np.ndarray], np.ndarray, Any]:
    """Charge the client's ledger, randomise its update, and build what may leave.

    Args:
        broadcast: the parameters the server sent (the train instruction's arrays).
        local: the parameters the train function returned.
        settings: the client's :class:`ClientSettings`.
        server_round: the round (the noise stream of a seeded client).

    Returns:
        (arrays for the reply, the noisy report (d,), the
        :class:`~ldp_audit.release.SealedRelease`). The arrays are the broadcast plus the
        noisy update ("update") or the noisy parameters ("parameters"), in the original shapes
        and dtypes: a function of the report and of public values only.

    Raises:
        BudgetExceeded: the client's ledger refused the charge (nothing is randomised).
        InvalidParameterError: the reply's arrays do not match the broadcast model.
    """
    from ldp_audit.accountant import Accountant, Budget, Ledger
    from ldp_audit.release import release

    if len(local) != len(broadcast) or any(
        np.shape(a) != np.shape(b) for a, b in zip(local, broadcast, strict=True)
    ):
        raise InvalidParameterError(
            "the train reply's arrays must have the broadcast model's count and shapes: "
            f"{[np.shape(a) for a in local]} vs {[np.shape(b) for b in broadcast]}"
        )
    g, x = flatten(broadcast), flatten(local)
    if not np.all(np.isfinite(x)):
        raise InvalidParameterError("the train reply's arrays hold non-finite values")
    raw = x - g if settings.release == "update" else x
    settings.ledger.parent.mkdir(parents=True, exist_ok=True)
    delta = float(getattr(settings.mechanism, "delta", 0.0) or 0.0)
    ledger = Ledger(str(settings.ledger))
    try:
        # pure epsilon: sequential composition; (epsilon, delta) mechanisms (Gaussian): RDP
        method = "basic" if delta == 0.0 else "rdp"
        budget = Budget(settings.budget, delta=delta, method=method)
        acc = Accountant(ledger=ledger, budget=budget)
        rel = release(  # durable charge first, then the mechanism (its clip), then the seal
            raw[None, :],
            mechanism=settings.mechanism,
            accountant=acc,
            agent_ids=[str(settings.agent)],
            rng=settings.rng(server_round),
        )
    finally:
        ledger.close()
    report = np.array(rel.values[0], dtype=np.float64)
    out = g + report if settings.release == "update" else report
    return unflatten(out, broadcast), report, rel


def sealed_content(
    settings: ClientSettings,
    arrays: Sequence[np.ndarray],
    report: np.ndarray,
    rel: Any,
    public: Mapping[str, Any],
    server_round: int,
) -> Any:
    """The whole content of a released train reply (a Flower ``RecordDict``): the arrays rebuilt
    from the noisy report, the report itself, the release's description and the metrics the
    user declared public (``num-examples`` is 1 unless declared)."""
    from flwr.app import ArrayRecord, ConfigRecord, MetricRecord, RecordDict

    return RecordDict(
        {
            settings.arrays_key: ArrayRecord([np.asarray(a) for a in arrays]),
            "ldp-report": ArrayRecord([np.asarray(report, dtype=np.float64)]),
            "ldp-release": ConfigRecord(
                {
                    "sealed": True,
                    "epsilon": float(rel.epsilon),
                    "delta": float(rel.delta),
                    "mechanism": json.dumps(settings.mechanism.to_config()),
                    "release": settings.release,
                    "agent": settings.agent,
                    "server-round": int(server_round),
                }
            ),
            "metrics": MetricRecord({"num-examples": 1, **dict(public)}),
        }
    )


class LdpReleaseMod:
    """Flower client mod: every train reply leaves only as a local-DP release.

    Use it on any ClientApp whose train function replies with its parameters:
    ``ClientApp(mods=[LdpReleaseMod()])``. Settings come from the run config and the node
    config (:class:`ClientSettings`); see the module docstring for what the reply holds.
    """

    def __call__(self, msg: Any, context: Any, call_next: Any) -> Any:
        from flwr.app import Error, Message, MessageType

        if msg.metadata.message_type != MessageType.TRAIN:
            return Message(
                Error(
                    code=3,
                    reason="LdpReleaseMod releases train replies only (an evaluate or query "
                    "reply would carry un-noised values); evaluate on the server instead",
                ),
                reply_to=msg,
            )
        try:
            settings = ClientSettings.from_configs(context.run_config, context.node_config)
            if settings.arrays_key not in msg.content.array_records:
                raise InvalidParameterError(
                    f"the train instruction has no ArrayRecord {settings.arrays_key!r}"
                )
            broadcast = msg.content[settings.arrays_key].to_numpy_ndarrays()
            cfgs = msg.content.config_records
            server_round = int(
                next((c["server-round"] for c in cfgs.values() if "server-round" in c), 0)
            )
            try:
                out = call_next(msg, context)
            except Exception as exc:  # its message may quote private data: name the type only
                reason = f"the train function raised {type(exc).__name__}"
                return Message(Error(code=4, reason=reason), reply_to=msg)
            if out.has_error():
                return Message(Error(code=4, reason="the train function failed"), reply_to=msg)
            if settings.arrays_key not in out.content.array_records:
                raise InvalidParameterError(
                    f"the train reply has no ArrayRecord {settings.arrays_key!r}"
                )
            local = out.content[settings.arrays_key].to_numpy_ndarrays()
            arrays, report, rel = release_reply(broadcast, local, settings, server_round)
            public = {}
            for rec in out.content.metric_records.values():
                for k in settings.public_metrics:
                    if k in rec:
                        public[k] = rec[k]
        except Exception as exc:  # nothing released; the server sees only the reason
            return Message(Error(code=2, reason=f"{type(exc).__name__}: {exc}"), reply_to=msg)
        return Message(
            sealed_content(settings, arrays, report, rel, public, server_round), reply_to=msg
        )


# ==============================================================================================
# Server side: check, record, aggregate
# ==============================================================================================


class FlowerRecorder:
    """The server's record of a Flower run: an own-loop run directory (``ldp_audit.run``).

    Args:
        run_dir: the run directory (new or empty; ``overwrite`` to replace).
        system: the app's name (config.json's ``system``).
        mechanism: the mechanism the clients must release through.
        config: the app's config (JSON-able; recorded).
        private: the private parameter the clients hold, ``{"name": ..., "values": [...]}``
            (``env_id`` optional), or None.
        truth: ``agent id -> private value``, the ground truth for scoring attacks
            (experiments only: a real federation's server never learns it); None writes no
            ``secrets.npz``.
        seed: recorded in the manifest.
        budget: the per-client budget the protocol declares (``ldp-budget``; each client's own
            ledger enforces it), recorded as config.json's ``budget`` for the report.
    """

    def __init__(
        self,
        run_dir: Any,
        *,
        system: str,
        mechanism: Any,
        config: Mapping[str, Any] | None = None,
        private: Mapping[str, Any] | None = None,
        truth: Callable[[int], float] | None = None,
        seed: int = 0,
        overwrite: bool = False,
        engine: str = "",
        budget: float | None = None,
    ) -> None:
        from ldp_audit.accountant import Accountant
        from ldp_audit.accountant.events import event_for
        from ldp_audit.run import ALGORITHM, OwnLoopConfig
        from ldp_audit.rundir import RunWriter, check_new_dir, to_jsonable

        if truth is not None and not callable(truth):
            raise InvalidParameterError(f"truth must be callable or None, got {truth!r}")
        self.cfg = OwnLoopConfig(
            system=system,
            params=to_jsonable(dict(config or {})),
            mechanism=mechanism.to_config(),
            private_parameter=None if private is None else dict(private),
        )
        check_new_dir(run_dir, name="run-dir", overwrite=bool(overwrite))
        self.mechanism = mechanism
        self.event = event_for(mechanism)
        self.truth = truth
        self.writer = RunWriter(
            run_dir,
            algorithm=ALGORITHM,
            config=self.cfg.to_dict(),
            seed=int(seed),
            mechanism=mechanism.to_config(),
            mode="overwrite" if overwrite else "new",
            extra={
                "private_parameter": self.cfg.private_parameter,
                "system": system,
                "engine": engine or f"flower {_flwr().__version__}",
                "protocol": "Flower rounds; LdpReleaseMod on every client",
                "budget": None if budget is None else _budget_from(budget, "budget"),
            },
        )
        self.path = Path(self.writer.path)
        self.accountant = Accountant(ledger=self.writer.open_ledger())
        self.thetas: list[np.ndarray] = []
        self.rows: dict[str, list[Any]] = {
            k: [] for k in ("agent", "round", "submission", "theta_index", "report", "value")
        }
        self.rejected: list[dict[str, Any]] = []
        self.model: np.ndarray | None = None
        self.t0 = time.perf_counter()
        self._closed = False

    def broadcast(self, arrays: Sequence[np.ndarray]) -> int:
        """Record the parameters sent in a round; returns their row in ``thetas``."""
        t = flatten(arrays)
        if not self.thetas or not np.array_equal(self.thetas[-1], t):
            self.thetas.append(t)
        return len(self.thetas) - 1

    def check(self, content: Any, theta: np.ndarray, arrays_key: str) -> tuple[int, np.ndarray]:
        """(agent, noisy report) of a sealed reply, or InvalidParameterError saying why not."""
        if "ldp-release" not in content.config_records or "ldp-report" not in (
            content.array_records
        ):
            raise InvalidParameterError("reply has no sealed release (LdpReleaseMod did not run)")
        rel = content["ldp-release"]
        if rel.get("sealed") is not True:
            raise InvalidParameterError("reply's release is not sealed")
        if json.loads(str(rel["mechanism"])) != self.mechanism.to_config():
            raise InvalidParameterError(
                f"reply's mechanism {rel['mechanism']} differs from the declared "
                f"{self.mechanism.to_config()}"
            )
        eps = float(rel["epsilon"])
        want = float(self.mechanism.epsilon)
        if not (eps == want or math.isclose(eps, want, rel_tol=1e-12)):
            raise InvalidParameterError(f"reply's epsilon {eps!r} differs from {want!r}")
        y = np.asarray(content["ldp-report"].to_numpy_ndarrays()[0], dtype=np.float64)
        if y.shape != theta.shape or not np.all(np.isfinite(y)):
            raise InvalidParameterError(
                f"reply's report must be {theta.size} finite values, got shape {y.shape}"
            )
        if arrays_key not in content.array_records:
            raise InvalidParameterError(f"reply has no ArrayRecord {arrays_key!r}")
        got = content[arrays_key].to_numpy_ndarrays()
        like = unflatten(theta, got) if flatten(got).size == theta.size else None
        mode = rel.get("release", "update")
        want_arrays = unflatten(theta + y if mode == "update" else y, like or got)
        if like is None or any(
            not np.array_equal(a, b) for a, b in zip(got, want_arrays, strict=True)
        ):
            raise InvalidParameterError(
                "reply's arrays are not the function of its sealed report the protocol allows"
            )
        agent = rel.get("agent")
        if isinstance(agent, bool) or not isinstance(agent, int) or agent < 0:
            raise InvalidParameterError(f"reply's agent id must be an int >= 0, got {agent!r}")
        return agent, y

    def accept(self, server_round: int, agent: int, report: np.ndarray, theta_index: int) -> None:
        """Record one accepted report and the charge its client declared."""
        value = math.nan
        if self.truth is not None:
            value = float(self.truth(agent))
        self.accountant.charge_many([(str(agent), self.event)])
        n = len(self.rows["agent"])
        for k, v in (
            ("agent", agent),
            ("round", server_round),
            ("submission", n),
            ("theta_index", theta_index),
            ("report", report),
            ("value", value),
        ):
            self.rows[k].append(v)

    def reject(self, server_round: int, node: int, reason: str) -> None:
        self.rejected.append({"round": int(server_round), "node": int(node), "reason": reason})

    def close(self, status: str | None = None) -> Path:
        """Write transcript, secrets (with ``truth``), metrics and model; finish the manifest."""
        if self._closed:
            return self.path
        self._closed = True
        n = len(self.rows["agent"])
        d = self.thetas[0].size if self.thetas else 0
        if status is None:
            status = "complete" if n or not self.rejected else "failed"
        try:
            if n:
                self.writer.write_npz(
                    "transcript.npz",
                    {
                        "trial": np.zeros(n, dtype=np.int64),
                        "agent": np.asarray(self.rows["agent"], dtype=np.int64),
                        "round": np.asarray(self.rows["round"], dtype=np.int64),
                        "submission": np.asarray(self.rows["submission"], dtype=np.int64),
                        "theta_index": np.asarray(self.rows["theta_index"], dtype=np.int64),
                        "report": np.stack(self.rows["report"]).reshape(n, d),
                        "score": np.full(n, np.nan),
                        "thetas": np.stack(self.thetas).reshape(-1, d),
                    },
                )
                if self.truth is not None:
                    self.writer.write_npz(
                        "secrets.npz", {"value": np.asarray(self.rows["value"], dtype=np.float64)}
                    )
            spent = self.accountant.spent_all(delta=float(getattr(self.mechanism, "delta", 0.0)))
            from ldp_audit.rundir import json_number

            self.writer.write_json(
                "metrics.json",
                {
                    "submissions": n,
                    "agents": len(set(self.rows["agent"])),
                    "rounds": len(self.thetas),
                    "seconds": time.perf_counter() - self.t0,
                    "engine": "flower",
                    "rejected": self.rejected,
                    "privacy": {
                        "epsilon_per_report": json_number(float(self.mechanism.epsilon)),
                        "max_spent_epsilon": json_number(max(spent.values(), default=0.0)),
                    },
                    "user": {},
                },
            )
            if self.model is not None:
                self.writer.write_npz("model.npz", {"theta": self.model[None, :].copy()})
        finally:
            self.writer.finish(status=status)
            self.accountant.close()
        return self.path


_STRATEGY_CLASS: Any = None


def _ldp_strategy_class() -> Any:
    """LdpStrategy, defined when first asked for (Flower is an optional extra)."""
    global _STRATEGY_CLASS
    if _STRATEGY_CLASS is not None:
        return _STRATEGY_CLASS
    _flwr()
    from flwr.serverapp.strategy import Strategy

    class LdpStrategy(Strategy):
        """A Flower strategy that sees only sealed local-DP releases, and records them.

        Wraps ``inner`` (e.g. ``FedAvg``): ``configure_train`` records the broadcast
        parameters; ``aggregate_train`` refuses every reply that is not a sealed release of
        the declared mechanism consistent with its report (:meth:`FlowerRecorder.check`),
        records the accepted ones and hands only them to ``inner``. Client-side evaluation is
        off (an evaluate reply would carry un-noised metrics; ``LdpReleaseMod`` refuses it):
        evaluate on the server with ``evaluate_fn``.
        """

        def __init__(self, inner: Any, recorder: FlowerRecorder, arrays_key: str = "arrays"):
            self.inner = inner
            self.recorder = recorder
            self.arrays_key = arrays_key
            self._theta: dict[int, tuple[np.ndarray, int]] = {}

        def configure_train(self, server_round: int, arrays: Any, config: Any, grid: Any) -> Any:
            msgs = list(self.inner.configure_train(server_round, arrays, config, grid))
            sent = arrays.to_numpy_ndarrays()
            self._theta[server_round] = (flatten(sent), self.recorder.broadcast(sent))
            return msgs

        def aggregate_train(self, server_round: int, replies: Any) -> Any:
            theta, idx = self._theta[server_round]
            ok = []
            for rep in sorted(replies, key=lambda m: m.metadata.src_node_id):
                node = int(rep.metadata.src_node_id)
                if rep.has_error():
                    self.recorder.reject(server_round, node, f"client error: {rep.error.reason}")
                    continue
                try:
                    agent, y = self.recorder.check(rep.content, theta, self.arrays_key)
                except InvalidParameterError as exc:
                    self.recorder.reject(server_round, node, str(exc))
                    continue
                self.recorder.accept(server_round, agent, y, idx)
                for key in ("ldp-report", "ldp-release"):  # recorded; inner sees the model only
                    del rep.content[key]
                ok.append(rep)
            if not ok:
                return None, None
            arrays, metrics = self.inner.aggregate_train(server_round, ok)
            if arrays is not None:
                self.recorder.model = flatten(arrays.to_numpy_ndarrays())
            return arrays, metrics

        def configure_evaluate(self, server_round: int, arrays: Any, config: Any, grid: Any):
            return []

        def aggregate_evaluate(self, server_round: int, replies: Any) -> Any:
            return None

        def summary(self) -> None:
            self.inner.summary()

    _STRATEGY_CLASS = LdpStrategy
    return LdpStrategy


def __getattr__(name: str) -> Any:
    if name == "LdpStrategy":
        return _ldp_strategy_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _abs_path(rc: Mapping[str, Any], key: str) -> str:
    v = rc.get(key)
    if not isinstance(v, str) or not v:
        raise InvalidParameterError(f"the run config must give {key!r} (a folder), got {v!r}")
    if not Path(v).is_absolute():
        raise InvalidParameterError(
            f"the run config's {key!r} must be an absolute path (Flower runs the ServerApp in a "
            f"process whose working folder is not yours), got {v!r}"
        )
    return v


def ldp_server_main(
    grid: Any,
    context: Any,
    *,
    system: str,
    initial_arrays: Sequence[np.ndarray],
    strategy: Any = None,
    private: Mapping[str, Any] | None = None,
    truth: Callable[[int], float] | None = None,
    evaluate_fn: Callable[[int, Any], Any] | None = None,
) -> Path:
    """The body of an app's ``@server_app.main()``: run ``strategy`` (default ``FedAvg``) over
    sealed releases only, and write the run directory.

    Run config: ``run-dir`` (absolute), ``ldp-mechanism`` (the mechanism the clients must use),
    ``num-server-rounds`` (default 3), ``min-nodes`` (clients per round, default 2),
    ``overwrite``, ``timeout``, ``seed``; every other key is recorded as the app's config.

    Args:
        grid, context: the ServerApp's.
        system: the app's name (recorded).
        initial_arrays: the model's initial parameters.
        strategy: a Flower strategy (``FedAvg``, ``FedProx``, ...) aggregating the releases; its
            weighting key sees ``num-examples = 1`` per client (the true count is private).
        private: the private parameter each client holds (``name``, ``values``), or None.
        truth: ``agent id -> value`` for scoring attacks (experiments only), or None.
        evaluate_fn: Flower's server-side evaluation (``evaluate_fn(round, arrays)``).

    Returns:
        The run directory.
    """
    from flwr.app import ArrayRecord
    from flwr.serverapp.strategy import FedAvg

    rc = dict(context.run_config)
    run_dir = _abs_path(rc, "run-dir")
    mech = _mechanism_from(rc.get("ldp-mechanism"), "run config")
    rounds = rc.get("num-server-rounds", 3)
    min_nodes = rc.get("min-nodes", 2)
    for key, v in (("num-server-rounds", rounds), ("min-nodes", min_nodes)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InvalidParameterError(f"run config {key!r} must be an int >= 1, got {v!r}")
    if strategy is None:
        strategy = FedAvg(
            fraction_evaluate=0.0, min_train_nodes=min_nodes, min_available_nodes=min_nodes
        )
    recorder = FlowerRecorder(
        run_dir,
        system=system,
        mechanism=mech,
        config={k: v for k, v in rc.items() if k not in ("run-dir", "overwrite")},
        private=private,
        truth=truth,
        seed=int(rc.get("seed", 0)),
        overwrite=bool(rc.get("overwrite", False)),
        budget=rc.get("ldp-budget"),
    )
    status = "interrupted"
    try:
        wrapped = _ldp_strategy_class()(
            strategy, recorder, getattr(strategy, "arrayrecord_key", "arrays")
        )
        wrapped.start(
            grid=grid,
            initial_arrays=ArrayRecord([np.asarray(a) for a in initial_arrays]),
            num_rounds=rounds,
            timeout=float(rc.get("timeout", 600.0)),
            evaluate_fn=evaluate_fn,
        )
        status = None
    finally:
        path = recorder.close(status)
    return path


def summary(run_dir: str | Path, ledger_dir: str | Path | None = None) -> str:
    """Where a Flower run is and what it spent, in a few lines (from its manifest and metrics)."""
    from ldp_audit.rundir import read_config, read_manifest

    run_dir = Path(run_dir)
    man = read_manifest(run_dir) or {}
    m = json.loads((run_dir / "metrics.json").read_text())
    cfg = read_config(run_dir)
    priv = m.get("privacy", {})
    n, k = int(m.get("submissions", 0)), int(m.get("agents", 0))
    lines = [
        f"Flower run {run_dir} ({man.get('status', 'status not recorded')}) of "
        f"{cfg.get('system', '?')!r}: {k} {'client' if k == 1 else 'clients'} released {n} "
        f"{'report' if n == 1 else 'reports'} over {m.get('rounds', '?')} rounds; "
        f"{len(m.get('rejected', []))} replies refused.",
        f"Privacy: epsilon {priv.get('epsilon_per_report')} per report; the most any client "
        f"spent (server's record): {priv.get('max_spent_epsilon')}.",
    ]
    if ledger_dir is not None:
        lines.append(f"Each client's own ledger: {ledger_dir}/client-<id>.sqlite.")
    lines.append(f"Next: ldp-audit report {run_dir}; ldp-audit audit --run-dir {run_dir}")
    return "\n".join(lines)
