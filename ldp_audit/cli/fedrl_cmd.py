"""``ldp-audit attack fedrl``: the transcript attacks and, with ``--audit-samples``, a black-box
audit of the output mechanism written beside them (``audit.json``). The one system command not
generated from its ``SystemSpec`` yet (it writes two artefacts)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ldp_audit.cli.types import (
    DefaultsHelpFormatter,
    int_at_least,
)
from ldp_audit.errors import InvalidParameterError

_FMT = DefaultsHelpFormatter  # defaults shown only where they inform


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
