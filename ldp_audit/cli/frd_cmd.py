"""``ldp-audit train frd``, ``ldp-audit reproduce frd`` and ``ldp-audit attack frd``.

FRD (Cha et al. 2019) and its FedAvg baseline (``--mode fedavg``); the LDP variant with
``--epsilon`` (per upload). Imports only argparse-level modules at import time.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from ldp_audit.cli.types import (
    DefaultsHelpFormatter,
    add_run_mode_arguments,
    check_out_for_mode,
    confidence,
    int_at_least,
    run_mode,
    show_progress,
    timestamped_dir,
)
from ldp_audit.errors import InvalidParameterError

_FMT = DefaultsHelpFormatter  # defaults shown only where they inform


def _private_param(text: str) -> tuple[str, tuple[float, ...]]:
    """NAME=V1,V2,... (syntax, numbers, >= 2 values, no duplicates: the Gymnasium path's
    parser); the name and the values are checked against CartPole by ``FrdConfig``."""
    from ldp_audit.cli.gym_cmd import parse_private_param

    return parse_private_param(text)


#: FrdConfig fields whose option is written by hand below (--private-param sets both)
_HAND_WRITTEN = ("private_param", "private_values")


def register(train_subparsers: Any, reproduce_subparsers: Any) -> None:
    """Add ``train frd`` and ``reproduce frd``."""
    p = train_subparsers.add_parser(
        "frd",
        help="FRD (Cha et al. 2019) / FedAvg on CartPole-v1 with a private gravity (or another "
        "CartPole constant, --private-param)",
        description="Train groups of A2C agents that exchange a proxy experience memory (FRD) "
        "or their parameters (FedAvg) every E episodes after I; every upload is charged to the "
        "agent's ledger (non-private: NonPrivateEvent; --epsilon: the LDP variant).",
        formatter_class=_FMT,
    )
    p.add_argument(
        "--setting",
        type=int,
        choices=range(1, 8),
        default=1,
        metavar="{1..7}",
        help="Table 1 setting (S, E, I, network size, cut components); --sections, "
        "--exchange-period, --initial-episodes, --hidden, --layers and --proxy-dims override it",
    )
    # --private-param NAME=V1,V2 sets two fields (private_param, private_values): by hand
    p.add_argument(
        "--private-param",
        type=_private_param,
        default=None,
        metavar="NAME=V1,V2,...",
        help="each agent's private CartPole constant and its candidate values, one drawn "
        "uniformly per agent (seeded): gravity, masscart, masspole, length or force_mag "
        "(e.g. length=0.25,0.5,1); stored in secrets.npz, validated on a CartPole first",
    )
    p.add_argument("--seed", type=int_at_least("--seed", 0), default=0, help="master seed")
    p.add_argument("--out", default=None, metavar="RUN_DIR", help="run directory to write")
    add_run_mode_arguments(p)
    p.add_argument("--json", action="store_true", help="print metrics as JSON on stdout")
    p.add_argument("--no-progress", action="store_true")
    from ldp_audit.limits import add_force_argument

    add_force_argument(p)
    # every other field of FrdConfig is an option (--mode, --agents, --groups, --sections,
    # --gravities, --epsilon, --ldp-samples, --no-stop-at-mission, ...): its default, bounds and
    # help are written once, in the config (ldp_audit.config); there too: n_agents is spelled
    # --agents, ldp_epsilon --epsilon (bounds(option=...)) and --gravities is comma-separated
    # (bounds(parse=read_gravities, whole=True))
    from ldp_audit.config import add_arguments
    from ldp_audit.training.frd import FrdConfig

    add_arguments(
        p, FrdConfig, skip=_HAND_WRITTEN, group_title="the run's config (FrdConfig; generated)"
    )
    p.set_defaults(func=_train)

    r = reproduce_subparsers.add_parser(
        "frd",
        help="Figures 3-4 of Cha et al. 2019 + the leak experiment",
        description="Episodes to mission vs agents for Table 1 settings (Figure 3), FRD vs "
        "FedAvg and the LDP variant (Figure 4), and the dynamics attack on small runs.",
        formatter_class=_FMT,
    )
    r.add_argument(
        "--out",
        default=None,
        help="report folder (default: a new runs/reproduce-frd-<timestamp>; pass reports/frd for "
        "the committed report)",
    )
    r.add_argument("--overwrite", action="store_true", help="regenerate an existing report")
    r.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    r.add_argument("--no-progress", action="store_true")
    from ldp_audit.cli.types import add_backend_arguments

    add_backend_arguments(r, workers=True)
    from ldp_audit.limits import add_force_argument

    add_force_argument(r)
    # every field of ReproduceSettings is an option (--settings, --agents, --groups,
    # --max-episodes, --threshold, --fedavg-setting, --ldp-epsilons, --leak/--no-leak, ...,
    # --seed, --device): its default, bounds and help are written once, in the config; there
    # too: the comma-separated lists (--settings 1,3) are bounds(parse=..., whole=True)
    from ldp_audit.training.frd.reproduce import ReproduceSettings

    add_arguments(
        r, ReproduceSettings, group_title="the reproduction's config (ReproduceSettings; generated)"
    )
    r.set_defaults(func=_reproduce)


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


def _secret_options(args: argparse.Namespace, gravities: Any) -> dict[str, Any]:
    """FrdConfig's gravities / private_param / private_values from --gravities (``gravities``,
    None when not given) and --private-param (both: refused, naming them)."""
    if args.private_param is None:
        return {} if gravities is None else {"gravities": gravities}
    if gravities is not None:
        raise InvalidParameterError(
            f"--gravities and --private-param both declare the secret: give one (--private-param "
            f"{args.private_param[0]}=... with --gravities {','.join(map(str, gravities))})"
        )
    name, values = args.private_param
    if name == "gravity":
        return {"gravities": values}
    return {"private_param": name, "private_values": values}


def _train(args: argparse.Namespace) -> int:
    from ldp_audit.config import given_fields
    from ldp_audit.training.frd import PAPER_SETTINGS, FrdConfig

    kw = given_fields(args)  # the generated options the user gave; the others: the setting's
    algo = kw.get("mode", "frd")
    eps = kw.pop("ldp_epsilon", None)  # --epsilon: none or inf is the non-private upload
    if eps is not None and math.isinf(eps):
        eps = None
    if eps is not None and algo != "frd":
        raise InvalidParameterError(
            f"--epsilon (the LDP proxy memory) needs --mode frd, got --mode {algo}"
        )
    secret = _secret_options(args, kw.pop("gravities", None))
    cfg = FrdConfig(**{**PAPER_SETTINGS[args.setting], **kw}, **secret, ldp_epsilon=eps)
    from ldp_audit.training.sizes import check_sizes

    check_sizes("frd", cfg, force=args.force, cli=True)  # absurd sizes: before any allocation
    from ldp_audit.cli.types import resolve_device_option

    resolve_device_option(cfg.device, "train frd")  # cuda without CUDA: exit 2 before any file
    mode = run_mode(args)
    out = args.out or timestamped_dir(f"runs/frd-{cfg.mode}")
    check_out_for_mode(out, mode)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    from ldp_audit.training.frd import train

    t0 = time.perf_counter()
    res = train(
        cfg,
        seed=args.seed,
        run_dir=out,
        progress=show_progress(args),
        run_mode=mode,
        force=args.force,
    )
    met = res.metrics()
    met.pop("scores", None)
    met["run_dir"] = str(out)
    met["wall_seconds"] = time.perf_counter() - t0
    if args.json:
        print(json.dumps(met, indent=1, allow_nan=False))
    else:
        ms = ", ".join("inf" if math.isinf(m) else f"{m:g}" for m in res.mission)
        print(
            f"{cfg.mode}{' LDP eps=' + format(cfg.ldp_epsilon, 'g') if cfg.private else ''}: "
            f"{cfg.groups} group(s) x {cfg.n_agents} agents, episodes to mission [{ms}], "
            f"uploads per agent <= {met['uploads_per_agent_max']}, clipped states "
            f"{met['clipped_states']}; run directory {out}"
        )
    return 0


def _reproduce(args: argparse.Namespace) -> int:
    from ldp_audit.backends import backend_options
    from ldp_audit.cli.types import check_report_out, resolve_device_option
    from ldp_audit.config import from_args
    from ldp_audit.training.frd.reproduce import ReproduceSettings, reproduce

    s = from_args(ReproduceSettings, args)  # the options given; the others: its defaults
    resolve_device_option(s.device, "reproduce frd")  # cuda without CUDA: exit 2 before any work
    where = backend_options(args)  # --backend/--address/--workers: usage errors before work
    out = args.out or timestamped_dir("runs/reproduce-frd")
    check_report_out(out, overwrite=args.overwrite)
    from ldp_audit.limits import check_resources, forcing
    from ldp_audit.training.sizes import frd_reproduce_estimates

    workers = args.workers or 1
    check_resources(frd_reproduce_estimates(s, workers=workers), force=args.force, cli=True)
    with forcing(args.force):  # --force reaches the runs (and the worker processes)
        doc = reproduce(s, out=out, progress=show_progress(args), command=_command_line(), **where)
    if args.json:
        from ldp_audit.rundir import to_jsonable

        print(json.dumps(to_jsonable(doc), indent=1, allow_nan=False))
    else:
        print(f"reproduce frd: {len(doc['rows'])} cells, wall {doc['wall_seconds']:.0f} s -> {out}")
    return 0


def _command_line() -> str:
    return "ldp-audit " + " ".join(sys.argv[1:]) if sys.argv[1:] else "ldp-audit reproduce frd"


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
