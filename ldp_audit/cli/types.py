"""argparse ``type=`` converters shared by the subcommands (messages name option and value)."""

from __future__ import annotations

import argparse
import difflib
import functools
import json
import math
import os
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NoReturn

from ldp_audit.config import NEGATIVE_NUMBER
from ldp_audit.errors import InvalidParameterError, RunDirectoryError
from ldp_audit.parse import INT_MAX, parse_int, parse_real, real_in
from ldp_audit.rundir import check_new_dir
from ldp_audit.rundir.paths import is_run_dir


def int_at_least(
    name: str, minimum: int, maximum: int = INT_MAX, why: str = ""
) -> Callable[[str], int]:
    """A converter accepting integers in [``minimum``, ``maximum``] (strict: see
    :func:`parse_int`; ``why``: the reason for the upper bound, e.g. the memory it would take)."""
    return functools.partial(parse_int, name=name, minimum=minimum, maximum=maximum, why=why)


def add_int(
    p: Any, flag: str, minimum: int, maximum: int = INT_MAX, why: str = "", **kw: Any
) -> None:
    """An integer option in [``minimum``, ``maximum``] read by :func:`int_at_least` (its
    messages name ``flag``); ``p``: a parser or group, or an ``add_argument`` of its own."""
    getattr(p, "add_argument", p)(flag, type=int_at_least(flag, minimum, maximum, why), **kw)


def add_real(p: Any, flag: str, high: float = math.inf, **kw: Any) -> None:
    """A real option in (0, ``high``) read by :func:`ldp_audit.parse.real_in` (its messages name
    ``flag``); ``p`` as for :func:`add_int`."""
    getattr(p, "add_argument", p)(flag, type=real_in(flag, low=0.0, high=high), **kw)


def key_value(option: str, *, finite: bool = True) -> Callable[[str], tuple[str, Any]]:
    """A converter for ``KEY=VALUE`` (``KEY`` an identifier); ``VALUE`` is read as a JSON
    literal (1, 0.5, true, "x"), else kept as text. With ``finite``, ``NaN``, ``Infinity`` and
    a number too large for a double (``1e400``) are refused, never read as a non-finite value
    (without it they reach the receiver, e.g. a user's class, which names them itself); a
    number a double reads as 0 (``1e-400``) is refused either way, never passed on as 0."""

    def convert(text: str) -> tuple[str, Any]:
        key, sep, raw = text.partition("=")
        if not sep or not key.isidentifier():
            raise argparse.ArgumentTypeError(f"{option} must be KEY=VALUE, got {text!r}")

        def refuse(why: str) -> NoReturn:
            raise argparse.ArgumentTypeError(f"{option} {text!r}: {why}")

        def read_float(f: str) -> float:
            if not math.isfinite(float(f)):  # 1e400 would silently become inf
                if finite:
                    refuse(f"{f} is not a finite number")
                return float(f)
            return parse_real(f, f"{option} {text!r}")  # 1e-400 is not silently 0

        def constant(c: str) -> NoReturn:
            refuse(
                f'{c} is not a value (write an infinite epsilon as "inf" if the config accepts it)'
            )

        strict = {"parse_constant": constant} if finite else {}
        try:
            return key, json.loads(raw, parse_float=read_float, **strict)
        except ValueError:  # not JSON (or an integer too long to read): kept as text
            return key, raw  # a bare word is a string; the config checks its type

    return convert


#: argparse dests that name a file or folder (every subcommand): blank values are refused
PATH_DESTS = frozenset(
    "out out_dir plot run_dir canary_run_dir report_dir migrate_to ledger cache rerun "
    "committed".split()
)


