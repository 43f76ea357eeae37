"""Peak memory of the size-bounded commands against their pre-run estimate (issue 38, item 8).

Each case runs one ``ldp-audit`` command in a child process and samples, every 20 ms, the
resident memory (``VmRSS``) of the child and of every process below it (the worker pool,
spawned): the peak of their sum (what the machine must hold) and the peak of the largest one.
The estimate is what the command's own pre-run check computes (the same function of
``ldp_audit.training.sizes``, called here on the same configuration). Every case runs in under
about 3 minutes of CPU on a 2-core machine; the full ``make reproduce`` (about 23.9 million
submissions, about 5 CPU-minutes) is not run: its peak is extrapolated from the two-worker
case of 1.2 million submissions plus the per-submission slope of the grid's allocations
(:func:`traced_slope`: tracemalloc at two sizes, since resident memory hides the first arrays
of a process in the memory its compiler freed) and the parent's copy of the results.

Usage: ``.venv/bin/python benchmarks/memory_sizes.py [--out FILE.json] [--cases NAME ...]
[--no-slope]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "ldp_audit.cli"]
#: submissions of the full ``make reproduce`` (grid stopped at its FSTs, Figure 2 full runs;
#: counted by the session that measured its 12.6 GB peak)
FULL_SUBMISSIONS = 23.9e6


def _repro(trials: int, subs: int, workers: int, fixed: bool = True) -> tuple[list[str], dict]:
    """``reproduce pgc-a3c`` (``fixed``: every trial runs to --max-submissions, no Figure 2)."""
    args = [
        "reproduce",
        "pgc-a3c",
        "--seed",
        "0",
        "--no-progress",
        "--overwrite",
        "--trials",
        str(trials),
        "--max-submissions",
        str(subs),
        "--workers",
        str(workers),
    ]
    args += ["--no-stop-at-target", "--no-figure2"] if fixed else []  # fmt: skip
    kw = {"trials": trials, "max_submissions": subs, "workers": workers}
    kw.update({"stop_at_target": False, "figure2": False} if fixed else {})
    return args, kw


def _train(trials: int, subs: int) -> tuple[list[str], dict]:
    """``train pgc-a3c`` (a run directory: the SQLite ledger of record and the transcript)."""
    args = [
        "train",
        "pgc-a3c",
        "--mechanism",
        "laplace",
        "--epsilon",
        "1",
        "--no-progress",
        "--no-stop-at-target",
        "--trials",
        str(trials),
        "--max-submissions",
        str(subs),
    ]
    kw = {"mechanism": "laplace", "epsilon": 1.0, "stop_at_target": False, "trials": trials,
          "max_submissions": subs}  # fmt: skip
    return args, kw


#: the torch trainers' smallest runs: (arguments after ``train TRAINER``, the config's keywords)
_TORCH = {
    "dprl": (["--algo", "reinforce", "--privacy", "dpsgd", "--episodes", "20"],
             {"algo": "reinforce", "privacy": "dpsgd", "episodes": 20}),
    "frd": (["--max-episodes", "10", "--groups", "1"], {"max_episodes": 10, "groups": 1}),
    "fedrl": (["--train-steps", "200", "--n-maps", "50", "--eval-maps", "5", "--runs", "1"],
              {"train_steps": 200, "n_maps": 50, "eval_maps": 5, "runs": 1}),
}  # fmt: skip


#: the smallest reproductions: (arguments after ``reproduce TRAINER``, the settings' keywords)
_REPRO = {
    "dprl": (["--seeds", "1", "--episodes", "5", "--total-steps", "200", "--noise-multiplier",
              "0", "--obs-noise", "0", "--audit-canaries", "0", "--eval-episodes", "0"],
             {"seeds": 1, "episodes": 5, "total_steps": 200, "dpsgd_noise": [0.0],
              "obs_noise": [0.0], "audit_canaries": 0, "eval_episodes": 0}),
    "frd": (["--settings", "1", "--agents", "1", "--groups", "1", "--max-episodes", "5",
             "--no-leak", "--ldp-epsilons", "1"],
            {"settings": [1], "agents": [1], "groups": 1, "max_episodes": 5, "leak": False,
             "ldp_epsilons": [1.0]}),
    "fedrl": (["--sizes", "8", "--runs", "1", "--train-steps", "50", "--n-maps", "50",
               "--eval-maps", "5", "--hist-lens", "--attack-sigmas", "--attack-steps", "10",
               "--audit-samples", "0", "--explore-eps", "--curve-points", "0"],
              {"sizes": [8], "runs": 1, "train_steps": [50], "n_maps": 50, "eval_maps": 5,
               "hist_lens": [], "attack_sigmas": [], "attack_steps": 10, "audit_samples": 0,
               "explore_eps": [], "curve_points": 0}),
}  # fmt: skip


def _gym(subs: int) -> tuple[list[str], dict]:
    """``train pgc-a3c`` on the Gymnasium path (CartPole's pole length, not its gravity)."""
    kw = {
        "env_id": "CartPole-v1",
        "private_param": "length",
        "values": [0.5, 1.0],
        "mechanism": "laplace",
        "epsilon": 1.0,
        "trials": 1,
        "max_submissions": subs,
    }
    args = ["train", "pgc-a3c", "--env", "CartPole-v1", "--private-param", "length=0.5,1.0",
            "--mechanism", "laplace", "--epsilon", "1", "--trials", "1", "--max-submissions",
            str(subs), "--no-progress"]  # fmt: skip
    return args, kw


#: the FRD run ``attack frd`` attacks (``{run}`` in a case's arguments; made first, not measured)
_FRD_RUN = (["train", "frd", "--max-episodes", "20", "--groups", "1", "--exchange-period", "3",
             "--initial-episodes", "2", "--no-stop-at-mission", "--no-progress"],
            {"max_episodes": 20, "groups": 1, "exchange_period": 3, "initial_episodes": 2,
             "stop_at_mission": False})  # fmt: skip


#: name -> (command-line arguments after ``ldp-audit``, ``--out`` added; the config's keywords)
CASES: dict[str, tuple[list[str], dict]] = {
    "base": _repro(1, 2000, 1),
    "max-submissions 40k": _repro(1, 40_000, 1),
    "max-submissions 120k": _repro(1, 120_000, 1),
    "trials 4": _repro(4, 20_000, 1),
    "workers 2": _repro(4, 20_000, 2),
    "workers 2, max-submissions 60k": _repro(2, 60_000, 2),
    "make reproduce, scaled": _repro(2, 20_000, 2, fixed=False),
    "train": _train(4, 10_000),
    **{
        f"train {t}": (["train", t, *a, "--no-progress"], {"trainer": t, **kw})
        for t, (a, kw) in _TORCH.items()
    },
    "train fedrl, clip-outputs 1": (  # its privacy table: the PLD of a clipped run's epsilon
        ["train", "fedrl", "--train-steps", "50", "--n-maps", "50", "--eval-maps", "5", "--runs",
         "1", "--clip-outputs", "1", "--no-progress"],
        {"trainer": "fedrl", "train_steps": 50, "n_maps": 50, "eval_maps": 5, "runs": 1,
         "clip_outputs": 1.0}),
    **{
        f"reproduce {t}": (["reproduce", t, *a, "--no-progress"], {"reproduce": t, **kw})
        for t, (a, kw) in _REPRO.items()
    },
    **{
        f"reproduce {t}, workers 2": (["reproduce", t, *a, "--workers", "2", "--no-progress"],
                                      {"reproduce": t, "workers": 2, **kw})
        for t, (a, kw) in _REPRO.items()
    },
    "reproduce fedrl, attack": (  # one attacked (recorded) run per --attack-sigmas, and clipped
        ["reproduce", "fedrl", *_REPRO["fedrl"][0][:11], "--attack-sigmas", "1", "--attack-steps",
         "200", *_REPRO["fedrl"][0][14:], "--no-progress"],
        {"reproduce": "fedrl", **_REPRO["fedrl"][1], "attack_sigmas": [1.0], "attack_steps": 200}),
    **{f"train gym, max-submissions {n}": _gym(n) for n in (200, 4000, 20_000, 40_000)},
    "attack dynamics, train-submissions 40k": (
        ["attack", "dynamics", "--train-submissions", "40000"],
        {"attack": 1, "reports": 1, "subs": 40_000}),
    "attack dynamics": (["attack", "dynamics"], {"attack": 1, "reports": 1}),
    "attack membership": (["attack", "membership"],
                          {"attack": 1, "agents": 400, "shadow": 400, "reports": 1}),
    "attack dynamics, T 20": (["attack", "dynamics", "--reports-per-agent", "20"],
                              {"attack": 1, "reports": 20}),
    "attack frd": (["attack", "frd", "--run-dir", "{run}", "--shadow", "8"],
                   {"attack_frd": _FRD_RUN[1], "shadow": 8}),
    **{f"audit --exact, dim {d}": (["audit", "--mechanism", "laplace", "--epsilon", "1",
                                     "--dim", str(d), "--samples", "1000", "--exact"],
                                    {"audit_dim": d}) for d in (1, 1000)},
    "attack sweep": (["attack", "sweep", "--agents", "30", "--shadow", "100", "--thetas", "init",
                      "--no-progress"], {"attack": 1, "agents": 30, "shadow": 100, "reports": 20,
                                   "sweep": 1}),
}  # fmt: skip


def estimate(kw: dict) -> float:
    """The bytes the command's own pre-run check estimates (the same function it calls)."""
    from ldp_audit.training import sizes
    from ldp_audit.training.dprl.config import DprlConfig
    from ldp_audit.training.dprl.config import ReproduceSettings as DprlSettings
    from ldp_audit.training.fedrl.config import FedRLConfig
    from ldp_audit.training.fedrl.reproduce import ReproConfig
    from ldp_audit.training.frd.config import FrdConfig
    from ldp_audit.training.frd.reproduce import ReproduceSettings as FrdSettings
    from ldp_audit.training.pgc_a3c.config import PgcA3cConfig
    from ldp_audit.training.pgc_a3c.reproduce import ReproduceConfig
    from ldp_audit.training.pgc_a3c_gym.config import GymPgcConfig
    from ldp_audit.training.sizes import pgc_estimates, pgc_reproduce_estimates

    kw = dict(kw)
    trainer, repro = kw.pop("trainer", None), kw.pop("reproduce", None)
    if trainer is not None:
        cfg = {"dprl": DprlConfig, "frd": FrdConfig, "fedrl": FedRLConfig}[trainer](**kw)
        parts = getattr(sizes, f"{trainer}_estimates")(cfg, cli=True)
    elif repro is not None:  # the settings classes of reproduce dprl|frd|fedrl
        cls = {"dprl": DprlSettings, "frd": FrdSettings, "fedrl": ReproConfig}[repro]
        workers = kw.pop("workers", 1)  # the command's --workers, as its check passes it
        parts = getattr(sizes, f"{repro}_reproduce_estimates")(cls(**kw), workers=workers)
    elif "audit_dim" in kw:  # audit --exact's probe
        parts = sizes.audit_probe_estimates(kw["audit_dim"])
    elif "attack_frd" in kw:  # the shadow run, from the attacked run's config
        parts = sizes.frd_attack_estimates(FrdConfig(**kw["attack_frd"]), kw["shadow"])
    elif kw.pop("attack", None):  # a simulated attack (the defaults: 300 agents, 1000 shadow)
        parts = sizes.attack_estimates(**{"agents": 300, "shadow": 1000, **kw})
    elif "env_id" in kw:  # the Gymnasium path; the run directory keeps the transcript
        parts = sizes.gym_pgc_estimates(GymPgcConfig(**kw), record=True, cli=True)
    elif "mechanism" in kw:  # the run directory keeps the transcript
        parts = pgc_estimates(PgcA3cConfig(**kw), [True], cli=True)
    else:
        parts = pgc_reproduce_estimates(ReproduceConfig(**kw))
    return float(sum(e.nbytes for e in parts))


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            kids.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(d))
    return kids


