"""Per-algorithm report sections: a registry ``algorithm -> "module:function"``.

A trainer module provides ``report_sections(run_dir, extra=None) -> list[dict]`` (the contract
in docs/report.md, "Sections of other algorithms"); each dict is::

    {"id": str, "title": str,
     "paragraphs": [str, ...],                 # plain text, `code` spans allowed
     "tables": [{"caption": str, "header": [str], "rows": [[str | number]]}],
     "figures": {"name": png_bytes},
     "data": {...}}                            # JSON-able, kept in report.json

The registry is :mod:`ldp_audit.systems` (a system's ``report_sections``); the report calls the
registered function for runs whose config.json ``algorithm`` matches. The
module is imported only when the report needs it, and only if it is installed; a function that
raises, or returns something malformed, becomes an error box in the report (the rest of the
report is still written), never a crash.
"""

from __future__ import annotations

import importlib
import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np


def registered_sections() -> dict[str, str]:
    """``algorithm`` (config.json "algorithm") -> ``"module:function"`` giving its report
    sections: the registered systems' ``report_sections`` (:mod:`ldp_audit.systems`)."""
    from ldp_audit import systems

    return {s.name: s.report_sections for s in systems.systems() if s.report_sections}


_PNG = b"\x89PNG\r\n\x1a\n"
_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class _Bad(Exception):
    """A section that breaks the contract (its message says how)."""


def _cell(v: Any, where: str) -> str | int | float | None:
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else ("inf" if v > 0 else "-inf" if v < 0 else "NaN")
    if isinstance(v, np.generic):  # numpy scalars
        return _cell(v.item(), where)
    raise _Bad(f"{where} must be a string or a number, got {type(v).__name__}")


