"""Configs are the CLI (ldp_audit.config): options generated from a frozen dataclass, read
strictly, with the docstring, the default and the bounds written once in the config."""

from __future__ import annotations

import argparse
import math
import re
from dataclasses import dataclass, field
from typing import Literal

import pytest

from ldp_audit.cli.types import confidence
from ldp_audit.config import add_arguments, bounds, field_docs, from_args, given_fields
from ldp_audit.errors import InvalidParameterError


@dataclass(frozen=True, kw_only=True)
class Cfg:
    """A config with one field of every kind the command line reads."""

    n_agents: int = field(default=3, metadata=bounds(minimum=1, maximum=10))
    """Agents, each with one private value."""
    epsilon: float = field(default=1.0, metadata=bounds(minimum=0, open_min=True, inf=True))
    """Epsilon of one report."""
    lr: float = field(default=0.5, metadata=bounds(minimum=0, maximum=1, open_max=True))
    """Learning rate, 100% of nothing."""
    clip: bool = True
    """Clip every update."""
    name: str = "run"
    """A label."""
    rule: Literal["manhattan", "public-code"] = "manhattan"
    """Meeting rule."""
    sizes: tuple[int, ...] = field(default=(8, 16), metadata=bounds(minimum=2))
    """Map sizes."""
    limit: int | None = None
    """An optional cap."""
    extra: dict = field(default_factory=dict)
    """A mapping: no option (only --set reaches it)."""
    seed: int = 0
    """Collides with the command's own --seed: no option."""
    conf: float = field(default=0.95, metadata=bounds(parse=confidence))
    """A confidence level, read by the CLI's own converter."""

    def __post_init__(self) -> None:
        if isinstance(self.n_agents, bool) or not isinstance(self.n_agents, int):
            raise InvalidParameterError(f"n_agents must be an int, got {self.n_agents!r}")


def _parser() -> tuple[argparse.ArgumentParser, list[str]]:
    p = argparse.ArgumentParser(prog="t", exit_on_error=False)
    p.add_argument("--seed", type=int, default=0)
    return p, add_arguments(p, Cfg)


def _parse(argv: list[str]) -> argparse.Namespace:
    p, _ = _parser()
    return p.parse_args(argv)


def test_fields_become_options_with_docs_defaults_and_bounds() -> None:
    p, added = _parser()
    assert added == ["n_agents", "epsilon", "lr", "clip", "name", "rule", "sizes", "limit", "conf"]
    text = p.format_help()
    assert "--n-agents N_AGENTS" in text and "--no-clip" in text
    assert "Agents, each with one private value (>= 1, <= 10; default: 3)" in " ".join(text.split())
    assert "100% of nothing" in text  # a % in a docstring does not break argparse
    assert "(> 0, or inf; default: 1.0)" in " ".join(text.split())
    assert field_docs(Cfg)["extra"].startswith("A mapping")


def test_nothing_given_keeps_every_default() -> None:
    args = _parse([])
    assert given_fields(args) == {}
    assert from_args(Cfg, args) == Cfg()


