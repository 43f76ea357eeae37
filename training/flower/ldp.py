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

What lives where: the client side (:class:`LdpReleaseMod`, :class:`ClientSettings`,
:func:`release_reply`, :func:`sealed_content`) is
:mod:`~ldp_audit.training.flower.client`; the server side (:func:`ldp_server_main`,
``LdpStrategy``, :class:`FlowerRecorder`, :func:`summary`) is
:mod:`~ldp_audit.training.flower.server`; what both agree on (the run-config keys, the
``ldp-mechanism`` / ``ldp-budget`` parsers, :func:`flatten` / :func:`unflatten`) is
:mod:`~ldp_audit.training.flower.protocol`. This module re-exports them: an app imports
from here.
"""

from __future__ import annotations

from typing import Any

from ldp_audit.training.flower.client import (
    ClientSettings,
    LdpReleaseMod,
    release_reply,
    sealed_content,
)
from ldp_audit.training.flower.protocol import (
    RUN_CONFIG_KEYS,
    SERVER_CONFIG_KEYS,
    flatten,
    unflatten,
)
from ldp_audit.training.flower.server import (
    FlowerRecorder,
    ldp_server_main,
    ldp_strategy_class,
    summary,
)

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
    "RUN_CONFIG_KEYS",
    "SERVER_CONFIG_KEYS",
]


def __getattr__(name: str) -> Any:
    if name == "LdpStrategy":  # defined on first use (Flower is an optional extra)
        return ldp_strategy_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
