"""A command line that guides (issue 39): where each mistake a new user makes leads.

* ``train pgc-a3c`` without ``--out`` keeps its run in ``runs/pgc-a3c-<timestamp>`` (as the
  other trainers) and prints the path;
* a wrong option is reported by the subcommand it was given to, with the closest option and a
  pointer to that subcommand's ``-h``; a subcommand typo gets "did you mean";
* a missing ``--pairs`` is explained in command-line words;
* modules named on the command line are found in the current folder (no ``PYTHONPATH=.``);
* a second ``report RUN`` names what the user typed (no ``--out`` they never gave);
* ``audit`` draws no progress frames into a pipe, has ``--no-progress``, its bar ends at 100%,
  and ``audit --run-dir`` says its estimated time before it starts.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from ldp_audit.cli import main

TINY = ["train", "pgc-a3c", "--mechanism", "laplace", "--epsilon", "1", "--max-submissions",
        "20", "--no-progress"]  # fmt: skip


def _usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err


def test_wrong_option_points_to_the_subcommand_help(capsys):
    err = _usage_error([*TINY, "--epsilonn", "2"], capsys)
    assert "ldp-audit train pgc-a3c: error: unrecognized arguments: --epsilonn" in err
    assert "(did you mean --epsilon?)" in err
    assert "see 'ldp-audit train pgc-a3c -h' for its options" in err
    assert err.startswith("usage: ldp-audit train pgc-a3c ")  # not the top-level usage
    err = _usage_error([*TINY, "--sed", "1", "--epsilom", "2"], capsys)
    assert "unrecognized arguments: --sed 1 --epsilom 2 (did you mean --seed for --sed, " in err
    assert "--epsilon for --epsilom?)" in err
    err = _usage_error(["audit", "--mechanism", "laplace", "--foo"], capsys)
    assert "unrecognized arguments: --foo (see" in err  # nothing close: no guess
    assert "see 'ldp-audit audit -h'" in err
    err = _usage_error(["report", "--ov", "run"], capsys)  # an abbreviation: the long option
    assert "unrecognized arguments: --ov (did you mean --overwrite?)" in err  # was -o
    err = _usage_error(["report"], capsys)  # a subcommand's own error points to its -h too
    assert "see 'ldp-audit report -h' for its options" in err


def test_subcommand_typo_gets_did_you_mean(capsys):
    err = _usage_error(["trian", "pgc-a3c"], capsys)
    assert "invalid choice: 'trian'" in err and "(did you mean 'train'?)" in err
    err = _usage_error(["train", "pgc-a3", "--mechanism", "none"], capsys)
    assert "(did you mean 'pgc-a3c'?)" in err
    err = _usage_error(["zzzz"], capsys)
    assert "did you mean" not in err


NO_DOMAIN = """
class M:
    epsilon = 1.0

    def privatize(self, x, rng):
        return x + rng.laplace(size=x.shape)