def test_values_are_read_and_typed() -> None:
    args = _parse(
        ["--n-agents", "7", "--epsilon", "inf", "--lr", "0.25", "--no-clip", "--name", "x"]
        + ["--rule", "public-code", "--sizes", "8", "32", "--limit", "none", "--seed", "5"]
    )
    cfg = from_args(Cfg, args)
    assert cfg.n_agents == 7 and math.isinf(cfg.epsilon) and cfg.lr == 0.25
    assert cfg.clip is False and cfg.name == "x" and cfg.rule == "public-code"
    assert cfg.sizes == (8, 32) and cfg.limit is None and cfg.seed == 0
    assert args.seed == 5  # the command's own option, untouched
    assert from_args(Cfg, _parse(["--limit", "4"])).limit == 4
    assert from_args(Cfg, _parse(["--conf", "0.99"])).conf == 0.99


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--n-agents", "0"], "--n-agents must be an integer >= 1, got '0'"),
        (["--n-agents", "11"], "--n-agents must be <= 10, got '11'"),
        (["--n-agents", "True"], "--n-agents must be an integer"),
        (["--n-agents", "1_000"], "--n-agents must be an integer"),
        (["--n-agents", "2.5"], "--n-agents must be an integer"),
        # inf=True: the message says inf is a value (it is accepted above)
        (["--epsilon", "0"], "--epsilon must be 'inf' or a finite number in (0, inf), got '0'"),
        (["--epsilon", "nan"], "--epsilon must be 'inf' or a finite number in (0, inf), got 'nan'"),
        (["--lr", "1"], "--lr must be a finite number in [0, 1), got '1'"),
        (["--lr", "inf"], "--lr must be a finite number in [0, 1), got 'inf'"),
        (["--conf", "1"], "--conf must be a finite number in (0, 1), got '1'"),
        (["--rule", "euclid"], "--rule must be one of 'manhattan', 'public-code'"),
        (["--sizes", "8", "1"], "--sizes must be an integer >= 2, got '1'"),
        (["--name", " "], "--name must be a non-empty string"),
    ],
)
def test_bad_values_are_refused_naming_option_and_text(argv: list[str], needle: str) -> None:
    p, _ = _parser()
    with pytest.raises(argparse.ArgumentError) as e:
        p.parse_args(argv)
    assert needle in str(e.value)


def test_unrecognized_option_is_an_error() -> None:
    p, _ = _parser()
    # exit_on_error=False still exits for unknown options (argparse's own behaviour): say so
    with pytest.raises(SystemExit):
        p.parse_args(["--extra", "{}"])


def test_a_field_given_twice_is_refused_and_bad_classes_are_named() -> None:
    with pytest.raises(InvalidParameterError, match="--n-agents and --set n_agents"):
        from_args(Cfg, _parse(["--n-agents", "2"]), n_agents=3)
    with pytest.raises(InvalidParameterError, match="cls must be a dataclass type"):
        add_arguments(argparse.ArgumentParser(), dict)
    with pytest.raises(InvalidParameterError, match="minimum 2 > maximum 1"):
        bounds(minimum=2, maximum=1)


@dataclass(frozen=True)
class GoogleStyle:
    """A config documented the Google way.

    Attributes:
        size: map size N (8, 16, 32; other sizes need
            ``t_max``).
        eps_start, eps_end: exploration, decayed linearly.
        lr: learning rate.

    Notes:
        not: an attribute.
    """

    size: int = 8
    eps_start: float = 1.0
    eps_end: float = 0.1
    lr: float = 1e-3
    """The literal under the field wins over the section."""


def test_google_style_attributes_section_documents_fields() -> None:
    docs = field_docs(GoogleStyle)
    assert docs["size"] == "map size N (8, 16, 32; other sizes need ``t_max``)."
    assert docs["eps_start"] == docs["eps_end"] == "exploration, decayed linearly."
    assert docs["lr"] == "The literal under the field wins over the section."
    assert "not" not in docs
    p = argparse.ArgumentParser()
    add_arguments(p, GoogleStyle)
    text = " ".join(p.format_help().split())
    assert "map size N (8, 16, 32; other sizes need t_max) (default: 8)" in text


def _check_scale(v: object) -> None:
    """A config's own check: finite, >= 0, at most 1e6 (float32), in its own words."""
    if not isinstance(v, float) or not 0 <= v <= 1e6:
        raise InvalidParameterError(f"scale must be in [0, 1e6] (float32 outputs), got {v!r}")


@dataclass(frozen=True, kw_only=True)
class Checked:
    scale: float = field(default=1.0, metadata=bounds(minimum=0, maximum=1e6, check=_check_scale))
    """Noise scale."""
    bound: float | None = field(default=None, metadata=bounds(minimum=1e-6, check=_check_scale))
    """An optional clip bound."""


