"""Training algorithms of ldp-audit (one module per algorithm), built on :mod:`ldp_audit`.

- :mod:`training.pgc_a3c` — PGC-A3C (Ono & Takahashi 2020): ``PgcA3cConfig``, ``train``,
  ``train_grid`` (several settings in one lock-step batch), ``episode_gradients`` (the attacker's
  simulator);
- :mod:`training.cartpole` — CartPole with a private gravity per agent (Gymnasium's vectorised
  physics);
- :mod:`training.run_dir` — write/read the run directory of docs/interfaces.md;
- :mod:`training.metrics`, :mod:`training.reproduce` — the paper's metrics and reproduction.

Submodules are imported on demand (``from training.pgc_a3c import train``); importing this
package loads nothing heavy.
"""
