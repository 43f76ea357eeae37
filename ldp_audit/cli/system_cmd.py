"""The one door of the systems (:mod:`ldp_audit.systems`): every system's ``train``,
``reproduce`` and ``attack`` subcommands, generated from its ``SystemSpec``.

- :func:`register_systems` adds ``ldp-audit train NAME`` (and ``reproduce NAME``) for every
  registered system: the scaffolding (``--seed``, ``--out``, run modes, ``--json``,
  ``--no-progress``, ``--force``), one option per config field (:mod:`ldp_audit.config`), and
  what the spec's :class:`~ldp_audit.systems.Command` declares (options that are not fields,
  the config they build, the default folder, sizes, text). A system without a ``Command`` gets
  ``--set KEY=VALUE`` too (``VALUE`` a JSON literal; the config validates it). A plug-in's own
  ``cli`` hook replaces the generated commands.
- :func:`register_attacks` adds ``ldp-audit attack NAME --run-dir RUN`` for every attack a
  registered system declares (with its ``attack_commands`` options) that has no subcommand of
  its own.
- :func:`audit_run_dir` is ``ldp-audit audit --run-dir RUN``: the mechanisms the run released
  through (``System.audit_targets``), audited, written to the run's ``audit.json``.

A plug-in that fails to load, or whose CLI hook raises, is left out with one warning line on
stderr: the rest of the command line works.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import inspect
import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ldp_audit import systems
from ldp_audit.backends import backend_options
from ldp_audit.cli.audit_time import estimate_seconds, say
from ldp_audit.cli.evidence import check_evidence, evidence_args, verdict_code, with_evidence
from ldp_audit.cli.types import (
    DefaultsHelpFormatter,
    add_backend_arguments,
    add_flags,
    add_int,
    add_run_mode_arguments,
    check_not_inside_run,
    check_out_for_mode,
    check_workers,
    confidence,
    key_value,
    resolve_device_option,
    run_mode,
    show_progress,
)
from ldp_audit.config import add_arguments, from_args, given_config, option_name, options_named
from ldp_audit.errors import InvalidParameterError, LdpAuditError, RunDirectoryError, UserCodeError
from ldp_audit.limits import add_force_argument, check_resources, forcing
from ldp_audit.rundir import RunDir, check_new_file, to_jsonable, write_artifact
from ldp_audit.rundir.files import write_json_file
from ldp_audit.rundir.paths import (
    check_parent_writable,
    check_report_dir,
    is_run_dir,
    report_written,
    timestamped_dir,
)
from ldp_audit.rundir.seal import seal_document

_WARNED: set[str] = set()


def _warn(key: str, text: str) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        print(f"ldp-audit: warning: {text}", file=sys.stderr)


def _warn_broken() -> None:
    for name, why in systems.broken().items():
        _warn(f"broken:{name}", f"system plug-in {name!r} is unavailable: {why}")


def _plug_in(s: Any, hook: str, what: str, ref: Any, *args: Any) -> None:
    """A system's CLI hook ``ref`` (``"module:function"`` or a function) called with ``args``;
    when it raises, one warning ("its ``what`` are unavailable"), never a crash."""
    try:
        systems.call(ref, f"system {s.name!r} {hook}")(*args)
    except Exception as exc:  # noqa: BLE001 - a plug-in's hook
        why = f"{type(exc).__name__}: {exc}"
        _warn(f"{hook}:{s.name}", f"system {s.name!r}: its {what} are unavailable: {why}")


def register_systems(train_subparsers: Any, reproduce_subparsers: Any, only: Any = None) -> None:
    """Every registered system's ``train`` (and ``reproduce``) subcommands: its own ``cli``
    hook, or the generated ones. ``only``: the word after ``train`` / ``reproduce`` on the
    command line; the system of that name is registered alone when it registers that word
    (``ldp-audit train pgc-a3c`` does not generate the other systems' options), else all."""
    _warn_broken()
    done = set()
    for s in [x for x in systems.systems() if x.name == only] + systems.systems():
        if s.name in done or (done and only in {*train_subparsers.choices,
                                                *reproduce_subparsers.choices}):  # fmt: skip
            continue
        done.add(s.name)
        hook = getattr(s, "cli", None) or functools.partial(_register_generic_train, s=s)
        _plug_in(s, "cli", "commands", hook, train_subparsers, reproduce_subparsers)


# ----------------------------------------------------------------------------------------------
# Generic train / reproduce
# ----------------------------------------------------------------------------------------------


def _out_help(c: Any, what: str) -> str:
    if c.out is None:
        return f"write a {what} here"
    return (
        f"{what} to write (default: a new {c.out.replace('{', '<').replace('}', '>')}-<timestamp>)"
    )


def _add_common(p: Any, c: Any, json_help: str, cls: Any, title: str, workers: Any = None) -> None:
    """The tail every generated train / reproduce command shares: ``--json``,
    ``--no-progress``, the backends (``workers`` not None), ``--force`` (with ``sizes``) and
    the options of the config ``cls``."""
    add_flags(p, json=json_help, no_progress="no progress bar on stderr")
    if workers is not None:  # where the grid runs
        add_backend_arguments(p, workers=workers)
    if c.sizes:
        add_force_argument(p)
    if cls is not None:
        add_arguments(p, cls, skip=c.skip, group_title=f"{title} ({cls.__name__}; generated)")


def _command(sub: Any, s: Any, verb: str, short: str, description: str | None) -> tuple[Any, Any]:
    """``verb NAME``'s parser for the system ``s`` as its ``Command`` declares it (``short`` and
    ``description``: the defaults), with the command's own options; and that ``Command``."""
    c = getattr(s, f"{verb}_command", None) or systems.Command()
    p = sub.add_parser(
        s.name,
        help=c.help or short,
        description=c.description or description,
        formatter_class=DefaultsHelpFormatter,
    )
    _add_options(p, c, f"system {s.name!r} {verb} options")
    return p, c


def _register_generic_train(tsub: Any, rsub: Any, s: Any) -> None:
    summary = getattr(s, "summary", "") or f"the {s.name} system"
    described = (
        f"Train one run of {summary} (each config field is an option generated from the config "
        "class, with its docstring, default and bounds; --set KEY=VALUE, VALUE read as JSON, "
        "reaches any field)."
    )
    p, c = _command(tsub, s, "train", summary, described)
    light = _light_config(s) and dataclasses.is_dataclass(s.config_class)
    cls = s.config_class if light else None
    if c.set_option:
        fields = ", ".join(f.name for f in dataclasses.fields(cls) if f.init) if cls else ""
        p.add_argument(
            "--set",
            type=key_value("--set"),
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help=f"config fields: {fields}" if cls else "a config field",
        )
    add_int(p, "--seed", 0, default=0, help="master seed")
    p.add_argument("--out", metavar="RUN_DIR", help=_out_help(c, "run directory"))
    add_run_mode_arguments(p, c)
    _add_common(p, c, "print the result as JSON on stdout", cls, "the run's config")
    p.set_defaults(func=_generic_train, system_name=s.name)
    if not getattr(s, "reproduce", None):
        return
    r, c = _command(rsub, s, "reproduce", f"reproduce {summary}", None)
    r.add_argument("--out", required=c.out is None, help=_out_help(c, "report folder"))
    add_flags(r, overwrite="replace an earlier report in --out")
    grid = c.config is not None
    cls = systems.resolve(c.config, f"system {s.name!r} reproduce config") if grid else None
    title = "the reproduction's config"
    _add_common(r, c, "print the results as JSON on stdout", cls, title, workers=grid)
    r.set_defaults(func=_generic_reproduce, system_name=s.name)


def _light_config(s: Any) -> bool:
    """Whether the config class is importable now without surprises (the help lists fields)."""
    try:
        return isinstance(s.config_class, type)
    except LdpAuditError:
        return False


def _before_work(
    args: argparse.Namespace, s: Any, c: Any, cfg: Any, command: str, **kw: Any
) -> None:
    """What every generated command checks before any work: the sizes (``--force``) and the
    device a config names (cuda without CUDA: exit 2; auto: said on stderr)."""
    if c.sizes:
        est = systems.call(c.sizes, f"system {s.name!r} sizes")(cfg, **kw)
        check_resources(est, force=args.force, cli=True)
    if isinstance(getattr(cfg, "device", None), str):
        resolve_device_option(cfg.device, command)


def _out(args: argparse.Namespace, c: Any, cfg: Any) -> str | None:
    """``--out``, else the default folder: ``c.out`` formatted with the config's fields."""
    if args.out is not None or c.out is None:
        return args.out
    fields = dataclasses.fields(cfg) if dataclasses.is_dataclass(cfg) else ()
    return timestamped_dir(c.out.format(**{f.name: getattr(cfg, f.name) for f in fields}))


@contextlib.contextmanager
def _running(args: argparse.Namespace) -> Iterator[None]:
    """While a command runs: ``--force`` reaches the trainers (:func:`ldp_audit.limits.forcing`;
    a library warning is one ``WARNING:`` line for every command: ``ldp_audit.cli._main``)."""
    with forcing(bool(getattr(args, "force", False))):
        yield


def _add_options(p: Any, c: Any, what: str) -> None:
    """``c.options(p)``; the command then forwards ``c.forward``, by default every option
    ``c.options`` added but ``--force`` (none when ``c.from_args`` reads them)."""
    n = len(p._actions)
    if c.options:
        systems.call(c.options, what)(p)
    own = () if c.from_args else tuple(a.dest for a in p._actions[n:] if a.dest != "force")
    p.set_defaults(_forward=own if c.forward is None else c.forward)


def _forwarded(args: argparse.Namespace) -> dict[str, Any]:
    return {k: getattr(args, k) for k in args._forward}


def _dumps(doc: Any) -> str:
    return json.dumps(to_jsonable(doc), indent=1, allow_nan=False)


def _generic_train(args: argparse.Namespace) -> int:
    s = systems.get(args.system_name)
    c = s.train_command
    kw = given_config(s.config_class, args, getattr(args, "set", None) or ())
    with options_named(s.config_class, args._forward):  # they name --actor-lr, not actor_lr
        return _train(args, s, c, kw)


def _train(args: argparse.Namespace, s: Any, c: Any, kw: dict[str, Any]) -> int:
    if c.from_args:
        cfg = systems.call(c.from_args, f"system {s.name!r} from_args")(args, kw)
    else:  # validated by the config itself, before any work
        cfg = s.config_from_dict(kw) if c.set_option else s.config_class(**kw)
    if not isinstance(cfg, s.config_class):  # the config names the system that trains it
        s = next(
            x for x in systems.systems() if _light_config(x) and isinstance(cfg, x.config_class)
        )
        c = s.train_command
    if getattr(args, "threads", None):  # fedrl's torch threads (2**63 - 1: exit 3)
        check_workers(args.threads, "--threads")
    _before_work(args, s, c, cfg, f"train {s.name}", cli=True)
    mode = run_mode(args)
    if mode == "new":
        args.out = _out(args, c, cfg)
    check_out_for_mode(args.out, mode, c)
    with _running(args):
        res = s.train(
            cfg,
            seed=args.seed,
            run_dir=args.out,
            progress=show_progress(args),
            run_mode=mode,
            **_forwarded(args),
        )
    run_dir = str(res.run_dir) if res.run_dir is not None else None
    if args.json:
        doc = {"algorithm": s.name, "seed": res.seed, "seconds": res.seconds, "run_dir": run_dir,
               "privacy": res.privacy}  # fmt: skip
        doc.update(res.metrics if c.flat_json else {"metrics": res.metrics})
        print(_dumps(doc))
        return 0
    if c.show:
        lines = systems.call(c.show, f"system {s.name!r} show")(res)
    else:
        lines = [f"  privacy: {json.dumps(to_jsonable(res.privacy), allow_nan=False)}"]
    print(f"train {s.name}: seed {res.seed}, {res.seconds:.1f} s")
    for line in lines + ([f"  run directory: {run_dir}"] if run_dir is not None else []):
        print(line)
    return 0


def _generic_reproduce(args: argparse.Namespace) -> int:
    s = systems.get(args.system_name)
    c = s.reproduce_command
    fn = systems.call(s.reproduce, f"system {s.name!r} reproduce")
    command = "ldp-audit " + " ".join(sys.argv[1:] or ["reproduce", s.name])
    kw = {"progress": show_progress(args), "command": command, **_forwarded(args)}
    if getattr(args, "workers", None):
        check_workers(args.workers)  # far above the cores: refused before any work
    if c.config is None:  # its own options (forwarded), the backends and --overwrite
        out = _out(args, c, None)
        run = functools.partial(
            fn, overwrite=args.overwrite, backend=args.backend, address=args.address, **kw
        )
    else:
        cls = systems.resolve(c.config, f"system {s.name!r} reproduce config")
        with options_named(cls, args._forward):  # the options given; the others: defaults
            settings = from_args(cls, args)
            if getattr(settings, "threads", None):  # fedrl's torch threads (2**63 - 1: exit 3)
                check_workers(settings.threads, "--threads")
            where = backend_options(args)  # --backend/--address/--workers: usage errors first
            _before_work(args, s, c, settings, f"reproduce {s.name}", workers=args.workers or 1)
        out = _out(args, c, settings)
        run = functools.partial(fn, settings, **kw, **where)
    check_not_inside_run(out, "--out")  # before the experiment
    check_report_dir(out, overwrite=args.overwrite)  # a new folder's parent probed
    named = options_named(cls if c.config is not None else None, args._forward)
    with _running(args), report_written(Path(out)), named:  # no half report; options named
        doc = run(out=out)  # --force reaches the worker processes
    print(_dumps(doc) if args.json else f"reproduce {s.name}: report written to {out}")
    return 0


# ----------------------------------------------------------------------------------------------
# Generic attacks on a run directory
# ----------------------------------------------------------------------------------------------


def register_attacks(attack_subparsers: Any) -> None:
    """The registered systems' own attack subcommands (``attack_cli``), then ``attack NAME
    --run-dir RUN`` for every attack a system declares that has no subcommand yet."""
    _warn_broken()
    for s in systems.systems():
        hook = getattr(s, "attack_cli", None)
        if hook is not None:
            _plug_in(s, "attack_cli", "attack commands", hook, attack_subparsers)
    owners: dict[str, list[Any]] = {}
    for s in systems.systems():
        for name in s.attacks:
            owners.setdefault(name, []).append(s)
    for name, who in owners.items():
        if name in attack_subparsers.choices:
            continue
        if not name.replace("-", "").replace("_", "").isalnum():
            _warn(f"attack:{name}", f"attack name {name!r} of {who} is not a CLI word; skipped")
            continue
        systems_of = ", ".join(x.name for x in who)
        commands = [x.attack_commands[name] for x in who if name in _attack_commands(x)]
        c = commands[0] if commands else systems.Command()
        a = attack_subparsers.add_parser(
            name,
            help=c.help or f"attack a run directory ({systems_of} runs)",
            description=c.description
            or f"The {name!r} attack of the {systems_of} system(s) on a run directory: writes "
            f"RUN_DIR/{_artifact_name(who[0], name)} (or --out FILE). Exit 1 when the attack "
            "beats the guarantee beyond its confidence interval.",
        )
        a.add_argument("--run-dir", required=True, help="the run directory to attack")
        add_int(a, "--seed", 0, default=0, help="attack seed")
        a.add_argument("--confidence", type=confidence(), default=0.95,
                       help="confidence of the attack's intervals, in (0, 1)")  # fmt: skip
        _add_options(a, c, f"attack {name!r} options")
        a.add_argument("--out", help="write the result JSON here instead")
        add_flags(
            a,
            overwrite="replace an earlier result",
            json="print the result as JSON on stdout",
            no_progress="no progress bar on stderr",  # shadow training takes minutes
        )
        if c.sizes:
            add_force_argument(a)
        evidence_args(a)
        a.set_defaults(func=_generic_attack, attack_name=name)


def _attack_commands(system: Any) -> Any:
    return getattr(system, "attack_commands", None) or {}


def _option(key: str) -> str:
    """The command-line option of an attack's keyword (``n_shadow`` is ``--shadow``)."""
    return {"n_shadow": "--shadow"}.get(key, option_name(key))


@contextlib.contextmanager
def _cli_words(kw: dict[str, Any]) -> Iterator[None]:
    """A refusal raised inside a run-directory attack in its Python words (``n_shadow=5000``,
    ``force=True``) says the command line's (``--shadow 5000``, ``--force``)."""
    try:
        yield
    except InvalidParameterError as exc:
        text = str(exc).replace("pass force=True", "pass --force")
        for key, value in kw.items():
            text = text.replace(f"{key}={value}", f"{_option(key)} {value}")
        if text == str(exc):
            raise
        raise InvalidParameterError(text) from None


def _artifact_name(system: Any, attack: str) -> str:
    """``attack_<name>.json``; names of one function share the first one's (FRD's ``attack
    frd`` is its ``dynamics``: ``attack_dynamics.json``)."""
    first = next(k for k, v in system.attacks.items() if v == system.attacks[attack])
    return f"attack_{first.replace('-', '_').lower()}.json"


def _check_artefact(target: Path, overwrite: bool, hint: str = "") -> None:
    """A run's named artefact is never silently replaced, and a read-only run is refused,
    before any work."""
    if target.exists() and not overwrite:
        raise RunDirectoryError(
            f"{target} already exists (a run's named artefact is never silently replaced); "
            f"pass --overwrite to replace it{hint}"
        )
    check_parent_writable(target, "--run-dir")


def _sealable(args: argparse.Namespace, run: Path, own: list[str]) -> bool:
    """Whether an analysis of ``run`` may be sealed for it: the evidence it was computed from
    verified (its only problems, if any, are the artefacts ``own`` it replaces: the way out of
    a write killed before its seal). Read with ``--allow-unverified`` from evidence that did
    not verify (an edited config.json or transcript, put back later), it is written unsealed
    and said so: sealed, it was read afterwards as the verified run's verdict (session 56)."""
    res = args._evidence
    mine = tuple(f"{run / n} " for n in own)
    if res.evidence == "unauthenticated":  # no key here: the run's key seals, or nothing does
        why = "this process holds no ledger key (the run's key seals its analyses)"
    elif all(p.startswith(mine) for p in res.problems) if mine else res.ok:
        return True
    else:
        why = "this analysis was computed from evidence that did not verify"
    print(
        f"not sealed: {why}; every reader of the run (or `report RUN FILE`) flags it until it "
        f"is run again on verified evidence, with the run's key",
        file=sys.stderr,
    )
    return False


def _generic_attack(args: argparse.Namespace) -> int:
    return attack_run_dir(args, args.attack_name, _forwarded(args))


def attack_run_dir(
    args: argparse.Namespace,
    name: str,
    kw: dict[str, Any],
    *,
    plot: Any = None,
) -> int:
    """``attack NAME --run-dir RUN``: the run's system's ``name`` attack with keywords ``kw``
    (each a parameter of that attack: refused otherwise), its result written to ``--out`` (sealed
    for the run) or to the run's named artefact; the sizes of the system's
    ``attack_commands[name]`` checked (with ``--force``) and the evidence verified before any
    work."""
    if not is_run_dir(args.run_dir):
        raise RunDirectoryError(
            f"--run-dir {args.run_dir!r} is not a run directory (no config.json)"
        )
    rd = RunDir(args.run_dir)
    system = rd.system
    if name not in system.attacks:  # another system's run: named before anything else is read
        have = [x.name for x in systems.systems() if name in x.attacks]
        raise RunDirectoryError(
            f"--run-dir {args.run_dir!r} is a {system.name!r} run; `attack {name}` attacks "
            f"{', '.join(have) or 'no system'} runs (--run-dir must be a "
            f"{' or '.join(have) or 'no'} run). The commands that fit this run: "
            + "; ".join(rd.commands())
        )
    if args.out:
        check_not_inside_run(args.out, "--out")
        check_new_file(args.out, name="--out", overwrite=args.overwrite)
    else:
        hint = ", or write this result elsewhere with --out FILE"
        _check_artefact(rd.path / _artifact_name(system, name), args.overwrite, hint)
        if kw.get("audit_samples"):  # FedRL's audit beside the attack writes audit.json
            _check_artefact(rd.path / "audit.json", args.overwrite, hint)
    sizes = getattr(_attack_commands(system).get(name), "sizes", None)
    if sizes:  # before any work (--force runs anyway)
        est = systems.call(sizes, f"attack {name!r} sizes")(rd.train_config, **kw)
        check_resources(est, force=args.force, cli=True)
    # the evidence (manifest, hashes, ledger against its anchor): refused unless
    # --allow-unverified, as for every reader of a run
    args._evidence = check_evidence(args)
    rd = RunDir(args.run_dir)  # read again, verified
    scorer = systems.call(system.attacks[name], f"system {system.name!r} attack {name!r}")
    rd.transcript()  # checked against the system's schema before any work (errors name it)
    takes = inspect.signature(scorer).parameters
    for key, value in kw.items():
        if key not in takes and value is not None:
            raise InvalidParameterError(
                f"{_option(key)} does not apply to --run-dir {args.run_dir!r}: a "
                f"{system.name!r} run, whose {name} attack takes no {key}"
            )
    kw = {k: v for k, v in kw.items() if k in takes}
    if "force" in takes:  # its own size checks (e.g. the shadows of a dynamics attack)
        kw["force"] = bool(getattr(args, "force", False))
    what = f"system {system.name!r}: its attack {name!r}"
    with _running(args), _cli_words(kw):
        res = systems.call_user(scorer, what, rd.path, seed=args.seed, confidence=args.confidence,
                                progress=show_progress(args), **kw)  # fmt: skip
    if not all(hasattr(res, a) for a in ("violation", "to_dict", "summary")):
        raise UserCodeError(f"{what} returned {type(res).__name__}, not an AttackResult")
    # an audit run beside the attack (FedRL's output mechanism): its violation counts, its
    # document is a named artefact of the run ("artefacts", written only without --out)
    extra = getattr(res, "extra", None) if isinstance(getattr(res, "extra", None), dict) else {}
    side, beside = extra.pop("artefacts", {}), extra.get("audit") or {}
    violation = bool(res.violation) or bool(beside.get("violation"))
    d = to_jsonable(with_evidence({**res.to_dict(), "violation": violation}, args))
    own = [_artifact_name(system, name), *side] if not args.out else []
    seal = _sealable(args, rd.path, own)
    if args.out:
        if seal:  # about this run: sealed for it (report RUN FILE)
            d = seal_document(d, rd.path)
        write_json_file(Path(args.out), d, replace=args.overwrite)  # whole, or not at all
    else:
        for file, doc in [(own[0], d), *side.items()]:
            write_artifact(rd.path, file, to_jsonable(doc), overwrite=args.overwrite, seal=seal)
    if plot is not None:
        plot(res)
    if args.json:
        print(json.dumps(d, indent=1, allow_nan=False))
    else:  # the verdict line starts with what the evidence was when not authenticated
        ev = args._evidence.evidence
        print(("" if ev == "authenticated" else f"[{ev.upper()} EVIDENCE] ") + res.summary())
        if beside:
            print("audit: " + beside.get("summary", beside.get("skipped", "")))
    return verdict_code(args, violation)


# ----------------------------------------------------------------------------------------------
# audit --run-dir
# ----------------------------------------------------------------------------------------------


def audit_options(args: argparse.Namespace) -> dict[str, Any]:
    """The audit's own options as :func:`ldp_audit.audit.audit` keywords: the same for
    ``audit --mechanism`` and ``audit --run-dir``."""
    own = ("confidence", "pool", "profile", "ratio_test", "force", "sequential", "delta_event")
    return {"float_bits": not args.no_float_bits, **{k: getattr(args, k) for k in own}}


def audit_run_dir(args: argparse.Namespace) -> int:
    """``ldp-audit audit --run-dir RUN``: audit each mechanism the run released through.

    Exit 0: no violation found (which proves nothing more); 1: a violation; 2: nothing the
    one-shot auditor can audit (the message says why), or bad input.
    """
    from ldp_audit.audit import audit

    args._evidence = check_evidence(args)  # the claim is read from config.json: verified first
    rd = RunDir(args.run_dir)
    _check_artefact(rd.path / "audit.json", args.overwrite)
    own = audit_options(args)  # as for --mechanism
    runs, skipped = [], []
    for t in rd.system.audit_targets(rd.train_config):  # may refuse, with the reason
        eps = getattr(t.mechanism, "epsilon", None)
        if not isinstance(eps, (int, float)) or not math.isfinite(float(eps)):
            why = getattr(t.mechanism, "why_infinite", lambda: None)() or "no finite claim"
            skipped.append(f"{t.name}: epsilon is inf ({why}): nothing to refute")
            continue
        opts = dict(t.options)
        runs.append((t, opts.pop("pairs", None), {**own, **opts}))
    if not runs:
        what = "; ".join(skipped) if skipped else "its system declares no mechanism to audit"
        raise InvalidParameterError(
            f"--run-dir {args.run_dir!r} is a {rd.algorithm!r} run with nothing to audit: {what}."
            f" The commands that fit this run: {'; '.join(rd.commands())}"
        )
    if own["delta_event"]:
        _delta_event_targets(args, runs)
    _say_estimate(args, runs)
    entries, violation, bar = [], False, show_progress(args)
    for t, pairs, kw in runs:
        res = audit(t.mechanism, pairs, samples=args.samples, rng=args.seed, progress=bar, **kw)
        entries.append({**res.to_dict(), "target": t.name, "system": rd.algorithm})
        violation = violation or bool(res.violation)
        if not args.json:
            print(f"[{t.name}] {res.summary()}")
    if not args.json:
        for line in skipped:
            print(f"[not audited] {line}")
    seal = _sealable(args, rd.path, ["audit.json"])
    path = write_artifact(
        rd.path, "audit.json", to_jsonable(entries), overwrite=args.overwrite, seal=seal
    )
    if args.json:
        out = {"run_dir": str(rd.path), "audits": entries, "not_audited": skipped}
        print(_dumps(with_evidence(out, args)))
    else:
        print(f"wrote {path}")
    return verdict_code(args, violation)


def _delta_event_targets(
    args: argparse.Namespace, runs: list[tuple[Any, Any, dict[str, Any]]]
) -> None:
    """``--delta-event`` on a run: for the mechanisms claiming delta > 0 only (said on stderr when
    some claim pure epsilon-DP); refused before any audit when none does. It was refused at the
    first pure mechanism, after the others were audited (session 57)."""
    from ldp_audit.audit.mechanism import check_mechanism

    pure = [t.name for t, _, kw in runs if check_mechanism(t.mechanism)[1] == 0.0]
    if len(pure) == len(runs):
        raise InvalidParameterError(
            f"--delta-event needs a claim with delta > 0; every mechanism of --run-dir "
            f"{args.run_dir!r} claims pure epsilon-DP ({', '.join(pure)}): drop it"
        )
    for t, _, kw in runs:
        kw["delta_event"] = t.name not in pure
    if pure:
        print(
            f"audit: --delta-event applies to "
            f"{', '.join(t.name for t, _, kw in runs if kw['delta_event'])} (delta > 0), not to "
            f"{', '.join(pure)} (pure epsilon-DP: no delta to bound)",
            file=sys.stderr,
        )


def _say_estimate(args: argparse.Namespace, runs: list[tuple[Any, Any, dict[str, Any]]]) -> None:
    """Where a person watches (the progress bar's rule), say on stderr before the audit starts
    how long it will take: two timed pilot audits per mechanism, scaled to --samples
    (ldp_audit.cli.audit_time)."""
    if not show_progress(args):
        return
    total = pilots = 0.0
    for t, pairs, kw in runs:
        est = estimate_seconds(t.mechanism, pairs, kw, samples=args.samples, seed=args.seed)
        if est is None:
            return
        total, pilots = total + est[0], pilots + est[1]
    print(
        f"audit --run-dir: {len(runs)} mechanism(s) at --samples {args.samples}: "
        f"{say(total)} on this machine (from two pilot audits, {pilots:.0f} s; fewer "
        "--samples take proportionally less, at less power)",
        file=sys.stderr,
        flush=True,
    )
