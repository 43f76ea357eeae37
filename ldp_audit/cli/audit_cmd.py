"""``ldp-audit audit``: sound lower bounds on a mechanism's epsilon, two verdicts and witnesses.

    ldp-audit audit --mechanism {laplace,discrete-laplace,prs,bitflip,rr,gaussian,MODULE:ATTR}
        [--epsilon E] [--clip C] [--sigma S] [--delta D] [--resolution G] [--dim D]
        [--reduced-dim K] [--categories K] [--param KEY=VALUE ...] [--pairs MODULE:ATTR]
        [--scalar --domain LOW:HIGH|V1,V2,... [--seeding none|random_state|seed|generator]]
        [--statistic MODULE:FUNCTION ...] [--event X;X2;S] [--samples N] [--confidence P] [--seed S]
        [--no-float-bits] [--profile|--no-profile] [--sequential] [--force] [--exact] [--json]

``MODULE:ATTR`` loads a user's mechanism (an object, a class or a factory; ``--param key=value``
arguments are passed to the class or factory) or pairs (a list of (x, x2) or a zero-argument
callable returning one) or a statistic (``--statistic MODULE:FUNCTION``, repeatable: the
Python API's ``statistics=``) from an importable module; the current directory is put last on
``sys.path`` (docs/cli.md). A user mechanism's claim is its own ``epsilon`` (and ``delta``)
attribute: ``--epsilon`` is refused for it. With ``--scalar``, ``MODULE:ATTR`` is instead a scalar
function of another library (``ldp_audit.audit.from_scalar``) and ``--epsilon`` / ``--delta`` pass
the library's own claim. Options that a mechanism does not use are refused, never
silently ignored. Exit codes: 0 no violation found, 1 violation (either verdict), 2 usage or
input error (including a failing user object). The progress bar goes to stderr; ``--json``
prints ``AuditResult.to_dict()`` on stdout.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import math
import re
import sys
from typing import Any

from ldp_audit import systems
from ldp_audit.cli.evidence import evidence_args, run_dir_only
from ldp_audit.cli.system_cmd import audit_options, audit_run_dir
from ldp_audit.cli.types import (
    DefaultsHelpFormatter,
    add_flags,
    add_int,
    add_real,
    closest,
    confidence,
    key_value,
    show_progress,
)
from ldp_audit.config import unique_keys
from ldp_audit.errors import InvalidParameterError, LdpAuditError, UserCodeError
from ldp_audit.limits import check_resources
from ldp_audit.parse import parse_real, real_in
from ldp_audit.stats import check_delta_range
from ldp_audit.training.sizes import audit_probe_estimates

BUILTIN = ("laplace", "discrete-laplace", "prs", "bitflip", "rr", "gaussian")
#: each built-in's class (ldp_audit.mechanisms) and the mechanism-specific options it uses
#: (others are refused); an option is its class's keyword of the same name (--categories: k)
_USES: dict[str, tuple[str, set[str]]] = {
    "laplace": ("Laplace", {"epsilon", "clip"}),
    "discrete-laplace": ("DiscreteLaplace", {"epsilon", "clip", "resolution"}),
    "prs": ("ProjectedRandomSign", {"epsilon", "clip", "reduced_dim"}),
    "bitflip": ("BitFlip", {"epsilon"}),
    "rr": ("RandomizedResponse", {"epsilon", "categories"}),
    "gaussian": ("Gaussian", {"epsilon", "clip", "sigma", "delta"}),
}
_MECHANISM_DESTS = "epsilon clip resolution reduced_dim categories sigma delta param domain seeding"
#: the options a mechanism may use (each "not given" unless given), dest -> option
_OPTION = {k: "--" + k.replace("_", "-") for k in _MECHANISM_DESTS.split()}


#: dimensions and category counts beyond this would allocate candidate pairs / output tables
#: far larger than memory before the first sample
_MAX_DIM = 1_000_000


def _epsilon(text: str) -> float:
    """``--epsilon``: a finite real >= 0 (0: a ``--scalar`` library's (0, delta) claim), and a
    normal double (``5e-324`` was refused as "the noise scale clip / epsilon = inf")."""
    from ldp_audit.parse import check_normal

    v = real_in("--epsilon", low=0.0, low_open=False)(text)
    check_normal(v, "--epsilon", text, zero=True, exc=argparse.ArgumentTypeError)
    return v


def _domain(text: str) -> Any:
    """``LOW:HIGH`` -> (low, high); ``V1,V2,...`` -> a list (ints when all are integers, bools
    for ``false,true``, strings when none is a number).

    Every number is finite and read strictly (``ldp_audit.parse.parse_real``); an interval
    needs LOW < HIGH and a set at least two distinct values (a claim over one input says
    nothing)."""

    def bad(why: str) -> argparse.ArgumentTypeError:
        return argparse.ArgumentTypeError(
            f"--domain must be LOW:HIGH or V1,V2,... ({why}), got {text!r}"
        )

    if ":" in text:
        lo_t, hi_t = text.split(":", 1)
        lo, hi = parse_real(lo_t, "--domain LOW"), parse_real(hi_t, "--domain HIGH")
        if not lo < hi:
            raise bad("LOW must be < HIGH")
        return (lo, hi)
    parts = [p.strip() for p in text.split(",")]
    if any(not p for p in parts):
        raise bad("an empty value")
    values: list[Any]
    if all(p.lower() in ("false", "true") for p in parts):  # passed as bool
        values = [p.lower() == "true" for p in parts]
    elif all(re.fullmatch(r"[+-]?[0-9]+", p) for p in parts):
        values = [int(p) for p in parts]
    elif not any(re.fullmatch(r"[+-]?([0-9.]+(e[+-]?[0-9]+)?|inf|nan)", p, re.I) for p in parts):
        values = parts  # labels, passed as str (randomised response over strings)
    else:
        values = [parse_real(p, "--domain value") for p in parts]
    if len(set(values)) < 2:
        raise bad("at least two distinct values")
    return values


def register(subparsers: Any) -> None:
    """Add the ``audit`` subcommand."""
    p = subparsers.add_parser(
        "audit",
        help="lower-bound a mechanism's epsilon (sound at the given confidence)",
        description=(
            "Audit a mechanism's epsilon claim with statistically sound lower bounds: a "
            "distribution verdict (exact-arithmetic reading: is the maths right?) and an "
            "implementation verdict (floating-point bits: does this binary leak?). Finding "
            "no violation proves nothing beyond the test's power."
        ),
        formatter_class=DefaultsHelpFormatter,  # also under a plain parser (the tests' own)
    )
    p.add_argument(
        "--mechanism",
        help=f"one of {', '.join(BUILTIN)}, or MODULE:ATTR (object, class or factory); "
        "required unless --run-dir",
    )
    opt = functools.partial(p.add_argument, default=argparse.SUPPRESS)  # "not given"
    eps_help = (
        "claimed epsilon (built-ins, > 0; gaussian: calibrates sigma unless --sigma is given; "
        "--scalar: the library's own, >= 0, e.g. 0 for a (0, delta) mechanism)"
    )
    opt("--epsilon", type=_epsilon, help=eps_help)
    add_real(opt, "--clip", help="clip bound C (1 when omitted)")
    add_real(opt, "--sigma", help="gaussian: noise standard deviation")
    delta_help = (
        "the delta of the claim (gaussian: > 0, 1e-5 when omitted; --scalar: the library's own, "
        ">= 0, 0 when omitted)"
    )
    opt("--delta", type=real_in("--delta", low=0.0, low_open=False, high=1.0), help=delta_help)
    add_real(opt, "--resolution", help="discrete-laplace: grid step (C / (10 d) when omitted)")
    add_int(p, "--dim", 1, _MAX_DIM, help="input dimension d (mechanism.dim, or 1, when omitted)")
    d_hat = "prs: d_hat (max(1, min(d, floor(epsilon / 2.5))) when omitted)"
    add_int(opt, "--reduced-dim", 1, _MAX_DIM, help=d_hat)
    add_int(opt, "--categories", 2, _MAX_DIM, help="rr: number of categories k (2 when omitted)")
    opt(
        "--param",
        type=key_value("--param", finite=False),
        action="append",
        metavar="KEY=VALUE",
        help="MODULE:ATTR class or factory argument (repeatable; VALUE read as JSON)",
    )
    add_flags(
        p,
        scalar="MODULE:ATTR is a scalar value -> value function of another library (or, with "
        "--seeding, a factory taking the randomness and returning one); it may return a "
        "fixed-length vector per value, e.g. a bit vector or (y, seed); needs --epsilon "
        "(the library's own) and --domain",
    )
    opt(
        "--domain",
        type=_domain,
        help="--scalar: the inputs the claim covers, LOW:HIGH (an interval) or V1,V2,... (a "
        "finite set; integers are passed as int, false,true as bool)",
    )
    opt(
        "--seeding",
        choices=("none", "random_state", "seed", "generator"),
        help="--scalar: what the factory receives, derived from --seed (none when omitted: "
        "the function draws its own randomness and the audit is not reproducible)",
    )
    p.add_argument("--pairs", help="MODULE:ATTR giving a list of (x, x2) pairs")
    p.add_argument(
        "--statistic",
        action="append",
        metavar="MODULE:FUNCTION",
        help="a statistic stat(outputs, x, x_prime) -> one score per output row, searched like "
        "the built-in ones (the Python API's statistics=; repeatable); the module is imported "
        "only because it is named here",
    )
    p.add_argument(
        "--event",
        type=_event,
        metavar="X;X2;S",
        help="a pre-registered event, no search: inputs X (the numerator) and X2 (comma-"
        "separated numbers) and the output set S, rows separated by | (e.g. '0;7;0') or "
        "MODULE:FUNCTION naming event(outputs, x, x_prime) -> n booleans; all --samples count "
        "it, the whole 1 - confidence is spent on it (the Python API's event=)",
    )
    add_int(p, "--samples", 1000, default=1_000_000, help="outputs per input of a pair")
    p.add_argument("--confidence", type=confidence(), default=0.95, help="in (0, 1)")
    add_int(p, "--seed", 0, default=0, help="random seed")
    p.add_argument(
        "--ratio-test",
        choices=("clopper-pearson", "poisson"),
        default="clopper-pearson",
        help="how an event's two counts become a bound: two one-sided Clopper-Pearson bounds "
        "(conservative) or the exact joint test on Poissonised counts (tighter; its bound "
        "exceeds a mechanism that sits exactly on its claim at close to 1 - confidence, see "
        "docs/audit.md)",
    )
    add_flags(
        p,
        pool="also test pooled pairs (every pair's events summed; sound, see docs/audit.md)",
        no_float_bits="distribution verdict only: do not search floating-point bit cells",
    )
    p.add_argument(
        "--profile",
        action=argparse.BooleanOptionalAction,
        help="also audit the privacy profile epsilon(delta) (on when the claim has delta > 0)",
    )
    add_flags(
        p,
        force="run even when the estimated time exceeds 3 hours, or when the claim is too large "
        "for --samples to refute",
        sequential="anytime-valid sequential audit: stages on a doubling schedule of sample sizes "
        "(--samples is the budget), stops at the first stage that refutes the claim or when "
        "no remaining stage could (see docs/audit.md)",
        delta_event="for a claim with delta > 0, also estimate the event chosen for the largest "
        "lower bound on delta at the claimed epsilon (one more event in the Bonferroni family)",
        exact="also print the white-box exact epsilon for the pairs (built-ins)",
    )
    p.add_argument(
        "--run-dir",
        metavar="RUN",
        help="audit the mechanism(s) this run released through (from its config.json and "
        "its system's audit targets); writes RUN/audit.json. Takes the audit's own options "
        "(--samples, --confidence, --seed, --ratio-test, --pool, --no-float-bits, --profile, "
        "--force, --sequential, --delta-event), --overwrite and --json; says its estimated "
        "time first where a progress bar shows (a person watches stderr)",
    )
    add_flags(
        p,
        no_progress="no progress bar (none is drawn anyway when stderr is not a terminal)",
        overwrite="--run-dir: replace the run's earlier audit.json",
    )
    p.add_argument(
        "--env-module",
        metavar="MODULE",
        help="with --run-dir of a run on your own Gymnasium env: import this module first (its "
        "config names the env; a run directory never makes the auditor import code by itself)",
    )
    evidence_args(p)  # --run-dir is verified against its manifest before its config is read
    add_flags(p, json="print the AuditResult as JSON")
    p.set_defaults(func=run)


def _user_mechanism(spec: str, params: dict[str, Any]) -> Any:
    obj = systems.resolve(spec, "--mechanism")
    if isinstance(obj, type) or (callable(obj) and not hasattr(obj, "privatize")):
        try:
            obj = obj(**params)
        except TypeError as exc:
            kind = "a factory accepting the --param arguments"
            kind = kind if params else "a zero-argument factory"
            way = ""
            if not params and not isinstance(obj, type) and _needs_an_argument(obj):
                way = (  # diffprivlib's mech.randomise, an OpenDP measurement, def f(v)
                    "; it takes one value per call: audit it with --scalar --mechanism "
                    f"{spec} --epsilon E --domain LOW:HIGH (the library's own claim and inputs)"
                )
            detail = " ".join(str(exc).split())  # one line: pybind11 lists its overloads
            raise UserCodeError(
                f"--mechanism {spec!r} must be a mechanism object or {kind}: {detail}{way}"
            ) from exc
        except LdpAuditError:
            raise  # already names the parameter and the value
        except Exception as exc:  # noqa: BLE001 - user code
            given = " with --param " + ", ".join(f"{k}={v!r}" for k, v in params.items())
            raise UserCodeError(
                f"--mechanism {spec!r}: building the mechanism{given if params else ''} raised "
                f"{type(exc).__name__}: {exc}"
            ) from exc
    elif params:
        raise InvalidParameterError(
            f"--param needs a class or factory, but --mechanism {spec!r} is an object"
        )
    from ldp_audit.audit.mechanism import check_mechanism

    try:
        check_mechanism(obj)
    except InvalidParameterError as exc:  # e.g. math:pi, a float: name the option and its text
        raise type(exc)(f"--mechanism {spec!r}: {exc}") from None
    return obj


def _needs_an_argument(fn: Any) -> bool:
    """Whether ``fn()`` is refused by its signature (a function of one value, not a factory).
    Called once ``fn()`` raised TypeError: a compiled function with no signature to read
    (PyDP's ``mech.add_noise``, a pybind11 method) raised it for the missing argument."""
    try:
        inspect.signature(fn).bind()
    except TypeError:
        return True
    except ValueError:  # no signature to read: compiled, its own call refused no arguments
        return True
    return False


def _user_pairs(spec: str) -> list[Any]:
    obj = systems.resolve(spec, "--pairs")
    if callable(obj):
        try:
            obj = obj()
        except Exception as exc:  # noqa: BLE001 - user code
            raise UserCodeError(
                f"--pairs {spec!r}: the pairs factory raised {type(exc).__name__}: {exc}"
            ) from exc
    try:
        return list(obj)
    except TypeError:
        raise InvalidParameterError(
            f"--pairs {spec!r} must be a list of (x, x2) pairs or a factory returning one"
        ) from None


def _user_statistic(spec: str, what: str = "--statistic", sig: str = "stat") -> Any:
    """``--statistic MODULE:FUNCTION`` (or ``--event``'s): the named callable (checked on the
    outputs by the audit itself: shape, real, finite; raising is a ``UserCodeError``)."""
    fn = systems.resolve(spec, what)
    if not callable(fn):
        raise InvalidParameterError(
            f"{what} {spec!r} must name a function {sig}(outputs, x, x_prime), got "
            f"{type(fn).__name__}"
        )
    return fn


def _event(text: str) -> tuple[list[float], list[float], Any]:
    """``--event X;X2;S``: the inputs (comma-separated numbers) and S, ``MODULE:FUNCTION`` or
    output rows separated by ``|`` (each comma-separated numbers)."""
    parts = text.split(";")
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(
            f"--event must be X;X2;S (e.g. '0;7;0' or '0;7;mymodule:event'), got {text!r}"
        )

    def reals(t: str) -> list[float]:
        return [parse_real(v, "--event") for v in t.split(",")]

    s = parts[2].strip()
    rows = s if re.fullmatch(r"[\w.]+:[\w.]+", s) else [reals(r) for r in s.split("|")]
    return reals(parts[0]), reals(parts[1]), rows


def _given(args: argparse.Namespace) -> set[str]:
    return {k for k in _OPTION if hasattr(args, k)}


def _options(keys: Any, sep: str = ", ") -> str:
    return sep.join(_OPTION[k] for k in keys)


def _refuse(given: set[str], allowed: Any, why: str) -> None:
    """The mechanism options given that are not ``allowed``, refused (named, sorted)."""
    if given - set(allowed):
        raise InvalidParameterError(f"{_options(sorted(given - set(allowed)))} {why}")


def build_mechanism(args: argparse.Namespace) -> Any:
    """The mechanism named by ``--mechanism`` and its options (unused options are refused)."""
    name = args.mechanism
    given = _given(args)
    if args.scalar:
        return _scalar_mechanism(args, given)
    _refuse(given, given - {"domain", "seeding"}, "can only be used with --scalar")
    if name not in BUILTIN:
        if ":" not in name:
            close = closest(name, BUILTIN)
            hint = f" (did you mean {close!r}?)" if close else ""
            raise InvalidParameterError(
                f"unknown --mechanism {name!r}{hint}; built-ins: {', '.join(BUILTIN)}; or "
                "MODULE:ATTR for your own mechanism (a non-private baseline has no claim to "
                "audit)"
            )
        _refuse(
            given,
            {"param"},
            "cannot be used with a MODULE:ATTR mechanism: its own epsilon (and delta) attributes "
            "are the claim; pass arguments to its class or factory with --param KEY=VALUE",
        )
        return _user_mechanism(name, unique_keys(getattr(args, "param", ()), "--param"))
    cls, uses = _USES[name]
    _refuse(
        given, uses, f"cannot be used with --mechanism {name} (it uses {_options(sorted(uses))})"
    )
    if getattr(args, "epsilon", None) == 0.0:  # 0 is a claim only a --scalar library makes
        raise InvalidParameterError(
            f"--epsilon must be a finite number in (0, inf) for --mechanism {name}, got 0"
        )
    from ldp_audit import mechanisms as mech

    clip = getattr(args, "clip", 1.0)
    if name == "gaussian":
        delta = getattr(args, "delta", 1e-5)
        if delta < sys.float_info.min:  # 0 is a claim only a --scalar library makes
            raise InvalidParameterError(
                f"--delta must be a finite number in (0, 1) (a normal double, >= "
                f"{sys.float_info.min:g}) for --mechanism gaussian, got {delta!r}"
            )
        if hasattr(args, "sigma") == hasattr(args, "epsilon"):
            raise InvalidParameterError(
                "--mechanism gaussian needs exactly one of --sigma (the noise; epsilon follows "
                "from sigma, --clip and --delta) or --epsilon (sigma is calibrated to it)"
            )
        if hasattr(args, "sigma"):
            sigma, given = args.sigma, f"--sigma {args.sigma!r}"
        else:
            sigma = mech.analytic_gaussian_sigma(args.epsilon, 2.0 * clip, delta)
            given = f"--epsilon {args.epsilon!r} (calibrated: sigma = {sigma!r})"
        try:  # its bounds are on noise_multiplier = sigma / clip: said in the options given
            return mech.Gaussian(clip=clip, noise_multiplier=sigma / clip, delta=delta)
        except InvalidParameterError as exc:
            raise InvalidParameterError(
                f"--mechanism gaussian with {given} and --clip {clip!r}: {exc}"
            ) from None
    if not hasattr(args, "epsilon"):
        raise InvalidParameterError(f"--epsilon is required for --mechanism {name}")
    kw = {"k" if k == "categories" else k: getattr(args, k) for k in given}
    if "clip" in uses:
        kw["clip"] = clip
    return getattr(mech, cls)(**kw)


def _scalar_mechanism(args: argparse.Namespace, given: set[str]) -> Any:
    spec = args.mechanism
    if ":" not in spec:
        raise InvalidParameterError(
            f"--scalar needs --mechanism MODULE:ATTR (a scalar function), got {spec!r}"
        )
    uses = ("epsilon", "delta", "domain", "seeding")
    _refuse(given, uses, f"cannot be used with --scalar (it uses {_options(uses)})")
    missing = [o for o in ("epsilon", "domain") if o not in given]
    if missing:
        raise InvalidParameterError(
            f"--scalar needs {_options(missing, ' and ')} (the library's own "
            "claim and the inputs it covers)"
        )
    from ldp_audit.audit import from_scalar

    fn = systems.resolve(spec, "--mechanism")
    return from_scalar(
        fn,
        epsilon=args.epsilon,
        delta=getattr(args, "delta", 0.0),
        domain=args.domain,
        seeding=getattr(args, "seeding", "none"),
        name=spec,
    )


def run(args: argparse.Namespace) -> int:
    """Run the audit; print the summary (or JSON); return 1 on a violation, else 0."""
    if args.run_dir is not None:
        return _run_dir(args)
    if args.mechanism is None:
        raise InvalidParameterError(
            "--mechanism is required (or --run-dir RUN to audit what a run released through)"
        )
    evidence = ("overwrite", "expect_head", "expect_root", "allow_unverified", "env_module")
    run_dir_only(args, evidence, "to --run-dir (a run's evidence)")
    mechanism = build_mechanism(args)
    if args.exact:  # its probe draws 20,000 outputs of each input at once: refused before work
        d = int(args.dim or getattr(mechanism, "dim", 1) or 1)
        check_resources(audit_probe_estimates(d), force=args.force, cli=True)
    pairs = _user_pairs(args.pairs) if args.pairs is not None else None
    statistics = [_user_statistic(spec) for spec in args.statistic or ()]
    event = args.event
    if event is not None and isinstance(event[2], str):
        event = (*event[:2], _user_statistic(event[2], "--event", "event"))
    from ldp_audit.audit import audit, default_pairs, exact_epsilon

    claim = getattr(mechanism, "epsilon", None)
    if isinstance(claim, (int, float)) and math.isfinite(claim) and not args.force:
        delta = check_delta_range(getattr(mechanism, "delta", None) or 0.0, "mechanism.delta")
        _refuse_untestable_claim(args, float(claim), delta)
    if (
        pairs is None
        and callable(getattr(mechanism, "privatize", None))  # else the audit says what is amiss
        and not callable(getattr(mechanism, "candidate_pairs", None))
    ):
        raise InvalidParameterError(
            f"--mechanism {args.mechanism} declares no input domain (no candidate_pairs(dim) "
            "method), so the audit does not know which inputs to compare: give --pairs "
            "MODULE:ATTR naming a list of (x, x2) neighbouring inputs (or a function returning "
            "one), e.g. --pairs mypairs:PAIRS with PAIRS = [([0.0], [1.0])] (docs/audit.md)"
        )
    if pairs is None and args.dim is not None:
        pairs = default_pairs(mechanism, args.dim)
    # before the audit: a mechanism without privacy_loss is refused before minutes of sampling
    exact = exact_epsilon(mechanism, pairs, dim=args.dim, rng=args.seed) if args.exact else None
    result = audit(
        mechanism,
        pairs,
        samples=args.samples,
        rng=args.seed,
        dim=args.dim,
        progress=show_progress(args),  # a bar only where a person watches (--no-progress)
        statistics=statistics or None,
        event=event,
        **audit_options(args),
    )
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


def _refuse_untestable_claim(args: argparse.Namespace, claim: float, delta: float) -> None:
    """Refuse (exit 2) a claim no bound of this audit could exceed: the fixed-sample ceiling
    at the claim's ``delta`` (an event's bound is ``ln((p1 - delta) / p2)``, ``p1 <= 1``).
    With ``--sequential`` no stage could refute it exactly then: ``sequential_plan`` merges away
    the stages that could not, down to one stage with the whole budget at the full level."""
    from ldp_audit.audit import estimation_samples, max_refutable_epsilon

    test = args.ratio_test if args.event else None  # an event: every sample estimates
    n_est = args.samples if test else estimation_samples(args.samples)
    ceiling = max_refutable_epsilon(n_est, args.confidence, args.pool, test, delta)
    where = f"--samples {args.samples} ({n_est} estimation samples per input)"
    if args.sequential:
        where = f"any stage of the --sequential budget {args.samples}"
    if claim >= ceiling:
        which = "--epsilon" if hasattr(args, "epsilon") else "the mechanism's epsilon"
        which += f" = {claim:g}"
        if delta:
            which += f" at {'--delta' if hasattr(args, 'delta') else 'its delta'} = {delta:.10g}"
            where += " (a bound is ln((p1 - delta) / p2), p1 <= 1)"
        raise InvalidParameterError(
            f"{which} cannot be refuted with {where}: no bound can exceed "
            f"{ceiling:.3g}, so the audit would be vacuous; refuting it needs more than "
            f"e^epsilon{' / (1 - delta)' if delta else ''} samples per input (pass --force to "
            "run it anyway)"
        )


def _run_dir(args: argparse.Namespace) -> int:
    """``audit --run-dir RUN`` (ldp_audit.cli.system_cmd.audit_run_dir), mechanism options
    refused: the run's config says what was released."""
    extra = [_OPTION[k] for k in _given(args)] + [
        f"--{dest}"
        for dest in ("mechanism", "pairs", "dim", "scalar", "exact", "statistic", "event")
        if getattr(args, dest) not in (None, False, [])
    ]
    if extra:
        raise InvalidParameterError(
            f"{', '.join(sorted(extra))} cannot be used with --run-dir: the run's config says "
            "which mechanisms it released through (--run-dir takes the audit's own options, "
            "--overwrite and --json)"
        )
    if args.env_module is not None:  # named by the user, never by the run directory
        from ldp_audit.training.gym_envs import import_env_module

        import_env_module(args.env_module)
    return audit_run_dir(args)
