"""``ldp-audit train fedrl``, ``ldp-audit attack fedrl`` and ``ldp-audit reproduce fedrl``.

Only argparse-level imports here: torch, scikit-learn and the trainer load inside the handlers.
"""

from __future__ import annotations

import argparse
import json
import sys
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
from ldp_audit.errors import InvalidParameterError

_FMT = DefaultsHelpFormatter  # defaults shown only where they inform


def _real(name: str):  # noqa: ANN202
    """A float converter naming the option (range checks are the config's)."""

    def convert(text: str) -> float:
        if text.strip().lower() in ("nan", "-inf", "-infinity"):
            return float(text)  # the config names the field and the range
        # strict: no 1_000, non-ASCII digits, 1e309 (ldp_audit.cli._types.parse_real)
        return parse_real(text, name, allow_inf=True)

    return convert


def _resolve_device(choice: str, command: str) -> str:
    """``--device`` resolved before any work: cuda without CUDA is a usage error (exit 2);
    auto says on stderr where it runs."""
    from ldp_audit.training.device import resolve_device

    device = resolve_device(choice, "--device")
    if choice == "auto":
        if device == "cuda":
            import torch

            where = f"cuda ({torch.cuda.get_device_name(0)})"
        else:
            where = "the CPU: torch sees no CUDA device"
        print(f"{command}: --device auto: running on {where}", file=sys.stderr)
    return device


#: FedRLConfig fields that are also options of reproduce fedrl (same name, default, bounds)
_REPRO_FIELDS = ("n_envs", "n_maps", "eval_maps", "hist_len", "meeting_rule", "device")


