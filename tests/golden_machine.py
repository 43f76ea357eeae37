"""Golden hashes that stay honest on any x86-64 CPU.

A golden hash of a float array from a torch or BLAS computation is bit for bit only on the CPU
family that made it: torch's CPU kernels and the BLAS libraries dispatch on the instruction set
(AVX2, AVX-512, ...), which changes the last bits of a sum. Integer and boolean arrays made by
the seeded generators (inclusion bits, Poisson joins, counts, indices) do not depend on it.

So a golden entry is ``"DTYPE:HASH"``: :func:`check_golden` compares every integer/boolean entry
everywhere, and the float entries only on a machine with the golden's signature
(:func:`machine_signature`, stored under ``"_machine"``); elsewhere it skips with the reason,
after the machine-independent part has passed.
"""

from __future__ import annotations

import hashlib
import platform
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest


def digest(a: Any) -> str:
    """``"DTYPE:HASH"`` of an array (dtype, shape and bytes)."""
    a = np.ascontiguousarray(np.asarray(a))
    h = hashlib.sha256(f"{a.dtype.str}{a.shape}".encode())
    h.update(a.tobytes())
    return f"{a.dtype.str}:{h.hexdigest()[:32]}"


def tree_entries(
    tree: Any, prefix: str = "", *, machine_dependent: Callable[[str], bool] = lambda key: False
) -> dict[str, str]:
    """Golden entries of a nested result: one ``digest`` per array or scalar leaf of dicts and
    lists, keyed by its path (``"a/b[2]/c"``). A Python float leaf is a float entry (compared on
    the golden's machine only), ints, bools, strings and None exact entries; a list of numbers
    is one array entry (a float array when any of its items is a float).

    ``machine_dependent(key)`` marks integer entries computed from floats (a learned policy's
    successes, the states it visited): such an entry is tagged ``~`` and compared, like a
    float, on the golden's machine only (after the first rounding difference a trajectory may
    take another turn)."""
    out: dict[str, str] = {}

    def walk(v: Any, key: str) -> None:
        if isinstance(v, dict):
            for k in sorted(v, key=str):
                walk(v[k], f"{key}/{k}" if key else str(k))
            return
        if isinstance(v, (list, tuple)) and not _numbers(v):
            if not v:
                out[key] = "|O:empty"
            for i, x in enumerate(v):
                walk(x, f"{key}[{i}]")
            return
        if v is None or isinstance(v, str):
            out[key] = "|O:" + hashlib.sha256(repr(v).encode()).hexdigest()[:32]
            return
        a = np.asarray(v)
        if a.dtype == object:
            out[key] = "|O:" + hashlib.sha256(repr(v).encode()).hexdigest()[:32]
            return
        out[key] = digest(a)

    walk(tree, prefix)
    return {k: ("~" + v if machine_dependent(k) else v) for k, v in out.items()}


def _numbers(v: Any) -> bool:
    return bool(v) and all(
        isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool) for x in v
    )


def machine_signature() -> dict[str, str]:
    """What decides the last bits of a float computation here: the CPU's vendor, torch's
    dispatched instruction set and OpenBLAS's kernel family."""
    vendor = "unknown"
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("vendor_id"):
                    vendor = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        import torch

        cap = str(torch.backends.cpu.get_cpu_capability())
    except Exception:  # noqa: BLE001
        cap = "none"
    blas = "unknown"
    try:
        from threadpoolctl import threadpool_info

        archs = sorted({str(i.get("architecture")) for i in threadpool_info()
                        if i.get("internal_api") == "openblas"})  # fmt: skip
        blas = ",".join(archs) or "none"
    except Exception:  # noqa: BLE001
        pass
    return {"machine": platform.machine(), "cpu_vendor": vendor, "torch_cpu": cap, "openblas": blas}


def _float(entry: str) -> bool:
    """A float entry, or one marked machine-dependent (``~``, :func:`tree_entries`)."""
    return entry.startswith("~") or entry.split(":", 1)[0][1:2] in ("f", "c")


def check_golden(got: dict[str, Any], want: dict[str, Any]) -> None:
    """Compare ``got`` against the golden ``want`` (see the module docstring)."""
    want = dict(want)
    sig = want.pop("_machine")
    assert set(got) == set(want), sorted(set(got) ^ set(want))
    exact = {k: v for k, v in want.items() if not (isinstance(v, str) and _float(v))}
    diff = {k: (got[k], v) for k, v in exact.items() if got[k] != v}
    assert not diff, f"machine-independent entries differ from the golden run: {diff}"
    here = machine_signature()
    if here != sig:
        pytest.skip(f"float entries are bit for bit only on the golden's machine {sig}; here {here}"
                    " (the integer/boolean entries matched)")  # fmt: skip
    diff = {k: (got[k], v) for k, v in want.items() if got[k] != v}
    assert not diff, f"differs from the golden run: {diff}"
