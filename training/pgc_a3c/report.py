"""PGC-A3C's report sections (registered as ``report_sections`` of the ``pgc-a3c`` system).

What only PGC-A3C knows, given to the generic report (:mod:`ldp_audit.report.plugin`):

- its run layout, validated: ``transcript.npz`` (trial, agent, submission, theta_index, report,
  score, thetas), ``model.npz`` (theta), ``metrics.json``'s ``zeta``, ``secrets.npz``'s
  gravity; a malformed file refuses the report, naming it;
- the ledger id of every submission (``<trial>/<agent>``, in arrival order): the core checks
  that every submitting agent was charged and draws the spend over submissions;
- the section "Transcript": trials, submissions, d, distinct broadcast thetas, and the one story
  of workers, agents and reports (also a sentence of the verdict);
- the section "Learning": mu_n (eq. 25), FST (eq. 26), success ratio (eq. 27) per trial and
  the figure, beside the paper's Tables 1-3 (Ono & Takahashi 2020);
- its rows of the privacy statement (privacy unit: the agent; local Laplace / PRS reports).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError, RunDirectoryError
from ldp_audit.mechanisms.no_privacy import NoPrivacy
from ldp_audit.report.markdown import count_noun as noun
from ldp_audit.report.plugin import missing_files, section
from ldp_audit.rundir import RunDir
from ldp_audit.rundir.files import fmt_number, json_real
from ldp_audit.training.pgc_a3c.metrics import TARGET_SCORE, WINDOW, moving_average, ratio_ci
from ldp_audit.training.pgc_a3c.paper import paper_row
from ldp_audit.training.reproduction_statement import SCORE_WORDS
from ldp_audit.training.systems import PGC_SCHEMA

__all__ = [
    "REQUIRED_FILES",
    "report_sections",
    "load_pgc",
    "PgcRun",
    "zeta_matrix",
    "mu_matrix",
    "fst_values",
    "learning_model",
    "story_sentence",
    "statement_facts",
    "gym_report",
]

#: Files a complete PGC-A3C run has; its report cannot be built without them.
REQUIRED_FILES = ("config.json", "ledger.sqlite", "transcript.npz", "metrics.json", "model.npz")


# ---------------------------------------------------------------------- loading


def _err(path: Path, what: str) -> RunDirectoryError:
    return RunDirectoryError(f"{path}: {what}")


def _check_zeta(path: Path, m: dict[str, Any]) -> None:
    if "zeta" not in m:
        raise _err(path, "missing key 'zeta' (the per-submission scores, one list per trial)")
    zeta = m["zeta"]
    if not isinstance(zeta, list) or not all(isinstance(z, list) for z in zeta):
        raise _err(path, "'zeta' must be a list (one per trial) of lists of scores")
    for i, z in enumerate(zeta):
        for v in z:
            if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool)):
                raise _err(path, f"'zeta'[{i}] must hold numbers, got {v!r}")


@dataclass(eq=False)
class PgcRun:
    """A PGC-A3C run's own files, validated (see :func:`load_pgc`).

    Attributes:
        path: the run directory.
        config: config.json.
        metrics: metrics.json (with ``zeta``).
        transcript: transcript.npz's arrays.
        secrets: secrets.npz's arrays, or None when absent.
    """

    path: Path
    config: dict[str, Any]
    metrics: dict[str, Any]
    transcript: dict[str, np.ndarray]
    secrets: dict[str, np.ndarray] | None

    def releases(self) -> list[str]:
        """The ledger id (``"<trial>/<agent>"``) of every transcript row, in arrival order."""
        pairs = np.stack([self.transcript[k].astype(np.int64) for k in ("trial", "agent")], 1)
        return [f"{t}/{a}" for t, a in pairs.tolist()]


def load_pgc(
    run_dir: str | Path, config: dict[str, Any], metrics: dict[str, Any]
) -> PgcRun | list[str]:
    """Validate a PGC-A3C run's own files.

    Returns:
        The :class:`PgcRun`, or the list of missing files of a run that did not complete.

    Raises:
        RunDirectoryError: a complete run lacks a file, or a file is malformed (named).
    """
    path = Path(run_dir)
    missing = missing_files(path, config, REQUIRED_FILES)
    if missing:
        return missing
    mech = config.get("mechanism")
    if not isinstance(mech, dict) or not isinstance(mech.get("name"), str):
        what = "missing key(s) mechanism" if "mechanism" not in config else None
        raise _err(
            path / "config.json",
            what or f"'mechanism' must be an object with a string 'name', got {mech!r}",
        )
    rd = RunDir(path)
    tr = rd.transcript(PGC_SCHEMA)
    rep, thetas = tr["report"], tr["thetas"]
    if thetas.shape[1] != rep.shape[1]:
        raise _err(
            path / "transcript.npz", f"'thetas' must be (V, d={rep.shape[1]}), got {thetas.shape}"
        )
    if tr["trial"].size and (tr["trial"].min() < 0 or tr["agent"].min() < 0):
        raise _err(path / "transcript.npz", "'trial' and 'agent' must be >= 0")
    _check_zeta(path / "metrics.json", metrics)
    model = rd.arrays("model.npz")
    if "theta" not in model or model["theta"].ndim != 2:
        raise _err(path / "model.npz", "must hold 'theta' of shape (K, d)")
    if model["theta"].shape[1] != rep.shape[1]:
        raise _err(
            path / "model.npz",
            f"'theta' has d={model['theta'].shape[1]} but the "
            f"transcript's reports have d={rep.shape[1]}",
        )
    secrets = rd.secrets(for_scoring=True) if (path / "secrets.npz").is_file() else None
    g = None if secrets is None else secrets.get("gravity")
    if g is not None and g.shape != (tr["trial"].shape[0],):
        raise _err(
            path / "secrets.npz",
            f"'gravity' must have shape (N={tr['trial'].shape[0]},), got {g.shape}",
        )
    return PgcRun(path, config, metrics, tr, secrets)


# ---------------------------------------------------------------------- learning (eqs. 25-27)


def zeta_matrix(run: PgcRun) -> np.ndarray:
    """metrics.json's ``zeta`` as a (trials, N) float array, NaN-padded (None: NaN)."""
    rows = run.metrics["zeta"]
    out = np.full((len(rows), max((len(r) for r in rows), default=0)), np.nan)
    for i, r in enumerate(rows):
        out[i, : len(r)] = [np.nan if v is None else float(v) for v in r]
    return out


