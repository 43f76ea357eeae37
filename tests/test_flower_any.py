"""Flower for any app (training/flower/client.py, server.py, run.py, training/flower/digits.py).

The fast tests drive the client's release and the server's recorder in-process (the same
functions ``LdpReleaseMod`` and ``LdpStrategy`` call, without Flower's engine); a ``slow`` test
runs the example app with ``flwr run`` on a local simulation SuperLink (Ray underneath: about 7 s
of CPU in this process tree, 50-80 s wall on the 2-core machine, most of it starting Ray; it
starts in a subprocess with the file, so the in-process tests run meanwhile; the default suite's
``flwr run`` is tests/test_flower.py's), and another ``slow`` one shows the attack recovering the
private parameter when epsilon is huge. Skipped with a message when Flower is not installed.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ldp_audit.errors import BudgetExceeded, InvalidParameterError

pytest.importorskip("flwr", reason="Flower not installed: pip install 'ldp-audit[flower]'")

from ldp_audit.mechanisms import Laplace, from_config  # noqa: E402
from ldp_audit.training.flower import digits as D  # noqa: E402
from ldp_audit.training.flower.client import (  # noqa: E402
    ClientSettings,
    LdpReleaseMod,
    release_reply,
    sealed_content,
)
from ldp_audit.training.flower.protocol import flatten, unflatten  # noqa: E402
from ldp_audit.training.flower.server import FlowerRecorder, summary  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MECH = {"name": "laplace", "epsilon": 2.0, "clip": 2.0}


def _settings(ledgers: Path, k: int, *, budget: float = 1e9, mech=None, **run) -> ClientSettings:
    rc = {"ldp-mechanism": json.dumps(mech or MECH), "ldp-budget": budget}
    rc["ldp-ledger-dir"] = str(ledgers)
    rc.update(run)
    return ClientSettings.from_configs(rc, {"partition-id": k, "agent-seed": 100 + k})


def _spent(path: Path) -> dict[str, float]:
    from ldp_audit.accountant import Accountant, Ledger

    acc = Accountant(ledger=Ledger(str(path)))
    try:
        return acc.spent_all(delta=0.0)
    finally:
        acc.close()


def federate(run_dir, ledgers, *, clients, rounds, mech, budget=1e9, seed=0):
    """An in-process federation: each client trains, releases (release_reply), builds its
    reply (sealed_content); the server checks, records and averages."""
    mech = from_config(mech)
    rec = FlowerRecorder(
        run_dir,
        system="digits-fedavg",
        mechanism=mech,
        private=D.PRIVATE,
        truth=lambda a: D.favourite_digit(a, seed),
        budget=budget,
    )
    arrays = D.initial_arrays()
    for r in range(1, rounds + 1):
        theta, idx, got = flatten(arrays), rec.broadcast(arrays), []
        for k in range(clients):
            st = _settings(ledgers, k, budget=budget, mech=mech.to_config())
            rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(k, r)))
            x, y = D.sample_data(D.favourite_digit(k, seed), 60, rng)
            w, b = D.local_train(*arrays, x, y, 5, 0.5)
            out, rep, rel = release_reply(arrays, [w, b], st, r)
            agent, yv = rec.check(sealed_content(st, out, rep, rel, {}, r), theta, "arrays")
            rec.accept(r, agent, yv, idx)
            got.append(flatten(out))
        arrays = unflatten(np.mean(got, axis=0), arrays)
        rec.model = flatten(arrays)
    return rec.close()


# ----------------------------------------------------------------------------------------------
# Client side
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("run", "node", "match"),
    [
        ({"ldp-mechanism": None}, {"partition-id": 0}, "must give 'ldp-mechanism'"),
        ({"ldp-mechanism": "{laplace"}, {"partition-id": 0}, "mechanism config as JSON"),
        ({"ldp-budget": 0}, {"partition-id": 0}, "'ldp-budget' must be a finite number > 0"),
        ({"ldp-budget": True}, {"partition-id": 0}, "'ldp-budget' must be a finite number > 0"),
        ({"ldp-budget": "inf"}, {"partition-id": 0}, "'ldp-budget' must be a finite number > 0"),
        ({"ldp-release": "gradient"}, {"partition-id": 0}, "'ldp-release' must be one of"),
        ({}, {}, "'partition-id'"),
        ({"ldp-ledger-dir": "rel/dir"}, {"partition-id": 0}, "must be an absolute path"),
        ({"ldp-ledger-dir": ""}, {"partition-id": 0}, "client 0's ledger .* got ''"),
        ({}, {"partition-id": 0, "ldp-budget": 3.0}, "pinned to 3.0: refused"),
        (
            {},
            {"partition-id": 0, "ldp-mechanism": json.dumps({**MECH, "epsilon": 1.0})},
            "this node is pinned to",
        ),
        # the run config is the server's: unpinnable, it could have a private metric sent in clear
        (
            {"ldp-public-metrics": "train-loss,secret-mean"},
            {"partition-id": 0, "ldp-public-metrics": "train-loss"},
            "ldp-public-metrics = 'train-loss,secret-mean', but this node is pinned to",
        ),
        ({"ldp-public-metrics": 1}, {"partition-id": 0}, "'ldp-public-metrics' must be a str"),
        # a negative seed passed here and every release then failed as "the release failed
        # (ValueError; its message may quote private values ...)", naming no setting (session 57)
        ({}, {"partition-id": 0, "agent-seed": -1}, "'agent-seed' must be an integer >= 0"),
    ],
)
def test_client_settings_refuse_bad_or_unpinned_config(tmp_path, run, node, match):
    rc = {"ldp-mechanism": json.dumps(MECH), "ldp-budget": 6.0, "ldp-ledger-dir": str(tmp_path)}
    rc.update(run)
    rc = {k: v for k, v in rc.items() if v is not None}  # None: the key is absent
    with pytest.raises(InvalidParameterError, match=match):
        ClientSettings.from_configs(rc, node)


def test_settings_from_node_config_override_ledger_and_agent(tmp_path):
    st = ClientSettings.from_configs(
        {"ldp-mechanism": json.dumps(MECH), "ldp-budget": 6, "ldp-ledger-dir": "/elsewhere"},
        {"partition-id": 3, "agent-id": 7, "ledger-dir": str(tmp_path), "ldp-budget": 6.0},
    )
    assert st.agent == 7 and st.ledger == tmp_path / "client-7.sqlite"
    assert st.mechanism == Laplace(epsilon=2.0, clip=2.0) and st.budget == 6.0
    rc = {"ldp-mechanism": json.dumps(MECH), "ldp-budget": 6, "ldp-public-metrics": "b, a"}
    nc = {"partition-id": 0, "ledger-dir": str(tmp_path), "ldp-public-metrics": "a,b"}
    st = ClientSettings.from_configs(rc, nc)
    assert st.public_metrics == ("a", "b")  # the same names, pinned


def test_release_is_charged_before_randomising_and_the_budget_stops_it(tmp_path, monkeypatch):
    """The ledger row exists even when the mechanism then fails (charged first); a budget of 5
    at epsilon 2 allows two releases and refuses the third without a new ledger row."""
    st = _settings(tmp_path, 0, budget=5.0)
    model = D.initial_arrays()
    local = [a + 0.01 for a in model]
    release_reply(model, local, st, 1)
    release_reply(model, local, st, 2)
    with pytest.raises(BudgetExceeded):
        release_reply(model, local, st, 3)
    assert _spent(st.ledger) == pytest.approx({"0": 4.0})

    st1 = _settings(tmp_path, 1, budget=5.0)

    def boom(self, x, rng):
        raise RuntimeError("the mechanism failed after the charge")

    monkeypatch.setattr(Laplace, "privatize", boom)
    with pytest.raises(InvalidParameterError, match=r"release failed \(RuntimeError;") as exc:
        release_reply(model, local, st1, 1)
    assert "after the charge" in str(exc.value.__cause__)  # kept on the client, not sent
    assert _spent(st1.ledger) == pytest.approx({"1": 2.0})  # charged although nothing left


def test_a_seeded_client_never_draws_the_same_noise_twice(tmp_path):
    """A rerun with the same agent-seed and ledger (or a strategy that sends no server-round:
    round 0 every time) drew the same noise again, so two reports' difference was the two
    updates' exact difference; the ledger's row count now keys the stream."""
    st, model, noise = _settings(tmp_path, 0), [np.zeros(6)], []
    for r, x in ((1, 0.1), (1, -0.2), (0, 0.3), (0, 0.0)):
        _, report, _ = release_reply(model, [np.full(6, x)], st, r)
        noise.append(report - st.mechanism.clip_rows(np.full((1, 6), x))[0])
    assert all(not np.allclose(a, b, atol=1e-6) for i, a in enumerate(noise) for b in noise[:i])
    st2 = _settings(tmp_path / "other", 0)  # the same seed and round on a fresh ledger: replayable
    _, again, _ = release_reply(model, [np.full(6, 0.1)], st2, 1)
    np.testing.assert_allclose(again - st.mechanism.clip_rows(np.full((1, 6), 0.1))[0], noise[0])


def test_only_the_sealed_report_and_its_function_leave(tmp_path):
    """The reply holds exactly the arrays rebuilt from the noisy report, the report, the release
    description and num-examples = 1 (+ declared public metrics); the report is the clipped
    update plus Laplace(C/eps) noise: its mean absolute deviation over d = 650 coordinates is
    within 8 standard deviations of C/eps (false failure < 1e-14)."""
    st = _settings(tmp_path, 0, **{"ldp-public-metrics": "round-time"})
    model = [np.full((64, 10), 0.5, dtype=np.float32), np.zeros(10, dtype=np.float32)]
    rng = np.random.default_rng(0)
    local = [m + rng.normal(0, 0.01, m.shape).astype(np.float32) for m in model]
    arrays, report, rel = release_reply(model, local, st, 1)
    content = sealed_content(st, arrays, report, rel, {"round-time": 1.5}, 1)
    assert sorted(content.keys()) == ["arrays", "ldp-release", "ldp-report", "metrics"]
    assert dict(content["metrics"]) == {"num-examples": 1, "round-time": 1.5}
    got = content["arrays"].to_numpy_ndarrays()
    assert [a.dtype for a in got] == [np.float32, np.float32]
    want = unflatten(flatten(model) + report, model)
    assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))
    raw = flatten(local) - flatten(model)
    clipped = Laplace(epsilon=2.0, clip=2.0).clip_rows(raw[None, :])[0]
    mad = np.mean(np.abs(report - clipped))
    assert abs(mad / 1.0 - 1.0) < 8.0 / np.sqrt(650)  # b = C/eps = 1, sd of |Lap| = b
    assert not np.allclose(report, raw, atol=0.1)
    rel_cfg = content["ldp-release"]
    assert rel_cfg["sealed"] is True and rel_cfg["epsilon"] == 2.0 and rel_cfg["agent"] == 0


def _in_flower(monkeypatch):
    """Let Messages be built outside Flower's processes (what Flower sets in them)."""
    from flwr.supercore.task_identity import TaskIdentity

    for key in ("_run_id", "_node_id", "_task_id"):
        monkeypatch.setattr(TaskIdentity, key, 1)


