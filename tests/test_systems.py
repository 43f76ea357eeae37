"""The System contract (ldp_audit.systems), across every registered system.

For each shipped system a tiny run must: write a run directory that :class:`RunDir` reads
(transcript checked against the system's schema, manifest verified), whose transcript rows imply
exactly the ledger's charges (same agents, same count per agent), and whose report builds with
the system's sections and no error box. A fifth, toy system (tests/toy_system.py) registered
through the ``ldp_audit.systems`` entry point group gets train / attack / audit / report from the
generic CLI. Each system declares its tiny config(s) on its ``SystemSpec`` (``tiny_config``),
the toy included; the torch-based trainers (dprl, fedrl; 4-9 s each on the shared 2-core
machine, most of it importing torch and Opacus) are marked slow.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest

from ldp_audit import systems
from ldp_audit.cli import main
from ldp_audit.errors import InvalidParameterError, RunDirectoryError, UserCodeError
from ldp_audit.rundir import RunDir, verify_run

SHIPPED = ("pgc-a3c", "dprl", "fedrl", "frd")


def _tiny(name: str) -> list[tuple[str, dict]]:
    """(label, config dict) of each tiny run the system declares (``SystemSpec.tiny_config``)."""
    tiny = systems.get(name).tiny_config
    if tiny is None:
        pytest.fail(
            f"system {name!r} is registered without a tiny config: declare "
            "SystemSpec(tiny_config={...}) (a run of a few seconds) for the contract test"
        )
    configs = [tiny] if isinstance(tiny, Mapping) else list(tiny)
    return [(f"tiny{i}", dict(c)) for i, c in enumerate(configs)]


def check_contract(run: Path, name: str) -> RunDir:
    """The cross-system contract on one finished run directory."""
    rd = RunDir(run)
    assert rd.algorithm == name and rd.system is systems.get(name)
    v = rd.verify()
    assert v["ok"] and v["status"] == "complete", v
    tr = rd.transcript()
    schema = rd.system.transcript_schema(rd.train_config)
    assert set(schema.required) <= set(tr)
    implied = rd.system.ledger_charges(tr, rd.train_config)
    charged = rd.ledger_charges()
    assert implied == charged  # same agents, same number of charges each
    assert sum(charged.values()) > 0
    from ldp_audit.report import build_report

    rep = build_report(run, figures=False)
    assert rep.model["run"]["algorithm"] == name
    assert all(s["error"] is None for s in rep.model["sections"])
    if rd.system.report_sections:
        assert rep.model["sections"], "the system's sections are in its report"
    return rd


def _train_and_check(name: str, tmp_path: Path) -> None:
    s = systems.get(name)
    for label, cfg in _tiny(name):
        run = tmp_path / f"{name}-{label}"
        res = s.train(s.config_from_dict(cfg), seed=0, run_dir=run)
        assert isinstance(res, systems.TrainResult) and res.system == name
        assert res.run_dir == run  # res.native is the trainer's own result, or None
        check_contract(run, name)


def test_the_four_shipped_systems_are_registered_in_cli_order() -> None:
    assert systems.names()[:4] == list(SHIPPED)
    assert not systems.broken()
    for s in systems.systems():
        assert isinstance(s, systems.System)
        assert s.attacks and all(":" in ref for ref in s.attacks.values())


#: systems whose tiny run needs torch (4-9 s each, most of it importing torch and Opacus)
SLOW = {"dprl", "fedrl"}


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in systems.names()],
)
def test_contract_of_a_tiny_run(name: str, tmp_path: Path) -> None:
    """Every registered system, each with the tiny config(s) its ``SystemSpec`` declares (a
    plug-in: :func:`test_toy_system_from_an_entry_point_gets_the_four_verbs`)."""
    _train_and_check(name, tmp_path)


@pytest.mark.parametrize("name", SHIPPED)
def test_train_refuses_a_run_dir_and_a_ledger_before_any_work(name: str, tmp_path: Path) -> None:
    """The contract, not each trainer, refuses both: a run directory charges its own ledger."""
    from ldp_audit.accountant import Ledger

    s, run = systems.get(name), tmp_path / "run"
    cfg = s.config_from_dict(_tiny(name)[0][1])
    with pytest.raises(InvalidParameterError, match=f"^{name}: pass run_dir or ledger, not both"):
        s.train(cfg, seed=0, run_dir=run, ledger=Ledger(":memory:"))
    assert not run.exists()


PGC_REPRODUCE_FORWARD = """trials max_submissions seed figure2_trials figure2_submissions no_figure2
stop_at_target acting clip_kind aggregator aggregator_lr target engine readings audit_samples
workers"""


@pytest.mark.parametrize(
    ("verb", "name", "forward"),
    [
        ("reproduce", "pgc-a3c", tuple(PGC_REPRODUCE_FORWARD.split())),
        ("train", "pgc-a3c", ()),  # from_args reads its options
        ("train", "frd", ()),
        ("train", "fedrl", ("threads",)),  # declared: from_args reads the others
        ("reproduce", "dprl", ("cache",)),
        ("attack", "fedrl", ("audit_samples",)),
        ("attack", "frd", ("n_shadow", "max_groups")),
    ],
)
def test_the_options_a_command_forwards(verb: str, name: str, forward: tuple) -> None:
    """Without a declared ``Command.forward``: every option its ``options`` adds but --force."""
    from tests.cli_capture import subcommand_parser

    assert subcommand_parser(verb, name).get_default("_forward") == forward


def test_adapter_results_equal_the_trainers_own(tmp_path: Path) -> None:
    """The registry's train is a thin adapter: the same transcript as the trainer's own call."""
    from ldp_audit.training.pgc_a3c.config import PgcA3cConfig
    from ldp_audit.training.pgc_a3c.grid import train

    cfg = PgcA3cConfig(mechanism="prs", epsilon=2.0, trials=1, max_submissions=20)
    train(cfg, seed=3, run_dir=tmp_path / "own")
    systems.get("pgc-a3c").train(cfg, seed=3, run_dir=tmp_path / "adapter")
    a, b = (np.load(tmp_path / d / "transcript.npz") for d in ("own", "adapter"))
    assert a.files == b.files and all(np.array_equal(a[k], b[k]) for k in a.files)


def test_rundir_errors_name_the_system_and_what_fits(tmp_path: Path) -> None:
    s = systems.get("frd")
    cfg = s.config_from_dict({**_tiny("frd")[0][1]})
    run = tmp_path / "run"
    s.train(cfg, seed=0, run_dir=run)
    rd = RunDir(run)
    with pytest.raises(InvalidParameterError, match="must be True"):
        rd.secrets(for_scoring=False)
    with pytest.raises(InvalidParameterError, match="must be True"):
        rd.secrets(for_scoring=1)  # not coerced
    assert "agent_gravity" in rd.secrets(for_scoring=True)
    with pytest.raises(RunDirectoryError, match=r"'frd' run.*ldp-audit attack dynamics"):
        rd.require("q_report", command="attack fedrl")
    # a transcript that lacks an array of the schema: named, with the run's system
    bad = tmp_path / "bad"
    bad.mkdir()
    for f in ("config.json", "metrics.json"):
        (bad / f).write_bytes((run / f).read_bytes())
    np.savez(bad / "transcript.npz", report=np.zeros((2, 2)))
    with pytest.raises(RunDirectoryError, match=r"lacks the array\(s\) trial \(1-D integer"):
        RunDir(bad).transcript()
    doc = json.loads((bad / "config.json").read_text())
    doc["algorithm"] = "nosuch"
    (bad / "config.json").write_text(json.dumps(doc))
    with pytest.raises(RunDirectoryError, match="'nosuch' run, and no system named 'nosuch'"):
        _ = RunDir(bad).system


def test_attack_dynamics_on_a_run_of_another_system_names_it(tmp_path: Path, capsys) -> None:
    s = systems.get("frd")
    run = tmp_path / "run"
    s.train(s.config_from_dict(_tiny("frd")[0][1]), seed=0, run_dir=run)
    assert main(["attack", "membership", "--run-dir", str(run)]) == 2
    err = capsys.readouterr().err
    assert "is a 'frd' run" in err and re.search(r"attacks dprl(, [a-z0-9-]+)* runs", err)
    assert f"ldp-audit attack dynamics --run-dir {run}" in err
    assert not (run / "attack_membership.json").exists()


def test_attack_membership_run_dir_adds_its_result_to_the_run(tmp_path: Path, capsys) -> None:
    """Session 56: ``attack membership --run-dir RUN`` printed its result and wrote nothing into
    the run, unlike ``attack dynamics --run-dir`` (``report RUN`` then never saw it); it adds
    RUN/attack_membership.json, sealed, as every attack on a run does (a toy system here)."""
    import dataclasses

    from tests.toy_system import SYSTEM

    systems.register(
        dataclasses.replace(SYSTEM, attacks={"membership": "tests.toy_system:guess"}),
        replace=True,
    )
    try:
        s, run = systems.get("toy"), tmp_path / "run"
        s.train(s.config_from_dict(SYSTEM.tiny_config), seed=0, run_dir=run)
        assert main(["attack", "membership", "--run-dir", str(run)]) == 0
        assert json.loads((run / "attack_membership.json").read_text())["attack"] == "toy-guess"
        assert verify_run(run).ok and "attack_membership.json" in verify_run(run).analyses
        assert main(["attack", "membership", "--run-dir", str(run)]) == 2  # never replaced
        assert "attack_membership.json already exists" in capsys.readouterr().err
        out = tmp_path / "m.json"
        assert main(["attack", "membership", "--run-dir", str(run), "--out", str(out)]) == 0
        assert out.is_file() and verify_run(run).ok
    finally:
        systems.unregister("toy")


def test_audit_run_dir_refuses_what_it_cannot_audit(tmp_path: Path, capsys) -> None:
    s = systems.get("frd")
    base = _tiny("frd")[0][1]
    run = tmp_path / "nonprivate"
    s.train(s.config_from_dict({**base, "ldp_epsilon": None}), seed=0, run_dir=run)
    assert main(["audit", "--run-dir", str(run)]) == 2
    assert "nothing to audit: upload: epsilon is inf" in capsys.readouterr().err
    assert not (run / "audit.json").exists()
    assert main(["audit", "--run-dir", str(run), "--mechanism", "laplace"]) == 2
    assert "--mechanism cannot be used with --run-dir" in capsys.readouterr().err
    assert main(["audit", "--mechanism", "laplace", "--epsilon", "1", "--overwrite"]) == 2


def test_dpsgd_is_refused_by_the_one_shot_auditor_with_the_reason() -> None:
    cfg = systems.get("dprl").config_from_dict({"algo": "dqn", "privacy": "dpsgd"})
    with pytest.raises(
        InvalidParameterError,  # membership --run-dir writes nothing into the run: --out FILE
        match=r"Poisson-subsampled Gaussian.*attack membership --run-dir RUN --out FILE.*"
        r"`ldp-audit report RUN FILE` reads it",
    ):
        systems.get("dprl").audit_targets(cfg)


# ----------------------------------------------------------------------------------------------
# the fifth, toy system, through the entry point group and the generic CLI
# ----------------------------------------------------------------------------------------------


def _plugin(site: Path, lines: str) -> None:
    dist = site / "toy_plugin-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[ldp_audit.systems]\n{lines}\n")


@pytest.fixture
def plugin_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A folder on sys.path for a plug-in's .dist-info; the registry is reloaded after."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    yield site
    monkeypatch.undo()
    systems.reload()


def test_toy_system_from_an_entry_point_gets_the_four_verbs(
    plugin_site: Path, tmp_path: Path, capsys
) -> None:
    _plugin(plugin_site, "toy = tests.toy_system:SYSTEM")
    systems.reload()
    names = systems.names()
    assert names[: len(SHIPPED)] == list(SHIPPED) and names[-1] == "toy"
    assert not systems.broken()
    # the cross-system contract, exactly as for the shipped systems (its native result is None)
    _train_and_check("toy", tmp_path / "contract")
    assert systems.get("toy").train({"agents": 2}, seed=0).native is None
    run = tmp_path / "run"
    # train: the generic subcommand built from the config class
    code = main(["train", "toy", "--out", str(run), "--set", "agents=30", "--set", "epsilon=2.0",
                 "--seed", "4", "--json"])  # fmt: skip
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["algorithm"] == "toy" and doc["metrics"]["reports"] == 90
    rd = check_contract(run, "toy")
    assert rd.train_config.agents == 30 and rd.ledger_charges()["agent-0"] == 3
    # bad input: named, before any work (types checked by the config, not coerced)
    assert main(["train", "toy", "--out", str(tmp_path / "r2"), "--set", "agents='3'"]) == 2
    assert main(["train", "toy", "--out", str(tmp_path / "r2"), "--set", "nope=1"]) == 2
    err = capsys.readouterr().err
    assert "agents must be an integer" in err and "no config field 'nope'" in err

    # the options generated from the config class (ldp_audit.config): bounds from the field
    # metadata, read strictly, refused before any work; a field given both ways is refused
    def code_of(argv: list[str]) -> int:  # argparse's own errors exit 2 through SystemExit
        try:
            return main(argv)
        except SystemExit as e:
            return int(e.code)

    assert code_of(["train", "toy", "--out", str(tmp_path / "r2"), "--agents", "0"]) == 2
    assert code_of(["train", "toy", "--out", str(tmp_path / "r2"), "--epsilon", "nan"]) == 2
    argv = ["train", "toy", "--out", str(tmp_path / "r2"), "--agents", "3", "--set", "agents=3"]
    assert code_of(argv) == 2
    err = capsys.readouterr().err
    assert "--agents must be an integer >= 1, got '0'" in err
    assert "--epsilon must be a finite number in (0, inf), got 'nan'" in err
    assert "--agents and --set agents=... are both given" in err
    assert not (tmp_path / "r2").exists()
    code = main(["train", "toy", "--out", str(tmp_path / "r3"), "--agents", "4", "--reports",
                 "2", "--json"])  # fmt: skip
    assert code == 0 and json.loads(capsys.readouterr().out)["metrics"]["reports"] == 8
    with pytest.raises(SystemExit):
        main(["train", "toy", "--help"])
    assert "Agents, each with one private bit (>= 1, <= 1000000; default: 20)" in " ".join(
        capsys.readouterr().out.split()
    )
    # attack: the system's own attack, as a generic subcommand; its artefact in the run
    assert main(["attack", "toy-guess", "--run-dir", str(run), "--json"]) in (0, 1)
    res = json.loads(capsys.readouterr().out)
    assert res["attack"] == "toy-guess" and res["n"] == 30
    # scored at the bits' shares (session 58: the toy passed none, and a plug-in copying it
    # read a prior-guessing attack at epsilon 0.01 as a violation): chance the commoner share
    bits = np.load(run / "secrets.npz")["bit"]
    assert res["chance"] == max(np.mean(bits), 1 - np.mean(bits)) > 0.5
    assert json.loads((run / "attack_toy_guess.json").read_text())["correct"] == res["correct"]
    assert main(["attack", "toy-guess", "--run-dir", str(run)]) == 2  # never silently replaced
    # audit: the mechanism the run released through (randomized response, epsilon 2)
    assert main(["audit", "--run-dir", str(run), "--samples", "20000", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    (entry,) = out["audits"]
    assert entry["target"] == "bit" and entry["claimed_epsilon"] == pytest.approx(2.0)
    assert json.loads((run / "audit.json").read_text())[0]["target"] == "bit"
    assert main(["audit", "--run-dir", str(run), "--samples", "1000"]) == 2  # exists
    # the audit's own options reach the auditor (here: no floating-point bit search)
    args = ["audit", "--run-dir", str(run), "--samples", "2000", "--no-float-bits"]
    assert main([*args, "--overwrite", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["audits"][0]["float_bits"] is False
    # report: the toy's own section, and the audit and attack picked up
    assert main(["report", str(run), "--out", str(tmp_path / "rep")]) in (0, 1)
    model = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert [s["id"] for s in model["sections"]] == ["toy"]
    assert model["audits"] and "toy-guess" in json.dumps(model["attacks"])


def test_a_broken_plugin_is_named_and_never_crashes_the_cli(plugin_site: Path, capsys) -> None:
    _plugin(plugin_site, "broken = tests.no_such_module:SYSTEM\nnotasystem = json:dumps")
    systems.reload()
    assert systems.names()[: len(SHIPPED)] == list(SHIPPED)
    assert not {"broken", "notasystem"} & set(systems.names())
    why = systems.broken()
    assert set(why) == {"broken", "notasystem"}
    assert "tests.no_such_module" in why["broken"] and "ModuleNotFoundError" in why["broken"]
    with pytest.raises(UserCodeError, match="system 'broken' is not available: entry point"):
        systems.get("broken")
    with pytest.raises(SystemExit) as exc:
        main(["train", "--help"])
    assert exc.value.code == 0
    err = capsys.readouterr().err
    assert "warning: system plug-in 'broken' is unavailable: entry point 'broken'" in err


def _raising_hook(*args: object) -> None:
    raise RuntimeError("the plug-in's CLI hook is broken")


def _bad_hooks():  # a factory: the entry point may name a zero-argument callable
    from tests.toy_system import SYSTEM

    return systems.SystemSpec(
        name="badhooks",
        config=SYSTEM.config,
        trainer=SYSTEM.trainer,
        schema=SYSTEM.schema,
        cli="tests.test_systems:_raising_hook",
        attack_cli="tests.test_systems:_raising_hook",
    )


def test_a_plugin_whose_cli_hooks_raise_is_one_warning(plugin_site: Path, capsys) -> None:
    _plugin(plugin_site, "badhooks = tests.test_systems:_bad_hooks")
    systems.reload()
    assert "badhooks" in systems.names()
    assert main(["attack", "membership", "--run-dir", str(plugin_site)]) == 2  # not a run
    err = capsys.readouterr().err  # attack builds only its own commands (session 54)
    assert "system 'badhooks': its attack commands are unavailable: RuntimeError" in err
    assert "is not a run directory" in err and "its commands are unavailable" not in err
    with pytest.raises(SystemExit):  # train builds the systems' train commands: the other hook
        main(["train", "no-such-system"])
    err = capsys.readouterr().err
    assert "system 'badhooks': its commands are unavailable: RuntimeError" in err


def test_registry_refuses_a_second_system_of_the_same_name() -> None:
    from tests.toy_system import SYSTEM

    clash = systems.SystemSpec(name="frd", config=SYSTEM.config, trainer=SYSTEM.trainer,
                               schema=SYSTEM.schema)  # fmt: skip
    with pytest.raises(InvalidParameterError, match="'frd' is already registered"):
        systems.register(clash)
    with pytest.raises(InvalidParameterError, match="lower-case letters"):
        systems.SystemSpec(name="Bad Name", config=object, trainer=None, schema=None)


def test_docs_show_the_toy_system_verbatim() -> None:
    root = Path(__file__).resolve().parent.parent
    page = (root / "docs" / "systems.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    assert (root / "tests" / "toy_system.py").read_text() in blocks


def test_the_docs_toy_as_a_package_outside_the_repository(
    plugin_site: Path, tmp_path: Path, capsys
) -> None:
    """docs/systems.md's block copied into a package of another name (`mypackage`, its
    pyproject entry point): its attack and its report sections are its own module's, where
    the block named `tests.toy_system` (exit 2 and no section outside this repository)."""
    page = (Path(__file__).resolve().parent.parent / "docs" / "systems.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", page, re.S) if "SystemSpec(" in b)
    (plugin_site / "mypackage").mkdir()
    (plugin_site / "mypackage" / "__init__.py").write_text("")
    (plugin_site / "mypackage" / "toy_system.py").write_text(block)
    _plugin(plugin_site, "toy = mypackage.toy_system:SYSTEM")
    systems.reload()
    toy = systems.get("toy")
    assert toy.attacks == {"toy-guess": "mypackage.toy_system:guess"}
    assert toy.report_sections == "mypackage.toy_system:report_sections"
    run = tmp_path / "run"
    assert main(["train", "toy", "--out", str(run), "--set", "agents=30", "--seed", "1"]) == 0
    assert main(["attack", "toy-guess", "--run-dir", str(run)]) == 0
    assert (run / "attack_toy_guess.json").is_file()
    assert main(["report", str(run), "--out", str(tmp_path / "rep")]) in (0, 4)
    assert "Toy reports" in (tmp_path / "rep" / "index.html").read_text()
    capsys.readouterr()


def test_an_unwritable_run_is_refused_before_the_attack_or_audit(
    plugin_site: Path, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`attack NAME --run-dir RUN` and `audit --run-dir RUN` write RUN's named artefact: a run
    folder that takes no new file (read-only: the probe's mkdtemp refused there, as for a
    user without write permission) is exit 2 naming it, before any work; it was the attack's
    work and then an internal error (exit 3, a traceback) at the write."""
    import tempfile

    _plugin(plugin_site, "toy = tests.toy_system:SYSTEM")
    systems.reload()
    run = tmp_path / "run"
    assert main(["train", "toy", "--out", str(run), "--set", "agents=30", "--seed", "1"]) == 0
    capsys.readouterr()
    real = tempfile.mkdtemp

    def mkdtemp(*a, **kw):
        if Path(kw.get("dir", "")).resolve() == run.resolve():
            raise PermissionError(13, "Permission denied")
        return real(*a, **kw)

    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
    monkeypatch.setattr("tests.toy_system.guess", lambda *a, **k: pytest.fail("attack ran"))
    assert main(["attack", "toy-guess", "--run-dir", str(run)]) == 2
    assert main(["audit", "--run-dir", str(run), "--samples", "1000"]) == 2
    err = capsys.readouterr().err
    for name in ("attack_toy_guess.json", "audit.json"):
        assert f"--run-dir: cannot create '{run / name}'" in err and "Permission denied" in err
    assert sorted(p.name for p in run.glob("*.json")) == ["config.json", "manifest.json",
                                                          "metrics.json"]  # fmt: skip


