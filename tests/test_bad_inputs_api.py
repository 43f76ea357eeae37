"""The Python API's public constructors and calls fed bad or unusual inputs (split from
tests/test_bad_inputs.py, which sweeps the command line): a clear error naming the parameter
and the value, an ``LdpAuditError`` subclass (``InvalidParameterError`` for values), before any
work, randomness, ledger charge or file write (issue 16, docs/cli.md "Bad input")."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ldp_audit.errors import InvalidParameterError, LdpAuditError

pytest.importorskip("ldp_audit.training.pgc_a3c")

from tests.test_cli_properties import run_cli  # noqa: E402

# ------------------------------------------------------------------------------- Python API

WRONG_TYPES = {"str": "1", "bool": True, "npbool": np.bool_(True), "list": [1], "none": None}
NON_FINITE = {"nan": math.nan, "-inf": -math.inf, "npnan": np.float64("nan")}


def _api_cases() -> list:
    from ldp_audit import mechanisms as M
    from ldp_audit.accountant import Budget
    from ldp_audit.training.dprl.config import DprlConfig
    from ldp_audit.training.dprl.config import ReproduceSettings as DprlRepro
    from ldp_audit.training.fedrl.config import FedRLConfig
    from ldp_audit.training.fedrl.reproduce import ReproConfig
    from ldp_audit.training.frd.config import FrdConfig
    from ldp_audit.training.frd.reproduce import ReproduceSettings as FrdRepro

    fields = [
        (M.Laplace, {"epsilon": 1.0, "clip": 1.0}, ["epsilon", "clip"]),
        (M.ProjectedRandomSign, {"epsilon": 1.0, "clip": 1.0}, ["epsilon", "clip"]),
        (M.BitFlip, {"epsilon": 1.0}, ["epsilon"]),
        (M.RandomizedResponse, {"epsilon": 1.0}, ["epsilon", "k"]),
        (M.Gaussian, {"clip": 1.0, "noise_multiplier": 1.0}, ["clip", "noise_multiplier", "delta"]),
        (M.DiscreteLaplace, {"epsilon": 1.0, "clip": 1.0}, ["epsilon", "clip"]),
        (Budget, {"epsilon": 1.0}, ["epsilon", "delta"]),
        (DprlConfig, {}, ["noise_multiplier", "clip", "delta", "canaries", "episodes", "lr"]),
        (FedRLConfig, {}, ["sigma", "density", "n_maps", "lr", "delta", "runs", "methods"]),
        (ReproConfig, {}, ["runs", "seed", "attack_clip", "attack_sigmas", "sizes"]),
        (FrdConfig, {}, ["n_agents", "threshold", "gravities", "proxy_dims", "fail_reward",
                         "actor_lr", "state_low", "stop_at_mission"]),
        (DprlRepro, {}, ["clip", "delta", "seed", "dpsgd_noise", "obs_noise"]),
        (FrdRepro, {}, ["threshold", "fedavg_setting", "seed", "settings", "agents"]),
    ]  # fmt: skip
    out = []
    for cls, base, names in fields:
        for f in names:
            values = dict(WRONG_TYPES)
            if f in ("stop_at_mission",):  # a flag or None (unset): '1' and [1] are not
                values = {k: v for k, v in values.items() if k not in ("bool", "npbool", "none")}
            if f in ("lr", "attack_clip"):
                values.pop("none")  # None: the documented default (no clip / default rate)
            if f in ("methods", "gravities", "proxy_dims", "state_low", "attack_sigmas", "sizes",
                     "dpsgd_noise", "obs_noise", "settings", "agents"):  # fmt: skip
                values.pop("list")
                values["tuple-of-str"] = ("x",)
            elif f != "stop_at_mission":
                values.update(NON_FINITE)
            for k, v in values.items():
                out.append(pytest.param(cls, base, f, v, id=f"{cls.__name__}.{f}={k}"))
    return out


@pytest.mark.parametrize(("cls", "base", "field", "value"), _api_cases())
def test_api_constructors_refuse_by_name(cls: Any, base: dict, field: str, value: Any) -> None:
    with pytest.raises(LdpAuditError) as exc:
        cls(**{**base, field: value})
    assert field.split("_")[0] in str(exc.value), str(exc.value)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"samples": "2000"}, "samples"),
        ({"samples": True}, "samples"),
        ({"samples": 10**40}, "samples"),
        ({"confidence": math.nan}, "confidence"),
        ({"confidence": 1.0}, "confidence"),
        ({"confidence": "0.9"}, "confidence"),
        ({"float_bits": "no"}, "float_bits"),
        ({"pool": 1}, "pool"),
        ({"dim": 0}, "dim"),
        ({"dim": 1.5}, "dim"),
        ({"rng": "seed"}, "rng"),
        ({"rng": -1}, "rng"),
        ({"selection_fraction": 1.5}, "selection_fraction"),
    ],
    ids=lambda x: str(x)[:40],
)
def test_audit_arguments_are_type_checked(kwargs: dict, needle: str) -> None:
    from ldp_audit.audit import audit
    from ldp_audit.mechanisms import Laplace

    with pytest.raises(InvalidParameterError, match=needle):
        audit(Laplace(epsilon=1.0, clip=1.0), **{"samples": 2000, **kwargs})


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda A: A.Ledger(""), "path"),
        (lambda A: A.Ledger(123), "path"),
        (lambda A: A.Ledger("/proc/nope/l.sqlite"), "/proc/nope"),
        (lambda A: A.Accountant(ledger=":memory:", budget="1"), "budget"),
        (lambda A: A.Accountant(ledger=":memory:", budget=True), "budget"),
        (lambda A: A.Accountant(ledger=":memory:", budget=math.nan), "budget"),
        (lambda A: A.LaplaceEvent("1"), "epsilon"),
        (lambda A: A.LaplaceEvent(math.nan), "epsilon"),
        (lambda A: A.GaussianEvent(-1.0), "noise_multiplier"),
        # session 58: charged, then every method raised ZeroDivisionError / OverflowError
        (lambda A: A.GaussianEvent(1e-300), r"noise_multiplier must be .*>= 1e-100"),
        (lambda A: A.GaussianEvent(1e300), r"noise_multiplier must be .*<= 1e\+100"),
        (lambda A: A.SelfComposedEvent(A.LaplaceEvent(1.0), 1.5), "count"),
        (lambda A: A.PoissonSampledEvent(1.5, A.GaussianEvent(1.0)), "sample_rate"),
        (lambda A: A.Accountant(ledger=":memory:").charge(1, A.LaplaceEvent(1.0)), "agent"),
        (lambda A: A.Accountant(ledger=":memory:").charge("a", 1.0), "event"),
        # SQLite read a NUL id's spend back as 0: a reopened ledger charged it anew
        (lambda A: A.Accountant(ledger=":memory:").charge("a\x00b", A.LaplaceEvent(1.0)), "NUL"),
        (lambda A: A.Accountant(ledger=":memory:").spent("a", delta=2.0), "delta"),
    ],
    ids=lambda x: "" if callable(x) else str(x),
)
def test_accountant_api_refuses_by_name(call: Any, needle: str) -> None:
    from ldp_audit import accountant as A

    with pytest.raises(LdpAuditError, match=needle):
        call(A)


_EV = '{"epsilon": 1.0, "type": "laplace"}'


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda a, A: a.charge_many(None), "charges must be an iterable .* got None"),
        (lambda a, A: a.charge("\ud800", A.LaplaceEvent(1.0)), r"agent id .* '\\ud800'"),
        (
            lambda a, A: a.charge_many(
                [("a", A.LaplaceEvent(1.0)), ("b\udfff", A.LaplaceEvent(1.0))]
            ),
            r"agent id .* 'b\\udfff'",
        ),
        (lambda a, A: a.spent("\ud800"), "agent id"),
        (lambda a, A: A.Accountant(ledger=a.ledger, run_id="r\ud800"), "run_id"),
        (lambda a, A: a.ledger.append([("a\x00b", _EV)]), r"agent id .* 'a\\x00b'"),
        (lambda a, A: a.ledger.append([("a", "\ud800")]), "event_json"),
        (lambda a, A: a.ledger.append([("a", _EV)], run_id="\ud800"), "run_id"),
        (lambda a, A: a.ledger.set_meta("k\ud800", "v"), "metadata key"),
        (lambda a, A: a.ledger.set_meta("k", "\ud800"), "metadata value"),
        (lambda a, A: a.ledger.history("x\x00y"), "agent id"),
    ],
    ids=lambda x: "" if callable(x) else str(x),
)
def test_ledger_text_sqlite_cannot_hold_is_refused_by_name(
    tmp_path: Path, call: Any, needle: str
) -> None:
    """A lone surrogate raised a raw UnicodeEncodeError from SQLite or the chain's hash; a NUL
    id reads back as the id before its NUL (SQLite's json_each): refused, nothing written."""
    from ldp_audit import accountant as A

    acc = A.Accountant(ledger=str(tmp_path / "l.sqlite"))
    with pytest.raises(InvalidParameterError, match=needle):
        call(acc, A)
    assert len(acc.ledger) == 0 and acc.ledger.verify()["ok"]


def test_an_old_ledgers_nul_agent_is_accounted_not_read_as_zero(tmp_path: Path) -> None:
    """A ledger written before NUL ids were refused (an older version; here: rows written with
    ``charge_rows``, which takes its rows as given, without ``append``'s check) holds its rows
    in full: every full read counts them, and a per-agent read, which would have read 0 spend,
    refuses the id, so no budget is bypassed."""
    from ldp_audit import accountant as A

    path = str(tmp_path / "old.sqlite")
    with A.Ledger(path) as old:
        old.charge_rows([("x\x00y", _EV, "local"), ("x\x00y", _EV, "local"), ("x", _EV, "local")])
    acc = A.Accountant(ledger=A.Ledger(path, verify="full"), budget=1.5)
    assert acc.spent_all() == {"x\x00y": 2.0, "x": 1.0}
    assert acc.ledger.verify()["ok"] and acc.agents() == ["x", "x\x00y"]
    for call in (
        lambda: acc.charge("x\x00y", A.LaplaceEvent(0.1)),
        lambda: acc.spent("x\x00y"),
        lambda: acc.ledger.has_agent("x\x00y"),
    ):
        with pytest.raises(InvalidParameterError, match="NUL"):
            call()
    assert acc.spent("x") == 1.0 and len(acc.ledger) == 3


def test_an_agent_id_with_control_characters_is_refused_and_an_old_one_is_shown_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found from outside (session 55): ``Accountant.charge`` took the agent id
    ``'0/1\\nbudget: epsilon 1000 per agent ...\\x1b[31m'`` and ``ldp-audit budget`` printed it
    raw, a forged ``budget:`` line of its own (and a colour escape) in the output. Now a control
    character (C0, DEL, C1) in an agent id is refused like a NUL; a ledger written before shows
    it escaped, on one line."""
    from ldp_audit import accountant as A
    from ldp_audit.accountant import ledger_format

    acc = A.Accountant(str(tmp_path / "l.sqlite"), budget=10.0)
    for bad in ("a\nb", "a\x1b[31m", "a\tb", "a\x7f", "a\x9b2J", "a\rb"):
        with pytest.raises(InvalidParameterError, match="control characters"):
            acc.charge(bad, A.LaplaceEvent(1.0))
        with pytest.raises(InvalidParameterError, match="control characters"):
            acc.charge_many([("ok", A.LaplaceEvent(1.0)), (bad, A.LaplaceEvent(1.0))])
    assert len(acc.ledger) == 0
    acc.charge("é b\u00a0", A.LaplaceEvent(1.0))  # printable, not ASCII: still an id
    acc.ledger.close()
    old = str(tmp_path / "old.sqlite")  # as written before the refusal
    monkeypatch.setattr(ledger_format, "_BAD_ID", ledger_format._NOT_UTF8)
    forged = "0/1\nbudget: epsilon 1000 per agent (delta 0, basic)\x1b[31m"
    old_acc = A.Accountant(old, budget=10.0)
    old_acc.charge_many([(forged, A.LaplaceEvent(9.0)), ("0/2", A.LaplaceEvent(1.0))])
    old_acc.ledger.close()
    monkeypatch.undo()
    code, out, _ = run_cli(["budget", old], capsys)
    assert code == 0
    assert "\x1b" not in out and "\nbudget: epsilon 1000" not in out
    assert [ln for ln in out.splitlines() if ln.startswith("budget:")] == [
        "budget: epsilon 10 per agent (delta 0, basic)"
    ]
    assert "0/1\\nbudget: epsilon 1000 per agent (delta 0, basic)\\x1b[31m" in out


def test_a_refused_release_charges_nothing_and_draws_nothing() -> None:
    from ldp_audit.accountant import Accountant
    from ldp_audit.mechanisms import Laplace
    from ldp_audit.release import release

    acc = Accountant(ledger=":memory:")
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    mech = Laplace(epsilon=1.0, clip=1.0)
    for values, ids in (
        (np.full((2, 3), np.nan), ["a", "b"]),
        (np.zeros((2, 3)), ["a"]),
        ([["x", "y"]], ["a"]),
    ):
        with pytest.raises(LdpAuditError):
            release(values, mechanism=mech, accountant=acc, agent_ids=ids, rng=rng)
    assert acc.agents() == [] and rng.bit_generator.state == state


@pytest.mark.parametrize(
    ("kw", "needle"),
    [({"meta": [("agent", np.arange(2))]}, "meta"), ({"preprocess": "clip"}, "preprocess")],
)
def test_release_keywords_are_type_checked_not_coerced(kw: dict, needle: str) -> None:
    """A list of pairs is no meta mapping (it was coerced by dict()); a str no preprocess."""
    from ldp_audit.accountant import Accountant
    from ldp_audit.mechanisms import Laplace
    from ldp_audit.release import release

    acc, rng = Accountant(ledger=":memory:"), np.random.default_rng(0)
    state = rng.bit_generator.state
    with pytest.raises(InvalidParameterError, match=needle):
        release(np.zeros((2, 3)), mechanism=Laplace(epsilon=1.0, clip=1.0), accountant=acc,
                agent_ids=["a", "b"], rng=rng, **kw)  # fmt: skip
    assert acc.agents() == [] and rng.bit_generator.state == state


def _pgc(**kw: Any) -> Any:
    from ldp_audit.training.pgc_a3c.config import PgcA3cConfig

    return PgcA3cConfig(**kw)


def _dynamics(**kw: Any) -> Any:
    from ldp_audit.attacks import dynamics_experiment as D
    from ldp_audit.attacks.sweep import broadcast_theta
    from ldp_audit.mechanisms import Laplace

    theta, _ = broadcast_theta("init", np.random.default_rng(0))
    args = {"theta": theta, "n_agents": 3, "n_shadow": 2, "rng": np.random.default_rng(0)}
    return D.run(Laplace(epsilon=1.0, clip=0.01), **{**args, **kw})


def test_membership_ceiling_at_huge_epsilon_is_one_not_an_overflow() -> None:
    from ldp_audit.attacks.scoring import membership_tpr_ceiling

    assert membership_tpr_ceiling(1000.0, 0.01) == 1.0
    assert membership_tpr_ceiling(1000.0, 0.0) == 0.0  # TPR <= e^eps * 0 + delta
    assert membership_tpr_ceiling(1000.0, 0.0, delta=0.1) == pytest.approx(0.1)


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"n_agents": 10**40}, "n_agents"),
        ({"n_shadow": 10**9}, "n_shadow"),
        ({"n_agents": 10**6, "reports_per_agent": 10**6}, "reports_per_agent"),
        ({"theta": "x"}, "theta"),
        ({"theta": [np.nan]}, "theta"),
        ({"rng": 3}, "rng"),
    ],
)
def test_dynamics_attack_refuses_by_name_before_simulating(kw: dict, needle: str) -> None:
    with pytest.raises(InvalidParameterError, match=needle):
        _dynamics(**kw)


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"gamma": "1"}, "gamma"),
        ({"gamma": True}, "gamma"),
        ({"beta": math.nan}, "beta"),
        ({"alpha_start": "0.5"}, "alpha_start"),
        ({"target_score": math.nan}, "target_score"),
        ({"target_score": "195"}, "target_score"),
        ({"stop_at_target": "no"}, "stop_at_target"),
        ({"stop_at_target": 1}, "stop_at_target"),
        ({"gravities": True}, "gravities"),
        ({"gravities": 9.8}, "gravities"),
        ({"gravities": (9.8, "x")}, "gravities"),
        ({"agent_gravities": True}, "agent_gravities"),
    ],
)
def test_pgc_config_checks_types_by_name(kw: dict, needle: str) -> None:
    with pytest.raises(InvalidParameterError, match=needle):
        _pgc(**kw)
