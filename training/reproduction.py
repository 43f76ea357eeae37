"""What every paper reproduction (PGC-A3C, DP-SGD RL, FRD, FedRL) does the same way.

- :func:`check_fields`: a reproduction config's fields checked against their annotated types and
  the bounds in their metadata (:func:`ldp_audit.config.bounds`, the same bounds that generate
  the command-line options), so a Python caller is refused in the same terms as the CLI;
- :func:`provenance`: what a results.json records about where and when it was made (the machine
  in words, its fingerprint, library versions, the load, the resolved torch device);
- :func:`write_report`: results.json and the generated pages into a report folder (a
  hand-written ``notes.md`` there is read by :func:`notes_of` and kept);
- :func:`cached`: a resumable cell (a run or an audit kept as it finishes, keyed by its whole
  spec by :func:`cache_path`), so an interrupted reproduction resumes where it stopped;
- :func:`num`: a number of results.json in words (``inf``, NaN and null spelled as the report
  asks).

The privacy statement and verdict of every README are in
:mod:`ldp_audit.training.reproduction_statement`, the rerun check in
:mod:`ldp_audit.training.reproduction_check`, the rebuild of the committed reports in
:mod:`ldp_audit.training.committed_reports`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import platform
import re
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ldp_audit.accountant.events import NOISE_MULTIPLIER_RANGE
from ldp_audit.errors import InvalidParameterError
from ldp_audit.parse import INT_MAX, check_normal
from ldp_audit.rundir.files import json_real, read_json, to_jsonable, write_json_file
from ldp_audit.rundir.writer import machine

__all__ = [
    "cache_path",
    "cached",
    "check_fields",
    "loadavg",
    "machine_fingerprint",
    "notes_of",
    "provenance",
    "read_results",
    "restore",
    "to_float",
    "write_report",
]


# ---------------------------------------------------------------------- config fields


def _words(b: dict[str, Any], integer: bool) -> str:
    lo, hi = b.get("minimum"), b.get("maximum")
    lo_op = ">" if b.get("open_min") else ">="
    if lo is not None and hi is not None:
        if integer:
            return f" in [{lo}, {hi}]"
        return f" in {'(' if b.get('open_min') else '['}{lo:g}, {hi:g}{')' if b.get('open_max') else ']'}"  # noqa: E501
    if lo is not None:
        return f" {lo_op} {lo}" if integer else f" {lo_op} {lo:g}"
    return f" {'<' if b.get('open_max') else '<='} {hi}" if hi is not None else ""


def _check_one(name: str, v: Any, tp: Any, b: dict[str, Any], optional: bool = False) -> None:
    """One scalar value ``v`` of field ``name`` against type ``tp`` and bounds ``b`` (``optional``:
    None is allowed too, and the message says so)."""
    choices = b.get("choices")
    if choices is not None:
        if isinstance(v, bool) or v not in choices:
            raise InvalidParameterError(
                f"{name} must be one of {', '.join(map(str, choices))}; got {v!r}"
            )
    elif tp is bool:
        if not isinstance(v, bool):
            what = "True, False or None" if optional else "True or False"
            raise InvalidParameterError(f"{name} must be {what}, got {v!r}")
    elif tp is str:
        if not isinstance(v, str):
            raise InvalidParameterError(f"{name} must be a string, got {v!r}")
    elif tp in (int, float):
        integer = tp is int
        ok = not isinstance(v, bool) and isinstance(v, int if integer else (int, float))
        if ok and not integer:
            ok = not math.isnan(v) and (math.isfinite(v) or bool(b.get("inf")))
        lo, hi = b.get("minimum"), b.get("maximum")
        if ok and lo is not None:
            ok = v > lo if b.get("open_min") else v >= lo
        if ok and hi is not None:
            ok = v < hi if b.get("open_max") else v <= hi
        if not ok:
            what = ("None or " if optional else "") + ("an integer" if integer else "a real number")
            # np.int64(3) is an integer to a reader, not to this check: say which type it takes
            cast = "int" if integer else "float"
            numpy = type(v).__module__ == "numpy" and not isinstance(v, (bool, int, float))
            hint = f" ({type(v).__name__}: give a Python {cast}, {cast}(v))" if numpy else ""
            raise InvalidParameterError(
                f"{name} must be {what}{_words(b, integer)}, got {v!r}{hint}"
            )
        if integer and v > INT_MAX:  # as check_int and the CLI's parse_int (a signed int64)
            raise InvalidParameterError(f"{name} must be <= {INT_MAX:,}, got {v!r}")
    if b.get("check") is not None:
        b["check"](v)


def check_noise_levels(settings: Any, *names: str) -> None:
    """Each value of the fields ``names`` of ``settings`` (noise levels: a number, or a grid's
    tuple) is 0 (no noise) or a normal double: a positive subnormal such as 5e-324 passed the
    fields' [0, max] bounds, then a run's own config refused it once the grid had started, or
    once ``train dprl`` had written its run folder (session 56: ``reproduce dprl --obs-noise
    5e-324``, ``reproduce fedrl --attack-sigmas 5e-324``, ``train dprl --noise-multiplier
    5e-324``)."""
    for name in names:
        values = getattr(settings, name)
        for v in values if isinstance(values, (tuple, list)) else (values,):
            check_normal(v, name, zero=True)
            if 0 < v < NOISE_MULTIPLIER_RANGE[0]:  # a ledger's GaussianEvent: its floor
                raise InvalidParameterError(
                    f"{name} must be 0 or >= {NOISE_MULTIPLIER_RANGE[0]:g} (the accounting "
                    f"squares it), got {v!r}"
                )


def check_fields(cfg: Any, **overrides: dict[str, Any]) -> None:
    """Check every field of the dataclass ``cfg`` against its annotated type (``bool``,
    ``int``, ``float``, ``str``, ``tuple[T, ...]`` and ``T | None`` of those) and its bounds
    metadata (minimum, maximum, open ends, ``inf``, choices, ``empty``, the field's ``check``);
    ``overrides``: ``name=bounds(...)`` replacing a field's bounds here, for a field whose
    command line reads it with its own parser. A bool is never a number, a NaN never a real,
    an infinity a real only with ``inf``; the error names the field and the value."""
    hints = typing.get_type_hints(type(cfg))
    for f in dataclasses.fields(cfg):
        b = dict((overrides.get(f.name) or f.metadata).get("ldp_audit", {}))
        v, tp = getattr(cfg, f.name), hints[f.name]
        args = typing.get_args(tp)
        optional = type(None) in args  # T | None
        if optional:
            if v is None:
                continue
            tp = next(a for a in args if a is not type(None))
        if typing.get_origin(tp) in (tuple, list):
            if not isinstance(v, (tuple, list)) or not (v or b.get("empty")):
                raise InvalidParameterError(
                    f"{f.name} must be a {'' if b.get('empty') else 'non-empty '}tuple, got {v!r}"
                )
            for x in v:
                _check_one(f.name, x, typing.get_args(tp)[0], b)
        else:
            _check_one(f.name, v, tp, b, optional)


# ---------------------------------------------------------------------- provenance


def machine_fingerprint() -> dict[str, Any]:
    """What decides the last bits of this machine's float arithmetic, to record beside a
    reproduction's results: the CPU's model and vendor, torch's dispatched instruction set,
    the OS and the numeric libraries' versions (a value that cannot be read is omitted)."""
    fp: dict[str, Any] = {"platform": platform.platform(), "machine": platform.machine()}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            info = fh.read()
        for key, name in (("model name", "cpu_model"), ("vendor_id", "cpu_vendor")):
            m = re.search(rf"^{key}\s*:\s*(.+)$", info, re.M)
            if m:
                fp[name] = m.group(1).strip()
    except OSError:
        pass
    fp["versions"] = {}
    for mod in ("numpy", "scipy", "torch", "numba"):
        try:
            fp["versions"][mod] = __import__(mod).__version__
        except ImportError:
            continue
    try:
        import torch

        fp["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    except (ImportError, AttributeError):
        pass
    return fp


def loadavg() -> list[float] | None:
    """The 1/5/15-minute load averages (None where the OS has none): how loaded the machine
    was, for the record of the wall time."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover
        return None


def provenance(device: str | None = None) -> dict[str, Any]:
    """The record a results.json keeps of where it was made: the machine in words (the report
    prints them; :func:`ldp_audit.rundir.writer.machine`, as a run's config.json says it), its
    :func:`machine_fingerprint` and, given a ``device`` (the resolved torch device), the device
    and on CUDA the card's name."""
    out: dict[str, Any] = {"machine": machine(), "fingerprint": machine_fingerprint()}
    if device is not None:
        out["device"] = device
        if device == "cuda":
            import torch

            out["device_name"] = torch.cuda.get_device_name(0)
    return out


# ---------------------------------------------------------------------- the report folder


def read_results(folder: str | os.PathLike[str], what: str = "folder") -> dict[str, Any]:
    """The results.json of a report folder (or that file itself); ``what`` names the argument
    in the error when there is none."""
    p = Path(folder)
    p = p / "results.json" if p.is_dir() else p
    if not p.is_file():
        raise InvalidParameterError(
            f"{what} must be a report folder or its results.json, got {str(folder)!r}: no "
            "results.json"
        )
    return read_json(p.parent, p.name)  # RunDirectoryError names an unreadable file


def notes_of(folder: str | os.PathLike[str]) -> str | None:
    """The hand-written ``notes.md`` of a report folder, or None."""
    p = Path(folder) / "notes.md"
    return p.read_text() if p.is_file() else None


def write_report(
    out: str | os.PathLike[str],
    results: dict[str, Any],
    pages: Callable[[dict[str, Any], str | None], dict[str, str]],
) -> list[Path]:
    """Write ``results.json`` (numpy values and infinities as :func:`ldp_audit.rundir.to_jsonable`
    writes them; no NaN) and ``pages(results, notes)`` (file name -> text; ``notes``: the
    folder's notes.md) into ``out``; returns the paths written."""
    p = Path(out)
    p.mkdir(parents=True, exist_ok=True)
    written = [p / "results.json"]
    written[0].write_text(json.dumps(to_jsonable(results), indent=1, allow_nan=False) + "\n")
    for name, text in pages(results, notes_of(p)).items():
        (p / name).write_text(text)
        written.append(p / name)
    return written


# ---------------------------------------------------------------------- resumable cells


def cache_path(cache: str | os.PathLike[str] | None, kind: str, spec: Any) -> Path | None:
    """Where a finished cell is kept (``--cache``): one JSON per cell, keyed by its whole
    spec."""
    if cache is None:
        return None
    key = hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()
    return Path(cache) / f"{kind}-{key[:24]}.json"


def cached(path: Path | None, make: Callable[[], Any]) -> Any:
    """``make()``, or the result a previous (interrupted) reproduction left in ``path``; a new
    result is written there atomically."""
    if path is not None and path.is_file():
        try:
            return restore(json.loads(path.read_text()))
        except ValueError:
            pass  # a torn file: run again
    r = make()
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_file(path, r, replace=True)
    return r


def restore(obj: Any) -> Any:
    """Undo the JSON convention of ``to_jsonable`` (infinite = "inf")."""
    if isinstance(obj, dict):
        return {k: restore(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [restore(v) for v in obj]
    if obj in ("inf", "-inf"):
        return float(obj)
    return obj


# ---------------------------------------------------------------------- numbers in words


def to_float(v: Any) -> float | None:
    """A number of results.json as a float: ``"inf"`` (any case, or ``"infinity"``) is +inf,
    NaN, null, a bool or anything else None."""
    x = json_real(v)
    return None if x is None or math.isnan(x) else x
