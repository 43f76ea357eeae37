"""Systems: the one contract every trained system meets, and the one registry that lists them.

A *system* is a trainer together with what the toolkit needs to check it: its config class, a
``train`` entry point with one signature, the schema of the transcript it writes (what crossed
the trust boundary), the mechanisms it releases through (so ``ldp-audit audit --run-dir`` can
audit them), its attacks, its report sections and, optionally, its paper reproduction. The four
shipped systems (PGC-A3C, DP-SGD RL, FedRL, FRD) are registered here like any other; a package
outside this repository adds its own through the Python entry point group ``ldp_audit.systems``
(see docs/systems.md, "How a system plugs in")::

    # pyproject.toml of your package
    [project.entry-points."ldp_audit.systems"]
    mysystem = "mypackage.ldp:SYSTEM"

The entry point names a :class:`System` object (typically a :class:`SystemSpec`), or a
zero-argument callable returning one. Registry functions: :func:`register`, :func:`get`,
:func:`names`, :func:`systems`, :func:`broken`. A plug-in that fails to load is never a crash:
it is left out of :func:`names`, :func:`broken` says why, and :func:`get` of its name raises a
:class:`~ldp_audit.errors.UserCodeError` naming the entry point.

Nothing here imports a trainer: a :class:`SystemSpec` names its parts as ``"module:attr"``
strings that are imported when first used, so listing the systems stays cheap.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np

from ldp_audit.config import config_from_dict
from ldp_audit.errors import InvalidParameterError, LdpAuditError, RunDirectoryError, UserCodeError
from ldp_audit.validation import check_int

__all__ = [
    "ENTRY_POINT_GROUP",
    "ArraySpec",
    "AuditTarget",
    "TranscriptSchema",
    "TrainResult",
    "System",
    "SystemSpec",
    "Command",
    "register",
    "unregister",
    "get",
    "names",
    "systems",
    "broken",
    "resolve",
    "reload",
]

#: The entry point group third-party systems register under.
ENTRY_POINT_GROUP = "ldp_audit.systems"

#: The shipped systems, in the order the CLI lists them (each ``"module:attr"``).
BUILTIN = (
    "ldp_audit.training.systems:PGC_A3C",
    "ldp_audit.training.systems:DPRL",
    "ldp_audit.training.systems:FEDRL",
    "ldp_audit.training.systems:FRD",
    "ldp_audit.opacus.system:OPACUS",
    "ldp_audit.training.pgc_a3c_gym.system:GYM_PGC",
    "ldp_audit.run:OWN_LOOP",
)

_KINDS = {"i": "integer", "u": "unsigned integer", "f": "float", "b": "bool", "c": "complex"}


# ----------------------------------------------------------------------------------------------
# Transcript schema
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ArraySpec:
    """One array of ``transcript.npz``.

    Attributes:
        name: the key in ``transcript.npz``.
        kinds: accepted numpy dtype kinds (``"iu"`` integers, ``"f"`` floats, ``"b"`` bools).
        ndim: number of dimensions.
        rows: the row group: arrays of one group have one entry per row along axis 0 (the same
            count); ``None`` for a table that is not per row (e.g. PGC-A3C's ``thetas``).
        optional: whether the array may be absent.
        doc: what the array holds, in words.
        indexes: the array whose rows these values index (e.g. ``theta_index`` -> ``thetas``),
            checked in range when both are present.
    """

    name: str
    kinds: str
    ndim: int
    rows: str | None = "rows"
    optional: bool = False
    doc: str = ""
    indexes: str | None = None

    def describe(self) -> str:
        kind = " or ".join(_KINDS.get(k, k) for k in self.kinds)
        return f"{self.name} ({self.ndim}-D {kind})"


@dataclass(frozen=True)
class TranscriptSchema:
    """The arrays a system's ``transcript.npz`` must hold (see :meth:`check`)."""

    arrays: tuple[ArraySpec, ...]

    @property
    def required(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.arrays if not a.optional)

    def check(self, arrays: Mapping[str, np.ndarray], *, where: str, hint: str = "") -> None:
        """Raise :class:`RunDirectoryError` unless ``arrays`` fit the schema.

        Args:
            arrays: the loaded transcript.
            where: what to name in the message (the file, the run's system).
            hint: a sentence appended to the message (e.g. the command that fits the run).
        """
        tail = f"; {hint}" if hint else ""
        missing = [a for a in self.arrays if not a.optional and a.name not in arrays]
        if missing:
            what = ", ".join(a.describe() for a in missing)
            raise RunDirectoryError(f"{where} lacks the array(s) {what}{tail}")
        counts: dict[str, tuple[str, int]] = {}
        for spec in self.arrays:
            if spec.name not in arrays:
                continue
            a = np.asarray(arrays[spec.name])
            if a.dtype.kind not in spec.kinds or a.ndim != spec.ndim:
                raise RunDirectoryError(
                    f"{where}: {spec.name} must be {spec.describe()}, got {a.ndim}-D "
                    f"{a.dtype}{tail}"
                )
            if spec.indexes in arrays and a.size:
                n = np.asarray(arrays[spec.indexes]).shape[0]
                if a.min() < 0 or a.max() >= n:
                    raise RunDirectoryError(
                        f"{where}: {spec.name} must index rows of {spec.indexes} (0..{n - 1}), "
                        f"got range {a.min()}..{a.max()}{tail}"
                    )
            seen = counts.setdefault(spec.rows, (spec.name, a.shape[0]))
            if spec.rows is not None and seen[1] != a.shape[0]:
                raise RunDirectoryError(
                    f"{where}: {spec.name} has {a.shape[0]} rows but {seen[0]} has {seen[1]} "
                    f"(one row per release in both){tail}"
                )


class AuditTarget(NamedTuple):
    """One mechanism a run released through, as ``audit --run-dir`` audits it.

    Attributes:
        name: what was released (e.g. ``"report"``, ``"q_output"``).
        mechanism: anything the auditor takes (``epsilon``, ``privatize``; ``candidate_pairs``
            unless ``options`` gives ``pairs``).
        options: keyword arguments for :func:`ldp_audit.audit.audit` (``dim``, ``pairs``).
    """

    name: str
    mechanism: Any
    options: Mapping[str, Any] = {}

    @classmethod
    def of(cls, t: Any, system: str) -> AuditTarget:
        """From an ``AuditTarget``, a ``(name, mechanism)`` or ``(name, mechanism, options)``."""
        if isinstance(t, tuple) and len(t) in (2, 3):
            opts = dict(t[2]) if len(t) == 3 else {}
            bad = sorted(set(opts) - {"dim", "pairs"})
            if bad:
                raise UserCodeError(
                    f"system {system!r}: audit target {t[0]!r} options may be dim and pairs, "
                    f"got {bad}"
                )
            return cls(str(t[0]), t[1], opts)
        raise UserCodeError(
            f"system {system!r}: an audit target must be (name, mechanism[, options]), got {t!r}"
        )


# ----------------------------------------------------------------------------------------------
# Result and protocol
# ----------------------------------------------------------------------------------------------


@dataclass
class TrainResult:
    """What every system's :meth:`System.train` returns.

    Attributes:
        system: the system's registered name.
        config: the config the run used (an instance of the system's config class).
        seed: the seed it ran from.
        seconds: wall-clock seconds.
        privacy: the privacy summary (JSON-able; the system's own layout).
        metrics: the run's metrics (JSON-able; what ``metrics.json`` holds where one is
            written).
        run_dir: the run directory written, or None.
        native: the trainer's own result object (e.g. PGC-A3C's ``TrainResult``), unchanged;
            None for a trainer that has no result of its own (the contract asks nothing of it).
    """

    system: str
    config: Any
    seed: int
    seconds: float
    privacy: Any
    metrics: dict[str, Any]
    run_dir: Path | None = None
    native: Any = field(default=None, repr=False)


@runtime_checkable
class System(Protocol):
    """The contract of a system (a trainer and what the toolkit needs to check it).

    Attributes:
        name: the registered name; also ``config.json``'s ``"algorithm"`` of its runs.
        config_class: its config (a frozen dataclass validated on construction).
        attacks: attack name -> ``"module:function"``; the function scores a run directory:
            ``f(run_dir, *, seed=0, confidence=0.95, progress=False) -> AttackResult``.
        report_sections: ``"module:function"`` giving its report sections
            (``f(run_dir, extra) -> list[dict]``, docs/report.md) or None.
        reproduce: ``"module:function"`` reproducing its paper, or None.
        tiny_config: a config dict (for :meth:`config_from_dict`) of a run of a few seconds, a
            tuple of them (one per kind of run the system writes), or None; the cross-system
            contract test (tests/test_systems.py) trains each and checks the run directory,
            the ledger against the transcript, and the report.
    """

    name: str
    attacks: Mapping[str, str]
    report_sections: str | None
    reproduce: str | None
    tiny_config: Mapping[str, Any] | tuple[Mapping[str, Any], ...] | None

    @property
    def config_class(self) -> type: ...

    def config_from_dict(self, d: Mapping[str, Any]) -> Any:
        """The config object of a run's ``config.json`` ``"config"``."""
        ...

    def train(
        self,
        cfg: Any,
        *,
        seed: int,
        run_dir: str | Path | None = None,
        ledger: Any = None,
        progress: bool | None = None,
        run_mode: str = "new",
    ) -> TrainResult:
        """Train one run; with ``run_dir`` write the run directory (docs/interfaces.md), which
        charges its own ledger.sqlite (``run_dir`` and ``ledger`` together are refused)."""
        ...

    def transcript_schema(self, cfg: Any) -> TranscriptSchema:
        """The arrays ``transcript.npz`` of a run with config ``cfg`` holds."""
        ...

    def audit_targets(self, cfg: Any) -> list[AuditTarget]:
        """The mechanisms a run with ``cfg`` released through (each ``(name, mechanism,
        options)``, options being keyword arguments for :func:`ldp_audit.audit.audit`, e.g.
        the input dimension ``dim``)."""
        ...

    def ledger_charges(self, transcript: Mapping[str, np.ndarray], cfg: Any) -> dict[str, int]:
        """Ledger agent id -> number of charges the transcript's rows imply."""
        ...


def _check_result(name: str, res: TrainResult, run_dir: str | Path | None) -> None:
    """A trainer's TrainResult against the contract: its system's name, the run_dir it was
    given, metrics a dict, privacy and metrics JSON-able (the CLI prints them)."""
    from ldp_audit.rundir.files import to_jsonable

    why = None
    got = None if res.run_dir is None else Path(res.run_dir)
    if res.system != name:
        why = f"system is {res.system!r}, not {name!r}"
    elif run_dir is not None and (got is None or got.resolve() != Path(run_dir).resolve()):
        why = f"run_dir is {None if got is None else str(got)!r}, not {str(run_dir)!r}"
    elif run_dir is not None and not (Path(run_dir) / "manifest.json").is_file():
        why = f"run_dir {str(run_dir)!r} holds no finished run (no manifest.json)"
    elif not isinstance(res.metrics, dict):
        why = f"metrics is a {type(res.metrics).__name__}, not a dict"
    for key in ("privacy", "metrics") if why is None else ():
        try:
            json.dumps(to_jsonable(getattr(res, key)), allow_nan=False)
        except (TypeError, ValueError) as exc:
            why = f"{key} is not JSON-able ({exc})"
            break
    if why is not None:
        raise UserCodeError(
            f"system {name!r}: its trainer returned a TrainResult whose {why} (the System "
            "contract, docs/systems.md)"
        )


def resolve(ref: Any, what: str) -> Any:
    """Import ``"module:attr"`` (``attr`` may be dotted); anything else is returned as is.

    Raises:
        UserCodeError: the module cannot be imported or lacks the attribute (named).
    """
    if not isinstance(ref, str):
        return ref
    mod_name, sep, attr = ref.partition(":")
    if not sep or not mod_name or not attr:
        raise InvalidParameterError(f"{what} must be MODULE:ATTR, got {ref!r}")
    try:
        mod = importlib.import_module(mod_name)
    except Exception as exc:  # noqa: BLE001 - a plug-in's module: named, never a crash
        raise UserCodeError(
            f"{what} {ref!r}: importing {mod_name!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    obj: Any = mod
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            # the file read: a user's module shadowed by one already imported (pstats.py)
            src = f" (read from {mod.__file__})" if getattr(mod, "__file__", None) else ""
            raise UserCodeError(
                f"{what} {ref!r}: {mod_name!r} has no attribute {attr!r}{src}"
            ) from None
    return obj


@dataclass(frozen=True)
class Command:
    """How a system's generated ``train`` or ``reproduce`` subcommand is declared.

    The subcommand is generated (:mod:`ldp_audit.cli.system_cmd`): ``--seed`` (train), ``--out``,
    the run modes (train) or ``--overwrite`` and the backends (reproduce), ``--json``,
    ``--no-progress``, ``--force`` when ``sizes`` is given, and one option per field of the
    config (:func:`ldp_audit.config.add_arguments`). Every part is optional.

    Attributes:
        help: the one line of ``ldp-audit train --help`` (default: the system's summary).
        description: the subcommand's own ``--help`` text.
        config: reproduce only: its settings class (or ``"module:Class"``); the reproduction
            is called ``f(settings, *, out, progress, command, backend, address, workers)``
            (without one: ``f(*, out, overwrite, progress, command, backend, address,
            **forwarded)``).
        options: ``"module:function"`` ``f(parser)`` adding options that are not config fields.
        from_args: ``"module:function"`` ``f(args, given) -> config``, ``given`` the config
            options given (default: the config built from them).
        skip: config fields with no generated option (``options`` / ``from_args`` set them; a
            field whose option ``options`` adds gets none without being named).
        forward: option destinations handed on to the trainer / reproduction / attack as
            keywords (None: every option ``options`` adds but ``--force``; none with
            ``from_args``, which reads them).
        out: the default output folder: a new ``<out>-<timestamp>`` (``str.format`` with the
            config's fields, e.g. ``"runs/frd-{mode}"``); None: no default (train: no run
            directory; reproduce: ``--out`` is required).
        sizes: ``"module:function"`` ``f(config, **kw) -> [Estimate]``, checked before any
            work (``--force`` runs anyway; reproduce gets ``workers=``, an attack the options
            it forwards).
        show: train only: ``"module:function"`` ``f(TrainResult) -> list[str]``, the text lines
            printed (default: the privacy summary).
        set_option: train only: ``--set KEY=VALUE`` (JSON) reaching every config field.
        flat_json: train only: ``--json`` puts the metrics at the top level of the document
            (the shipped systems' layout) instead of under ``"metrics"``.
        resume: train only: the trainer can continue an interrupted run (``run_mode="resume"``);
            False: no ``--resume`` option, and the refusal of an existing ``--out`` does not
            suggest it.
        overwrite: train only: the trainer can replace an earlier run (``run_mode="overwrite"``);
            False: no ``--overwrite`` option, nor a suggestion of it.
    """

    help: str = ""
    description: str = ""
    config: Any = None
    options: str | None = None
    from_args: str | None = None
    skip: tuple[str, ...] = ()
    forward: tuple[str, ...] | None = None
    out: str | None = None
    sizes: str | None = None
    show: str | None = None
    set_option: bool = True
    flat_json: bool = False
    resume: bool = True
    overwrite: bool = True


@dataclass(frozen=True)
class SystemSpec:
    """A :class:`System` declared by name: its parts are ``"module:attr"`` strings (or objects),
    imported when first used.

    Attributes:
        name: registered name (= ``config.json`` ``"algorithm"``).
        summary: one line for ``--help``.
        config: the config class, or ``"module:Class"``.
        trainer: ``f(cfg, *, seed, run_dir, ledger, progress, run_mode) -> TrainResult``.
        schema: a :class:`TranscriptSchema`, or ``f(cfg) -> TranscriptSchema``.
        targets: ``f(cfg) -> [(name, mechanism), ...]`` (None: nothing to audit).
        charges: ``f(transcript, cfg) -> {ledger agent: charges}`` (None: one charge per row,
            the row's ``agent`` column as the ledger id).
        attacks: attack name -> ``"module:function"`` scorer of a run directory.
        report_sections: ``"module:function"`` or None.
        reproduce: ``"module:function"`` or None.
        train_command: how ``ldp-audit train NAME`` is generated (:class:`Command`).
        reproduce_command: how ``ldp-audit reproduce NAME`` is generated (with ``reproduce``).
        attack_commands: attack name -> :class:`Command` of ``ldp-audit attack NAME``: its
            ``options`` (their ``forward`` destinations handed to the attack's function as
            keywords), its ``sizes`` (``f(run's config, **forwarded)``, before any work), its
            ``help`` and ``description``.
        cli: ``"module:function"`` adding this system's own ``train`` / ``reproduce``
            subcommands, ``f(train_subparsers, reproduce_subparsers)``, instead of the
            generated ones (a plug-in's escape hatch; the shipped systems have none).
        attack_cli: ``"module:function"`` adding its own ``attack`` subcommands, or None.
        tiny_config: a config (as a dict for ``config_from_dict``) of a run of a few seconds,
            or a tuple of them (one per kind of run the system writes): the cross-system
            contract test (tests/test_systems.py) trains each and checks the run directory, the
            ledger against the transcript, and the report.
    """

    name: str
    config: Any
    trainer: Any
    schema: Any
    summary: str = ""
    targets: Any = None
    charges: Any = None
    attacks: Mapping[str, str] = field(default_factory=dict)
    report_sections: str | None = None
    reproduce: str | None = None
    train_command: Command = field(default_factory=Command)
    reproduce_command: Command = field(default_factory=Command)
    attack_commands: Mapping[str, Command] = field(default_factory=dict)
    cli: str | None = None
    attack_cli: str | None = None
    tiny_config: Mapping[str, Any] | tuple[Mapping[str, Any], ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _valid_name(self.name):
            raise InvalidParameterError(
                f"system name must be lower-case letters, digits and '-' (a CLI word), "
                f"got {self.name!r}"
            )
        object.__setattr__(self, "attacks", dict(self.attacks))
        tiny = self.tiny_config
        if not (
            tiny is None
            or isinstance(tiny, Mapping)
            or (isinstance(tiny, tuple) and tiny and all(isinstance(t, Mapping) for t in tiny))
        ):
            raise InvalidParameterError(
                f"system {self.name!r}: tiny_config must be a config dict, a non-empty tuple of "
                f"them, or None, got {tiny!r}"
            )

    @property
    def config_class(self) -> type:
        cls = resolve(self.config, f"system {self.name!r} config")
        if not isinstance(cls, type):
            raise UserCodeError(f"system {self.name!r}: config must be a class, got {cls!r}")
        return cls

    def config_from_dict(self, d: Mapping[str, Any]) -> Any:
        cls = self.config_class  # a config.json edited by hand (--allow-unverified): named
        try:
            return cls.from_dict(d) if hasattr(cls, "from_dict") else config_from_dict(cls, d)
        except TypeError as exc:  # a user's from_dict
            raise InvalidParameterError(f"invalid {self.name} config: {exc}") from None
        except Exception as exc:  # a plug-in config's own check (a ValueError, an assert)
            if isinstance(exc, LdpAuditError) or cls.__module__.startswith("ldp_audit."):
                raise
            why = f"{type(exc).__name__}: {exc}"
            raise UserCodeError(f"invalid {self.name} config ({cls.__name__}): {why}") from exc

    def _cfg(self, cfg: Any) -> Any:
        return self.config_from_dict(cfg) if isinstance(cfg, Mapping) else cfg

    def train(
        self,
        cfg: Any,
        *,
        seed: int,
        run_dir: str | Path | None = None,
        ledger: Any = None,
        progress: bool | None = None,
        run_mode: str = "new",
        **options: Any,
    ) -> TrainResult:
        """``options``: the ``train_command.forward`` options (e.g. FedRL's ``threads``)."""
        cfg = self._cfg(cfg)
        if not isinstance(cfg, self.config_class):
            raise InvalidParameterError(
                f"cfg must be a {self.config_class.__name__} for system {self.name!r}, got "
                f"{type(cfg).__name__}"
            )
        if run_mode not in ("new", "overwrite", "resume"):
            raise InvalidParameterError(
                f"run_mode must be 'new', 'overwrite' or 'resume', got {run_mode!r}"
            )
        seed = check_int(seed, "seed", minimum=0)  # the caller's: never blamed on the trainer
        if run_dir is not None and ledger is not None:
            raise InvalidParameterError(
                f"{self.name}: pass run_dir or ledger, not both (a run directory charges its "
                f"own ledger.sqlite), got run_dir={str(run_dir)!r} and a ledger"
            )
        fn = resolve(self.trainer, f"system {self.name!r} trainer")
        try:
            res = call_user(fn, f"system {self.name!r}: its trainer", cfg, seed=seed,
                            run_dir=run_dir, ledger=ledger, progress=progress,
                            run_mode=run_mode, **options)  # fmt: skip
        except LdpAuditError:  # a plug-in's run left "running" is interrupted, as ours are
            if run_dir is not None:
                from ldp_audit.rundir.writer import finish_unfinished

                finish_unfinished(path=Path(run_dir))
            raise
        if not isinstance(res, TrainResult):
            raise UserCodeError(
                f"system {self.name!r}: its trainer must return ldp_audit.systems.TrainResult, "
                f"got {type(res).__name__}"
            )
        _check_result(self.name, res, run_dir)
        return res

    def transcript_schema(self, cfg: Any) -> TranscriptSchema:
        if isinstance(self.schema, TranscriptSchema):
            return self.schema
        fn = resolve(self.schema, f"system {self.name!r} schema")
        out = call_user(fn, f"system {self.name!r}: its schema", self._cfg(cfg))
        if not isinstance(out, TranscriptSchema):
            raise UserCodeError(
                f"system {self.name!r}: its schema function must return a TranscriptSchema, "
                f"got {type(out).__name__}"
            )
        return out

    def audit_targets(self, cfg: Any) -> list[AuditTarget]:
        if self.targets is None:
            return []
        fn = resolve(self.targets, f"system {self.name!r} audit targets")
        out = call_user(fn, f"system {self.name!r}: its audit targets", self._cfg(cfg))
        return [AuditTarget.of(t, self.name) for t in out]

    def ledger_charges(self, transcript: Mapping[str, np.ndarray], cfg: Any) -> dict[str, int]:
        if self.charges is not None:
            fn = resolve(self.charges, f"system {self.name!r} charges")
            got = call_user(fn, f"system {self.name!r}: its charges", transcript, self._cfg(cfg))
            return {str(k): int(v) for k, v in got.items()}
        if "agent" not in transcript:
            raise RunDirectoryError(
                f"system {self.name!r}: its transcript has no 'agent' column and the system "
                "declares no charges function"
            )
        ids, counts = np.unique(np.asarray(transcript["agent"]).astype(str), return_counts=True)
        return {str(a): int(c) for a, c in zip(ids, counts, strict=True)}


def _valid_name(name: str) -> bool:
    return re.fullmatch(r"[a-z][a-z0-9-]{0,39}", name) is not None


# ----------------------------------------------------------------------------------------------
# The registry
# ----------------------------------------------------------------------------------------------

_LOCK = threading.RLock()
_REGISTRY: dict[str, System] = {}
_ORIGIN: dict[str, str] = {}
_BROKEN: dict[str, str] = {}
_LOADED = False


def _check_system(obj: Any, origin: str) -> System:
    if isinstance(obj, type) or (callable(obj) and not hasattr(obj, "train")):
        try:
            obj = obj()
        except Exception as exc:  # noqa: BLE001 - a plug-in's factory
            raise UserCodeError(
                f"system plug-in {origin}: its factory raised {type(exc).__name__}: {exc}"
            ) from exc
    members = [*System.__annotations__, *(k for k in vars(System) if not k.startswith("_"))]
    missing = [a for a in members if not hasattr(type(obj), a) and not hasattr(obj, a)]
    if missing:
        raise UserCodeError(
            f"system plug-in {origin} is not a ldp_audit.systems.System: it lacks "
            f"{', '.join(missing)} (a SystemSpec has them all)"
        )
    if not isinstance(obj.name, str) or not _valid_name(obj.name):
        raise UserCodeError(
            f"system plug-in {origin}: name must be lower-case letters, digits and '-', got "
            f"{obj.name!r}"
        )
    return obj


def register(system: Any, *, origin: str | None = None, replace: bool = False) -> System:
    """Add a system to the registry.

    Args:
        system: a :class:`System` (e.g. a :class:`SystemSpec`) or a zero-argument factory.
        origin: where it came from (for messages); default: its type's module.
        replace: replace a system of the same name (default: refused).

    Returns:
        The registered system.

    Raises:
        InvalidParameterError: the name is taken by another system.
        UserCodeError: ``system`` does not meet the protocol.
    """
    origin = origin or f"{type(system).__module__}.{type(system).__qualname__}"
    sys_obj = _check_system(system, origin)
    with _LOCK:
        _load_locked()
        old = _REGISTRY.get(sys_obj.name)
        if old is not None and old is not sys_obj and not replace:
            raise InvalidParameterError(
                f"system name {sys_obj.name!r} is already registered (by "
                f"{_ORIGIN.get(sys_obj.name, '?')}); {origin} cannot register it again"
            )
        _REGISTRY[sys_obj.name] = sys_obj
        _ORIGIN[sys_obj.name] = origin
        _BROKEN.pop(sys_obj.name, None)
    return sys_obj


def unregister(name: str) -> None:
    """Remove a system (tests; a no-op for an unknown name)."""
    with _LOCK:
        for table in (_REGISTRY, _ORIGIN, _BROKEN):
            table.pop(name, None)


def _load_locked() -> None:
    global _LOADED
    if _LOADED:
        return
    _LOADED = True  # set first: register() below re-enters
    from importlib.metadata import entry_points

    eps: list[Any] = []
    with contextlib.suppress(Exception):  # a broken distribution's metadata must not stop the CLI
        eps = list(entry_points(group=ENTRY_POINT_GROUP))
    # the shipped systems (no entry point name), then the entry points
    found = [(None, ref, ref, functools.partial(resolve, ref, "system")) for ref in BUILTIN]
    for ep in eps:
        where = f"entry point {ep.name!r} = {ep.value!r} (group {ENTRY_POINT_GROUP!r})"
        found.append((ep.name, ep.value, where, ep.load))
    for name, ref, origin, load in found:
        key = name or ref.rpartition(":")[2].lower().replace("_", "-")
        try:
            obj = _check_system(load(), origin)
        except Exception as exc:  # noqa: BLE001 - recorded, never a crash
            msg = str(exc) if isinstance(exc, UserCodeError) else f"{type(exc).__name__}: {exc}"
            _BROKEN[key] = f"{origin} failed to load: {msg}"
            continue
        old = _REGISTRY.get(obj.name)
        if old is obj:  # the shipped systems are declared as entry points too
            continue
        if old is not None:
            _BROKEN[f"{key} ({ref})"] = (
                f"{origin} registers the name {obj.name!r}, already taken by "
                f"{_ORIGIN.get(obj.name)}; it was left out"
            )
            continue
        if name is not None and obj.name != name:
            _BROKEN[name] = (
                f"{origin} gives a system named {obj.name!r}; the entry point's name must be "
                "the system's name"
            )
            continue
        _REGISTRY[obj.name] = obj
        _ORIGIN[obj.name] = origin


def reload() -> None:
    """Forget every registration and load the built-ins and entry points again (tests, or
    after installing a plug-in in a running interpreter)."""
    global _LOADED
    with _LOCK:
        for table in (_REGISTRY, _ORIGIN, _BROKEN):
            table.clear()
        _LOADED = False
        _load_locked()


def _loaded(read: Callable[[], Any]) -> Any:
    """``read()`` of the registry's tables, loaded first, under the lock."""
    with _LOCK:
        _load_locked()
        return read()


def names() -> list[str]:
    """Registered system names, the shipped ones first (in their CLI order)."""
    return _loaded(lambda: list(_REGISTRY))


def systems() -> list[System]:
    """Registered systems, in :func:`names` order."""
    return _loaded(lambda: list(_REGISTRY.values()))


def broken() -> dict[str, str]:
    """Plug-ins that failed to load: entry point name -> why (in words)."""
    return _loaded(lambda: dict(_BROKEN))


def get(name: str) -> System:
    """The system registered as ``name``.

    Raises:
        UserCodeError: ``name`` is a plug-in that failed to load (the message says why).
        InvalidParameterError: no system has that name (the message lists the registered ones).
    """
    if not isinstance(name, str):
        raise InvalidParameterError(f"system name must be a str, got {name!r}")
    with _LOCK:
        _load_locked()
        sys_obj = _REGISTRY.get(name)
        if sys_obj is not None:
            return sys_obj
        if name in _BROKEN:
            raise UserCodeError(f"system {name!r} is not available: {_BROKEN[name]}")
        raise InvalidParameterError(
            f"no system named {name!r} is registered; registered: {', '.join(_REGISTRY) or 'none'}"
            f" (a package adds one through the entry point group {ENTRY_POINT_GROUP!r})"
        )


def call_user(fn: Callable[..., Any], what: str, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``; an exception of a plug-in's function (not a refusal, not a
    shipped function's) is a ``UserCodeError`` naming it (exit 2), never "a bug in ldp-audit"."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        where = f"{getattr(fn, '__module__', None)}.{getattr(fn, '__qualname__', fn)}"
        if isinstance(exc, LdpAuditError) or where.startswith("ldp_audit."):
            raise
        raise UserCodeError(f"{what} {where} raised {type(exc).__name__}: {exc}") from exc


def call(ref: str, what: str) -> Callable[..., Any]:
    """``resolve(ref)`` that must be callable (used by the CLI and the report)."""
    fn = resolve(ref, what)
    if not callable(fn):
        raise UserCodeError(f"{what} {ref!r} is not callable")
    return fn
