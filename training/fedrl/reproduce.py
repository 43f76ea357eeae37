"""``ldp-audit reproduce fedrl``: Table 1, the history-length study (Figure 4), the attack
sweep and the black-box audit of the output mechanism (the README and results.json are written
by :mod:`ldp_audit.training.fedrl.reproduce_report`; both are also importable from
:mod:`ldp_audit.training.fedrl_reproduce`).

Every training here uses an in-memory ledger (charges still precede every release); the attack
runs keep their transcript in memory and are attacked from it.
"""

from __future__ import annotations

import functools
import math
import os
import platform
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError

__all__ = [
    "ReproConfig",
    "reproduce",
    "audit_output_mechanism",
    "random_policy_success",
]


@dataclass(frozen=True)
class ReproConfig:
    """Scale of the reproduction (see ``ldp-audit reproduce fedrl --help``)."""

    sizes: tuple[int, ...] = (8, 16, 32)
    runs: int = 5
    train_steps: tuple[int, ...] = (1500,)
    n_envs: int = 16
    n_maps: int = 8000
    eval_maps: int = 800
    hist_len: int = 4
    hist_lens: tuple[int, ...] = (2, 4, 8)
    fig4_runs: int = 2
    attack_sigmas: tuple[float, ...] = (0.0, 0.1, 1.0, 5.0)
    attack_clip: float = 1.0
    attack_steps: int = 400
    seed: int = 0
    audit_samples: int = 200_000
    threads: int = 1
    fig4_steps: int | None = None
    meeting_rule: str = "manhattan"
    explore_eps: tuple[float, ...] = (0.05, 0.1, 0.2)
    curve_points: int = 8
    curve_maps: int = 200
    #: torch device of every stage's networks: ``"cpu"``, ``"cuda"`` or ``"auto"``
    #: (:mod:`ldp_audit.training.device`); random draws stay on the CPU, so on the CPU the
    #: results are bit for bit those of before the option existed
    device: str = "cpu"

    def __post_init__(self) -> None:
        """Every field type-checked and ranged (errors name the field and the value)."""
        from ldp_audit.training.fedrl import _check_bound, _check_sigma, _is_int
        from ldp_audit.training.gridworld import check_size

        def ints(name: str, lo: int, *, seq: bool = False, empty: bool = False) -> None:
            v = getattr(self, name, None)
            vals = v if seq else (v,)
            if seq and (not isinstance(v, (tuple, list)) or (not v and not empty)):
                raise InvalidParameterError(
                    f"{name} must be a {'' if empty else 'non-empty '}tuple of integers >= {lo}, "
                    f"got {v!r}"
                )
            for x in vals:
                if not _is_int(x) or x < lo:
                    what = "integers" if seq else "an integer"
                    raise InvalidParameterError(f"{name} must be {what} >= {lo}, got {v!r}")

        ints("sizes", 1, seq=True)
        for s in self.sizes:
            check_size(s, None)
        ints("train_steps", 1, seq=True)
        ints("hist_lens", 1, seq=True, empty=True)
        for name, lo in (("runs", 1), ("n_envs", 1), ("n_maps", 10), ("eval_maps", 1),
                         ("hist_len", 1), ("fig4_runs", 1), ("attack_steps", 1), ("seed", 0),
                         ("audit_samples", 0), ("threads", 1)):  # fmt: skip
            if hasattr(self, name):
                ints(name, lo)
        if getattr(self, "fig4_steps", None) is not None:
            ints("fig4_steps", 1)
        from ldp_audit.training.gridworld import check_meeting_rule

        check_meeting_rule(self.meeting_rule)
        from ldp_audit.training.device import check_device

        check_device(self.device)
        ints("curve_points", 0)
        ints("curve_maps", 1)
        if not isinstance(self.explore_eps, (tuple, list)):
            raise InvalidParameterError(
                f"explore_eps must be a tuple of reals in (0, 1], got {self.explore_eps!r}"
            )
        for e in self.explore_eps:
            if isinstance(e, bool) or not isinstance(e, (int, float)) or not 0 < e <= 1:
                raise InvalidParameterError(
                    f"explore_eps must be reals in (0, 1], got {self.explore_eps!r}"
                )
        if not isinstance(self.attack_sigmas, (tuple, list)):
            raise InvalidParameterError(
                f"attack_sigmas must be a tuple of reals >= 0, got {self.attack_sigmas!r}"
            )
        for s in self.attack_sigmas:
            _check_sigma(s, "attack_sigmas")
        _check_bound(self.attack_clip, "attack_clip")

    def steps_for(self, i: int) -> int:
        return self.train_steps[0] if len(self.train_steps) == 1 else self.train_steps[i]

    def fig4_train_steps(self) -> int:
        return self.steps_for(0) if self.fig4_steps is None else self.fig4_steps


