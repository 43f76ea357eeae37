"""Property-style CLI suite: every subcommand through bad paths, bad numbers, bad user objects
and interrupted runs.

For every input error the contract of ``ldp_audit.cli`` is asserted: exit code 2, the last line
of stderr is one ``ldp-audit[ COMMAND]: error: ...`` line naming the option (or the value), and
no ``Traceback`` anywhere in stderr. Commands run in-process through ``ldp_audit.cli.main``
(fast); a subprocess is used only where the OS is part of the property (SIGINT, a closed stdout
pipe). A bad value is always combined with tiny settings, so an input that is wrongly accepted
makes the test fail quickly instead of running an experiment.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ldp_audit.cli import build_parser, main
from tests.waiting import wait_for_charges

pytest.importorskip("ldp_audit.training.pgc_a3c")

ERROR_LINE = re.compile(r"^ldp-audit(?: [\w-]+)*: error: \S")


def _walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[list[str]]:
    """Every command path of the parser tree (plug-in trainers' subcommands included)."""
    out = [list(path)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += _walk(sub, (*path, name))
    return out


SUBCOMMANDS = _walk(build_parser())
TINY_TRAIN = ["train", "pgc-a3c", "--mechanism", "laplace", "--max-submissions", "20"]
TINY_TRAIN += ["--no-progress"]
TINY_ATTACK = ["--agents", "3", "--shadow", "2"]
TINY_MEMBERSHIP = ["--agents", "25", "--shadow", "2", "--canaries", "20"]


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """main(argv) in-process: (exit code, stdout, stderr); argparse's SystemExit included."""
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 2
    out, err = capsys.readouterr()
    return code, out, err


def assert_input_error(argv: list[str], capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    """Exit 2, one error line naming every needle, no traceback. Returns the error line."""
    code, _, err = run_cli(argv, capsys)
    assert "Traceback" not in err, f"{argv}: traceback\n{err}"
    assert code == 2, f"{argv}: exit {code}, stderr:\n{err}"
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert lines, f"{argv}: nothing on stderr"
    last = lines[-1]
    assert ERROR_LINE.match(last), f"{argv}: not an error line: {last!r}"
    errors = [ln for ln in lines if ERROR_LINE.match(ln)]
    assert len(errors) == 1, f"{argv}: {len(errors)} error lines:\n{err}"
    for n in needles:
        assert n in last, f"{argv}: {n!r} not named in {last!r}"
    return last


# ------------------------------------------------------------------------------- help texts


@pytest.mark.parametrize("cmd", SUBCOMMANDS, ids=lambda c: " ".join(c) or "ldp-audit")
def test_help_shows_defaults_and_never_a_literal_percent(
    cmd: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli([*cmd, "--help"], capsys)
    assert code == 0 and err == ""
    assert "%%" not in out and "%(" not in out
    assert out.startswith("usage: ldp-audit")
    leaf = not any(len(c) > len(cmd) and c[: len(cmd)] == cmd for c in SUBCOMMANDS)
    if leaf:  # a command with options of its own shows their defaults
        assert "default" in out, f"{cmd}: help shows no default"


def test_every_option_says_what_it_is() -> None:
    """Every option of every subcommand has a help text (the CLI reference's third column):
    session 52 found 14 without one, shown only with their default (``attack dynamics
    --mechanism``, ``--confidence``, ``--seed``, ``reproduce pgc-a3c --trials``, ...) and ``attack
    frd --max-groups`` with nothing at all."""

    def options(parser: argparse.ArgumentParser, path: str) -> list[str]:
        out = []
        for a in parser._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sub in a.choices.items():
                    out += options(sub, f"{path} {name}")
            elif a.option_strings and a.help != argparse.SUPPRESS and not (a.help or "").strip():
                out.append(f"{path} {a.option_strings[-1]}")
        return out

    assert not options(build_parser(), "ldp-audit")


def test_version_and_exit_codes_in_top_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["--version"], capsys)
    assert code == 0 and out.startswith("ldp-audit ")
    _, out, _ = run_cli(["--help"], capsys)
    flat = " ".join(out.split())
    for text in ("0 success", "1 privacy violation", "2 usage or input", "3 internal", "130"):
        assert text in flat


# ------------------------------------------------------------------------------- bad numbers

BAD = {
    "nan": "nan",
    "inf": "inf",
    "neg": "-1",
    "zero": "0",
    "sci": "1e13",
    "frac": "1.5",
    "word": "abc",
    "empty": "",
    "huge": "9" * 30,
}

#: (argv prefix, option, values that must be refused). Every prefix runs in seconds if a value
#: is wrongly accepted.
NUMBER_CASES = [
    (TINY_TRAIN, "--epsilon", ["nan", "neg", "zero", "word", "empty"]),
    ([*TINY_TRAIN, "--epsilon", "1"], "--trials", ["nan", "inf", "neg", "zero", "sci", "word"]),
    ([*TINY_TRAIN, "--epsilon", "1"], "--rounds", ["nan", "neg", "zero", "word", "empty"]),
    (TINY_TRAIN[:4] + ["--epsilon", "1"], "--max-submissions", list(BAD)),
    ([*TINY_TRAIN, "--epsilon", "1"], "--seed", ["nan", "neg", "word", "empty"]),
    ([*TINY_TRAIN, "--epsilon", "1"], "--aggregator-lr", ["nan", "inf", "neg", "zero", "word"]),
    (["reproduce", "pgc-a3c", "--max-submissions", "20"], "--trials", ["neg", "zero", "word"]),
    (["reproduce", "pgc-a3c", "--trials", "1"], "--max-submissions", list(BAD)),
    (["attack", "dynamics", *TINY_ATTACK], "--epsilon", ["nan", "neg", "zero", "word", "empty"]),
    (["attack", "dynamics", "--shadow", "2"], "--agents", ["nan", "neg", "zero", "word"]),
    (["attack", "dynamics", *TINY_ATTACK], "--confidence", list(BAD)),
    (["attack", "dynamics", *TINY_ATTACK], "--clip", ["nan", "inf", "neg", "zero", "word"]),
    (["attack", "membership", *TINY_ATTACK], "--canaries", ["nan", "neg", "zero", "word"]),
    (
        ["attack", "membership", *TINY_MEMBERSHIP],
        "--canary-gravity",
        ["nan", "inf", "neg", "zero", "word", "empty"],
    ),
    (["attack", "sweep", "--no-progress"], "--agents", ["neg", "zero", "word", "sci"]),
    (["attack", "sweep", "--no-progress", "--agents", "3"], "--shadow", ["neg", "zero", "word"]),
    (["attack", "sweep", "--no-progress", "--agents", "3"], "--seed", ["neg", "word"]),
    (["attack", "sweep", "--no-progress", "--agents", "3"], "--workers", ["neg", "zero", "huge"]),
    (
        ["audit", "--mechanism", "laplace", "--samples", "1000"],
        "--epsilon",
        ["nan", "inf", "neg", "zero", "word", "empty"],
    ),
    (["audit", "--mechanism", "laplace", "--epsilon", "1"], "--samples", list(BAD)),
    (
        ["audit", "--mechanism", "laplace", "--epsilon", "1", "--samples", "1000"],
        "--confidence",
        list(BAD),
    ),
    (["demo", "--no-progress"], "--seed", ["nan", "neg", "word", "empty", "frac"]),
]


def _number_params() -> list:
    out = []
    for prefix, opt, keys in NUMBER_CASES:
        for k in keys:
            out.append(pytest.param(prefix, opt, BAD[k], id=f"{' '.join(prefix[:2])} {opt}={k}"))
    return out


@pytest.mark.parametrize(("prefix", "option", "value"), _number_params())
def test_bad_numbers_are_refused_by_name(
    prefix: list[str],
    option: str,
    value: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # any default output folder lands here, never in the repo
    argv = [*prefix, f"{option}={value}"]
    assert_input_error(argv, capsys, option.lstrip("-").split("-")[0])
    assert not list(tmp_path.iterdir()), "a refused command left files behind"


def test_each_option_s_reader_names_that_option() -> None:
    """An option's value reader words its refusal with the option's own name: session 55 found
    ``reproduce pgc-a3c --figure2-trials 0`` refused as "--trials must be an integer >= 1" (and
    ``--figure2-submissions`` as ``--max-submissions``), the two sharing one reader. Every
    option of every command, fed values a reader refuses; a refusal that starts with a flag must
    start with this option's."""
    wrong = []

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for a in parser._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sub in a.choices.items():
                    walk(sub, f"{path} {name}")
            elif a.option_strings and callable(a.type) and not isinstance(a.type, type):
                for value in ("0", "-1", "x", "1e400", "nan"):
                    try:
                        a.type(value)
                    except Exception as exc:  # noqa: BLE001 - any refusal's words
                        flag = re.match(r"--[\w-]+", str(exc))
                        if flag and flag.group(0) not in a.option_strings:
                            wrong.append(f"{path} {a.option_strings[-1]}={value}: {exc}")

    walk(build_parser(), "ldp-audit")
    assert not wrong, wrong


def _with_option(flag: str) -> list[list[str]]:
    """The command paths (leaves) that have ``flag``."""
    out = []
    for path in SUBCOMMANDS[1:]:
        parser = build_parser(path)
        for word in path:
            sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
            parser = sub.choices[word]
        if any(flag in a.option_strings for a in parser._actions):
            out.append(path)
    return out


@pytest.mark.parametrize("cmd", _with_option("--workers"), ids=" ".join)
def test_workers_far_above_the_cores_are_refused_everywhere(
    cmd: list[str],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--workers`` above 4 x the cores is refused before any work wherever the option exists:
    session 55 found ``reproduce dprl|fedrl|frd --workers 9`` on 2 cores starting the grid
    (only ``reproduce pgc-a3c`` and ``attack sweep`` checked it)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert_input_error([*cmd, "--workers", "9", "--out", "run"], capsys, "--workers", "<= 8")
    assert not list(tmp_path.iterdir()), "a refused command left files behind"


def test_budget_numbers_are_refused_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ldp_audit.accountant import Accountant, LaplaceEvent

    ledger = tmp_path / "l.sqlite"
    acc = Accountant(ledger=str(ledger))
    acc.charge("a", LaplaceEvent(1.0))
    acc.close()
    for value in ("nan", "-1", "1", "abc", "", "inf"):
        assert_input_error(["budget", str(ledger), f"--delta={value}"], capsys, "delta")


def test_membership_semantic_refusals(capsys: pytest.CaptureFixture[str]) -> None:
    # more canaries than agents is refused, not silently "fixed" by raising --agents
    assert_input_error(
        ["attack", "membership", "--canaries", "30", "--agents", "25", "--shadow", "2"],
        capsys,
        "--canaries",
        "--agents",
    )
    # a canary gravity equal to a background gravity would make a meaningless audit
    for g in ("9.8", "9.7", "9.90"):
        assert_input_error(
            ["attack", "membership", *TINY_MEMBERSHIP, "--canary-gravity", g],
            capsys,
            "--canary-gravity",
        )


# ------------------------------------------------------------------------------- bad paths


@pytest.fixture
def paths(tmp_path: Path) -> dict[str, str]:
    f = tmp_path / "a-file"
    f.write_text("not a run")
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("precious")
    ro = tmp_path / "readonly"
    ro.mkdir()
    ro.chmod(0o500)
    return {
        "missing": str(tmp_path / "missing" / "deeper"),
        "file": str(f),
        "file-as-dir": str(f / "sub"),
        "proc": "/proc/ldp-audit-x",
        "nonempty": str(full),
        "unwritable": str(ro / "out"),
    }


OUTPUT_CASES = [
    # (argv with OUT placeholder, which bad paths are refused, option named)
    ([*TINY_TRAIN, "--epsilon", "1", "--out", "OUT"], "--out"),
    (["reproduce", "pgc-a3c", "--trials", "1", "--max-submissions", "20", "--out", "OUT"], "--out"),
    (["attack", "sweep", "--no-progress", "--agents", "3", "--out", "OUT"], "--out"),
    (["attack", "dynamics", *TINY_ATTACK, "--out", "OUT"], "--out"),
    (["attack", "dynamics", *TINY_ATTACK, "--plot", "OUT"], "--plot"),
    (["demo", "--no-progress", "--out", "OUT"], "--out"),
    (["demo", "--no-progress", "--report-dir", "OUT"], "--report-dir"),
]
BAD_OUTS = ("file", "file-as-dir", "proc", "nonempty", "unwritable")


@pytest.mark.parametrize(("argv", "option"), OUTPUT_CASES, ids=lambda x: str(x)[:40])
@pytest.mark.parametrize("kind", BAD_OUTS)
def test_bad_output_paths_refused_before_any_work(
    argv: list[str],
    option: str,
    kind: str,
    paths: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if kind == "unwritable" and os.geteuid() == 0:
        pytest.skip("root can write into a 0500 folder")
    if option in ("--plot", "--out") and argv[:2] == ["attack", "dynamics"] and kind == "nonempty":
        pytest.skip("attack --out/--plot name files; a non-empty folder is the 'file' case")
    if argv[0] == "reproduce" or argv[:2] == ["attack", "sweep"]:
        if kind == "nonempty":
            pytest.skip("report folders keep hand-written files by design (check_report_dir)")
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    before = (Path(paths["nonempty"]) / "keep.txt").read_text()
    t = time.perf_counter()
    assert_input_error([paths[kind] if a == "OUT" else a for a in argv], capsys, option)
    assert time.perf_counter() - t < 15, "refused only after doing the work"
    assert (Path(paths["nonempty"]) / "keep.txt").read_text() == before
    assert sorted(Path(paths["nonempty"]).iterdir()) == [Path(paths["nonempty"]) / "keep.txt"]
    assert not list(work.iterdir()), "a refused command left files behind"


@pytest.mark.parametrize("kind", ["missing", "file", "file-as-dir", "proc", "nonempty"])
def test_bad_input_paths(
    kind: str, paths: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    p = paths[kind]
    assert_input_error(["report", p], capsys)
    assert_input_error(["attack", "dynamics", *TINY_ATTACK, "--run-dir", p], capsys, "--run-dir")
    assert_input_error(["attack", "membership", *TINY_ATTACK, "--run-dir", p], capsys, "--run-dir")
    assert_input_error(["budget", p], capsys)


def test_budget_refuses_a_foreign_sqlite_file_without_touching_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import sqlite3

    other = tmp_path / "app.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE users (name TEXT)")
    con.commit()
    con.close()
    before = other.read_bytes()
    assert_input_error(["budget", str(other)], capsys)
    assert other.read_bytes() == before


# ------------------------------------------------------------------------------- user objects


@pytest.fixture
def user_modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "cli_prop_syntax.py").write_text("def broken(:\n    pass\n")
    (tmp_path / "cli_prop_raises.py").write_text(
        "from ldp_audit.mechanisms import Laplace\n"
        "def factory():\n    raise RuntimeError('factory exploded')\n"
        "class Mech:\n    epsilon = 1.0\n"
        "    def privatize(self, x, rng):\n        raise ValueError('privatize exploded')\n"
        "    def candidate_pairs(self, dim):\n"
        "        import numpy as np\n        return [(np.zeros(dim), np.ones(dim))]\n"
        "def pairs():\n    raise KeyError('pairs exploded')\n"
        "LAP = Laplace(epsilon=1.0, clip=1.0)\n"
    )
    (tmp_path / "cli_prop_top.py").write_text("raise ImportError('module-level failure')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    for m in ("cli_prop_syntax", "cli_prop_raises", "cli_prop_top"):
        sys.modules.pop(m, None)
    return tmp_path


@pytest.mark.parametrize(
    ("argv", "needles"),
    [
        (["--mechanism", "cli_prop_syntax:X"], ("cli_prop_syntax", "SyntaxError")),
        (["--mechanism", "cli_prop_top:X"], ("cli_prop_top",)),
        (["--mechanism", "cli_prop_raises:factory"], ("factory exploded",)),
        (["--mechanism", "cli_prop_raises:Mech"], ("privatize exploded",)),
        (["--mechanism", "cli_prop_raises:nope"], ("nope",)),
        (["--mechanism", "cli_prop_raises"], ("MODULE:ATTR",)),
        (["--mechanism", "no_such_module_xyz:X"], ("no_such_module_xyz",)),
        (
            ["--mechanism", "laplace", "--epsilon", "1", "--pairs", "cli_prop_raises:pairs"],
            ("pairs",),
        ),
    ],
    ids=lambda x: str(x)[:45],
)
def test_user_objects_that_fail_give_one_clear_line(
    argv: list[str],
    needles: tuple[str, ...],
    user_modules: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    line = assert_input_error(["audit", *argv, "--samples", "1000"], capsys, *needles)
    assert "Traceback" not in line


# ------------------------------------------------------------------------------- evidence


def _no_constants(name: str) -> None:
    raise AssertionError(f"non-standard JSON constant {name} in --json output")


def test_rerun_never_changes_an_earlier_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    code, out, err = run_cli([*TINY_TRAIN, "--epsilon", "1", "--out", str(run), "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out, parse_constant=_no_constants)  # strict JSON: no NaN/Infinity
    # one convention: an FST never reached is "inf", never null (20 submissions reach nothing)
    assert doc["median_fst"] == "inf" and doc["fst"] == ["inf"]
    snapshot = {p.name: p.read_bytes() for p in run.iterdir()}
    for extra in ([], ["--epsilon", "2"], ["--resume", "--epsilon", "2"]):
        argv = [*TINY_TRAIN, "--out", str(run), *(extra or ["--epsilon", "1"])]
        assert_input_error(argv, capsys)
    assert {p.name: p.read_bytes() for p in run.iterdir()} == snapshot
    # a report is the run's one named artefact folder; it never alters the run's files, and
    # only adds the seal of its own files (issue 38: analyses.json)
    code, _, _ = run_cli(["report", str(run)], capsys)
    assert code in (0, 1)
    after = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    assert {k: after[k] for k in snapshot} == snapshot and set(after) - set(snapshot) == {
        "analyses.json"
    }


def test_keyboard_interrupt_in_process_is_one_line_130(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import ldp_audit.report as report

    def boom(*a: object, **k: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(report, "build_report", boom)
    from tests.test_report_fixtures import make_run

    run = make_run(tmp_path / "r")
    argv = ["report", str(run), "-o", str(tmp_path / "o"), "--allow-unverified"]  # no manifest
    code, _, err = run_cli(argv, capsys)
    assert code == 130 and "Traceback" not in err
    assert err.strip().splitlines() == [
        "ldp-audit: interrupted; files written so far are consistent"
    ]


def test_a_signal_of_another_kind_during_the_close_is_still_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Session 58 probe: SIGINT, then SIGTERM while ``main`` closed the runs the first left
    (``finish_unfinished``; a second signal of the same kind is the watchdog's forced exit, one
    of another kind is not): the second's exception escaped ``main``'s handler, a raw
    traceback. Now the close stops there and the command ends with the second's line and code."""
    import ldp_audit.report as report
    import ldp_audit.rundir.writer as writer
    from ldp_audit.interrupts import Terminated

    def boom(*a: object, **k: object) -> None:
        raise KeyboardInterrupt

    def second(*a: object, **k: object) -> None:
        raise Terminated

    monkeypatch.setattr(report, "build_report", boom)
    monkeypatch.setattr(writer, "finish_unfinished", second)
    from tests.test_report_fixtures import make_run

    run = make_run(tmp_path / "r")
    argv = ["report", str(run), "-o", str(tmp_path / "o"), "--allow-unverified"]
    code, _, err = run_cli(argv, capsys)
    assert code == 143 and "Traceback" not in err
    assert err.strip().splitlines() == [
        "ldp-audit: terminated; files written so far are consistent"
    ]


def test_sigterm_turned_into_a_plain_keyboard_interrupt_still_ends_143(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Session 58 probe: `train dprl` SIGTERMed 1.4 s into training ended 130 "interrupted":
    its training loop catches the signal's ``Terminated`` to close the run and raises a plain
    ``KeyboardInterrupt`` after it. ``main`` knows which signal it raised; the code is 143."""
    import ldp_audit.report as report

    def caught_and_raised_again(*a: object, **k: object) -> None:
        try:
            signal.raise_signal(signal.SIGTERM)  # main's handler raises Terminated here
            time.sleep(5)
        except KeyboardInterrupt:
            raise KeyboardInterrupt from None

    monkeypatch.setattr(report, "build_report", caught_and_raised_again)
    from tests.test_report_fixtures import make_run

    run = make_run(tmp_path / "r")
    argv = ["report", str(run), "-o", str(tmp_path / "o"), "--allow-unverified"]
    code, _, err = run_cli(argv, capsys)
    assert code == 143, err
    assert err.strip().splitlines() == [
        "ldp-audit: terminated; files written so far are consistent"
    ]


def test_a_signal_a_library_wrapped_is_still_one_line_130(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Session 58 probe: `attack dynamics` SIGINTed 5.7 s in ended 3, "internal error:
    RuntimeError: Error calling __set_name__ on 'Field' instance 'tpr_at_fpr'" and a traceback:
    the KeyboardInterrupt came while a dataclass of ldp_audit.attacks.scoring was made, and
    Python 3.11 wraps an exception raised in ``__set_name__`` in a RuntimeError. Here a
    descriptor's ``__set_name__`` raises it (wrapped on 3.11, not on 3.12+)."""
    import ldp_audit.report as report

    class Signalled:
        def __set_name__(self, owner: type, name: str) -> None:
            raise KeyboardInterrupt

    def import_during_the_signal(*a: object, **k: object) -> None:
        type("AttackResult", (), {"tpr_at_fpr": Signalled()})

    monkeypatch.setattr(report, "build_report", import_during_the_signal)
    from tests.test_report_fixtures import make_run

    run = make_run(tmp_path / "r")
    argv = ["report", str(run), "-o", str(tmp_path / "o"), "--allow-unverified"]
    code, _, err = run_cli(argv, capsys)
    assert code == 130 and "Traceback" not in err, err
    assert err.strip().splitlines() == [
        "ldp-audit: interrupted; files written so far are consistent"
    ]


def _cli_cmd() -> list[str]:
    return [sys.executable, "-c", "import sys; from ldp_audit.cli import main; sys.exit(main())"]


@pytest.mark.parametrize(
    "sig, code, word",
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")],
    ids=["SIGINT", "SIGTERM"],
)
def test_sigint_during_training_leaves_a_consistent_interrupted_run(
    tmp_path: Path, sig: int, code: int, word: str
) -> None:
    run = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    argv = [*TINY_TRAIN[:4], "--epsilon", "1", "--max-submissions", "90000", "--out", str(run)]
    proc = subprocess.Popen(
        [*_cli_cmd(), *argv, "--no-progress"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    wait_for_charges(run, proc)  # training under way: the ledger has its first charge
    assert proc.poll() is None, "training ended before it could be interrupted"
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith(f"ldp-audit: {word}")
    assert len([ln for ln in err.strip().splitlines() if ln.startswith("ldp-audit")]) == 1
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["status"] == "interrupted"
    from ldp_audit.accountant import Accountant
    from ldp_audit.report import build_report

    acc = Accountant(ledger=str(run / "ledger.sqlite"))
    charged = len(acc.agents())
    acc.close()
    assert charged > 0
    model = build_report(run, figures=False).model  # the interrupted run still reports
    assert model["run"]["status"]["run"] == "interrupted"
    nv = " ".join(model["verdict"]["not_verified"])
    assert "did not complete (status: interrupted)" in nv
    assert model["ledger"]["agents"] == charged  # the charges made before Ctrl-C are reported
    # the transcript of what was released is written, and every row of it was charged
    import numpy as np

    with np.load(run / "transcript.npz") as z:
        released = {f"{t}/{a}" for t, a in zip(z["trial"], z["agent"], strict=True)}
    assert released and released <= set(Accountant(ledger=str(run / "ledger.sqlite")).agents())
    assert json.loads((run / "manifest.json").read_text())["status"] == "interrupted"


def test_json_into_a_closed_pipe_exits_quietly(tmp_path: Path) -> None:
    from ldp_audit.accountant import Accountant, LaplaceEvent

    ledger = tmp_path / "l.sqlite"
    acc = Accountant(ledger=str(ledger))
    acc.charge_many([(f"agent-{i}", LaplaceEvent(1.0)) for i in range(3000)])
    acc.close()
    proc = subprocess.Popen(
        [*_cli_cmd(), "budget", str(ledger), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.read(10)  # like `| head -c 10`
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.wait(timeout=60)
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert proc.returncode == 0


def test_a_verdict_survives_a_closed_pipe() -> None:
    """Session 51's probe: ``ldp-audit audit ... | head -1`` (the reader gone before the final
    flush) ended with exit 0 after a violation: the BrokenPipeError of main's flush was
    answered with EXIT_OK, the verdict's exit 1 dropped (a pipeline with pipefail read "no
    violation"). The exit code is the command's once it has finished."""
    proc = subprocess.Popen(
        [*_cli_cmd(), "audit", "--mechanism", "laplace", "--epsilon", "1"]
        + ["--samples", "20000", "--seed", "0", "--no-progress"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.close()  # the reader is gone before anything is written
    err = proc.stderr.read().decode()
    proc.wait(timeout=120)
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert proc.returncode == 1, err  # the float bits' violation, as without the pipe


def test_a_closed_stdout_is_no_internal_error(tmp_path: Path) -> None:
    """Session 50's probe: ``ldp-audit budget LEDGER >&-`` (fd 1 closed, so sys.stdout is None)
    ran, then exit 3 with a traceback from main's final ``sys.stdout.flush()``. The output is
    dropped as Python's print drops it; the exit code is the command's."""
    from ldp_audit.accountant import Accountant, LaplaceEvent

    ledger = tmp_path / "l.sqlite"
    with Accountant(ledger=str(ledger)) as acc:
        acc.charge_many([("a", LaplaceEvent(1.0))])
    proc = subprocess.run(
        [*_cli_cmd(), "budget", str(ledger)],
        stderr=subprocess.PIPE,
        preexec_fn=lambda: os.close(1),
        timeout=120,
    )
    err = proc.stderr.decode()
    assert proc.returncode == 0 and "Traceback" not in err, err


# ------------------------------------------------------------------------------- demo


def test_demo_json_and_exit_code_follow_the_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import dataclasses

    import ldp_audit.demo as demo

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Tiny(demo.DemoSettings):
        max_submissions: int = 60
        audit_samples: int = 20_000
        attack_shadow: int = 5
        attack_groups: int = 20

    monkeypatch.setattr(demo, "DemoSettings", Tiny)
    out = tmp_path / "demo"
    code, stdout, err = run_cli(["demo", "--out", str(out), "--no-progress", "--json"], capsys)
    assert "Traceback" not in err
    # no bar without a terminal: one quiet line per stage on stderr, in order (issue 31)
    stages = [ln for ln in err.splitlines() if ln.startswith("demo: ")]
    assert stages == [
        "demo: training PGC-A3C ...",
        "demo: auditing the mechanism ...",
        "demo: attacking the transcript ...",
        "demo: writing the report ...",
    ]
    res = json.loads(stdout)  # paths are strings: no PosixPath crash
    assert all(isinstance(res[k], str) for k in ("html", "markdown", "json", "run_dir"))
    report = json.loads(Path(res["json"]).read_text())
    assert res["verdict"] == report["verdict"]["status"]
    # Laplace in IEEE doubles leaks through its float bits: the demo finds it and exits 1
    assert res["verdict"] == "violation" and code == 1
    assert report["audits"]["results"][0]["leak"] == "float-representation"
    # rerunning into the same folder is refused; --overwrite replaces it whole
    assert_input_error(["demo", "--out", str(out), "--no-progress"], capsys, "--out")


# the shipped systems whose trainer cannot continue / replace a run (it refuses that run_mode)
_NO_RESUME, _NO_OVERWRITE = {"fedrl", "opacus"}, {"opacus"}


@pytest.mark.parametrize("name", ["pgc-a3c", "dprl", "fedrl", "frd", "opacus"])
def test_train_offers_resume_only_where_the_system_can_resume(name, tmp_path, capsys):
    """``train NAME --help`` lists --resume / --overwrite exactly when the system's train
    command declares it (``Command.resume`` / ``Command.overwrite``), and the refusal of a
    non-empty --out suggests each only then."""
    from ldp_audit import systems

    c = systems.get(name).train_command
    assert (c.resume, c.overwrite) == (name not in _NO_RESUME, name not in _NO_OVERWRITE)
    code, out, _ = run_cli(["train", name, "--help"], capsys)
    assert code == 0 and ("--resume" in out) == c.resume and ("--overwrite" in out) == c.overwrite
    (tmp_path / "junk").write_text("x")
    argv = ["train", name, "--out", str(tmp_path), "--no-progress"]
    argv += {
        "pgc-a3c": ["--mechanism", "laplace", "--epsilon", "1"],
        "dprl": ["--algo", "dqn", "--privacy", "none"],
    }.get(name, [])
    line = assert_input_error(argv, capsys, "already exists")
    assert ("--resume" in line, "--overwrite" in line) == (c.resume, c.overwrite)
    for flag, can in (("--resume", c.resume), ("--overwrite", c.overwrite)):
        if not can:
            assert_input_error([*argv, flag], capsys, f"unrecognized arguments: {flag}")


@pytest.mark.parametrize(
    "argv",
    [["--bogus"], ["train", "--bogus"], ["attack", "--bogus"], ["train", "pgc-a3c", "--bogus"]],
)
def test_unknown_option_before_the_subcommand_is_named(argv, capsys):
    """An unknown option where a subcommand (or a required option) is still missing is named
    (until 2026-12-06 ``ldp-audit --bogus`` said only "COMMAND required"); nothing given still
    names the missing COMMAND."""
    assert_input_error(argv, capsys, "unrecognized arguments: --bogus")
    assert_input_error([], capsys, "required: COMMAND")


def _options(parser: argparse.ArgumentParser, path: list[str]) -> list[tuple[object, ...]]:
    for word in path:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[word]
    return [(a.dest, tuple(a.option_strings), repr(a.default), a.required, a.help)
            for a in parser._actions]  # fmt: skip


def test_a_named_command_builds_only_its_own_parser_with_the_same_options() -> None:
    """`build_parser(argv)` registers only the module of the command argv names, and for `train`
    / `reproduce NAME` only that system (session 54: every command imported all the trainers'
    configs, Numba and Matplotlib first, 2.6 s of CPU for `ldp-audit audit` whose own work took
    0.2 s); each command's tree is the full parser's."""
    full = build_parser()
    for path in SUBCOMMANDS[1:]:  # `train pgc-a3c`: that system's commands alone
        part = build_parser([*path, "-h"])
        assert _options(part, path) == _options(full, path), path
    assert set(_walk(build_parser(["audit"]))[1:][0]) == {"audit"}
    assert {p[1] for p in _walk(build_parser(["train", "dprl"])) if p[:1] == ["train"]
            and len(p) == 2} == {"dprl"}  # fmt: skip
    assert {p[0] for p in _walk(build_parser(["udit"]))[1:]} == {p[0] for p in SUBCOMMANDS[1:]}


def test_ldp_audit_audit_does_not_import_the_trainers() -> None:
    import subprocess
    import sys

    code = (
        "import sys\nfrom ldp_audit.cli import build_parser\n"
        "build_parser(['audit'])\n"
        "print(sorted(m for m in ('numba', 'matplotlib', 'torch', 'ldp_audit.training.pgc_a3c')"
        " if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
