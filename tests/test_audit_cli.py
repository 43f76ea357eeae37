"""Tests of ``ldp-audit audit`` (ldp_audit.cli.audit_cmd).

Correct mechanisms are audited at confidence 1 - 1e-7 (false failure <= 1e-7 by the auditor's
guarantee); broken ones have margins of many standard errors.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap

import pytest

from ldp_audit.cli import audit_cmd
from ldp_audit.errors import LdpAuditError


def run_cli(argv: list[str]) -> int:
    """Mirror ldp_audit.cli.main with only the audit subcommand registered (main puts the
    current folder last on sys.path, where MODULE:ATTR is found)."""
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.append(cwd)
    parser = argparse.ArgumentParser(prog="ldp-audit")
    sub = parser.add_subparsers(dest="command")
    audit_cmd.register(sub)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except LdpAuditError as exc:
        print(f"ldp-audit: error: {exc}", file=sys.stderr)
        return 2
    finally:
        if added and cwd in sys.path:
            sys.path.remove(cwd)


STRICT = ["--confidence", "0.9999999"]


def test_rr_no_violation_json(capsys):
    code = run_cli(
        ["audit", "--mechanism", "rr", "--epsilon", "1", "--samples", "50000", "--json", "--exact"]
        + STRICT
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["violation"] is False
    assert out["claimed_epsilon"] == 1.0 and 0.5 < out["epsilon_lower_bound"] <= 1.0
    assert out["exact_epsilon"] == pytest.approx(1.0)


@pytest.mark.parametrize(
    "argv",
    [
        ["--mechanism", "prs", "--epsilon", "1", "--reduced-dim", "1", "--dim", "2"],
        ["--mechanism", "bitflip", "--epsilon", "1", "--dim", "2"],
        ["--mechanism", "gaussian", "--epsilon", "2", "--dim", "2", "--no-float-bits"],
        ["--mechanism", "laplace", "--epsilon", "1", "--no-float-bits"],
    ],
    ids=["prs", "bitflip", "gaussian", "laplace"],
)
def test_builtins_no_violation(argv, capsys):
    code = run_cli(["audit", *argv, "--samples", "30000", "--seed", "3", *STRICT])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "proves nothing" in text


def test_float_laplace_flagged_exit_1(capsys):
    code = run_cli(["audit", "--mechanism", "laplace", "--epsilon", "1", "--samples", "50000"])
    captured = capsys.readouterr()
    assert code == 1 and "VIOLATION" in captured.out
    assert "float bit cells" in captured.out


def test_user_module_mechanism_and_pairs(tmp_path, monkeypatch, capsys):
    (tmp_path / "my_mech_for_cli.py").write_text(
        textwrap.dedent(
            """
            import numpy as np

            class Broken:
                epsilon = 0.5
                def privatize(self, x, rng):
                    return x + rng.laplace(0.0, 0.5, size=x.shape)  # true epsilon 2

            def make():
                return Broken()

            PAIRS = [(np.zeros(1), np.ones(1))]
            """
        )
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    argv = ["audit", "--mechanism", "my_mech_for_cli:make", "--pairs", "my_mech_for_cli:PAIRS"]
    code = run_cli([*argv, "--samples", "50000", "--no-float-bits", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and out["violation"] is True and out["epsilon_lower_bound"] > 1.0
    # the class itself also works (instantiated with no arguments)
    code = run_cli(["audit", "--mechanism", "my_mech_for_cli:Broken", "--pairs",
                    "my_mech_for_cli:PAIRS", "--samples", "20000", "--no-float-bits"])  # fmt: skip
    assert code == 1


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--mechanism", "laplace"], "--epsilon is required"),
        (["--mechanism", "no_such_module_xyz:M"], "importing 'no_such_module_xyz' failed"),
        (["--mechanism", "json:NoSuchAttr"], "no attribute"),
        (["--mechanism", "nocolon"], "MODULE:ATTR"),
        (["--mechanism", "json:dumps", "--samples", "5000"], "zero-argument factory"),
        (["--mechanism", "json:decoder", "--samples", "5000"], "mechanism must have"),
        # a MODULE:ATTR that is no mechanism: the message names the option and the text given
        (["--mechanism", "math:pi"], "--mechanism 'math:pi': mechanism must have an epsilon"),
    ],
)
def test_usage_errors_exit_2(argv, message, capsys):
    assert run_cli(["audit", *argv]) == 2
    assert message in capsys.readouterr().err


def test_argparse_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        run_cli(["audit", "--mechanism", "rr", "--epsilon", "-1"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        run_cli(["audit", "--mechanism", "rr", "--epsilon", "1", "--confidence", "1.5"])
    assert exc.value.code == 2


# ---- issue 16 / 19: built-ins, --param, refused options, user-code errors, help ------------


def test_gaussian_sigma_builtin_and_json_verdicts(capsys):
    # sigma 4, clip 1 (sensitivity 2), delta 1e-3: correct in exact arithmetic (no violation
    # at 1 - 1e-7), but computed in doubles, so its float bits leak (an event with k2 = 0)
    argv = ["audit", "--mechanism", "gaussian", "--sigma", "4", "--clip", "1", "--delta", "1e-3"]
    code = run_cli([*argv, "--samples", "30000", "--json", *STRICT])
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and out["delta"] == 1e-3 and out["leak"] == "float-representation"
    assert set(out["verdicts"]) == {"distribution", "implementation"}
    assert out["verdicts"]["distribution"]["violation"] is False
    assert out["verdicts"]["implementation"]["witness"]["family"] == "float-bits"
    prof = out["profile"]  # on by default for delta > 0; claimed curve from epsilon_at
    assert prof["claimed_from"] == "epsilon_at" and prof["epsilon_claimed"][0] == "inf"
    assert not any(prof["above_claim"])


def test_discrete_laplace_builtin_not_flagged(capsys):
    argv = ["audit", "--mechanism", "discrete-laplace", "--epsilon", "1", "--resolution", "0.05"]
    code = run_cli([*argv, "--samples", "30000", *STRICT])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "implementation (float bits)" in text


def _write_module(tmp_path, monkeypatch, name, body):
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(body))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])


def test_param_passes_factory_arguments(tmp_path, monkeypatch, capsys):
    _write_module(
        tmp_path,
        monkeypatch,
        "param_mech_cli",
        """
        import numpy as np

        class Lap:
            def __init__(self, scale, epsilon=1.0):
                self.scale, self.epsilon = scale, epsilon
            def privatize(self, x, rng):
                return x + rng.laplace(0.0, self.scale, size=x.shape)

        PAIRS = [(np.zeros(1), np.ones(1))]
        """,
    )
    base = ["audit", "--mechanism", "param_mech_cli:Lap", "--pairs", "param_mech_cli:PAIRS"]
    base += ["--samples", "50000", "--no-float-bits"]
    # scale 0.5 claiming 1: true epsilon 2, bound ~1.9 (s.e. ~0.03)
    assert run_cli([*base, "--param", "scale=0.5"]) == 1
    capsys.readouterr()
    assert run_cli([*base, "--param", "scale=1.0", *STRICT]) == 0


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--mechanism", "json:dumps", "--epsilon", "1"], "--epsilon cannot be used with a MODULE"),
        (["--mechanism", "lapalce", "--epsilon", "1"], "did you mean 'laplace'"),
        (["--mechanism", "none", "--epsilon", "1"], "built-ins: laplace, discrete-laplace"),
        (["--mechanism", "laplace", "--epsilon", "1", "--sigma", "2"], "--sigma cannot be used"),
        (["--mechanism", "rr", "--epsilon", "1", "--clip", "2"], "--clip cannot be used"),
        (["--mechanism", "gaussian", "--epsilon", "1", "--sigma", "2"], "exactly one of --sigma"),
        (["--mechanism", "laplace", "--param", "a=1", "--epsilon", "1"], "--param cannot be used"),
        (["--mechanism", "laplace", "--epsilon", "1", "--samples", "1e13"], "hours"),
    ],
)
def test_refused_combinations_exit_2(argv, message, capsys):
    assert run_cli(["audit", *argv]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "body, spec, message",
    [
        ("def broken(:\n", "syntax_mod_cli:M", "SyntaxError"),
        ("raise RuntimeError('module-level failure')\n", "raising_mod_cli:M", "RuntimeError"),
        (
            "class M:\n    epsilon = 1.0\n    def privatize(self, x, rng):\n"
            "        raise ValueError('refuses floats')\n",
            "priv_mod_cli:M",
            "privatize of M raised ValueError",
        ),
        (
            "class M:\n    epsilon = 1.0\n    def privatize(self, x, rng):\n"
            "        return [['a']] * len(x)\n",
            "str_mod_cli:M",
            "must return real numbers",
        ),
        (
            "class M:\n    epsilon = '1'\n    def privatize(self, x, rng):\n        return x\n",
            "streps_mod_cli:M",
            "mechanism.epsilon must be a real number, got '1'",
        ),
    ],
    ids=["syntax-error", "import-raises", "privatize-raises", "string-output", "string-epsilon"],
)
def test_user_code_failures_are_clear_errors(body, spec, message, tmp_path, monkeypatch, capsys):
    module = spec.split(":")[0]
    (tmp_path / f"{module}.py").write_text(body)
    (tmp_path / "pairs_mod_cli.py").write_text("PAIRS = [([0.0], [1.0])]\n")
    monkeypatch.chdir(tmp_path)
    code = run_cli(["audit", "--mechanism", spec, "--pairs", "pairs_mod_cli:PAIRS"])
    err = capsys.readouterr().err
    assert code == 2 and message in err
    assert "Traceback" not in err


def test_a_one_value_function_without_scalar_is_told_the_way_in(tmp_path, monkeypatch, capsys):
    """Session 57 probe: ``--mechanism mod:mech.randomise`` (diffprivlib), an OpenDP measurement
    or a bare ``def f(v)`` given without ``--scalar`` was called as a zero-argument factory and
    refused with "f() missing 1 required positional argument: 'v'", no word of ``--scalar`` (the
    Python API named it). A factory whose own body raises TypeError keeps its message."""
    _write_module(
        tmp_path,
        monkeypatch,
        "one_value_cli",
        """
        def f(v):
            return v

        class Measurement:  # OpenDP's: called with one value
            def __call__(self, arg):
                return arg

        class Lib:
            def randomise(self, value):
                return value

        m = Measurement()
        lib = Lib()

        def factory():
            return len(5)
        """,
    )
    for spec in ("one_value_cli:f", "one_value_cli:m", "one_value_cli:lib.randomise"):
        assert run_cli(["audit", "--mechanism", spec, "--samples", "2000"]) == 2
        err = capsys.readouterr().err
        assert f"one value per call: audit it with --scalar --mechanism {spec} --epsilon" in err
    assert run_cli(["audit", "--mechanism", "one_value_cli:factory", "--samples", "2000"]) == 2
    err = capsys.readouterr().err
    assert "zero-argument factory" in err and "has no len()" in err and "--scalar" not in err


def test_a_compiled_one_value_method_without_scalar_is_told_the_way_in(
    tmp_path, monkeypatch, capsys
):
    """Session 58 probe: PyDP's ``--mechanism mod:lap.add_noise`` (a pybind11 method: no
    signature to read) without ``--scalar`` was refused with pybind11's five-line list of
    overloads and no word of ``--scalar``. A builtin with no signature (``max``) stands for it;
    a factory's multi-line TypeError is one line too."""
    _write_module(
        tmp_path,
        monkeypatch,
        "compiled_cli",
        """
        add_noise = max

        def factory():
            raise TypeError("incompatible arguments:\\n    1. (x: int)\\n    2. (x: float)")
        """,
    )
    assert run_cli(["audit", "--mechanism", "compiled_cli:add_noise", "--samples", "2000"]) == 2
    err = capsys.readouterr().err
    assert "one value per call: audit it with --scalar --mechanism compiled_cli:add_noise" in err
    assert run_cli(["audit", "--mechanism", "compiled_cli:factory", "--samples", "2000"]) == 2
    err = capsys.readouterr().err
    assert "arguments: 1. (x: int) 2. (x: float)" in err and err.count("\n") == 1