def audit_output_mechanism(samples: int, seed: int) -> list[dict[str, Any]]:
    """Audit the clipped-Gaussian output mechanism (correct) and a broken variant.

    The broken one claims sigma = 8 but adds sigma = 2: the auditor must flag it.
    """
    from ldp_audit.audit import audit
    from ldp_audit.training.fedrl import OutputMechanism

    class _Broken(OutputMechanism):
        def privatize(self, x: Any, rng: np.random.Generator) -> np.ndarray:
            return OutputMechanism(2.0, self.bound, self.dim, self.delta).privatize(x, rng)

    out = []
    for label, mech in (
        ("correct: B=1, sigma=8", OutputMechanism(8.0, 1.0)),
        ("correct: B=1, sigma=1 (the paper's sigma)", OutputMechanism(1.0, 1.0)),
        ("broken: claims sigma=8, adds sigma=2", _Broken(8.0, 1.0)),
    ):
        t0 = time.perf_counter()
        r = audit(mech, mech.candidate_pairs(), samples=samples, float_bits=False, rng=seed)
        out.append(
            {
                "mechanism": label,
                "claimed_epsilon": mech.epsilon,
                "delta": mech.delta,
                "epsilon_lower_bound": r.epsilon_lower_bound,
                "violation": bool(r.violation),
                "samples": samples,
                "seconds": time.perf_counter() - t0,
                "summary": r.summary(),
            }
        )
    return out


def random_policy_success(
    size: int,
    n_maps: int,
    map_seed: int,
    eval_maps: int,
    seeds: int = 3,
    maps: Any = None,
    meeting_rule: str = "manhattan",
) -> dict[str, Any]:
    """SuccRate of the uniformly random joint policy on the first ``eval_maps`` test maps (one
    episode per map and seed, T_m steps): the floor a learned policy has to beat.

    ``meeting_rule``: ``"manhattan"`` (the paper's text) or ``"public-code"`` (the authors'
    |dx + dy|). The random actions are the same under both rules (same seeds), and the
    trajectories agree until the first meeting, so every success under Manhattan is one under
    the public code's rule too.

    Returns ``{"per_seed": [rate, ...], "seeds": seeds, "successes": k, "episodes": n,
    "cp95": [lo, hi]}`` (Clopper-Pearson over all seeds' episodes pooled). ``maps``: the
    already generated maps of (size, n_maps, map_seed), if at hand.
    """
    from ldp_audit.training.fedrl import _cp
    from ldp_audit.training.gridworld import VectorGridWorld, generate_maps

    if maps is None:
        maps = generate_maps(size, n_maps, seed=map_seed)
    test = maps.split["test"][:eval_maps]
    rates, k_all = [], 0
    for s in range(seeds):
        rng = np.random.default_rng(np.random.SeedSequence([map_seed, 4242, s]))
        env = VectorGridWorld(maps, test, hist_len=1, meeting_rule=meeting_rule)
        env.reset()
        met = np.zeros(len(test), dtype=bool)
        for _ in range(int(maps.t_max)):
            _, _, m, _ = env.step(rng.integers(16, size=len(test)))
            met |= m
        rates.append(float(met.mean()))
        k_all += int(met.sum())
    n_all = seeds * len(test)
    return {
        "meeting_rule": meeting_rule,
        "per_seed": rates,
        "seeds": seeds,
        "successes": k_all,
        "episodes": n_all,
        "cp95": list(_cp(k_all, n_all)),
    }


