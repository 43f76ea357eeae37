"""argparse ``type=`` converters shared by the subcommands (messages name option and value)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def int_at_least(name: str, minimum: int) -> Callable[[str], int]:
    """A converter accepting integers >= ``minimum``."""

    def convert(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            v = None
        if v is None or v < minimum:
            raise argparse.ArgumentTypeError(
                f"{name} must be an integer >= {minimum}, got {text!r}"
            )
        return v

    return convert


def epsilon_or_inf(text: str) -> float:
    """A positive real epsilon, or ``inf`` for the explicit non-private baseline."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"epsilon must be a number or 'inf', got {text!r}"
        ) from None
    if math.isnan(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"epsilon must be > 0 (or inf), got {text!r}")
    return v
