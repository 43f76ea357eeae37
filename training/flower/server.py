"""The Flower server side of local DP: check, record, aggregate.

:func:`ldp_server_main` is the body of an app's ``@server_app.main()``: it wraps a Flower
strategy (default ``FedAvg``) in ``LdpStrategy`` (:func:`ldp_strategy_class`; defined on first
use, Flower being an optional extra), which refuses every reply that is not a sealed release of
the declared mechanism and hands only the accepted ones to the strategy; :class:`FlowerRecorder`
checks each reply and writes the run directory in the own-loop layout (config, manifest, the
server's record ledger, transcript, metrics, model); :func:`summary` says in a few lines where a
run is and what it spent. The client side is :mod:`~ldp_audit.training.flower.client`, the
shared protocol :mod:`~ldp_audit.training.flower.protocol`.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError
from ldp_audit.rundir import RunDir, json_number
from ldp_audit.systems import call_user
from ldp_audit.training.flower.protocol import (
    RELEASES,
    absolute_folder,
    budget_from,
    flatten,
    mechanism_from,
    require_flwr,
    sealed_report,
    server_settings,
    unflatten,
)
from ldp_audit.validation import check_choice, check_int

__all__ = ["FlowerRecorder", "ldp_strategy_class", "ldp_server_main", "summary"]


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
        budget: float | None = None,
    ) -> None:
        from ldp_audit.accountant.events import event_for
        from ldp_audit.run import Run

        if truth is not None and not callable(truth):
            raise InvalidParameterError(f"truth must be callable or None, got {truth!r}")
        run = Run(  # the own-loop run's config, writer and the server's record ledger
            run_dir,
            system=system,
            config=config,
            seed=int(seed),
            mechanism=mechanism,
            private=private,
            overwrite=bool(overwrite),
            extra={
                "engine": f"flower {require_flwr().__version__}",
                "protocol": "Flower rounds; LdpReleaseMod on every client",
                "budget": None if budget is None else budget_from(budget, "budget"),
            },
        )
        self.path, self.writer, self.accountant = run.path, run.writer, run.accountant
        self.check_secret = run.check_secret  # truth's values: typed, one of the candidates
        self.mechanism, self.event, self.truth = mechanism, event_for(mechanism), truth
        self.thetas: list[np.ndarray] = []
        self.rows: dict[str, list[Any]] = {
            k: [] for k in ("agent", "round", "submission", "theta_index", "report", "value")
        }
        self.rejected: list[dict[str, Any]] = []
        self.model: np.ndarray | None = None
        self.rounds = 0  # rounds broadcast (thetas holds distinct parameters only)
        self.t0 = time.perf_counter()
        self._closed = False

    def broadcast(self, arrays: Sequence[np.ndarray]) -> int:
        """Record the parameters sent in a round; returns their row in ``thetas``."""
        t = flatten(arrays)
        self.rounds += 1
        if not self.thetas or not np.array_equal(self.thetas[-1], t):
            self.thetas.append(t)
        return len(self.thetas) - 1

    def check(self, content: Any, theta: np.ndarray, arrays_key: str) -> tuple[int, np.ndarray]:
        """(agent, noisy report) of a sealed reply, or InvalidParameterError saying why not."""
        mech, eps = self.mechanism.to_config(), float(self.mechanism.epsilon)
        y = sealed_report(content, "ldp-report", "ldp-release", mech, eps, theta.size)
        rel = content["ldp-release"]
        if arrays_key not in content.array_records:
            raise InvalidParameterError(f"reply has no ArrayRecord {arrays_key!r}")
        got = content[arrays_key].to_numpy_ndarrays()
        want = theta + y if rel.get("release", "update") == "update" else y  # in got's dtypes
        if flatten(got).size != theta.size or any(
            not np.array_equal(a, b) for a, b in zip(got, unflatten(want, got), strict=True)
        ):
            raise InvalidParameterError(
                "reply's arrays are not the function of its sealed report the protocol allows"
            )
        return check_int(rel.get("agent"), "reply's agent id", minimum=0), y

    def accept(self, server_round: int, agent: int, report: np.ndarray, theta_index: int) -> None:
        """Record one accepted report and the charge its client declared."""
        value = math.nan
        if self.truth is not None:  # "0.5" or 0.7 (no candidate) were recorded as the truth
            got = call_user(self.truth, "ldp_server_main's truth", agent)
            value = self.check_secret(got, f"truth({agent})")
        self.accountant.charge_many([(str(agent), self.event)])
        row = (agent, server_round, len(self.rows["agent"]), theta_index, report, value)
        for col, v in zip(self.rows.values(), row, strict=True):  # the columns, in order
            col.append(v)

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
                        **{
                            k: np.asarray(self.rows[k], dtype=np.int64)
                            for k in ("agent", "round", "submission", "theta_index")
                        },
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

            self.writer.write_json(
                "metrics.json",
                {
                    "submissions": n,
                    "agents": len(set(self.rows["agent"])),
                    # every round broadcast, also those whose replies were all rejected (the
                    # parameters then stay the same: len(thetas) said 1 for 3 failed rounds)
                    "rounds": max(
                        [self.rounds, *self.rows["round"], *(r["round"] for r in self.rejected)]
                    ),
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
        except BaseException as exc:  # Ctrl-C or a failure while writing: never "complete"
            status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
            raise
        finally:
            self.writer.finish(status=status)
            self.accountant.close()
        return self.path


@functools.cache
def ldp_strategy_class() -> Any:
    """LdpStrategy, defined when first asked for (Flower is an optional extra)."""
    require_flwr()
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
            ok, seen = [], set()
            for rep in sorted(replies, key=lambda m: m.metadata.src_node_id):
                try:
                    if rep.has_error():
                        raise InvalidParameterError(f"client error: {rep.error.reason}")
                    agent, y = self.recorder.check(rep.content, theta, self.arrays_key)
                    if agent in seen:  # two nodes with one partition-id: one report per agent
                        raise InvalidParameterError(
                            f"agent {agent} already replied in round {server_round}"
                        )
                    made = rep.content["ldp-release"].get("server-round", 0)  # 0: none was sent
                    if made not in (0, server_round):  # a reply of an earlier round, sent again
                        raise InvalidParameterError(
                            f"agent {agent}'s release is of round {made}, not {server_round}"
                        )
                except InvalidParameterError as exc:
                    self.recorder.reject(server_round, int(rep.metadata.src_node_id), str(exc))
                    continue
                seen.add(agent)
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

    return LdpStrategy


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
    run_dir = absolute_folder(rc.get("run-dir"), "the run config's 'run-dir'")
    mech = mechanism_from(rc.get("ldp-mechanism"), "run config")
    rounds = rc.get("num-server-rounds", 3)
    min_nodes = rc.get("min-nodes", 2)
    for key, v in (("num-server-rounds", rounds), ("min-nodes", min_nodes)):
        check_int(v, f"run config {key!r}", minimum=1)
    seed, timeout, overwrite = server_settings(rc)
    # a release every client would refuse, every round
    check_choice(rc.get("ldp-release", "update"), "run config 'ldp-release'", RELEASES)
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
        seed=seed,
        overwrite=overwrite,
        budget=rc.get("ldp-budget"),
    )
    status = "interrupted"
    try:
        wrapped = ldp_strategy_class()(
            strategy, recorder, getattr(strategy, "arrayrecord_key", "arrays")
        )
        wrapped.start(
            grid=grid,
            initial_arrays=ArrayRecord([np.asarray(a) for a in initial_arrays]),
            num_rounds=rounds,
            timeout=timeout,
            evaluate_fn=evaluate_fn,
        )
        status = None
    finally:
        path = recorder.close(status)
    return path


def summary(run_dir: str | Path, ledger_dir: str | Path | None = None) -> str:
    """Where a Flower run is and what it spent, in a few lines (from its manifest and metrics):
    an own-loop run of any app, or a run of the PGC-A3C app (:mod:`.pgc_app`, its agents)."""

    rd = RunDir(run_dir)
    run_dir, man, m, cfg = rd.path, rd.manifest() or {}, rd.metrics(), rd.config
    priv = m.get("privacy", {})
    n, k = int(np.sum(m.get("submissions", 0))), int(m.get("agents", priv.get("agents", 0)))
    pgc = cfg.get("algorithm") == "pgc-a3c"
    who, verb, of, record = (
        ("agent", "submitted", "", "ledger")
        if pgc
        else ("client", "released", f" of {cfg.get('system', '?')!r}", "record")
    )
    per = f", {priv.get('epsilon_total')} per agent" if pgc else ""
    eps = priv.get("epsilon_per_submission" if pgc else "epsilon_per_report")
    nxt = [f"ldp-audit report {run_dir}", f"ldp-audit audit --run-dir {run_dir}"]
    lines = [
        f"Flower run {run_dir} ({man.get('status', 'status not recorded')}){of}: {k} "
        f"{who if k == 1 else who + 's'} {verb} {n} {'report' if n == 1 else 'reports'} over "
        f"{m.get('rounds', '?')} rounds; {len(m.get('rejected', []))} replies refused.",
        f"Privacy: epsilon {eps} per report{per}; the most any {who} spent (server's {record}): "
        f"{priv.get('max_spent_epsilon')}.",
    ]
    if ledger_dir is not None:
        lines.append(f"Each {who}'s own ledger: {ledger_dir}/{who}-<id>.sqlite.")
    nxt = [f"ldp-audit attack dynamics --run-dir {run_dir}", nxt[0]] if pgc else nxt
    lines.append(f"Next: {'; '.join(nxt)}")
    return "\n".join(lines)
