"""Local DP for any Flower app, the client side: a mod that releases the train reply.

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
   run config; a SuperNode may pin any of them (and ``ldp-public-metrics``) in its node
   config, and then a run config that asks for something else is refused;
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
(:func:`ldp_audit.attacks.dynamics_run_dir.private_param_dynamics`) scores it when the app
declares a private parameter per client. ``secrets.npz`` (the private value per row, for scoring
only) is written only when the experimenter gives the recorder the ground truth.

What lives where: the client side (:class:`LdpReleaseMod`, :class:`ClientSettings`,
:func:`release_reply`, :func:`sealed_content`) is this module; the server side
(:func:`~ldp_audit.training.flower.server.ldp_server_main`, ``LdpStrategy``,
:class:`~ldp_audit.training.flower.server.FlowerRecorder`, its ``summary``) is
:mod:`~ldp_audit.training.flower.server`; what both agree on (the run-config keys, the
``ldp-mechanism`` / ``ldp-budget`` parsers, :func:`flatten` / :func:`unflatten`) is
:mod:`~ldp_audit.training.flower.protocol`. An app imports ``LdpReleaseMod`` from here and
``ldp_server_main`` from the server module.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit.errors import BudgetExceeded, InvalidParameterError, LedgerError
from ldp_audit.training.flower.protocol import (
    RELEASES,
    absolute_folder,
    agent_rng,
    budget_from,
    flatten,
    mechanism_from,
    unflatten,
)
from ldp_audit.validation import check_choice, check_int

__all__ = ["ClientSettings", "release_reply", "sealed_content", "LdpReleaseMod"]


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
        """Validate the settings; a node-config pin of ``ldp-mechanism``, ``ldp-budget``,
        ``ldp-release`` or ``ldp-public-metrics`` must agree with the run config (which the
        server writes: unpinned, it could name a private metric and have it sent in clear)."""
        rc, nc = dict(run_config), dict(node_config)
        read = {
            "ldp-mechanism": lambda v, where: mechanism_from(v, where).to_config(),
            "ldp-budget": budget_from,
            "ldp-release": lambda v, where: str(v),
            "ldp-public-metrics": lambda v, where: sorted(_names(v)),
        }
        for key, fn in read.items():
            if key in nc and key in rc:
                if fn(nc[key], "node config") != fn(rc[key], "run config"):
                    raise InvalidParameterError(
                        f"the run config asks for {key} = {rc[key]!r}, but this node is pinned to "
                        f"{nc[key]!r}: refused"
                    )
        merged = {**rc, **nc}
        for key in ("ldp-mechanism", "ldp-budget"):
            if key not in merged:
                raise InvalidParameterError(f"the run config must give {key!r}")
        mech = mechanism_from(merged["ldp-mechanism"], "run config")
        budget = budget_from(merged["ldp-budget"], "run config")
        rel = check_choice(merged.get("ldp-release", "update"), "'ldp-release'", RELEASES)
        agent = nc.get("agent-id", nc.get("partition-id"))
        agent = check_int(agent, "node config 'partition-id' (or 'agent-id')", minimum=0)
        where = "node config 'ledger-dir' or run config 'ldp-ledger-dir'"
        ldir = absolute_folder(
            nc.get("ledger-dir", rc.get("ldp-ledger-dir")), f"client {agent}'s ledger ({where})"
        )
        key = merged.get("ldp-arrays-key", "arrays")
        if not isinstance(key, str) or not key:
            raise InvalidParameterError(f"'ldp-arrays-key' must be a non-empty str, got {key!r}")
        seed = nc.get("agent-seed")
        if seed is not None:  # SeedSequence's: a negative one failed at the first release
            seed = check_int(seed, "node config 'agent-seed'", minimum=0)
        return cls(
            mechanism=mech,
            budget=budget,
            release=rel,
            agent=agent,
            ledger=Path(ldir) / f"client-{agent}.sqlite",
            public_metrics=_names(merged.get("ldp-public-metrics", "")),
            arrays_key=key,
            seed=seed,
        )


def _names(value: Any) -> tuple[str, ...]:
    """The metric names of an ``ldp-public-metrics`` setting (comma-separated)."""
    if not isinstance(value, str):
        raise InvalidParameterError(f"'ldp-public-metrics' must be a str, got {value!r}")
    return tuple(s.strip() for s in value.split(",") if s.strip())


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
        InvalidParameterError: the reply's arrays do not match the broadcast model, or the
            release failed (the message names the exception's type only: the mechanism's own
            message, chained as ``__cause__`` on the client, may quote the private update).
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
    with Ledger(str(settings.ledger)) as ledger:
        try:
            acc = Accountant(
                ledger=ledger, budget=Budget.for_mechanism(settings.budget, settings.mechanism)
            )
            rel = release(  # durable charge first, then the mechanism (its clip), then the seal
                raw[None, :],
                mechanism=settings.mechanism,
                accountant=acc,
                agent_ids=[str(settings.agent)],
                # the ledger's row count keys the stream too: a rerun with the same seed, or a
                # strategy that sends no server-round, never draws the same noise twice
                rng=agent_rng(settings.seed, settings.agent, int(server_round), len(ledger)),
            )
        except (BudgetExceeded, LedgerError):  # about the ledger, not the data
            raise
        except Exception as exc:  # a mechanism's message may quote the update (bit_flip's range)
            raise InvalidParameterError(
                f"the release failed ({type(exc).__name__}; its message may quote private "
                "values and stays on this client)"
            ) from exc
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


def _arrays(content: Any, key: str, what: str) -> list[np.ndarray]:
    """The arrays of ``content``'s ArrayRecord ``key``; InvalidParameterError naming ``what``."""
    if key not in content.array_records:
        raise InvalidParameterError(
            f"{what} has no ArrayRecord {key!r} (run config 'ldp-arrays-key': the strategy's "
            "arrayrecord_key, and the record your train function replies with)"
        )
    return content[key].to_numpy_ndarrays()