def validate_section(sec: Any, index: int) -> tuple[dict[str, Any], dict[str, bytes]]:
    """Check one section dict against the contract.

    Returns:
        (model part, figures by name). The model part lists figure names, not bytes.

    Raises:
        _Bad: the section breaks the contract.
    """
    from ldp_audit.rundir import to_jsonable

    if not isinstance(sec, Mapping):
        raise _Bad(f"section {index} must be a dict, got {type(sec).__name__}")
    sid, title = sec.get("id"), sec.get("title")
    if not isinstance(sid, str) or not _ID.match(sid):
        raise _Bad(f"section {index}: 'id' must match {_ID.pattern}, got {sid!r}")
    if not isinstance(title, str) or not title.strip():
        raise _Bad(f"section {sid!r}: 'title' must be a non-empty string, got {title!r}")
    paras = sec.get("paragraphs", [])
    if not isinstance(paras, list) or not all(isinstance(p, str) for p in paras):
        raise _Bad(f"section {sid!r}: 'paragraphs' must be a list of strings")
    tables = []
    for t_i, t in enumerate(sec.get("tables", []) or []):
        where = f"section {sid!r} table {t_i}"
        if not isinstance(t, Mapping):
            raise _Bad(f"{where} must be a dict")
        header, rows = t.get("header"), t.get("rows")
        if not isinstance(header, list) or not all(isinstance(h, str) for h in header):
            raise _Bad(f"{where}: 'header' must be a list of strings")
        if not isinstance(rows, list) or not all(isinstance(r, (list, tuple)) for r in rows):
            raise _Bad(f"{where}: 'rows' must be a list of lists")
        if any(len(r) != len(header) for r in rows):
            raise _Bad(f"{where}: every row must have {len(header)} cells (one per header)")
        tables.append(
            {
                "caption": str(t.get("caption", "")),
                "header": list(header),
                "rows": [[_cell(c, f"{where} row {r_i}") for c in r] for r_i, r in enumerate(rows)],
            }
        )
    figs_in = sec.get("figures", {}) or {}
    if not isinstance(figs_in, Mapping):
        raise _Bad(f"section {sid!r}: 'figures' must be a dict name -> PNG bytes")
    figures: dict[str, bytes] = {}
    for name, png in figs_in.items():
        if not isinstance(name, str) or not _ID.match(name):
            raise _Bad(f"section {sid!r}: figure name must match {_ID.pattern}, got {name!r}")
        if not isinstance(png, (bytes, bytearray)) or not bytes(png).startswith(_PNG):
            raise _Bad(f"section {sid!r}: figure {name!r} must be PNG bytes")
        figures[name] = bytes(png)
    try:
        data = to_jsonable(sec.get("data", {}))
        json.dumps(data, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise _Bad(f"section {sid!r}: 'data' must be JSON-able ({exc})") from None
    return _section(sid, title, paras, tables, figures, data, None), figures


def _error(algorithm: str, entry: str, what: str) -> dict[str, Any]:
    return _section("error", f"{algorithm} sections ({entry})", [], [], [], {}, what)


def _section(
    sid: str, title: str, paras: list[str], tables: list[Any], figs: Any, data: Any, error: Any
) -> dict[str, Any]:
    """A section of the model (``figures``: its figures' names, sorted)."""
    keys = ("id", "title", "paragraphs", "tables", "figures", "data", "error")
    return dict(
        zip(keys, (sid, title, list(paras), tables, sorted(figs), data, error), strict=True)
    )


def _wants_context(func: Any) -> bool:
    """Whether a sections function takes the report's context (a ``context`` parameter)."""
    import inspect

    try:
        return "context" in inspect.signature(func).parameters
    except (TypeError, ValueError):  # a builtin or C callable: the plain form
        return False


def _parse_sections(
    raw: Any, algorithm: str, entry: str, func_name: str
) -> tuple[list[dict[str, Any]], dict[str, bytes]]:
    if not isinstance(raw, (list, tuple)):
        what = f"{func_name}() must return a list of section dicts, got {type(raw).__name__}"
        return [_error(algorithm, entry, what)], {}
    sections: list[dict[str, Any]] = []
    figures: dict[str, bytes] = {}
    seen: set[str] = set()
    for i, sec in enumerate(raw):
        try:
            model, figs = validate_section(sec, i)
            if model["id"] in seen:
                raise _Bad(f"section id {model['id']!r} is used twice")
        except _Bad as exc:
            sections.append(_error(algorithm, entry, str(exc)))
            continue
        seen.add(model["id"])
        sections.append(model)
        for name, png in figs.items():
            figures[f"section-{model['id']}-{name}"] = png
    return sections, figures


def _strings(v: Any, what: str) -> list[str]:
    if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
        raise _Bad(f"{what} must be a list of strings, got {type(v).__name__}")
    out = [x.item() if hasattr(x, "item") else x for x in v]
    if not all(isinstance(x, str) for x in out):
        raise _Bad(f"{what} must be a list of strings")
    return out


def _parse_system_report(raw: Mapping[str, Any], func_name: str) -> dict[str, Any]:
    """Check the dict form of a system's return (:mod:`ldp_audit.report.plugin`)."""
    from ldp_audit.report.plugin import STATEMENT_KEYS, SYSTEM_REPORT_KEYS

    bad = sorted(str(k) for k in raw if k not in SYSTEM_REPORT_KEYS)
    if bad:
        raise _Bad(
            f"{func_name}() returned unknown key(s) {bad}; allowed: {', '.join(SYSTEM_REPORT_KEYS)}"
        )
    out: dict[str, Any] = {"sections": raw.get("sections", [])}
    if raw.get("releases") is not None:
        out["releases"] = _strings(raw["releases"], "'releases'")
    out["claimed"] = _strings(raw.get("claimed", []), "'claimed'")
    out["missing"] = _strings(raw.get("missing", []), "'missing'")
    st = raw.get("statement", {}) or {}
    if not isinstance(st, Mapping):
        raise _Bad(f"'statement' must be a dict, got {type(st).__name__}")
    facts: dict[str, tuple[str, str]] = {}
    unit = None
    for k, v in st.items():
        if k == "unit":
            if not isinstance(v, str) or not v.strip():
                raise _Bad(f"'statement' 'unit' must be a non-empty string, got {v!r}")
            unit = v
            continue
        if k not in STATEMENT_KEYS:
            raise _Bad(f"'statement' key {k!r} is not one of {', '.join(STATEMENT_KEYS)}, unit")
        if not (
            isinstance(v, (list, tuple)) and len(v) == 2 and all(isinstance(x, str) for x in v)
        ):
            raise _Bad(f"'statement' {k!r} must be [value, source] (two strings), got {v!r}")
        facts[k] = (v[0], v[1])
    out["statement"], out["unit"] = facts, unit
    return out


def system_report(
    run_dir: Path,
    algorithm: str,
    extra: list[Path] | None = None,
    *,
    registry: Mapping[str, str] | None = None,
    context: Any = None,
) -> Any:
    """The registered report part of ``algorithm`` for one run, checked.

    The function is called with ``context`` when it takes a ``context`` parameter; it returns
    a list of sections or the dict form of :mod:`ldp_audit.report.plugin`.

    Returns:
        A :class:`ldp_audit.report.plugin.SystemReport` (``note``: where it came from,
        ``{"entry", "loaded", "reason"}``).

    Raises:
        RunDirectoryError: the function refused the run (a file of its system is malformed).
    """
    from ldp_audit.errors import RunDirectoryError
    from ldp_audit.report.plugin import SystemReport

    reg = registered_sections() if registry is None else registry
    entry = reg.get(algorithm)
    if entry is None:
        return SystemReport(note=_note(None, False, "no sections registered"))
    if not (Path(run_dir) / "metrics.json").is_file():  # load_run accepted it: a stopped run
        why = "no metrics.json: the run stopped before writing it"
        return SystemReport(note=_note(entry, False, why))
    mod_name, _, func_name = entry.partition(":")

    def failed(what: str, loaded: bool) -> Any:
        return SystemReport(sections=[_error(algorithm, entry, what)], note=_note(entry, loaded))

    try:
        module = importlib.import_module(mod_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and mod_name.startswith(exc.name):
            return SystemReport(note=_note(entry, False, f"{mod_name} is not installed"))
        return failed(f"import failed: {exc}", False)
    except Exception as exc:  # a broken module: an error box, not a crash
        return failed(f"import failed: {type(exc).__name__}: {exc}", False)
    func = getattr(module, func_name, None)
    if not callable(func):
        return failed(f"{mod_name} has no function {func_name!r}", False)
    try:
        kw = {"context": context} if context is not None and _wants_context(func) else {}
        raw = func(Path(run_dir), list(extra) if extra else None, **kw)
    except RunDirectoryError:
        raise  # the system refuses the run: named file, as load_run's own checks
    except Exception as exc:
        return failed(f"{func_name}() raised {type(exc).__name__}: {exc}", True)
    parts: dict[str, Any] = {}
    if isinstance(raw, Mapping):
        try:
            parts = _parse_system_report(raw, func_name)
        except _Bad as exc:
            return failed(str(exc), True)
        raw = parts.pop("sections")
    sections, figures = _parse_sections(raw, algorithm, entry, func_name)
    return SystemReport(sections=sections, figures=figures, note=_note(entry, True), **parts)


def _note(entry: str | None, loaded: bool, reason: str | None = None) -> dict[str, Any]:
    return {"entry": entry, "loaded": loaded, "reason": reason}
