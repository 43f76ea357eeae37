"""Configs are the CLI: command-line options generated from a frozen, keyword-only dataclass.

A system's config declares each field once: its type, its default, its docstring (the string
literal right under the field, as in CleanRL's ``Args``) and, in the field's metadata, its bounds.
:func:`add_arguments` turns the fields into ``argparse`` options (``n_agents`` ->
``--n-agents``) whose help text is that docstring with the default and the bounds, and whose
values are read strictly (``1_000``, ``nan``, ``True`` and a number out of bounds are refused,
naming the option and the text); :func:`from_args` builds the config from the options a user gave
(the others keep the dataclass defaults) and lets the config's own ``__post_init__`` check the
whole. ``ldp-audit train NAME`` builds the options of every registered system without a
hand-written subcommand this way (docs/systems.md)::

    from dataclasses import dataclass, field
    from ldp_audit.config import bounds

    @dataclass(frozen=True, kw_only=True)
    class MyConfig:
        agents: int = field(default=20, metadata=bounds(minimum=1, maximum=100_000))
        \"\"\"Agents, each with one private bit.\"\"\"
        epsilon: float = field(default=1.0, metadata=bounds(minimum=0, inf=True, open_min=True))
        \"\"\"Epsilon of one report.\"\"\"

Types read from the command line: ``bool`` (``--x`` / ``--no-x``), ``bool | None`` (``--x`` /
``--no-x``; absent: the field's default, None), ``int``, ``float``, ``str``, ``Literal[...]``
(choices), ``tuple[T, ...]`` / ``list[T]`` of those scalars (several values after the option, at
least one unless ``bounds(empty=True)``) and ``T | None`` (the word ``none`` gives None). A field
of any type whose ``bounds(parse=..., whole=True)`` reads the option's one string into the whole
value (a nested tuple such as a box ``lo,hi;lo,hi``, a comma-separated list) gets an option too.
A field of another type (a nested config, a mapping) gets no option; ``--set KEY=VALUE`` (JSON)
still reaches it.

Where the command line differs from the Python API, the field's metadata says so, once:
``bounds(required=True)`` (the option must be given; the Python default stays for Python
callers), ``bounds(option="--noise")`` (the option's name, when it is not the field's) and
``bounds(cli_default=500)`` (the command line's default when it differs from the Python one; the
help shows both). ``--help`` writes numbers with ``:g`` (``<= 1e+06``) and None as ``none``,
the word the command line reads.

Negative numbers as values: argparse reads an argument that starts with ``-`` as an option unless
it looks like a negative number, and its own test (``-1``, ``-0.5``) misses ``-1e-3``, ``-inf``
and ``-nan``. :func:`add_arguments` widens that test on the parser it is given to anything that
starts with ``-`` and a digit, ``-.`` and a digit, or is ``-inf`` / ``-infinity`` / ``-nan``, so
``--low -inf -1e-3`` gives two values (each then read strictly: ``-inf`` and ``-nan`` are refused
where the bounds do not allow them, naming the option). A parser that already has an option that
looks like a negative number (``-1``) keeps argparse's rule: there ``--opt=-inf`` still works
for one value. Every ``ldp-audit`` parser (``ldp_audit.cli.types.HelpParser``) has the same test
from the start (session 57: ``audit --domain -1:1`` was "expected one argument").
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import functools
import inspect
import math
import re
import textwrap
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from ldp_audit.errors import InvalidParameterError, LdpAuditError
from ldp_audit.parse import INT_MAX, parse_int, real_in

__all__ = [
    "bounds",
    "field_docs",
    "option_name",
    "add_arguments",
    "from_args",
    "config_from_dict",
    "config_to_dict",
    "given_config",
    "given_fields",
]

#: an option's name: two dashes, then lowercase letters, digits and single dashes
_OPTION = re.compile(r"^--[a-z0-9]+(?:-[a-z0-9]+)*$")

#: what add_arguments' parsers read as a (negative) number rather than as an option: "-" and a
#: digit, "-." and a digit (argparse's own rule misses -1e-3), and -inf / -infinity / -nan
NEGATIVE_NUMBER = re.compile(r"^-(?:\.?\d|(?:inf|infinity|nan)$)", re.IGNORECASE)


def bounds(
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    open_min: bool = False,
    open_max: bool = False,
    inf: bool = False,
    choices: Iterable[Any] | None = None,
    parse: Callable[[str], Callable[[str], Any]] | None = None,
    check: Callable[[Any], Any] | None = None,
    empty: bool = False,
    required: bool = False,
    option: str | None = None,
    cli_default: Any = dataclasses.MISSING,
    whole: bool = False,
) -> dict[str, Any]:
    """Field metadata for :func:`dataclasses.field`: the interval a number must lie in
    (``open_min`` / ``open_max`` exclude the end), whether ``inf`` is a value (an infinite
    epsilon; with no ``minimum``, ``-inf`` too: an unbounded lower end), the allowed
    ``choices``, or ``parse``: a converter factory called with the option name (e.g.
    :func:`ldp_audit.cli.types.confidence`) for a value with its own rules, or
    ``check``: the config's own check of the field (``check(value)`` raising
    InvalidParameterError, the function its ``__post_init__`` calls), which the command line runs
    on the value it read before the bounds, so an option refuses in the config's words (its
    reason included) and the range lives in that one function; ``minimum``/``maximum`` then
    show it in ``--help``. ``empty``: a tuple/list field may be given with no value (the option
    alone gives the empty tuple, e.g. "skip this stage"); otherwise it needs one or more. The
    command line checks them; the config's own ``__post_init__`` remains the authority (a
    Python caller never goes through argparse).

    What differs on the command line only: ``required``: the option must be given (argparse's
    "the following arguments are required"; the Python default stays for Python callers, and
    the help says "required" instead of the default). ``option``: the option's name when it is
    not the field's (``option="--noise-multiplier"`` on ``dpsgd_noise``; its metavar follows).
    ``cli_default``: the value the command line uses when the option is not given, when it
    differs from the Python default (``--help`` shows both; :func:`given_fields` returns it,
    :func:`from_args` lets ``--set`` replace it). ``whole``: ``parse`` (then required) reads the
    option's one string into the whole field's value (a nested tuple such as a box, a
    comma-separated list: its own spelling and messages; ``T | None`` fields still read
    ``none``), instead of one element per value."""
    out = dict(locals())  # the arguments, as given
    for name, fn in (("parse", parse), ("check", check)):
        if fn is not None and not callable(fn):
            raise InvalidParameterError(f"bounds: {name} must be callable, got {fn!r}")
    for name, flag in (("required", required), ("whole", whole), ("empty", empty)):
        if not isinstance(flag, bool):
            raise InvalidParameterError(f"bounds: {name} must be True or False, got {flag!r}")
    if option is not None and not (isinstance(option, str) and _OPTION.match(option)):
        raise InvalidParameterError(
            f"bounds: option must be an option name such as '--noise', got {option!r}"
        )
    if whole and parse is None:
        raise InvalidParameterError("bounds: whole=True needs parse (the whole field's reader)")
    if required and cli_default is not dataclasses.MISSING:
        raise InvalidParameterError(
            f"bounds: a required option has no command-line default, got cli_default "
            f"{cli_default!r}"
        )
    if minimum is not None and maximum is not None and minimum > maximum:
        raise InvalidParameterError(f"bounds: minimum {minimum!r} > maximum {maximum!r}")
    out.update(open_min=bool(open_min), open_max=bool(open_max), inf=bool(inf))
    out["choices"] = tuple(choices) if choices is not None else None
    return {"ldp_audit": out}


def _bounds_of(f: dataclasses.Field) -> dict[str, Any]:
    return {**_NO_BOUNDS, **(f.metadata.get("ldp_audit", {}) if f.metadata else {})}


#: a field without bounds: every key, at its "not given" value
_NO_BOUNDS = bounds()["ldp_audit"]


def _field_option(f: dataclasses.Field) -> str:
    """The field's option: ``bounds(option=...)``, else :func:`option_name` of its name."""
    return _bounds_of(f)["option"] or option_name(f.name)