def test_a_fields_check_refuses_in_the_configs_words_before_the_bounds() -> None:
    p = argparse.ArgumentParser(prog="t", exit_on_error=False)
    assert add_arguments(p, Checked) == ["scale", "bound"]
    help_text = " ".join(p.format_help().split())
    assert "(>= 0, <= 1e+06; default: 1.0)" in help_text  # bounds with :g (issue 25)
    assert "(>= 1e-06; default: none)" in help_text  # None as the word the option reads
    for argv, needle in [
        (["--scale", "1e40"], "argument --scale: --scale must be in [0, 1e6] (float32 outputs)"),
        (["--scale", "-1"], "got -1.0"),
        (["--scale", "inf"], "got inf"),  # read, then refused by the check (not by the reader)
        (["--scale", "nan"], "--scale must be 'inf', '-inf' or a finite number"),  # strict reader
        (
            ["--scale", "1_0"],
            "--scale must be 'inf', '-inf' or a finite number in (-inf, inf), got '1_0'",
        ),
        (["--bound", "1e-300"], "--bound must be a finite number in [1e-06, inf), got"),
    ]:
        with pytest.raises(argparse.ArgumentError, match=None) as e:
            p.parse_args(argv)
        assert needle in str(e.value), (argv, str(e.value))
    args = p.parse_args(["--scale", "0", "--bound", "none"])
    assert from_args(Checked, args) == Checked(scale=0.0, bound=None)
    with pytest.raises(InvalidParameterError, match="check must be callable"):
        bounds(check=3)  # type: ignore[arg-type]


def test_choices_show_in_the_usage_as_argparse_shows_them() -> None:
    p, _ = _parser()
    assert "--rule {manhattan,public-code}" in p.format_help()
    assert "--n-agents N_AGENTS" in p.format_help()  # other options keep the field's name


# ------------------------------------------------------------------ negative numbers and empty


@dataclass(frozen=True, kw_only=True)
class Box:
    """A box's corners: values that start with a minus sign."""

    low: tuple[float, ...] = field(default=(-1.0, 0.0), metadata=bounds(inf=True))
    """Lower ends of the box (-inf: unbounded)."""
    scales: tuple[float, ...] = field(default=(1.0,), metadata=bounds(minimum=0, empty=True))
    """Scales of a sweep (none: skip it)."""
    shift: float = 0.0
    """A finite shift."""
    steps: tuple[int, ...] = field(default=(1,), metadata=bounds(minimum=-5))
    """Integer offsets."""


def _box(argv: list[str]) -> Box:
    p = argparse.ArgumentParser(prog="t", exit_on_error=False)
    add_arguments(p, Box)
    return from_args(Box, p.parse_args(argv))


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--low", "-inf", "1"], Box(low=(-math.inf, 1.0))),  # a leading -inf (issue 25)
        (["--low", "-1e-3", "-Infinity", "inf"], Box(low=(-1e-3, -math.inf, math.inf))),
        (["--low", "-.5", "--shift", "-1e-3"], Box(low=(-0.5,), shift=-1e-3)),
        (["--low", "-inf", "--steps", "-5", "-1e0", "3"], Box(low=(-math.inf,), steps=(-5, -1, 3))),
        (["--low=-inf"], Box(low=(-math.inf,))),
        (["--scales"], Box(scales=())),  # empty=True: the option alone is the empty tuple
        (["--scales", "0", "2.5", "--shift", "1"], Box(scales=(0.0, 2.5), shift=1.0)),
    ],
)
def test_values_with_a_leading_minus_are_values(argv: list[str], expected: Box) -> None:
    assert _box(argv) == expected


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--scales", "-inf"], "--scales must be a finite number in [0, inf), got '-inf'"),
        (["--scales", "1", "-1e-3"], "--scales must be a finite number in [0, inf), got '-1e-3'"),
        (["--shift", "-inf"], "--shift must be a finite number in (-inf, inf), got '-inf'"),
        (["--shift", "-nan"], "--shift must be a finite number in (-inf, inf), got '-nan'"),
        (
            ["--low", "-nan"],
            "--low must be 'inf', '-inf' or a finite number in (-inf, inf), got '-nan'",
        ),
        (
            ["--low", "-1_0"],
            "--low must be 'inf', '-inf' or a finite number in (-inf, inf), got '-1_0'",
        ),
        (["--low", "-1e309"], "got '-1e309'"),
        (["--steps", "-6"], "--steps must be an integer >= -5, got '-6'"),
        (["--steps", "-inf"], "--steps must be an integer >= -5, got '-inf'"),
        (["--low"], "expected at least one argument"),  # not empty=True: one value or more
        (["--low", "--shift", "1"], "expected at least one argument"),  # an option stays one
    ],
)
def test_values_with_a_leading_minus_are_refused_by_name(argv: list[str], needle: str) -> None:
    """A bad value with a minus sign is read as the option's value and refused naming the
    option and the text (before: argparse read ``-inf`` as an unknown option)."""
    p = argparse.ArgumentParser(prog="t", exit_on_error=False)
    add_arguments(p, Box)
    with pytest.raises(argparse.ArgumentError) as e:
        p.parse_args(argv)
    assert needle in str(e.value), str(e.value)


