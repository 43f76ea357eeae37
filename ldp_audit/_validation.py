"""Former name of :mod:`ldp_audit.validation` (kept for imports inside the core)."""

from ldp_audit.validation import (  # noqa: F401
    check_batch,
    check_bool,
    check_epsilon,
    check_int,
    check_positive,
    check_probability,
    check_real,
    check_rng,
)
