"""How long ``ldp-audit audit --run-dir`` will take, said before it starts (issue 39: at the
default 10^6 samples a PGC-A3C run's audit took about 4 minutes without a word).

The estimate is measured, not modelled: two pilot audits of the same mechanism and pairs at
``n1`` and ``n2 = 4 n1`` samples (``n1`` = 1% of ``--samples``, 3,000 to 10,000), from their own
generator (the audit's own draws are untouched), timed; the audit's time is the line through
both points at ``--samples`` (a fixed part, the event search's tests, plus a part proportional
to the samples). The libraries the audit loads on first use are imported before the pilots, so
the first pilot does not carry their import time. The pilots cost about 5% of a 10^6-sample
audit. Measured figures are in docs/audit.md.
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import numpy as np

#: below this many samples no estimate is made (the pilots would cost a large share of the run)
MIN_SAMPLES = 300_000


def pilot_sizes(samples: int) -> tuple[int, int] | None:
    """The two pilots' sample sizes for an audit of ``samples``, or None (none worth making)."""
    if samples < MIN_SAMPLES:
        return None
    n1 = min(10_000, max(3_000, samples // 100))
    return n1, 4 * n1


def estimate_seconds(
    mechanism: Any, pairs: Any, options: dict[str, Any], *, samples: int, seed: int | None
) -> tuple[float, float] | None:
    """``(estimated seconds, seconds the pilots took)`` of ``audit(mechanism, pairs,
    samples=samples, **options)``, or None (too few samples to be worth the pilots, or a
    sequential audit, whose length depends on what it finds)."""
    sizes = pilot_sizes(samples)
    if sizes is None or options.get("sequential"):
        return None
    import scipy.optimize  # noqa: F401  (loaded by the audit on first use: not a pilot's cost)
    import scipy.stats  # noqa: F401
    import sklearn.linear_model  # noqa: F401

    from ldp_audit.audit import audit

    rng = np.random.default_rng(np.random.SeedSequence([0 if seed is None else seed, 39]))
    took = []
    with warnings.catch_warnings():  # a pilot's small-sample warnings are not the audit's
        warnings.simplefilter("ignore")
        for n in sizes:
            t0 = time.perf_counter()
            audit(mechanism, pairs, **{**options, "progress": False, "rng": rng, "samples": n})
            took.append(time.perf_counter() - t0)
    (n1, n2), (t1, t2) = sizes, took
    slope = max(t2 - t1, 0.0) / (n2 - n1)
    return max(t2, t1 + slope * (samples - n1)), t1 + t2


def say(seconds: float) -> str:
    """``"about 40 s"`` / ``"about 3.5 min"`` / ``"about 1.2 h"``."""
    if seconds < 90:
        return f"about {max(seconds, 1):.0f} s"
    unit, size = ("min", 60) if seconds < 5400 else ("h", 3600)
    return f"about {seconds / size:.1f} {unit}"