@pytest.mark.parametrize("text", ["agents=1e400", "agents=NaN", "x=-Infinity", "=3", "1a=2", "a"])
def test_generic_set_refuses_malformed_and_non_finite_values(text: str) -> None:
    import argparse

    from ldp_audit.cli.types import key_value

    convert = key_value("--set")
    with pytest.raises(argparse.ArgumentTypeError, match="--set"):
        convert(text)
    assert convert("agents=3") == ("agents", 3) and convert("mode=fedavg") == ("mode", "fedavg")


@pytest.mark.parametrize("option", ["--set", "--param"])
def test_key_value_refuses_a_number_a_double_reads_as_zero(option: str) -> None:
    import argparse
    import math

    from ldp_audit.cli.types import key_value

    convert = key_value(option, finite=option == "--set")  # --param: as audit declares it
    for text in ("delta=1e-400", "x=[0.5, -2e-330]", 'c={"eps": 1E-999}'):
        with pytest.raises(argparse.ArgumentTypeError, match=rf"^{option} .*too small"):
            convert(text)  # until session 53 read as 0 (OpacusRunConfig: "got 0.0")
    assert convert("delta=5e-324") == ("delta", 5e-324) and convert("x=0.0") == ("x", 0.0)
    if option == "--param":  # non-finite values still reach the user's class
        assert math.isinf(convert("x=1e400")[1])