@dataclasses.dataclass(eq=False)
class _CliDefault:
    """An option's command-line default (``bounds(cli_default=...)``) as argparse stores it:
    :func:`given_fields` tells it from a value the user gave."""

    value: Any

    def __repr__(self) -> str:
        return _show(self.value)

    __str__ = __repr__


def _attributes_section(doc: str | None) -> dict[str, str]:
    """``name: text`` entries of a Google-style ``Attributes:`` section (continuation lines
    indented deeper; ``a, b, c: text`` documents three fields)."""
    lines = inspect.cleandoc(doc or "").splitlines()
    start = next((i + 1 for i, ln in enumerate(lines) if ln.strip() == "Attributes:"), len(lines))
    body = [ln for ln in lines[start:] if ln.strip()]
    indent = len(body[0]) - len(body[0].lstrip()) if body else 0
    entries: list[tuple[list[str], list[str]]] = []  # (names, text)
    for ln in body:
        ind = len(ln) - len(ln.lstrip())
        if ind < indent:
            break  # the section ended
        head, sep, rest = ln.strip().partition(":")
        names = [x.strip() for x in head.split(",")]
        if ind == indent and sep and all(n.isidentifier() for n in names):
            entries.append((names, [rest]))
        elif entries:  # a continuation line
            entries[-1][1].append(ln)
    return {n: " ".join(" ".join(text).split()) for names, text in entries for n in names}