def register(train_subparsers: Any, reproduce_subparsers: Any) -> None:
    """Add ``train fedrl`` and ``reproduce fedrl``."""
    t = train_subparsers.add_parser(
        "fedrl",
        help="FedRL (Zhuo et al. 2019): two-agent federated DQN with noisy Q outputs",
        formatter_class=_FMT,
        description="Train FedRL and its baselines (DQN-alpha, DQN-full) on GridWorld; every "
        "exchanged Q output is charged to its sender's ledger before release. Prints each "
        "agent's epsilon (or why it is infinite).",
    )
    t.add_argument("--seed", type=int_at_least("--seed", 0), default=0, help="master seed")
    t.add_argument(
        "--threads",
        type=int_at_least("--threads", 1),
        default=1,
        help="torch threads while training (one is fastest on a small shared machine)",
    )
    t.add_argument(
        "--out", default=None, help="run directory (default: a new runs/fedrl-<timestamp>)"
    )
    add_run_mode_arguments(t)
    t.add_argument("--json", action="store_true", help="print metrics as JSON on stdout")
    t.add_argument("--no-progress", action="store_true", help="no progress bar")
    from ldp_audit.limits import add_force_argument

    add_force_argument(t)
    # every field of FedRLConfig is an option (--size, --sigma, --methods, ...): its default,
    # bounds and help are written once, in the config (ldp_audit.config)
    from ldp_audit.config import add_arguments
    from ldp_audit.training.fedrl.config import FedRLConfig

    add_arguments(t, FedRLConfig, group_title="the run's config (FedRLConfig; generated)")
    t.set_defaults(func=_train)

    r = reproduce_subparsers.add_parser(
        "fedrl",
        help="FedRL Table 1, Figure 4 (history length) and the attack sweep",
        formatter_class=_FMT,
        description="Reproduce FedRL's Table 1 (SuccRate and AvgRwd of DQN-alpha, FedRL-1, "
        "FedRL-2, DQN-full), the history-length study (Figure 4) and the transcript attack "
        "at sigma in {0, 0.1, 1, 5} with and without clipping, at the scale given.",
    )
    r.add_argument(
        "--sizes",
        nargs="+",
        type=int,
        default=[8, 16, 32],
        choices=[8, 16, 32],
        help="map sizes of Table 1",
    )
    r.add_argument(
        "--runs", type=int_at_least("--runs", 1), default=5, help="runs per method and size"
    )
    r.add_argument(
        "--train-steps",
        nargs="+",
        type=int_at_least("--train-steps", 1),
        default=[1500],
        help="training iterations per size (one value, or one per size)",
    )
    r.add_argument(
        "--hist-lens",
        nargs="*",
        type=int_at_least("--hist-lens", 1),
        default=[2, 4, 8],
        help="history lengths of the Figure 4 study (at the first size; none: skip)",
    )
    r.add_argument(
        "--fig4-runs",
        type=int_at_least("--fig4-runs", 1),
        default=2,
        help="runs per history length",
    )
    r.add_argument(
        "--attack-sigmas",
        nargs="*",
        type=_real("--attack-sigmas"),
        default=[0.0, 0.1, 1.0, 5.0],
        help="sigmas of the attack sweep (none: skip)",
    )
    r.add_argument(
        "--attack-clip",
        type=_real("--attack-clip"),
        default=1.0,
        help="B of the clipped half of the attack sweep",
    )
    r.add_argument(
        "--attack-steps",
        type=int_at_least("--attack-steps", 1),
        default=400,
        help="training iterations of each attacked run",
    )
    r.add_argument(
        "--audit-samples",
        type=int_at_least("--audit-samples", 0),
        default=200_000,
        help="samples per input of the output-mechanism audit (0: skip it)",
    )
    r.add_argument("--seed", type=int_at_least("--seed", 0), default=0, help="master seed")
    r.add_argument(
        "--threads",
        type=int_at_least("--threads", 1),
        default=1,
        help="torch threads while training (one is fastest on a small shared machine)",
    )
    r.add_argument(
        "--fig4-steps",
        type=int_at_least("--fig4-steps", 1),
        default=None,
        help="training iterations of the Figure 4 runs (default: those of the first size)",
    )
    r.add_argument(
        "--explore-eps",
        nargs="*",
        type=_real("--explore-eps"),
        default=[0.05, 0.1, 0.2],
        help="epsilons of the epsilon-greedy evaluation of Table 1's networks, beside the "
        "greedy one (none: skip)",
    )
    r.add_argument(
        "--curve-points",
        type=int_at_least("--curve-points", 0),
        default=8,
        help="checkpoints of the learning curves of Table 1's runs (0: none)",
    )
    r.add_argument(
        "--curve-maps",
        type=int_at_least("--curve-maps", 1),
        default=200,
        help="test maps played greedily at each checkpoint (at most --eval-maps)",
    )
    r.add_argument(
        "--out",
        default=None,
        help="report folder (default: a new runs/reproduce-fedrl-<timestamp>; the "
        "committed report is reports/fedrl)",
    )
    r.add_argument("--overwrite", action="store_true", help="regenerate an existing report")
    r.add_argument("--json", action="store_true", help="print results as JSON on stdout")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    from ldp_audit.cli._types import add_backend_arguments

    add_backend_arguments(r, workers=True)
    from ldp_audit.limits import add_force_argument

    add_force_argument(r)
    # the FedRLConfig fields reproduce passes on to every stage's runs, generated like train's
    add_arguments(
        r,
        FedRLConfig,
        skip=[f for f in FedRLConfig.__dataclass_fields__ if f not in _REPRO_FIELDS],
        group_title="the runs' config (FedRLConfig fields; generated; --hist-len is Table 1's)",
    )
    r.set_defaults(func=_reproduce)


def register_attack(attack_subparsers: Any) -> None:
    """Add ``attack fedrl``."""
    a = attack_subparsers.add_parser(
        "fedrl",
        help="attack a FedRL run's transcript (beta's cells, alpha's rewards) and audit its "
        "output mechanism",
        formatter_class=_FMT,
        description="From beta's released Q outputs, recover its private 5x5 window; from "
        "alpha's released targets Y, its rewards (scikit-learn). Accuracy with intervals vs "
        "the ceiling the (epsilon, delta) guarantee allows. With clipped outputs also audits "
        "the output mechanism as a black box (audit.json). Exit 1 on a violation.",
    )
    a.add_argument("--run-dir", required=True, help="a fedrl run directory")
    a.add_argument(
        "--out", default=None, help="write the attack result here (default: RUN/attack_fedrl.json)"
    )
    a.add_argument(
        "--audit-samples",
        type=int_at_least("--audit-samples", 0),
        default=200_000,
        help="samples per input of the black-box audit (0: no audit)",
    )
    a.add_argument("--seed", type=int_at_least("--seed", 0), default=0, help="seed")
    a.add_argument("--overwrite", action="store_true", help="replace earlier results")
    a.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    a.set_defaults(func=_attack)


