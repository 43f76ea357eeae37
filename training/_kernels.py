"""Former home of the PGC-A3C engine's compiled kernels, kept so that old imports work.

The kernels now live in the PGC-A3C package: the lock-step engine's in
:mod:`ldp_audit.training.pgc_a3c._kernels`, the fused engine's in
:mod:`ldp_audit.training.pgc_a3c._fused_kernel`. Every name this module had is re-exported (the
same compiled objects, so nothing is compiled twice); assigning to a name here does not change
what the engines call (patch the module that defines it).
"""

from __future__ import annotations

from ldp_audit.training.pgc_a3c._fused_kernel import (  # noqa: F401
    _FORCE_MAG,
    _INIT_LOW,
    _INIT_SPAN,
    _LAPLACE,
    _LENGTH,
    _MASSCART,
    _MASSPOLE,
    _POLEMASS_LENGTH,
    _PRS,
    _TAU,
    _THETA_THRESHOLD,
    _TOTAL_MASS,
    _X_THRESHOLD,
    FUSED_NEED_CHARGE,
    FUSED_NEED_NOISE,
    FUSED_NEED_OUTPUT,
    FUSED_NEED_RESETS,
    FUSED_NONFINITE,
    FUSED_PRS_OVERFLOW,
    FUSED_STEPS,
    FUSED_TRIAL_ENDED,
    _cartpole_row,
    _episode_grad_t,
    _flush_if_mechanisms_changed,
    _laplace_clip_row,
    _laplace_row,
    _pairwise_sum_abs,
    _prs_row,
    _transpose_row,
    cartpole_step,
    fused_block,
)
from ldp_audit.training.pgc_a3c._kernels import (  # noqa: F401
    _H,
    _O,
    _P0,
    _P1,
    _V,
    __all__,
    _agg_one,
    _log_sigmoid_pair,
    _value_targets,
    act_and_record,
    aggregate,
    aggregate_adaptive,
    ended_episodes,
    episode_gradients_kernel,
    record_scores,
)
