"""Issue 38, item 7 (the parts in the run-directory and CLI area): the user's own paths neither
lose evidence nor ignore what they were told."""

from __future__ import annotations

import numpy as np
import pytest

from ldp_audit.accountant import Ledger
from ldp_audit.cli import main
from ldp_audit.errors import InvalidParameterError
from ldp_audit.mechanisms import Laplace
from ldp_audit.run import open_run
from ldp_audit.rundir import verify_run


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"config": [("lr", 0.1), 3]}, "config must be a dict"),
        ({"config": "lr=0.1"}, "config must be a dict"),
        ({"private": [("name", "f")]}, "private must be a dict"),
        ({"seed": "1"}, "seed must be an int"),
        ({"seed": 1.5}, "seed must be an int"),
        ({"seed": True}, "seed must be an int"),
    ],
)
def test_open_run_refuses_wrong_types_by_name_and_leaves_nothing(
    kwargs: dict, match: str, tmp_path
) -> None:
    mech = Laplace(epsilon=1.0, clip=1.0)
    with pytest.raises(InvalidParameterError, match=match):
        open_run(tmp_path / "r", system="s", mechanism=mech, **kwargs)
    assert not (tmp_path / "r").exists()


def test_a_release_with_another_shape_is_refused_before_any_charge(tmp_path) -> None:
    run = open_run(tmp_path / "r", system="s", mechanism=Laplace(epsilon=1.0, clip=1.0))
    run.release(np.ones(3), agent=0, theta=np.zeros(3))
    with pytest.raises(InvalidParameterError, match="4 coordinates.*have 3"):
        run.release(np.ones(4), agent=1, theta=np.zeros(3))
    with pytest.raises(InvalidParameterError, match="values must be an array of numbers"):
        run.release(["a", "b", "c"], agent=1, theta=np.zeros(3))
    with Ledger(tmp_path / "r" / "ledger.sqlite", readonly=True) as led:
        assert len(led) == 1  # the refused releases were never charged
    path = run.close()  # closes cleanly: no raw numpy error, no run left "running"
    assert verify_run(path).ok and verify_run(path).status == "complete"
    assert np.load(path / "transcript.npz")["report"].shape == (1, 3)


@pytest.mark.parametrize(
    "flag",
    [
        ["--env-module", "json"],
        ["--simulator", "json:dumps"],
        ["--allow-unverified"],
        ["--expect-head", "0" * 64],
        ["--expect-root", "0" * 64],
    ],
)
def test_run_dir_options_without_run_dir_are_refused(flag: list[str], tmp_path, capsys) -> None:
    out = tmp_path / "a.json"
    argv = ["attack", "dynamics", "--agents", "2", "--shadow", "2", "--out", str(out), *flag]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert flag[0] in err and "only with --run-dir" in err
    assert not out.exists()
    argv = ["attack", "membership", "--out", str(out), *flag]
    if flag[0] in ("--allow-unverified", "--expect-head", "--expect-root"):
        assert main(argv) == 2
        assert "only with --run-dir" in capsys.readouterr().err


def test_a_sweep_never_writes_into_a_run(tmp_path, capsys) -> None:
    run = open_run(tmp_path / "r", system="s", mechanism=Laplace(epsilon=1.0, clip=1.0))
    run.release(np.ones(3), agent=0, theta=np.zeros(3))
    path = run.close()
    before = sorted(p.name for p in path.iterdir())
    assert main(["attack", "sweep", "--out", str(path), "--overwrite"]) == 2
    assert "is a run directory" in capsys.readouterr().err
    assert sorted(p.name for p in path.iterdir()) == before
    assert verify_run(path).ok


def test_a_config_json_cannot_hold_is_refused_before_the_folder_is_made(tmp_path) -> None:
    """The one that left an empty run directory behind (and a raw TypeError)."""
    with pytest.raises(InvalidParameterError, match="must hold JSON values"):
        open_run(
            tmp_path / "r",
            system="s",
            mechanism=Laplace(epsilon=1.0, clip=1.0),
            config={"lr": object()},
        )
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["audit", "--mechanism", "{mod}:M", "--samples", "1000"],
        [
            "audit",
            "--mechanism",
            "laplace",
            "--epsilon",
            "1",
            "--statistic",
            "{mod}:f",
            "--samples",
            "1000",
        ],
        [
            "train",
            "pgc-a3c",
            "--env",
            "Foo-v0",
            "--env-module",
            "{mod}",
            "--private-param",
            "a=1,2",
            "--mechanism",
            "none",
            "--out",
            "{tmp}/r",
        ],
    ],
)
@pytest.mark.parametrize("status", [0, None, 3])
def test_a_user_module_calling_sys_exit_at_import_is_exit_2_naming_it(
    argv: list[str], status: int | None, tmp_path, monkeypatch, capsys
) -> None:
    """A module given on the command line that calls ``sys.exit(0)`` at import made the CLI exit 0
    with no output and no run."""
    mod = f"quits_{status}_{abs(hash(tuple(argv))) % 10**8}"
    (tmp_path / f"{mod}.py").write_text(f"import sys\nsys.exit({status!r})\n")
    monkeypatch.chdir(tmp_path)
    code = main([a.format(mod=mod, tmp=tmp_path) for a in argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert mod in err and f"sys.exit({status!r})" in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()
