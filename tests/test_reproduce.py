"""The reproduction pipeline: grid, metrics, report files (fake engine) and a tiny real run."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from ldp_audit.errors import InvalidParameterError, RunDirectoryError
from ldp_audit.training.pgc_a3c import reproduce, reproduce_report
from tests.markdown_unwrap import unwrap_markdown


def _fake_engine(success_at: dict[str, int]):
    """A deterministic stand-in for ``pgc_a3c.train``: score 200 from a known submission on."""
    calls = []

    def fn(setting, seed, max_submissions):
        calls.append((setting.key, seed, setting.trials, setting.engine_mechanism))
        z = np.zeros((setting.trials, max_submissions))
        start = success_at.get(setting.key)
        if start is not None:
            # trial k succeeds at FST = start + k (so the median is known exactly)
            for k in range(setting.trials):
                z[k, start + k - 1 :] = 200.0
        return z

    fn.calls = calls
    return fn


def test_grid_settings_and_metrics_with_fake_engine(tmp_path):
    cfg = reproduce.ReproduceConfig(
        trials=4,
        max_submissions=200,
        seed=7,
        epsilons=(1.0, math.inf),
        n_resamples=200,
        stop_at_target=False,  # full-length grid runs double as Figure 2 curves
    )
    fake = _fake_engine(
        {
            "laplace-epsinf-B1": 11,  # FSTs 11..14
            "laplace-eps1-B1": 101,  # FSTs 101..104
            "prs-eps1-B100": 51,
            # prs-epsinf-B100 never succeeds
        }
    )
    res = reproduce.run_reproduction(cfg, progress=False, train_fn=fake)
    keys = [c[0] for c in fake.calls]
    # the grid, then the two Figure 2 settings that are not in it
    assert keys[:4] == ["laplace-eps1-B1", "laplace-epsinf-B1", "prs-eps1-B100", "prs-epsinf-B100"]
    assert sorted(keys[4:]) == ["laplace-eps1-B100-fig2", "prs-eps1-B1-fig2"]
    assert len(set(c[1] for c in fake.calls)) == len(keys)  # one seed stream per setting
    assert {c[3] for c in fake.calls if "epsinf" in c[0]} == {"none"}  # eps = inf is plain A3C
    s = res["settings"]
    assert s["laplace-epsinf-B1"]["fst"] == [11.0, 12.0, 13.0, 14.0]
    assert s["laplace-epsinf-B1"]["median_fst"] == 12.5
    assert s["laplace-epsinf-B1"]["relative_auc"] == 1.0
    assert s["laplace-eps1-B1"]["median_fst"] == 102.5
    # areas: mean(200 - FST) = 200 - 102.5 = 97.5 vs 200 - 12.5 = 187.5
    assert s["laplace-eps1-B1"]["relative_auc"] == pytest.approx(97.5 / 187.5)
    assert s["prs-epsinf-B100"]["success_ratio"] == 0.0
    assert s["prs-epsinf-B100"]["median_fst"] == "inf"  # the toolkit's JSON convention
    assert s["prs-epsinf-B100"]["fst"] == ["inf"] * 4
    assert s["prs-epsinf-B100"]["median_fst_ci"] == ["inf", "inf"]
    assert s["prs-epsinf-B100"]["relative_auc"] == 0.0
    assert set(res["figure2"]) == {
        "laplace-eps1-B1",
        "laplace-eps1-B100-fig2",
        "prs-eps1-B1-fig2",
        "prs-eps1-B100",
    }
    # the reproduction is a pure function of the seed and the engine's output
    again = reproduce.run_reproduction(cfg, progress=False, train_fn=_fake_engine({}))
    assert [c for c in again["settings"]] == list(s)

    paths = reproduce_report.write_report(res, tmp_path)
    names = {p.name for p in paths}
    assert names == {"results.json", "tables.md", "figure2.png", "figure3.png", "README.md"}
    loaded = json.loads((tmp_path / "results.json").read_text())
    assert loaded["settings"]["laplace-eps1-B1"]["fst"] == [101.0, 102.0, 103.0, 104.0]
    tables = (tmp_path / "tables.md").read_text()
    assert "18377.0" in tables and "102.5" in tables  # paper's and ours side by side
    assert "smaller than the paper's" in tables
    readme = (tmp_path / "README.md").read_text()
    assert "K = 4 trials per setting, at most 200 submissions" in readme
    assert (tmp_path / "figure3.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_stop_at_target_runs_figure2_separately_with_its_own_horizon():
    cfg = reproduce.ReproduceConfig(
        trials=3,
        max_submissions=300,
        seed=1,
        epsilons=(1.0, math.inf),
        n_resamples=100,
        stop_at_target=True,
        figure2_trials=2,
        figure2_submissions=120,
    )
    fake = _fake_engine({"laplace-eps1-B1": 50, "laplace-eps1-B1-fig2": 20})
    res = reproduce.run_reproduction(cfg, progress=False, train_fn=fake)
    calls = {c[0]: c for c in fake.calls}
    assert len(calls) == len(fake.calls) == 8  # 4 grid settings + 4 Figure 2 runs, no key shared
    assert calls["laplace-eps1-B1"][2] == 3 and calls["laplace-eps1-B1-fig2"][2] == 2
    assert calls["laplace-eps1-B1"][1] != calls["laplace-eps1-B1-fig2"][1]  # own seed streams
    # the grid's FSTs come from the grid runs, not from the Figure 2 runs of the same setting
    assert res["settings"]["laplace-eps1-B1"]["fst"] == [50.0, 51.0, 52.0]
    assert res["figure2_runs"]["laplace-eps1-B1-fig2"]["submissions_run"] == 2 * 120
    assert set(res["figure2"]) == {
        f"{m}-eps1-B{b}-fig2" for m in ("laplace", "prs") for b in (1, 100)
    }
    with pytest.raises(InvalidParameterError, match="figure2_submissions"):
        reproduce.ReproduceConfig(figure2_submissions=3)
    with pytest.raises(InvalidParameterError, match="acting"):
        reproduce.ReproduceConfig(acting="softmax")


def test_notes_are_included_and_comparison_flags(tmp_path):
    cfg = reproduce.ReproduceConfig(
        trials=3,
        max_submissions=50,
        epsilons=(math.inf,),
        mechanisms=("laplace",),
        figure2=False,
        n_resamples=200,
    )
    res = reproduce.run_reproduction(
        cfg, progress=False, train_fn=_fake_engine({"laplace-epsinf-B1": 5})
    )
    (tmp_path / "notes.md").write_text("## Discussion\n\nHand-written.\n")
    with pytest.raises(RunDirectoryError, match="not empty"):
        reproduce_report.write_report(res, tmp_path)
    reproduce_report.write_report(res, tmp_path, overwrite=True)
    readme = unwrap_markdown((tmp_path / "README.md").read_text())  # prose wrapped at 100
    assert readme.rstrip().endswith("Hand-written.")
    assert "argmax pi (the paper as printed)" in readme and "ablation" not in readme
    # the run's K (3 here; "K = 20" was fixed text), and the paper's noise measured, not asserted
    assert "With K = 3, a median FST" in readme and "K = 20" not in readme
    assert "0.8 (16 of 20), has the 95% Wilson interval [0.584, 0.919]" in readme
    assert "--no-stop-at-target" not in readme.split("\n")[2]
    res["config"]["acting"], res["config"]["stop_at_target"] = "sample", False
    with pytest.raises(RunDirectoryError, match="already holds a report"):
        reproduce_report.write_report(res, tmp_path)
    reproduce_report.write_report(res, tmp_path, overwrite=True)
    assert (tmp_path / "notes.md").read_text().endswith("Hand-written.\n")
    readme = unwrap_markdown((tmp_path / "README.md").read_text())
    assert "sampled from pi (**an ablation, not the paper as printed**)" in readme
    assert "--no-stop-at-target" in readme and "--acting sample" in readme
    cmp = {(c["setting"], c["measure"]): c for c in reproduce_report.comparison(res)}
    # paper median FST 1769 is far above our [5, 7]; success ratio 1.0 is inside ours (3/3)
    assert cmp[("laplace-epsinf-B1", "median_fst")]["paper_vs_ci"] == "above"
    assert cmp[("laplace-epsinf-B1", "success_ratio")]["paper_vs_ci"] == "inside"
    assert not (tmp_path / "figure2.png").exists()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"trials": 0},
        {"max_submissions": 5},
        {"mechanisms": ("gauss",)},
        {"epsilons": (-1.0,)},
        {"seed": -1},
        {"confidence": 1.0},
        {"figure2_trials": 0},
    ],
)
def test_config_validation(kwargs):
    with pytest.raises(InvalidParameterError):
        reproduce.ReproduceConfig(**kwargs)


@pytest.mark.parametrize(
    "name, value, words",
    [
        ("trials", True, "trials must be an integer >= 1, got True"),  # a bool is no count
        ("trials", 2.0, "trials must be an integer >= 1, got 2.0"),
        ("epsilons", (1.0, math.nan), "epsilons must be a real number > 0, got nan"),
        ("epsilons", (), "epsilons must be a non-empty tuple, got ()"),
        ("epsilons", "1", "epsilons must be a non-empty tuple, got '1'"),
        ("confidence", math.inf, "confidence must be a real number in (0, 1), got inf"),
        ("aggregator_lr", 0.0, "aggregator_lr must be None or a real number > 0, got 0.0"),
        ("chunks", 0, "chunks must be None or an integer >= 1, got 0"),
        # session 58: taken (a Python int beyond int64; the CLI's parse_int refused it)
        ("trials", 2**63, "trials must be <= 9,223,372,036,854,775,807, got 922"),
        ("figure2", 1, "figure2 must be True or False, got 1"),
        ("mechanisms", ("laplace", "gauss"), "mechanisms must be one of laplace, prs; got"),
        ("engine", True, "engine must be one of fused, lockstep; got True"),
    ],
)
def test_config_fields_refused_by_name_and_value(name, value, words):
    """check_fields (ldp_audit.training.reproduction) reads each field's type and bounds."""
    with pytest.raises(InvalidParameterError) as e:
        reproduce.ReproduceConfig(**{name: value})
    assert words in str(e.value)
    ok = reproduce.ReproduceConfig(epsilons=(1, math.inf), aggregator_lr=1e-3, figure2_trials=None)
    assert ok.epsilons == (1, math.inf)  # inf is a value here (the non-private baseline)


