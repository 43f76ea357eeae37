"""The run-directory package layout (issue 25, "rooms"): paths, files, writer, reader, verify,
each a small file; the package gives its public names, a private name is read from the file
that defines it."""

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


def test_the_package_gives_only_its_public_names():
    """One address per name: a private name is read from the file that defines it."""
    assert not hasattr(R, "_check_parent_writable") and not hasattr(R, "_atomic_write")
    with pytest.raises(ImportError):
        exec("from ldp_audit.rundir import _check_path_arg")
    from ldp_audit.rundir import paths

    assert not hasattr(R, "check_parent_writable")  # its one address is rundir.paths
    assert callable(paths.check_parent_writable)
    assert not hasattr(paths, "_check_parent_writable")  # the old name is gone


def test_run_dir_is_the_typed_reader():
    from ldp_audit.rundir import RunDir, RunWriter

    assert RunDir.__module__ == "ldp_audit.rundir.reader"
    assert RunWriter.__module__ == "ldp_audit.rundir.writer"