"""


def test_missing_pairs_is_explained_in_cli_words(tmp_path, monkeypatch, capsys):
    """A user mechanism in the current folder is found without PYTHONPATH; without a domain
    the error names --pairs, not the Python argument."""
    (tmp_path / "nodomain_mech_39.py").write_text(NO_DOMAIN)
    monkeypatch.chdir(tmp_path)
    before = list(sys.path)
    rc = main(["audit", "--mechanism", "nodomain_mech_39:M", "--samples", "20000"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "--pairs MODULE:ATTR" in err and "pairs=[" not in err
    assert "importing 'nodomain_mech_39' failed" not in err  # found in the current folder
    assert sys.path == before  # main() restores a caller's sys.path


def test_the_current_folder_comes_last_on_sys_path(tmp_path, monkeypatch, capsys):
    """The working folder is searched for a user's module AFTER the installed libraries: a
    stray file there named like a library the toolkit imports later cannot replace it."""
    (tmp_path / "where_am_i_39.py").write_text(
        "import os, sys\n"
        "open('seen.txt', 'w').write(str(sys.path.index(os.getcwd()) == len(sys.path) - 1))\n"
        + NO_DOMAIN
    )
    monkeypatch.chdir(tmp_path)
    assert str(tmp_path) not in sys.path
    main(["audit", "--mechanism", "where_am_i_39:M", "--samples", "20000"])
    capsys.readouterr()
    assert (tmp_path / "seen.txt").read_text() == "True"


def test_audit_draws_no_frames_into_a_pipe_and_its_bar_ends_at_100(monkeypatch, capsys):
    argv = ["audit", "--mechanism", "laplace", "--epsilon", "1", "--samples", "20000"]
    monkeypatch.delenv("LDP_AUDIT_PROGRESS", raising=False)
    assert main(argv) in (0, 1)
    err = capsys.readouterr().err
    assert "audit:" not in err and "\r" not in err  # captured stderr is no terminal
    monkeypatch.setenv("LDP_AUDIT_PROGRESS", "always")  # as if a person watched
    assert main(argv) in (0, 1)
    frames = [f for f in capsys.readouterr().err.split("\r") if f.startswith("audit:")]
    assert frames and " 100%|" in frames[-1], frames[-3:]
    done, total = re.search(r"\| (\d+)/(\d+) ", frames[-1]).groups()
    assert done == total
    assert main([*argv, "--no-progress"]) in (0, 1)
    assert "audit:" not in capsys.readouterr().err


def test_pgc_run_kept_estimated_audit_and_second_report(tmp_path, monkeypatch, capsys):
    """train pgc-a3c without --out -> runs/pgc-a3c-<ts>; audit --run-dir says its estimate
    first (pilots made small here); a second report names no --out the user never gave."""
    monkeypatch.chdir(tmp_path)
    assert main(TINY) == 0
    out = capsys.readouterr().out
    runs = sorted(Path("runs").glob("pgc-a3c-*"))
    assert len(runs) == 1 and (runs[0] / "config.json").is_file()
    assert re.fullmatch(r"pgc-a3c-\d{8}-\d{6}", runs[0].name)
    assert f"run directory: {runs[0]}" in out

    from ldp_audit.cli import audit_time

    monkeypatch.setattr(audit_time, "MIN_SAMPLES", 20_000)
    monkeypatch.setenv("LDP_AUDIT_PROGRESS", "always")
    assert main(["audit", "--run-dir", str(runs[0]), "--samples", "20000"]) in (0, 1)
    cap = capsys.readouterr()
    first = cap.err.split("\r")[0].splitlines()[0]
    assert re.match(
        r"audit --run-dir: 1 mechanism\(s\) at --samples 20000: about \d+(\.\d)? (s|min) on this "
        r"machine \(from two pilot audits",
        first,
    ), cap.err[:300]
    assert "wrote" in cap.out

    monkeypatch.setenv("LDP_AUDIT_PROGRESS", "never")
    assert main(["report", str(runs[0])]) in (0, 1)
    capsys.readouterr()
    assert main(["report", str(runs[0])]) == 2
    err = capsys.readouterr().err
    assert "already has a report" in err and "--overwrite" in err and "--out DIR" in err
    assert "--out '" not in err  # the user gave no --out


def test_pilot_sizes_and_wording():
    """Pilots only for large audits (1% and 4% of --samples, bounded); readable durations."""
    from ldp_audit.cli.audit_time import pilot_sizes, say

    assert pilot_sizes(299_999) is None
    assert pilot_sizes(300_000) == (3_000, 12_000)
    assert pilot_sizes(1_000_000) == (10_000, 40_000)
    assert pilot_sizes(10**8) == (10_000, 40_000)
    assert say(40) == "about 40 s" and say(210) == "about 3.5 min" and say(7200) == "about 2.0 h"


def test_sigterm_while_the_subcommands_import_is_the_one_line_and_143() -> None:
    """A SIGTERM delivered while build_parser imports every subcommand module (about 3 s on
    the loaded 2-core machine, 2026-12-06) ends like one during the work: the one line, 143.
    It was a silent death by the signal (-15): the handler was installed after the import."""
    import subprocess
    import sys

    child = (
        "import os, signal, sys\n"
        "import ldp_audit.cli as cli\n"
        "real = cli.build_parser\n"
        "def build(argv=None):\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    return real(argv)\n"
        "cli.build_parser = build\n"
        "sys.exit(cli.main(['budget', '-h']))\n"
    )
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True)
    assert out.returncode == 143, (out.returncode, out.stderr)
    assert out.stderr.strip() == "ldp-audit: terminated; files written so far are consistent"


@pytest.mark.parametrize("value", ["sometimes", "1", "alway"])
def test_a_mistyped_progress_variable_is_named(value, capsys, monkeypatch) -> None:
    """LDP_AUDIT_PROGRESS reads always, never or auto (empty: auto); any other value is exit
    2 naming it, before the work (it was read as auto in silence)."""
    monkeypatch.setenv("LDP_AUDIT_PROGRESS", value)
    assert main(["attack", "dynamics", "--agents", "100", "--shadow", "50"]) == 2
    assert f"LDP_AUDIT_PROGRESS must be always, never or auto, got {value!r}" in (
        capsys.readouterr().err
    )
    monkeypatch.setenv("LDP_AUDIT_PROGRESS", " Never ")
    assert main(["attack", "dynamics", "--agents", "100", "--shadow", "50"]) == 0


@pytest.mark.parametrize("attack", ["dynamics", "membership"])
def test_attack_takes_no_progress_like_every_command_with_bars(attack, capsys, monkeypatch) -> None:
    """`attack dynamics|membership` draw bars (on a terminal, or with LDP_AUDIT_PROGRESS=always;
    membership on a --run-dir) and take --no-progress like the other commands (it was an
    unrecognized argument)."""
    monkeypatch.setenv("LDP_AUDIT_PROGRESS", "always")
    argv = ["attack", attack, "--agents", "100", "--shadow", "20"]
    argv += ["--canaries", "20"] if attack == "membership" else []
    if attack == "dynamics":  # (the simulated membership attack draws none)
        assert main(argv) == 0 and "%|" in capsys.readouterr().err  # a bar
    assert main([*argv, "--no-progress"]) == 0
    assert "%|" not in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["budget", "RUN", "--verify", "--expect-head", "{v}"],
        ["report", "RUN", "--expect-root", "{v}"],
        ["attack", "fedrl", "--run-dir", "RUN", "--expect-root", "{v}"],
        ["audit", "--run-dir", "RUN", "--expect-head", "{v}"],
    ],
)
def test_a_bad_expected_head_or_root_is_named_by_its_option(argv, capsys) -> None:
    """Session 52 probe: `attack fedrl --run-dir RUN --expect-root ''` was refused as
    "expect_root must be a 64-digit hex run root" (the library's name, once the run was read):
    now the parser names the option, before anything is read (RUN does not exist here)."""
    opt = next(a for a in argv if a.startswith("--expect"))
    for v in ("", "zz", "0" * 63):
        err = _usage_error([a.replace("{v}", v) for a in argv], capsys)
        assert f"argument {opt}: {opt} must be a 64-digit hex" in err and "Traceback" not in err