def test_engine_shape_mismatch_is_an_error():
    cfg = reproduce.ReproduceConfig(
        trials=2, max_submissions=20, epsilons=(1.0,), mechanisms=("prs",), figure2=False
    )
    with pytest.raises(InvalidParameterError, match="shape"):
        reproduce.run_reproduction(cfg, progress=False, train_fn=lambda s, seed, n: np.zeros(3))


def test_tiny_real_reproduction_is_seeded(tmp_path):
    """Two trials, 60 submissions, through the real engine (train_grid): complete and seeded."""
    pytest.importorskip("ldp_audit.training.pgc_a3c")
    cfg = reproduce.ReproduceConfig(
        trials=2,
        max_submissions=60,
        epsilons=(1.0, math.inf),
        n_resamples=200,
        stop_at_target=False,
    )
    a = reproduce.run_reproduction(cfg, progress=False)
    b = reproduce.run_reproduction(cfg, progress=False)
    assert list(a["settings"]) == [
        "laplace-eps1-B1",
        "laplace-epsinf-B1",
        "prs-eps1-B100",
        "prs-epsinf-B100",
    ]
    for key, entry in a["settings"].items():
        assert entry["submissions_run"] == 2 * 60  # no stop_at_target: full length
        assert len(entry["fst"]) == 2
        assert entry["fst"] == b["settings"][key]["fst"]
    assert a["figure2"] == b["figure2"]  # bit-for-bit: same mean mu_n curves
    assert any(v is not None for c in a["figure2"].values() for v in c["mean_mu"])
    reproduce_report.write_report(a, tmp_path)
    assert (tmp_path / "figure2.png").stat().st_size > 1000