def _rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def peak_memory(cmd: list[str]) -> dict[str, float]:
    """Run ``cmd``; the peak summed RSS of its process tree, of its largest process, wall s."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak_sum = peak_one = 0
    while proc.poll() is None:
        kids, tree, todo = _children(), [], [proc.pid]
        while todo:
            p = todo.pop()
            tree.append(p)
            todo += kids.get(p, [])
        sizes = [_rss(p) for p in tree]
        peak_sum, peak_one = max(peak_sum, sum(sizes)), max(peak_one, max(sizes))
        time.sleep(0.02)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {err[-2000:]}")
    return {"peak_sum": peak_sum, "peak_largest": peak_one, "wall_s": time.perf_counter() - t0}


_TRACED = """
import pickle, sys, tracemalloc
from ldp_audit.training.pgc_a3c.config import PgcA3cConfig
from ldp_audit.training.pgc_a3c.grid import train_grid
subs = int(sys.argv[1])
cfgs = [PgcA3cConfig(mechanism=m, trials=1, max_submissions=subs, stop_at_target=False,
                     buffer_size=b, **({"epsilon": e} if m != "none" else {}))
        for m, b in (("laplace", 1), ("prs", 100)) for e in (1.0, 2.0, 5.0, 10.0)]
cfgs += [PgcA3cConfig(mechanism="none", trials=1, max_submissions=subs, stop_at_target=False,
                      buffer_size=b) for b in (1, 100)]
