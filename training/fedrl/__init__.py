"""FedRL (Zhuo et al. 2019): two-agent federated deep Q-learning with noisy Q outputs.

Agents alpha (3x3 view, has the rewards) and beta (5x5 view, no rewards) act in the same
GridWorld episodes (:mod:`ldp_audit.training.gridworld`). Each has a local CNN Q-network
(3x3 kernels, 32 filters, 256 hidden units, 16 joint actions, as in the public code). What
crosses between them, and nothing else:

* ``C_alpha``, ``C_beta``: each agent's Q outputs, optionally clipped to ``[-B, B]`` per
  coordinate, plus ``N(0, sigma^2)`` per coordinate (eqs. 1-2), for the current states when
  acting and for a replayed minibatch when learning (beta also sends its target network's outputs
  for the next states, which alpha needs for ``Y``);
* ``Y = r + gamma * max_a Q_f^alpha(s', a)`` (alpha's targets; they carry alpha's rewards),
  optionally clipped to ``[-B_Y, B_Y]`` and noised with ``N(0, sigma_Y^2)``.

The shared MLP (32 -> 32 -> 16; eq. 3) is fed the *released* values, so its update (eqs. 6-7)
is a function of released values only: both agents compute the same step and the MLP parameters
never need to be sent (in the paper they are sent after every update; here that exchange would
reveal nothing new, since it is post-processing). Each local network gets its gradient through
its own (clipped) outputs, with the other's output a constant (eqs. 4-5). One Adam step (lr 0.001)
updates all three parts per minibatch (the paper's two sequential steps merged; see
docs/fedrl.md). The target networks ARE updated every ``target_update`` steps (the public code
never updates them).

Privacy accounting (every exchange goes through :mod:`ldp_audit.release`, charged to the
sender's ledger agent BEFORE the noise is drawn):

* unbounded outputs (no ``clip_outputs``) or ``sigma = 0``: every exchange is a
  :class:`~ldp_audit.accountant.NonPrivateEvent`: epsilon is infinite, because an unbounded
  output has unbounded sensitivity, so no finite noise hides it;
* outputs clipped to ``[-B, B]``: one released row is a Gaussian mechanism on a 16-vector with
  L2 sensitivity ``2 B sqrt(16) = 8 B`` (local model: any two observations are neighbours), i.e.
  ``GaussianEvent(noise_multiplier = sigma / (8 B))``; an exchange of ``k`` rows is charged
  ``SelfComposedEvent(that, k)``; the accountant composes all exchanges of the run (``best`` of
  RDP / PLD / PRV) and reports each agent's (epsilon, delta);
* ``Y``: unprotected (``NonPrivateEvent``, ledger agent ``<trial>/alpha:Y``) unless
  ``clip_targets`` and ``target_sigma > 0`` are given (then a 1-D Gaussian, sensitivity
  ``2 B_Y``).

Test-time exchanges are charged to ``<trial>/<agent>@fedrl1`` (noisy, FedRL-1) and
``<trial>/<agent>@fedrl2`` (no noise, FedRL-2: non-private).

Baselines: DQN-alpha (alpha alone, its own observations and rewards: nothing is released) and
DQN-full (one network over both observations: the data are pooled, no privacy at all).

Layout (one concern per module; every name of the former one-file module is importable from
this package):

* :mod:`~ldp_audit.training.fedrl.mechanisms`: what one released row is
  (:class:`OutputMechanism`, :func:`TargetMechanism`) and the checks of sigma and B;
* :mod:`~ldp_audit.training.fedrl.config`: :class:`FedRLConfig`, :data:`METHODS`;
* :mod:`~ldp_audit.training.fedrl.networks`: the Q-networks, the shared MLP and ``_Stacked``
  (K runs' networks evaluated at once);
* :mod:`~ldp_audit.training.fedrl.exchange`: the release of Q outputs and targets (charge,
  randomise, record) and the run's log;
* :mod:`~ldp_audit.training.fedrl.trainer`: one method for K runs (replay, minibatch update);
* :mod:`~ldp_audit.training.fedrl.evaluation`: greedy / epsilon-greedy test episodes;
* :mod:`~ldp_audit.training.fedrl.metrics`: Table 1, the epsilon-greedy table, learning curves;
* :mod:`~ldp_audit.training.fedrl.runs`: :func:`run_fedrl`, :func:`privacy_table`,
  :func:`train_fedrl` (the run directory);
* :mod:`~ldp_audit.training.fedrl.report`: the sections of ``ldp-audit report RUN``;
* :mod:`~ldp_audit.training.fedrl.reproduce` and
  :mod:`~ldp_audit.training.fedrl.reproduce_report`: ``ldp-audit reproduce fedrl`` and its
  README (also importable as :mod:`ldp_audit.training.fedrl_reproduce`).
"""