def _train_msg(arrays, server_round=1):
    from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, RecordDict

    content = {
        "arrays": ArrayRecord(arrays),
        "config": ConfigRecord({"server-round": server_round}),
    }
    return Message(RecordDict(content), dst_node_id=1, message_type=MessageType.TRAIN)


def test_a_mechanism_error_quoting_the_update_does_not_leave(tmp_path, monkeypatch):
    """bit_flip refuses an update outside [-1, 1] with a message quoting the offending value: the
    mod sent it as the error reply's reason, so the raw private value 3.14159 reached the server
    (and its metrics.json); now the reason names the exception's type only."""
    from types import SimpleNamespace

    from flwr.app import ArrayRecord, Message, RecordDict

    _in_flower(monkeypatch)
    rc = {"ldp-mechanism": json.dumps({"name": "bit_flip", "epsilon": 1.0}), "ldp-budget": 5.0}
    rc["ldp-ledger-dir"] = str(tmp_path)
    ctx = SimpleNamespace(run_config=rc, node_config={"partition-id": 0})
    msg = _train_msg([np.zeros(3)])

    def train(m, c):
        return Message(
            RecordDict({"arrays": ArrayRecord([np.array([0.1, 3.14159, -0.2])])}), reply_to=m
        )

    reply = LdpReleaseMod()(msg, ctx, train)
    assert reply.has_error() and "release failed (InvalidParameterError" in reply.error.reason
    assert "3.14" not in reply.error.reason


