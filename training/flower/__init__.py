"""Flower (flwr 1.41) for ldp-audit: local DP for any Flower app, and PGC-A3C as a Flower app.

Optional extra: ``pip install 'ldp-audit[flower]'``. Its modules:

- local DP for any Flower app: :mod:`~ldp_audit.training.flower.client` (the client mod that
  releases the train reply through the one release path),
  :mod:`~ldp_audit.training.flower.server` (the server-side recorder) and
  :mod:`~ldp_audit.training.flower.protocol` (what client and server agree on);
- :mod:`~ldp_audit.training.flower.digits`: an example app that is not PGC-A3C (FedAvg on
  scikit-learn's digits, an own-loop run directory);
- :mod:`~ldp_audit.training.flower.pgc_app`: PGC-A3C as a Flower app (a ``pgc-a3c`` run
  directory);
- :mod:`~ldp_audit.training.flower.run`: runs any Flower app project against a local
  simulation SuperLink.

This ``__init__`` imports nothing (Flower is loaded by the module that needs it).
"""
