"""Your own loop (ldp_audit/run.py): docs/own-loop.md's example, executed as written."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from ldp_audit.attacks.scoring import accuracy_ceiling
from ldp_audit.cli import main
from ldp_audit.errors import BudgetExceeded, InvalidParameterError, RunDirectoryError
from ldp_audit.mechanisms import Laplace
from ldp_audit.run import open_run

DOC = Path(__file__).resolve().parents[1] / "docs" / "own-loop.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)


def test_the_docs_example_runs_and_attack_and_report_read_it(tmp_path, monkeypatch, capsys) -> None:
    blocks = _python_blocks()
    assert len(blocks) == 2  # the loop, then the attack
    train_lines = [x for x in blocks[0].splitlines() if x.strip() and not x.startswith("#")]
    assert len(train_lines) <= 40  # "in 40 lines"
    monkeypatch.chdir(tmp_path)
    ns: dict = {"__name__": "own_loop_example"}
    exec(compile(blocks[0], str(DOC), "exec"), ns)  # noqa: S102 - the docs' own code
    run = tmp_path / "runs" / "own-loop"
    doc = json.loads((run / "config.json").read_text())
    assert doc["algorithm"] == "own-loop" and doc["system"] == "mountaincar-reinforce"
    assert doc["private_parameter"]["values"] == [0.0006, 0.0014]
    tr = np.load(run / "transcript.npz")
    sec = np.load(run / "secrets.npz")
    assert tr["report"].shape == (24, 9) and sorted(tr["agent"].tolist()) == list(range(24))
    assert tr["thetas"].shape == (3, 9)  # one theta per round
    assert set(sec["value"].tolist()) <= {0.0006, 0.0014}
    # every report charged, once, before release: the ledger holds one entry per agent
    from ldp_audit.rundir import RunDir

    rd = RunDir(run)
    assert rd.ledger_charges() == {str(a): 1 for a in range(24)}
    assert json.loads((run / "manifest.json").read_text())["status"] == "complete"
    # the CLI attack refuses: the loop's simulator is code, never named by a run directory
    assert main(["attack", "dynamics", "--run-dir", str(run), "--shadow", "4"]) == 2
    assert "simulator" in capsys.readouterr().err
    # the docs' attack block, as written
    exec(compile(blocks[1], str(DOC), "exec"), ns)  # noqa: S102
    out = capsys.readouterr().out
    res = json.loads((run / "attack_dynamics.json").read_text())
    assert res["n"] == 24 and res["k"] == 2 and res["attack"] == "dynamics-private-parameter"
    assert res["ceiling"] == pytest.approx(accuracy_ceiling(2.0, 2, 1))
    assert "dynamics-private-parameter" in out
    # the CLI, given the simulator by name (--simulator MODULE:FUNCTION), scores the same
    import sys
    import types

    mod = types.ModuleType("own_loop_sim")
    mod.simulator = ns["simulator"]
    mod.not_callable = 3
    monkeypatch.setitem(sys.modules, "own_loop_sim", mod)
    cli_out = tmp_path / "cli_attack.json"
    argv = ["attack", "dynamics", "--run-dir", str(run), "--shadow", "30", "--seed", "1"]
    code = main([*argv, "--simulator", "own_loop_sim:simulator", "--out", str(cli_out)])
    assert code in (0, 1)
    cli = json.loads(cli_out.read_text())
    assert (cli["n"], cli["k"], cli["accuracy"]) == (24, 2, res["accuracy"])
    for bad, needle in [
        ("own_loop_sim:nope", "has no attribute"),
        ("no_such_module_x:f", "importing 'no_such_module_x' failed"),
        ("own_loop_sim:not_callable", "is not callable"),
    ]:
        capsys.readouterr()
        assert main([*argv, "--simulator", bad, "--out", str(tmp_path / "x.json")]) == 2
        assert needle in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()
    # the report reads it
    assert main(["report", str(run), "--out", str(tmp_path / "rep")]) in (0, 1)
    model = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert "dynamics-private-parameter" in json.dumps(model["attacks"])


def test_release_charges_first_and_refuses_bad_input(tmp_path) -> None:
    mech = Laplace(epsilon=1.0, clip=1.0)
    priv = {"name": "force", "values": [1.0, 2.0]}
    with pytest.raises(InvalidParameterError, match="at least two distinct"):
        open_run(tmp_path / "a", system="s", mechanism=mech, private={"name": "f", "values": [1]})
    with pytest.raises(InvalidParameterError, match="value must be a real number, got True"):
        bad = {"name": "f", "values": [1, True]}
        open_run(tmp_path / "a", system="s", mechanism=mech, private=bad)
    for sub in (5e-324, -1e-310):  # a subnormal candidate, as the trainers' (session 57)
        with pytest.raises(InvalidParameterError, match=r"\|value\| must be 0 or >= 2.2"):
            open_run(
                tmp_path / "a",
                system="s",
                mechanism=mech,
                private={"name": "f", "values": [sub, 1]},
            )
    assert not (tmp_path / "a").exists()
    run = open_run(tmp_path / "r", system="s", mechanism=mech, private=priv, budget=1.5)
    run.release(np.ones(3), agent=0, theta=np.zeros(3), secret=1.0)
    with pytest.raises(BudgetExceeded):  # the second report would spend 2.0 > 1.5
        run.release(np.ones(3), agent=0, theta=np.zeros(3), secret=1.0)
    with pytest.raises(InvalidParameterError, match="secret 3.0 is not one of"):
        run.release(np.ones(3), agent=1, theta=np.zeros(3), secret=3.0)
    with pytest.raises(InvalidParameterError, match="agent must be an integer"):
        run.release(np.ones(3), agent="x", theta=np.zeros(3))
    path = run.close()
    tr = np.load(path / "transcript.npz")
    assert tr["report"].shape == (1, 3)  # the refused report was never recorded
    assert not math.isnan(float(tr["report"][0, 0]))
    with pytest.raises(RunDirectoryError):  # evidence is never appended to
        open_run(path, system="s", mechanism=mech)


def test_a_signal_while_the_run_closes_still_marks_it_interrupted(tmp_path) -> None:
    """Session 58 probe: ``Run.close`` set its closed flag before writing, so a Ctrl-C whose
    KeyboardInterrupt came while it wrote the transcript (the ``with`` block's normal end) left
    the run with no manifest ("running", as after SIGKILL): ``__exit__``'s close("interrupted")
    returned at once. The signal is injected into the transcript's write."""
    from ldp_audit.rundir import read_config, verify_run

    mech = Laplace(epsilon=1.0, clip=1.0)
    with (
        pytest.raises(KeyboardInterrupt),
        open_run(tmp_path / "r", system="s", mechanism=mech) as run,
    ):
        run.release(np.ones(2), agent=0, theta=np.zeros(2))

        def write_npz(name, arrays):
            raise KeyboardInterrupt

        run.writer.write_npz = write_npz
    res = verify_run(tmp_path / "r")
    assert res.ok and res.status == "interrupted", res.problems
    assert read_config(tmp_path / "r")["status"] == "interrupted"


def _arm_means(thetas, values, rng, alpha):  # a bandit's 3 noisy arm means; theta: 1 number
    g = rng.normal(0.0, 0.1, (len(values), 3))
    g[np.arange(len(values)), np.asarray(values, dtype=int)] += 1.0
    return g, np.zeros(len(values))


def test_the_attack_takes_reports_of_another_size_than_theta(tmp_path) -> None:
    """A loop's report need not have theta's size (a bandit's arm means, a Q row): the attack
    refused every such simulator, 'expected (B, 1)', before session 52; a simulator returning
    another size than the reports is still refused by name."""
    from ldp_audit.attacks.dynamics_run_dir import private_param_dynamics
    from ldp_audit.errors import UserCodeError

    priv = {"name": "best", "values": [0, 1, 2]}
    mech = Laplace(epsilon=30.0, clip=3.0)
    rng = np.random.default_rng(5)
    with open_run(tmp_path / "r", system="bandit", mechanism=mech, private=priv) as run:
        for agent in range(12):
            best = agent % 3
            g, _ = _arm_means([0.0], [best], rng, 0.0)
            run.release(g[0], agent=agent, theta=[0.0], secret=best)
    res = private_param_dynamics(tmp_path / "r", simulator=_arm_means, n_shadow=20, seed=1)
    assert res.n == 12 and res.k == 3
    # Laplace scale 2 * 3 / 30 = 0.2 on an L1 gap of about 2 between candidates: a report is
    # misread with probability about e^-5 < 0.01, so 4 or more of 12 wrong has probability
    # < C(12, 4) 0.01^4 < 1e-5 (a guess of 1/3 gets 9 of 12 with probability < 0.005)
    assert res.correct >= 9

    def wrong(thetas, values, rng, alpha):
        return np.zeros((len(values), 2)), np.zeros(len(values))

    with pytest.raises(UserCodeError, match=r"shape \(\d+, 2\), expected \(\d+, 3\)"):
        private_param_dynamics(tmp_path / "r", simulator=wrong, n_shadow=2, seed=1)


def _blind(thetas, values, rng, alpha):  # a simulator that learnt nothing: every report alike
    return np.ones((len(values), 2)), np.zeros(len(values))


def test_unequally_common_secrets_raise_the_attack_ceiling(tmp_path) -> None:
    """An own loop draws its agents' secrets as it likes. With 90 % of 200 agents holding one
    value, an attack that learnt nothing (every likelihood tied, the first candidate guessed)
    read 0.900 [0.850, 0.938] against the ceiling e^0.1 / (e^0.1 + 1) = 0.525: "VIOLATION",
    epsilon >= 1.73 (session 57 probe). The ceiling e^eps / (e^eps + k - 1) holds for equally
    likely secrets; the attack's ceiling is now the guess-rule optimum at the agents' shares."""
    from ldp_audit.attacks.dynamics_run_dir import private_param_dynamics

    priv = {"name": "scale", "values": [0.5, 2.0]}
    with open_run(tmp_path / "r", system="skew", mechanism=Laplace(epsilon=0.1, clip=1.0),
                  private=priv) as run:  # fmt: skip
        for agent in range(20):  # 18 of 20 hold 0.5: before, 0.900 [0.683, 0.988] > 0.525
            run.release([0.0, 0.0], agent=agent, theta=[0.0], secret=0.5 if agent % 10 else 2.0)
    res = private_param_dynamics(tmp_path / "r", simulator=_blind, n_shadow=20, seed=1)
    assert res.correct == 18 and not res.violation and res.ceiling == pytest.approx(0.9)
    assert res.extra["shares"] == [0.9, 0.1] and res.chance == 0.9 and res.advantage == 0.0
    assert res.ceiling > accuracy_ceiling(0.1, 2)  # 0.525: equally likely secrets
