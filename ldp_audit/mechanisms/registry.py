"""The registry of built-in mechanisms (``to_config`` names), the config round trip and the
sequential-composition helper."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ldp_audit.errors import InvalidParameterError
from ldp_audit.mechanisms.base import Mechanism
from ldp_audit.validation import check_epsilon, check_int

for _module in pkgutil.iter_modules([str(Path(__file__).parent)]):  # every built-in family
    importlib.import_module(f"{__package__}.{_module.name}")


def _built_in(cls: type) -> Iterator[type[Mechanism]]:
    """The subclasses of ``cls`` in this package that name themselves (``name``), recursively."""
    for sub in cls.__subclasses__():
        if sub.__module__.startswith(f"{__package__}.") and "name" in vars(sub):
            yield sub
        yield from _built_in(sub)


#: every built-in mechanism by its ``to_config()`` name
MECHANISMS: dict[str, type[Mechanism]] = {cls.name: cls for cls in _built_in(Mechanism)}


def from_config(config: dict[str, Any]) -> Mechanism:
    """Rebuild a mechanism from ``mech.to_config()``.

    Raises:
        InvalidParameterError: unknown name, unknown or invalid fields.
    """
    if not isinstance(config, dict) or "name" not in config:
        raise InvalidParameterError(f"config must be a dict with a 'name' key, got {config!r}")
    kwargs = dict(config)
    name = kwargs.pop("name")
    cls = MECHANISMS.get(name)
    if cls is None:
        raise InvalidParameterError(
            f"config['name'] must be one of {sorted(MECHANISMS)}, got {name!r}"
        )
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise InvalidParameterError(f"invalid fields for {name!r}: {exc}") from None


def split_epsilon(total: float, rounds: int) -> float:
    """Per-submission epsilon for T submissions under sequential composition (section 3.2.1):
    ``total / T``, so T reports of an epsilon/T-LDP mechanism are epsilon-LDP together.

    ``total = inf`` (explicit non-private baseline) returns inf.
    """
    t = check_epsilon(total, "total", allow_inf=True)
    r = check_int(rounds, "rounds", minimum=1)
    return t / r
