"""Accountant and ledger speed, against the previous ledger and a bare SQLite ledger, same run.

The previous implementation (schema version 1: WAL journal, no chain, histories read by scanning
the agent's rows) is loaded from git (``git show OLD:...``) into a temporary module, so both run
in the same process on the same machine. Everything is written as JSON.

1. journal modes: a bare ``INSERT`` + ``COMMIT`` per charge under WAL, WAL with a checkpoint
   after every commit, and the rollback journal (``TRUNCATE``) -- the two ways of having every
   committed charge in the main file, against WAL, which does not;
2. ``charge()`` with a budget for one agent with H = 0, 10^4, 10^6 earlier charges: ours vs the
   old code vs a bare SQLite ``INSERT`` + ``COMMIT`` (same journal and ``synchronous=FULL``, into
   a table holding the same H rows) -- target: ours within 1.5x of bare at every H;
3. ``spent()`` of that agent at H = 10^6: ours vs old -- target < 50 ms;
4. ``charge_many``: one round of ``--agents`` new agents, and a PGC-style lock-step (the same
   ``--lock-agents`` agents charged ``--lock-steps`` times), with a budget: ours vs old;
5. bulk ``spent_all`` over every agent: ours vs old;
6. opening (tail check) and ``verify()`` (the whole chain) at 10^6 rows;
7. PRV / PLD / best for 10^5 and 10^6 DP-SGD steps (q = 0.01, sigma = 1) and 10^6 Laplace(0.01)
   releases: time and the bounded plan (the old code ran over 11 minutes and 4.9 GB for PRV at
   10^6 before it was stopped; it is not re-run here);
8. ``charge_many`` on the engine's pattern: 10, 100 and 1,000 agents per call, brand-new agents
   every call or the same agents every call (a lock-step), with and without a budget, in memory
   (``Ledger(":memory:")``) and in a file: old vs ours (and ``TallyLedger``, in memory), wall and
   CPU time (``time.process_time``) per call, interleaved, best of ``--repeats``.

    .venv/bin/python benchmarks/bench_accountant.py [--history 1000000] [--agents 90000]
        [--json benchmarks/results/bench_accountant.json]
    .venv/bin/python benchmarks/bench_accountant.py --only-matrix \
        [--json benchmarks/results/bench_accountant_charge_many.json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import platform
import sqlite3
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

from ldp_audit.accountant import (
    Accountant,
    Budget,
    GaussianEvent,
    LaplaceEvent,
    Ledger,
    PoissonSampledEvent,
    TallyLedger,
    pld,
    prv,
)
from ldp_audit.accountant.events import event_to_json
from ldp_audit.accountant.methods import evaluate_full
from ldp_audit.errors import InvalidParameterError

ROOT = Path(__file__).resolve().parents[1]
#: The last commit with the schema-version-1 ledger.
OLD = "f325f1f"


def _timed(fn, *args, **kwargs) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - t0, out


def load_old(tmp: Path) -> types.ModuleType | None:
    """The previous ``ldp_audit.accountant.accountant`` over the previous ledger, from git."""
    try:
        led = subprocess.run(
            ["git", "show", f"{OLD}:ldp_audit/accountant/ledger.py"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        acc = subprocess.run(
            ["git", "show", f"{OLD}:ldp_audit/accountant/accountant.py"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"old implementation unavailable ({exc}); comparisons skipped", file=sys.stderr)
        return None
    (tmp / "_old_ledger.py").write_text(led)
    acc = acc.replace(
        "from ldp_audit.accountant.ledger import SCOPES, Ledger",
        "from _old_ledger import SCOPES, Ledger",
    )
    (tmp / "_old_accountant.py").write_text(acc)
    sys.path.insert(0, str(tmp))
    spec = importlib.util.spec_from_file_location("_old_accountant", tmp / "_old_accountant.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["_old_accountant"] = mod
    spec.loader.exec_module(mod)
    return mod


def bare_ledger(path: Path, mode: str, history: int = 0) -> sqlite3.Connection:
    """The straightforward durable ledger: a table, ``synchronous=FULL``, ``mode`` journal."""
    con = sqlite3.connect(path, isolation_level=None)
    con.execute(f"PRAGMA journal_mode={mode}")
    con.execute("PRAGMA synchronous=FULL")
    con.execute("CREATE TABLE c (id INTEGER PRIMARY KEY, agent TEXT, event TEXT, t REAL)")
    if history:
        ev = event_to_json(LaplaceEvent(0.01))
        con.execute("BEGIN")
        con.executemany(
            "INSERT INTO c (agent, event, t) VALUES (?, ?, ?)",
            (("big", ev, 0.0) for _ in range(history)),
        )
        con.execute("COMMIT")
    return con


def bare_charges(con: sqlite3.Connection, n: int, checkpoint: bool = False) -> float:
    """Seconds for ``n`` INSERT + COMMIT (and a PASSIVE checkpoint after each when asked)."""
    ev = event_to_json(LaplaceEvent(0.01))
    t0 = time.perf_counter()
    for _ in range(n):
        con.execute("BEGIN IMMEDIATE")
        con.execute("INSERT INTO c (agent, event, t) VALUES (?, ?, ?)", ("big", ev, time.time()))
        con.execute("COMMIT")
        if checkpoint:
            con.execute("PRAGMA wal_checkpoint(PASSIVE)")
    return time.perf_counter() - t0


def fill(acc: object, agent: str, n: int, chunk: int = 100_000) -> None:
    ev = LaplaceEvent(0.01)
    for i in range(0, n, chunk):
        acc.charge_many([(agent, ev)] * min(chunk, n - i))


def journal_modes(tmp: Path, n: int, repeats: int) -> dict[str, float]:
    best = {"wal": 0.0, "wal_checkpoint": 0.0, "rollback_truncate": 0.0}
    for r in range(repeats):  # interleaved, best of repeats (the machine is shared)
        for name, mode, ckpt in (
            ("wal", "WAL", False),
            ("wal_checkpoint", "WAL", True),
            ("rollback_truncate", "TRUNCATE", False),
        ):
            con = bare_ledger(tmp / f"jm_{name}_{r}.sqlite", mode)
            best[name] = max(best[name], n / bare_charges(con, n, ckpt))
            con.close()
    return best


def charge_many_matrix(tmp: Path, old: types.ModuleType | None, repeats: int) -> list[dict]:
    """Section 8: per-call wall and CPU time of ``charge_many``, old vs ours vs tally."""
    ours_mod = sys.modules[Accountant.__module__]
    ev = LaplaceEvent(0.01)
    out = []
    for backend in ("memory", "file"):
        for nag in (10, 100, 1000):
            for pattern in ("new", "existing"):
                for with_budget in (False, True):
                    impls = ["ours"] + (["old"] if old is not None else [])
                    if backend == "memory":
                        impls.append("tally")
                    if backend == "memory":
                        calls = max(10, 20_000 // nag)
                    else:
                        calls = 20 if nag < 1000 else 8
                    best: dict[str, list[float]] = {k: [math.inf, math.inf] for k in impls}
                    for rep in range(repeats):  # interleaved: the machine is shared
                        for name in impls:
                            mod = old if name == "old" else ours_mod
                            if name == "tally":
                                led = TallyLedger()
                            elif backend == "memory":
                                led = mod.Ledger(":memory:")
                            else:
                                f = f"m_{name}_{nag}_{pattern}_{with_budget}_{rep}.sqlite"
                                led = mod.Ledger(tmp / f)
                            b = mod.Budget(epsilon=1e9) if with_budget else None
                            acc = mod.Accountant(ledger=led, budget=b)
                            if pattern == "existing":
                                acc.charge_many([(f"a/{i}", ev) for i in range(nag)])
                            batches = [
                                [
                                    (f"a/{i}" if pattern == "existing" else f"{k}/{i}", ev)
                                    for i in range(nag)
                                ]
                                for k in range(calls)
                            ]
                            t0, c0 = time.perf_counter(), time.process_time()
                            for batch in batches:
                                acc.charge_many(batch)
                            wall = (time.perf_counter() - t0) / calls
                            cpu = (time.process_time() - c0) / calls
                            assert len(led) == nag * (calls + (pattern == "existing"))
                            acc.close()
                            best[name][0] = min(best[name][0], wall)
                            best[name][1] = min(best[name][1], cpu)
                    row: dict[str, object] = {
                        "backend": backend,
                        "agents_per_call": nag,
                        "pattern": pattern,
                        "budget": with_budget,
                        "calls": calls,
                    }
                    for name, (wall, cpu) in best.items():
                        row[f"{name}_ms"] = wall * 1e3
                        row[f"{name}_cpu_ms"] = cpu * 1e3
                    ow, oc = best["ours"]
                    kind = "budget" if with_budget else "no budget"
                    line = (
                        f"{backend:6s} {nag:5d} agents/call {pattern:8s} {kind:9s} ours "
                        f"{ow * 1e3:8.3f} ms (CPU {oc * 1e3:7.3f})"
                    )
                    for name in ("old", "tally"):
                        if name in best:
                            w, c = best[name]
                            row[f"ours_over_{name}"] = w / ow  # throughput ratio
                            row[f"ours_over_{name}_cpu"] = c / oc
                            line += (
                                f"; {name} {w * 1e3:8.3f} ms (CPU {c * 1e3:7.3f}), ours/{name} "
                                f"throughput {w / ow:.2f} (CPU {c / oc:.2f})"
                            )
                    if backend == "file":  # the floor: one bare commit of nag rows, same durability
                        for mode in ("WAL", "TRUNCATE"):
                            floor = f"floor_{mode}_{nag}_{pattern}_{with_budget}.sqlite"
                            con = bare_ledger(tmp / floor, mode)
                            ev_json = event_to_json(ev)
                            t_best = math.inf
                            for _ in range(repeats):
                                t0 = time.perf_counter()
                                for _ in range(calls):
                                    con.execute("BEGIN IMMEDIATE")
                                    con.executemany(
                                        "INSERT INTO c (agent, event, t) VALUES (?, ?, ?)",
                                        [(f"a/{i}", ev_json, time.time()) for i in range(nag)],
                                    )
                                    con.execute("COMMIT")
                                t_best = min(t_best, (time.perf_counter() - t0) / calls)
                            con.close()
                            key = "bare_wal_ms" if mode == "WAL" else "bare_rollback_ms"
                            row[key] = t_best * 1e3
                        row["ours_over_bare_rollback"] = row["bare_rollback_ms"] / (ow * 1e3)
                        line += (
                            f"; bare commit of {nag} rows: WAL {row['bare_wal_ms']:.3f} ms, "
                            f"rollback {row['bare_rollback_ms']:.3f} ms"
                        )
                    if "old" in best and "tally" in best:
                        row["tally_over_old"] = best["old"][0] / best["tally"][0]
                        row["tally_over_old_cpu"] = best["old"][1] / best["tally"][1]
                    print(line, flush=True)
                    out.append(row)
    return out


_AB_CHILD = r"""
import os, sys
import ldp_audit.training.pgc_a3c.grid as m
if os.environ["LEDGER_VARIANT"] == "tally":
    from ldp_audit.accountant import Accountant, TallyLedger

    def _make(led, budget):
        return Accountant(ledger=TallyLedger() if led is None else led, budget=budget)

    m.make_accountant = _make  # grid.py builds each config's accountant with it