@functools.lru_cache(maxsize=2)
def _maps(size: int, n_maps: int, seed: int) -> Any:
    """The seeded maps of a size, generated once per process (stages share them read-only)."""
    from ldp_audit.training.gridworld import generate_maps

    return generate_maps(size, n_maps, seed=seed)


def _stage(item: dict[str, Any]) -> dict[str, Any]:
    """One stage of the reproduction (a Table 1 size, a Figure 4 history length or an attack
    setting): a module-level, deterministic task of :func:`ldp_audit.backends.run_tasks`, so a
    stage gives the same numbers in this process, a local pool or on Ray."""
    from ldp_audit.attacks.fedrl import attack_arrays
    from ldp_audit.training.fedrl import FedRLConfig, _log_arrays, _metrics, run_fedrl

    rc: ReproConfig = item["rc"]
    kind, progress = item["kind"], bool(item.get("progress", False))
    t0, c0 = time.perf_counter(), time.process_time()
    size = item["size"]
    maps = _maps(size, rc.n_maps, rc.seed)
    if kind == "table1-run":  # one (method, run) of Table 1, trained alone
        cfg = _table1_config(rc, item["index"])
        r = run_fedrl(
            cfg,
            seed=rc.seed + 1000 * size,
            maps=maps,
            record=False,
            progress=progress,
            threads=rc.threads,
            extras=_extras(rc),
            only=(item["method"], item["run"]),
        )
        out = {k: v for k, v in r["results"][0].items() if k != "state"}
        out["task_seconds"] = time.perf_counter() - t0
        out["task_cpu_seconds"] = time.process_time() - c0
        return out
    if kind in ("table1", "fig4"):
        table1 = kind == "table1"
        cfg = FedRLConfig(
            size=size,
            n_maps=rc.n_maps,
            map_seed=rc.seed,
            hist_len=rc.hist_len if table1 else item["hist_len"],
            sigma=1.0,
            train_steps=rc.steps_for(item["index"]) if table1 else rc.fig4_train_steps(),
            n_envs=rc.n_envs,
            eval_maps=rc.eval_maps,
            runs=rc.runs if table1 else rc.fig4_runs,
            meeting_rule=rc.meeting_rule,
            device=rc.device,
        )
        r = run_fedrl(
            cfg,
            seed=rc.seed + 1000 * size if table1 else rc.seed + 7 + item["hist_len"],
            maps=maps,
            record=False,
            progress=progress,
            threads=rc.threads,
        )
        m = _metrics(cfg, r["results"])
        m["seconds"] = time.perf_counter() - t0
        m["cpu_seconds"] = time.process_time() - c0
        m["train_steps"] = cfg.train_steps
        if table1:
            m["longest_shortest_path"] = int(maps.shortest.max())
            m["random_policy"] = random_policy_success(
                size, rc.n_maps, rc.seed, rc.eval_maps, maps=maps
            )
        return m
    cfg = FedRLConfig(
        size=size,
        n_maps=rc.n_maps,
        map_seed=rc.seed,
        hist_len=rc.hist_len,
        sigma=float(item["sigma"]),
        clip_outputs=item["clip"],
        train_steps=rc.attack_steps,
        n_envs=rc.n_envs,
        eval_maps=min(rc.eval_maps, 200),
        methods=("fedrl",),
        runs=1,
        meeting_rule=rc.meeting_rule,
        device=rc.device,
    )
    r = run_fedrl(
        cfg, seed=rc.seed + 99, maps=maps, record=True, progress=False, threads=rc.threads
    )
    tr, sec = _log_arrays(r["log"])
    from threadpoolctl import threadpool_limits

    # scikit-learn's OpenMP threads pinned like torch's: N workers x all cores each would
    # oversubscribe the machine (and OpenMP's spin-waits burn the CPU the others need)
    with threadpool_limits(limits=rc.threads):
        a = attack_arrays(cfg, tr, sec, seed=rc.seed)
    spent = r["accountant"].spent_all(delta=cfg.delta, method="best")
    a["epsilon_beta_run"] = spent.get("0/beta", math.inf)
    a["epsilon_alpha_run"] = spent.get("0/alpha", math.inf)
    a["seconds"] = time.perf_counter() - t0
    a["fedrl1_succ_rate"] = r["results"][0]["FedRL-1"]["succ_rate"]
    return a