def mu_matrix(run: PgcRun) -> np.ndarray:
    """mu_n per trial: eq. (25) on zeta (metrics.moving_average; a run with no submission yet
    has no mu_n)."""
    z = zeta_matrix(run)
    return moving_average(z, int(run.metrics.get("window", WINDOW))) if z.shape[1] else z


def fst_values(run: PgcRun) -> np.ndarray:
    """FST per trial (eq. 26): metrics.json's ``fst`` (the trainer's list, "inf" for never),
    else from mu_n."""
    fst = run.metrics.get("fst")
    z = zeta_matrix(run)
    if isinstance(fst, list) and len(fst) == z.shape[0]:
        vals = [json_real(v) for v in fst]
        return np.array([math.inf if v is None else v for v in vals])
    if z.shape[1] == 0:
        return np.full(z.shape[0], np.inf)
    from ldp_audit.training.pgc_a3c.metrics import first_success_time

    thr = float(run.metrics.get("target_score", TARGET_SCORE))
    return first_success_time(z, thr, int(run.metrics.get("window", WINDOW)))


def learning_model(run: PgcRun) -> dict[str, Any]:
    """Per-trial scores, mu_n, FST, the success ratio and the paper's row (JSON-able)."""
    z = zeta_matrix(run)
    mu = mu_matrix(run)
    fst = fst_values(run)
    horizon = int(run.config["config"].get("max_submissions", z.shape[1]) or z.shape[1])
    trials = []
    for i in range(z.shape[0]):
        zi = z[i][~np.isnan(z[i])]
        mi = mu[i][~np.isnan(mu[i])]
        trials.append(
            {
                "trial": i,
                "submissions": int(zi.size),
                "mean_score": float(zi.mean()) if zi.size else None,
                "last_score": float(zi[-1]) if zi.size else None,
                "best_mu": float(mi.max()) if mi.size else None,
                "fst": float(fst[i]),
            }
        )
    mech = run.config["mechanism"]
    # the non-private baseline's config names no epsilon: it is inf (the paper's eps = inf column)
    eps = json_real(mech.get("epsilon", "inf" if mech.get("name") == NoPrivacy.name else None))
    paper = paper_row(str(mech["name"]), eps) if eps is not None else None
    return {
        "status": "run",
        "trials": trials,
        "target_score": float(run.metrics.get("target_score", TARGET_SCORE)),
        "window": int(run.metrics.get("window", WINDOW)),
        "horizon": horizon,
        "success_ratio": float(np.isfinite(fst).mean()) if fst.size else None,
        "median_fst": float(np.median(fst)) if fst.size else None,
        "relative_auc": json_real(run.metrics.get("relative_auc")),
        "extra_metrics": {
            k: v
            for k, v in run.metrics.items()
            if k not in ("zeta", "mu", "fst", "privacy") and len(json.dumps(v, default=str)) <= 200
        },
        "paper": paper,
    }


