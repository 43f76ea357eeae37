"""``ldp-audit train dprl`` and ``ldp-audit reproduce dprl`` (DP-SGD / observation-noise RL).

``train dprl`` trains one REINFORCE or DQN agent on CartPole-v1 under DP-SGD (Opacus), observation
noise, or no privacy, and writes a run directory (docs/dprl.md); with ``--canaries M`` it plants
gradient canaries for the one-run audit ``ldp-audit attack membership --run-dir RUN --out FILE``.
``reproduce dprl`` runs the slides' Figures 8-9 and 12-13 (reward and convergence vs noise).
Imports stay argparse-level here; torch loads inside the commands.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Any

from ldp_audit.cli._types import (
    DefaultsHelpFormatter,
    add_run_mode_arguments,
    check_out_for_mode,
    int_at_least,
    parse_real,
    run_mode,
    show_progress,
    timestamped_dir,
)


def _real(name: str, *, minimum: float | None = None, strict: bool = False,
          maximum: float | None = None, strict_max: bool = False) -> Any:  # fmt: skip
    """argparse converter: a finite real with bounds, the message naming the option."""

    def convert(text: str) -> float:
        try:  # strict: no 1_000, non-ASCII digits or 1e309 (ldp_audit.cli._types.parse_real)
            v = parse_real(text, name)
        except argparse.ArgumentTypeError:
            v = math.nan
        ok = math.isfinite(v)
        if ok and minimum is not None:
            ok = v > minimum if strict else v >= minimum
        if ok and maximum is not None:
            ok = v < maximum if strict_max else v <= maximum
        if not ok:
            lo = "" if minimum is None else f"{'>' if strict else '>='} {minimum:g}"
            hi = "" if maximum is None else f"{'<' if strict_max else '<='} {maximum:g}"
            rng = " and ".join(x for x in (lo, hi) if x)
            raise argparse.ArgumentTypeError(f"{name} must be a finite number {rng}, got {text!r}")
        return v

    return convert


def _box(text: str) -> Any:
    """``lo,hi;lo,hi;lo,hi;lo,hi`` or ``cartpole`` (the declared default box)."""
    if text == "cartpole":
        return "cartpole"
    try:  # strict numbers: no nan, 1_000 or non-ASCII digits (ldp_audit.cli._types.parse_real)
        pairs = [
            tuple(parse_real(x, "--state-box") for x in part.split(",")) for part in text.split(";")
        ]
    except argparse.ArgumentTypeError:
        pairs = []
    if len(pairs) != 4 or any(len(p) != 2 for p in pairs):
        raise argparse.ArgumentTypeError(
            f"--state-box must be 'cartpole' or four 'lo,hi' pairs separated by ';', got {text!r}"
        )
    return tuple(pairs)


def register(train_subparsers: Any, reproduce_subparsers: Any) -> None:
    """Add ``train dprl`` and ``reproduce dprl``."""
    fmt = DefaultsHelpFormatter  # defaults shown only where they inform
    p = train_subparsers.add_parser(
        "dprl",
        help="DP-SGD (Opacus) or observation-noise REINFORCE / DQN on CartPole-v1",
        description="Train one agent on CartPole-v1 under central DP-SGD (privacy unit: an "
        "episode for REINFORCE, a transition for DQN), observation noise ('LDP'), or no "
        "privacy; every update is charged to the ledger before its noise is drawn. Writes a "
        "run directory; --canaries plants gradient canaries for the one-run audit "
        "(ldp-audit attack membership --run-dir RUN --out FILE).",
        formatter_class=fmt,
    )
    # --algo and --privacy are required here (a Python caller gets the config's defaults) and
    # --state-box has its own spelling; their choices and help come from DprlConfig
    from ldp_audit.config import add_arguments, field_docs
    from ldp_audit.training.dprl_config import ALGOS, PRIVACIES, DprlConfig

    docs = field_docs(DprlConfig)
    for name, choices in (("algo", ALGOS), ("privacy", PRIVACIES)):
        p.add_argument(f"--{name}", dest=f"cfg__{name}", choices=choices, required=True,
                       help=docs[name].rstrip("."))  # fmt: skip
    p.add_argument(
        "--state-box",
        type=_box,
        default=None,
        help="obs-noise: clip states to this box first (finite epsilon): 'cartpole' or "
        "'lo,hi;lo,hi;lo,hi;lo,hi'",
    )
    p.add_argument("--seed", type=int_at_least("--seed", 0), default=0, help="master seed")
    p.add_argument(
        "--out",
        default=None,
        metavar="RUN_DIR",
        help="run directory to write (default: a new runs/dprl-<timestamp>)",
    )
    add_run_mode_arguments(p)
    p.add_argument("--json", action="store_true", help="print the metrics as JSON on stdout")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    from ldp_audit.limits import add_force_argument

    add_force_argument(p)
    # every other field of DprlConfig is an option (--noise-multiplier, --clip, --canaries, ...,
    # --buffer-size, --lr): its default, bounds and help are written once, in the config
    add_arguments(p, DprlConfig, skip=("state_box",),
                  group_title="the run's config (DprlConfig; generated)")  # fmt: skip
    p.set_defaults(func=_train)

    r = reproduce_subparsers.add_parser(
        "dprl",
        help="Figures 8-9 and 12-13 of the Doulazmi & Odonnat slides (reward/convergence vs noise)",
        description="Reward and convergence time vs noise level for REINFORCE and DQN under "
        "DP-SGD and observation noise, several seeds, with 95 percent bootstrap bands and the "
        "epsilon each setting gets; writes results.json, figures and README.md.",
        formatter_class=fmt,
    )
    r.add_argument("--seeds", type=int_at_least("--seeds", 1), default=3)
    r.add_argument("--episodes", type=int_at_least("--episodes", 1), default=600,
                   help="REINFORCE episodes per run")  # fmt: skip
    r.add_argument("--total-steps", type=int_at_least("--total-steps", 1), default=100_000,
                   help="DQN environment steps per run")  # fmt: skip
    r.add_argument("--dqn-preset", choices=("solves", "legacy"), default="solves",
                   help="DQN settings: 'solves' (exploration over 20%% of the steps, measured to "
                   "solve CartPole-v1 at 100,000 steps) or 'legacy' (the DprlConfig defaults, "
                   "the reports before 2026-11-27)")  # fmt: skip
    r.add_argument("--noise", type=_real("--noise", minimum=0.0), nargs="+",
                   default=[0.0, 0.01, 0.03, 0.1, 0.5, 1.0],
                   help="DP-SGD noise multipliers of the grid (0: non-private)")  # fmt: skip
    r.add_argument("--obs-noise", type=_real("--obs-noise", minimum=0.0), nargs="+",
                   default=[0.0, 0.1, 0.5, 1.0],
                   help="observation-noise sigmas of the grid (0: non-private)")  # fmt: skip
    r.add_argument("--clip-only", action="store_true",
                   help="add a clip-only DP-SGD row (clipping, no noise; epsilon inf)")  # fmt: skip
    r.add_argument("--eval-episodes", type=int_at_least("--eval-episodes", 0), default=25,
                   help="greedy evaluation episodes after each run (0: none)")  # fmt: skip
    r.add_argument("--cache", default=None,
                   help="folder keeping every finished run; a rerun with it resumes")  # fmt: skip
    r.add_argument("--audit-canaries", type=int_at_least("--audit-canaries", 0), default=500,
                   help="canaries of the one-run audit table (0: skip it)")  # fmt: skip
    r.add_argument(
        "--out",
        default=None,
        help="report folder (default: a new runs/reproduce-dprl-<timestamp>; reports/dprl is "
        "rewritten only when named here)",
    )
    r.add_argument("--overwrite", action="store_true", help="replace an earlier report in --out")
    r.add_argument("--seed", type=int_at_least("--seed", 0), default=0)
    r.add_argument("--json", action="store_true", help="print results.json on stdout")
    r.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    from ldp_audit.cli._types import add_backend_arguments

    add_backend_arguments(r, workers=True)
    from ldp_audit.limits import add_force_argument

    add_force_argument(r)
    r.set_defaults(func=_reproduce)


def _config(args: argparse.Namespace) -> Any:
    """The DprlConfig of the options given (the others: its defaults); validated."""
    from ldp_audit.config import given_fields
    from ldp_audit.training.dprl_config import DprlConfig

    kw = given_fields(args)
    if args.state_box is not None:
        from ldp_audit.training.obs_noise import CARTPOLE_BOX

        kw["state_box"] = CARTPOLE_BOX if args.state_box == "cartpole" else args.state_box
    return DprlConfig(**kw)


def _train(args: argparse.Namespace) -> int:
    from ldp_audit.rundir import json_number, to_jsonable

    mode = run_mode(args)
    out = args.out if args.out is not None else timestamped_dir("runs/dprl")
    check_out_for_mode(out, mode)  # before any work
    cfg = _config(args)  # validated: errors name the parameter, before any episode
    from ldp_audit.training.sizes import check_sizes

    check_sizes("dprl", cfg, force=args.force, cli=True)  # absurd sizes: before any allocation
    from ldp_audit.training.device import resolve_device

    resolve_device(cfg.device, "--device")  # cuda without CUDA: exit 2 before any work
    from ldp_audit.training.dprl import train

    t0 = time.perf_counter()
    res = train(
        cfg,
        seed=args.seed,
        run_dir=out,
        progress=show_progress(args),
        run_mode=mode,
        force=args.force,
    )
    doc = {
        "run_dir": str(out),
        "algo": cfg.algo,
        "privacy": res.privacy,
        "episodes": len(res.returns),
        "updates": res.updates,
        "last25_mean_return": float(sum(res.returns[-25:]) / max(1, len(res.returns[-25:]))),
        "convergence_episode": json_number(res.convergence_episode),
        "stopped": res.stopped,
        "seconds": time.perf_counter() - t0,
    }
    if args.json:
        print(json.dumps(to_jsonable(doc), indent=1, allow_nan=False))
    else:
        conv = res.convergence_episode
        print(f"run directory: {out}")
        print(
            f"{cfg.algo} / {cfg.privacy}: {len(res.returns)} episodes, {res.updates} private "
            f"updates, mean return of the last 25 = {doc['last25_mean_return']:.1f}, "
            f"solved at episode {conv:g}" if math.isfinite(conv) else
            f"{cfg.algo} / {cfg.privacy}: {len(res.returns)} episodes, {res.updates} private "
            f"updates, mean return of the last 25 = {doc['last25_mean_return']:.1f}, not solved"
        )  # fmt: skip
        print(f"privacy: {res.privacy.get('words')}")
        if res.stopped:
            print(f"stopped: {res.stopped}")
    return 0


def _reproduce(args: argparse.Namespace) -> int:
    from ldp_audit.backends import backend_options
    from ldp_audit.cli._types import check_report_out

    where = backend_options(args)  # --backend/--address/--workers: usage errors before work
    out = args.out if args.out is not None else timestamped_dir("runs/reproduce-dprl")
    check_report_out(out, overwrite=args.overwrite)  # before the experiment
    from ldp_audit.training.dprl_reproduce import ReproduceSettings, reproduce

    settings = ReproduceSettings(
        seeds=args.seeds,
        episodes=args.episodes,
        total_steps=args.total_steps,
        audit_canaries=args.audit_canaries,
        seed=args.seed,
        dpsgd_noise=tuple(args.noise),
        obs_noise=tuple(args.obs_noise),
        clip_only=args.clip_only,
        dqn_preset=args.dqn_preset,
        eval_episodes=args.eval_episodes,
    )
    from ldp_audit.limits import check_resources, forcing
    from ldp_audit.training.sizes import dprl_reproduce_estimates

    workers = args.workers or 1
    check_resources(dprl_reproduce_estimates(settings, workers=workers), force=args.force, cli=True)
    with forcing(args.force):  # --force reaches the runs (and the worker processes)
        res = reproduce(settings, out=out, progress=show_progress(args), argv=sys.argv[1:],
                        cache=args.cache, **where)  # fmt: skip
    if args.json:
        from ldp_audit.rundir import to_jsonable

        print(json.dumps(to_jsonable(res), indent=1, allow_nan=False))
    else:
        print(f"report written to {out}")
    return 0