@functools.lru_cache(maxsize=256)
def _class_ast(klass: type) -> ast.ClassDef | None:
    """The class statement of ``klass``'s source (None: no source), parsed once per class: reading
    and parsing a module's source was most of the cost of building the CLI's parser."""
    try:
        src = textwrap.dedent(inspect.getsource(klass))
        body = ast.parse(src).body[0]
    except (OSError, TypeError, SyntaxError, IndexError):
        return None
    return body if isinstance(body, ast.ClassDef) else None


def field_docs(cls: type) -> dict[str, str]:
    """Each field's docstring: the string literal right under the field in the class body, else
    its entry in the class docstring's Google-style ``Attributes:`` section (collected from the
    class and its dataclass bases; ``metadata={"help": ...}`` wins)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass) or klass is object:
            continue
        docs.update(_attributes_section(klass.__doc__))
        body = _class_ast(klass)
        if body is None:
            continue
        stmts = body.body
        for a, b in zip(stmts, stmts[1:], strict=False):
            if (
                isinstance(a, ast.AnnAssign)
                and isinstance(a.target, ast.Name)
                and isinstance(b, ast.Expr)
                and isinstance(b.value, ast.Constant)
                and isinstance(b.value.value, str)
            ):
                docs[a.target.id] = " ".join(inspect.cleandoc(b.value.value).split())
    if dataclasses.is_dataclass(cls):
        for f in dataclasses.fields(cls):
            if f.metadata and isinstance(f.metadata.get("help"), str):
                docs[f.name] = f.metadata["help"]
    return docs


def _plain(text: str) -> str:
    """reStructuredText roles and literals as plain text for ``--help``."""
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", text)
    return text.replace("``", "")


def option_name(field_name: str) -> str:
    """``n_agents`` -> ``--n-agents``."""
    return "--" + field_name.replace("_", "-")


def option_words(text: str, options: Mapping[str, str]) -> str:
    """A config's message as the command line says it: each field of ``options`` (name ->
    option) that it names as a parameter becomes its option (``state_low/state_high must be``
    -> ``--state-low/--state-high must be``, ``actor_lr=1`` -> ``--actor-lr=1``): a name with
    an underscore, or one followed by ``must``, ``=`` or ``/``, or one opening the message
    with a colon (``cache: 'f' is not a directory``); never inside a word, a path or quotes."""
    if not options:
        return text
    alt = "|".join(map(re.escape, sorted(options, key=len, reverse=True)))

    def sub(m: re.Match) -> str:  # a/b: both names or neither
        rest = text[m.end() :]
        named = "_" in m[0] or "/" in m[0] or re.match(r"\s+must\b|=", rest)
        named = named or (m.start() == 0 and rest.startswith(":"))
        return "/".join(options[n] for n in m[0].split("/")) if named else m[0]

    return re.sub(rf"(?<![\w./'\"-])(?:{alt})(?:/(?:{alt}))*(?![\w./'\"-])", sub, text)


@contextlib.contextmanager
def options_named(cls: type | None, also: Iterable[str] = ()) -> Iterator[None]:
    """Inside, a :class:`~ldp_audit.errors.LdpAuditError` (a config's check, a run's
    refusal) names the config ``cls``'s fields, and the arguments ``also`` (a command's options
    that are no field, ``cache``), by their options (:func:`option_words`): the command line's
    words for an error the library words in its arguments' names."""
    try:
        yield
    except LdpAuditError as exc:
        fields = dataclasses.fields(cls) if dataclasses.is_dataclass(cls) else ()
        options = {name: option_name(name) for name in also}
        options |= {f.name: _field_option(f) for f in fields}
        exc.args = (option_words(str(exc), options),)
        raise