def learning_figure(run: PgcRun, learn: dict[str, Any]) -> bytes:
    """Scores zeta_n and mu_n (eq. 25) per trial, FST (eq. 26) and the success ratio (eq. 27)."""
    from matplotlib.figure import Figure

    from ldp_audit.report.plugin import COLORS, figure_png, legend_below, thin

    blue, grey = COLORS[0], COLORS[4]
    paper_horizon = 90_000  # the horizon of the paper's Tables 1-3 (submissions per trial)
    z, mu, fst = zeta_matrix(run), mu_matrix(run), fst_values(run)
    fig = Figure(figsize=(10, 4.3), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2, width_ratios=(2, 1))
    n = np.arange(1, z.shape[1] + 1)
    idx = thin(z.shape[1])
    colors = [*COLORS[:4], "#9467bd", "#8c564b"]
    for i in range(z.shape[0]):
        c = colors[i % len(colors)]
        lab = "" if z.shape[0] > 6 else f" (trial {i})"
        ax1.plot(n[idx], z[i, idx], color=c, lw=0.6, alpha=0.3)
        ax1.plot(n[idx], mu[i, idx], color=c, lw=1.5, label=f"mu_n{lab}" if i < 6 else None)
        if math.isfinite(fst[i]):
            ax1.axvline(fst[i], color=c, ls="--", lw=0.8)
    ax1.axhline(
        learn["target_score"], color="k", ls=":", lw=1, label=f"target {learn['target_score']:g}"
    )
    ax1.set(xlabel="submission n", ylabel="score")
    reached = int(np.isfinite(fst).sum())
    if reached:
        ax1.plot([], [], color="k", ls="--", lw=0.8, label="FST (eq. 26)")
        title = "Learning curve: zeta_n (faint), mu_n (eq. 25); dashed = FST"
    else:
        title = "Learning curve: zeta_n (faint), mu_n (eq. 25); no trial reached the target"
    ax1.set_title(title, fontsize=10, wrap=True)
    legend_below(ax1, ncols=4)
    horizon = max(learn["horizon"], z.shape[1], 1)
    grid = np.linspace(0, horizon, 400)
    ratio = (fst[None, :] <= grid[:, None]).mean(axis=1) if fst.size else np.zeros_like(grid)
    ax2.step(grid, ratio, where="post", color=blue, label="ours")
    paper = learn["paper"]
    if paper and paper.get("success_ratio") is not None:
        # the paper's value is measured at 90,000 submissions: a point there, never a line
        # across a shorter horizon
        if horizon >= paper_horizon:
            ax2.plot(
                [paper_horizon],
                [paper["success_ratio"]],
                "D",
                color=grey,
                label="paper, at 90,000 (Table 2)",
            )
        else:
            ax2.annotate(
                f"paper: {paper['success_ratio']:g} at 90,000\nsubmissions (Table 2; off\nthis "
                f"axis, which ends\nat {horizon:,})",
                (0.02, 0.55),
                xycoords="axes fraction",
                fontsize=8,
                color=grey,
            )
    ax2.set(ylim=(-0.02, 1.02), xlabel="submissions n", ylabel="success ratio")
    ax2.set_title(f"Success ratio (eq. 27), {noun(int(fst.size), 'trial')}", fontsize=10, wrap=True)
    legend_below(ax2, ncols=1)
    return figure_png(fig)


def _paper_note(learn: dict[str, Any], trials: int) -> str:
    if learn["paper"] is None:
        return "The paper (Ono & Takahashi 2020) reports no setting matching this run."
    return (
        f"Paper numbers are for the same mechanism and epsilon over 20 trials of up to 90,000 "
        f"submissions; this run has {trials} trial(s) of up to {learn['horizon']:,} "
        f"submissions, so its numbers are not comparable unless the horizon and trial count "
        f"match."
    )