from __future__ import annotations

from ldp_audit.training.fedrl.config import (
    METHODS,
    TABLE_ROWS,
    FedRLConfig,
)
from ldp_audit.training.fedrl.evaluation import (
    _brief,
    _eps_greedy,
    _evaluate,
)
from ldp_audit.training.fedrl.exchange import (
    KIND_ACT,
    KIND_BATCH,
    KIND_FEDRL1,
    KIND_FEDRL2,
    KIND_NEXT,
    SENDER_ALPHA,
    SENDER_BETA,
    _Exchange,
    _last_window,
    _Log,
)
from ldp_audit.training.fedrl.mechanisms import (
    _MAX_SCALE,
    _MIN_BOUND,
    OutputMechanism,
    TargetMechanism,
    _check_bound,
    _check_sigma,
    _is_int,
    _is_real,
)
from ldp_audit.training.fedrl.metrics import (
    _cp,
    _curve_table,
    _explore_table,
    _metrics,
    _pooled,
    _t_interval,
)
from ldp_audit.training.fedrl.networks import (
    _FULLQ,
    _IM2COL,
    _LAYOUT,
    _conv3x3_relu,
    _dense,
    _full_q,
    _fwd_full_q,
    _fwd_local_q,
    _fwd_mlp,
    _im2col_index,
    _init_params,
    _local_q,
    _mlp,
    _pos_major,
    _Stacked,
    _torch,
)
from ldp_audit.training.fedrl.report import (
    PAPER_TABLE1,
    _curve_png,
    _fmt,
    report_sections,
)
from ldp_audit.training.fedrl.runs import (
    _log_arrays,
    privacy_table,
    run_fedrl,
    train_fedrl,
)
from ldp_audit.training.fedrl.trainer import (
    _Replay,
    _train_runs,
    _update,
)

__all__ = [
    "METHODS",
    "FedRLConfig",
    "OutputMechanism",
    "TargetMechanism",
    "train_fedrl",
    "run_fedrl",
    "report_sections",
    "privacy_table",
]

# names of the one-file module kept importable from here (tests, benchmarks, the reproduction)
_COMPAT = (
    TABLE_ROWS,
    _brief,
    _eps_greedy,
    _evaluate,
    KIND_ACT,
    KIND_BATCH,
    KIND_FEDRL1,
    KIND_FEDRL2,
    KIND_NEXT,
    SENDER_ALPHA,
    SENDER_BETA,
    _Exchange,
    _last_window,
    _Log,
    _MAX_SCALE,
    _MIN_BOUND,
    _check_bound,
    _check_sigma,
    _is_int,
    _is_real,
    _cp,
    _curve_table,
    _explore_table,
    _metrics,
    _pooled,
    _t_interval,
    _FULLQ,
    _IM2COL,
    _LAYOUT,
    _conv3x3_relu,
    _dense,
    _full_q,
    _fwd_full_q,
    _fwd_local_q,
    _fwd_mlp,
    _im2col_index,
    _init_params,
    _local_q,
    _mlp,
    _pos_major,
    _Stacked,
    _torch,
    PAPER_TABLE1,
    _curve_png,
    _fmt,
    _log_arrays,
    _Replay,
    _train_runs,
    _update,
)
