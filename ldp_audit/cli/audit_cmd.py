"""``ldp-audit audit``: a sound lower bound on a mechanism's epsilon, a verdict and a witness.

    ldp-audit audit --mechanism {laplace,prs,bitflip,rr,gaussian,MODULE:ATTR} --epsilon E
        [--clip C] [--dim D] [--reduced-dim K] [--pairs MODULE:ATTR] [--samples N]
        [--confidence P] [--seed S] [--json]

``MODULE:ATTR`` loads a user's mechanism (an object, a class or a zero-argument factory) or
pairs (a list of (x, x2) or a zero-argument callable returning one) from an importable module;
the current directory is put on ``sys.path`` first. Exit codes: 0 no violation found,
1 violation, 2 usage error. The progress bar goes to stderr; ``--json`` prints
``AuditResult.to_dict()`` on stdout.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import sys
from typing import Any

from ldp_audit.errors import InvalidParameterError

BUILTIN = ("laplace", "prs", "bitflip", "rr", "gaussian")


def _float(name: str, *, positive: bool = True, unit: bool = False) -> Any:
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {text!r}") from None
        if unit and not 0.0 < v < 1.0:
            raise argparse.ArgumentTypeError(f"{name} must be in (0, 1), got {text!r}")
        if positive and not (math.isfinite(v) and v > 0):
            raise argparse.ArgumentTypeError(f"{name} must be finite and > 0, got {text!r}")
        return v

    return parse


def _int(name: str, minimum: int) -> Any:
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{name} must be an integer >= {minimum}, got {text!r}"
            ) from None
        if v < minimum:
            raise argparse.ArgumentTypeError(
                f"{name} must be an integer >= {minimum}, got {text!r}"
            )
        return v

    return parse


def register(subparsers: Any) -> None:
    """Add the ``audit`` subcommand."""
    p = subparsers.add_parser(
        "audit",
        help="lower-bound a mechanism's epsilon (sound at the given confidence)",
        description=(
            "Audit a mechanism's epsilon claim with a statistically sound lower bound. "
            "Finding no violation proves nothing beyond the test's power."
        ),
    )
    p.add_argument(
        "--mechanism",
        required=True,
        help=f"one of {', '.join(BUILTIN)}, or MODULE:ATTR (object, class or factory)",
    )
    p.add_argument("--epsilon", type=_float("epsilon"), help="claimed epsilon (built-ins)")
    p.add_argument("--clip", type=_float("clip"), default=1.0, help="clip bound C (default 1)")
    p.add_argument("--dim", type=_int("dim", 1), default=None, help="input dimension d")
    p.add_argument("--reduced-dim", type=_int("reduced-dim", 1), default=None, help="PRS d_hat")
    p.add_argument("--categories", type=_int("categories", 2), default=2, help="rr: k values")
    p.add_argument("--delta", type=_float("delta", unit=True), default=1e-5, help="gaussian delta")
    p.add_argument("--pairs", default=None, help="MODULE:ATTR giving a list of (x, x2) pairs")
    p.add_argument(
        "--samples", type=_int("samples", 1000), default=1_000_000, help="per input of a pair"
    )
    p.add_argument(
        "--confidence", type=_float("confidence", unit=True), default=0.95, help="in (0, 1)"
    )
    p.add_argument("--seed", type=_int("seed", 0), default=0, help="random seed (default 0)")
    p.add_argument(
        "--no-float-bits",
        action="store_true",
        help="do not search floating-point bit cells (audit as if in exact arithmetic)",
    )
    p.add_argument(
        "--exact",
        action="store_true",
        help="also print the white-box exact epsilon for the pairs (built-ins)",
    )
    p.add_argument("--json", action="store_true", help="print the AuditResult as JSON")
    p.set_defaults(func=run)


def load_object(spec: str, what: str) -> Any:
    """Import ``MODULE:ATTR`` (ATTR may be dotted) with the current directory on sys.path."""
    if ":" not in spec:
        raise InvalidParameterError(f"{what} must be MODULE:ATTR, got {spec!r}")
    module_name, attr = spec.split(":", 1)
    if not module_name or not attr:
        raise InvalidParameterError(f"{what} must be MODULE:ATTR, got {spec!r}")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidParameterError(
            f"{what}: cannot import module {module_name!r}: {exc}"
        ) from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise InvalidParameterError(
                f"{what}: module {module_name!r} has no attribute {attr!r}"
            ) from None
    return obj


def _user_mechanism(spec: str) -> Any:
    obj = load_object(spec, "--mechanism")
    if isinstance(obj, type) or (callable(obj) and not hasattr(obj, "privatize")):
        try:
            obj = obj()
        except TypeError as exc:
            raise InvalidParameterError(
                f"--mechanism {spec!r} must be a mechanism object or a zero-argument factory: {exc}"
            ) from None
    return obj


def _user_pairs(spec: str) -> list[Any]:
    obj = load_object(spec, "--pairs")
    if callable(obj):
        obj = obj()
    try:
        return list(obj)
    except TypeError:
        raise InvalidParameterError(
            f"--pairs {spec!r} must be a list of (x, x2) pairs or a factory returning one"
        ) from None


def build_mechanism(args: argparse.Namespace) -> Any:
    """The mechanism named by ``--mechanism`` and its options."""
    from ldp_audit import mechanisms as mech

    name = args.mechanism
    if name not in BUILTIN:
        return _user_mechanism(name)
    if args.epsilon is None:
        raise InvalidParameterError(f"--epsilon is required for --mechanism {name}")
    eps = args.epsilon
    if name == "laplace":
        return mech.Laplace(epsilon=eps, clip=args.clip)
    if name == "prs":
        return mech.ProjectedRandomSign(epsilon=eps, clip=args.clip, reduced_dim=args.reduced_dim)
    if name == "bitflip":
        return mech.BitFlip(epsilon=eps)
    if name == "rr":
        return mech.RandomizedResponse(epsilon=eps, k=args.categories)
    sigma = mech.analytic_gaussian_sigma(eps, 2.0 * args.clip, args.delta)
    return mech.Gaussian(clip=args.clip, noise_multiplier=sigma / args.clip, delta=args.delta)


def run(args: argparse.Namespace) -> int:
    """Run the audit; print the summary (or JSON); return 1 on a violation, else 0."""
    from ldp_audit.audit import audit, default_pairs, exact_epsilon

    mechanism = build_mechanism(args)
    pairs = _user_pairs(args.pairs) if args.pairs else None
    if pairs is None and args.dim is not None:
        pairs = default_pairs(mechanism, args.dim)
    result = audit(
        mechanism,
        pairs,
        samples=args.samples,
        confidence=args.confidence,
        rng=args.seed,
        dim=args.dim,
        float_bits=not args.no_float_bits,
        progress=True,
    )
    exact = None
    if args.exact:
        exact = exact_epsilon(mechanism, pairs, dim=args.dim, rng=args.seed)
    if args.json:
        out = result.to_dict()
        if exact is not None:
            out["exact_epsilon"] = exact if math.isfinite(exact) else "inf"
        print(json.dumps(out, indent=2))
    else:
        print(result.summary())
        if exact is not None:
            print(f"exact epsilon (white-box, these pairs): {exact:.6g}")
    return 1 if result.violation else 0