def _scalar_parser(tp: Any, opt: str, b: Mapping[str, Any], name: str = "") -> Any:
    """A strict converter for one scalar type, or None when the type is not a CLI scalar. The
    messages are the CLI's own (:mod:`ldp_audit.cli.types`), so a generated option and a
    hand-written one refuse a value in the same words; a field's ``check`` runs first, on the
    value read (its refusal in the config's words)."""
    conv = _bounded_parser(tp, opt, b)
    check = b.get("check")
    if conv is None or check is None:
        return conv
    read = conv  # a number: read without the bounds (the check says what is out of range)
    if b.get("parse") is None and tp in (int, float):
        read = _bounded_parser(tp, opt, {**b, "minimum": None, "maximum": None, "inf": True})

    def conv_checked(text: str) -> Any:
        try:
            check(read(text))
        except InvalidParameterError as exc:
            raise argparse.ArgumentTypeError(option_words(str(exc), {name: opt})) from None
        return conv(text)

    return conv_checked


def _bounded_parser(tp: Any, opt: str, b: Mapping[str, Any]) -> Any:
    """:func:`_scalar_parser` without the field's ``check``."""
    if b.get("parse") is not None:
        return b["parse"](opt)
    lo, hi = b.get("minimum"), b.get("maximum")
    open_lo, open_hi = bool(b.get("open_min")), bool(b.get("open_max"))
    if tp is int:
        int_lo = None if lo is None else math.floor(lo) + 1 if open_lo else math.ceil(lo)
        int_hi = INT_MAX if hi is None else math.ceil(hi) - 1 if open_hi else math.floor(hi)

        return functools.partial(parse_int, name=opt, minimum=int_lo, maximum=int_hi)
    if tp is float:  # inf when the field takes it; -inf too with no minimum
        return real_in(
            opt,
            low=-math.inf if lo is None else float(lo),
            high=math.inf if hi is None else float(hi),
            low_open=open_lo or lo is None,
            high_open=open_hi or hi is None,
            inf=bool(b.get("inf")),
        )
    if tp is str:

        def conv_str(text: str) -> str:
            if not text.strip():
                raise argparse.ArgumentTypeError(f"{opt} must be a non-empty string, got {text!r}")
            return text

        return conv_str
    return None


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return args[0], True
    return tp, False


def _or_none(conv: Callable[[str], Any], optional: bool) -> Callable[[str], Any]:
    """``conv``, reading the word ``none`` as None when the field is ``T | None``."""
    if not optional:
        return conv

    def conv_none(text: str) -> Any:
        return None if text.strip().lower() == "none" else conv(text)

    return conv_none


def _option_spec(f: dataclasses.Field, tp: Any, opt: str) -> dict[str, Any] | None:
    """``add_argument`` keywords for one field, or None when it has no command-line form."""
    b = _bounds_of(f)
    tp, optional = _unwrap_optional(tp)
    if tp is bool:  # bool | None too: absent keeps the default (None)
        return {"action": argparse.BooleanOptionalAction}
    if b.get("whole"):  # parse reads the one string into the whole value
        return {"type": _or_none(_scalar_parser(None, opt, b, f.name), optional)}
    origin = typing.get_origin(tp)
    nargs = None
    choices = b.get("choices")
    if origin is typing.Literal:
        lits = typing.get_args(tp)
        kinds = {type(x) for x in lits}
        if len(kinds) != 1 or kinds.pop() not in (str, int):
            return None
        choices = lits
        tp = type(lits[0])
    elif origin in (tuple, list):
        args = typing.get_args(tp)
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            return None
        tp = args[0] if args else None
        nargs = "*" if b.get("empty") else "+"
    conv = _scalar_parser(tp, opt, b, f.name)
    if conv is None:
        return None
    spec: dict[str, Any] = {"nargs": nargs} if nargs else {}
    if choices is not None:  # shown as argparse shows its own choices: {a,b}
        allowed, inner = tuple(choices), conv
        spec["metavar"] = "{" + ",".join(str(c) for c in allowed) + "}"

        def conv(text: str) -> Any:
            v = inner(text)
            if v not in allowed:
                shown = ", ".join(repr(c) for c in allowed)
                raise argparse.ArgumentTypeError(f"{opt} must be one of {shown}, got {text!r}")
            return v

    return {**spec, "type": _or_none(conv, optional)}


