"""Dynamics inference: recover each agent's gravity from its submitted (noisy) gradients.

Threat model (issue 6; Ono & Takahashi 2020, Sec. 1, after Pan et al. 2019): the aggregator is
honest-but-curious. It knows the MDP except each agent's gravity, the mechanism and its
parameters, and the theta it broadcast; it sees only what crossed the trust boundary (the
transcript: agent id, theta version, noisy report). Gravity is one of ``k`` equally likely
candidates (the paper's {9.7, 9.8, 9.9}).

Attack (shadow gradients): for each candidate gravity, simulate many episodes at the broadcast
theta with the *public* simulator of the known MDP
(``ldp_audit.training.pgc_a3c.episode_gradients``, one
batched call for thousands of episodes), then either

* ``method="likelihood"`` — evaluate the exact likelihood of the report under the known noise law,
  marginalised over the episode by Monte Carlo over the shadow gradients:
  ``p(y | g) ~= mean_j q(y | grad_j(g))`` with ``q`` the mechanism's density (Laplace, Alg. 2 eqs.
  19-21: ``q(y | x) = prod_i (eps / 2C) exp(-eps |y_i - clip(x)_i| / C)``; k-ary randomized
  response: ``e^eps / (e^eps + k - 1)`` on the truth), or
* ``method="classifier"`` — privatise the shadow gradients with the same mechanism and fit a
  scikit-learn classifier on them (any mechanism, including PRS whose projection matrix is not in
  the transcript, and the non-private baseline whose "density" is a point mass).

Several reports of one agent (multi-round mode, Sec. 3.2.1) are independent given the gravity, so
their log-likelihoods add (uniform prior). The estimator follows scikit-learn (``fit -> self``,
fitted attributes end in ``_``, ``predict``, ``predict_proba``, ``score``); :func:`run` is the
one-shot experiment returning an :class:`~ldp_audit.attacks.scoring.AttackResult`.

Separation of knowledge: the attacker functions take reports, thetas and the mechanism only.
Ground truth is touched in one place per entry point, marked ``# --- scoring only ---``
(:func:`run` draws the victims' gravities as the world, :func:`score_run_dir` reads
``secrets.npz``).

Where the code lives (this module re-exports it): the estimator and the shadow simulation in
:mod:`~ldp_audit.attacks.dynamics_shadow`, the one-shot experiments and crafted thetas in
:mod:`~ldp_audit.attacks.dynamics_experiment`, the attacks on a run directory in
:mod:`~ldp_audit.attacks.dynamics_run_dir`.
"""

from __future__ import annotations

from ldp_audit.attacks.dynamics_experiment import (
    craft_theta,
    linear_controller_theta,
    run,
    run_continuous,
)
from ldp_audit.attacks.dynamics_run_dir import (
    attack_private_param_run,
    attack_run_dir,
    private_param_dynamics,
    score_private_param_run,
    score_run_dir,
)
from ldp_audit.attacks.dynamics_shadow import (
    GRAVITIES,
    MAX_EPISODES,
    ShadowGradientAttack,
    Simulator,
    mechanism_epsilon,
    simulate_shadow,
)

__all__ = [
    "GRAVITIES",
    "MAX_EPISODES",
    "ShadowGradientAttack",
    "Simulator",
    "attack_private_param_run",
    "attack_run_dir",
    "craft_theta",
    "linear_controller_theta",
    "mechanism_epsilon",
    "private_param_dynamics",
    "run",
    "run_continuous",
    "score_private_param_run",
    "score_run_dir",
    "simulate_shadow",
]
