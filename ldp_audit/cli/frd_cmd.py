"""``ldp-audit train frd``, ``ldp-audit reproduce frd`` and ``ldp-audit attack frd``.

FRD (Cha et al. 2019) and its FedAvg baseline (``--mode fedavg``); the LDP variant with
``--epsilon`` (per upload). Imports only argparse-level modules at import time.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ldp_audit.cli.types import (
    DefaultsHelpFormatter,
    confidence,
    int_at_least,
)
from ldp_audit.errors import InvalidParameterError

_FMT = DefaultsHelpFormatter  # defaults shown only where they inform


def register_attack(attack_subparsers: Any) -> None:
    """Add ``attack frd --run-dir RUN`` (dynamics inference on an FRD/FedAvg run)."""
    a = attack_subparsers.add_parser(
        "frd",
        help="dynamics inference on an FRD/FedAvg run's uploads",
        description="Shadow-training attack recovering each agent's gravity from what it "
        "uploaded; writes RUN_DIR/attack_dynamics.json (or --out FILE).",
        formatter_class=_FMT,
    )
    a.add_argument("--run-dir", required=True)
    a.add_argument(
        "--shadow", type=int_at_least("--shadow", 1), default=24, help="shadow agents per gravity"
    )
    a.add_argument("--max-groups", type=int_at_least("--max-groups", 1), default=None)
    a.add_argument("--seed", type=int_at_least("--seed", 0), default=0, help="attack seed")
    a.add_argument("--confidence", type=confidence(), default=0.95)
    a.add_argument("--out", default=None, help="write the result JSON here instead")
    a.add_argument(
        "--overwrite", action="store_true", help="replace the run's attack_dynamics.json"
    )
    a.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    from ldp_audit.limits import add_force_argument

    add_force_argument(a)
    a.set_defaults(func=_attack)


def _attack(args: argparse.Namespace) -> int:
    from ldp_audit.attacks import frd as F
    from ldp_audit.errors import RunDirectoryError
    from ldp_audit.rundir import check_new_file, is_run_dir, to_jsonable, write_artifact

    if not is_run_dir(args.run_dir):
        raise RunDirectoryError(f"--run-dir {args.run_dir!r} is not a run directory")
    if not 0 < args.confidence < 1:
        raise InvalidParameterError(f"--confidence must be in (0, 1), got {args.confidence!r}")
    target = Path(args.run_dir) / "attack_dynamics.json"
    if args.out:
        from ldp_audit.cli.types import check_not_inside_run

        check_not_inside_run(args.out, "--out")  # a run is written only via its named artefacts
        check_new_file(args.out, name="--out", overwrite=args.overwrite)
    elif target.exists() and not args.overwrite:
        raise RunDirectoryError(
            f"{target} already exists; write elsewhere with --out FILE or pass --overwrite"
        )
    _check_shadow_size(args)  # absurd --shadow: refused before the shadow run
    from ldp_audit.limits import forcing

    with forcing(args.force):
        res = F.run(
            args.run_dir,
            n_shadow=args.shadow,
            max_groups=args.max_groups,
            seed=args.seed,
            confidence=args.confidence,
            progress=sys.stderr.isatty(),
        )
    d = res.to_dict()
    if args.out:
        from ldp_audit.rundir.seal import seal_document

        sealed = seal_document(to_jsonable(d), args.run_dir)  # for report RUN FILE
        Path(args.out).write_text(json.dumps(sealed, indent=1, allow_nan=False))
    else:
        write_artifact(args.run_dir, "attack_dynamics.json", d, overwrite=True)
    if args.json:
        print(json.dumps(to_jsonable(d), indent=1, allow_nan=False))
    else:
        print(res.summary())
    return 1 if res.violation else 0


def _check_shadow_size(args: argparse.Namespace) -> None:
    """``--shadow``'s shadow run, estimated from the run's config (InvalidParameterError)."""
    from ldp_audit.errors import LdpAuditError
    from ldp_audit.limits import check_resources
    from ldp_audit.rundir import read_config
    from ldp_audit.training.frd import FrdConfig
    from ldp_audit.training.sizes import frd_attack_estimates

    try:
        cfg = FrdConfig.from_dict(read_config(args.run_dir)["config"])
    except (LdpAuditError, TypeError):  # an unusable config is the attack's own error to name
        return
    check_resources(frd_attack_estimates(cfg, args.shadow), force=args.force, cli=True)
