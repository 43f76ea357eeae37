"""The run-directory package layout (issue 25, "rooms"): paths, files, writer, reader, verify,
each a small file, every name of the former single module still importable from
``ldp_audit.rundir`` (the CLI imports ``_check_parent_writable`` from there)."""

from __future__ import annotations

from pathlib import Path

import pytest

import ldp_audit.rundir as R


def test_every_file_is_small():
    pkg = Path(R.__file__).parent
    sizes = {f.name: len(f.read_text().splitlines()) for f in pkg.glob("*.py")}
    assert set(sizes) == {"__init__.py", "paths.py", "files.py", "writer.py", "reader.py",
                          "verify.py", "seal.py"}  # fmt: skip
    assert max(sizes.values()) <= 800, sizes


@pytest.mark.parametrize("name", R.__all__)
def test_public_names(name):
    assert getattr(R, name) is not None


@pytest.mark.parametrize(
    "name,part",
    [
        ("_check_parent_writable", "paths"), ("_check_path_arg", "paths"),
        ("_LEDGER_SIDE", "paths"), ("_write_npz_file", "files"), ("_atomic_write", "files"),
        ("_manifest_bytes", "files"), ("_seal_manifest", "writer"), ("_dir", "reader"),
        ("_check_anchor", "verify"),
    ],
)  # fmt: skip
def test_private_names_read_from_the_file_that_holds_them(name, part):
    import importlib

    assert getattr(R, name) is getattr(importlib.import_module(f"ldp_audit.rundir.{part}"), name)
    with pytest.raises(AttributeError):
        R._no_such_name  # noqa: B018


def test_run_dir_is_the_typed_reader():
    from ldp_audit.rundir import RunDir, RunWriter

    assert RunDir.__module__ == "ldp_audit.rundir.reader"
    assert RunWriter.__module__ == "ldp_audit.rundir.writer"