def test_listing_the_systems_imports_no_trainer() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from ldp_audit import systems; names = systems.names();"
        "heavy = [m for m in ('torch', 'opacus', 'gymnasium', 'sklearn', 'matplotlib',"
        " 'ldp_audit.training.pgc_a3c', 'ldp_audit.training.fedrl') if m in sys.modules];"
        "print(','.join(names), '|', ','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    names, heavy = out.stdout.strip().split("|")
    assert names.strip().startswith("pgc-a3c,dprl,fedrl,frd") and heavy.strip() == ""


def test_audit_targets_of_the_shipped_systems() -> None:
    from ldp_audit.audit import audit
    from ldp_audit.mechanisms import Laplace, ProjectedRandomSign

    pgc = systems.get("pgc-a3c")
    (t,) = pgc.audit_targets({"mechanism": "laplace", "epsilon": 2.0, "rounds": 4})
    assert isinstance(t.mechanism, Laplace) and t.mechanism.epsilon == pytest.approx(0.5)
    assert t.name == "report" and dict(t.options) == {"dim": 112}  # the report's dimension
    (t,) = pgc.audit_targets({"mechanism": "prs", "epsilon": 5.0})
    assert isinstance(t.mechanism, ProjectedRandomSign)
    fedrl = systems.get("fedrl")
    got = fedrl.audit_targets({"clip_outputs": 1.0, "methods": ["fedrl"]})
    assert [x.name for x in got] == ["q_output", "target_y"]
    assert fedrl.audit_targets({"methods": ["dqn-alpha"]}) == []  # a baseline releases nothing
    frd = systems.get("frd")
    (t,) = frd.audit_targets({"ldp_epsilon": 2.0, "ldp_samples": 4})
    assert t.mechanism.epsilon == pytest.approx(0.5)  # one pair of the upload: epsilon / m
    # the per-pair mechanism is auditable as declared (its pairs, its rows)
    res = audit(
        t.mechanism, t.options["pairs"], samples=2000, rng=0, float_bits=False, profile=False
    )
    assert res.claimed_epsilon == pytest.approx(0.5) and res.samples == 2000
    assert 0.0 <= res.epsilon_lower_bound  # sound: the claim is not refuted at 0.95 here