def test_reply_must_match_the_model(tmp_path):
    st = _settings(tmp_path, 0)
    model = D.initial_arrays()
    with pytest.raises(InvalidParameterError, match="count and shapes"):
        release_reply(model, [model[0]], st, 1)
    with pytest.raises(InvalidParameterError, match="non-finite"):
        release_reply(model, [model[0] + np.nan, model[1]], st, 1)
    assert not st.ledger.exists() or _spent(st.ledger) == {}  # refused before any charge


# ----------------------------------------------------------------------------------------------
# Server side
# ----------------------------------------------------------------------------------------------


def test_recorder_refuses_unsealed_foreign_or_inconsistent_replies(tmp_path):
    from flwr.app import ArrayRecord, ConfigRecord, RecordDict

    mech = Laplace(epsilon=2.0, clip=2.0)
    rec = FlowerRecorder(tmp_path / "run", system="t", mechanism=mech, private=D.PRIVATE)
    model = D.initial_arrays()
    theta = flatten(model)
    st = _settings(tmp_path / "led", 0)
    local = [a + 0.01 for a in model]
    arrays, report, rel = release_reply(model, local, st, 1)
    good = sealed_content(st, arrays, report, rel, {}, 1)
    assert rec.check(good, theta, "arrays")[0] == 0

    raw = RecordDict({"arrays": ArrayRecord(local)})
    with pytest.raises(InvalidParameterError, match="no sealed report"):
        rec.check(raw, theta, "arrays")
    sneaky = sealed_content(st, local, report, rel, {}, 1)  # un-noised parameters beside it
    with pytest.raises(InvalidParameterError, match="not the function of its sealed report"):
        rec.check(sneaky, theta, "arrays")
    other = _settings(tmp_path / "led", 1, mech={**MECH, "epsilon": 8.0})
    a2, r2, rel2 = release_reply(model, local, other, 1)
    with pytest.raises(InvalidParameterError, match="differs from the declared"):
        rec.check(sealed_content(other, a2, r2, rel2, {}, 1), theta, "arrays")
    bad = sealed_content(st, arrays, report, rel, {}, 1)
    bad["ldp-release"] = ConfigRecord({**dict(good["ldp-release"]), "sealed": False})
    with pytest.raises(InvalidParameterError, match="not sealed"):
        rec.check(bad, theta, "arrays")
    # a client's release record with a key missing, a mechanism that is not JSON, an epsilon
    # '2.0' or True: raised KeyError / JSONDecodeError out of the round, or was coerced
    # (session 58 probe); each reply is refused, named
    for key, value, match in (
        ("mechanism", None, "mechanism None differs"),
        ("mechanism", "{not json", "mechanism '{not json' differs"),
        ("epsilon", None, "reply's epsilon must be a real number, got None"),
        ("epsilon", "2.0", "reply's epsilon must be a real number, got '2.0'"),
        ("epsilon", True, "reply's epsilon must be a real number, got True"),
    ):
        fields = {**dict(good["ldp-release"]), key: value}
        if value is None:
            del fields[key]
        bad["ldp-release"] = ConfigRecord(fields)
        with pytest.raises(InvalidParameterError, match=re.escape(match)):
            rec.check(bad, theta, "arrays")
    rec.close()


