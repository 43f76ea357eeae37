"""``ldp-audit train pgc-a3c --env ENV_ID --private-param NAME=V1,V2,...``: the Gymnasium path.

Options added to ``train pgc-a3c`` (docs/gymnasium.md). CartPole-v1 with its ``gravity`` is the
paper's own task and stays on the CartPole engine (results bit for bit as before, candidates
recorded as the config's ``gravities``); every other environment or parameter goes to
:mod:`ldp_audit.training.pgc_a3c_gym.trainer`. Every input is checked before any episode.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from typing import Any

from ldp_audit.cli.types import int_in_range
from ldp_audit.parse import parse_real

__all__ = ["add_gym_arguments", "parse_private_param", "refuse_without_env", "train_gym"]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: Options of ``train pgc-a3c`` that only the CartPole engine has (refused with --env).
_CARTPOLE_ONLY = (
    ("stop_at_target", False, "--stop-at-target"),
    ("clip_kind", "l1", "--clip-kind"),
    ("aggregator", "sgd", "--aggregator"),
    ("aggregator_lr", None, "--aggregator-lr"),
    ("target", "engine", "--target"),
)


def parse_private_param(text: str) -> tuple[str, tuple[float, ...]]:
    """``NAME=V1,V2,...`` -> (NAME, (V1, V2, ...)), each value read strictly (no nan/inf)."""
    if not isinstance(text, str) or "=" not in text:
        raise argparse.ArgumentTypeError(
            f"--private-param must be NAME=V1,V2,... (e.g. LINK_MASS_1=0.5,1,2), got {text!r}"
        )
    name, _, rest = text.partition("=")
    name = name.strip()
    if not _NAME.fullmatch(name):
        raise argparse.ArgumentTypeError(
            f"--private-param: {name!r} is not an attribute name (in {text!r})"
        )
    vals = tuple(parse_real(v, f"--private-param {name}") for v in rest.split(","))
    if len(vals) < 2:
        raise argparse.ArgumentTypeError(
            f"--private-param {name} needs at least two candidate values, got {text!r}"
        )
    if len(set(vals)) != len(vals):
        dup = sorted({v for v in vals if vals.count(v) > 1})
        raise argparse.ArgumentTypeError(
            f"--private-param {name}: candidate values must be distinct, {dup} repeated"
        )
    return name, vals


def add_gym_arguments(p: argparse.ArgumentParser) -> None:
    """Add --env, --private-param, --env-module, --agents, --hidden, --episode-steps."""
    g = p.add_argument_group("any Gymnasium environment (docs/gymnasium.md)")
    g.add_argument(
        "--env",
        default=None,
        metavar="ENV_ID",
        help="a Gymnasium id with a discrete action space (default: the paper's CartPole)",
    )
    g.add_argument(
        "--private-param",
        type=parse_private_param,
        default=None,
        metavar="NAME=V1,V2,...",
        help="the attribute of env.unwrapped that is each agent's secret, and its candidate "
        "values (each agent draws one uniformly)",
    )
    g.add_argument(
        "--env-module",
        default=None,
        metavar="MODULE",
        help="import this module first (it registers your environment with Gymnasium)",
    )
    g.add_argument(
        "--agents",
        type=int_in_range("--agents", 1, 100_000, "one environment per agent"),
        default=None,
        help="concurrent agents per trial (default 9)",
    )
    g.add_argument(
        "--hidden",
        type=int_in_range("--hidden", 1, 4096, "the network is held per agent"),
        default=None,
        help="hidden units (default 16)",
    )
    g.add_argument(
        "--episode-steps",
        type=int_in_range("--episode-steps", 1, 1_000_000, "episodes are held in memory"),
        default=None,
        help="episode cap (default: the env's max_episode_steps)",
    )


def refuse_without_env(args: argparse.Namespace) -> None:
    """The Gymnasium options need --env (the CartPole engine has 9 agents, 16 units, 200 steps)."""
    from ldp_audit.errors import InvalidParameterError

    given = [
        "--" + k.replace("_", "-")
        for k in ("private_param", "env_module", "agents", "hidden", "episode_steps")
        if getattr(args, k, None) is not None
    ]
    if given:
        raise InvalidParameterError(
            f"{', '.join(given)} need --env ENV_ID (e.g. --env Acrobot-v1 --private-param "
            "LINK_MASS_1=0.5,1,2)"
        )


def train_gym(args: argparse.Namespace, eps_kw: dict[str, Any]) -> int | None:
    """Run the Gymnasium path; None when the CartPole engine should run instead (CartPole-v1's
    gravity: the caller passes ``args.private_param`` values as ``gravities``)."""
    from ldp_audit.errors import InvalidParameterError

    if args.private_param is None:
        raise InvalidParameterError("--env needs --private-param NAME=V1,V2,...")
    name, values = args.private_param
    extra = {k: getattr(args, k) for k in ("agents", "hidden", "episode_steps") if getattr(args, k)}
    if args.env == "CartPole-v1" and name == "gravity" and args.env_module is None:
        if extra:
            raise InvalidParameterError(
                "CartPole-v1's gravity runs on the paper's CartPole engine (9 agents, 16 hidden "
                f"units, 200-step episodes); --agents, --hidden, --episode-steps do not apply, "
                f"got {sorted(extra)}"
            )
        return None
    for attr, default, opt in _CARTPOLE_ONLY:
        if getattr(args, attr) != default:
            raise InvalidParameterError(
                f"{opt} is an option of the CartPole engine; with --env {args.env} it does not "
                "apply (docs/gymnasium.md)"
            )
    from ldp_audit.cli.types import check_out_for_mode, run_mode

    mode = run_mode(args)
    if mode == "resume":
        raise InvalidParameterError("--resume is not available with --env (start a new run)")
    from ldp_audit.training.pgc_a3c_gym.config import GymPgcConfig
    from ldp_audit.training.pgc_a3c_gym.trainer import train

    cfg = GymPgcConfig(
        env_id=args.env,
        private_param=name,
        values=values,
        env_module=args.env_module,
        mechanism=args.mechanism,
        trials=args.trials,
        max_submissions=args.max_submissions,
        rounds=args.rounds,
        acting=args.acting,
        **({"n_agents": args.agents} if args.agents else {}),
        **({"hidden": args.hidden} if args.hidden else {}),
        **({"episode_steps": args.episode_steps} if args.episode_steps else {}),
        **eps_kw,
    )  # env, parameter and every value validated here, before any episode
    from ldp_audit.limits import check_resources
    from ldp_audit.training.sizes import gym_pgc_estimates

    sizes = gym_pgc_estimates(cfg, record=args.out is not None, cli=True)
    check_resources(sizes, force=args.force, cli=True)  # before any allocation or episode
    check_out_for_mode(args.out, mode)
    t0 = time.perf_counter()
    res = train(
        cfg,
        seed=args.seed,
        run_dir=args.out,
        progress=not args.no_progress,
        overwrite=mode == "overwrite",
    )
    import numpy as np

    from ldp_audit.rundir import to_jsonable

    last = [
        float(np.mean(z[max(0, int(n) - 10) : int(n)])) if n else math.nan
        for z, n in zip(res.zeta, res.submissions, strict=True)
    ]
    out = {
        "algorithm": "pgc-a3c-gym",
        "env_id": cfg.env_id,
        "private_parameter": cfg.private_parameter(),
        "mechanism": cfg.mechanism,
        "epsilon": None if cfg.mechanism == "none" else cfg.epsilon,
        "rounds": cfg.rounds,
        "trials": cfg.trials,
        "n_agents": cfg.n_agents,
        "max_submissions": cfg.max_submissions,
        "seed": args.seed,
        "seconds": time.perf_counter() - t0,
        "env_steps": int(res.env_steps),
        "network_dim": cfg.network.dim,
        "mean_last_10_scores": last,
        "privacy": res.privacy,
        "run_dir": args.out,
    }
    if args.json:
        print(json.dumps(to_jsonable(out), indent=1, allow_nan=False))
        return 0
    eps = "inf" if out["epsilon"] is None else f"{out['epsilon']:g}"
    print(
        f"pgc-a3c on {cfg.env_id}, private {name} in {list(values)}: mechanism={cfg.mechanism} "
        f"epsilon={eps} rounds={cfg.rounds} trials={cfg.trials} agents={cfg.n_agents} "
        f"d={cfg.network.dim} ({out['seconds']:.1f} s, {res.env_steps} env-steps)"
    )
    print("  mean score of the last 10 submissions per trial: " + ", ".join(f"{v:g}" for v in last))
    if args.out:
        print(f"  run directory: {args.out}")
    sys.stdout.flush()
    return 0
