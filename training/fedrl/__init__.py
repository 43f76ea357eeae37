"""FedRL (Zhuo et al. 2019): two-agent federated deep Q-learning with noisy Q outputs.

Agents alpha (3x3 view, has the rewards) and beta (5x5 view, no rewards) act in the same
GridWorld episodes (:mod:`ldp_audit.training.fedrl.gridworld`). Each has a local CNN Q-network
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

Layout (one concern per module; a name is imported from the module that defines it, this
package gives only the public names of ``__all__``):

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
  README.
"""

from __future__ import annotations

from ldp_audit.training.fedrl.config import FedRLConfig
from ldp_audit.training.fedrl.mechanisms import OutputMechanism
from ldp_audit.training.fedrl.runs import train_fedrl

__all__ = ["FedRLConfig", "OutputMechanism", "train_fedrl"]
