"""PGC-A3C as a Flower app (training/flower/pgc_app.py) in Flower's simulation engine.

Skipped with a message when Flower is not installed (``pip install 'ldp-audit[flower]'``).
Each simulation is a ``flwr run`` on its own local simulation SuperLink (Ray underneath); the
file's two start together, with the other Flower files' runs (tests/flower_runs.py). On the
loaded 2-core machine (2026-12-06, load average about 16) the file took about 130 s with its
runs one after the other, 61 s with its two together.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from ldp_audit.errors import InvalidParameterError

pytest.importorskip("flwr", reason="Flower not installed: pip install 'ldp-audit[flower]'")

from ldp_audit.training.flower import pgc_app as F  # noqa: E402
from ldp_audit.training.pgc_a3c.config import PgcA3cConfig  # noqa: E402
from tests.flower_runs import AGENTS as SECRETS  # noqa: E402
from tests.flower_runs import PGC_MAIN  # noqa: E402

AGENTS = [F.AgentSecrets(*a) for a in SECRETS]


@pytest.fixture(scope="module")
def flower_run(flower_runs):
    """tests/flower_runs.py's "pgc-main" run (PGC_MAIN: laplace, epsilon 6 over 3 rounds)."""
    base, run = flower_runs["pgc-main"].result()
    return base, run, PgcA3cConfig(**PGC_MAIN)


def test_simulation_runs_with_flwr_run_not_the_deprecated_run_simulation(flower_run):
    """The simulation is a `flwr run` on a local simulation SuperLink: Flower's log shows the
    run and never the notice of its deprecated flwr.simulation.run_simulation (issue 31)."""
    base, _, _ = flower_run
    log = (base / "log").read_text()
    assert "Starting Flower SuperLink" in log and "Successfully started run" in log
    assert "run_simulation` function is deprecated" not in log
    assert "deprecated" not in log.replace("deprecated alias", "").lower()


def test_eq22_matches_engine_aggregator():
    """The server's eq. 22 (the Aggregator's compiled step on each report array, agg_one) is bit
    for bit the engine's Aggregator receiving the same reports as sealed releases."""
    from ldp_audit.accountant import Accountant
    from ldp_audit.mechanisms import NoPrivacy
    from ldp_audit.release import release
    from ldp_audit.training.pgc_a3c._kernels import agg_one
    from ldp_audit.training.pgc_a3c.aggregator import Aggregator
    from ldp_audit.training.pgc_a3c.model import DIM

    rng = np.random.default_rng(0)
    theta0 = rng.standard_normal(DIM)
    reports = rng.standard_normal((7, DIM)) * 0.01
    ref = Aggregator(theta0[None, :], 0.5, 3)
    acc = Accountant(ledger=":memory:")
    for i, y in enumerate(reports):
        rel = release(
            y[None, :],
            mechanism=NoPrivacy(),
            accountant=acc,
            agent_ids=[f"0/{i}"],
            rng=rng,
            meta={"trial": np.zeros(1, dtype=np.int64)},
        )
        ref.receive(rel)
    ours = Aggregator(theta0[None, :], 0.5, 3)
    for y in reports:
        agg_one(*ours.state, 0, y)
    assert ours.theta.tobytes() == ref.theta.tobytes()
    assert ours.version[0] == 2 and ours.count[0] == 1