def nonempty_path(name: str) -> Callable[[str], str]:
    """A converter for a path option: the empty or blank string is refused (``--out ''`` would
    otherwise read as "not given" and silently fall back to a default, e.g. into a run), and so
    is a name longer than Linux's NAME_MAX / PATH_MAX (255 / 4,096 bytes)."""

    def convert(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(f"{name} must be a non-empty path, got {text!r}")
        if max(map(len, text.encode().split(b"/"))) > 255 or len(text.encode()) > 4095:
            raise argparse.ArgumentTypeError(  # else OSError "File name too long" mid-command
                f"{name} must be a path of names of at most 255 bytes, 4,095 in all; got "
                f"{text[:40]!r}... ({len(text.encode())} bytes)"
            )
        return text

    return convert


def refuse_blank_paths(parser: argparse.ArgumentParser) -> None:
    """Give every path option of ``parser`` and its sub-parsers (dests in :data:`PATH_DESTS`,
    no converter of their own) the :func:`nonempty_path` converter."""
    for sub in _children(parser).values():
        refuse_blank_paths(sub)
    for action in parser._actions:
        if action.dest in PATH_DESTS and action.type is None and action.nargs in (None, "?"):
            label = action.option_strings[-1] if action.option_strings else action.metavar
            action.type = nonempty_path(str(label or action.dest))


# ----------------------------------------------------------------------------------------------
# Output folders: the run-directory contract (ldp_audit.rundir) as command-line options
# ----------------------------------------------------------------------------------------------


def add_run_mode_arguments(p: argparse.ArgumentParser, c: Any) -> None:
    """``--overwrite`` / ``--resume`` (mutually exclusive; each only where the trainer can
    replace / continue a run: ``c.overwrite`` / ``c.resume`` of the train
    :class:`~ldp_audit.systems.Command` ``c``) for a command writing a run."""
    flags = {
        "overwrite": "replace an earlier run at --out (never merged with it)",
        "resume": "continue an interrupted run at --out: same config and seed (checked), same "
        "ledger (its charges keep counting)",
    }
    flags = {k: v for k, v in flags.items() if getattr(c, k)}
    add_flags(p.add_mutually_exclusive_group() if len(flags) > 1 else p, **flags)


def run_mode(args: argparse.Namespace) -> str:
    """ "new", "overwrite" or "resume" from ``--overwrite`` / ``--resume``."""
    if getattr(args, "resume", False):
        return "resume"
    return "overwrite" if getattr(args, "overwrite", False) else "new"


def check_not_inside_run(path: str | Path, name: str, *, allow: str | Path | None = None) -> None:
    """Refuse an output path that lies inside an existing run directory (a run is evidence: no
    command writes into one except its named artefacts, e.g. ``RUN/report``, passed as
    ``allow``). The path itself being a run is for the caller's own check (``--overwrite``,
    ``--resume``).

    Raises:
        RunDirectoryError: an ancestor of ``path`` is a run directory.
    """
    p = Path(path).expanduser().absolute()
    if allow is not None and p == Path(allow).expanduser().absolute():
        return
    for parent in p.parents:
        if is_run_dir(parent):
            raise RunDirectoryError(
                f"{name} {str(path)!r} is inside the run directory {str(parent)!r}: a run is "
                "evidence and is never written into; choose a folder outside it"
            )


def check_out_for_mode(out: str | None, mode: str, c: Any) -> None:
    """Check a run's output folder before any work (raises RunDirectoryError); the refusal of
    an existing folder suggests ``--resume`` / ``--overwrite`` only where the train
    :class:`~ldp_audit.systems.Command` ``c`` offers it."""
    if out is None:
        if mode != "new":
            raise InvalidParameterError(f"--{mode} needs --out RUN_DIR")
        return
    if mode == "resume":
        if not is_run_dir(out):
            raise RunDirectoryError(f"--resume: {out!r} is not a run directory (no config.json)")
        return
    check_not_inside_run(out, "--out")
    check_new_dir(
        out, overwrite=(mode == "overwrite"), can_resume=c.resume, can_overwrite=c.overwrite
    )


def check_workers(workers: int, name: str = "--workers") -> int:
    """Refuse a worker (or ``--threads``) count far above this machine's cores (4x)."""
    cores = os.cpu_count() or 1
    if workers > 4 * cores:
        raise InvalidParameterError(
            f"{name} must be <= {4 * cores} (4 x the {cores} CPU cores here), got {workers}"
        )
    return workers


def confidence(name: str = "--confidence") -> Callable[[str], float]:
    """A converter for a confidence level in (0, 1) whose error probability 1 - c is also in
    (0, 1) as a double (``1e-320`` passes ``0 < c < 1`` but ``1 - c == 1.0``)."""
    inner = real_in(name, low=0.0, high=1.0)

    def convert(text: str) -> float:
        v = inner(text)
        if not 0.0 < 1.0 - v < 1.0:
            raise argparse.ArgumentTypeError(
                f"{name} must be in (0, 1) with 1 - {name.lstrip('-')} representable, got {text!r}"
            )
        return v

    return convert


# ----------------------------------------------------------------------------------------------
# Help formatting: defaults shown everywhere, never a literal %%
# ----------------------------------------------------------------------------------------------


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``ArgumentDefaultsHelpFormatter`` that shows ``(default: X)`` only where it informs.

    Nothing is added to options whose help already names the default, flags (default False)
    and options without a default (None). Descriptions and epilogs are %-unescaped too (argparse
    leaves a literal ``%%`` in them unless they contain ``%(prog)``), so no help output shows
    ``%%``.
    """

    @staticmethod
    def _informative(action: argparse.Action) -> bool:
        d = action.default
        return not (d is None or d is False or d is argparse.SUPPRESS or d == [])

    def _format_action(self, action: argparse.Action) -> str:
        if action.help is None and action.option_strings and self._informative(action):
            action.help = "(default: %(default)s)"  # an option without help still shows it
        return super()._format_action(action)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if "default" in (action.help or "").lower() or not self._informative(action):
            return action.help  # it names its default already, or has none worth showing
        return super()._get_help_string(action)

    def _format_text(self, text: str) -> str:
        if "%(prog)" not in text:
            text = text.replace("%%", "%")
        return super()._format_text(text)


class HelpParser(argparse.ArgumentParser):
    """``ArgumentParser`` whose default formatter is :class:`DefaultsHelpFormatter`; its
    sub-parsers (``add_subparsers`` uses the parent's class) inherit it, so one setting in
    ``ldp_audit.cli.build_parser`` covers every subcommand."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", DefaultsHelpFormatter)
        # an option is named in full: an abbreviation (--eps for --epsilon) is refused with a
        # "did you mean", never silently read as another option
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        # a value such as -1:1 or -1e-3 is a value, not an option (config.py's docstring)
        self._negative_number_matcher = NEGATIVE_NUMBER

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        """A value outside ``choices`` (a subcommand typo too) gets a "did you mean"."""
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError as exc:
            close = closest(str(value), [str(c) for c in action.choices or ()])
            if not close:
                raise
            raise argparse.ArgumentError(
                action, f"{exc.message} (did you mean {close!r}?)"
            ) from None

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        self._given = list(sys.argv[1:] if args is None else args)  # a subcommand's own tokens
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        """Usage, then one error line that says where the command's options are listed; exit 2.
        A missing COMMAND or option next to an unknown option names the unknown one first
        (``ldp-audit --bogus``: "unrecognized arguments: --bogus", not "COMMAND required")."""
        given = getattr(self, "_given", [])
        unknown = [t for t in given if t.startswith("-") and not t.lstrip("-")[:1].isdigit()]
        unknown = [t for t in unknown if t.split("=")[0] not in self._option_string_actions]
        if unknown and message.startswith("the following arguments are required"):
            unrecognized_error(self, given, unknown)
        self.print_usage(sys.stderr)
        # one line: a value's control characters escaped (argparse quotes some values raw)
        message = re.sub(r"[\x00-\x1f\x7f]", lambda m: repr(m[0])[1:-1], message)
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} -h' for its options)\n")