def test_recorder_checks_what_truth_gives_before_recording_it(tmp_path):
    """ldp_server_main's truth returning a value that is no candidate (0.7 of 0.5/1.0/1.5) or a
    str ("0.5") was recorded in secrets.npz as the ground truth, float() coercing the str, and a
    truth that raised left a raw traceback (session 57, an in-process federation); own-loop's
    run.release refused both. Now the same check: typed, one of the candidates, before the
    server's charge; a raising truth is a UserCodeError naming it."""
    from ldp_audit.errors import UserCodeError

    y = np.zeros(3)
    for truth, err, match in [
        (lambda a: 0.7, InvalidParameterError, r"truth\(0\) 0.7 is not one of the declared"),
        (lambda a: "0.5", InvalidParameterError, r"truth\(0\) must be a real number"),
        (lambda a: 1 / 0, UserCodeError, "truth .* raised ZeroDivisionError"),
    ]:
        run = tmp_path / f"r{len(list(tmp_path.iterdir()))}"
        private = {"name": "s", "values": [0.5, 1.0, 1.5]}
        rec = FlowerRecorder(
            run, system="t", mechanism=Laplace(1.0, 1.0), private=private, truth=truth
        )
        rec.broadcast([y])
        with pytest.raises(err, match=match):
            rec.accept(1, 0, y, 0)
        assert rec.rows["agent"] == [] and _spent(run / "ledger.sqlite") == {}
        rec.close("interrupted")
    rec = FlowerRecorder(tmp_path / "ok", system="t", mechanism=Laplace(1.0, 1.0), private=private,
                         truth=lambda a: np.float64(1.5))  # fmt: skip
    rec.broadcast([y])
    rec.accept(1, 0, y, 0)
    assert rec.rows["value"] == [1.5]
    rec.close()


def test_strategy_accepts_one_report_per_agent_and_round(tmp_path):
    """Two nodes with one partition-id were both recorded as that agent (two rows, two charges
    and its private value, in one round); the second is now refused and named."""
    from types import SimpleNamespace

    from flwr.app import ArrayRecord, ConfigRecord

    from ldp_audit.training.flower.server import ldp_strategy_class

    class Inner:  # a Flower strategy: what it is handed
        def configure_train(self, server_round, arrays, config, grid):
            return []

        def aggregate_train(self, server_round, replies):
            self.got = [r.metadata.src_node_id for r in replies]
            return None, None

    rec = FlowerRecorder(tmp_path / "run", system="t", mechanism=from_config(MECH))
    strategy, model, replies = ldp_strategy_class()(Inner(), rec), [np.zeros(6)], []
    strategy.configure_train(1, ArrayRecord(model), ConfigRecord(), None)
    for node, agent, ledgers in ((5, 0, "a"), (6, 0, "b"), (7, 1, "a")):
        st = _settings(tmp_path / ledgers, agent)
        out, rep, rel = release_reply(model, [np.full(6, 0.1)], st, 1)
        content = sealed_content(st, out, rep, rel, {}, 1)
        meta = SimpleNamespace(src_node_id=node)
        replies.append(SimpleNamespace(metadata=meta, has_error=lambda: False, content=content))
    strategy.aggregate_train(1, replies)
    assert strategy.inner.got == [5, 7] and rec.rows["agent"] == [0, 1]
    assert rec.rejected == [{"round": 1, "node": 6, "reason": "agent 0 already replied in round 1"}]
    rec.close()