def test_transcript_layout_and_replay(flower_run):
    from ldp_audit.rundir import RunDir, read_config, read_manifest, read_npz, verify_manifest

    _, run, cfg = flower_run
    assert read_manifest(run)["status"] == "complete"
    assert verify_manifest(run)["ok"]
    conf = read_config(run)
    assert conf["algorithm"] == "pgc-a3c"
    assert conf["config"]["rounds"] == 3 and conf["config"]["n_agents"] == 3
    assert "agent_gravities" not in conf["config"] or conf["config"]["agent_gravities"] is None
    tr = RunDir(run).transcript()
    assert tr["report"].shape == (9, 112) and tr["thetas"].shape == (3, 112)
    np.testing.assert_array_equal(tr["submission"], np.arange(9))
    np.testing.assert_array_equal(tr["round"], np.repeat(np.arange(3), 3))
    np.testing.assert_array_equal(tr["worker"], np.tile(np.arange(3), 3))
    np.testing.assert_array_equal(tr["theta_index"], tr["round"])
    assert sorted(set(tr["agent"].tolist())) == [0, 1, 2]
    # Laplace at eps/T = 2 with C = 0.01: reports are noisy (scale C/eps' = 0.005 per coordinate)
    assert np.all(np.std(tr["report"], axis=1) > 1e-3)
    # replay eq. 22 over the recorded reports: every broadcast theta and the final model
    from ldp_audit.training.pgc_a3c._kernels import agg_one
    from ldp_audit.training.pgc_a3c.aggregator import Aggregator

    agg = Aggregator(tr["thetas"][:1], cfg.eta, 2)
    for r in range(3):
        assert agg.theta[0].tobytes() == tr["thetas"][r].tobytes()
        for y in tr["report"][tr["round"] == r]:
            agg_one(*agg.state, 0, y)
    assert agg.theta.tobytes() == read_npz(run, "model.npz")["theta"].tobytes()
    g = RunDir(run).secrets("gravity", for_scoring=True)["gravity"]
    np.testing.assert_array_equal(g, np.array([a.gravity for a in AGENTS])[tr["agent"]])


def test_summary_says_where_the_run_is_and_what_it_spent(flower_run):
    base, run, _ = flower_run
    from ldp_audit.training.flower.server import summary

    text = summary(run, base / "ledgers")
    assert f"Flower run {run} (complete): 3 agents submitted 9 reports over 3 rounds" in text
    assert "epsilon 2.0 per report, 6.0 per agent" in text
    assert "spent (server's ledger): 6.0" in text and f"ldp-audit report {run}" in text


def test_each_agent_charged_its_own_ledger(flower_run):
    from ldp_audit.accountant import Accountant, Ledger

    base, run, _ = flower_run
    server = Accountant(ledger=Ledger(str(run / "ledger.sqlite"))).spent_all(delta=0.0)
    assert server == pytest.approx({"0/0": 6.0, "0/1": 6.0, "0/2": 6.0})
    for k in range(3):
        own = Accountant(ledger=Ledger(str(base / "ledgers" / f"agent-{k}.sqlite")))
        assert own.agents() == [f"0/{k}"]  # an agent's ledger holds only its own charges
        assert own.spent(f"0/{k}") == pytest.approx(6.0)  # 3 releases at eps/T = 2


def test_attack_and_report_read_the_flower_run(flower_run, tmp_path, capsys):
    from ldp_audit.cli import main

    _, run, _ = flower_run
    out = tmp_path / "attack.json"
    code = main(["attack", "dynamics", "--run-dir", str(run), "--shadow", "30", "--out", str(out)])
    assert code in (0, 1)
    res = json.loads(out.read_text())
    assert res["n"] == 3 and res["reports_per_agent"] == 3
    assert math.isclose(float(res["epsilon"]), 2.0)
    code = main(["report", str(run), "--out", str(tmp_path / "report")])
    assert code in (0, 1)
    rep = json.loads((tmp_path / "report" / "report.json").read_text())
    assert rep["verdict"]["status"] in ("violation", "consistent", "partially verified")
    capsys.readouterr()


def test_budget_refusal_releases_nothing(flower_runs):
    """An agent whose own ledger would exceed its budget sends an error, never a report
    (tests/flower_runs.py's PGC_BUDGET: prs, epsilon 6 over 3 rounds, a budget of 4.5)."""
    from ldp_audit.accountant import Accountant, Ledger
    from ldp_audit.rundir import RunDir

    base, run = flower_runs["pgc-budget"].result()
    tr = RunDir(run).transcript()
    assert tr["report"].shape[0] == 4  # rounds 0 and 1 of both agents; round 2 refused
    assert set(tr["round"].tolist()) == {0, 1}
    rejected = RunDir(run).metrics()["rejected"]
    assert len(rejected) == 2 and all("BudgetExceeded" in r["reason"] for r in rejected)
    for k in range(2):
        own = Accountant(ledger=Ledger(str(base / "ledgers" / f"agent-{k}.sqlite")))
        assert own.spent(f"0/{k}") == pytest.approx(4.0)  # never past 4.5