def test_minus_words_that_are_not_numbers_stay_options() -> None:
    p = argparse.ArgumentParser(prog="t", exit_on_error=False)
    add_arguments(p, Box)
    with pytest.raises(SystemExit):  # -x: an unknown option (argparse exits for those)
        p.parse_args(["--low", "1", "-x"])
    assert "or -inf, inf; default: -1.0 0.0" in " ".join(p.format_help().split())
    assert "(>= 0; default: 1.0)" in " ".join(p.format_help().split())


def test_a_parser_with_a_number_like_option_keeps_argparses_rule() -> None:
    """Where an option looks like a negative number (-1), argparse reads every such argument as
    an option; the generator leaves that parser's rule alone, and ``--opt=-inf`` still works."""
    p = argparse.ArgumentParser(prog="t", exit_on_error=False)
    p.add_argument("-1", dest="one", action="store_true")
    add_arguments(p, Box)
    args = p.parse_args(["--low=-inf", "-1"])
    assert args.one is True and from_args(Box, args).low == (-math.inf,)
    with pytest.raises(argparse.ArgumentError, match="expected at least one argument"):
        p.parse_args(["--low", "-1"])


# ------------------------------------------------- where the command line differs (issue 25)


def _read_pair_list(opt: str):  # noqa: ANN202
    """A whole field's reader: ``a,b;c,d`` (strict numbers), its own message."""
    from ldp_audit.parse import parse_real

    def read(text: str) -> tuple[tuple[float, float], ...]:
        try:
            pairs = [tuple(parse_real(x, opt) for x in p.split(",")) for p in text.split(";")]
        except argparse.ArgumentTypeError:
            pairs = []
        if not pairs or any(len(p) != 2 for p in pairs):
            raise argparse.ArgumentTypeError(
                f"{opt} must be 'lo,hi' pairs separated by ';', got {text!r}"
            )
        return tuple((float(a), float(b)) for a, b in pairs)

    return read


@dataclass(frozen=True, kw_only=True)
class Cli:
    """A config whose command line differs from its Python API."""

    algo: Literal["a", "b"] = field(default="a", metadata=bounds(required=True))
    """The algorithm."""
    noise_levels: tuple[float, ...] = field(
        default=(0.0, 0.5), metadata=bounds(minimum=0, maximum=1e6, option="--noise")
    )
    """Noise levels of the grid."""
    canaries: int = field(default=800, metadata=bounds(minimum=0, cli_default=500))
    """Canaries of the audit."""
    box: tuple[tuple[float, float], ...] | None = field(
        default=None, metadata=bounds(parse=_read_pair_list, whole=True)
    )
    """A box, one (lo, hi) pair per coordinate."""
    pairs: tuple[tuple[float, float], ...] = field(
        default=((0.0, 1.0), (2.0, 3.5)), metadata=bounds(parse=_read_pair_list, whole=True)
    )
    """Pairs (no None)."""
    keep: bool | None = None
    """Keep the updates (none: the algorithm decides)."""
    rate: float = field(default=0.25, metadata=bounds(minimum=1e-7, maximum=0.123456789))
    """A rate whose upper end has more digits than :g shows."""
    cap: int = field(default=10, metadata=bounds(minimum=1, maximum=10_000_000))
    """An integer cap (shown as an integer)."""


