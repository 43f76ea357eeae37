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

from ldp_audit.cli.types import (
    DefaultsHelpFormatter,
    add_run_mode_arguments,
    check_out_for_mode,
    int_at_least,
    run_mode,
    show_progress,
    timestamped_dir,
)


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
    # every field of DprlConfig is an option (--algo, --privacy, --noise-multiplier, --clip,
    # ..., --state-box, --store-updates): its default, bounds and help are written once, in the
    # config; there too: --algo and --privacy are required here (bounds(required=True): a
    # Python caller gets the config's defaults) and --state-box's spelling (cartpole or
    # lo,hi;...: bounds(parse=read_state_box, whole=True))
    from ldp_audit.config import add_arguments
    from ldp_audit.training.dprl.config import DprlConfig

    add_arguments(p, DprlConfig, group_title="the run's config (DprlConfig; generated)")
    p.set_defaults(func=_train)

    r = reproduce_subparsers.add_parser(
        "dprl",
        help="Figures 8-9 and 12-13 of the Doulazmi & Odonnat slides (reward/convergence vs noise)",
        description="Reward and convergence time vs noise level for REINFORCE and DQN under "
        "DP-SGD and observation noise, several seeds, with 95 percent bootstrap bands and the "
        "epsilon each setting gets; writes results.json, figures and README.md.",
        formatter_class=fmt,
    )
    r.add_argument("--cache", default=None,
                   help="folder keeping every finished run; a rerun with it resumes")  # fmt: skip
    r.add_argument(
        "--out",
        default=None,
        help="report folder (default: a new runs/reproduce-dprl-<timestamp>; reports/dprl is "
        "rewritten only when named here)",
    )
    r.add_argument("--overwrite", action="store_true", help="replace an earlier report in --out")
    r.add_argument("--json", action="store_true", help="print results.json on stdout")
    r.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    from ldp_audit.cli.types import add_backend_arguments

    add_backend_arguments(r, workers=True)
    from ldp_audit.limits import add_force_argument

    add_force_argument(r)
    # every field of ReproduceSettings is an option (--seeds, --episodes, --noise, --obs-noise,
    # ..., --audit-canaries): its default, bounds and help are written once, in the config; there
    # too: dpsgd_noise is spelled --noise (bounds(option=...)) and --audit-canaries defaults to
    # 500 here, the committed report's (bounds(cli_default=500); the Python default is 800)
    from ldp_audit.training.dprl.config import ReproduceSettings

    add_arguments(
        r, ReproduceSettings, group_title="the reproduction's config (ReproduceSettings; generated)"
    )
    r.set_defaults(func=_reproduce)


def _config(args: argparse.Namespace) -> Any:
    """The DprlConfig of the options given (the others: its defaults); validated."""
    from ldp_audit.config import from_args
    from ldp_audit.training.dprl.config import DprlConfig

    return from_args(DprlConfig, args)


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
    from ldp_audit.training.dprl.trainer import train

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
    from ldp_audit.cli.types import check_report_out

    where = backend_options(args)  # --backend/--address/--workers: usage errors before work
    out = args.out if args.out is not None else timestamped_dir("runs/reproduce-dprl")
    check_report_out(out, overwrite=args.overwrite)  # before the experiment
    from ldp_audit.config import from_args
    from ldp_audit.training.dprl.config import ReproduceSettings
    from ldp_audit.training.dprl.reproduce import reproduce

    settings = from_args(ReproduceSettings, args)  # the options given; the others: its defaults
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