class _FakeContent(dict):
    array_records: dict = {}
    config_records: dict = {}


def test_reply_without_release_mod_is_refused():
    """The check the ServerApp runs on every reply (its keys "report" and "release")."""
    from ldp_audit.training.flower.protocol import sealed_report

    cfg = F._pgc_config(PgcA3cConfig(mechanism="laplace", epsilon=1.0, rounds=1), 1)
    mech, eps = cfg.make_mechanism().to_config(), cfg.epsilon_per_submission
    with pytest.raises(InvalidParameterError, match="no sealed report"):
        sealed_report(_FakeContent(result={"score": 1.0}), "report", "release", mech, eps, 112)


def test_a_rerun_of_a_seeded_agent_draws_fresh_noise(tmp_path):
    """The same agent-seed and submission on the same ledger (a rerun) drew the same noise, so
    two reports of one submission differed by the gradients' exact difference; the ledger's row
    count now keys the noise stream (the mod's own release, outside Flower's engine)."""
    from types import SimpleNamespace

    cfg = F._pgc_config(PgcA3cConfig(mechanism="laplace", epsilon=4.0, rounds=2), 1)
    nc = {"partition-id": 0, "gravity": 9.8, "agent-seed": 5, "ledger-dir": str(tmp_path)}
    ctx = SimpleNamespace(node_config=nc, run_config={})
    raw = {"grad": np.zeros((1, 4)), "config": cfg, "agent": 0, "submission": 0}
    a, b = (np.asarray(F.LdpReleaseMod()._release(raw, ctx).values) for _ in range(2))
    assert np.all(a != b)


def _in_process_grid(tmp_path, monkeypatch, nodes):
    """A Grid that answers in this process: node id -> partition-id, every agent at gravity 9.8
    through the LdpReleaseMod and the ClientApp's train function."""
    from types import SimpleNamespace

    from flwr.supercore.task_identity import TaskIdentity

    for key in ("_run_id", "_node_id", "_task_id"):  # what Flower sets in its processes
        monkeypatch.setattr(TaskIdentity, key, 1)

    class Grid:
        def get_node_ids(self):
            return list(nodes)

        def send_and_receive(self, msgs, timeout=None):
            def reply(m):
                nc = {
                    "partition-id": nodes[m.metadata.dst_node_id],
                    "gravity": 9.8,
                    "agent-seed": 3,
                    "ledger-dir": str(tmp_path / f"led{m.metadata.dst_node_id}"),
                }
                ctx = SimpleNamespace(node_config=nc, run_config={}, node_id=m.metadata.dst_node_id)
                return F.LdpReleaseMod()(m, ctx, F._train)

            return [reply(m) for m in msgs]

    return Grid()


