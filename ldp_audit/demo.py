"""The one-command demo: train, audit, attack and report, end to end (``make demo``).

``run_demo(out_dir)`` runs the main job of the toolkit on embedded defaults, calling only the
public APIs of the other packages:

1. a short PGC-A3C run (Ono & Takahashi 2020, Algorithm 1) with the Laplace mechanism
   (Alg. 2, eqs. 19-21) at epsilon = 5 per report, 3 concurrent workers whose every episode is
   played by a new agent (one report each: the agent is the privacy unit), charging every
   report to the SQLite ledger
   ``out_dir/ledger.sqlite`` before it is released (``ldp_audit.training.pgc_a3c.train``);
2. an audit of the mechanism it used: the white-box exact epsilon and a black-box empirical
   lower bound with confidence, as two verdicts (distribution: exact arithmetic;
   implementation: floating-point bits too) and a privacy profile (``ldp_audit.audit``)
   -> ``audit.json``;
3. the dynamics-inference attack on its transcript: recover each agent's gravity from its
   noisy reports, scored against ``secrets.npz`` (``ldp_audit.attacks.dynamics_run_dir``) ->
   ``attack_dynamics.json``;
4. the privacy report (``ldp_audit.report``) -> ``out_dir/report/index.html``.

Everything is derived from one seed. Library code: nothing is printed; progress bars (tqdm) go to
stderr when ``progress`` is true.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError
from ldp_audit.rundir import write_artifact
from ldp_audit.rundir.paths import timestamped_dir
from ldp_audit.validation import check_bool, check_int

__all__ = ["DemoSettings", "DemoResult", "run_demo", "check_paths"]


@dataclass(frozen=True, kw_only=True)
class DemoSettings:
    """The demo's embedded defaults (sized to finish within 3 minutes on 2 cores)."""

    mechanism: str = "laplace"
    """Mechanism of the PGC-A3C run (paper Alg. 2)."""
    epsilon: float = 5.0
    """Per-agent epsilon of the run (the paper's eps = 5 column)."""
    n_agents: int = 3
    """Concurrent workers (the paper uses 9 threads); every episode is a new agent that submits
    ``rounds`` = 1 report, so 3,000 submissions come from 3,000 agents (privacy units)."""
    trials: int = 1
    """Independent trials K."""
    max_submissions: int = 3000
    """Submissions per trial (the paper's horizon is 90,000)."""
    audit_samples: int = 100_000
    """Samples per candidate input of the black-box audit."""
    audit_confidence: float = 0.95
    """Confidence of the audit's empirical lower bound."""
    attack_shadow: int = 100
    """Shadow episodes per candidate gravity per distinct broadcast theta."""
    attack_groups: int = 600
    """Agents (groups of reports) the attack targets (the first ones in arrival order)."""
    attack_confidence: float = 0.95
    """Confidence of the attack's accuracy interval and implied epsilon bound."""


@dataclass(frozen=True)
class DemoResult:
    """Where the demo wrote its run and report, how long each stage took, and the verdict."""

    run_dir: Path
    report: dict[str, Path]
    seconds: dict[str, float] = field(default_factory=dict)
    verdict: str = ""
    """The report's verdict status ("violation", "consistent", "partially verified", "no
    meaningful guarantee")."""
    headline: str = ""

    @property
    def violation(self) -> bool:
        """Whether the report found a privacy violation (the CLI then exits 1)."""
        return self.verdict == "violation"


def _train(run_dir: Path, s: DemoSettings, seed: int, progress: bool, overwrite: bool) -> None:
    """The PGC-A3C run of the demo's settings, into ``run_dir``."""
    from ldp_audit.training.pgc_a3c.config import PgcA3cConfig
    from ldp_audit.training.pgc_a3c.grid import train

    names = ("mechanism", "epsilon", "trials", "n_agents", "max_submissions")  # its fields
    cfg = PgcA3cConfig(**{k: getattr(s, k) for k in names})
    mode = "overwrite" if overwrite else "new"
    train(cfg, seed=seed, run_dir=run_dir, progress=progress, run_mode=mode)


def _audit(run_dir: Path, settings: DemoSettings, rng: np.random.Generator, progress: bool) -> None:
    """Audit the run's mechanism (rebuilt from config.json); write audit.json.

    One black-box audit with two verdicts on the same samples (``ldp_audit.audit``): the
    *distribution* verdict reads the outputs in exact arithmetic (the maths of paper Alg. 2),
    the *implementation* verdict also searches floating-point bit cells of the raw outputs
    (Mironov 2012: additive noise computed in IEEE doubles can leak through the low bits). It
    also audits the privacy profile epsilon(delta), and carries the white-box exact epsilon over
    the same input pairs (exact arithmetic only).
    """
    from ldp_audit.audit import audit, exact_epsilon
    from ldp_audit.mechanisms import from_config
    from ldp_audit.rundir import RunDir

    rd = RunDir(run_dir)
    cfg = rd.config
    mech = from_config(cfg["mechanism"])
    name = str(cfg["mechanism"].get("name"))
    dim = int(rd.arrays("transcript.npz", "report")["report"].shape[1])
    pairs = mech.candidate_pairs(dim)
    exact = float(exact_epsilon(mech, pairs, rng=rng.spawn(1)[0]))
    result = audit(
        mech,
        pairs,
        samples=settings.audit_samples,
        confidence=settings.audit_confidence,
        rng=rng.spawn(1)[0],
        float_bits=True,
        profile=True,
        progress=progress,
    )
    d = result.to_dict()  # the mechanism's name in place of its description, which is kept
    entry = {**d, "mechanism_description": d.get("mechanism"), "mechanism": name}
    write_artifact(run_dir, "audit.json", [{**entry, "exact_epsilon": exact}])