class _Skipping:
    """An accountant a System's trainer calls wrongly: agent-1 is never charged, agent-2 only
    on its first report (a trainer that releases without charging, docs/systems.md)."""

    def __init__(self, acc: object) -> None:
        self.acc, self.seen = acc, set()

    def charge_many(self, charges, *, scope="local"):
        kept = [(a, e) for a, e in charges if a != "agent-1" and (a, 2) not in self.seen]
        self.seen |= {(a, 2) for a, _ in charges if a == "agent-2"}
        return self.acc.charge_many(kept, scope=scope)


def test_report_compares_the_ledger_with_what_the_transcript_implies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A system whose report sections give no ``releases`` (the toy, every plug-in written from
    docs/systems.md): the report compares the ledger with the charges its transcript rows imply
    (``ledger_charges``, the contract). Before session 53 a toy releasing 150 reports with 0
    charges read "PARTIALLY VERIFIED. Claims not contradicted", exit 0."""
    import ldp_audit.accountant as accountant
    from ldp_audit.accountant import Accountant
    from ldp_audit.report import build_report
    from tests.toy_system import SYSTEM

    systems.register(SYSTEM)
    try:
        s = systems.get("toy")
        s.train({"agents": 4, "reports": 2}, seed=0, run_dir=tmp_path / "good")
        with monkeypatch.context() as m:
            m.setattr(accountant, "Accountant", lambda ledger: _Skipping(Accountant(ledger=ledger)))
            s.train({"agents": 4, "reports": 2}, seed=0, run_dir=tmp_path / "bad")
        good = build_report(tmp_path / "good", figures=False).model
        bad = build_report(tmp_path / "bad", figures=False).model
    finally:
        systems.reload()
    assert RunDir(tmp_path / "bad").ledger_charges() == {"agent-0": 2, "agent-2": 1, "agent-3": 2}
    assert good["ledger"]["uncharged_agents"] == 0 and good["ledger"]["releases"] == 8
    assert "Every agent that submitted a report was charged in the ledger." in json.dumps(good)
    led = bad["ledger"]
    assert (led["uncharged_agents"], led["uncharged_examples"]) == (1, ["agent-1"])
    assert led["undercharged_examples"] == ["agent-2 (1 charges for 2 releases)"]
    text = json.dumps(bad["verdict"])
    assert "1 agent submitted reports that the ledger never charged (e.g. agent-1)" in text
    assert "1 agent released more reports than the ledger charged" in text
    assert bad["verdict"]["status"] == "violation" and good["verdict"]["status"] != "violation"


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"system": "other"}, "whose system is 'other', not 'toy'"),
        ({"run_dir": Path("/nonexistent")}, "whose run_dir is '/nonexistent', not"),
        ({"metrics": [1, 2]}, "whose metrics is a list, not a dict"),
        ({"privacy": {"local": object()}}, "whose privacy is not JSON-able (Object of type object"),
    ],
)
def test_a_wrong_train_result_is_named_never_printed(
    tmp_path: Path, capsys, change: dict, needle: str
) -> None:
    """A plug-in trainer's TrainResult is checked against the contract (docs/systems.md): its
    system's name, the run_dir it was given, metrics a dict, privacy and metrics JSON-able.
    Before session 53 the CLI printed a wrong name or folder in silence (`run directory:
    /nonexistent`), and an object in privacy was exit 3, "a bug in ldp-audit"."""
    import dataclasses

    from tests.toy_system import SYSTEM, train

    def wrong(cfg, **kw):
        return dataclasses.replace(train(cfg, **kw), **change)

    systems.register(dataclasses.replace(SYSTEM, trainer=wrong))
    try:
        with pytest.raises(UserCodeError, match=re.escape(needle)):
            systems.get("toy").train({"agents": 2}, seed=0, run_dir=tmp_path / "api")
        assert main(["train", "toy", "--out", str(tmp_path / "cli"), "--no-progress"]) == 2
    finally:
        systems.reload()
    err = capsys.readouterr().err
    assert "system 'toy': its trainer returned a TrainResult" in err and needle in err
    assert "bug in ldp-audit" not in err


def test_a_plug_in_trainer_that_raises_is_named_and_its_run_interrupted(
    tmp_path: Path, capsys
) -> None:
    """Session 54 probe: a plug-in trainer written from docs/systems.md that raised after its
    first release (a bug of its own) was exit 3, "This is a bug in ldp-audit", with a traceback,
    and left its run folder "running" without a manifest. Now exit 2 naming the system and the
    trainer, the run finished "interrupted" (its charges kept: the safe direction)."""
    import dataclasses

    from tests.toy_system import SYSTEM, train

    def raising(cfg, **kw):
        from ldp_audit import release

        real, calls = release.release, []

        def once(*a, **k):  # the first release goes through, the second raises
            calls.append(1)
            if len(calls) > 1:
                raise KeyError("boom")
            return real(*a, **k)

        release.release = once
        try:
            return train(cfg, **kw)
        finally:
            release.release = real

    systems.register(dataclasses.replace(SYSTEM, trainer=raising))
    try:
        with pytest.raises(UserCodeError, match="its trainer .*raising raised KeyError: 'boom'"):
            systems.get("toy").train({"agents": 2}, seed=0, run_dir=tmp_path / "api")
        assert main(["train", "toy", "--out", str(tmp_path / "cli"), "--no-progress"]) == 2
    finally:
        systems.reload()
    err = capsys.readouterr().err
    assert "system 'toy': its trainer" in err and "KeyError" in err
    assert "bug in ldp-audit" not in err and "Traceback" not in err
    for run in ("api", "cli"):
        v = verify_run(tmp_path / run)
        assert v.ok and v.status == "interrupted", (run, v)


def test_a_plug_in_config_refusing_with_a_value_error_is_exit_2(tmp_path: Path, capsys) -> None:
    """Session 54 probe: a plug-in config whose ``__post_init__`` refused a value the plain
    Python way (``raise ValueError``, an ``assert``) was exit 3, "a bug in ldp-audit"."""
    import dataclasses

    from tests.toy_system import SYSTEM, ToyConfig

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Picky(ToyConfig):
        def __post_init__(self) -> None:
            super().__post_init__()
            if self.agents == 7:
                raise ValueError("agents must not be 7")

    systems.register(dataclasses.replace(SYSTEM, config=Picky))
    try:
        assert main(["train", "toy", "--out", str(tmp_path / "r"), "--agents", "7"]) == 2
    finally:
        systems.reload()
    err = capsys.readouterr().err
    assert "invalid toy config (Picky): ValueError: --agents must not be 7" in err, err
    assert "bug in ldp-audit" not in err and not (tmp_path / "r").exists()


def test_a_bad_seed_is_the_callers_error_not_the_trainers(tmp_path: Path) -> None:
    """Session 56 probe: ``SystemSpec.train(cfg, seed=-1)`` (or ``'1'``) reached the plug-in's
    trainer and came back as ``system 'toy': its trainer ... raised ValueError``, blaming it;
    refused by name before the trainer runs, no folder written."""
    from tests.toy_system import SYSTEM

    for bad in (-1, "1", True, 2**64):
        with pytest.raises(InvalidParameterError, match=r"^seed must be"):
            SYSTEM.train({"agents": 2}, seed=bad, run_dir=tmp_path / "r")
    assert not (tmp_path / "r").exists()


def test_a_plug_in_trainer_that_wrote_no_run_is_named(tmp_path: Path, capsys) -> None:
    """Session 54 probe: a plug-in trainer that ignored ``run_dir`` (wrote nothing) and
    returned it was printed as ``run directory: RUN``, exit 0, with no folder there."""
    import dataclasses

    from tests.toy_system import SYSTEM

    def lazy(cfg, *, seed, run_dir=None, **kw):
        return systems.TrainResult(
            system="toy", config=cfg, seed=seed, seconds=0.0, privacy={}, metrics={},
            run_dir=None if run_dir is None else Path(run_dir),
        )  # fmt: skip

    systems.register(dataclasses.replace(SYSTEM, trainer=lazy))
    try:
        with pytest.raises(UserCodeError, match="holds no finished run"):
            systems.get("toy").train({"agents": 2}, seed=0, run_dir=tmp_path / "api")
        assert systems.get("toy").train({"agents": 2}, seed=0).run_dir is None  # no run asked
        assert main(["train", "toy", "--out", str(tmp_path / "cli"), "--no-progress"]) == 2
    finally:
        systems.reload()
    captured = capsys.readouterr()
    assert "holds no finished run (no manifest.json)" in captured.err
    assert "run directory" not in captured.out


def _raising_charges(tr, cfg):
    return {f"agent-{a}": 1 for a in tr["agent_id"]}  # a column the transcript does not have


def _raising_targets(cfg):
    raise ValueError("targets bug")


def test_a_plug_in_charges_or_targets_that_raise_are_said_not_skipped(tmp_path: Path, capsys):
    """Session 54 probe: a plug-in whose ``charges`` raised had its report skip the ledger's
    comparison with the transcript in silence ("PARTIALLY VERIFIED. Claims not contradicted",
    nothing about it: a trainer that also never charged went unseen), and ``audit --run-dir``
    of one whose ``targets`` raised was exit 3, "a bug in ldp-audit"."""
    import dataclasses

    from ldp_audit.report import build_report
    from tests.toy_system import SYSTEM

    spec = dataclasses.replace(
        SYSTEM, charges=f"{__name__}:_raising_charges", targets=f"{__name__}:_raising_targets"
    )
    systems.register(spec)
    try:
        systems.get("toy").train({"agents": 4}, seed=0, run_dir=tmp_path / "run")
        model = build_report(tmp_path / "run", figures=False).model
        assert main(["audit", "--run-dir", str(tmp_path / "run")]) == 2
    finally:
        systems.reload()
    why = "its charges tests.test_systems._raising_charges raised KeyError: 'agent_id'"
    assert why in model["ledger"]["charges_not_compared"]
    assert "The ledger was not compared with the transcript's releases" in json.dumps(
        model["verdict"]
    )
    err = capsys.readouterr().err
    assert "its audit targets tests.test_systems._raising_targets raised ValueError" in err
    assert "bug in ldp-audit" not in err


def _mixed_targets(cfg):
    from ldp_audit.mechanisms import Gaussian, Laplace

    return [("approx", Gaussian(clip=1.0, noise_multiplier=2.0, delta=1e-3)),
            ("pure", Laplace(epsilon=1.0, clip=1.0))]  # fmt: skip


def _pure_targets(cfg):
    return _mixed_targets(cfg)[1:]


def test_delta_event_on_a_run_applies_to_its_approximate_claims(tmp_path: Path, capsys):
    """Session 57: `audit --run-dir RUN --delta-event` on a run releasing through a Gaussian and a
    Laplace mechanism audited the Gaussian, then refused at the Laplace (exit 2, no audit.json);
    now it applies to the Gaussian and says so, and a run of pure claims only is refused first."""
    import dataclasses
    from unittest import mock

    from tests.toy_system import SYSTEM

    run = tmp_path / "run"
    calls = []

    def fake_audit(mech, pairs, **kw):
        calls.append((mech.name, kw["delta_event"]))
        return mock.Mock(violation=False, to_dict=lambda: {}, summary=lambda: "ok")

    argv = ["audit", "--run-dir", str(run), "--delta-event", "--no-progress"]
    try:
        systems.register(dataclasses.replace(SYSTEM, targets=f"{__name__}:_mixed_targets"))
        systems.get("toy").train({"agents": 4}, seed=0, run_dir=run)
        with mock.patch("ldp_audit.audit.audit", fake_audit):
            assert main(argv) == 0
            assert calls == [("gaussian", True), ("laplace", False)]
            err = capsys.readouterr().err
            assert "--delta-event applies to approx (delta > 0), not to pure" in err
            systems.reload()
            systems.register(dataclasses.replace(SYSTEM, targets=f"{__name__}:_pure_targets"))
            assert main([*argv, "--overwrite"]) == 2
    finally:
        systems.reload()
    assert len(calls) == 2  # refused before any audit
    assert "every mechanism of --run-dir" in capsys.readouterr().err


def _raising_guess(run_dir, **kw):
    raise ValueError("attack bug")


def _dict_guess(run_dir, **kw):
    return {"accuracy": 0.5}


def test_a_plug_in_attack_that_raises_or_returns_a_dict_is_named(tmp_path: Path, capsys) -> None:
    """Session 54 probe: a plug-in attack that raised, or returned a dict where docs/systems.md
    says ``-> AttackResult``, was exit 3, "This is a bug in ldp-audit", with a traceback."""
    import dataclasses

    from tests.toy_system import SYSTEM

    attacks = {"toy-raise": f"{__name__}:_raising_guess", "toy-dict": f"{__name__}:_dict_guess"}
    systems.register(dataclasses.replace(SYSTEM, attacks=attacks))
    try:
        systems.get("toy").train({"agents": 4}, seed=0, run_dir=tmp_path / "run")
        for attack in attacks:
            assert main(["attack", attack, "--run-dir", str(tmp_path / "run")]) == 2
    finally:
        systems.reload()
    err = capsys.readouterr().err
    assert "its attack 'toy-raise' tests.test_systems._raising_guess raised ValueError" in err
    assert "its attack 'toy-dict' returned dict, not an AttackResult" in err
    assert "bug in ldp-audit" not in err and "Traceback" not in err


def _warning_guess(run_dir, **kw):
    import warnings

    from tests.toy_system import guess

    warnings.warn("\x1b[33mWARN: a library's coloured warning\x1b[0m", UserWarning, stacklevel=1)
    return guess(run_dir, **kw)


def test_an_attack_prints_a_library_warning_as_one_line(tmp_path: Path, capsys) -> None:
    """docs/systems.md: a library warning while a generated command runs is one ``WARNING:``
    line. `attack` printed Python's two-line form (Gymnasium's checker on a user env's int
    `truncated`, 2026-12-07 probe) with the terminal's colour codes, as `train` did."""
    import dataclasses

    from tests.toy_system import SYSTEM

    spec = dataclasses.replace(SYSTEM, attacks={"toy-guess": f"{__name__}:_warning_guess"})
    systems.register(spec)
    try:
        systems.get("toy").train({"agents": 4}, seed=0, run_dir=tmp_path / "run")
        assert main(["attack", "toy-guess", "--run-dir", str(tmp_path / "run")]) in (0, 1)
    finally:
        systems.reload()
    err = capsys.readouterr().err
    assert err.splitlines() == ["WARNING: WARN: a library's coloured warning"], err


def test_a_warning_at_an_env_module_import_is_one_line(tmp_path: Path, capsys, monkeypatch) -> None:
    """Gymnasium's "Overriding environment Q-v0 already in registry" at a user's --env-module
    import reached stderr as Python's two-line form (file path, source line, colour codes) in
    train, attack and audit (session 57 probe): only a generated command's trainer or attack
    printed one line. Now every command does (Matplotlib's overflow in `report` was two lines
    too)."""
    (tmp_path / "s57_warns_at_import.py").write_text(
        "import warnings\nwarnings.warn('\\x1b[33mWARN: registered twice\\x1b[0m', UserWarning)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    code = main(["audit", "--run-dir", str(tmp_path), "--env-module", "s57_warns_at_import"])
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and err[0] == "WARNING: WARN: registered twice", err
    assert len(err) == 2 and err[1].startswith("ldp-audit: error:"), err
