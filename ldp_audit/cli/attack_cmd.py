"""``ldp-audit attack dynamics|membership|sweep``: attacks scored against the guarantee.

``dynamics`` attacks agents' gravities from their noisy reports: either a run directory written by
a trainer (``--run-dir``), or a fresh population of simulated agents that each submit ``T``
reports at one broadcast theta (the initial PGC-A3C theta, a theta after ``--train-submissions``
non-private PGC-A3C submissions, or with ``--malicious`` the crafted theta of an active
aggregator). ``membership`` runs a one-run canary audit (Steinke, Nasr & Jagielski 2023).
``sweep`` runs the eps x mechanism x reports sweep of ``ldp_audit.attacks.sweep``.

``--epsilon`` is the epsilon of ONE report; ``T`` reports compose to ``T * epsilon`` (the ceiling
uses that). Exit 0: no violation (which proves nothing); 1: the attack beat the guarantee beyond
its confidence interval; 2: usage error.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit.attacks.sweep import REPORTS, THETAS, broadcast_theta, run_from_args
from ldp_audit.cli.evidence import evidence_args, run_dir_only
from ldp_audit.cli.system_cmd import attack_run_dir, register_attacks
from ldp_audit.cli.types import (
    add_backend_arguments,
    add_flags,
    add_int,
    add_real,
    check_not_inside_run,
    check_workers,
    confidence,
    show_progress,
)
from ldp_audit.errors import InvalidParameterError, RunDirectoryError
from ldp_audit.limits import add_force_argument, check_resources
from ldp_audit.mechanisms import Laplace, NoPrivacy, ProjectedRandomSign
from ldp_audit.parse import epsilon_or_inf, parse_real, real_in
from ldp_audit.rundir import check_new_dir, check_new_file, to_jsonable
from ldp_audit.rundir.files import write_json_file
from ldp_audit.rundir.paths import check_parent_writable, is_run_dir
from ldp_audit.training.sizes import attack_estimates

_MAX_COUNT = 1_000_000
_MIN_CANARIES = 20
#: e^(T eps) overflows a double above ~709: a composed claim that large guarantees nothing
_MAX_COMPOSED = 700.0


def _count(p: Any, flag: str, minimum: int = 1, maximum: int = _MAX_COUNT, **kw: Any) -> None:
    """A count option whose arrays (reports, shadow gradients) are held in memory."""
    add_int(p, flag, minimum, maximum, "the attack holds arrays of this size in memory", **kw)


def _common(p: argparse.ArgumentParser, shadow: Any = 1000, shadow_help: str = "") -> None:
    p.add_argument("--mechanism", choices=("laplace", "prs", "none"), default="laplace",
                   help="the mechanism every simulated agent reports through")  # fmt: skip
    p.add_argument(
        "--epsilon",
        type=epsilon_or_inf,
        help="epsilon of ONE report (T reports compose to T * epsilon; default 1); not with 'none'",
    )
    add_real(p, "--clip", help="C (default 0.01 Laplace, 1 PRS); not with 'none'")
    _count(p, "--reports-per-agent", 1, 10_000, default=1, dest="reports", metavar="T",
           help="reports each agent releases (T)")  # fmt: skip
    add_flags(p, malicious="broadcast a crafted theta")
    _population(p, "agents attacked", shadow, shadow_help, 1, 0)
    p.add_argument("--confidence", type=confidence(), default=0.95,
                   help="confidence of the accuracy interval, in (0, 1)")  # fmt: skip
    add_flags(p, json="print the result as JSON on stdout", no_progress="no progress bar on stderr")
    p.add_argument("--out", help="also write the JSON result to this (new) file")
    p.add_argument("--plot", help="write a PNG of the result to this (new) file")
    add_flags(
        p, overwrite="replace an existing --out/--plot file (or the run's attack_*.json artefact)"
    )
    add_force_argument(p)


def _population(
    p: argparse.ArgumentParser, agents: str, shadow: Any, shadow_help: str, least: int, subs: int
) -> None:
    """``--agents``, ``--shadow`` (at least ``least``), ``--train-submissions`` and ``--seed``:
    the attacked population and the honest theta, shared by the attacks and the sweep."""
    _count(p, "--agents", default=300, help=agents)
    _count(
        p, "--shadow", least, default=shadow, help=shadow_help or "shadow episodes per candidate"
    )
    words = "honest theta after this many non-private PGC-A3C submissions (0: initial theta)"
    add_int(p, "--train-submissions", 0, 10_000_000, "held in memory", default=subs, help=words)
    add_int(p, "--seed", 0, default=0, help="the seed every simulation and guess derives from")


def register(subparsers: Any) -> None:
    """Add the ``attack`` subcommand family."""
    attack = subparsers.add_parser(
        "attack", help="dynamics / membership inference, scored against the LDP ceiling"
    )
    sub = attack.add_subparsers(dest="attack", metavar="ATTACK")
    sub.required = True

    d = sub.add_parser(
        "dynamics",
        help="recover each agent's gravity from its noisy gradients (shadow-gradient attack)",
        description="Shadow-gradient dynamics inference; reports accuracy with a Clopper-Pearson "
        "interval, the ceiling the claim allows (e^(T eps)/(e^(T eps)+k-1) at equal secret "
        "shares) and the implied epsilon lower bound.",
    )
    # on a run directory, --shadow defaults to the run system's attack's own
    _common(
        d,
        None,
        "shadow episodes per candidate (default 1000; with --run-dir the default of the run's "
        "system's attack)",
    )
    d.add_argument("--run-dir", help="attack this run directory's transcript")
    _count(d, "--max-groups", help="agents attacked in --run-dir (default 200)")
    d.add_argument(
        "--env-module",
        metavar="MODULE",
        help="with --run-dir of a run on your own Gymnasium env: import this module first (it "
        "registers the env; a run directory never makes the attacker import code by itself)",
    )
    d.add_argument(
        "--simulator",
        metavar="MODULE:FUNCTION",
        help="with --run-dir of an own-loop or Flower run: the public simulator of the agents' "
        "update rule, simulator(thetas, values, rng, alpha) -> (gradients, scores), batched; "
        "alpha is the agents' exploration probability (docs/own-loop.md); found in the current "
        "folder like python -m; imported only because you name it (a run directory never "
        "makes the attacker import code)",
    )
    add_flags(d, continuous="gravity uniform on [9.5, 10.1]; report the MAE of the posterior mean")
    evidence_args(d)
    d.set_defaults(func=_dynamics)
    _simulated(d, "continuous")

    m = sub.add_parser(
        "membership",
        help="one-run canary membership audit (Steinke, Nasr & Jagielski 2023)",
        description="Canary agents (unusual gravity) are included with probability 1/2 in one "
        "run; the attacker scores each canary slot from the transcript. Reports AUC, TPR at FPR "
        "1% / 0.1%, advantage, the ceiling and the one-run epsilon lower bound.",
    )
    _common(m)
    _count(
        m,
        "--canaries",
        _MIN_CANARIES,
        default=200,
        help=f"canary slots, each included with probability 1/2 (at least {_MIN_CANARIES}: with "
        "c canaries all inclusion bits are equal, and nothing can be scored, with probability "
        "2^(1-c))",
    )
    m.add_argument(
        "--canary-gravity",
        type=real_in("--canary-gravity", low=0.0, high=100.0, high_open=False),
        default=12.0,
        help="the canaries' unusual gravity (must differ from the background 9.7/9.8/9.9)",
    )
    m.add_argument(
        "--canary-run-dir",
        help="where the canary training run is written (a new folder; default: a temporary "
        "one, deleted afterwards)",
    )
    m.add_argument(
        "--run-dir",
        help="score an existing run trained with canaries; the result is added to the run as "
        "attack_membership.json, or written to --out FILE (the run left untouched)",
    )
    evidence_args(m)
    m.set_defaults(func=_membership, agents=400, shadow=400)
    _simulated(m, "shadow", "canaries", "canary_gravity", "canary_run_dir")

    s = sub.add_parser(
        "sweep",
        help="eps x {Laplace, PRS} x {1, 5, 20} reports sweep -> reports/attacks/",
    )
    _sweep_arguments(s)
    s.set_defaults(func=_sweep)

    # the registered systems (ldp_audit.systems): their own attack subcommands (attack_cli),
    # then `attack NAME --run-dir RUN` for every other attack a system declares
    register_attacks(sub)


def _mechanism(args: argparse.Namespace) -> Any:
    if args.mechanism == "none":
        eps = None if args.epsilon is None or math.isinf(args.epsilon) else args.epsilon
        for opt, v in (("--epsilon", eps), ("--clip", args.clip)):
            if v is not None:
                raise InvalidParameterError(
                    f"{opt} must be omitted with --mechanism none, got {v!r}"
                )
        return NoPrivacy()
    if args.epsilon is None:
        args.epsilon = 1.0
    if math.isinf(args.epsilon):
        return NoPrivacy()
    cls, clip = (Laplace, 0.01) if args.mechanism == "laplace" else (ProjectedRandomSign, 1.0)
    return cls(epsilon=args.epsilon, clip=args.clip or clip)


def _simulation(args: argparse.Namespace) -> tuple[Any, Any, dict[str, Any], Any]:
    """A simulated attack's mechanism (validated before any work), broadcast theta, its
    description and the attack's generator (the seed's second child; the theta's is the first).
    A finite composed claim T * epsilon so large that e^(T eps) overflows is refused: such a
    claim guarantees nothing (the non-private baseline is --mechanism none)."""
    mech = _mechanism(args)
    eps = float(mech.epsilon)
    if math.isfinite(eps) and eps * args.reports > _MAX_COMPOSED:
        raise InvalidParameterError(
            f"--epsilon x --reports-per-agent must be <= {_MAX_COMPOSED:g} (e^(T eps) overflows "
            f"and such a claim guarantees nothing; use --mechanism none for the non-private "
            f"baseline), got {eps:g} x {args.reports} = {eps * args.reports:g}"
        )
    theta_rng, rng = np.random.default_rng(args.seed).spawn(2)
    if args.malicious and sys.stderr.isatty():
        print("crafting a gravity-revealing theta ...", file=sys.stderr)
    kind = "crafted" if args.malicious else "trained" if args.train_submissions > 0 else "init"
    kw = {"train_submissions": args.train_submissions} if kind == "trained" else {}
    return (mech, *broadcast_theta(kind, theta_rng, **kw), rng)


def _simulated(p: argparse.ArgumentParser, *more: str) -> None:
    """Remember the defaults of the options only a simulated attack reads (the common ones and
    ``more``), so that an attack on a run directory refuses them when changed, not ignores them."""
    dests = ("mechanism", "epsilon", "clip", "reports", "agents", "malicious", "train_submissions")
    flag = {"reports": "--reports-per-agent"}
    p.set_defaults(
        simulated={
            d: (flag.get(d, "--" + d.replace("_", "-")), p.get_default(d)) for d in dests + more
        }
    )


#: options that mean something only with --run-dir (a simulated attack reads no run)
_RUN_DIR_ONLY = ("max_groups", "env_module", "simulator", "allow_unverified", "expect_head",
                 "expect_root")  # fmt: skip


def _check_outputs(args: argparse.Namespace) -> None:
    """Every output path is checked before the attack runs."""
    why = "only with --run-dir (an attack on a run directory); this simulated attack reads no run"
    run_dir_only(args, _RUN_DIR_ONLY, why)
    changed = [f for d, (f, v) in args.simulated.items() if getattr(args, d) != v]
    if args.run_dir is not None and changed:
        raise InvalidParameterError(
            f"{', '.join(changed)} applies only to a simulated attack (without --run-dir): an "
            "attack on a run directory reads the run's own mechanism, agents and reports"
        )

    for path, flag in ((args.out, "--out"), (args.plot, "--plot")):
        if path:
            check_not_inside_run(path, flag)
            check_new_file(path, name=flag, overwrite=args.overwrite)  # its folder probed
    if args.out and args.plot and Path(args.out).resolve() == Path(args.plot).resolve():
        raise InvalidParameterError(f"--out and --plot must differ, both are {args.out!r}")
    if args.plot and Path(args.plot).suffix.lower() not in ("", ".png"):  # not after the work
        raise InvalidParameterError(f"--plot writes a PNG: name a .png file, got {args.plot!r}")
    if args.run_dir is None:  # a simulated attack, before any work
        est = attack_estimates(
            args.agents, args.shadow or 1000, args.reports, args.train_submissions
        )
        check_resources(est, force=args.force, cli=True)


def _emit(args: argparse.Namespace, result: Any, info: dict[str, Any]) -> int:
    """A simulated attack's result (no run read): printed, and written to --out / --plot."""
    d = result.to_dict()
    d["extra"]["theta_info"] = {k: v for k, v in info.items() if k in ("theta", "source", "chosen")}
    doc = json.dumps(to_jsonable(d), indent=1, allow_nan=False)
    if args.out:  # whole, or not at all (a Ctrl-C, a full disk)
        write_json_file(Path(args.out), d, replace=args.overwrite)
    if args.plot:
        _plot(result, args.plot)
    print(doc if args.json else result.summary())
    return 1 if result.violation else 0