def test_table3_paper_one_is_the_reference_itself():
    """The paper's Table 3 eps = inf 1.0 (printed in the PRS row) is the non-private curve over
    itself: it is compared with our reference (Laplace eps = inf, |B| = 1), whose relative AUC is
    1 exactly (no bootstrap interval), never with the non-private |B| = 100 run."""
    # the reference's interval as an older results.json has it (two samples resampled)
    ref = {"mechanism": "laplace", "epsilon": "inf", "relative_auc": 1.0}
    ref["relative_auc_ci"] = [0.43, 2.39]
    res = {
        "reference": "laplace-epsinf-B1",
        "settings": {
            "laplace-epsinf-B1": ref,
            "prs-epsinf-B100": {
                **ref,
                "mechanism": "prs",
                "relative_auc": 0.0,
                "relative_auc_ci": [0.0, 0.0],
            },
        },
    }
    cmp = {(c["setting"], c["measure"]): c for c in reproduce_report.comparison(res)}
    assert set(cmp) == {("laplace-epsinf-B1", "relative_auc")}
    assert cmp["laplace-epsinf-B1", "relative_auc"]["ci"] == [1.0, 1.0]
    assert cmp["laplace-epsinf-B1", "relative_auc"]["paper_vs_ci"] == "inside"


def test_comparison_reads_inf_endpoints():
    never = "inf"
    res = {
        "settings": {
            "laplace-eps1-B1": {
                "mechanism": "laplace",
                "epsilon": 1.0,
                "median_fst": never,
                "median_fst_ci": [never, never],  # [inf, inf]: never within the horizon
                "success_ratio": 0.0,
                "success_ratio_ci": [0.0, 0.16],
            }
        }
    }
    cmp = {c["measure"]: c["paper_vs_ci"] for c in reproduce_report.comparison(res)}
    assert cmp == {"median_fst": "below", "success_ratio": "above"}


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {
            "trials": 20,
            "max_submissions": 90_000,
            "stop_at_target": True,
            "figure2_trials": 5,
            "figure2_submissions": 20_000,
            "seed": 3,
        },
        {"trials": 2, "max_submissions": 500, "figure2": False, "acting": "sample"},
        {"trials": 3, "max_submissions": 100, "stop_at_target": False, "figure2_trials": 2},
    ],
)
def test_report_command_reruns_the_same_config(kwargs):
    """The command printed in the report's README parses back (through the real CLI parser) to
    the configuration that produced the report."""
    import dataclasses
    import shlex

    from ldp_audit.cli import build_parser

    cfg = reproduce.ReproduceConfig(**kwargs)
    d = dataclasses.asdict(cfg)
    cmd = reproduce_report.reproduce_command(d)
    argv = shlex.split(cmd)
    assert argv[:3] == ["ldp-audit", "reproduce", "pgc-a3c"]
    args = build_parser().parse_args(argv[1:])
    assert args.trials == cfg.trials
    assert args.max_submissions == cfg.max_submissions
    assert args.seed == cfg.seed
    assert args.stop_at_target == cfg.stop_at_target
    assert (not args.no_figure2) == cfg.figure2
    if cfg.figure2:
        assert args.figure2_trials == cfg.figure2_trials
        assert args.figure2_submissions == cfg.figure2_submissions
    assert args.acting == cfg.acting


