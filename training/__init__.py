"""Training algorithms of ldp-audit (one module per algorithm), built on :mod:`ldp_audit`.

- :mod:`ldp_audit.training.pgc_a3c` — PGC-A3C (Ono & Takahashi 2020): ``PgcA3cConfig``, ``train``,
  ``train_grid`` (several settings in one lock-step batch), ``episode_gradients`` (the attacker's
  simulator), its metrics, readings and report; :mod:`ldp_audit.training.pgc_a3c_gym` — the same
  algorithm on any Gymnasium environment;
- :mod:`ldp_audit.training.cartpole` — CartPole with a private gravity per agent (Gymnasium's
  vectorised physics);
- :mod:`ldp_audit.training.pgc_a3c.reproduce` — the paper's reproduction;
- :mod:`ldp_audit.training.reproduction` — what the four systems' paper reproductions share.

Submodules are imported on demand (``from ldp_audit.training.pgc_a3c import train``); importing this
package loads nothing heavy.
"""
