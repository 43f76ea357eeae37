"""Which torch device a trainer runs on: ``"cpu"``, ``"cuda"`` or ``"auto"``.

The torch trainers (:mod:`ldp_audit.training.fedrl`, :mod:`ldp_audit.training.dprl`) take a
``device`` in their config. Every random draw stays where it is on the CPU (numpy generators,
CPU ``torch.Generator``; a draw the device needs is made on the CPU and moved), so a run's
random streams do not depend on the device: on the CPU results are bit for bit those of the
trainers before the option existed, and on a GPU they differ only by float32 rounding.

``"auto"`` is ``"cuda"`` when ``torch.cuda.is_available()`` and ``"cpu"`` otherwise;
``"cuda"`` without a usable CUDA device is refused with
:class:`~ldp_audit.errors.InvalidParameterError` before any work.
"""

from __future__ import annotations

from typing import Any

from ldp_audit.errors import InvalidParameterError

__all__ = ["DEVICES", "resolve_device", "load_libraries"]

#: accepted values of a trainer's ``device``
DEVICES = ("cpu", "cuda", "auto")


def resolve_device(value: Any, name: str = "device") -> str:
    """The device to run on, ``"cpu"`` or ``"cuda"`` (``"auto"`` resolved).

    Raises:
        InvalidParameterError: ``value`` is not in :data:`DEVICES`, or it is ``"cuda"`` and torch
            has no usable CUDA device (the message says which torch build was found).
    """
    if not isinstance(value, str) or value not in DEVICES:
        raise InvalidParameterError(f"{name} must be one of {', '.join(DEVICES)}; got {value!r}")
    if value == "cpu":
        return "cpu"
    import torch

    ok = bool(torch.cuda.is_available())
    if value == "auto":
        return "cuda" if ok else "cpu"
    if not ok:
        raise InvalidParameterError(
            f"{name} 'cuda' needs a CUDA device, but torch {torch.__version__} (CUDA build: "
            f"{torch.version.cuda or 'none'}) sees none (torch.cuda.is_available() is False); "
            f"use {name} 'cpu' or 'auto'"
        )
    return "cuda"


def load_libraries(*modules: str) -> None:
    """Import torch, what a first optimizer imports (``torch._dynamo``) and ``modules`` now,
    before a trainer makes its run folder: they take seconds at load, and a signal inside an
    installed library's import is held until it returns (``ldp_audit.cli.signals``), so one
    held past the watchdog's 1 s grace after ``config.json`` left the run "running" with no
    manifest (session 51: ``train fedrl``, 8 of 14 single signals; session 52: ``train dprl``,
    every one of 8 single signals 0-2.5 s after ``config.json`` at load 15)."""
    import importlib

    import torch

    torch.optim.Adam([torch.zeros(1, requires_grad=True)])
    for name in modules:
        importlib.import_module(name)
