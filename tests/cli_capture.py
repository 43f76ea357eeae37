"""What a subcommand hands its entry point, without running it (the generated-options tests).

``hand_over(monkeypatch, (module, "train"), ...)`` replaces the entry points by one that raises
:class:`Handed` with the object it was given (a BaseException: ``main()`` does not catch it);
``handed(argv)`` runs ``ldp_audit.cli.main(argv)`` and returns that object;
``subcommand_parser("train", "frd")`` is the parser of ``ldp-audit train frd``.
"""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from ldp_audit.cli import build_parser, main


class Handed(BaseException):
    """Raised by a replaced entry point with the config or settings it was handed."""


def hand_over(monkeypatch: pytest.MonkeyPatch, *targets: tuple[Any, str]) -> None:
    def fake(obj: Any, **_kw: Any) -> None:
        raise Handed(obj)

    for module, attr in targets:
        monkeypatch.setattr(module, attr, fake)


def handed(argv: list[str]) -> Any:
    with pytest.raises(Handed) as got:
        main(argv)
    return got.value.args[0]


def _subparsers(p: argparse.ArgumentParser) -> argparse._SubParsersAction:
    return next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))


def subcommand_parser(verb: str, name: str) -> argparse.ArgumentParser:
    return _subparsers(_subparsers(build_parser()).choices[verb]).choices[name]