def _cli_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="t", exit_on_error=False)
    add_arguments(p, Cli)
    return p


def test_required_option_name_cli_default_whole_field_and_optional_bool() -> None:
    p = _cli_parser()
    args = p.parse_args(["--algo", "b"])
    assert given_fields(args) == {"algo": "b", "canaries": 500}  # 500: the command line's
    assert given_fields(args, cli_defaults=False) == {"algo": "b"}
    assert from_args(Cli, args) == Cli(algo="b", canaries=500)
    args = p.parse_args(
        ["--algo", "a", "--noise", "0", "1e-3", "--canaries", "800", "--box=-1,1;-2.5,2.5"]
        + ["--no-keep", "--pairs", "5,6"]
    )
    assert from_args(Cli, args) == Cli(
        noise_levels=(0.0, 1e-3), canaries=800, box=((-1.0, 1.0), (-2.5, 2.5)), keep=False,
        pairs=((5.0, 6.0),),
    )  # fmt: skip
    assert from_args(Cli, p.parse_args(["--algo", "a", "--keep"])).keep is True
    assert from_args(Cli, p.parse_args(["--algo", "a", "--box", "none"])).box is None
    # --set replaces a command-line default without a "given twice" refusal; a given one is
    with pytest.raises(InvalidParameterError, match="--noise and --set noise_levels"):
        from_args(Cli, p.parse_args(["--algo", "a", "--noise", "1"]), noise_levels=(2.0,))
    assert from_args(Cli, p.parse_args(["--algo", "a"]), canaries=0).canaries == 0
    with pytest.raises(InvalidParameterError, match="--canaries and --set canaries"):
        from_args(Cli, p.parse_args(["--algo", "a", "--canaries", "3"]), canaries=0)