def test_strategy_refuses_a_reply_of_an_earlier_round(tmp_path):
    """Session 54 probe: with ``ldp-release = "parameters"`` (the arrays are the report, not the
    broadcast plus it) a client sending its round-1 reply again in round 2 was recorded as a
    round-2 report computed at round 2's parameters (its client ledger charged once, the
    server's twice). Its sealed release says round 1: refused, naming both rounds."""
    from types import SimpleNamespace

    from flwr.app import ArrayRecord, ConfigRecord

    from ldp_audit.training.flower.server import ldp_strategy_class

    class Inner:
        def configure_train(self, server_round, arrays, config, grid):
            return []

        def aggregate_train(self, server_round, replies):
            return ArrayRecord([np.full(6, float(server_round))]), None

    rec = FlowerRecorder(tmp_path / "run", system="t", mechanism=from_config(MECH))
    strategy = ldp_strategy_class()(Inner(), rec)
    st = _settings(tmp_path / "led", 0, **{"ldp-release": "parameters"})
    out, rep, rel = release_reply([np.zeros(6)], [np.full(6, 0.1)], st, 1)
    for r, model in ((1, [np.zeros(6)]), (2, [np.ones(6)])):
        strategy.configure_train(r, ArrayRecord(model), ConfigRecord(), None)
        content = sealed_content(st, out, rep, rel, {}, 1)  # round 1's reply, both times
        meta = SimpleNamespace(src_node_id=5)
        strategy.aggregate_train(
            r, [SimpleNamespace(metadata=meta, has_error=lambda: False, content=content)]
        )
    assert rec.rows["round"] == [1]
    assert rec.rejected == [
        {"round": 2, "node": 5, "reason": "agent 0's release is of round 1, not 2"}
    ]
    rec.close()


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("seed", 1.5, "'seed' must be an integer >= 0, got 1.5"),
        ("seed", "abc", "'seed' must be an integer >= 0"),
        ("overwrite", "false", "'overwrite' must be True or False, got 'false'"),
        ("timeout", "x", "'timeout' must be a real number, got 'x'"),
        ("ldp-release", "gradients", "'ldp-release' must be one of"),
        ("ldp-budget", "inf", "'ldp-budget' must be a finite number > 0"),
        ("run-dir", "rel/run", "'run-dir' must be an absolute path to a folder .*, got 'rel/run'"),
        ("run-dir", "", "'run-dir' must be an absolute path to a folder .*, got ''"),
    ],
)
def test_server_refuses_a_bad_run_config_before_any_round(tmp_path, key, value, match):
    """Were int(), bool() and float() of the value: 'false' overwrote, 1.5 became seed 1, 'x' a
    raw ValueError; the server starts no round (the grid is never used)."""
    from types import SimpleNamespace

    from ldp_audit.training.flower.server import ldp_server_main

    rc = {"run-dir": str(tmp_path / "run"), "ldp-mechanism": json.dumps(MECH), key: value}
    with pytest.raises(InvalidParameterError, match=match):
        ldp_server_main(None, SimpleNamespace(run_config=rc), system="t", initial_arrays=[[0.0]])
    assert not (tmp_path / "run").exists()


