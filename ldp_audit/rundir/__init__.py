"""The run-directory contract shared by every trainer (docs/interfaces.md, "Run directory").

A run directory is evidence: it is written once, by one run, and never silently appended to or
overwritten.

- :func:`check_new_dir` is what every command calls on an output path BEFORE any work: the path
  must not exist or be an empty directory, and its parent must be writable. ``overwrite=True``
  replaces an earlier *run* (a folder whose ``config.json`` names its algorithm) or report
  (nothing but a report's pages and figures) and nothing else.
- :class:`RunWriter` writes a run: ``config.json`` first (with ``"status": "running"``), the
  ledger the accountant charges during training, then the transcript, secrets, metrics and model,
  and last ``manifest.json`` (status ``complete`` or ``interrupted``, SHA-256 of every file but
  the ledger, the ledger's anchor: its id, row count, chain head, metadata digest and key id,
  and an HMAC of it all under the ledger key). Every file is written atomically (temp file +
  rename) and a file that exists is never replaced.
- ``resume``: the same algorithm, config and seed (checked against ``config.json``), the same
  ledger (its earlier charges stay and count against the budget; the rerun's charges already in
  it are matched row by row and never charged twice); outputs of the earlier attempt are removed
  first.
- :func:`write_artifact` adds a *named, documented* artefact to an existing run
  (``audit.json``, ``attack_<name>.json``): the only writes into a run a reader may make, and
  it refuses to replace one unless ``overwrite=True``.
- Readers (:func:`read_config`, :func:`read_json`, :func:`read_npz`, :func:`read_manifest`,
  :func:`verify_manifest`, :func:`verify_run`) never write. :func:`verify_run` checks a run
  against its manifest (files, the manifest's MAC, the whole ledger against its anchor, an
  ``expect_head`` published elsewhere); :func:`require_verified` is what every reader of a run
  calls first: unverified evidence is refused unless ``allow_unverified``.

**Where things are**: ``paths`` (the output-path checks, the names of a run's files),
``files`` (the JSON convention, atomic writes, hashes), ``writer`` (:class:`RunWriter`,
:func:`write_artifact`), ``reader`` (the plain readers and :class:`RunDir`, the one typed
reader), ``verify`` (a run checked against its manifest), ``seal`` (analysis files sealed in
``analyses.json`` when written, and the run's one root, :func:`run_root`). The public names of
``__all__`` are re-exported here; every other name is imported from the file that defines it.
"""

from __future__ import annotations

from ldp_audit.rundir.files import (
    json_number,
    read_config,
    read_json,
    read_manifest,
    read_npz,
    to_jsonable,
)
from ldp_audit.rundir.paths import (
    check_new_dir,
    check_new_file,
    check_report_dir,
)
from ldp_audit.rundir.reader import RunDir
from ldp_audit.rundir.seal import check_analyses, run_root, seal_analyses
from ldp_audit.rundir.verify import (
    VerifyResult,
    require_verified,
    verify_manifest,
    verify_run,
)
from ldp_audit.rundir.writer import RunWriter, versions, write_artifact

__all__ = [
    "seal_analyses",
    "check_analyses",
    "run_root",
    "RunWriter",
    "check_new_dir",
    "check_new_file",
    "check_report_dir",
    "json_number",
    "to_jsonable",
    "write_artifact",
    "read_config",
    "read_json",
    "read_npz",
    "read_manifest",
    "verify_manifest",
    "verify_run",
    "require_verified",
    "VerifyResult",
    "RunDir",
    "versions",
]