def test_pairs_factory_error_wrapped(tmp_path, monkeypatch, capsys):
    (tmp_path / "pf_mod_cli.py").write_text("def pairs():\n    raise KeyError('no pairs')\n")
    monkeypatch.chdir(tmp_path)
    code = run_cli(["audit", "--mechanism", "rr", "--epsilon", "1", "--pairs", "pf_mod_cli:pairs"])
    assert code == 2 and "pairs factory raised KeyError" in capsys.readouterr().err


def test_help_shows_defaults_and_no_literal_percent(capsys):
    with pytest.raises(SystemExit):
        run_cli(["audit", "--help"])
    text = capsys.readouterr().out
    assert "%%" not in text and "(default: 1000000)" in text and "(default: 0.95)" in text
    assert "discrete-laplace" in text and "--param KEY=VALUE" in text


def test_scalar_cli_form(tmp_path, monkeypatch, capsys):
    _write_module(
        tmp_path,
        monkeypatch,
        "scalar_lib_cli",
        """
        def make(rs, scale=1.0):
            return lambda v: v + rs.laplace(0.0, scale)

        def make_broken(rs):
            return make(rs, 0.5)

        def refuses(v):
            raise TypeError("integers only")
        """,
    )
    base = ["audit", "--scalar", "--epsilon", "1", "--domain", "0:1", "--no-float-bits"]
    base += ["--seeding", "random_state", "--samples", "30000"]
    assert run_cli([*base, "--mechanism", "scalar_lib_cli:make", *STRICT]) == 0
    # scale 0.5 claiming 1: true 2, bound ~1.8 at 30k samples (s.e. ~0.06)
    capsys.readouterr()
    assert run_cli([*base, "--mechanism", "scalar_lib_cli:make_broken", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["leak"] == "distribution" and out["reproducible"] is True
    code = run_cli(["audit", "--scalar", "--mechanism", "scalar_lib_cli:refuses", "--epsilon", "1",
                    "--domain", "0,1", "--samples", "5000"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "raised TypeError on input 0" in err and "Traceback" not in err


def test_exact_without_privacy_loss_is_refused_before_the_audit(tmp_path, monkeypatch, capsys):
    """Session 56 probe: `--scalar ... --exact` (and a user mechanism without privacy_loss)
    ran the whole audit (71 s at --samples 5000 on an OpenDP randomised response), then exited
    2 with no result; now refused before any privatize call."""
    _write_module(
        tmp_path,
        monkeypatch,
        "exact_less_cli",
        """
        CALLS = []

        def rr(v):
            CALLS.append(v)
            return v
        """,
    )
    argv = ["audit", "--scalar", "--mechanism", "exact_less_cli:rr", "--epsilon", "1"]
    assert run_cli([*argv, "--domain", "0,1", "--samples", "5000", "--exact"]) == 2
    assert "privacy_loss" in capsys.readouterr().err
    assert sys.modules["exact_less_cli"].CALLS == []


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--scalar", "--mechanism", "json:dumps", "--domain", "0:1"], "--scalar needs --epsilon"),
        (["--scalar", "--mechanism", "laplace", "--epsilon", "1"], "MODULE:ATTR"),
        (["--mechanism", "laplace", "--epsilon", "1", "--domain", "0:1"], "only be used with"),
        (
            [
                "--scalar",
                "--mechanism",
                "json:dumps",
                "--epsilon",
                "1",
                "--domain",
                "0:1",
                "--clip",
                "2",
            ],
            "--clip cannot be used with --scalar",
        ),  # fmt: skip
    ],
)
def test_scalar_cli_refusals(argv, message, capsys):
    assert run_cli(["audit", *argv]) == 2
    assert message in capsys.readouterr().err


def test_scalar_boolean_domain(tmp_path, monkeypatch, capsys):
    """--domain false,true passes bools (OpenDP's boolean randomised response refuses ints):
    keep w.p. 3/4 is correct at ln 3 (false failure <= 1e-7)."""
    _write_module(
        tmp_path,
        monkeypatch,
        "bool_lib_cli",
        """
        def make(g):
            def rr(v):
                if not isinstance(v, bool):
                    raise TypeError("expected bool")
                return v if g.random() < 0.75 else not v
            return rr
        """,
    )
    argv = ["audit", "--scalar", "--mechanism", "bool_lib_cli:make", "--epsilon", "1.0986123"]
    argv += ["--domain", "False,true", "--seeding", "generator", "--samples", "20000"]
    assert run_cli([*argv, *STRICT]) == 0, capsys.readouterr().err


def test_scalar_zero_epsilon_claim(tmp_path, monkeypatch, capsys):
    """A (0, delta) library mechanism (diffprivlib's Uniform: x + U(-b, b), b = 1 / (2 delta))
    is audited at its own claim: --epsilon 0 was refused ("must be in (0, inf)") although
    from_scalar takes it. At (0, 0.2) it is correct (not flagged: false failure <= 1e-7); at
    (0, 0.1) its delta bound (about 0.19, standard error 0.004 at 20,000 samples) refutes it.
    A built-in still refuses --epsilon 0, naming it."""
    _write_module(
        tmp_path,
        monkeypatch,
        "uniform_lib_cli",
        """
        def make(rs):
            return lambda v: v + rs.uniform(-2.5, 2.5)
        """,
    )
    base = ["audit", "--scalar", "--mechanism", "uniform_lib_cli:make", "--epsilon", "0"]
    base += ["--domain", "0:1", "--seeding", "random_state", "--samples", "20000"]
    base += ["--no-float-bits", "--json"]
    assert run_cli([*base, "--delta", "0.2", *STRICT]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["claimed_epsilon"] == 0.0 and out["delta_lower_bound"] > 0.1
    assert not any("no statistic separated" in w for w in out["warnings"])
    assert run_cli([*base, "--delta", "0.1"]) == 1
    assert json.loads(capsys.readouterr().out)["delta_violation"] is True
    assert run_cli(["audit", "--mechanism", "laplace", "--epsilon", "0"]) == 2
    assert "--epsilon must be a finite number in (0, inf) for --mechanism laplace, got 0" in (
        capsys.readouterr().err
    )


def test_scalar_delta_zero_is_the_pure_claim_from_scalar_takes(capsys):
    """Session 56: ``--scalar --delta 0`` was refused by the parser ("in (0, 1)") while
    ``from_scalar(..., delta=0)`` (its default) is accepted; the built-in Gaussian still
    refuses 0, by name."""
    parser = argparse.ArgumentParser(prog="ldp-audit")
    audit_cmd.register(parser.add_subparsers(dest="command"))
    argv = ["audit", "--scalar", "--mechanism", "math:fabs", "--epsilon", "1", "--domain", "0:1"]
    m = audit_cmd.build_mechanism(parser.parse_args([*argv, "--delta", "0"]))
    assert m.delta == 0.0 == audit_cmd.build_mechanism(parser.parse_args(argv)).delta
    assert run_cli(["audit", "--mechanism", "gaussian", "--sigma", "1", "--delta", "0"]) == 2
    err = capsys.readouterr().err
    assert "--delta must be a finite number in (0, 1) (a normal double" in err


def test_subnormal_epsilon_is_refused_naming_the_option(capsys):
    """Session 57: ``--epsilon 5e-324`` read "the noise scale clip / epsilon = inf is too
    large", naming no option; 0 stays a claim (a --scalar library's (0, delta))."""
    with pytest.raises(SystemExit) as e:  # a usage error: argparse's exit
        run_cli(["audit", "--mechanism", "laplace", "--epsilon", "5e-324"])
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert "--epsilon must be 0 or >= 2.22507e-308 (a normal double), got '5e-324'" in err
    parser = argparse.ArgumentParser(prog="ldp-audit")
    audit_cmd.register(parser.add_subparsers(dest="command"))
    assert parser.parse_args(["audit", "--epsilon", "0"]).epsilon == 0.0


@pytest.mark.parametrize("eps", ["1e13", "9" * 30, "20"])
def test_claim_too_large_to_refute_is_refused(eps, capsys):
    assert run_cli(["audit", "--mechanism", "laplace", "--epsilon", eps, "--samples", "1000"]) == 2
    err = capsys.readouterr().err
    assert "--epsilon" in err and "cannot be refuted" in err and "--force" in err


def test_ratio_test_and_pool_reach_the_auditor(capsys):
    """--ratio-test poisson --pool: the witness says which test made it and that it is pooled;
    a correct Laplace is not flagged (false-failure probability <= 1e-7, the STRICT level)."""
    argv = ["audit", "--mechanism", "laplace", "--epsilon", "1", "--samples", "50000"]
    extra = ["--no-float-bits", "--json", "--ratio-test", "poisson", "--pool"]
    code = run_cli(argv + extra + STRICT)
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["violation"] is False
    assert out["witness"]["test"] == "poisson"
    assert 0.5 < out["epsilon_lower_bound"] <= 1.0
    code = run_cli(argv + ["--no-float-bits", "--json"] + STRICT)
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["witness"].get("test", "clopper-pearson") == "clopper-pearson"


def test_a_factory_that_raises_names_the_param_values(tmp_path, monkeypatch, capsys):
    # session 52: --param epsilon=abc (not JSON: passed as text) said only "building the
    # mechanism raised ValueError: could not convert string to float: 'abc'"
    _write_module(tmp_path, monkeypatch, "fact_mod_cli", "def make(epsilon):\n    float(epsilon)\n")
    argv = ["audit", "--mechanism", "fact_mod_cli:make", "--param", "epsilon=abc"]
    assert run_cli(argv) == 2
    err = capsys.readouterr().err
    assert "building the mechanism with --param epsilon='abc' raised ValueError" in err
    assert "Traceback" not in err


def test_scalar_label_domain(tmp_path, monkeypatch, capsys):
    """--domain a,b,c passes the strings (session 54; was "--domain value must be a finite
    number, got 'a'"): k-RR over them at its claim exits 0 (false failure <= 1e-7); a domain
    that mixes numbers and labels is still refused, naming the value."""
    _write_module(
        tmp_path,
        monkeypatch,
        "label_lib_cli",
        """
        import math
        def make(g):
            def rr(v):
                if v not in ("a", "b", "c"):
                    raise TypeError("expected a label")
                if g.random() < math.e / (math.e + 2):
                    return v
                return [u for u in ("a", "b", "c") if u != v][g.integers(2)]
            return rr
        """,
    )
    argv = ["audit", "--scalar", "--mechanism", "label_lib_cli:make", "--epsilon", "1"]
    argv += ["--seeding", "generator", "--samples", "10000"]
    assert run_cli([*argv, "--domain", "a,b,c", *STRICT]) == 0, capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        run_cli([*argv, "--domain", "1,b"])
    assert exit_.value.code == 2
    assert "--domain value must be a finite number, got 'b'" in capsys.readouterr().err