from ldp_audit.cli import main
sys.exit(main(sys.argv[1:]))
"""


def engine_ab(tmp: Path, argv: list[str], repeats: int) -> dict[str, object]:
    """Section 9: the reproduction with Ledger(":memory:") vs TallyLedger, same command."""
    import os
    import resource

    out: dict[str, object] = {"command": "ldp-audit reproduce pgc-a3c " + " ".join(argv)}
    results = {}
    for rep in range(repeats):
        for variant in ("memory", "tally"):
            d = tmp / f"ab_{variant}_{rep}"
            env = dict(os.environ, LEDGER_VARIANT=variant, OMP_NUM_THREADS="1")
            env.update(MKL_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
            cmd = [sys.executable, "-c", _AB_CHILD, "reproduce", "pgc-a3c", *argv]
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            p = subprocess.run(
                [*cmd, "--no-progress", "--out", str(d)], env=env, capture_output=True, text=True
            )
            wall = time.perf_counter() - t0
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            if p.returncode != 0:
                raise SystemExit(f"{variant}: exit {p.returncode}: {p.stderr[-2000:]}")
            cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
            res = json.loads((d / "results.json").read_text())
            for k in ("seconds_total", "seconds", "timing", "created", "command", "machine"):
                res.pop(k, None)
            results.setdefault(variant, json.dumps(res, sort_keys=True))
            out.setdefault(variant, []).append({"wall_s": wall, "cpu_s": cpu})  # type: ignore[union-attr]
            print(f"{variant} (repeat {rep}): wall {wall:.1f} s, CPU {cpu:.1f} s", flush=True)
    out["identical_results"] = results["memory"] == results["tally"]
    m = [r["cpu_s"] for r in out["memory"]]  # type: ignore[index]
    t = [r["cpu_s"] for r in out["tally"]]  # type: ignore[index]
    out["memory_over_tally_cpu"] = [a / b for a, b in zip(m, t, strict=True)]
    ratios = ", ".join(f"{r:.2f}" for r in out["memory_over_tally_cpu"])  # type: ignore[union-attr]
    print(f"identical results: {out['identical_results']}; CPU memory/tally {ratios}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--history", type=int, default=1_000_000, help="largest agent history H")
    ap.add_argument("--single", type=int, default=200, help="single charges timed per H (ours)")
    ap.add_argument("--old-single", type=int, default=3, help="single charges timed (old, 10^6)")
    ap.add_argument("--agents", type=int, default=90_000, help="new agents in one round")
    ap.add_argument("--lock-agents", type=int, default=5_000, help="agents of the lock-step")
    ap.add_argument("--lock-steps", type=int, default=40, help="lock-steps")
    ap.add_argument("--repeats", type=int, default=3, help="best of N for the journal modes")
    ap.add_argument("--skip-composition", action="store_true", help="skip section 7")
    ap.add_argument("--only-matrix", action="store_true", help="run section 8 only")
    ap.add_argument("--engine-ab", default=None, help="run section 9 only, with these arguments")
    ap.add_argument("--json", type=Path, default=Path("benchmarks/results/bench_accountant.json"))
    args = ap.parse_args()
    res: dict[str, object] = {
        "machine": "2-core x86_64 CPU, shared with other jobs (loaded)",
        "platform": platform.platform(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "old": OLD,
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
    }
    budget = Budget(epsilon=1e9)
    t_start, c_start = time.perf_counter(), time.process_time()
    if args.engine_ab is not None:
        import shlex

        with tempfile.TemporaryDirectory() as tmpdir:
            res["engine_ab"] = engine_ab(Path(tmpdir), shlex.split(args.engine_ab), args.repeats)
        _finish(res, args, t_start, c_start)
        return
    if args.only_matrix:
        with tempfile.TemporaryDirectory() as tmpdir:
            tmp = Path(tmpdir)
            res["charge_many_matrix"] = charge_many_matrix(tmp, load_old(tmp), args.repeats)
        _finish(res, args, t_start, c_start)
        return
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        old = load_old(tmp)

        # 1. journal modes
        jm = journal_modes(tmp, args.single, args.repeats)
        res["journal_modes_charges_per_s"] = jm
        print(
            "bare INSERT+COMMIT per charge: "
            + ", ".join(f"{k} {v:,.0f}/s" for k, v in jm.items())
            + f"  (rollback/WAL+checkpoint {jm['rollback_truncate'] / jm['wal_checkpoint']:.2f})"
        )

        # 2-3. single charges with a budget at history H; spent at H
        rows = []
        for h in sorted({0, min(10_000, args.history), args.history}):
            ours = Accountant(tmp / f"ours_{h}.sqlite", budget=budget)
            dt_fill, _ = _timed(fill, ours, "big", h)
            bare = bare_ledger(tmp / f"bare_{h}.sqlite", "TRUNCATE", h)
            k = args.single
            t_ours = t_bare = float("inf")
            for _ in range(2):  # alternate, best of two blocks of k
                t0 = time.perf_counter()
                for _ in range(k):
                    ours.charge("big", LaplaceEvent(0.01))
                t_ours = min(t_ours, (time.perf_counter() - t0) / k)
                t_bare = min(t_bare, bare_charges(bare, k) / k)
            bare.close()
            ours._cache.clear()
            t_spent, eps = _timed(ours.spent, "big", method="basic")
            t_spent_best, _ = _timed(ours.spent, "big", method="best")
            row = {
                "history": h,
                "ours_charge_ms": t_ours * 1e3,
                "bare_charge_ms": t_bare * 1e3,
                "ours_over_bare": t_ours / t_bare,
                "ours_spent_ms": t_spent * 1e3,
                "ours_spent_best_ms": t_spent_best * 1e3,
                "ours_fill_s": dt_fill,
            }
            line = (
                f"H={h:>9,}: charge() with budget ours {t_ours * 1e3:.2f} ms, bare "
                f"{t_bare * 1e3:.2f} ms (ours/bare {t_ours / t_bare:.2f}); spent() ours "
                f"{t_spent * 1e3:.1f} ms (best {t_spent_best * 1e3:.1f} ms)"
            )
            if h == args.history:
                ours.close()
                dt_open, led = _timed(Ledger, tmp / f"ours_{h}.sqlite")
                dt_verify, _ = _timed(led.verify)
                led.close()
                row.update({"ours_open_s": dt_open, "ours_verify_s": dt_verify})
                line += f"; open {dt_open:.2f} s, verify() {dt_verify:.1f} s"
            else:
                ours.close()
            if old is not None and (h == args.history or h == 0):
                o = old.Accountant(tmp / f"old_{h}.sqlite")
                fill(o, "big", h)
                o.close()
                o = old.Accountant(tmp / f"old_{h}.sqlite", budget=old.Budget(epsilon=1e9))
                ko = args.old_single if h else k
                t0 = time.perf_counter()
                for _ in range(ko):
                    o.charge("big", LaplaceEvent(0.01))
                t_old = (time.perf_counter() - t0) / ko
                o._cache.clear()
                t_old_spent, eps_old = _timed(o.spent, "big", method="basic")
                o.close()
                # both count every charge: H + the timed ones, 0.01 each
                assert abs(eps_old - 0.01 * (h + ko)) < 1e-6 * max(1.0, eps_old), eps_old
                assert abs(eps - 0.01 * (h + 2 * k)) < 1e-6 * max(1.0, eps), eps
                row.update(
                    {
                        "old_charge_ms": t_old * 1e3,
                        "old_spent_ms": t_old_spent * 1e3,
                        "old_over_ours_charge": t_old / t_ours,
                        "old_over_ours_spent": t_old_spent / t_spent,
                    }
                )
                line += (
                    f"\n{'':12}old: charge() {t_old * 1e3:.1f} ms ({t_old / t_ours:.1f}x ours), "
                    f"spent() {t_old_spent * 1e3:.1f} ms ({t_old_spent / t_spent:.0f}x ours)"
                )
            rows.append(row)
            print(line, flush=True)
        res["single_charge_and_spent"] = rows

        # 4. charge_many
        ev = LaplaceEvent(1.0)
        m = args.agents
        batch = {}
        for name, mod in (("ours", sys.modules[Accountant.__module__]), ("old", old)):
            if mod is None:
                continue
            cls = mod.Accountant
            a = cls(tmp / f"batch_{name}.sqlite", budget=mod.Budget(epsilon=1.0))
            dt1, _ = _timed(a.charge_many, [(f"1/{i}", ev) for i in range(m)])
            dt2, _ = _timed(a.charge_many, [(f"2/{i}", ev) for i in range(m)])
            a._cache.clear()
            dt_all, allv = _timed(a.spent_all, method="basic")
            dt_all2, _ = _timed(a.spent_all_detail, method="best")  # a report's second query
            a.close()
            la = cls(tmp / f"lock_{name}.sqlite", budget=mod.Budget(epsilon=1e9))
            lock = [(f"0/{i}", LaplaceEvent(0.01)) for i in range(args.lock_agents)]
            t0 = time.perf_counter()
            last = 0.0
            for _ in range(args.lock_steps):
                last, _ = _timed(la.charge_many, lock)
            dt_lock = time.perf_counter() - t0
            la.close()
            batch[name] = {
                "round_rows_per_s": m / min(dt1, dt2),
                "spent_all_s": dt_all,
                "spent_all_second_method_s": dt_all2,
                "spent_all_agents": len(allv),
                "lock_rows_per_s": args.lock_agents * args.lock_steps / dt_lock,
                "lock_last_step_s": last,
            }
            print(
                f"{name}: charge_many round of {m:,} new agents with budget "
                f"{m / min(dt1, dt2):,.0f} rows/s; lock-step {args.lock_agents:,} agents x "
                f"{args.lock_steps} steps {batch[name]['lock_rows_per_s']:,.0f} rows/s (last step "
                f"{last * 1e3:.0f} ms); spent_all over {len(allv):,} agents {dt_all:.2f} s "
                f"(then another method {dt_all2:.2f} s)",
                flush=True,
            )
        if "old" in batch:
            o, n = batch["old"], batch["ours"]
            batch["ours_over_old"] = {
                "round_rows_per_s": n["round_rows_per_s"] / o["round_rows_per_s"],
                "lock_rows_per_s": n["lock_rows_per_s"] / o["lock_rows_per_s"],
                "lock_last_step": o["lock_last_step_s"] / n["lock_last_step_s"],
                "spent_all": o["spent_all_s"] / n["spent_all_s"],
                "spent_all_second_method": o["spent_all_second_method_s"]
                / n["spent_all_second_method_s"],
            }
            print(
                "ours/old throughput: "
                + ", ".join(f"{k} {v:.2f}" for k, v in batch["ours_over_old"].items())
            )
        res["charge_many"] = batch

        # 8. charge_many per call: the engine's pattern
        res["charge_many_matrix"] = charge_many_matrix(tmp, old, args.repeats)

    # 7. composition of long histories (bounded)
    if not args.skip_composition:
        comp = []
        step = PoissonSampledEvent(0.01, GaussianEvent(1.0))
        for ev, n in ((step, 100_000), (step, 1_000_000), (LaplaceEvent(0.01), 1_000_000)):
            sig = ((event_to_json(ev), n),)  # what spent() composes: (event, count) pairs
            atoms = {ev: n}
            for method in ("rdp", "prv", "pld", "best"):
                evaluate_full.cache_clear()
                try:
                    dt, (eps, winner, _, skipped) = _timed(evaluate_full, sig, 1e-5, method)
                    out = {"s": dt, "epsilon": eps, "winner": winner}
                    if skipped:
                        out["skipped"] = dict(skipped)
                except InvalidParameterError as exc:  # e.g. a method that does not apply
                    out = {"error": str(exc)}
                if method == "prv" and isinstance(ev, PoissonSampledEvent):
                    out["plan_eps_error"] = prv.plan(atoms, delta=1e-5)[0]
                if method == "pld":
                    out["plan_discretization"] = pld.plan(atoms)[0]
                comp.append({"event": repr(ev), "steps": n, "method": method, **out})
                print(f"{n:>9,} x {ev!r}: {method}: {out}", flush=True)
        res["composition"] = comp

    _finish(res, args, t_start, c_start)


def _finish(res: dict, args: argparse.Namespace, t_start: float, c_start: float) -> None:
    res["total_wall_s"] = time.perf_counter() - t_start
    res["total_cpu_s"] = time.process_time() - c_start
    print(f"total: wall {res['total_wall_s']:.1f} s, CPU {res['total_cpu_s']:.1f} s")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(res, indent=2))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