def _num(x: Any) -> str:
    """A bound for ``--help``: a float with ``:g`` (``1e+06``, not ``1000000.0``) unless that
    loses digits (then its repr), an int as it is."""
    if isinstance(x, float) and not isinstance(x, bool):
        g = f"{x:g}"
        return g if float(g) == x else repr(x)
    return str(x)


def _show(d: Any, *, sep: str = " ") -> str:
    """A default for ``--help``: None as ``none`` (the word the command line reads), a tuple's
    values separated by ``sep`` (a space: one value each; a comma, groups by ``;``, for a
    ``whole`` field's spelling)."""
    if d is None:
        return "none"
    if isinstance(d, (tuple, list)):
        if sep != " " and d and all(isinstance(x, (tuple, list)) for x in d):
            return ";".join(_show(x, sep=",") for x in d)
        return sep.join(_show(x, sep=sep) for x in d) or "(empty)"
    return str(d)


def _default_text(f: dataclasses.Field) -> str | None:
    if f.default is not dataclasses.MISSING:
        d = f.default
    elif f.default_factory is not dataclasses.MISSING:
        try:
            d = f.default_factory()
        except Exception:  # noqa: BLE001 - help text only
            return None
    else:
        return None
    b = _bounds_of(f)
    sep = "," if b["whole"] else " "
    if b["required"]:
        return None
    if b["cli_default"] is not dataclasses.MISSING:
        return f"{_show(b['cli_default'], sep=sep)}; Python default: {_show(d, sep=sep)}"
    return _show(d, sep=sep)


def _bounds_text(f: dataclasses.Field) -> str:
    b = _bounds_of(f)
    parts = []
    if b["required"]:
        parts.append("required")
    if b["minimum"] is not None:
        parts.append(f"{'>' if b['open_min'] else '>='} {_num(b['minimum'])}")
    if b["maximum"] is not None:
        parts.append(f"{'<' if b['open_max'] else '<='} {_num(b['maximum'])}")
    if b["inf"]:
        parts.append("or inf" if b["minimum"] is not None else "or -inf, inf")
    return ", ".join(parts)


def _accept_negative_numbers(parser: Any) -> None:
    """Let ``parser`` read ``-inf``, ``-1e-3``, ``-.5`` as values (see the module docstring):
    argparse's negative-number test, widened; kept as it is where an existing option string
    would then look like a number (argparse then reads every such argument as an option)."""
    if not isinstance(parser, argparse.ArgumentParser) or parser._has_negative_number_optionals:
        return
    if any(NEGATIVE_NUMBER.match(s) for s in parser._option_string_actions):
        return
    parser._negative_number_matcher = NEGATIVE_NUMBER


