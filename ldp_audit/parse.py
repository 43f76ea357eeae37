"""Strict readers of numbers given as text (a command-line option, a comma list in a config
field): the core's, so a config's field parser and the CLI read the same way.

Each raises ``argparse.ArgumentTypeError`` naming the option and the text (argparse turns it into
a usage error, exit 2; a config's own ``__post_init__`` wraps it where it reads a string).
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Callable
from typing import Any

from ldp_audit.errors import InvalidParameterError

__all__ = [
    "INT_MAX",
    "NORMAL_MIN",
    "check_normal",
    "parse_real",
    "parse_int",
    "epsilon_or_inf",
    "real_in",
    "parse_private_param",
]

#: the largest integer any count or seed option accepts (a signed 64-bit integer): larger values
#: would be an OverflowError deep inside NumPy or torch, after work has started.
INT_MAX = 2**63 - 1
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_INF_WORDS = {"inf", "+inf", "infinity", "+infinity"}


#: the smallest positive normal double (2.2e-308): a positive value below it is subnormal (a
#: scale, step or noise level there has lost its precision)
NORMAL_MIN = sys.float_info.min


def check_normal(
    x: float, name: str, given: Any = None, *, zero: bool = False, exc: type = InvalidParameterError
) -> None:
    """Refuse a positive subnormal ``x`` (``0 < x <`` :data:`NORMAL_MIN`) with ``exc`` naming
    ``name`` and the value ``given`` (default ``x``; the text a converter read); ``zero``: the
    message says that 0 is allowed (a noise level: 0 is no noise). The one wording of this
    refusal: the core's checks, the CLI's converters (:func:`ldp_audit.parse.real_in`) and the
    reproductions' noise levels."""
    if 0.0 < x < NORMAL_MIN:
        least = f"{'0 or ' * zero}>= {NORMAL_MIN:g}"
        raise exc(
            f"{name} must be {least} (a normal double), got {x if given is None else given!r}"
        )


def parse_real(text: str, name: str) -> float:
    """Read a command-line real number strictly, or raise ``argparse.ArgumentTypeError``.

    Accepted: plain ASCII decimal or scientific notation (``0.5``, ``-1``, ``1e-3``), surrounding
    spaces ignored (``inf``: :func:`real_in` with ``inf=True``). Refused, naming ``name`` and
    the text: the empty string, ``nan``, ``inf``, hexadecimal, Python's ``1_000``, non-ASCII
    digits (``float('\uff11')`` would read 1), ``True``, and a literal a double cannot hold:
    ``1e309`` is not silently infinity, nor ``1e-400`` silently 0. ``-0`` is read as 0.
    """
    t = text.strip() if isinstance(text, str) else ""
    if t.lower() in _INF_WORDS:
        raise argparse.ArgumentTypeError(f"{name} must be finite, got {text!r}")
    if not _DECIMAL.fullmatch(t):
        raise argparse.ArgumentTypeError(f"{name} must be a finite number, got {text!r}")
    v = float(t)
    if math.isinf(v):
        raise argparse.ArgumentTypeError(
            f"{name}: {text!r} is too large for a double (it would be read as infinity)"
        )
    if _underflows(t, v):
        raise argparse.ArgumentTypeError(
            f"{name}: {text!r} is too small for a double (it would be read as 0)"
        )
    return v if v else 0.0  # -0 is 0 (it printed as "delta = -0")


def _underflows(t: str, v: float) -> bool:
    """A literal with a non-zero digit before its exponent read as 0 (``1e-400``)."""
    return v == 0 and any(c in "123456789" for c in re.split("[eE]", t)[0])


def parse_int(
    text: str, name: str, *, minimum: int | None = None, maximum: int = INT_MAX, why: str = ""
) -> int:
    """Read a command-line integer strictly (``1000``, ``1e6`` and ``1000.0`` when whole), or
    raise ``argparse.ArgumentTypeError`` naming ``name`` and the text; the value must lie in
    [``minimum``, ``maximum``] (``maximum`` defaults to :data:`INT_MAX`; ``why``: the reason
    for the upper bound, e.g. the memory it would take)."""
    bound = f" >= {minimum}" if minimum is not None else ""
    t = text.strip() if isinstance(text, str) else ""
    v: int | None = None
    if re.fullmatch(r"[+-]?[0-9]+", t) and len(t) <= 4000:  # longer: int() raises ValueError
        v = int(t)
    elif _DECIMAL.fullmatch(t):
        try:
            f = float(t)
            if math.isfinite(f) and f.is_integer() and abs(f) <= 2**53 and not _underflows(t, f):
                v = int(f)
        except (ValueError, OverflowError):
            v = None
    if v is None or (minimum is not None and v < minimum):
        raise argparse.ArgumentTypeError(f"{name} must be an integer{bound}, got {text!r}")
    if v > maximum:
        extra = f" ({why})" if why else ""
        raise argparse.ArgumentTypeError(f"{name} must be <= {maximum:,}{extra}, got {text!r}")
    return v


def real_in(
    name: str,
    *,
    low: float = -math.inf,
    high: float = math.inf,
    low_open: bool = True,
    high_open: bool = True,
    inf: bool = False,
) -> Callable[[str], float]:
    """A converter accepting finite reals in (low, high) (ends open or closed as given); the
    message names the option and the value. With an open lower end at 0 the value must also be a
    normal double (>= 2.2e-308: a subnormal scale or step loses its precision). With ``inf``,
    ``inf`` is a value too (an infinite epsilon), and ``-inf`` where ``low`` is ``-inf`` (an
    unbounded lower end, e.g. a box's low corner)."""
    lo_b, hi_b = ("(" if low_open else "["), (")" if high_open else "]")
    words = ("'inf', '-inf' or " if low == -math.inf else "'inf' or ") if inf else ""

    def convert(text: str) -> float:
        t = text.strip().lower() if inf and isinstance(text, str) else ""
        if t in _INF_WORDS or (t in ("-inf", "-infinity") and low == -math.inf):
            return math.inf if t[0] != "-" else -math.inf
        try:
            v = parse_real(text, name)
        except argparse.ArgumentTypeError:
            v = math.nan
        ok = math.isfinite(v) and (v > low if low_open else v >= low)
        ok = ok and (v < high if high_open else v <= high)
        if not ok:
            raise argparse.ArgumentTypeError(
                f"{name} must be {words}a finite number in {lo_b}{low:g}, {high:g}{hi_b}, got "
                f"{text!r}"
            )
        if low == 0.0 and low_open:
            check_normal(v, name, text, exc=argparse.ArgumentTypeError)
        return v

    return convert


#: a positive real epsilon, or ``inf`` for the explicit non-private baseline (``--epsilon``)
epsilon_or_inf = real_in("--epsilon", low=0.0, inf=True)

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_private_param(text: str) -> tuple[str, tuple[float, ...]]:
    """``NAME=V1,V2,...`` -> (NAME, (V1, V2, ...)): an attribute name and at least two distinct
    candidate values, each read strictly (no nan/inf)."""
    if not isinstance(text, str) or "=" not in text:
        raise argparse.ArgumentTypeError(
            f"--private-param must be NAME=V1,V2,... (e.g. LINK_MASS_1=0.5,1,2), got {text!r}"
        )
    name, _, rest = text.partition("=")
    name = name.strip()
    if not _NAME.fullmatch(name):
        sub = "." in name  # a value inside a sub-object: one attribute of the env forwards to it
        raise argparse.ArgumentTypeError(
            f"--private-param: {name!r} is not an attribute name (in {text!r})"
            + ("; for a value inside a sub-object, give the env a property with a setter" * sub)
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