def _attack(run_dir: Path, settings: DemoSettings, seed: int, progress: bool) -> None:
    """Dynamics inference on the transcript, scored with secrets.npz; write attack_dynamics.json."""
    from ldp_audit.attacks.dynamics_run_dir import attack_run_dir, score_run_dir

    pred = attack_run_dir(
        run_dir,
        n_shadow=settings.attack_shadow,
        max_groups=settings.attack_groups,
        seed=seed,
        progress=progress,
    )
    result = score_run_dir(run_dir, pred, confidence=settings.attack_confidence)
    write_artifact(run_dir, "attack_dynamics.json", result.to_dict())


def check_paths(
    out_dir: str | Path,
    report_dir: str | Path | None,
    *,
    overwrite: bool,
    names: tuple[str, str] = ("out_dir", "report_dir"),
) -> Path:
    """The demo's output paths checked before any work (messages call them ``names``): the run
    directory new or empty (an earlier run with ``overwrite``), the report folder new, empty or
    an earlier report, and never the run. Returns the report folder (default ``out_dir/report``)."""
    from ldp_audit.report import check_report_out
    from ldp_audit.rundir import check_new_dir

    run_dir = check_new_dir(out_dir, name=names[0], overwrite=overwrite, can_resume=False)
    if report_dir is None:
        return run_dir / "report"
    return check_report_out(report_dir, overwrite=overwrite, inputs=[run_dir], name=names[1])


def run_demo(
    out_dir: str | Path | None = None,
    *,
    seed: int = 0,
    settings: DemoSettings | None = None,
    report_dir: str | Path | None = None,
    progress: bool = False,
    overwrite: bool = False,
    on_stage: Callable[[str], None] | None = None,
) -> DemoResult:
    """Train, audit, attack and report, end to end.

    Args:
        out_dir: the run directory; it must not exist or be empty (a run directory is evidence
            and is never overwritten), unless ``overwrite=True`` and it holds an earlier run.
            Default: a fresh ``runs/demo-<timestamp>``.
        seed: the one seed everything derives from (training, audit and attack streams).
        settings: override the embedded defaults.
        report_dir: where the report goes (default ``out_dir/report``); must be new or empty
            (or an earlier report with ``overwrite=True``).
        progress: tqdm progress bars on stderr.
        overwrite: replace an earlier run (and report) at these paths.
        on_stage: called with a one-line description as each of the four stages starts
            (the CLI prints it on stderr when no progress bar is drawn: one quiet line per
            stage in a log).

    Returns:
        The run directory, the report's paths and per-stage wall-clock seconds.
    """
    seed = check_int(seed, "seed", minimum=0)
    s = settings or DemoSettings()
    if not isinstance(s, DemoSettings):
        raise InvalidParameterError(f"settings must be a DemoSettings, got {type(s).__name__}")
    check_bool(overwrite, "overwrite")
    if on_stage is not None and not callable(on_stage):
        raise InvalidParameterError(f"on_stage must be callable or None, got {on_stage!r}")
    run_dir = Path(timestamped_dir("runs/demo") if out_dir is None else out_dir)
    rep_dir = check_paths(run_dir, report_dir, overwrite=overwrite)  # before any work

    # training runs from `seed` itself (its config.json records it); the audit and the attack
    # get independent streams under a spawn key of their own, disjoint from the trainer's
    audit_ss, attack_ss = np.random.SeedSequence(seed, spawn_key=(0xDE30,)).spawn(2)
    audit_rng = np.random.default_rng(audit_ss)
    from tqdm.auto import tqdm

    from ldp_audit.report import build_report

    atk_seed = int(attack_ss.generate_state(1)[0])
    stages: tuple[tuple[str, str, Callable[[], Any]], ...] = (
        ("train", "training PGC-A3C", partial(_train, run_dir, s, seed, progress, overwrite)),
        ("audit", "auditing the mechanism", partial(_audit, run_dir, s, audit_rng, progress)),
        ("attack", "attacking the transcript", partial(_attack, run_dir, s, atk_seed, progress)),
        ("report", "writing the report", partial(build_report, run_dir)),
    )
    seconds: dict[str, float] = {}
    with tqdm(total=4, desc="demo", unit="stage", position=0, disable=not progress) as bar:
        for key, words, work in stages:
            t = time.perf_counter()
            bar.set_description(f"demo: {words}")
            if on_stage is not None:
                on_stage(f"demo: {words}")
            report = work()
            if key == "report":
                paths = report.write(rep_dir, overwrite=overwrite)
            seconds[key] = time.perf_counter() - t
            bar.update(1)
    v = report.model["verdict"]
    return DemoResult(
        run_dir=run_dir,
        report=paths,
        seconds=seconds,
        verdict=str(v["status"]),
        headline=str(v["headline"]),
    )