def add_arguments(
    parser: argparse.ArgumentParser | Any,
    cls: type,
    *,
    skip: Iterable[str] = (),
    group_title: str | None = None,
) -> list[str]:
    """Add one option per init field of the dataclass ``cls`` to ``parser``; return the names of
    the fields that got one. A field named in ``skip``, a field whose option the parser already
    has (``--seed``, ``--out``), and a field of a type with no command-line form get none.
    Options default to "not given" (:data:`argparse.SUPPRESS`): :func:`from_args` then leaves
    the dataclass default in place, so a default is written once, in the config (or, for a
    field with ``bounds(cli_default=...)``, the command line's default, also written there).
    ``parser`` then reads ``-inf`` and ``-1e-3`` after an option as values (module
    docstring)."""
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise InvalidParameterError(f"cls must be a dataclass type, got {cls!r}")
    skip = set(skip)
    try:
        hints = typing.get_type_hints(cls)
    except Exception as exc:  # noqa: BLE001 - an unresolvable annotation: name it
        raise InvalidParameterError(
            f"{cls.__name__}: cannot resolve its type hints ({exc})"
        ) from exc
    docs = field_docs(cls)
    taken = set(getattr(parser, "_option_string_actions", {}))
    target = parser.add_argument_group(group_title) if group_title else parser
    added = []
    for f in dataclasses.fields(cls):
        if not f.init or f.name in skip or f.name.startswith("_"):
            continue
        b = _bounds_of(f)
        opt = _field_option(f)
        if opt in taken or f"--no-{opt[2:]}" in taken:
            continue
        spec = _option_spec(f, hints.get(f.name, Any), opt)
        if spec is None:
            continue
        default: Any = argparse.SUPPRESS
        if b["cli_default"] is not dataclasses.MISSING:
            cd = b["cli_default"]
            default = _CliDefault(tuple(cd) if isinstance(cd, list) else cd)
        d = _default_text(f)
        extra = "; ".join(x for x in (_bounds_text(f), None if d is None else f"default: {d}") if x)
        text = _plain(docs.get(f.name, "")).rstrip(".") or f.name
        metavar = None if spec.get("action") else opt[2:].replace("-", "_").upper()
        target.add_argument(
            opt,
            dest=f"cfg__{f.name}",
            default=default,
            required=b["required"],
            help=(f"{text} ({extra})" if extra else text).replace("%", "%%"),
            **{"metavar": metavar, **spec},
        )
        added.append(f.name)
    if added:
        _accept_negative_numbers(parser)
    return added


def given_fields(args: argparse.Namespace, *, cli_defaults: bool = True) -> dict[str, Any]:
    """The config fields given on the command line (by options from :func:`add_arguments`),
    and the command-line defaults (``bounds(cli_default=...)``) of the options not given
    (``cli_defaults=False``: only what the user gave)."""
    out = {}
    for key, value in vars(args).items():
        if key.startswith("cfg__"):
            if isinstance(value, _CliDefault):
                if not cli_defaults:
                    continue
                value = value.value
            out[key[len("cfg__") :]] = tuple(value) if isinstance(value, list) else value
    return out


def unique_keys(pairs: Iterable[Any], option: str) -> dict[str, Any]:
    """``KEY=VALUE`` pairs as a dict; a key given twice is refused (never the last one wins)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise InvalidParameterError(f"{option} {key} is given twice")
        out[key] = value
    return out


def given_config(cls: Any, args: argparse.Namespace, sets: Iterable[Any] = ()) -> dict[str, Any]:
    """The config fields of ``cls`` a command line gives: its options (:func:`given_fields`, the
    command line's defaults included) and ``sets`` (``--set KEY=VALUE`` pairs, which replace a
    command-line default). A key set twice, a field given both ways, and (``cls`` a dataclass)
    a key that is no init field are refused."""
    extra = unique_keys(sets, "--set")
    is_dc = dataclasses.is_dataclass(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init} if is_dc else {}
    both = sorted(set(given_fields(args, cli_defaults=False)) & set(extra))
    if both:
        opt = _field_option(fields[both[0]]) if both[0] in fields else option_name(both[0])
        raise InvalidParameterError(f"{opt} and --set {both[0]}=... are both given: give it once")
    bad = sorted(set(extra) - set(fields)) if is_dc else []
    if bad:
        raise InvalidParameterError(
            f"--set {bad[0]}: {cls.__name__} has no config field {bad[0]!r} (config fields: "
            f"{', '.join(fields)})"
        )
    hints = typing.get_type_hints(cls) if is_dc else {}
    for k, v in extra.items():
        if is_dc:
            _check_set(fields[k], hints[k], k, v)
    return {**given_fields(args), **extra}


_JSON_KINDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def _check_set(f: dataclasses.Field, tp: Any, key: str, v: Any) -> None:
    """``--set KEY=VALUE`` read as the field's option reads it: a JSON value of the field's
    scalar type within its bounds and choices, a tuple field's a JSON list of such values (a
    field with no option: the config's own checks judge it)."""
    opt = f"--set {key}"
    spec, (base, optional) = _option_spec(f, tp, opt), _unwrap_optional(tp)
    if spec is None or _bounds_of(f).get("whole") or (v is None and optional):
        return
    if "nargs" in spec:  # a tuple or list: a JSON list, each item read as the option reads one
        if not isinstance(v, list) or not (v or spec["nargs"] == "*"):
            least = "" if spec["nargs"] == "*" else " of at least one item"
            raise InvalidParameterError(f"{opt} must be a JSON list{least}, got {v!r}")
        for item in v:
            _check_set_value(spec, typing.get_args(base)[0], opt, item)
        return
    lits = typing.get_args(base) if typing.get_origin(base) is typing.Literal else ()
    _check_set_value(spec, type(lits[0]) if lits else base, opt, v)