def test_in_process_federation_writes_a_run_that_report_audit_and_attack_read(tmp_path):
    """6 clients x 2 rounds at epsilon 2: an own-loop run directory, verified; the server's
    record of the charges equals every client's own ledger; report and audit read it; the
    generic dynamics attack scores it against its ceiling."""
    from ldp_audit.attacks.dynamics_run_dir import private_param_dynamics
    from ldp_audit.cli import main
    from ldp_audit.rundir import RunDir, read_config, read_manifest, verify_manifest

    run = federate(
        tmp_path / "run", tmp_path / "clients", clients=6, rounds=2, mech=MECH, budget=6.0
    )
    assert read_manifest(run)["status"] == "complete" and verify_manifest(run)["ok"]
    cfg = read_config(run)
    assert cfg["algorithm"] == "own-loop" and cfg["system"] == "digits-fedavg"
    assert cfg["private_parameter"]["values"] == list(D.CANDIDATES)
    tr = RunDir(run).transcript()
    assert tr["report"].shape == (12, 650) and tr["thetas"].shape == (2, 650)
    np.testing.assert_array_equal(tr["theta_index"], np.repeat([0, 1], 6))
    server = _spent(run / "ledger.sqlite")
    assert server == pytest.approx({str(k): 4.0 for k in range(6)})
    for k in range(6):
        assert _spent(tmp_path / "clients" / f"client-{k}.sqlite") == pytest.approx({str(k): 4.0})
    assert "6 clients released 12 reports over 2 rounds" in summary(run)

    res = private_param_dynamics(run, simulator=D.simulator, n_shadow=10, seed=1)
    d = res.to_dict()
    # the 6 clients' favourites are 1 and 4 only (shares 1/3, 2/3, 0): a guess between those
    # two reaches e^4 / (e^4 + 1) at epsilon 4, above e^4 / (e^4 + 2), and always guessing 4
    # is right 2/3 of the time, the chance (session 57)
    assert d["n"] == 6 and d["chance"] == pytest.approx(2 / 3)
    assert d["extra"]["shares"] == pytest.approx([1 / 3, 2 / 3, 0.0])
    assert d["ceiling"] == pytest.approx(np.exp(4) / (np.exp(4) + 1))
    assert main(["report", str(run), "--out", str(tmp_path / "rep")]) in (0, 1)
    rep = (tmp_path / "rep" / "report.md").read_text()
    assert "Budget 6 per agent: 0 agents over budget" in rep  # the declared client budget
    assert "12 charges" in rep  # the server's record ledger, anchored in the manifest


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"budget": 0}, "budget must be finite, > 0, got 0"),
        ({"budget": float("inf")}, "budget must be finite, > 0, got inf"),
        ({"seed": -1}, "seed must be an integer >= 0, got -1"),
        ({"overwrite": "no"}, "overwrite must be True or False"),
    ],
)
def test_digits_refuses_bad_settings_before_starting_flower(tmp_path, kw, match):
    """Budget 0 and seed -1 failed only inside the started Flower run (a minute later), with no
    parameter named; 'no' overwrote."""
    with pytest.raises(InvalidParameterError, match=match):
        D.run(tmp_path / "run", **kw)
    assert not (tmp_path / "run").exists() and not (tmp_path / "run-clients").exists()


def test_example_app_project_is_the_shipped_one():
    """examples/flower_digits/ is exactly what write_app_project writes (no drift)."""
    ex = ROOT / "examples" / "flower_digits"
    assert (ex / "pyproject.toml").read_text() == D.APP_PYPROJECT
    assert (ex / "digits_app.py").read_text() == D.APP_MODULE
    import tomllib

    conf = tomllib.loads(D.APP_PYPROJECT)["tool"]["flwr"]["app"]
    assert conf["components"] == {
        "serverapp": "digits_app:server_app",
        "clientapp": "digits_app:client_app",
    }
    assert json.loads(conf["config"]["ldp-mechanism"]) == MECH