@pytest.mark.parametrize(("gt", "match"), [
    ("9.7,x", "'scoring-gravities' must be a comma list of numbers, got '9.7,x'"),
    (",9.7", "'scoring-gravities' must be a comma list of numbers, got ',9.7'"),
    ("9.7,nan", "'scoring-gravities' item must be finite"),
    ("9.7,-1", "'scoring-gravities' item must be finite, > 0, got -1.0"),
    (["9.7", 9.8], "'scoring-gravities' item must be a real number, got '9.7'"),
    ([9.7, True], "'scoring-gravities' item must be a real number, got True"),
    ("9.7", r"one gravity per agent \(2\), got '9.7'"),
])  # fmt: skip
def test_server_refuses_bad_scoring_gravities_before_the_run(tmp_path, monkeypatch, gt, match):
    """The ServerApp read run config 'scoring-gravities' with float() of each item: 'x' raised
    a bare ValueError in the ServerApp, ',9.7' one for the empty item, and a wrong count would
    index the agents' gravities wrongly; now InvalidParameterError naming the key, before the
    run folder is written."""
    from types import SimpleNamespace

    cfg = PgcA3cConfig(mechanism="laplace", epsilon=4.0, rounds=1)
    grid = _in_process_grid(tmp_path, monkeypatch, {5: 0, 6: 1})
    rc = {"pgc-config": json.dumps(cfg.to_dict()), "run-dir": str(tmp_path / "run")}
    with pytest.raises(InvalidParameterError, match=match):
        F._run_server(grid, SimpleNamespace(run_config={**rc, "scoring-gravities": gt}))
    assert not (tmp_path / "run").exists()


def test_server_records_one_report_per_agent_and_round(tmp_path, monkeypatch):
    """Two SuperNodes with one partition-id were both recorded (and charged) as that agent; the
    ServerApp's main on an in-process grid now refuses the second, naming it. A bad run config
    seed is refused before any round (was int() of it)."""
    from types import SimpleNamespace

    cfg = PgcA3cConfig(mechanism="laplace", epsilon=4.0, rounds=2)
    # node id -> partition-id: nodes 5 and 6 claim agent 0
    grid = _in_process_grid(tmp_path, monkeypatch, {5: 0, 6: 0, 7: 1})
    rc = {"pgc-config": json.dumps(cfg.to_dict()), "run-dir": str(tmp_path / "run")}
    with pytest.raises(InvalidParameterError, match="'seed' must be an integer >= 0, got -1"):
        F._run_server(grid, SimpleNamespace(run_config={**rc, "seed": -1}))
    run = F._run_server(grid, SimpleNamespace(run_config=rc))
    from ldp_audit.rundir import RunDir

    m = RunDir(run).metrics()
    assert [(x["round"], x["node"], x["reason"]) for x in m["rejected"]] == [
        (r, 6, f"agent 0 already replied in round {r}") for r in range(2)
    ]
    assert RunDir(run).transcript()["agent"].tolist() == [0, 1, 0, 1]


def test_server_refuses_a_reply_with_bad_fields_not_ends_the_run(tmp_path, monkeypatch):
    """A client's reply with its agent id a str, its submission a float, no 'result' record or
    a list as its score raised ValueError / KeyError / TypeError out of the ServerApp's round
    (one client ended the run), or was coerced ('1' as agent 1); a bad run config 'num-agents'
    was int()-coerced. Each reply is now refused and named; the others are recorded."""
    from types import SimpleNamespace

    from flwr.app import ConfigRecord, MetricRecord

    from ldp_audit.rundir import RunDir

    cfg = PgcA3cConfig(mechanism="laplace", epsilon=4.0, rounds=1)
    grid = _in_process_grid(tmp_path, monkeypatch, {n: n - 1 for n in range(1, 6)})
    honest = grid.send_and_receive

    def tamper(msgs, timeout=None):
        out = honest(msgs, timeout)
        rel = dict(out[0].content["release"])
        out[0].content["release"] = ConfigRecord({**rel, "agent": "0"})
        out[1].content["result"] = MetricRecord({"score": 1.0, "submission": 1.0})
        del out[2].content["result"]
        out[3].content["result"] = MetricRecord({"score": [1.0, 2.0], "submission": 3})
        return out

    grid.send_and_receive = tamper
    rc = {"pgc-config": json.dumps(cfg.to_dict()), "run-dir": str(tmp_path / "run")}
    with pytest.raises(InvalidParameterError, match="'num-agents' must be an integer >= 0"):
        F._run_server(grid, SimpleNamespace(run_config={**rc, "num-agents": "2"}))
    run = F._run_server(grid, SimpleNamespace(run_config=rc))
    reasons = [x["reason"] for x in RunDir(run).metrics()["rejected"]]
    assert reasons == [
        "reply's agent id must be an integer >= 0, got '0'",
        "reply's submission must be an integer >= 0, got 1.0",
        "reply has no MetricRecord 'result'",
        "reply's score must be a real number, got [1.0, 2.0] (list)",
    ]
    assert RunDir(run).transcript()["agent"].tolist() == [4]