def _table1_config(rc: ReproConfig, index: int) -> Any:
    """The FedRLConfig of Table 1 at ``rc.sizes[index]``."""
    from ldp_audit.training.fedrl import FedRLConfig

    return FedRLConfig(
        size=rc.sizes[index],
        n_maps=rc.n_maps,
        map_seed=rc.seed,
        hist_len=rc.hist_len,
        sigma=1.0,
        train_steps=rc.steps_for(index),
        n_envs=rc.n_envs,
        eval_maps=rc.eval_maps,
        runs=rc.runs,
        meeting_rule=rc.meeting_rule,
        device=rc.device,
    )


def _extras(rc: ReproConfig) -> dict[str, Any]:
    """The further evaluations of Table 1's networks (learning curves, epsilon-greedy)."""
    return {
        "curve_points": rc.curve_points,
        "curve_maps": min(rc.curve_maps, rc.eval_maps),
        "explore": tuple(rc.explore_eps),
    }


def _table1_size(rc: ReproConfig, index: int, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Table 1 at one size from its (method, run) tasks, in the order the batched trainer
    lists them (methods, then runs), with the random policy under both meeting rules."""
    from ldp_audit.training.fedrl import METHODS, _metrics

    cfg = _table1_config(rc, index)
    order = {(m, r): i for i, (m, r) in enumerate((m, r) for m in METHODS for r in range(rc.runs))}
    runs = sorted(runs, key=lambda r: order[(r["method"], r["trial"])])
    m = _metrics(cfg, runs)
    m["seconds"] = sum(r["task_seconds"] for r in runs)
    m["cpu_seconds"] = sum(r["task_cpu_seconds"] for r in runs)
    m["seconds_note"] = "sum over the (method, run) tasks"
    m["train_steps"] = cfg.train_steps
    m["meeting_rule"] = cfg.meeting_rule
    maps = _maps(cfg.size, rc.n_maps, rc.seed)
    m["longest_shortest_path"] = int(maps.shortest.max())
    m["random_policy"] = random_policy_success(
        cfg.size, rc.n_maps, rc.seed, rc.eval_maps, maps=maps, meeting_rule=cfg.meeting_rule
    )
    m["random_policy_rules"] = {
        rule: random_policy_success(
            cfg.size, rc.n_maps, rc.seed, rc.eval_maps, maps=maps, meeting_rule=rule
        )
        for rule in ("manhattan", "public-code")
    }
    return m


def _describe_stage(item: dict[str, Any]) -> str:
    keys = ("kind", "size", "method", "run", "hist_len", "clip", "sigma")
    return ", ".join(f"{k}={item[k]!r}" for k in keys if k in item) + f", seed={item['rc'].seed}"


def reproduce(
    rc: ReproConfig,
    *,
    progress: bool = False,
    command: str = "",
    checkpoint: Callable[[dict[str, Any]], None] | None = None,
    backend: str = "local",
    address: str | None = None,
    workers: int | None = None,
) -> dict[str, Any]:
    """Run the whole reproduction at the scale of ``rc``; returns the JSON-able results.

    ``checkpoint(results_so_far)`` is called after every stage (the CLI keeps a partial file so
    a failure late in the run does not lose the finished stages; on a pool or Ray, after all of
    them). The stages (Table 1 sizes, Figure 4 history lengths, attack settings) are tasks of
    :func:`ldp_audit.backends.run_tasks` on ``backend`` (``workers``, ``address`` as there):
    each depends only on its own config and seed, so the numbers are the same on every backend.

    ``rc.device`` is resolved here, once, before any work (``"cuda"`` without a CUDA device:
    InvalidParameterError; ``"auto"``: CUDA when there is one, else the CPU); every stage runs
    on the resolved device, recorded as ``results["device"]``.
    """
    from ldp_audit.backends import backend_options, run_tasks
    from ldp_audit.training.device import resolve_device
    from ldp_audit.training.fedrl import PAPER_TABLE1

    if not isinstance(rc, ReproConfig):
        raise InvalidParameterError(f"rc must be a ReproConfig, got {type(rc).__name__}")
    where = backend_options(backend=backend, address=address, workers=workers)  # before work
    if len(rc.train_steps) not in (1, len(rc.sizes)):
        raise InvalidParameterError(
            f"train_steps must give one value or one per size, got {rc.train_steps}"
        )
    device = resolve_device(rc.device)  # "cuda" without CUDA: refused before any work
    t_all, c_all = time.perf_counter(), time.process_time()
    res: dict[str, Any] = {
        "config": asdict(rc),
        "command": command,
        "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}; "
        f"{os.cpu_count()} cores seen by the process",
        "device": device,
        "paper": PAPER_TABLE1,
        "table1": {},
        "fig4": {},
        "attacks": [],
        "load_average_start": _loadavg(),
    }
    if device == "cuda":
        import torch

        res["device_name"] = torch.cuda.get_device_name(0)
    rc = replace(rc, device=device)  # every stage on the resolved device (no "auto" per worker)

    def save() -> None:
        if checkpoint is not None:
            checkpoint(res)

    if rc.audit_samples:  # first: fast, and it needs no training
        res["audit"] = audit_output_mechanism(rc.audit_samples, rc.seed)
        save()
    from ldp_audit.training.fedrl import METHODS

    # Table 1: every (size, method, run) is its own task (a run trained alone; see run_fedrl's
    # ``only``), so a pool of N workers trains N runs at once; the numbers do not depend on it
    items: list[dict[str, Any]] = [
        {"kind": "table1-run", "rc": rc, "size": size, "index": i, "method": m, "run": r}
        for i, size in enumerate(rc.sizes)
        for m in METHODS
        for r in range(rc.runs)
    ]
    per_size = len(METHODS) * rc.runs
    pending: dict[int, list[dict[str, Any]]] = {}
    reuse: list[int] = []
    for h in rc.hist_lens:
        if h == rc.hist_len and rc.fig4_train_steps() == rc.steps_for(0):
            reuse.append(h)  # Figure 4's point at H = hist_len is Table 1's first size
        else:
            items.append({"kind": "fig4", "rc": rc, "size": rc.sizes[0], "hist_len": h})
    for clip in (None, rc.attack_clip) if rc.attack_sigmas else ():
        for sigma in rc.attack_sigmas:
            items.append({"kind": "attack", "rc": rc, "size": rc.sizes[0], "clip": clip,
                          "sigma": sigma})  # fmt: skip

    def place(item: dict[str, Any], out: dict[str, Any]) -> None:
        if item["kind"] == "table1-run":
            got = pending.setdefault(item["index"], [])
            got.append(out)
            if len(got) == per_size:  # the size's last run: its Table 1
                place({"kind": "table1", "size": item["size"], "index": item["index"]},
                      _table1_size(rc, item["index"], pending.pop(item["index"])))  # fmt: skip
        elif item["kind"] == "table1":
            res["table1"][str(item["size"])] = out
            for h in reuse:
                if item["index"] == 0:
                    res["fig4"][str(h)] = dict(out, reused="table1")
        elif item["kind"] == "fig4":
            res["fig4"][str(item["hist_len"])] = out
        else:
            res["attacks"].append(out)

    if where["backend"] == "local" and (where["workers"] or 1) == 1:
        for item in items:  # in this process, checkpointed after every stage
            place(item, _stage(dict(item, progress=progress)))
            save()
    else:
        outs = run_tasks(
            _stage,
            items,
            **where,
            progress="fedrl stages" if progress else None,
            describe=_describe_stage,
        )
        for item, out in zip(items, outs, strict=True):
            place(item, out)
        save()
    res["fig4"] = {str(h): res["fig4"][str(h)] for h in rc.hist_lens if str(h) in res["fig4"]}
    res["seconds_total"] = time.perf_counter() - t_all
    res["cpu_seconds_total"] = time.process_time() - c_all
    res["load_average_end"] = _loadavg()
    return res


def _loadavg() -> list[float] | None:
    """The 1/5/15-minute load averages (None where the OS has none): how loaded the machine
    was, for the record of the wall time."""
    import os

    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover
        return None
