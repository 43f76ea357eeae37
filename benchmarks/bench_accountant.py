"""Accountant speed: durable charges/s and spent() time, each against a straightforward baseline.

Everything is measured in the same run, on the same machine, and written as JSON:

1. durable charges, one transaction per charge: ``Accountant.charge`` vs a bare SQLite
   ``INSERT`` + ``COMMIT`` per charge (same WAL / ``synchronous=FULL`` settings) -- the floor any
   durable ledger pays (one fsync per commit);
2. batched charges (one round of the PGC trainer: ``--agents`` new agents, one transaction),
   with and without a budget check: ``charge_many`` vs a loop of ``charge`` calls;
3. spent() of one agent with ``--events`` events: ours (ledger + composition) vs Opacus's
   accountant alone (``RDPAccountant`` / ``PRVAccountant``: ``step`` per event, then
   ``get_epsilon``) for a DP-SGD history, and basic / optimal / PLD for a Laplace history;
4. bulk ``spent_all`` for every agent vs a loop of ``spent`` per agent.

    .venv/bin/python benchmarks/bench_accountant.py [--agents 90000] [--events 100000]
        [--single 500] [--json benchmarks/results/bench_accountant.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import sqlite3
import tempfile
import time
import warnings
from pathlib import Path

from ldp_audit.accountant import (
    Accountant,
    Budget,
    GaussianEvent,
    LaplaceEvent,
    PoissonSampledEvent,
    event_to_json,
)
from ldp_audit.accountant.accountant import _evaluate


def _timed(fn, *args, **kwargs) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - t0, out


def bare_sqlite_charges(path: Path, n: int) -> float:
    """The straightforward durable ledger: one INSERT + COMMIT per charge."""
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=FULL")
    con.execute("CREATE TABLE c (id INTEGER PRIMARY KEY, agent TEXT, event TEXT, t REAL)")
    con.execute("CREATE INDEX c_agent ON c (agent)")
    ev = event_to_json(LaplaceEvent(1.0))
    t0 = time.perf_counter()
    for i in range(n):
        con.execute("BEGIN IMMEDIATE")
        con.execute("INSERT INTO c (agent, event, t) VALUES (?, ?, ?)", (f"a/{i}", ev, time.time()))
        con.execute("COMMIT")
    dt = time.perf_counter() - t0
    con.close()
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=90_000, help="agents per batched round")
    ap.add_argument("--events", type=int, default=100_000, help="events of one agent for spent")
    ap.add_argument("--single", type=int, default=500, help="single-transaction charges timed")
    ap.add_argument("--loop-agents", type=int, default=5_000, help="agents for the spent loop")
    ap.add_argument("--repeats", type=int, default=2, help="best of N for the spent timings")
    ap.add_argument("--json", type=Path, default=Path("benchmarks/results/bench_accountant.json"))
    args = ap.parse_args()
    res: dict[str, object] = {
        "machine": "2-core x86_64 CPU, shared with other jobs",
        "platform": platform.platform(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
    }
    ev = LaplaceEvent(1.0)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)

        # 1. one durable transaction per charge
        n = args.single
        dt_bare = bare_sqlite_charges(tmp / "bare.sqlite", n)
        acc = Accountant(tmp / "single.sqlite", budget=Budget(epsilon=1.0))
        t0 = time.perf_counter()
        for i in range(n):
            acc.charge(f"0/{i}", ev)
        dt_ours = time.perf_counter() - t0
        acc.close()
        res["single_charge"] = {
            "n": n,
            "ours_charges_per_s": n / dt_ours,
            "bare_sqlite_charges_per_s": n / dt_bare,
            "ours_over_bare": dt_bare / dt_ours,
        }
        print(
            f"durable single charges: ours {n / dt_ours:,.0f}/s (with budget check), bare SQLite "
            f"{n / dt_bare:,.0f}/s, ratio ours/bare {dt_bare / dt_ours:.2f}"
        )

        # 2. batched rounds
        m = args.agents
        acc = Accountant(tmp / "batch.sqlite")
        dt_nb, _ = _timed(acc.charge_many, [(f"1/{i}", ev) for i in range(m)])
        accb = Accountant(tmp / "batch.sqlite", budget=Budget(epsilon=1.0))
        dt_b, _ = _timed(accb.charge_many, [(f"2/{i}", ev) for i in range(m)])
        loop_n = min(m, args.single)
        t0 = time.perf_counter()
        for i in range(loop_n):
            accb.charge(f"3/{i}", ev)
        dt_loop = (time.perf_counter() - t0) / loop_n * m
        res["batched"] = {
            "agents": m,
            "charge_many_rows_per_s": m / dt_nb,
            "charge_many_budget_rows_per_s": m / dt_b,
            "charge_loop_rows_per_s": m / dt_loop,
            "batch_over_loop": dt_loop / dt_b,
        }
        print(
            f"batched round of {m:,} agents: charge_many {m / dt_nb:,.0f} rows/s, with budget "
            f"check {m / dt_b:,.0f} rows/s; loop of charge() {m / dt_loop:,.0f} rows/s "
            f"(measured on {loop_n}); batch/loop {dt_loop / dt_b:.0f}x"
        )

        # 4. bulk spent_all vs per-agent spent (on the 2*agents ledger)
        dt_all, allv = _timed(accb.spent_all, method="basic")
        sub = sorted(allv)[: args.loop_agents]
        t0 = time.perf_counter()
        for a in sub:
            accb.spent(a, method="basic")
        dt_each = (time.perf_counter() - t0) / len(sub) * len(allv)
        dt_cached, _ = _timed(accb.spent_all, method="basic")
        res["spent_all"] = {
            "agents": len(allv),
            "spent_all_s": dt_all,
            "spent_all_cached_s": dt_cached,
            "spent_loop_s_extrapolated": dt_each,
            "bulk_over_loop": dt_each / dt_all,
        }
        print(
            f"spent_all over {len(allv):,} agents: {dt_all:.2f} s (cached {dt_cached * 1e3:.1f} "
            f"ms); loop of spent() {dt_each:.1f} s (extrapolated from {len(sub):,}); "
            f"{dt_each / dt_all:.0f}x"
        )
        accb.close()
        acc.close()

        # 3. spent for one agent with k events
        k = args.events
        step = PoissonSampledEvent(0.01, GaussianEvent(1.0))
        acc = Accountant(tmp / "spent.sqlite")
        dt_charge, _ = _timed(acc.charge_many, [("dpsgd", step)] * k, scope="central")
        from opacus.accountants import PRVAccountant, RDPAccountant

        row: dict[str, object] = {"events": k, "charge_many_s": dt_charge}

        def opacus_alone(cls):
            op = cls()
            for _ in range(k):
                op.step(noise_multiplier=1.0, sample_rate=0.01)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return op.get_epsilon(delta=1e-5)

        for name, cls in (("rdp", RDPAccountant), ("prv", PRVAccountant)):
            # alternate ours / Opacus, best of --repeats each (the machine is shared)
            dt_ours = dt_op = float("inf")
            for _ in range(args.repeats):
                acc._cache.clear()
                _evaluate.cache_clear()  # time the composition, not the memo
                dt, eps_ours = _timed(acc.spent, "dpsgd", delta=1e-5, method=name)
                dt_ours = min(dt_ours, dt)
                dt, eps_op = _timed(opacus_alone, cls)
                dt_op = min(dt_op, dt)
            row[name] = {
                "ours_s": dt_ours,
                "opacus_s": dt_op,
                "ours_epsilon": eps_ours,
                "opacus_epsilon": eps_op,
                "ours_over_opacus": dt_op / dt_ours,
            }
            print(
                f"spent, {k:,} DP-SGD steps, {name}: ours {dt_ours:.3f} s (eps {eps_ours:.4f}), "
                f"Opacus {cls.__name__} alone {dt_op:.3f} s (eps {eps_op:.4f})"
            )
        acc.charge_many([("lap", LaplaceEvent(0.01))] * k)
        for method in ("basic", "optimal", "pld"):
            _evaluate.cache_clear()
            dt, eps = _timed(acc.spent, "lap", delta=1e-5, method=method)
            row[f"laplace_{method}"] = {"s": dt, "epsilon": eps}
            print(f"spent, {k:,} Laplace(0.01) events, {method}: {dt:.3f} s (eps {eps:.4f})")
        res["spent_one_agent"] = row
        acc.close()

    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(res, indent=2))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