@pytest.mark.parametrize("aggregator", ["adam", "rmsprop"])
def test_server_steps_with_the_configured_aggregator(tmp_path, monkeypatch, aggregator):
    """The ServerApp stepped plain SGD at eta whatever the config's ``aggregator`` said (an Adam
    run was silently an SGD run); now its model is the engine's Aggregator with the config's
    aggregator and step size replaying the recorded reports, and differs from SGD's."""
    from types import SimpleNamespace

    from ldp_audit.rundir import RunDir, read_npz
    from ldp_audit.training.pgc_a3c._kernels import agg_one
    from ldp_audit.training.pgc_a3c.aggregator import Aggregator

    cfg = PgcA3cConfig(mechanism="laplace", epsilon=4.0, rounds=2, aggregator=aggregator)
    grid = _in_process_grid(tmp_path, monkeypatch, {5: 0, 7: 1})
    rc = {"pgc-config": json.dumps(cfg.to_dict()), "run-dir": str(tmp_path / "run")}
    run = F._run_server(grid, SimpleNamespace(run_config=rc))
    tr = RunDir(run).transcript()
    final = read_npz(run, "model.npz")["theta"]

    def replay(lr, optimizer):
        agg = Aggregator(tr["thetas"][:1], lr, cfg.effective_buffer_size, optimizer=optimizer)
        for y in tr["report"]:
            agg_one(*agg.state, 0, y)
        return agg.theta

    assert final.tobytes() == replay(cfg.effective_aggregator_lr, aggregator).tobytes()
    assert final.tobytes() != replay(cfg.eta, "sgd").tobytes()


def test_bad_inputs_refused_before_work(tmp_path):
    cfg = PgcA3cConfig(mechanism="laplace", epsilon=1.0, rounds=2)
    with pytest.raises(InvalidParameterError, match="gravity must be finite, > 0, got -1.0"):
        F.AgentSecrets(-1.0)
    with pytest.raises(InvalidParameterError, match="gravity must be a real number"):
        F.AgentSecrets(True)
    with pytest.raises(InvalidParameterError, match="agents must be a non-empty list"):
        F.run_simulation(cfg, tmp_path / "r", agents=[], ledger_dir=tmp_path / "l")
    canary = PgcA3cConfig(mechanism="laplace", epsilon=1.0, agent_gravities=(9.7,))
    with pytest.raises(InvalidParameterError, match="agent_gravities must be None"):
        F.run_simulation(canary, tmp_path / "r", agents=AGENTS, ledger_dir=tmp_path / "l")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("evidence")
    from ldp_audit.errors import RunDirectoryError

    with pytest.raises(RunDirectoryError):
        F.run_simulation(cfg, tmp_path / "full", agents=AGENTS, ledger_dir=tmp_path / "l")
    # were coerced (int(), bool()) or refused only inside the started Flower run
    with pytest.raises(InvalidParameterError, match="seed must be an integer >= 0, got -1"):
        F.AgentSecrets(9.8, seed=-1)
    for kw, match in (({"seed": -1}, "seed must be an integer >= 0"), ({"seed": 1.5}, "got 1.5"),
                      ({"overwrite": "no"}, "overwrite must be True or False")):  # fmt: skip
        with pytest.raises(InvalidParameterError, match=match):
            F.run_simulation(cfg, tmp_path / "r", agents=AGENTS, ledger_dir=tmp_path / "l", **kw)
    assert not (tmp_path / "l").exists() and not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    ("key", "value"),
    [("partition-id", "1"), ("partition-id", True), ("partition-id", 1.0), ("gravity", "9.8"),
     ("gravity", True), ("agent-seed", "5"), ("agent-seed", True), ("agent-seed", 5.0),
     ("ledger-dir", 5), ("ledger-dir", "")],
)  # fmt: skip
def test_agent_node_config_types_checked_not_coerced(tmp_path, key, value):
    """The agent's node config was int()/float()/str()-coerced ('1' was agent 1, True gravity
    1.0, ledger-dir 5 folder '5'); now refused naming the key and the value, before any
    episode or charge."""
    from types import SimpleNamespace

    nc = {"partition-id": 0, "gravity": 9.8, "agent-seed": 5, "ledger-dir": str(tmp_path / "l")}
    ctx = SimpleNamespace(node_config={**nc, key: value}, run_config={})
    with pytest.raises(InvalidParameterError, match=f"node config '{key}'.*got {value!r}"):
        F._agent_state(ctx)
    assert F._agent_state(SimpleNamespace(node_config=nc, run_config={}))[:2] == (
        0,
        F.AgentSecrets(9.8, 5),
    )