def _children(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The parser's subcommands by name (empty for a leaf)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(subs[0].choices) if subs else {}


def _leaves(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    kids = _children(parser).values()
    return [leaf for sub in kids for leaf in _leaves(sub)] if kids else [parser]


def leaf_parser(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.ArgumentParser:
    """The parser of the subcommand ``argv`` names (its subcommand words followed, e.g.
    train -> frd)."""
    for tok in argv:
        parser = _children(parser).get(tok, parser)
    return parser


def _group_rank(leaf: argparse.ArgumentParser, group: Any) -> int:
    """The positionals first, then a group holding a required option (--mechanism), then the
    rest (a stable sort keeps each rank's order)."""
    required = any(a.required for a in group._group_actions if a.option_strings)
    return 0 if group is leaf._positionals else 1 if required else 2


def group_common_options(parser: argparse.ArgumentParser, share: float = 0.5) -> None:
    """In every subcommand's ``-h``, the options most subcommands share (``--out``, ``--seed``,
    ``--json``, ...: taken by at least ``share`` of them) come first, in a group of their own,
    then the command's own options (issue 39: most option strings belong to one subcommand
    only). Only the help's layout changes: parsing, defaults and usage lines are untouched."""
    leaves = _leaves(parser)
    counts: dict[str, int] = {}
    for leaf in leaves:
        for opt in {a.option_strings[-1] for a in leaf._actions if a.option_strings}:
            counts[opt] = counts.get(opt, 0) + 1
    common = sorted(o for o, k in counts.items() if k >= share * len(leaves) and o != "--help")
    for leaf in leaves:
        own = leaf._optionals
        moved = [
            a for a in own._group_actions if a.option_strings and a.option_strings[-1] in common
        ]
        if not moved or len(moved) == len(own._group_actions):
            continue
        group = leaf.add_argument_group(
            "common options", "taken by most ldp-audit commands, with the same meaning"
        )
        group._group_actions.extend(moved)
        own._group_actions[:] = [a for a in own._group_actions if a not in moved]
        own.title = "options of this command"
        groups = leaf._action_groups
        groups.remove(group)
        groups.insert(groups.index(own), group)  # shared ones first, then the command's
        groups.sort(key=functools.partial(_group_rank, leaf))


def closest(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate most like ``word`` (difflib), or None if none is close."""
    by_stem = {c.lstrip("-"): c for c in candidates}  # "--foo" is not close to "--pool"
    found = difflib.get_close_matches(word.lstrip("-"), list(by_stem), n=1, cutoff=0.6)
    return by_stem[found[0]] if found else None


#: former or alternative option names -> the one name the command line takes now (a refused
#: name points at it before any spelling guess)
RENAMED_OPTIONS = {"--noise": "--noise-multiplier", "--quiet": "--no-progress"}


def unrecognized_error(parser: argparse.ArgumentParser, argv: list[str], extra: list[str]) -> None:
    """Options no parser knew: the error comes from the subcommand they were given to (its usage
    and its ``-h``, not the top level's), with the closest option of that subcommand."""
    leaf = leaf_parser(parser, argv)
    options = [s for a in leaf._actions for s in a.option_strings]

    def hint(tok: str) -> str | None:
        name = tok.split("=")[0]
        renamed = RENAMED_OPTIONS.get(name)
        if renamed is not None and renamed in options:  # one name per quantity
            return renamed
        longer = [o for o in options if o.startswith(name) and o.startswith("--")]
        return longer[0] if len(longer) == 1 else closest(name, options)  # --ov: --overwrite

    hints = [(tok, close) for tok in extra if tok.startswith("-") and (close := hint(tok))]
    message = "unrecognized arguments: " + " ".join(extra)
    if len(hints) == 1:
        message += f" (did you mean {hints[0][1]}?)"
    elif hints:
        message += " (did you mean " + ", ".join(f"{c} for {t}" for t, c in hints) + "?)"
    leaf.error(message)


def add_backend_arguments(p: argparse.ArgumentParser, *, workers: bool = False) -> None:
    """``--backend {local,ray}`` and ``--address ADDR`` (:mod:`ldp_audit.backends`): where the
    grid's tasks run; results are bit for bit the same on every backend. Validate with
    ``ldp_audit.backends.backend_options(args)`` (or ``check_backend``) before any work.
    ``workers=True`` also adds ``--workers N`` (local pool size / CPUs of a Ray started here)."""
    p.add_argument(
        "--backend",
        choices=("local", "ray"),
        default="local",
        help="where the grid runs: this machine (a process pool with --workers > 1) or Ray "
        "(needs ldp-audit[ray]); results are bit for bit the same",
    )
    p.add_argument(
        "--address",
        metavar="ADDR",
        help="with --backend ray: an existing Ray cluster (e.g. auto, ray://HOST:10001); "
        "default: start Ray on this machine with --workers CPUs",
    )
    if workers:
        p.add_argument(
            "--workers",
            type=int_at_least("--workers", 1),
            help="--backend local: a process pool of this size (default: this process); "
            "--backend ray: CPUs of the Ray instance started here (default: all)",
        )


def add_flags(p: argparse.ArgumentParser, **flags: str) -> None:
    """One ``store_true`` option per ``name=help`` (``no_float_bits`` -> ``--no-float-bits``),
    in order."""
    for name, text in flags.items():
        p.add_argument("--" + name.replace("_", "-"), action="store_true", help=text)


def show_progress(args: argparse.Namespace) -> bool:
    """Progress bars only where a person watches them: stderr is a terminal and ``--no-progress``
    was not given (``LDP_AUDIT_PROGRESS=always`` forces them, ``never`` turns them off). A log
    file or a pipe gets no bar frames (issue 31: ``make demo > log`` wrote 61 KB of them)."""
    if getattr(args, "no_progress", False):
        return False
    given = os.environ.get("LDP_AUDIT_PROGRESS", "")
    mode = given.strip().lower() or "auto"
    if mode not in ("always", "never", "auto"):  # a typo is named, never read as "auto"
        raise InvalidParameterError(
            f"LDP_AUDIT_PROGRESS must be always, never or auto, got {given!r}"
        )
    return {"always": True, "never": False}.get(mode, sys.stderr.isatty())


def resolve_device_option(choice: str, command: str) -> str:
    """``--device`` resolved before any work: cuda without CUDA is a usage error (exit 2);
    auto says on stderr where it runs (``command`` names the subcommand)."""
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