def _plot(result: Any, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    labels = ["accuracy" if result.auc is None else "one-run acc.", "ceiling"]
    vals = [result.accuracy, result.ceiling]
    ax.bar(labels, vals, color=["tab:blue", "tab:grey"])
    lo, hi = result.accuracy_ci
    if math.isfinite(lo):
        ax.errorbar(
            [0],
            [result.accuracy],
            yerr=[[result.accuracy - lo], [hi - result.accuracy]],
            color="k",
            capsize=4,
        )
    ax.axhline(result.chance, ls=":", color="k", label="chance")
    ax.set_ylim(0, 1.05)
    ax.set_title(f"{result.attack}: eps={result.epsilon:g} x T={result.reports_per_agent}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)


def _dynamics(args: argparse.Namespace) -> int:
    from ldp_audit.attacks import dynamics_experiment as D

    _check_outputs(args)
    if args.run_dir:
        sim = args.simulator
        if args.env_module is not None:  # named by the user, never by the run directory
            from ldp_audit.training.gym_envs import import_env_module

            import_env_module(args.env_module)
        if sim is not None:  # an own loop's or a Flower app's simulator (issue 27)
            from ldp_audit.systems import call

            sim = call(args.simulator, "--simulator")
        groups = 200 if args.max_groups is None else args.max_groups  # None: refused without
        kw = dict(n_shadow=args.shadow, max_groups=groups, env_module=args.env_module,
                  simulator=sim)  # fmt: skip
        kw = {k: v for k, v in kw.items() if v is not None}  # the attack's own defaults
        # docs/interfaces.md: RUN_DIR/attack_dynamics.json is the run's one named artefact for
        # this attack; with --out the result goes there and the run is left untouched
        plot = functools.partial(_plot, path=args.plot) if args.plot else None
        return attack_run_dir(args, "dynamics", kw, plot=plot)
    if args.shadow is None:
        args.shadow = 1000
    mech, theta, info, attack_rng = _simulation(args)
    kw = dict(theta=theta, n_agents=args.agents, reports_per_agent=args.reports,
              n_shadow=args.shadow, rng=attack_rng, progress=show_progress(args))  # fmt: skip
    if args.continuous:
        res = D.run_continuous(mech, **kw)
    else:
        attack = "dynamics-malicious" if args.malicious else "dynamics"
        res = D.run(mech, **kw, confidence=args.confidence, attack=attack)
    return _emit(args, res, info)


def _membership(args: argparse.Namespace) -> int:
    from ldp_audit.attacks import membership as M

    _check_outputs(args)
    if args.run_dir is not None:  # the canaries planted at training time in a run (read only)
        plot = functools.partial(_plot, path=args.plot) if args.plot else None
        # as dynamics: RUN_DIR/attack_membership.json (report reads it), or --out FILE
        return attack_run_dir(args, "membership", {}, plot=plot)  # e.g. dprl's, opacus'
    if args.canaries > args.agents:
        raise InvalidParameterError(
            f"--canaries must be <= --agents ({args.agents}), got {args.canaries}"
        )
    if args.canary_run_dir is not None:
        check_not_inside_run(args.canary_run_dir, "--canary-run-dir")
        check_new_dir(args.canary_run_dir, name="--canary-run-dir")
    from ldp_audit.attacks.dynamics_shadow import GRAVITIES

    if any(abs(args.canary_gravity - g) < 1e-9 for g in GRAVITIES):
        raise InvalidParameterError(
            f"--canary-gravity must differ from the background gravities {list(GRAVITIES)}, got "
            f"{args.canary_gravity!r}"
        )
    mech, theta, info, run_rng = _simulation(args)
    trainer = M.FixedThetaTrainer(theta=theta, mechanism=mech, reports_per_agent=args.reports)
    scorer = M.TranscriptScorer(canary_gravity=args.canary_gravity, n_shadow=args.shadow)
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(args.canary_run_dir) if args.canary_run_dir else Path(tmp) / "run"
        res = M.run(
            trainer,
            run_dir=run_dir,
            mechanism=mech,
            n_agents=args.agents,
            n_canaries=args.canaries,
            canary_gravity=args.canary_gravity,
            scorer=scorer,
            rng=run_rng,
            confidence=args.confidence,
        )
    return _emit(args, res, info)


def _sweep_thetas(text: str) -> str:
    """argparse type for --thetas: a comma list of init/trained/crafted/linearW0:W1:W2:W3."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    for t in items:
        ok = t in THETAS
        if not ok and t.startswith("linear"):
            try:  # four finite weights, read strictly (no nan, inf, 1_000, non-ASCII digits)
                ok = len([parse_real(v, "--thetas") for v in t[len("linear") :].split(":")]) == 4
            except argparse.ArgumentTypeError:
                ok = False
        if not ok:
            raise argparse.ArgumentTypeError(
                f"--thetas items must be one of {', '.join(THETAS)} or linearW0:W1:W2:W3, got {t!r}"
            )
    if not items:
        raise argparse.ArgumentTypeError(f"--thetas must name at least one theta, got {text!r}")
    if len(set(items)) != len(items):
        raise argparse.ArgumentTypeError(f"--thetas must not repeat a theta, got {text!r}")
    return ",".join(items)


def _sweep_arguments(s: argparse.ArgumentParser) -> None:
    """The options of ``attack sweep`` (:func:`ldp_audit.attacks.sweep.sweep`'s parameters)."""
    # the classifier needs more samples than classes: --shadow >= 2
    _population(s, "agents attacked per cell", 1000, "", 2, 3000)
    s.add_argument(
        "--thetas",
        type=_sweep_thetas,
        default=",".join(THETAS),
        help="comma list of " + "/".join(THETAS) + "/linearW0:W1:W2:W3 (controller weights)",
    )
    _count(s, "--probe", default=1000, help="craft_theta probe episodes per candidate")
    s.add_argument(
        "--out",
        help="output directory (default: a new runs/attack-sweep-<timestamp>; the committed "
        "reports/attacks is rewritten only when named here with --overwrite)",
    )
    add_flags(
        s,
        overwrite="regenerate an earlier sweep in --out (hand-written files there are kept)",
        no_progress="no progress bar on stderr",
    )
    add_backend_arguments(s, workers=True)
    add_force_argument(s)


def _sweep(args: argparse.Namespace) -> int:
    if args.workers is not None:
        check_workers(args.workers)  # before any work: far above the cores is refused
    if args.out is not None:
        check_not_inside_run(args.out, "--out")
        if is_run_dir(args.out):  # even with --overwrite: a sweep is no analysis of that run
            raise RunDirectoryError(
                f"--out {args.out!r} is a run directory: a run is evidence, and a sweep's "
                f"results are not an analysis of it; choose a folder outside every run"
            )
        if not Path(args.out).exists():  # its nearest existing folder accepts a new one
            check_parent_writable(Path(args.out), "--out")
    w = args.workers or 1  # --workers cells at a time, each at the sweep's largest T
    subs = int(args.train_submissions or 0)
    parts = attack_estimates(int(args.agents), int(args.shadow), max(REPORTS), subs, sweep=w)
    check_resources(parts, force=args.force, cli=True)  # before any work
    args.no_progress = not show_progress(args)  # no bar frames into a pipe or a log
    return run_from_args(args)
