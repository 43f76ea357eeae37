"""``ldp-audit audit --statistic MODULE:FUNCTION`` (issue 40): the command-line form of
``audit(..., statistics=[...])``.

The example of the issue: an optimal-local-hashing client whose raw report is ``(y, seed)`` and
whose keep probability is that of epsilon 4.711 while it claims 4 (g = 56, the g of epsilon 4).
No built-in statistic computes the hash, so without a statistic the bound is exactly 0 (with the
warning); the statistic ``[y = H_seed(x)] - [y = H_seed(x2)]`` has the event ``> 0`` with ratio
exactly p / q = e^4.711 (rates 0.657 and 0.0059 of 27,000 estimation outputs: about 160 counts
under x2, so the bound's expected value is about 4.45 and the chance it falls below 4 is far
below 1e-6). Through ``ldp_audit.cli.main`` (the real entry point): errors are one line, exit 2.
"""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from ldp_audit.cli import main

OLH_MODULE = textwrap.dedent(
    """
    import math

    import numpy as np
    from scipy import special

    from ldp_audit.mechanisms import OptimalLocalHashing
    from ldp_audit.mechanisms.olh import olh_hash

    G = 56  # round(e^4) + 1: the g of the claim


    class RawOLH:
        \"\"\"OLH claiming epsilon 4 whose keep probability is that of epsilon 4.711.\"\"\"

        epsilon = 4.0

        def __init__(self):
            self.inner = OptimalLocalHashing(epsilon=4.711, k=16, g=G)

        def privatize(self, x, rng):
            return self.inner.privatize(x, rng)  # raw reports: columns [y, seed]

        def candidate_pairs(self, dim):
            return [(np.array([0.0]), np.array([1.0]))]


    def support_gap(outputs, x, x_prime):
        y, seed = outputs[:, 0], outputs[:, 1]
        hit = y == olh_hash(seed, int(x[0]), G)
        hit2 = y == olh_hash(seed, int(x_prime[0]), G)
        return hit.astype(float) - hit2.astype(float)


    def constant(outputs, x, x_prime):
        return np.zeros(len(outputs))


    def boom(outputs, x, x_prime):
        raise ZeroDivisionError("statistic failed")


    def wrong_shape(outputs, x, x_prime):
        return np.zeros((len(outputs), 2))


    NOT_CALLABLE = 3
    """
)


@pytest.fixture()
def olh_dir(tmp_path, monkeypatch):
    (tmp_path / "olh_stat_cli.py").write_text(OLH_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "olh_stat_cli", raising=False)
    return tmp_path


BASE = ["audit", "--mechanism", "olh_stat_cli:RawOLH", "--samples", "30000", "--no-float-bits"]


def test_olh_raw_report_refuted_only_with_the_statistic(olh_dir, capsys):
    true_eps = 4.711
    code = main([*BASE, "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["epsilon_lower_bound"] == 0.0 and out["statistics"] == []
    assert any("no statistic separated" in w for w in out["warnings"])
    code = main([*BASE, "--json", "--statistic", "olh_stat_cli:support_gap"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and out["violation"] is True
    assert 4.0 < out["epsilon_lower_bound"] <= true_eps
    assert out["statistics"] == ["support_gap"]
    assert out["witness"]["family"] == "user" and "support_gap" in out["witness"]["event"]


def test_statistic_repeatable_and_text_output(olh_dir, capsys):
    code = main([*BASE, "--statistic", "olh_stat_cli:constant", "--statistic",
                 "olh_stat_cli:support_gap"])  # fmt: skip
    text = capsys.readouterr().out
    assert code == 1 and "statistics supplied: constant, support_gap" in text


def test_same_semantics_as_the_python_api(olh_dir, capsys):
    """The CLI's bound is the API's with the same seed, mechanism and statistic."""
    sys.path.insert(0, str(olh_dir))
    import olh_stat_cli

    from ldp_audit.audit import audit

    r = audit(olh_stat_cli.RawOLH(), samples=30_000, rng=0, float_bits=False,
              statistics=[olh_stat_cli.support_gap])  # fmt: skip
    main([*BASE, "--json", "--statistic", "olh_stat_cli:support_gap"])
    out = json.loads(capsys.readouterr().out)
    assert out["epsilon_lower_bound"] == r.epsilon_lower_bound


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_such_stat_mod:f", "'no_such_stat_mod:f': importing 'no_such_stat_mod' failed"),
        ("olh_stat_cli:missing", "'olh_stat_cli' has no attribute 'missing'"),
        ("olh_stat_cli:NOT_CALLABLE", "must name a function stat(outputs, x, x_prime), got int"),
        ("olh_stat_cli:boom", "statistic 'boom' raised ZeroDivisionError"),
        ("olh_stat_cli:wrong_shape", "statistic 'wrong_shape' must return one score per output"),
        ("nocolon", "--statistic must be MODULE:ATTR"),
        # a user's pstats.py (or json.py) in the current directory is shadowed by the standard
        # library's, already imported: the message names the file that was read (session 51)
        ("json:tries", "'json' has no attribute 'tries' (read from " + json.__file__ + ")"),
    ],
    ids=[
        "missing-module",
        "missing-attr",
        "not-callable",
        "raises",
        "wrong-shape",
        "no-colon",
        "shadowed-module",
    ],
)  # fmt: skip
def test_statistic_errors_exit_2_without_traceback(spec, message, olh_dir, capsys):
    code = main([*BASE, "--statistic", spec])
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err and "Traceback" not in err


def test_duplicate_statistic_refused(olh_dir, capsys):
    spec = "olh_stat_cli:constant"
    assert main([*BASE, "--statistic", spec, "--statistic", spec]) == 2
    assert "two statistics are named 'constant'" in capsys.readouterr().err


def test_statistic_module_imported_only_when_named(olh_dir, capsys):
    (olh_dir / "stat_marker_cli.py").write_text(
        "import numpy as np\n\ndef flat(outputs, x, x_prime):\n    return np.zeros(len(outputs))\n"
    )
    sys.modules.pop("stat_marker_cli", None)
    small = [a if a != "30000" else "2000" for a in BASE]  # an option is given once
    assert main(small) == 0
    assert "stat_marker_cli" not in sys.modules
    assert main([*small, "--statistic", "stat_marker_cli:flat"]) == 0
    assert "stat_marker_cli" in sys.modules
    sys.modules.pop("stat_marker_cli", None)


def test_statistic_refused_with_run_dir(capsys):
    assert main(["audit", "--run-dir", "nowhere", "--statistic", "m:f"]) == 2
    assert "--statistic" in capsys.readouterr().err
