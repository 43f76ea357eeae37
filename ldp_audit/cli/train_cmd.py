"""``ldp-audit train pgc-a3c`` and ``ldp-audit reproduce pgc-a3c``.

``train`` runs K seeded PGC-A3C trials at one setting (optionally writing a run directory, see
docs/interfaces.md) and prints the paper's metrics; ``reproduce`` runs the whole grid of Tables
1-3 (epsilon in {1, 2, 5, 10, inf} x {Laplace, PRS}) and writes ``reports/pgc-a3c/``.
Progress bars go to stderr; ``--json`` prints JSON on stdout.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import Any

import numpy as np

from ldp_audit.cli.types import (
    add_backend_arguments,
    add_run_mode_arguments,
    check_out_for_mode,
    check_report_out,
    check_workers,
    int_at_least,
    int_in_range,
    run_mode,
    show_progress,
    timestamped_dir,
)
from ldp_audit.errors import InvalidParameterError
from ldp_audit.parse import epsilon_or_inf

_MECHANISMS = ("laplace", "prs", "none")


_epsilon = epsilon_or_inf
_positive_int = int_at_least("value", 1)
#: each trial is a separate training run with its own per-trial arrays
_trials = int_in_range("--trials", 1, 100_000, "each trial is a full training run")
_rounds = int_in_range("--rounds", 1, 10_000_000, "at most one submission per round")
_seed = int_at_least("seed", 0)
# per-trial arrays are preallocated: 10 million submissions is ~111 x the paper's horizon
_max_submissions = int_in_range(
    "--max-submissions", 1, 10_000_000, "per-trial arrays are held in memory"
)


#: the fields of PgcA3cConfig whose options are generated (ldp_audit.config) in ``reproduce
#: pgc-a3c`` (the readings of issue 20; defaults are the paper as printed) and ``train pgc-a3c``
_REPRO_GENERATED = ("acting", "clip_kind", "aggregator", "aggregator_lr", "target")
_TRAIN_GENERATED = ("stop_at_target", *_REPRO_GENERATED)
#: the learning constants, options of ``train pgc-a3c`` only (given ones reach the config, the
#: Gymnasium trainer's too: GymPgcConfig has the same fields, checked by the same code)
_TRAIN_LEARNING = ("eta", "gamma", "lam", "beta", "alpha_start", "alpha_decay")
#: the release's and the metrics' settings, options of ``train pgc-a3c`` for the CartPole
#: engine (refused with another --env: GymPgcConfig has no reduced_dim, window, target_score,
#: and its path no step-scale check of clip)
_TRAIN_ENGINE = ("clip", "buffer_size", "reduced_dim", "window", "target_score")


def _plain_dests(p: argparse.ArgumentParser, names: list[str]) -> None:
    """Let the options generated for ``names`` write ``args.<field>`` with the config's default
    (not ldp_audit.config's "not given"), as the hand-written options did: the code below reads
    them, and a report's ``reproduce_command`` is parsed back (tests/test_reproduce.py)."""
    import dataclasses

    from ldp_audit.training.pgc_a3c.config import PgcA3cConfig

    defaults = {f.name: f.default for f in dataclasses.fields(PgcA3cConfig)}
    for action in p._actions:
        name = action.dest.removeprefix("cfg__")
        if action.dest.startswith("cfg__") and name in names:
            action.dest = name
            action.default = None if action.required else defaults[name]  # required: none


def _warn_coordinate(clip_kind: str, mechanism: str, eps_per_report: float | None) -> None:
    """The CLI's stderr line for the coordinate-clipping ablation (the library warns too)."""
    if clip_kind == "coordinate" and mechanism in ("laplace", "all"):
        what = (
            f"{112 * eps_per_report:g}-LDP, not {eps_per_report:g}-LDP"
            if eps_per_report is not None
            else "112 x epsilon-LDP, not epsilon-LDP"
        )
        print(
            f"WARNING: --clip-kind coordinate: each Laplace report is {what} (112 coordinates "
            "clipped to +-C/2 each); the ledger is charged the true epsilon",
            file=sys.stderr,
        )


def register(subparsers: Any) -> None:
    """Add the ``train`` and ``reproduce`` subcommands."""
    train = subparsers.add_parser(
        "train", help="train a system (local DP: pgc-a3c, fedrl, frd; central DP-SGD: dprl)"
    )
    tsub = train.add_subparsers(dest="algorithm", metavar="ALGORITHM")
    tsub.required = True
    rep = subparsers.add_parser("reproduce", help="reproduce a paper's tables and figures")
    rsub = rep.add_subparsers(dest="target", metavar="TARGET")
    rsub.required = True
    # every registered system (ldp_audit.systems): its own CLI hook, or the generic one
    from ldp_audit.cli.system_cmd import register_systems

    register_systems(tsub, rsub)
    _register_check(rsub)


def _register_check(rsub: Any) -> None:
    """``reproduce check RERUN COMMITTED``: a rerun against a committed report's intervals."""
    c = rsub.add_parser(
        "check",
        help="compare a rerun of a reproduction with a committed report, cell by cell, against "
        "the committed 95%% intervals (exit 1 when a cell differs)",
    )
    c.add_argument("rerun", help="the rerun's report folder (or its results.json)")
    c.add_argument("committed", help="the committed report folder, e.g. reports/fedrl")
    c.add_argument(
        "--all",
        action="store_true",
        help="list every cell (default: only the cells not inside the committed interval)",
    )
    c.add_argument("--json", action="store_true", help="print the check as JSON (default: text)")
    c.add_argument(
        "--any-scale",
        action="store_true",
        help="compare even when the rerun's horizon / training steps differ (no verdict then)",
    )
    c.set_defaults(func=_reproduce_check)


def _reproduce_check(args: argparse.Namespace) -> int:
    import json

    from ldp_audit.training.reproduction_check import check_folders, format_check

    try:
        result = check_folders(args.rerun, args.committed, any_scale=args.any_scale)
    except (OSError, json.JSONDecodeError) as exc:
        raise InvalidParameterError(f"reproduce check: {exc}") from None
    print(json.dumps(result, indent=1) if args.json else format_check(result, all_cells=args.all))
    return 0 if result["consistent"] else 1


def register_pgc(tsub: Any, rsub: Any) -> None:
    """``train pgc-a3c`` and ``reproduce pgc-a3c``: the pgc-a3c system's CLI hook."""
    p = tsub.add_parser(
        "pgc-a3c",
        help="PGC-A3C (Ono & Takahashi 2020) on CartPole with private gravity",
        description="Run K seeded PGC-A3C trials at one setting and report FST (eq. 26), "
        "success ratio (eq. 27) and the privacy spent per agent.",
    )
    p.add_argument(
        "--epsilon",
        type=_epsilon,
        default=None,
        help="total epsilon per agent (required for laplace/prs; with --mechanism none omit it "
        "or give inf)",
    )
    p.add_argument("--trials", type=_trials, default=1, help="K independent runs")
    p.add_argument("--seed", type=_seed, default=0)
    p.add_argument("--rounds", type=_rounds, default=1, help="T submissions per agent at epsilon/T")
    p.add_argument(
        "--max-submissions", type=_max_submissions, default=90_000, help="submissions per trial"
    )
    from ldp_audit.cli.gym_cmd import add_gym_arguments  # --env, --private-param (issue 27)

    add_gym_arguments(p)
    p.add_argument(
        "--out",
        default=None,
        metavar="RUN_DIR",
        help="write a run directory here (a new or empty folder; see --overwrite, --resume; "
        "default: a new runs/pgc-a3c-<timestamp>, as the other trainers)",
    )
    add_run_mode_arguments(p)
    p.add_argument("--json", action="store_true", help="print the metrics as JSON on stdout")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    from ldp_audit.limits import add_force_argument  # size limits (docs/cli.md)

    add_force_argument(p)
    # --mechanism (required here: bounds(required=True)), --acting, --stop-at-target,
    # --clip-kind, --aggregator, --aggregator-lr, --target: generated from PgcA3cConfig
    # (ldp_audit.config; help, default, choices and bounds written once, in the config).
    # --epsilon (no command-line default: required with laplace/prs, omitted with none),
    # --trials (1 here, 20 in the config, and capped here) and --rounds / --max-submissions
    # (capped here, with the reason, for memory: the config has no cap) stay hand-written.
    from ldp_audit.config import add_arguments
    from ldp_audit.training.pgc_a3c.config import PgcA3cConfig

    added = add_arguments(
        p,
        PgcA3cConfig,
        skip=[f for f in PgcA3cConfig.__dataclass_fields__ if f not in _TRAIN_GENERATED],
        group_title="the run's config (PgcA3cConfig; generated)",
    )
    # --mechanism: required here (bounds(required=True)); its own group, help from the config
    added += add_arguments(
        p,
        PgcA3cConfig,
        skip=[f for f in PgcA3cConfig.__dataclass_fields__ if f != "mechanism"],
        group_title="the mechanism (PgcA3cConfig; generated; required)",
    )
    _plain_dests(p, added)
    # --eta, --gamma, --lam, --beta, --alpha-start, --alpha-decay: generated with their bounds
    # (each justified in its field's docstring); only the ones given reach the config
    add_arguments(
        p,
        PgcA3cConfig,
        skip=[f for f in PgcA3cConfig.__dataclass_fields__ if f not in _TRAIN_LEARNING],
        group_title="the learning constants (PgcA3cConfig; generated)",
    )
    # --clip, --buffer-size, --reduced-dim, --window, --target-score (none: the paper's
    # per-mechanism default where the field takes None). budget has no option: a run that hits
    # it fails mid-run; a ledger's budget is the budget command's (ldp-audit budget)
    add_arguments(
        p,
        PgcA3cConfig,
        skip=[f for f in PgcA3cConfig.__dataclass_fields__ if f not in _TRAIN_ENGINE],
        group_title="the release and the metrics (PgcA3cConfig; generated; CartPole engine)",
    )
    p.set_defaults(func=_train_pgc)

    r = rsub.add_parser(
        "pgc-a3c",
        help="Tables 1-3 and Figures 2-3 of Ono & Takahashi (2020)",
        description="Run epsilon in {1,2,5,10,inf} x {laplace, prs}, K trials each, and write "
        "results.json, tables.md, figure2.png, figure3.png and README.md.",
    )
    r.add_argument("--trials", type=_trials, default=20)
    r.add_argument(
        "--out",
        default=None,
        help="report folder (default: a new runs/reproduce-pgc-a3c-<timestamp>; the committed "
        "reports/pgc-a3c is rewritten only when named here with --overwrite)",
    )
    r.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the generated files of an earlier report in --out (hand-written notes.md "
        "and scripts there are kept)",
    )
    r.add_argument(
        "--max-submissions", type=_max_submissions, default=90_000, help="submissions per trial"
    )
    r.add_argument("--seed", type=_seed, default=0)
    r.add_argument(
        "--figure2-trials",
        type=_trials,
        default=None,
        help="trials per extra Figure 2 setting (default: --trials)",
    )
    r.add_argument(
        "--figure2-submissions",
        type=_max_submissions,
        default=None,
        help="submissions per extra Figure 2 run (default: --max-submissions)",
    )
    r.add_argument("--no-figure2", action="store_true", help="skip the Figure 2 extra runs")
    r.add_argument(
        "--stop-at-target",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="stop grid trials once FST is known, Figure 2 then uses separate full runs "
        "(default: on; --no-stop-at-target runs every grid trial to --max-submissions)",
    )
    # --acting and the readings (--clip-kind, --aggregator, --aggregator-lr, --target): generated
    # from PgcA3cConfig; --stop-at-target is hand-written above (on by default here)
    repro_added = add_arguments(
        r,
        PgcA3cConfig,
        skip=[f for f in PgcA3cConfig.__dataclass_fields__ if f not in _REPRO_GENERATED],
        group_title="the reading (PgcA3cConfig; generated)",
    )
    r.add_argument(
        "--engine",
        choices=("fused", "lockstep"),
        default="fused",
        help="training engine: the compiled block kernel (fused) or one Python lock-step per "
        "step; bit for bit the same results, fused is faster",
    )
    r.add_argument(
        "--readings",
        action="store_true",
        help="instead of one grid: every plausible reading of the paper (printed, coordinate "
        "clipping, Adam; greedy and sampled acting) side by side with the paper, with the "
        "auditor's lower bound on each reading's per-report epsilon (reports/pgc-a3c-readings)",
    )
    r.add_argument(
        "--audit-samples",
        type=int_at_least("--audit-samples", 1000),
        default=200_000,
        help="with --readings: auditor samples per input of each pair",
    )
    r.add_argument(
        "--workers",
        type=_positive_int,
        default=None,
        help="processes (--backend local) or Ray CPUs started here (--backend ray) to spread "
        "the grid over (default: the CPU count; results do not depend on it)",
    )
    add_backend_arguments(r)
    r.add_argument("--json", action="store_true", help="print results.json on stdout")
    r.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    add_force_argument(r)
    _plain_dests(r, repro_added)
    r.set_defaults(func=_reproduce_pgc)


def iter_system_cli_modules() -> list[Any]:
    """The registered systems' own CLI modules, imported (they must stay light)."""
    import importlib

    from ldp_audit.cli.system_cmd import system_cli_modules

    return [importlib.import_module(m) for m in dict.fromkeys(system_cli_modules())]


def _cartpole_engine(args: argparse.Namespace) -> bool:
    """``--env CartPole-v1 --private-param gravity=...`` (no --env-module) runs on the paper's
    CartPole engine (ldp_audit.cli.gym_cmd.train_gym); a missing --private-param is refused
    there, so it counts as the engine here."""
    pp = args.private_param
    return pp is None or (
        args.env == "CartPole-v1" and pp[0] == "gravity" and args.env_module is None
    )


def _train_pgc(args: argparse.Namespace) -> int:
    if args.mechanism == "none":
        if args.epsilon is not None and not math.isinf(args.epsilon):
            raise InvalidParameterError(
                f"--epsilon must be omitted or inf with --mechanism none, got {args.epsilon!r}"
            )
        eps_kw: dict[str, Any] = {}
    else:
        if args.epsilon is None:
            raise InvalidParameterError(
                f"--epsilon is required with --mechanism {args.mechanism}, got none"
            )
        eps_kw = {"epsilon": args.epsilon}
    from ldp_audit.config import given_fields, option_name

    given = given_fields(args)  # the generated options given (--eta, --clip, ...)
    engine_only = [option_name(k) for k in _TRAIN_ENGINE if k in given]
    if engine_only and getattr(args, "env", None) is not None and not _cartpole_engine(args):
        raise InvalidParameterError(
            f"{', '.join(engine_only)}: options of the CartPole engine; with --env {args.env} "
            "they do not apply (docs/gymnasium.md)"
        )
    eps_kw.update(given)
    if args.out is None and run_mode(args) == "new":  # as train dprl/fedrl/frd: a run is kept
        args.out = timestamped_dir("runs/pgc-a3c")
    if getattr(args, "env", None) is not None:  # any Gymnasium env (ldp_audit.cli.gym_cmd)
        from ldp_audit.cli.gym_cmd import train_gym

        code = train_gym(args, eps_kw)
        if code is not None:
            return code
        eps_kw["gravities"] = args.private_param[1]  # CartPole-v1's gravity: the paper's engine
    else:
        from ldp_audit.cli.gym_cmd import refuse_without_env

        refuse_without_env(args)

    # after validation: the engine imports torch
    from ldp_audit.training.pgc_a3c import PgcA3cConfig, metrics, train

    if args.clip_kind == "coordinate" and args.mechanism == "prs":
        raise InvalidParameterError(
            "--clip-kind coordinate applies to --mechanism laplace or none, got prs"
        )
    cfg = PgcA3cConfig(
        mechanism=args.mechanism,
        trials=args.trials,
        max_submissions=args.max_submissions,
        rounds=args.rounds,
        acting=args.acting,
        stop_at_target=args.stop_at_target,
        clip_kind=args.clip_kind,
        aggregator=args.aggregator,
        aggregator_lr=args.aggregator_lr,
        target=args.target,
        **eps_kw,
    )
    _check_step_scale(cfg)
    from ldp_audit.limits import check_resources
    from ldp_audit.training.sizes import pgc_estimates

    keep = [args.out is not None]  # the transcript is kept with a run directory
    check_resources(pgc_estimates(cfg, keep, cli=True), force=args.force, cli=True)
    t0 = time.perf_counter()
    mode = run_mode(args)
    check_out_for_mode(args.out, mode)
    _warn_coordinate(
        args.clip_kind,
        args.mechanism,
        cfg.epsilon_per_submission if args.mechanism == "laplace" else None,
    )
    import warnings

    from ldp_audit.training.pgc_a3c import PrivacyClaimWarning

    with warnings.catch_warnings():  # the CLI printed its own line above
        warnings.simplefilter("ignore", PrivacyClaimWarning)
        res = train(
            cfg,
            seed=args.seed,
            run_dir=args.out,
            progress=show_progress(args),
            run_mode=mode,
            force=args.force,
        )
    secs = time.perf_counter() - t0
    zeta = np.asarray(res.zeta, dtype=np.float64)
    summary = metrics.summarize(zeta, rng=np.random.default_rng(args.seed))
    out = {
        "algorithm": "pgc-a3c",
        "mechanism": args.mechanism,
        "epsilon": None if args.mechanism == "none" else args.epsilon,
        "rounds": args.rounds,
        "clip_kind": args.clip_kind,
        "aggregator": args.aggregator,
        "aggregator_lr": cfg.effective_aggregator_lr,
        "target": args.target,
        "trials": args.trials,
        "max_submissions": args.max_submissions,
        "seed": args.seed,
        "seconds": secs,
        "run_dir": args.out,
        "privacy": _jsonable(getattr(res, "privacy", None)),
        "final_mean_mu": _final_mean_mu(zeta),
        **summary,
    }
    if args.json:
        from ldp_audit.rundir import to_jsonable

        # the project's JSON convention: "never" is "inf", not null (metrics.summarize writes
        # None for an FST that was never reached)
        doc = dict(out)
        for key in ("fst", "median_fst", "median_fst_ci"):
            v = doc.get(key)
            if isinstance(v, list):
                doc[key] = ["inf" if x is None else x for x in v]
            elif key in doc and v is None:
                doc[key] = "inf"
        print(json.dumps(to_jsonable(doc), indent=1, allow_nan=False))
        return 0
    eps = "inf" if out["epsilon"] is None else f"{out['epsilon']:g}"
    lo, hi = summary["success_ratio_ci"]
    med = summary["median_fst"]
    mlo, mhi = summary["median_fst_ci"]
    print(
        f"pgc-a3c mechanism={args.mechanism} epsilon={eps} rounds={args.rounds} "
        f"trials={args.trials} max_submissions={args.max_submissions} seed={args.seed} "
        f"({secs:.1f} s)"
    )
    print(f"  FST per trial (eq. 26): {_fmt_list(summary['fst'])}")
    print(f"  median FST: {_fmt(med)}  (95% bootstrap CI {_fmt(mlo)} .. {_fmt(mhi)})")
    print(
        f"  success ratio at {args.max_submissions}: {summary['success_ratio']:.2f}  "
        f"(95% Wilson CI {lo:.2f} .. {hi:.2f})"
    )
    if out["final_mean_mu"] is not None:
        print(f"  mean of the last defined mu_n (eq. 25) over trials: {out['final_mean_mu']:.1f}")
    if args.out:
        print(f"  run directory: {args.out}")
    return 0


#: largest total movement of theta a run may allow (measured: 1e142 for --mechanism none gave NaN
#: gradients after 20 submissions; 1e100 trained for 20 and 300 submissions with every mechanism)
_MAX_THETA_MOVE = 1e100


def _check_step_scale(cfg: Any) -> None:
    """Refuse, before any work, settings whose noisy steps can overflow the parameters: theta
    moves by at most aggregator_lr x (report scale) per submission, the report scale of a
    private mechanism being about C / (epsilon per submission). --epsilon 1e-300 or
    --aggregator-lr 1e300 otherwise ran and then failed on a NaN gradient ("x must be finite")."""
    if cfg.mechanism == "none":
        scale = cfg.effective_clip
    else:
        scale = cfg.effective_clip * max(1.0, 2.0 / cfg.epsilon_per_submission)
    move = cfg.effective_aggregator_lr * scale * cfg.max_submissions
    if not move <= _MAX_THETA_MOVE:
        raise InvalidParameterError(
            f"--epsilon / --clip / --aggregator-lr: the parameters could move by {move:.3g} "
            f"(aggregator step {cfg.effective_aggregator_lr:g} x report scale {scale:.3g} x "
            f"{cfg.max_submissions} submissions), beyond the {_MAX_THETA_MOVE:g} accepted "
            "(training turns to NaN well before doubles overflow); raise --epsilon or lower "
            "--clip, --aggregator-lr or --eta (the SGD step when --aggregator-lr is none)"
        )


def _reproduce_pgc(args: argparse.Namespace) -> int:
    if args.readings:
        return _reproduce_readings(args)
    from ldp_audit.training.pgc_a3c.reproduce import ReproduceConfig, run_reproduction
    from ldp_audit.training.pgc_a3c.reproduce_report import write_report

    cfg = ReproduceConfig(
        trials=args.trials,
        max_submissions=args.max_submissions,
        seed=args.seed,
        figure2=not args.no_figure2,
        figure2_trials=args.figure2_trials,
        figure2_submissions=args.figure2_submissions,
        stop_at_target=args.stop_at_target,
        workers=check_workers(args.workers) if args.workers else max(1, os.cpu_count() or 1),
        backend=args.backend,
        address=args.address,
        acting=args.acting,
        clip_kind=args.clip_kind,
        aggregator=args.aggregator,
        aggregator_lr=args.aggregator_lr,
        target=args.target,
        engine=args.engine,
    )
    from ldp_audit.training.pgc_a3c import PgcA3cConfig

    for mech in ("none", "laplace", "prs"):  # the grid's largest steps: epsilon = 1 per report
        _check_step_scale(
            PgcA3cConfig(
                mechanism=mech,
                epsilon=1.0,
                max_submissions=args.max_submissions,
                aggregator=args.aggregator,
                aggregator_lr=args.aggregator_lr,
            )
        )
    from ldp_audit.limits import check_resources, forcing
    from ldp_audit.training.sizes import pgc_reproduce_estimates

    check_resources(pgc_reproduce_estimates(cfg), force=args.force, cli=True)
    out = args.out if args.out is not None else timestamped_dir("runs/reproduce-pgc-a3c")
    check_report_out(out, overwrite=args.overwrite)  # before the grid, not after it
    _warn_coordinate(args.clip_kind, "all", None)
    import warnings

    from ldp_audit.training.pgc_a3c import PrivacyClaimWarning

    with warnings.catch_warnings(), forcing(args.force):  # the CLI printed its own line above
        warnings.simplefilter("ignore", PrivacyClaimWarning)
        results = run_reproduction(cfg, progress=show_progress(args))
    paths = write_report(results, out, overwrite=args.overwrite)
    if args.json:
        print(json.dumps(results, indent=1, allow_nan=False))
    else:
        print(f"reproduce pgc-a3c: {results['seconds_total']:.0f} s; wrote")
        for p in paths:
            print(f"  {p}")
    return 0


def _reproduce_readings(args: argparse.Namespace) -> int:
    """``reproduce pgc-a3c --readings``: every reading side by side, audited."""
    from ldp_audit.training.pgc_a3c.readings import (
        ReadingsConfig,
        run_readings,
        write_readings_report,
    )

    refused = [
        name
        for name, default in (
            ("clip_kind", "l1"),
            ("aggregator", "sgd"),
            ("aggregator_lr", None),
            ("target", "engine"),
            ("acting", "argmax"),
            ("figure2_trials", None),
            ("figure2_submissions", None),
            ("no_figure2", False),
            ("stop_at_target", True),
        )
        if getattr(args, name) != default
    ]
    if refused:
        opts = ", ".join("--" + n.replace("_", "-") for n in refused)
        raise InvalidParameterError(
            f"--readings runs every reading itself and takes --trials, --max-submissions, "
            f"--seed, --audit-samples, --workers, --backend, --address, --out, --overwrite, "
            f"--json, --no-progress; got {opts}"
        )
    cfg = ReadingsConfig(
        trials=args.trials,
        max_submissions=args.max_submissions,
        seed=args.seed,
        audit_samples=args.audit_samples,
        workers=check_workers(args.workers) if args.workers else max(1, os.cpu_count() or 1),
        backend=args.backend,
        address=args.address,
    )
    out = args.out if args.out is not None else timestamped_dir("runs/reproduce-pgc-a3c-readings")
    check_report_out(out, overwrite=args.overwrite)  # before the runs, not after them
    print(
        "WARNING: the readings include coordinate clipping, whose Laplace reports are "
        "112 x epsilon-LDP (charged and reported so, and audited beside the claim)",
        file=sys.stderr,
    )
    results = run_readings(cfg, progress=show_progress(args))
    paths = write_readings_report(results, out, overwrite=args.overwrite)
    if args.json:
        print(json.dumps(results, indent=1, allow_nan=False))
    else:
        print(f"reproduce pgc-a3c --readings: {results['seconds_total']:.0f} s; wrote")
        for p in paths:
            print(f"  {p}")
    return 0


def _final_mean_mu(zeta: np.ndarray) -> float | None:
    """Mean over trials of each trial's last defined mu_n (eq. 25)."""
    from ldp_audit.training.pgc_a3c import metrics

    mu = metrics.moving_average(zeta)
    last = []
    for row in mu:
        ok = np.flatnonzero(~np.isnan(row))
        if ok.size:
            last.append(row[ok[-1]])
    return float(np.mean(last)) if last else None


def _fmt(v: float | str | None) -> str:
    return "never" if v is None or v == "inf" else f"{v:g}"


def _fmt_list(vs: list[float | None]) -> str:
    return ", ".join(_fmt(v) for v in vs)


def _jsonable(obj: Any) -> Any:
    """Best-effort conversion of the engine's privacy summary to strict JSON."""
    if obj is None:
        return None
    if hasattr(obj, "to_dict"):
        obj = obj.to_dict()
    elif hasattr(obj, "__dataclass_fields__"):
        from dataclasses import asdict

        obj = asdict(obj)
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    if isinstance(obj, (np.floating, float)):
        f = float(obj)
        return f if math.isfinite(f) else ("inf" if f > 0 else str(f))
    if isinstance(obj, (np.integer, int, bool, str)):
        return obj.item() if isinstance(obj, np.generic) else obj
    return str(obj)


if __name__ == "__main__":  # pragma: no cover
    from ldp_audit.cli import main

    sys.exit(main())