def test_module_cli_usage_errors(tmp_path, capsys):
    assert F.main(["--out", str(tmp_path / "r"), "--epsilon", "-1"]) == 2
    assert "epsilon must be" in capsys.readouterr().err
    assert F.main(["--out", str(tmp_path / "r"), "--gravities", "9.7,x"]) == 2
    assert "--gravities must be a comma list" in capsys.readouterr().err
    assert F.main(["--out", str(tmp_path / "r"), "--gravities", "9.7,-2"]) == 2
    assert "gravity must be finite, > 0, got -2.0" in capsys.readouterr().err
    # an empty item was dropped: ',9.7' ran one agent
    assert F.main(["--out", str(tmp_path / "r"), "--gravities", ",9.7"]) == 2
    assert "--gravities must be a comma list of numbers, got ',9.7'" in capsys.readouterr().err
    # --mechanism none is epsilon = inf: a finite --epsilon was silently replaced
    assert F.main(["--out", str(tmp_path / "r"), "--mechanism", "none", "--epsilon", "1"]) == 2
    err = capsys.readouterr().err
    assert "--epsilon must be omitted or inf with --mechanism none, got 1.0" in err
    assert not (tmp_path / "r").exists()
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "config.json").write_text("{}")  # e.g. an interrupted run
    assert F.main(["--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err  # it offered --resume, which this app does not have
    assert "already exists and is not empty" in err and "--resume" not in err


@pytest.mark.parametrize(("app", "args"), [
    ("pgc_app", ["--gravities", "9.7,9.9"]),
    # the same run_command / run_app_project path as pgc_app's: 11 s, so under `slow`
    pytest.param("digits", ["--clients", "2"], marks=pytest.mark.slow),
])  # fmt: skip
def test_sigterm_stops_the_superlink_it_started(request, tmp_path, app, args):
    """SIGTERM to `python -m ldp_audit.training.flower.pgc_app` (or `.digits`) killed it by the
    signal (status -15, no line) and left the flower-superlink it had started (in its own
    session) running, with its temporary folder: found by signalling it once the run's
    config.json appeared. Now it unwinds like Ctrl-C: exit 143 with one line, the SuperLink
    stopped, its folder removed; and (session 58) every process below it at the signal has
    ended: flower-superexec and flwr-simulation, in sessions of their own, outlived the command
    (1 left with the old stop). (pgc_app's run is tests/flower_runs.py's "sigterm-pgc",
    started ahead with the file's other Flower runs: it waited 20-30 s here.)"""
    from tests.flower_runs import sigterm_run

    if app == "pgc_app":
        code, err, folders, processes = request.getfixturevalue("flower_runs")[
            "sigterm-pgc"
        ].result()
    else:
        code, err, folders, processes = sigterm_run(tmp_path, app, args)
    assert code == 143 and f"flower.{app}: terminated" in err, (code, err)
    assert not folders and not processes, (folders, processes)