#: the per-trial table of the learning section: learning_model's trial key -> column
_TRIAL_COLUMNS = {
    "trial": "trial",
    "submissions": "submissions",
    "mean_score": "mean score",
    "last_score": "last score",
    "best_mu": "best mu_n",
    "fst": "FST (eq. 26)",
}


def _learning_section(run: PgcRun, learn: dict[str, Any], trials: int, figures: bool) -> dict:
    paper = learn["paper"] or {}
    tables = [
        ("", [*_TRIAL_COLUMNS.values()], [[r[k] for k in _TRIAL_COLUMNS] for r in learn["trials"]]),
        (
            "Beside the paper (Ono & Takahashi 2020, Tables 1-3)",
            ["measure", "ours (this run)", "paper (20 trials, 90,000 submissions)"],
            [
                ["median FST (Table 1)", _fst_cell(learn), paper.get("median_fst")],
                ["success ratio (Table 2)", _ratio_cell(learn), paper.get("success_ratio")],
                ["relative AUC (Table 3)", learn["relative_auc"], paper.get("relative_auc")],
            ],
        ),
    ]
    if learn["extra_metrics"]:
        rows = [[k, _cell(v)] for k, v in learn["extra_metrics"].items()]
        tables.append(("Other metrics (metrics.json)", ["metric", "value"], rows))
    fig = {"learning": learning_figure(run, learn)} if figures else None
    title, para = "Learning: mu_n, FST and success ratio", _paper_note(learn, trials)
    return section("learning", title, [para], *tables, figures=fig, data=learn)


def _ratio_cell(learn: dict[str, Any]) -> Any:
    """The success ratio with its 95% Wilson interval and counts, as `train pgc-a3c` prints it."""
    n = len(learn["trials"])
    if not n:
        return learn["success_ratio"]
    k = sum(math.isfinite(t["fst"]) for t in learn["trials"])
    lo, hi = (fmt_number(v) for v in ratio_ci(k, n))
    return f"{fmt_number(k / n)} [{lo}, {hi}] ({k} of {noun(n, 'trial')}, 95% Wilson)"


def _fst_cell(learn: dict[str, Any]) -> Any:
    """The median FST with its distribution-free interval (order statistics; inf = a trial that
    never reached the target), or why it has none."""
    from ldp_audit.training.frd.trends import median_ci

    fst = [t["fst"] for t in learn["trials"]]
    if len(fst) < 2:
        return f"{fmt_number(learn['median_fst'])} ({noun(len(fst), 'trial')}: no interval)"
    med, lo, hi, cover = median_ci(fst)
    return (
        f"{fmt_number(med)} [{fmt_number(lo)}, {fmt_number(hi)}] ({noun(len(fst), 'trial')}, "
        f"order statistics, coverage {cover:.0%})"
    )


def _cell(v: Any) -> Any:
    """A metric for a table cell: a per-trial list reads as its values (one trial: the value;
    several: "a, b, c (per trial)"), never as raw JSON such as ``[3000]``."""
    if v is None or isinstance(v, (str, int, float)):
        return v
    if isinstance(v, list) and all(x is None or isinstance(x, (str, int, float)) for x in v):
        words = ["yes" if x is True else "no" if x is False else str(x) for x in v]
        return words[0] if len(words) == 1 else ", ".join(words) + " (per trial)"
    return json.dumps(v, default=str)


# ---------------------------------------------------------------------- workers, agents, reports


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) else None


def agents_story(run: PgcRun, ledger_agents: list[str], ids: set[str], reports: int) -> dict:
    """Workers, agents and reports of the run told once, so every count on the page fits one
    story (workers run concurrently; each agent submits ``rounds`` reports)."""
    cfg = run.config.get("config") or {}
    priv = run.metrics.get("privacy") if isinstance(run.metrics.get("privacy"), dict) else {}
    started = priv.get("agents_per_trial")
    started_total = (
        int(sum(started))
        if isinstance(started, list) and all(isinstance(x, int) for x in started)
        else None
    )
    submitted = len(ids)
    charged_only = set(ledger_agents) - ids
    return {
        "workers": _int(cfg.get("n_agents")),
        "rounds": _int(cfg.get("rounds")),
        "reports": reports,
        "agents_submitted": submitted,
        "agents_in_ledger": len(ledger_agents),
        "agents_started": started_total,
        "agents_started_not_submitted": None
        if started_total is None
        else max(started_total - submitted, 0),
        "agents_charged_not_submitted": len(charged_only),
        "engine": str(run.config.get("engine") or cfg.get("target") or ""),
    }