tracemalloc.start()
res = train_grid(cfgs, seed=0, engine="fused", progress=False)
blob = pickle.dumps(res)  # what a worker sends back
print(tracemalloc.get_traced_memory()[1], sum(int(r.submissions.sum()) for r in res))
"""


def traced_slope(small: int = 10_000, large: int = 40_000) -> float:
    """Bytes per submission of the grid's own allocations (tracemalloc's peak, which NumPy
    reports to, in one process running the 10 settings with one trial each and pickling the
    results as a worker does) between ``small`` and ``large`` submissions per trial: the slope
    free of the compiler's freed memory, which the first arrays of a process reuse and which
    hides them from the resident memory."""
    out = []
    for n in (small, large):
        got = subprocess.run([sys.executable, "-c", _TRACED, str(n)], cwd=ROOT, check=True,
                             capture_output=True, text=True).stdout.split()  # fmt: skip
        out.append((int(got[0]), int(got[1])))
    return (out[1][0] - out[0][0]) / (out[1][1] - out[0][1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="also write the table as JSON here")
    ap.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    ap.add_argument(
        "--no-slope",
        dest="slope",
        action="store_false",
        help="skip the traced slope and the extrapolation of make reproduce",
    )
    a = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.cases:
            args, kw = CASES[name]
            out = str(Path(tmp) / name.replace(" ", "_").replace(",", ""))
            run = str(Path(tmp) / "frd-run")
            if "{run}" in args:  # the run it attacks, made first
                subprocess.run([*CLI, *_FRD_RUN[0], "--out", run], cwd=ROOT, check=True,
                               capture_output=True)  # fmt: skip
            out_args = [] if args[0] == "audit" else ["--out", out]  # audit writes no file
            m = peak_memory([*CLI, *[run if x == "{run}" else x for x in args], *out_args])
            est = estimate(kw)
            rows.append({"case": name, "args": " ".join(args), "config": kw, "estimate": est, **m})
            print(
                f"{name:32s} estimate {est / 2**20:8.0f} MiB  peak (all processes) "
                f"{m['peak_sum'] / 2**20:8.0f} MiB  largest {m['peak_largest'] / 2**20:8.0f} MiB"
                f"  ratio {est / m['peak_sum']:.2f}  {m['wall_s']:.0f} s",
                flush=True,
            )
    by = {r["case"]: r for r in rows}
    w2 = by.get("workers 2, max-submissions 60k")
    if w2 and a.slope:  # 1.2 million submissions over two workers, plus the traced slope
        slope = traced_slope()
        # the workers' allocations per submission, and the parent's copy of zeta (8 bytes)
        full = w2["peak_sum"] + (slope + 8) * (FULL_SUBMISSIONS - 1.2e6)
        est = estimate({"trials": 20, "max_submissions": 90_000, "workers": 2})
        rows.append({"case": "make reproduce (extrapolated)", "estimate": est, "peak_sum": full,
                     "config": {"trials": 20, "max_submissions": 90_000, "workers": 2},
                     "traced_bytes_per_submission": slope})  # fmt: skip
        print(
            f"make reproduce: {slope:.1f} B per submission traced (+ 8 in the parent); "
            f"{FULL_SUBMISSIONS:.3g} submissions over two workers: about {full / 2**30:.2f} GiB "
            f"at the peak (extrapolated), estimate {est / 2**30:.2f} GiB"
        )
    if a.out:
        Path(a.out).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
