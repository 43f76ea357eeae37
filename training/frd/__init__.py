"""Federated reinforcement distillation (Cha et al. 2019) and its FedAvg baseline, batched.

What is trained (``../shared/papers/cha-2019-federated-reinforcement-distillation.md``):

* **A2C agents on CartPole-v1** (500-step episodes), each with a policy (actor) and a value
  (critic) network of the Table 1 sizes (``hidden`` units per layer, ``layers`` hidden layers,
  ReLU), updated online after every step with the one-step advantage ``r + gamma V(s') - V(s)``
  (eq. 3). Hyperparameters the paper does not give are declared in :class:`FrdConfig` (Adam,
  actor lr 1e-3, critic lr 5e-3, gamma 0.99, reward -100 when the pole falls: the public Keras
  A2C CartPole example the paper's setup resembles).
* Each agent has a **private gravity** drawn uniformly from a declared set (default PGC-A3C's
  {9.7, 9.8, 9.9}), or another private CartPole constant (``private_param``: masscart,
  masspole, length, force_mag); its CartPole is
  :class:`ldp_audit.training.cartpole.PrivateGravityCartPole` (Gymnasium's vectorised physics,
  one row per agent; other constants per row by
  :func:`ldp_audit.training.frd.engine.set_row_constants`).
* **Proxy experience memory** (section 3): each state component in ``proxy_dims`` is cut evenly
  into ``sections`` (S) sections over a declared range (``state_low``/``state_high``); a state
  outside the range is clipped into it and counted (``clipped_states`` in the metrics). Cells are
  stored sparsely (int64 cell ids). Every ``exchange_period`` (E) episodes after
  ``initial_episodes`` (I) — after episodes I + E, I + 2E, ... — each agent uploads, for every
  cell it visited during the last E episodes, its time-averaged policy there; the server averages
  per cell over the agents that visited it (the global proxy memory) and every agent distils it
  into its policy network with the cross-entropy of eq. 2 evaluated at the cell midpoints
  (``distil_epochs`` passes in minibatches of ``distil_batch``).
* **FedAvg baseline** (``mode="fedavg"``): same schedule, the upload is the agent's parameters
  (actor and critic) and the server broadcasts their mean.
* **Mission time**: episodes until one agent of the group has a mean standing time over
  ``window`` (10) consecutive episodes above ``threshold`` (default 195, the classic CartPole
  "solved" level; the paper's value is not stated, and 475 — Gymnasium's CartPole-v1 threshold —
  is mostly not reached within 300 episodes by these A2C agents, see docs/frd.md).
* **LDP variant** (``ldp_epsilon`` finite, FRD only): each upload is ``ldp_samples`` (m) pairs,
  each a visited cell sampled uniformly from the agent's local memory, its id randomised by
  k-ary randomized response over the declared cell set (all S^d cells; ``ldp_audit.mechanisms.
  RandomizedResponse``) and its averaged policy ``2 pi(left) - 1`` by the bit flip of eq. 4
  (``ldp_audit.mechanisms.BitFlip``). One pair is (eps_cell + eps_policy)-LDP with respect to
  the agent's whole local memory (a mixture over the sampled cell of mechanisms that are each
  that private), so one upload is ``ldp_epsilon = m (eps_cell + eps_policy)``-LDP; it is charged
  to the agent's ledger (``PureDpEvent(ldp_epsilon)``) before any noise is drawn and composed
  over the run by the accountant. The server debiases the bits and averages per reported cell.

Every upload (private or not) goes through :func:`ldp_audit.release.release_with`: charged
first (the non-private one as ``NonPrivateEvent``), randomised, sealed; the server accepts only
sealed releases and the :class:`~ldp_audit.release.Transcript` records them.

Batching: all agents of all groups of all configs given to :func:`train_many` that share the
network architecture run in ONE loop: one vectorised CartPole (Gymnasium's physics), every
agent's actor and critic in one flat ``(agents, P)`` float32 buffer, and per step two compiled
kernels over the *running* agents only (:mod:`ldp_audit.training.frd.kernels`: the actor's
action; then the critic, the eq. 3 advantage, both backward passes and a per-agent Adam step);
visited cells of every config are computed in one compiled call and kept sparsely. Between
exchanges agents of a group run asynchronously (each its own episodes); at an exchange point an
agent waits for the rest of its group (the paper's "all the agents wait for the last agent") and
resumes with a fresh episode. Randomness: one ``numpy.random.Generator`` per call, so a run
is bit-for-bit reproducible from its seed.

Where things are (this package gives the public names of ``__all__``; the rest is imported
from its module): ``config``
(:class:`FrdConfig`, Table 1, the private parameter's validation), ``proxy`` (grid, LDP upload,
server average), ``nets`` (stacked networks, per-agent Adam, parameter layout and
policy for the attack), ``engine`` (the batched loop, :class:`FrdResult`, per-row CartPole
constants), ``run`` (:func:`train` with a run directory, report sections), ``trends``
(the reproduction's exact tests of the paper's trends).
"""

from __future__ import annotations

from ldp_audit.training.frd.config import FrdConfig, setting_config
from ldp_audit.training.frd.engine import train_many
from ldp_audit.training.frd.proxy import ProxyMemoryLDP
from ldp_audit.training.frd.run import train

__all__ = ["FrdConfig", "ProxyMemoryLDP", "setting_config", "train", "train_many"]