def story_sentence(st: dict[str, Any]) -> str:
    """Workers, agents and reports of a PGC-A3C run in one sentence."""
    rounds = st["rounds"]
    per = (
        f"each agent submits {noun(rounds, 'report')} (section 3.2.1), "
        if rounds
        else "each agent submits its reports, "
    )
    flower = st["engine"].startswith("flower")
    lead = (
        f"{noun(st['workers'], 'Flower client')} (SuperNodes) took part; "
        if flower and st["workers"]
        else f"{noun(st['workers'], 'worker')} ran concurrently (config n_agents); "
        if st["workers"]
        else ""
    )
    if rounds == 1:
        per = "every episode is played by a new agent that submits 1 report (section 3.2.1), "
    s = (
        f"{lead}{per}so the {noun(st['reports'], 'report')} came from "
        f"{noun(st['agents_submitted'], 'agent')}, the privacy units; the ledger charged "
        f"{noun(st['agents_in_ledger'], 'agent')}."
    )
    if st["agents_started_not_submitted"]:
        k = st["agents_started_not_submitted"]
        s += (
            f" {noun(st['agents_started'], 'agent')} were started: the "
            f"{noun(k, 'agent')} whose episodes were still running when the run stopped "
            "released nothing."
        )
    if st["agents_charged_not_submitted"]:
        k = st["agents_charged_not_submitted"]
        s += (
            f" {noun(k, 'agent')} {'was' if k == 1 else 'were'} charged ahead and never "
            "released (the fused engine charges an agent before its first episode: the safe "
            "direction)."
        )
    return s


def _transcript_section(run: PgcRun, story: dict[str, Any], sentence: str) -> dict[str, Any]:
    tr = run.transcript
    shape = {
        "submissions": int(tr["trial"].shape[0]),
        "trials": int(np.unique(tr["trial"]).size),
        "dim": int(tr["report"].shape[1]),
        "distinct_thetas": int(tr["thetas"].shape[0]),
    }
    rows = [
        ["trials / submissions / d", "{trials} / {submissions} / {dim}".format(**shape)],
        ["distinct broadcast thetas", shape["distinct_thetas"]],
        ["workers (config n_agents)", story["workers"]],
        ["reports per agent (config rounds)", story["rounds"]],
        ["agents that submitted", story["agents_submitted"]],
        ["agents in the ledger", story["agents_in_ledger"]],
    ]
    title, para = "Transcript: workers, agents and reports", sentence[0].upper() + sentence[1:]
    table = ("", ["field", "value"], rows)
    return section("transcript", title, [para], table, data={**shape, "story": story})


# ---------------------------------------------------------------------- privacy statement


def statement_facts(
    config: dict[str, Any],
    metrics: dict[str, Any],
    ledger: Any,
    claim: dict[str, Any],
    *,
    private: str = "its gravity",
) -> dict[str, Any]:
    """PGC-A3C's rows of the privacy statement (``[value, source]`` each; ``unit``); ``private``
    names an agent's private data (CartPole's gravity; a Gymnasium run's private parameter)."""
    from ldp_audit.report.plugin import events_words, method_words, versions_words

    inner = config.get("config") or {}
    mech = config.get("mechanism") or {}
    flower = str(config.get("engine", "")).startswith("flower")
    rounds = _int(inner.get("rounds"))
    clip = mech.get("clip")
    who = "the Flower server (ServerApp)" if flower else "the aggregator (the training server)"
    unit = (
        f"agent: {'the 1 report' if rounds == 1 else f'all {rounds:,} reports'} of one agent, "
        f"whose private data is {private} and the trajectories it plays"
        if rounds
        else "agent (its reports: number not recorded)"
    )
    _, ev = events_words(ledger, "local")
    return {
        "privacy_unit": [unit, "config.json config.rounds; section 3.2.1 of Ono & Takahashi 2020"],
        "adjacency": [
            "replace: any two inputs of one agent (local DP compares every pair of the "
            f"agent's possible reports), each report clipped to L1 norm {clip}/2 "
            f"(sensitivity {clip})"
            if clip is not None
            else "replace: any two inputs of one agent (local DP)",
            "definition of local DP; config.json mechanism.clip",
        ],
        "trust_model": [
            "local: each agent randomises its own report before it leaves it; the "
            "aggregator is not trusted",
            "metrics.json privacy.local"
            if "local" in (metrics.get("privacy") or {})
            else "the trainer's design (training/pgc_a3c/)",
        ],
        "released": [
            f"each agent's noisy gradient report, to {who} and to whoever reads the transcript "
            "(transcript.npz); the model is computed from the reports only (post-processing); "
            f"{SCORE_WORDS}",
            "the trainer's design; transcript.npz",
        ],
        "accountant": [
            f"{method_words(claim.get('method'))} of the ledger's charges ({ev}); "
            f"{versions_words(config)}",
            "ledger.sqlite; config.json versions",
        ],
        "sampling": [
            "none assumed (no subsampling amplification is claimed: every report is charged); "
            "matches: yes, nothing to match",
            "ledger events (no PoissonSampledEvent)",
        ],
        "mu_gdp": ["not applicable (pure epsilon-DP Laplace noise, not Gaussian)", "mechanism"],
        "unit": "agent",
    }