# ----------------------------------------------------------------------------------------------


def _train(args: argparse.Namespace) -> int:
    mode = run_mode(args)
    if mode == "resume":
        raise InvalidParameterError(
            "--resume is not supported by train fedrl (a run is short): start a new run"
        )
    from ldp_audit.config import given_fields
    from ldp_audit.training.fedrl import FedRLConfig

    kw = given_fields(args)
    if "methods" in kw:  # a method named twice is trained once (as before the generator)
        kw["methods"] = tuple(dict.fromkeys(kw["methods"]))
    cfg = FedRLConfig(**kw)  # validates before any work
    from ldp_audit.training.sizes import check_sizes

    check_sizes("fedrl", cfg, force=args.force, cli=True)  # absurd sizes: before any allocation
    _resolve_device(cfg.device, "train fedrl")  # cuda without CUDA: exit 2 before any work
    check_out_for_mode(args.out, mode)
    out = args.out if args.out is not None else timestamped_dir("runs/fedrl")
    from ldp_audit.rundir import to_jsonable
    from ldp_audit.training.fedrl import train_fedrl

    metrics = train_fedrl(
        cfg,
        out,
        seed=args.seed,
        mode=mode,
        progress=show_progress(args),
        threads=args.threads,
        force=args.force,
    )
    if args.json:
        print(json.dumps(to_jsonable({"run_dir": str(out), **metrics})))
        return 0
    print(f"train fedrl: wrote {out}")
    for name, t in metrics["table"].items():
        print(
            f"  {name:9s} SuccRate {100 * t['succ_rate']:5.1f} %  AvgRwd {t['avg_reward']:8.2f}"
            f"  ({t['runs']} run(s) x {cfg.eval_maps} test maps)"
        )
    if metrics["privacy"]:
        print("  privacy (per agent and channel, composed over the run):")
        for p in metrics["privacy"]:
            print(f"    {p['ledger_agent']:16s} {p['charges']:6d} charges: {p['in_words']}")
    else:
        print("  privacy: nothing was exchanged (baselines only: no release, no ledger charge)")
    return 0


def _attack(args: argparse.Namespace) -> int:
    from ldp_audit.rundir import check_new_file, read_config, to_jsonable, write_artifact

    cfg_doc = read_config(args.run_dir)
    if cfg_doc.get("algorithm") != "fedrl":
        raise InvalidParameterError(
            f"--run-dir must be a fedrl run, got algorithm {cfg_doc.get('algorithm')!r}"
        )
    if args.out is not None:
        from ldp_audit.cli._types import check_not_inside_run

        check_not_inside_run(args.out, "--out")  # a run is written only via its named artefacts
        check_new_file(args.out, name="--out", overwrite=args.overwrite)
    from pathlib import Path

    from ldp_audit.attacks.fedrl import attack_run
    from ldp_audit.training.fedrl import FedRLConfig

    if (
        args.out is None
        and (Path(args.run_dir) / "attack_fedrl.json").exists()
        and not (args.overwrite)
    ):
        from ldp_audit.errors import RunDirectoryError

        raise RunDirectoryError(
            f"{args.run_dir}/attack_fedrl.json already exists; pass --out FILE or --overwrite"
        )
    res = attack_run(args.run_dir, seed=args.seed)
    cfg = FedRLConfig.from_dict(cfg_doc["config"])
    mech = cfg.output_mechanism()
    audit_doc = None
    if args.audit_samples > 0:
        if mech.private:
            from ldp_audit.audit import audit

            ar = audit(
                mech,
                mech.candidate_pairs(),
                samples=args.audit_samples,
                float_bits=False,
                rng=args.seed,
            )
            audit_doc = ar.to_dict()
            audit_doc["mechanism_description"] = (
                f"FedRL output mechanism: clip to [-{mech.bound:g}, {mech.bound:g}]^16, "
                f"N(0, {mech.sigma:g}^2)"
            )
            res["audit"] = {"violation": ar.violation, "summary": ar.summary()}
            if args.out is None:
                write_artifact(args.run_dir, "audit.json", [audit_doc], overwrite=args.overwrite)
        else:
            res["audit"] = {
                "skipped": f"no finite claim to audit: epsilon is {mech.why_infinite()}"
            }
    violation = bool(res["violation"]) or bool(res.get("audit", {}).get("violation", False))
    from ldp_audit.attacks.fedrl import to_attack_result

    doc = to_attack_result(res, mech.to_config()).to_dict()
    doc["violation"] = violation
    if args.out is not None:
        Path(args.out).write_text(json.dumps(doc, indent=1))
    else:
        write_artifact(args.run_dir, "attack_fedrl.json", doc, overwrite=args.overwrite)
    if args.json:
        print(json.dumps(to_jsonable(res)))
    else:
        print(res["summary"])
        if "audit" in res:
            print("audit: " + res["audit"].get("summary", res["audit"].get("skipped", "")))
        print(f"wrote {args.out or Path(args.run_dir) / 'attack_fedrl.json'}")
    _ = audit_doc
    return 1 if violation else 0


