"""PGC-A3C: locally private distributed A3C (Ono & Takahashi 2020, Algorithms 1-3), batched.

One system among the four (PGC-A3C, DP-SGD RL in :mod:`ldp_audit.training.dprl`, FedRL in
:mod:`ldp_audit.training.fedrl`, FRD in :mod:`ldp_audit.training.frd`). Its rooms, read in this
order:

- :mod:`~ldp_audit.training.pgc_a3c.config`: :class:`PgcA3cConfig` (section 4 "Hyper
  Parameters") and :class:`TrainResult`;
- :mod:`~ldp_audit.training.pgc_a3c.model`: the network (section 4, "Implementation");
- :mod:`~ldp_audit.training.pgc_a3c.gradients`: the episode loss and its gradient (eqs. 15-18,
  written by hand, compiled, and checked against torch autograd);
- :mod:`~ldp_audit.training.pgc_a3c.rollout`: the alpha-greedy rollout and the attacker's
  simulator :func:`episode_gradients`;
- :mod:`~ldp_audit.training.pgc_a3c.privacy`: the agent-side privatisation (Algorithms 2-3 from
  :mod:`ldp_audit.mechanisms`, charged to the ledger *before* release);
- :mod:`~ldp_audit.training.pgc_a3c.aggregator`: the aggregator (eq. 22);
- :mod:`~ldp_audit.training.pgc_a3c.engine`: the lock-step engine that emulates the 9
  asynchronous agents deterministically, and :mod:`~ldp_audit.training.pgc_a3c.fused`, the same
  engine with each block of steps in one compiled call;
- :mod:`~ldp_audit.training.pgc_a3c.grid`: :func:`train`, :func:`train_grid`, the process pool
  and the stop signals; :mod:`~ldp_audit.training.pgc_a3c.run_dir`: the run directory it writes;
- :mod:`~ldp_audit.training.pgc_a3c.metrics`: the paper's metrics (first success time, success
  ratio, AUC) and their intervals; :mod:`~ldp_audit.training.pgc_a3c.paper`: the paper's
  published numbers (Tables 1-3);
- :mod:`~ldp_audit.training.pgc_a3c.report`: a run's report sections;
  :mod:`~ldp_audit.training.pgc_a3c.readings`: which readings of the paper reach its tables, and
  what each costs in privacy.

The compiled loops are the private ``_kernels.py`` (lock-step) and ``_fused_kernel.py`` (fused).
This package gives the public names of ``__all__``; every other name is imported from the
module that defines it.

Speed comes from running every agent of every trial (and of every config of a grid) in lock-step:
one vectorised CartPole over all rows, one compiled acting pass per step, one compiled backward
over the agents whose episodes ended at that step. There is no per-step Python loop over agents.

Our resolutions of what the paper leaves open (listed in README.md, "PGC-A3C engine"):

- Parameters are packed as theta = [theta_c (16x4, row-major), theta_p (2x16), theta_v (1x16)],
  d = 112, no biases; initialised Glorot-uniform (TensorFlow's default, the paper used TF 1.14).
- Loss sums run over the T_n steps at which an action was taken. The target of eq. 18 is
  V_hat(s_t) = sum_{j=t}^{T-1} gamma^{j-t} r_j + gamma^{T-t} V(s_T), the discount on the bootstrap
  taken from eq. 12 so that A(s_t) = V_hat(s_t) - V(s_t) (eq. 12 and eq. 18 then agree); V(s_T)
  is 0 when the pole fell (a terminal state has value 0, eq. 8) and the network's value when the
  episode was cut at ``episode_steps``. Advantage and target are constants (no gradient).
- Acting: with probability alpha a uniformly random action, else argmax pi (ties -> action 0);
  alpha = max{0, 0.5 - n/1800} with n the trial's submissions so far at that step. One uniform u
  per agent-step decides both: explore iff u < alpha, and then action = 1 iff u >= alpha/2.
  ``acting="sample"`` (an ablation, not the paper as printed) draws the non-exploring action from
  pi with the same uniform.
- Asynchrony: the ``n_agents`` workers of a trial step in lock-step; a worker copies the current
  theta when its episode starts and submits when it ends; reports arriving at the same step are
  applied in worker order; workers restart with the theta after those updates.
- Single-round mode: every episode is a new agent with a fresh gravity psi ~ U{gravities};
  ``rounds=T``: an agent plays T consecutive episodes (same gravity, fresh theta each time) and
  submits each at epsilon/T (section 3.2.1). ``max_submissions`` caps submissions per trial; the
  episodes still running when a trial stops are discarded (never released, never charged).
- ``mechanism="none"`` is the epsilon = inf baseline, the paper's "non-private A3C" (Table 2: it
  "succeeds in all trials"), released without noise (charged as ``NonPrivateEvent``). Our
  resolution: the paper gives it no privacy clip, but plain SGD at eta = 0.5 on the unclipped summed
  episode loss (eq. 22) drives theta to non-finite values within tens of submissions in some trials,
  so the baseline keeps a stabilising L1 clip with C = 10 (norm 5, 1000x the Laplace C). With the
  Laplace setting's C = 0.01 the noiseless run does not learn at all (see the README).

Randomness: ``seed`` -> ``SeedSequence(seed, spawn_key=(0, k))`` per trial k (initial theta,
acting uniforms, resets) and ``spawn_key=(1,)`` for the config's mechanism noise. A trial's acting
and reset streams are consumed in blocks independently of which other trials run beside it, and a
config in :func:`train_grid` gets exactly the run :func:`train` gives it with the same seed (and
the same with any ``workers``). The mechanism stream is shared by the config's trials in arrival
order, so one trial's noise depends on its sibling trials: changing ``max_submissions`` or
``stop_at_target`` of a config changes the noise its other trials draw (still reproducible).

Speed: the hot loops (acting, the episode gradient, eq. 22, the step's bookkeeping) are Numba
kernels in :mod:`ldp_audit.training.pgc_a3c._kernels`; the physics is Gymnasium's.
``engine="fused"`` (:class:`~ldp_audit.training.pgc_a3c.fused.FusedEngine`) runs each block of
up to 256 lock-steps, physics included (Gymnasium's equations, same operations, tested step for
step against ``CartPoleVectorEnv``), in ONE compiled call
(:mod:`ldp_audit.training.pgc_a3c._fused_kernel`), with the same results bit for bit; it charges
each agent when the agent starts rather than when it submits.
"""

from __future__ import annotations

from ldp_audit.training.pgc_a3c.config import PgcA3cConfig
from ldp_audit.training.pgc_a3c.grid import train, train_grid
from ldp_audit.training.pgc_a3c.model import init_theta
from ldp_audit.training.pgc_a3c.privacy import CoordinateLaplace, PrivacyClaimWarning
from ldp_audit.training.pgc_a3c.rollout import episode_gradients

__all__ = [
    "PgcA3cConfig",
    "CoordinateLaplace",
    "PrivacyClaimWarning",
    "init_theta",
    "episode_gradients",
    "train",
    "train_grid",
]