def test_help_of_the_command_line_only_metadata() -> None:
    text = " ".join(_cli_parser().format_help().split())
    assert "--algo {a,b} The algorithm (required)" in text
    assert (
        "--noise NOISE [NOISE ...] Noise levels of the grid (>= 0, <= 1e+06; default: 0.0 0.5)"
        in text
    )
    assert (
        "--canaries CANARIES Canaries of the audit (>= 0; default: 500; Python default: 800)"
        in text
    )
    assert "--box BOX A box, one (lo, hi) pair per coordinate (default: none)" in text
    assert "--pairs PAIRS Pairs (no None) (default: 0.0,1.0;2.0,3.5)" in text
    assert (
        "--keep, --no-keep Keep the updates (none: the algorithm decides) (default: none)" in text
    )
    assert "(>= 1e-07, <= 0.123456789; default: 0.25)" in text  # :g would drop digits: repr
    assert "(>= 1, <= 10000000; default: 10)" in text  # an int stays an int
    assert "--noise-levels" not in text


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        ([], "the following arguments are required: --algo"),
        (["--algo", "c"], "--algo must be one of 'a', 'b', got 'c'"),
        (
            ["--algo", "a", "--noise", "nan"],
            "--noise must be a finite number in [0, 1e+06], got 'nan'",
        ),
        (
            ["--algo", "a", "--noise", "0", "-1e-3"],
            "--noise must be a finite number in [0, 1e+06], got '-1e-3'",
        ),
        (["--algo", "a", "--canaries", "-1"], "--canaries must be an integer >= 0, got '-1'"),
        (["--algo", "a", "--canaries", "1_0"], "--canaries must be an integer"),
        (
            ["--algo", "a", "--box", "1,2;3"],
            "--box must be 'lo,hi' pairs separated by ';', got '1,2;3'",
        ),
        (
            ["--algo", "a", "--box", "nan,1"],
            "--box must be 'lo,hi' pairs separated by ';', got 'nan,1'",
        ),
        (["--algo", "a", "--box", ""], "--box must be 'lo,hi' pairs separated by ';', got ''"),
        (
            ["--algo", "a", "--pairs", "none"],
            "--pairs must be 'lo,hi' pairs separated by ';', got 'none'",
        ),
        (["--algo", "a", "--box", "1,2", "3,4"], "unrecognized arguments: 3,4"),
        (["--algo", "a", "--keep=1"], "--keep"),
    ],
)
def test_command_line_only_metadata_refuses_bad_input_by_name(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bad input: exit 2 naming the option and the value (argparse's own exits included)."""
    p = argparse.ArgumentParser(prog="t")  # exits 2 like the CLI
    add_arguments(p, Cli)
    with pytest.raises(SystemExit) as e:
        p.parse_args(argv)
    assert e.value.code == 2
    assert needle in capsys.readouterr().err


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"option": "noise"}, "option must be an option name such as '--noise', got 'noise'"),
        ({"option": "--Noise"}, "got '--Noise'"),
        ({"option": "--no ise"}, "got '--no ise'"),
        ({"option": 3}, "got 3"),
        ({"whole": True}, "whole=True needs parse"),
        ({"required": True, "cli_default": 5}, "a required option has no command-line default"),
        ({"required": 1}, "required must be True or False, got 1"),
        ({"whole": "yes", "parse": _read_pair_list}, "whole must be True or False, got 'yes'"),
    ],
)
def test_bad_command_line_metadata_is_refused(kw: dict, needle: str) -> None:
    with pytest.raises(InvalidParameterError) as e:
        bounds(**kw)
    assert needle in str(e.value)


def test_an_integer_too_long_to_read_is_refused_by_name() -> None:
    """A 5,000-digit count is a usage error naming the option (int() alone raises ValueError
    past 4,300 digits, which argparse would print as an 'invalid partial value'); an upper
    bound's reason is said."""
    from ldp_audit.cli.types import int_at_least
    from ldp_audit.parse import parse_int

    with pytest.raises(argparse.ArgumentTypeError, match="--samples must be an integer >= 1000"):
        int_at_least("--samples", 1000)("9" * 5000)
    assert parse_int("7" * 30, "--n", maximum=10**40) == int("7" * 30)
    with pytest.raises(argparse.ArgumentTypeError, match=r"--agents must be <= 8 \(in memory\)"):
        int_at_least("--agents", 1, 8, "in memory")("9")


def test_epsilon_or_inf_reads_like_a_generated_option() -> None:
    """The hand-written ``--epsilon`` (attack, train pgc-a3c) is a generated option's reader:
    ``inf`` or a finite normal double > 0, refused in the same words."""
    from ldp_audit.parse import epsilon_or_inf

    assert epsilon_or_inf(" inf ") == math.inf and epsilon_or_inf("0.5") == 0.5
    for bad in ("0", "-1", "nan", "-inf", "1_000", "1e400", ""):
        with pytest.raises(argparse.ArgumentTypeError) as exc:
            epsilon_or_inf(bad)
        assert str(exc.value) == (
            f"--epsilon must be 'inf' or a finite number in (0, inf), got {bad!r}"
        )
    with pytest.raises(argparse.ArgumentTypeError, match="--epsilon must be >= .*normal double"):
        epsilon_or_inf("1e-320")


