"""Converting a ledger of schema version 1 or 2 (no key) into a new keyed ledger file.

Explicit only (``ldp-audit budget LEDGER --migrate-to NEW`` or :func:`migrate_v1`): the source
is opened read-only and never changed, and the destination is a new file written by
:class:`Ledger` itself (rows sealed by the same code as every charge, each row keeping its own
time and run id). This module imports the ledger; the ledger never imports it.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import sqlite3
from pathlib import Path

from ldp_audit.accountant.ledger import Ledger
from ldp_audit.accountant.ledger_format import APPLICATION, LedgerSchemaError
from ldp_audit.accountant.ledger_sqlite import CHARGES_TABLE, META_TABLE, check_ledger_path
from ldp_audit.errors import LedgerError

__all__ = ["migrate_v1"]


def migrate_v1(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> Ledger:
    """Convert a schema-version-1 or -2 ledger into a new keyed ledger at ``dst`` (explicitly).

    The source is opened read-only and never changed; ``dst`` must not exist. Rows keep their
    order, agents, events, scopes, times and run ids; the metadata (budgets) is copied. A
    version-2 source must pass a full ``verify()`` first. Neither version carries a key, so the
    new ledger's MACs vouch only for what the old file held when it was converted.

    Returns:
        The new ``Ledger`` (open).
    """
    src_s, dst_s = check_ledger_path(src), check_ledger_path(dst)
    if Path(dst_s).exists():
        raise LedgerError(f"migration target {dst_s!r} exists; choose a new file")
    if not Path(src_s).is_file():
        raise LedgerError(f"ledger file {src_s!r} does not exist")
    try:
        con = sqlite3.connect(Path(src_s).resolve().as_uri() + "?mode=ro", uri=True)
        try:
            meta = dict(con.execute(f"SELECT key, value FROM {META_TABLE}").fetchall())
            version = meta.get("schema_version")
            if meta.get("application") != APPLICATION or version not in ("1", "2"):
                raise LedgerSchemaError(
                    f"ledger {src_s!r} is not an ldp-audit ledger of schema version 1 or 2 "
                    f"(schema_version {version!r})"
                )
            if version == "2":  # it has a chain: it must verify first
                Ledger(src_s, create=False, readonly=True, verify="full").close()
            rows = con.execute(
                f"SELECT agent, event, scope, time, run_id FROM {CHARGES_TABLE} ORDER BY id"
            ).fetchall()
        finally:
            con.close()
    except sqlite3.Error as exc:
        raise LedgerError(f"cannot read version-1 ledger {src_s!r}: {exc}") from exc
    led = Ledger(dst_s)
    try:
        store = led.store
        with led.transaction():
            # consecutive rows of one run id and time (a batch of charges) go in together
            for (t, run_id), group in itertools.groupby(rows, key=lambda r: (r[3], r[4])):
                led.charge_rows([(a, e, s) for a, e, s, _, _ in group], run_id=run_id, when=t)
            for k2, v in meta.items():
                if k2 not in ("application", "schema_version", "created", "ledger_id", "key_id"):
                    store.put_meta(k2, v)
            store.put_meta(
                f"migrated_from_v{version}",
                json.dumps({"path": src_s, "rows": len(rows)}),
            )
            led._seal_meta()
    except BaseException:  # Ctrl-C, a full disk: no empty ledger (zero spend) left in its place
        led.close()
        for f in (dst_s, f"{dst_s}-journal"):
            with contextlib.suppress(OSError):
                os.unlink(f)
        raise
    return led