def test_reading_options_reach_the_engine_and_the_command_line():
    import warnings

    from ldp_audit.training.pgc_a3c.reproduce import (
        ReproduceConfig,
        _settings,
        engine_config,
        reading_options,
    )
    from ldp_audit.training.pgc_a3c.reproduce_report import reproduce_command

    cfg = ReproduceConfig(clip_kind="coordinate", aggregator="adam", aggregator_lr=0.01)
    assert reading_options(cfg, "laplace") == {
        "clip_kind": "coordinate", "aggregator": "adam", "aggregator_lr": 0.01,
    }  # fmt: skip
    assert "clip_kind" not in reading_options(cfg, "prs")  # PRS clips its own coordinates
    assert reading_options(ReproduceConfig(), "laplace") == {}  # printed settings unchanged
    grid, _ = _settings(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        engine = [engine_config(s, 100, "argmax", reading_options(cfg, s.engine_mechanism))
                  for s in grid]  # fmt: skip
    lap = [c for c in engine if c.mechanism == "laplace"]
    assert lap and all(c.true_epsilon_per_submission == 112 * c.epsilon for c in lap)
    assert all(c.aggregator == "adam" for c in engine)
    cmd = reproduce_command({**dataclasses.asdict(cfg)})
    assert "--clip-kind coordinate" in cmd and "--aggregator adam" in cmd
    assert "--aggregator-lr 0.01" in cmd
    with pytest.raises(InvalidParameterError, match="clip_kind"):
        ReproduceConfig(clip_kind="box")


@pytest.mark.parametrize(
    ("kw", "words"),
    [
        ({"trials": 0}, "trials must be an integer >= 1, got 0"),
        ({"trials": True}, "trials must be an integer >= 1, got True"),
        ({"max_submissions": 5}, "max_submissions must be an integer >= 10, got 5"),
        ({"audit_samples": 999}, "audit_samples must be an integer >= 1000, got 999"),
        ({"n_resamples": 99}, "n_resamples must be an integer >= 100, got 99"),
        ({"confidence": 1.0}, "confidence must be a real number in (0, 1), got 1.0"),
        ({"audit_confidence": True}, "audit_confidence must be a real number in (0, 1)"),
        ({"audit_epsilons": ()}, "audit_epsilons must be a non-empty tuple, got ()"),
        ({"audit_epsilons": (0.0,)}, "audit_epsilons must be a real number > 0, got 0.0"),
        ({"audit_epsilons": (math.inf,)}, "audit_epsilons must be a real number > 0, got inf"),
        ({"audit_epsilons": ("1",)}, "audit_epsilons must be a real number > 0, got '1'"),
        ({"controls": "yes"}, "controls must be True or False, got 'yes'"),
        ({"workers": 0}, "workers must be an integer >= 1, got 0"),
    ],
)
def test_readings_config_refuses_bad_fields_by_name(kw, words):
    from ldp_audit.training.pgc_a3c.readings import ReadingsConfig

    with pytest.raises(InvalidParameterError) as e:
        ReadingsConfig(**kw)
    assert words in str(e.value)


def test_readings_report_tiny_run(tmp_path):
    from ldp_audit.training.pgc_a3c.readings import (
        READINGS,
        ReadingsConfig,
        run_readings,
        write_readings_report,
    )

    cfg = ReadingsConfig(
        trials=1, max_submissions=20, audit_samples=2000, audit_epsilons=(1.0,), n_resamples=100
    )
    res = run_readings(cfg, progress=False)
    st = res["settings"]
    assert len(st) == len(READINGS) * 2 * 5 + 3
    coord = st["coordinate-argmax-laplace-eps1"]
    assert coord["privacy"]["epsilon_per_submission"] == 112.0
    assert st["printed-argmax-laplace-eps1"]["privacy"]["epsilon_per_submission"] == 1.0
    audits = {(a["clip_kind"], a["claim"].split()[0]): a for a in res["audits"]}
    assert set(audits) == {("l1", "claimed"), ("coordinate", "claimed"), ("coordinate", "true")}
    assert audits[("coordinate", "true")]["claimed_epsilon"] == 112.0
    paths = write_readings_report(res, tmp_path / "r")
    text = (tmp_path / "r" / "README.md").read_text()
    assert "--readings --trials 1 --max-submissions 20" in text
    assert "112 x epsilon" in text and "| **paper** |" in text
    assert json.loads(paths[0].read_text())["config"]["trials"] == 1