def _check_set_value(spec: dict[str, Any], kind: Any, opt: str, v: Any) -> None:
    """One JSON value of ``--set`` (a scalar field's, or an item of a tuple field's) of the
    type ``kind``, read by the option's converter (its bounds and choices)."""
    ok = isinstance(v, kind) and (kind is bool or not isinstance(v, bool))
    ok = ok or (kind is float and (v == "inf" or type(v) is int))
    if not ok:
        raise InvalidParameterError(f"{opt} must be {_JSON_KINDS[kind]}, got {v!r}")
    if kind is not bool:
        try:
            spec["type"](repr(v) if isinstance(v, float) else str(v))
        except argparse.ArgumentTypeError as exc:
            raise InvalidParameterError(str(exc)) from None


def from_args(cls: type, args: argparse.Namespace, **extra: Any) -> Any:
    """Build ``cls`` from the options a user gave (plus ``extra`` fields, e.g. from ``--set``);
    every other field keeps its default (the command line's, where the field has a
    ``cli_default``; ``extra`` replaces that one). A field given twice is refused
    (:func:`given_config`). The config's own validation runs as usual, before any work."""
    return cls(**given_config(cls, args, extra.items()))


def _tuples(v: Any, tp: Any) -> Any:
    """JSON's list ``v`` as the tuple a field of type ``tp`` (``tuple[...]``, nested, or ``|
    None``) holds; any other value as it is (the config's own checks judge it)."""
    tp = _unwrap_optional(tp)[0]
    if not isinstance(v, list) or typing.get_origin(tp) is not tuple:
        return v
    return tuple(_tuples(x, typing.get_args(tp)[0]) for x in v)


def _lists(v: Any) -> Any:
    return [_lists(x) for x in v] if isinstance(v, tuple) else v


def config_to_dict(cfg: Any) -> dict[str, Any]:
    """``dataclasses.asdict(cfg)`` with its tuples (nested ones too) as lists: the JSON form
    :func:`config_from_dict` reads back."""
    return {k: _lists(v) for k, v in dataclasses.asdict(cfg).items()}


def config_from_dict(cls: Any, d: Any, **inf: Any) -> Any:
    """The dataclass config ``cls`` of a JSON dict ``d`` (its ``to_dict()``, a run's
    ``config.json`` ``"config"``): JSON lists become the tuples the fields hold and the string
    ``"inf"`` of a field named in ``inf`` its value there (``epsilon=math.inf``); nothing else is
    converted. A non-mapping, a key that is no field, a missing required field, and a value the
    config's own checks refuse (or a raw ``TypeError``) are refused naming the class, the key
    and the value (InvalidParameterError)."""
    name = cls.__name__
    if not isinstance(d, Mapping):
        raise InvalidParameterError(f"a {name} must be read from a dict, got {d!r}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    bad = [k for k in d if k not in fields]
    if bad:
        raise InvalidParameterError(
            f"{name} has no field {bad[0]!r} (given {d[bad[0]]!r}); fields: {', '.join(fields)}"
        )
    for k, f in fields.items():
        if k not in d and f.default is f.default_factory is dataclasses.MISSING:
            raise InvalidParameterError(f"{name} needs the field {k!r}, which is missing")
    hints = typing.get_type_hints(cls)
    kw = {k: _tuples(v, hints[k]) for k, v in d.items()}
    kw |= {k: inf[k] for k in inf if isinstance(d.get(k), str) and d[k] == "inf"}
    try:
        return cls(**kw)
    except InvalidParameterError as exc:
        raise type(exc)(f"{name}: {exc}") from exc
    except TypeError as exc:
        raise InvalidParameterError(f"{name}: {exc} (given {d!r})") from None