def _reproduce(args: argparse.Namespace) -> int:
    from ldp_audit.rundir import check_report_dir, to_jsonable

    if len(args.train_steps) not in (1, len(args.sizes)):
        raise InvalidParameterError(
            f"--train-steps must give one value or one per size ({len(args.sizes)}), got "
            f"{args.train_steps}"
        )
    for s in args.attack_sigmas:
        if s != s or s < 0:
            raise InvalidParameterError(f"--attack-sigmas must be >= 0, got {s}")
    if args.attack_clip != args.attack_clip or args.attack_clip <= 0:
        raise InvalidParameterError(f"--attack-clip must be > 0, got {args.attack_clip}")
    from ldp_audit.config import given_fields
    from ldp_audit.training.fedrl.config import FedRLConfig

    cfg_kw = given_fields(args)  # the _REPRO_FIELDS given (the others: ReproConfig's defaults)
    _resolve_device(
        cfg_kw.get("device", FedRLConfig().device), "reproduce fedrl"
    )  # cuda without CUDA: exit 2 before any work
    from ldp_audit.backends import backend_options

    where = backend_options(args)  # --backend/--address/--workers: usage errors before work
    out = args.out if args.out is not None else timestamped_dir("runs/reproduce-fedrl")
    from ldp_audit.cli._types import check_not_inside_run

    check_not_inside_run(out, "--out")
    check_report_dir(out, overwrite=args.overwrite, generated=("results.json", "README.md"))
    from ldp_audit.training.fedrl_reproduce import ReproConfig, reproduce, write_report

    rc = ReproConfig(
        sizes=tuple(args.sizes),
        runs=args.runs,
        train_steps=tuple(args.train_steps),
        hist_lens=tuple(args.hist_lens),
        fig4_runs=args.fig4_runs,
        attack_sigmas=tuple(args.attack_sigmas),
        attack_clip=args.attack_clip,
        attack_steps=args.attack_steps,
        seed=args.seed,
        audit_samples=args.audit_samples,
        threads=args.threads,
        fig4_steps=args.fig4_steps,
        explore_eps=tuple(args.explore_eps),
        curve_points=args.curve_points,
        curve_maps=args.curve_maps,
        **cfg_kw,
    )
    from pathlib import Path

    partial = Path(out) / "results.partial.json"

    def checkpoint(res: dict[str, Any]) -> None:
        partial.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(json.dumps(to_jsonable(res)))

    from ldp_audit.limits import check_resources, forcing
    from ldp_audit.training.sizes import fedrl_reproduce_estimates

    workers = args.workers or 1
    check_resources(fedrl_reproduce_estimates(rc, workers=workers), force=args.force, cli=True)
    with forcing(args.force):  # --force reaches the runs (and the worker processes)
        results = reproduce(
            rc,
            progress=show_progress(args),
            command="ldp-audit " + " ".join(sys.argv[1:]),
            checkpoint=checkpoint,
            **where,
        )
    files = write_report(results, out)
    partial.unlink(missing_ok=True)
    if args.json:
        print(json.dumps(to_jsonable(results)))
    else:
        print(f"reproduce fedrl: {results['seconds_total']:.0f} s; wrote")
        for f in files:
            print(f"  {f}")
    return 0