class LdpReleaseMod:
    """Flower client mod: every train reply leaves only as a local-DP release.

    Use it on any ClientApp whose train function replies with its parameters:
    ``ClientApp(mods=[LdpReleaseMod()])``. Settings come from the run config and the node
    config (:class:`ClientSettings`); see the module docstring for what the reply holds.

    Its steps around the train function are the hooks a mod for another release plugs into
    (the PGC-A3C app's, :class:`ldp_audit.training.flower.pgc_app.LdpReleaseMod`, releases the
    policy gradient its train function leaves in process memory): ``_before`` (what to read from
    the instruction, before training), ``_taken`` (after training, even when it failed),
    ``_sealed`` (charge, randomise, seal: the reply's whole content) and ``_refusal`` (the reason
    an error reply gives). Only train instructions are answered; a train function that raised or
    failed gives an error reply naming no message of it.
    """

    def __call__(self, msg: Any, context: Any, call_next: Any) -> Any:
        from flwr.app import Error, Message, MessageType

        def error(code: int, reason: str) -> Any:
            return Message(Error(code=code, reason=reason), reply_to=msg)

        if msg.metadata.message_type != MessageType.TRAIN:
            return error(
                3,
                "LdpReleaseMod releases train replies only (an evaluate or query "
                "reply would carry un-noised values); evaluate on the server instead",
            )
        try:
            job = self._before(msg, context)
            try:
                out = call_next(msg, context)
            except Exception as exc:  # its message may quote private data: name the type only
                return error(4, f"the train function raised {type(exc).__name__}")
            finally:
                job = self._taken(msg, job)
            if out.has_error():  # Flower's reason quotes the train function's exception
                reason = "the train function failed (its message stays on this client)"
                return error(out.error.code, reason)
            content = self._sealed(out, context, job)
        except Exception as exc:  # nothing released; the server sees only the reason
            return error(2, self._refusal(exc))
        return Message(content, reply_to=msg)

    def _before(self, msg: Any, context: Any) -> Any:
        """(settings, broadcast arrays, server round) of a train instruction."""
        settings = ClientSettings.from_configs(context.run_config, context.node_config)
        broadcast = _arrays(msg.content, settings.arrays_key, "the train instruction")
        cfgs = msg.content.config_records
        server_round = int(
            next((c["server-round"] for c in cfgs.values() if "server-round" in c), 0)
        )
        return settings, broadcast, server_round

    def _taken(self, msg: Any, job: Any) -> Any:
        return job

    def _sealed(self, out: Any, context: Any, job: Any) -> Any:
        settings, broadcast, server_round = job
        local = _arrays(out.content, settings.arrays_key, "the train reply")
        arrays, report, rel = release_reply(broadcast, local, settings, server_round)
        records = out.content.metric_records.values()
        public = {k: r[k] for r in records for k in settings.public_metrics if k in r}
        return sealed_content(settings, arrays, report, rel, public, server_round)

    def _refusal(self, exc: Exception) -> str:
        return f"{type(exc).__name__}: {exc}"