# ---------------------------------------------------------------------- the entry point


def report_sections(
    run_dir: Path, extra: list[Path] | None = None, *, context: Any = None
) -> dict[str, Any]:
    """PGC-A3C's part of its run's report (the contract: :mod:`ldp_audit.report.plugin`).

    Raises:
        RunDirectoryError: the run lacks a file of a complete PGC-A3C run, or one is malformed.
    """
    if context is None:
        raise InvalidParameterError(
            "PGC-A3C's report sections need the report's context (context=None given): build "
            "them with ldp_audit.report.build_report(run_dir)"
        )
    run = context.run
    statement = statement_facts(run.config, run.metrics, context.ledger, context.claim)
    pgc = load_pgc(run_dir, run.config, run.metrics)
    if isinstance(pgc, list):  # an interrupted run: the ledger and status are still reported
        return {"missing": pgc, "statement": statement}
    releases = pgc.releases()
    story = agents_story(pgc, list(context.ledger.agents), set(releases), len(releases))
    sentence = story_sentence(story)
    trials = int(np.unique(pgc.transcript["trial"]).size)
    return {
        "sections": [
            _transcript_section(pgc, story, sentence),
            _learning_section(pgc, learning_model(pgc), trials, bool(context.figures)),
        ],
        "releases": releases,
        "statement": statement,
        "claimed": [sentence[0].upper() + sentence[1:]],
    }


def gym_report(
    run_dir: Path, extra: list[Path] | None = None, *, context: Any = None
) -> dict[str, Any]:
    """PGC-A3C on a Gymnasium environment (system ``pgc-a3c-gym``): PGC-A3C's statement rows,
    the private data being the run's private parameter (``config.json`` ``private_parameter``)."""
    if context is None:
        return {}
    run = context.run
    param = run.config.get("private_parameter")
    name = param.get("name") if isinstance(param, dict) else None
    private = f"its {name} (the private parameter)" if isinstance(name, str) else "its parameter"
    facts = statement_facts(run.config, run.metrics, context.ledger, context.claim, private=private)
    sections = []
    if isinstance(param, dict):
        values = param.get("values") if isinstance(param.get("values"), list) else []
        rows = [
            ["environment", str(param.get("env_id"))],
            ["parameter", str(name)],
            ["candidate values", ", ".join(f"{v:g}" for v in values)],
            ["environment module", str(param.get("env_module") or "none")],
        ]
        mod = param.get("env_module")  # a user env's attack names its module (else exit 2)
        cmd = "ldp-audit attack dynamics --run-dir RUN" + (f" --env-module {mod}" if mod else "")
        para = (
            f"Each agent's private data is the parameter `{name}` of `{param.get('env_id')}`, one "
            f"of {len(values)} candidate values; `{cmd}` guesses it from an agent's reports."
        )
        title = "Private parameter (Gymnasium environment)"
        table = ("", ["field", "value"], rows)
        sections.append(section("private-parameter", title, [para], table, data=param))
    pgc = load_pgc(run_dir, run.config, run.metrics)  # its releases, checked against the ledger
    releases = {} if isinstance(pgc, list) else {"releases": pgc.releases()}
    return {"sections": sections, "statement": facts, **releases}