def test_option_words_names_the_fields_a_message_names_as_parameters() -> None:
    """A config's message on the command line names options; prose, paths and quoted values
    keep their words (a single-word field only where it is a parameter: ``must``, ``=``)."""
    from ldp_audit.config import option_words

    opts = {"threshold": "--threshold", "episode_steps": "--episode-steps", "seed": "--seed",
            "state_low": "--state-low", "state_high": "--state-high",
            "actor_lr": "--lr-a"}  # fmt: skip
    said = {
        "threshold must be <= episode_steps, 9": "--threshold must be <= --episode-steps, 9",
        "state_low/state_high must be ranges": "--state-low/--state-high must be ranges",
        "too large (actor_lr=1e+30, seed=3)": "too large (--lr-a=1e+30, --seed=3)",
        "the seed of /r/state_low/x, 'actor_lr', state_low.json": "the seed of /r/state_low/x, "
        "'actor_lr', state_low.json",
        # session 58: a path check's "NAME: ..." at the start (a colon elsewhere is prose)
        "seed: 'f' is not a directory": "--seed: 'f' is not a directory",
        "bad seed: 3": "bad seed: 3",
    }
    for text, words in said.items():
        assert option_words(text, opts) == words


def test_options_named_rewrites_errors_inside_only() -> None:
    from ldp_audit.config import options_named
    from ldp_audit.training.frd.config import FrdConfig

    with pytest.raises(InvalidParameterError, match=r"^threshold must be <= episode_steps"):
        FrdConfig(threshold=600)  # the Python API keeps its arguments' names
    with pytest.raises(InvalidParameterError, match=r"^--threshold must be <= --episode-steps"):
        with options_named(FrdConfig):
            FrdConfig(threshold=600)
    # a command's options that are no config field (reproduce dprl --cache), named too
    with pytest.raises(InvalidParameterError, match=r"^--cache must be a folder; --threshold"):
        with options_named(FrdConfig, ("cache",)):
            raise InvalidParameterError("cache must be a folder; threshold must be")


@pytest.mark.parametrize(
    ("sets", "needle"),
    [
        ({"n_agents": 50}, "--set n_agents must be <= 10, got '50'"),
        ({"n_agents": "3"}, "--set n_agents must be an integer, got '3'"),
        ({"n_agents": True}, "--set n_agents must be an integer, got True"),
        ({"lr": 1.0}, "--set lr must be a finite number in [0, 1), got '1.0'"),
        ({"lr": "0.5"}, "--set lr must be a number, got '0.5'"),
        ({"name": 7}, "--set name must be a string, got 7"),
        ({"rule": "other"}, "--set rule must be one of 'manhattan', 'public-code'"),
        ({"clip": 1}, "--set clip must be true or false, got 1"),
        ({"limit": "x"}, "--set limit must be an integer, got 'x'"),
        # a tuple field's items as its option reads them (before session 56 --set took a
        # string, a number, bools or out-of-bounds items for a tuple[float, ...] field)
        ({"sizes": "01"}, "--set sizes must be a JSON list of at least one item, got '01'"),
        ({"sizes": 8}, "--set sizes must be a JSON list of at least one item, got 8"),
        ({"sizes": []}, "--set sizes must be a JSON list of at least one item, got []"),
        ({"sizes": [8, True]}, "--set sizes must be an integer, got True"),
        ({"sizes": [8, 1]}, "--set sizes must be an integer >= 2, got '1'"),
        ({"sizes": [8, 2.5]}, "--set sizes must be an integer, got 2.5"),
    ],
)
def test_set_reads_a_field_as_its_option_does(sets: dict, needle: str) -> None:
    # before session 52: --set reports=5000 trained a plug-in's run that --reports 5000 refuses
    # (bounds(maximum=1000) held on the option only), and --set label='"x"' put a str in an int
    with pytest.raises(InvalidParameterError, match=re.escape(needle)):
        from_args(Cfg, _parse([]), **sets)


def test_set_keeps_what_the_option_reads() -> None:
    got = from_args(Cfg, _parse([]), n_agents=10, lr=0, epsilon="inf", limit=None, extra={"a": 1})
    assert (got.n_agents, got.lr, got.epsilon, got.limit) == (10, 0, "inf", None)
    assert got.extra == {"a": 1}
    assert from_args(Cfg, _parse([]), sizes=[2, 3], rule="public-code").rule == "public-code"
