"""An example Flower app that is not PGC-A3C: FedAvg of a softmax regression on scikit-learn's
digits, every client's update released under local DP by the client mod of
:mod:`ldp_audit.training.flower.client`.

The app is ordinary Flower code (a ClientApp with a train function that returns its parameters,
a ServerApp running ``FedAvg``); the two lines that make it private are ``mods=[LdpReleaseMod()]``
on the client and :func:`~ldp_audit.training.flower.server.ldp_server_main` on the server. The app
project (``pyproject.toml`` + ``digits_app.py``) is shipped in ``examples/flower_digits/`` and
written anywhere by :func:`write_app_project`; :func:`run` runs it with ``flwr run`` on a local
simulation SuperLink (:func:`ldp_audit.training.flower.run.flwr_run`).

Private parameter per client: its **favourite digit** (one of :data:`CANDIDATES`): half of a
client's samples show that digit, half are drawn uniformly. It shapes the client's update, so an
honest-but-curious server could try to infer it from what it receives; the generic dynamics
attack (:func:`ldp_audit.attacks.dynamics_run_dir.private_param_dynamics`) does exactly that with
:func:`simulator` (the public update rule run on the attacker's own, disjoint, digits data) and
is scored against the ceiling the guarantee allows. In a simulation a client's favourite is drawn
from (``seed``, partition id); a real SuperNode gives it in its node config
(``favourite-digit``). The server learns it only in an experiment (run config ``scoring =
true``: the recorder writes ``secrets.npz`` for scoring).
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError
from ldp_audit.training.flower import run as app_run
from ldp_audit.training.flower.protocol import agent_rng
from ldp_audit.training.flower.server import ldp_server_main, summary
from ldp_audit.validation import check_bool, check_int, check_real_in

__all__ = [
    "CANDIDATES",
    "PRIVATE",
    "make_client_app",
    "make_server_app",
    "favourite_digit",
    "local_train",
    "simulator",
    "write_app_project",
    "run",
]

#: The private parameter's candidate values (a client's favourite digit).
CANDIDATES = (1.0, 4.0, 7.0)
#: The private parameter as the run directory declares it.
PRIVATE = {"name": "favourite-digit", "values": list(CANDIDATES)}
N_FEATURES, N_CLASSES = 64, 10
_CLIENT_POOL = 1200  # digits 0..1199 are the clients' data; the rest is the attacker's


@functools.lru_cache(maxsize=1)
def _digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.data / 16.0).astype(np.float64), d.target.astype(np.int64)


def _pool(which: str) -> tuple[np.ndarray, np.ndarray]:
    x, y = _digits()
    part = slice(None, _CLIENT_POOL) if which == "clients" else slice(_CLIENT_POOL, None)
    return x[part], y[part]


def favourite_digit(agent: int, seed: int) -> float:
    """A simulated client's favourite digit, drawn from (seed, agent) (experiments only)."""
    rng = agent_rng(int(seed), int(agent), 1)
    return float(CANDIDATES[int(rng.integers(len(CANDIDATES)))])


def sample_data(
    favourite: float, n: int, rng: np.random.Generator, pool: str = "clients"
) -> tuple[np.ndarray, np.ndarray]:
    """n samples: half showing ``favourite``, half uniform over the pool."""
    x, y = _pool(pool)
    fav = np.flatnonzero(y == int(favourite))
    half = n // 2
    idx = np.concatenate([rng.choice(fav, half), rng.choice(y.size, n - half)])
    return x[idx], y[idx]