# ----------------------------------------------------------------------------------------------
# The example app under `flwr run` (a local simulation SuperLink, Ray underneath)
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def _digits_process(request, tmp_path_factory):
    """The example app's ``flwr run`` (3 clients x 3 rounds at epsilon 2 with a budget of 4: the
    third round is refused by every client's own ledger), started in a subprocess when the
    file's first test starts, if the end-to-end test is selected: the run spends most of its
    wall time waiting for its SuperLink and Ray while the file's in-process tests run; the
    end-to-end test waits for it (``flwr_digits``), and teardown waits for it whatever happens."""
    if not any(it.name == "test_flwr_run_example_end_to_end" for it in request.session.items):
        yield None
        return
    base = tmp_path_factory.mktemp("flwr-digits")
    cmd = [sys.executable, "-m", "ldp_audit.training.flower.digits", "--out", str(base / "run")]
    cmd += ["--clients", "3", "--rounds", "3", "--budget", "4", "--log", str(base / "flower.log")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield base, proc
    finally:
        if proc.returncode is None:  # not read yet: wait (never leave its SuperLink behind)
            proc.communicate(timeout=900)


@pytest.fixture(scope="module")
def flwr_digits(_digits_process):
    base, proc = _digits_process
    stdout, stderr = proc.communicate(timeout=900)
    return base, subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


@pytest.mark.slow  # 50 s of SuperLink and Ray; the default suite's `flwr run` is test_flower.py's
def test_flwr_run_example_end_to_end(flwr_digits, tmp_path):
    from ldp_audit.attacks.dynamics_run_dir import private_param_dynamics
    from ldp_audit.cli import main
    from ldp_audit.rundir import read_manifest, verify_manifest

    base, out = flwr_digits
    log = (base / "flower.log").read_text()
    assert out.returncode == 0, out.stderr[-2000:] + log[-3000:]
    run = base / "run"
    assert read_manifest(run)["status"] == "complete" and verify_manifest(run)["ok"]
    assert "deprecated" not in (out.stdout + out.stderr + log).lower().replace(
        "deprecated alias", ""
    )
    assert "3 clients released 6 reports over 3 rounds; 3 replies refused" in out.stdout
    metrics = json.loads((run / "metrics.json").read_text())
    assert [r["round"] for r in metrics["rejected"]] == [3, 3, 3]
    assert all("client error" in r["reason"] for r in metrics["rejected"])
    for k in range(3):  # each client's own ledger stopped at its budget
        assert _spent(base / "run-clients" / f"client-{k}.sqlite") == pytest.approx({str(k): 4.0})
    assert _spent(run / "ledger.sqlite") == pytest.approx({str(k): 4.0 for k in range(3)})
    res = private_param_dynamics(run, simulator=D.simulator, n_shadow=10, seed=1).to_dict()
    # 3 clients: where their favourites are m < 3 of the candidates, a guess among those m
    # reaches e^4 / (e^4 + m - 1), above e^4 / (e^4 + 2) (session 57)
    m = sum(share > 0 for share in res["extra"]["shares"])
    assert res["n"] == 3 and res["ceiling"] == pytest.approx(np.exp(4) / (np.exp(4) + m - 1))
    assert main(["audit", "--run-dir", str(run)]) in (0, 1)
    assert main(["report", str(run), "--out", str(tmp_path / "rep")]) in (0, 1)
    assert (tmp_path / "rep" / "report.json").exists()


@pytest.mark.slow
def test_flwr_run_attack_recovers_the_favourite_digit_without_privacy(tmp_path):
    """epsilon 1000 per update (no meaningful privacy): the dynamics attack names every one of
    8 clients' favourite digit from 2 updates each (measured 8/8; the bound 6/8 fails only if
    the attack got worse, chance is 1/3)."""
    from ldp_audit.attacks.dynamics_run_dir import private_param_dynamics

    run = D.run(
        tmp_path / "run",
        clients=8,
        rounds=2,
        mechanism={"name": "laplace", "epsilon": 1000.0, "clip": 20.0},
        budget=2000.0,
    )
    res = private_param_dynamics(run, simulator=D.simulator, n_shadow=30, seed=1).to_dict()
    assert res["n"] == 8 and res["correct"] >= 6


def test_gaussian_release_is_accounted_by_rdp_at_its_delta(tmp_path):
    """A Gaussian mechanism (L2 clip 1, noise multiplier 2, delta 1e-5: epsilon 4.38 per
    release) under a budget of 8: RDP composition allows two releases (less than 2 x 4.38)
    and refuses the third (9.01 > 8) before any noise."""
    from ldp_audit.mechanisms import Gaussian

    mech = Gaussian(clip=1.0, noise_multiplier=2.0, delta=1e-5)
    st = _settings(tmp_path, 0, budget=8.0, mech=mech.to_config())
    model = [np.zeros(5)]
    for r in (1, 2):
        _, report, rel = release_reply(model, [np.ones(5)], st, r)
        assert rel.delta == 1e-5 and report.shape == (5,)
    with pytest.raises(BudgetExceeded, match="method='rdp'"):
        release_reply(model, [np.ones(5)], st, 3)


def test_flwr_run_says_when_the_run_directory_did_not_complete(tmp_path):
    """Every reply refused (a train function replying under another record name): the run
    directory ends 'failed' while Flower's run completes, and flwr_run returned 0; its run-dir
    check (called after Flower's status) now returns 1 with one log line naming the first
    refusal; a complete run is 0, a missing one 1."""
    import io

    from ldp_audit.training.flower.run import _run_dir_failed

    rec = FlowerRecorder(tmp_path / "failed", system="t", mechanism=from_config(MECH))
    rec.broadcast([np.zeros(3)])
    rec.reject(1, 5, "client error: InvalidParameterError: the train reply has no ArrayRecord")
    rec.close()
    log = io.StringIO()
    assert _run_dir_failed({"run-dir": str(tmp_path / "failed")}, log) == 1
    assert log.getvalue().count("\n") == 1 and "failed; the first of 1 refused" in log.getvalue()
    assert _run_dir_failed({"run-dir": str(tmp_path / "missing")}, log) == 1
    assert "not finished (no manifest)" in log.getvalue()
    run = federate(tmp_path / "ok", tmp_path / "led", clients=2, rounds=1, mech=MECH)
    assert _run_dir_failed({"run-dir": str(run)}, log) == 0 and _run_dir_failed({}, log) == 0


def test_a_reply_under_another_record_name_is_refused_naming_the_setting(tmp_path, monkeypatch):
    """A train function replying under "model" while the strategy uses "arrays": nothing is
    released, and the reason points at 'ldp-arrays-key' (it named the record only)."""
    from types import SimpleNamespace

    from flwr.app import ArrayRecord, Message, RecordDict

    _in_flower(monkeypatch)
    rc = {"ldp-mechanism": json.dumps(MECH), "ldp-budget": 5.0, "ldp-ledger-dir": str(tmp_path)}
    ctx = SimpleNamespace(run_config=rc, node_config={"partition-id": 0})

    def train(m, c):
        return Message(RecordDict({"model": ArrayRecord([np.ones(3)])}), reply_to=m)

    reply = LdpReleaseMod()(_train_msg([np.zeros(3)]), ctx, train)
    assert reply.has_error() and "no ArrayRecord 'arrays' (run config 'ldp-arrays-key'" in (
        reply.error.reason
    )
    assert not (tmp_path / "client-0.sqlite").exists()  # refused before any charge


def test_an_app_of_mixed_dtypes_releases_only_the_sealed_records(tmp_path, monkeypatch):
    """An outside app (probe 2026-12-06) through LdpReleaseMod and ldp_server_main on an
    in-process grid: float32, float64 and int64 arrays; the train function also returns a raw
    ArrayRecord, a raw ConfigRecord and a private metric. Every reply holds the four sealed
    records only (metrics: num-examples 1 and the declared train-loss), each client's ledger and
    the server's hold rounds x clients rows, the arrays keep their dtypes and the run verifies."""
    from types import SimpleNamespace

    from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict

    from ldp_audit.cli import main
    from ldp_audit.training.flower.server import ldp_server_main

    _in_flower(monkeypatch)
    rc = {"run-dir": str(tmp_path / "run"), "ldp-ledger-dir": str(tmp_path / "led"), "min-nodes": 3}
    rc.update({"ldp-mechanism": json.dumps(MECH), "ldp-budget": 6.0})
    rc.update({"num-server-rounds": 2, "ldp-public-metrics": "train-loss"})
    model = [np.zeros(3, np.float32), np.zeros(1), np.zeros(2, np.int64)]
    sent, keys = [], []

    def train(msg, context):
        w, b, steps = msg.content["arrays"].to_numpy_ndarrays()
        local = [w + np.float32(0.1), b - 0.2, steps + 5]
        metrics = MetricRecord({"num-examples": 40, "train-loss": 0.5, "secret-mean": 1.234})
        raw = {"raw": ArrayRecord([np.ones(4)]), "cfg": ConfigRecord({"y0": 1.234})}
        content = RecordDict({"arrays": ArrayRecord(local), "metrics": metrics, **raw})
        return Message(content, reply_to=msg)

    class Grid:
        def get_node_ids(self):
            return [11, 12, 13]

        def send_and_receive(self, messages, timeout=None):
            for m in messages:
                nc = {"partition-id": m.metadata.dst_node_id - 11}
                ctx = SimpleNamespace(run_config=rc, node_config=nc)
                sent.append(LdpReleaseMod()(m, ctx, train))
                keys.append(sorted(sent[-1].content.keys()))  # the server then drops two
            return sent[-len(messages) :]

    run = ldp_server_main(Grid(), SimpleNamespace(run_config=rc), system="t", initial_arrays=model)
    assert len(sent) == 6 and not any(r.has_error() for r in sent)
    assert keys == [["arrays", "ldp-release", "ldp-report", "metrics"]] * 6
    assert all(dict(r.content["metrics"]) == {"num-examples": 1, "train-loss": 0.5} for r in sent)
    for r in sent[:3]:  # round 1 (FedAvg's average of round 1 comes back as float64)
        got = r.content["arrays"].to_numpy_ndarrays()
        assert [a.dtype for a in got] == [np.float32, np.float64, np.int64]
    for k in range(3):
        assert _spent(tmp_path / "led" / f"client-{k}.sqlite") == pytest.approx({str(k): 4.0})
    assert _spent(run / "ledger.sqlite") == pytest.approx({"0": 4.0, "1": 4.0, "2": 4.0})
    assert main(["budget", str(run), "--verify"]) == 0


def test_the_pgc_app_mod_sends_no_exception_message(tmp_path, monkeypatch):
    """The PGC-A3C app's client mod put `f"{type}: {message}"` of any failure in the error reply,
    and passed Flower's own error reply of a raising train function (its reason quotes the
    exception) on to the server: a message quoting the private gravity would have left. Now the
    server sees the exception's type (a ledger or budget refusal keeps its message)."""
    from flwr.app import Error, Message

    from ldp_audit.training.flower import pgc_app as P

    _in_flower(monkeypatch)
    msg = _train_msg([np.zeros(3)])

    def raising_release(self, raw, context):
        raise ValueError("gravity 9.8123 is not in the grid")

    monkeypatch.setattr(P.LdpReleaseMod, "_release", raising_release)
    monkeypatch.setitem(P._PENDING, msg.metadata.message_id, {"config": {}})
    reply = P.LdpReleaseMod()(msg, None, lambda m, c: Message(_train_msg([]).content, reply_to=m))
    assert reply.has_error() and reply.error.reason.startswith("ValueError")
    assert "9.81" not in reply.error.reason

    def train_failed(m, c):  # what Flower replies when the train function raises
        return Message(Error(code=3, reason="ValueError: gravity 9.8123 ..."), reply_to=m)

    reply = P.LdpReleaseMod()(msg, None, train_failed)
    assert reply.has_error() and reply.error.code == 3 and "9.81" not in reply.error.reason
