"""``ldp-audit train fedrl``, ``ldp-audit attack fedrl`` and ``ldp-audit reproduce fedrl``.

Only argparse-level imports here: torch, scikit-learn and the trainer load inside the handlers.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ldp_audit.cli.types import (
    DefaultsHelpFormatter,
    add_run_mode_arguments,
    check_out_for_mode,
    int_at_least,
    resolve_device_option,
    run_mode,
    show_progress,
    timestamped_dir,
)
from ldp_audit.errors import InvalidParameterError

_FMT = DefaultsHelpFormatter  # defaults shown only where they inform


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
        "--out",
        default=None,
        help="report folder (default: a new runs/reproduce-fedrl-<timestamp>; the "
        "committed report is reports/fedrl)",
    )
    r.add_argument("--overwrite", action="store_true", help="regenerate an existing report")
    r.add_argument("--json", action="store_true", help="print results as JSON on stdout")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    from ldp_audit.cli.types import add_backend_arguments

    add_backend_arguments(r, workers=True)
    from ldp_audit.limits import add_force_argument

    add_force_argument(r)
    # every field of ReproConfig is an option (--sizes, --runs, --train-steps, ..., and the
    # FedRLConfig fields it passes on to every stage's runs: --n-maps, --device, ...): its
    # default, bounds and help are written once, in the config (ldp_audit.config)
    from ldp_audit.training.fedrl.reproduce import ReproConfig

    add_arguments(r, ReproConfig, group_title="the reproduction's config (ReproConfig; generated)")
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
    resolve_device_option(cfg.device, "train fedrl")  # cuda without CUDA: exit 2, no work
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
        from ldp_audit.cli.types import check_not_inside_run

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
        from ldp_audit.rundir.seal import seal_document

        sealed = seal_document(to_jsonable(doc), args.run_dir)  # for report RUN FILE
        Path(args.out).write_text(json.dumps(sealed, indent=1))
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
    from ldp_audit.config import from_args
    from ldp_audit.rundir import check_report_dir, to_jsonable
    from ldp_audit.training.fedrl.reproduce import ReproConfig, reproduce
    from ldp_audit.training.fedrl.reproduce_report import write_report

    rc = from_args(ReproConfig, args)  # the options given; the others: ReproConfig's defaults
    if len(rc.train_steps) not in (1, len(rc.sizes)):
        raise InvalidParameterError(
            f"--train-steps must give one value or one per size ({len(rc.sizes)}), got "
            f"{list(rc.train_steps)}"
        )
    resolve_device_option(rc.device, "reproduce fedrl")  # cuda without CUDA: exit 2, no work
    from ldp_audit.backends import backend_options

    where = backend_options(args)  # --backend/--address/--workers: usage errors before work
    out = args.out if args.out is not None else timestamped_dir("runs/reproduce-fedrl")
    from ldp_audit.cli.types import check_not_inside_run

    check_not_inside_run(out, "--out")
    check_report_dir(out, overwrite=args.overwrite, generated=("results.json", "README.md"))
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