def local_train(
    w: np.ndarray, b: np.ndarray, x: np.ndarray, y: np.ndarray, steps: int, lr: float
) -> tuple[np.ndarray, np.ndarray]:
    """``steps`` full-batch gradient steps of softmax regression (cross-entropy)."""
    w, b = w.astype(np.float64).copy(), b.astype(np.float64).copy()
    onehot = np.eye(N_CLASSES)[y]
    for _ in range(int(steps)):
        z = x @ w + b
        p = np.exp(z - z.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        g = (p - onehot) / y.size
        w -= lr * (x.T @ g)
        b -= lr * g.sum(axis=0)
    return w, b


def initial_arrays() -> list[np.ndarray]:
    return [np.zeros((N_FEATURES, N_CLASSES)), np.zeros(N_CLASSES)]


def accuracy(w: np.ndarray, b: np.ndarray) -> float:
    """Accuracy on the server's public held-out digits."""
    x, y = _pool("public")
    return float(np.mean(np.argmax(x @ w + b, axis=1) == y))


# ----------------------------------------------------------------------------------------------
# The Flower app
# ----------------------------------------------------------------------------------------------


def make_client_app() -> Any:
    """The clients' ClientApp: local training, released by ``LdpReleaseMod``."""
    from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp

    from ldp_audit.training.flower.client import LdpReleaseMod

    app = ClientApp(mods=[LdpReleaseMod()])

    @app.train()
    def train(msg: Any, context: Any) -> Any:
        rc, nc = context.run_config, context.node_config
        agent = int(nc["partition-id"])
        fav = float(nc.get("favourite-digit", favourite_digit(agent, int(rc.get("seed", 0)))))
        rnd = int(msg.content["config"]["server-round"])
        rng = agent_rng(int(rc.get("seed", 0)), agent, rnd)
        x, y = sample_data(fav, int(rc.get("samples-per-client", 60)), rng)
        w, b = msg.content["arrays"].to_numpy_ndarrays()
        w, b = local_train(w, b, x, y, int(rc.get("local-steps", 5)), float(rc.get("lr", 0.5)))
        # an ordinary Flower reply: the new parameters and some metrics; LdpReleaseMod keeps
        # only what the run config declares public and releases the update under LDP
        acc = float(np.mean(np.argmax(x @ w + b, axis=1) == y))  # computed on private data
        metrics = MetricRecord({"num-examples": int(y.size), "train-accuracy": acc})
        return Message(
            RecordDict({"arrays": ArrayRecord([w, b]), "metrics": metrics}), reply_to=msg
        )

    return app


def make_server_app() -> Any:
    """The ServerApp: ``FedAvg`` over sealed releases, recorded (``ldp_server_main``)."""
    from flwr.app import MetricRecord
    from flwr.serverapp import ServerApp

    app = ServerApp()

    @app.main()
    def main(grid: Any, context: Any) -> None:
        rc = context.run_config
        seed = int(rc.get("seed", 0))

        def evaluate(server_round: int, arrays: Any) -> Any:
            w, b = arrays.to_numpy_ndarrays()
            return MetricRecord({"accuracy": accuracy(w, b)})

        ldp_server_main(
            grid,
            context,
            system="digits-fedavg",
            initial_arrays=initial_arrays(),
            private=PRIVATE,
            truth=(lambda agent: favourite_digit(agent, seed)) if rc.get("scoring") else None,
            evaluate_fn=evaluate,
        )

    return app


# ----------------------------------------------------------------------------------------------
# The attacker's simulator (the public update rule on the attacker's own data)
# ----------------------------------------------------------------------------------------------


def simulator(
    thetas: np.ndarray,
    values: np.ndarray,
    rng: np.random.Generator,
    alpha: np.ndarray,
    *,
    samples: int = 60,
    steps: int = 5,
    lr: float = 0.5,
) -> tuple[np.ndarray, np.ndarray]:
    """Shadow clients: ``simulator(theta (B, d), favourite (B,), rng, alpha) -> (updates (B, d),
    scores (B,))`` for :func:`ldp_audit.attacks.dynamics_run_dir.private_param_dynamics`
    (alpha unused). Each shadow draws its data from the attacker's pool (digits 1200.., disjoint
    from the clients'), trains like a client and returns its update."""
    thetas = np.asarray(thetas, dtype=np.float64)
    out = np.empty_like(thetas)
    k = N_FEATURES * N_CLASSES
    for i, (t, v) in enumerate(zip(thetas, np.asarray(values), strict=True)):
        w0, b0 = t[:k].reshape(N_FEATURES, N_CLASSES), t[k:]
        x, y = sample_data(float(v), samples, rng, pool="public")
        w, b = local_train(w0, b0, x, y, steps, lr)
        out[i] = np.concatenate([(w - w0).ravel(), b - b0])
    return out, np.full(thetas.shape[0], np.nan)


# ----------------------------------------------------------------------------------------------
# The app project and a run
# ----------------------------------------------------------------------------------------------

APP_PYPROJECT = app_run.app_pyproject(
    "ldp-digits-fedavg",
    "FedAvg on scikit-learn's digits, every update released under local DP (ldp-audit)",
    "digits_app",
    """\
run-dir = ""                  # the server's run directory (absolute path)
overwrite = false
num-server-rounds = 3
min-nodes = 2                 # clients per round (FedAvg samples all connected ones)
timeout = 600.0
seed = 0                      # data partitions; favourite digits in a simulation
scoring = false               # experiment: the recorder writes secrets.npz for scoring
samples-per-client = 60
local-steps = 5
lr = 0.5
ldp-mechanism = '{"name": "laplace", "epsilon": 2.0, "clip": 2.0}'
ldp-budget = 6.0              # each client's total epsilon (its own ledger enforces it)
ldp-release = "update"
ldp-ledger-dir = ""           # the clients' ledgers (absolute; a node config may override)
ldp-public-metrics = ""
""",
)

APP_MODULE = '''"""FedAvg on digits under local DP (ldp-audit): the apps `flwr run` loads."""

from ldp_audit.training.flower.digits import make_client_app, make_server_app

client_app = make_client_app()  # mods=[LdpReleaseMod()]: every update leaves under LDP
server_app = make_server_app()  # FedAvg over sealed releases; writes the run directory
'''


def write_app_project(path: str | Path) -> Path:
    """Write the Flower app project (``pyproject.toml`` + ``digits_app.py``) into a new folder;
    the same files as ``examples/flower_digits/``."""
    return app_run.write_app_project(path, APP_PYPROJECT, "digits_app", APP_MODULE)


def run(
    run_dir: str | Path,
    *,
    clients: int = 4,
    rounds: int = 3,
    mechanism: dict[str, Any] | None = None,
    budget: float = 6.0,
    seed: int = 0,
    ledger_dir: str | Path | None = None,
    scoring: bool = True,
    overwrite: bool = False,
    log: Any = None,
    timeout: float = 600.0,
) -> Path:
    """Run the app with ``flwr run`` on a local simulation SuperLink; returns the run directory.

    Raises InvalidParameterError (quoting the first refused reply) unless the run completed.
    """
    import json

    from ldp_audit.mechanisms import from_config
    from ldp_audit.rundir import check_new_dir

    mech = from_config(mechanism or {"name": "laplace", "epsilon": 2.0, "clip": 2.0})
    for name, v in (("clients", clients), ("rounds", rounds)):
        check_int(v, name, minimum=1)
    seed = check_int(seed, "seed", minimum=0)  # refused here, not after starting Flower
    budget = check_real_in(budget, "budget", lo=0.0, lo_open=True)
    overwrite, scoring = check_bool(overwrite, "overwrite"), check_bool(scoring, "scoring")
    timeout = check_real_in(timeout, "timeout", lo=0.0, lo_open=True)
    rdir = check_new_dir(run_dir, name="run_dir", overwrite=overwrite, can_resume=False)
    rdir = rdir.resolve()
    ldir = Path(ledger_dir if ledger_dir is not None else f"{rdir}-clients").resolve()
    if ldir.exists() and any(ldir.glob("client-*.sqlite")):
        raise InvalidParameterError(f"ledger_dir {str(ldir)!r} already holds client ledgers")
    settings = {
        "run-dir": str(rdir),
        "overwrite": overwrite,
        "num-server-rounds": rounds,
        "min-nodes": clients,
        "seed": seed,
        "scoring": scoring,
        "ldp-mechanism": json.dumps(mech.to_config()),
        "ldp-budget": budget,
        "ldp-ledger-dir": str(ldir),
    }
    app_run.run_app_project(
        write_app_project, rdir, run_config=settings, clients=clients, timeout=timeout, log=log
    )
    return rdir


def main(argv: list[str] | None = None) -> int:
    """``python -m ldp_audit.training.flower.digits --out RUN``: the example app, run with
    ``flwr run`` on a local simulation SuperLink; prints where the run is and what it spent."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m ldp_audit.training.flower.digits")
    p.add_argument("--out", help="the server's run directory (new or empty)")
    p.add_argument("--write-app", metavar="DIR", help="only write the app project into DIR")
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--epsilon", type=float, default=2.0, help="epsilon per released update")
    p.add_argument("--clip", type=float, default=2.0, help="Laplace's L1 sensitivity C")
    p.add_argument("--budget", type=float, default=6.0, help="each client's total epsilon")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log", default=None, help="file for Flower's output (default: discarded)")
    a = p.parse_args(argv)

    def body() -> int:
        if a.write_app:
            print(write_app_project(a.write_app))
            return 0
        if not a.out:
            raise InvalidParameterError("--out is required (or --write-app DIR)")
        mech = {"name": "laplace", "epsilon": a.epsilon, "clip": a.clip}
        run_dir = run(
            a.out,
            clients=a.clients,
            rounds=a.rounds,
            mechanism=mech,
            budget=a.budget,
            seed=a.seed,
            log=a.log,
        )
        print(summary(run_dir, f"{run_dir}-clients"))
        return 0

    return app_run.run_command("flower.digits", body)


if __name__ == "__main__":  # pragma: no cover
    from ldp_audit.training.flower.digits import main as _main

    sys.exit(_main())
