"""Which readings of Ono & Takahashi (2020) reach its tables, and what each costs in privacy.

``ldp-audit reproduce pgc-a3c --readings`` runs the Laplace rows of Tables 1-2 (epsilon in
{1, 2, 5, 10, inf}, |B| = 1) under every reading of the paper that plausibly matches its numbers,
each with greedy (as printed) and sampled acting, side by side with the paper and with the
printed settings:

- ``printed``: the paper as printed (L1 clip C/2 = 0.005, eq. 22 SGD at eta = 0.5);
- ``coordinate``: each of the 112 coordinates clipped to +-C/2 instead of the L1 norm. Each
  report is then 112 x epsilon-LDP, not epsilon-LDP; the ledger is charged the true epsilon;
- ``adam``: Adam at the aggregator (step 1e-3, post-processing: no privacy cost);

and three controls with sampled acting: the non-private baseline clipped like the Laplace rows
with no noise (L1 C = 0.01, and per coordinate), which separates the clip from the noise, and the
value target exactly as printed in eq. 18 (the engine's first documented deviation).

For every mechanism a reading uses, :func:`ldp_audit.audit.audit` gives a lower bound on the true
per-report epsilon (``P(bound > true epsilon) <= 1 - confidence``), checked against the claimed
epsilon (the paper's) and, for coordinate clipping, against the true 112 x epsilon as well.

Seeds: row (mechanism, epsilon) gets the seed the main reproduction gives that row
(``reproduce.setting_seed(seed, index)``), whatever the reading, so trial k of a row starts from
the same theta and draws the same acting uniforms under every reading (common random numbers);
the readings differ only in what they change.
"""

from __future__ import annotations

import math
import os
import time
import warnings
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit.config import bounds
from ldp_audit.errors import InvalidParameterError
from ldp_audit.rundir.writer import versions
from ldp_audit.training.pgc_a3c import metrics, reproduce
from ldp_audit.training.pgc_a3c.paper import PAPER
from ldp_audit.training.pgc_a3c.reproduce_report import rerun_command
from ldp_audit.training.reproduction import provenance, write_report
from ldp_audit.training.reproduction_statement import readme_page

__all__ = [
    "READINGS",
    "CONTROLS",
    "ReadingsConfig",
    "ClaimedAs",
    "audit_reading_mechanisms",
    "run_readings",
    "write_readings_report",
]

#: The readings: name -> (PgcA3cConfig options, description). Each runs with both actings.
READINGS: dict[str, tuple[dict[str, Any], str]] = {
    "printed": ({}, "the paper as printed: L1 clip (eq. 19), SGD at eta = 0.5 (eq. 22)"),
    "coordinate": (
        {"clip_kind": "coordinate"},
        "each coordinate clipped to +-C/2 (reports are 112 x epsilon-LDP)",
    ),
    "adam": (
        {"aggregator": "adam"},
        "Adam at the aggregator, step 1e-3, its published default (post-processing)",
    ),
    "adam-lr0.01": (
        {"aggregator": "adam", "aggregator_lr": 0.01},
        "Adam at the aggregator, step 1e-2: 10x the default, picked after an 8-trial probe "
        "in which 1e-3 learned slowly (post-processing)",
    ),
}
ACTINGS = ("argmax", "sample")
#: Controls (sampled acting, non-private): name -> (PgcA3cConfig options, description).
CONTROLS: dict[str, tuple[dict[str, Any], str]] = {
    "noiseless-l1-C0.01": (
        {"mechanism": "none", "clip": 0.01},
        "no noise, the Laplace rows' L1 clip C = 0.01 (each step moves theta by "
        "eta C / 2 = 0.0025 in L1)",
    ),
    "noiseless-coordinate-C0.01": (
        {"mechanism": "none", "clip": 0.01, "clip_kind": "coordinate"},
        "no noise, each coordinate clipped to +-0.005 (the coordinate reading's clip)",
    ),
    "literal-eq18": (
        {"mechanism": "none", "target": "literal-eq18"},
        "non-private baseline with eq. 18 as printed (+ V(s_T), undiscounted, also after a "
        "failure)",
    ),
}
EPSILONS = (1.0, 2.0, 5.0, 10.0, math.inf)
#: Index of the Laplace row with this epsilon in the main reproduction's grid (its seed).
_ROW_INDEX = {e: i for i, e in enumerate(EPSILONS)}


@dataclass(frozen=True, kw_only=True)
class ReadingsConfig(reproduce.GridConfig):
    """What ``reproduce pgc-a3c --readings`` runs (the scale, seed, intervals and backend of
    :class:`~ldp_audit.training.pgc_a3c.reproduce.GridConfig`, and the audits)."""

    audit_samples: int = field(default=200_000, metadata=bounds(minimum=1000))
    """Auditor samples per input of each pair."""
    audit_confidence: float = field(
        default=0.95, metadata=bounds(minimum=0, maximum=1, open_min=True, open_max=True)
    )
    """Confidence of each audited lower bound."""
    controls: bool = True
    """Also run the controls (noiseless clipped baselines, literal eq. 18)."""
    audit_epsilons: tuple[float, ...] = field(
        default=(1.0, 2.0, 5.0, 10.0), metadata=bounds(minimum=0, open_min=True)
    )
    """The epsilons whose mechanisms are audited (finite, > 0)."""


class ClaimedAs:
    """A mechanism presented to the auditor with a different epsilon claim (same outputs).

    The auditor checks ``mechanism.epsilon``; this wrapper lets it check the paper's claim
    against the mechanism that actually runs (e.g. coordinate-clipped Laplace claimed to be
    epsilon-LDP).
    """

    def __init__(self, mechanism: Any, epsilon: float) -> None:
        self.mechanism = mechanism
        self.epsilon = float(epsilon)
        self.dim = getattr(mechanism, "dim", None)

    def privatize(self, x: Any, rng: np.random.Generator) -> np.ndarray:
        return self.mechanism.privatize(x, rng)

    def candidate_pairs(self, dim: int | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
        return self.mechanism.candidate_pairs(dim)

    def __repr__(self) -> str:
        return f"{self.mechanism!r} claimed as {self.epsilon:g}-LDP"


def _key(reading: str, acting: str, eps: float) -> str:
    return f"{reading}-{acting}-laplace-eps{_eps_label(eps)}"


def _configs(cfg: ReadingsConfig) -> list[tuple[str, dict[str, Any], Any, int]]:
    """(key, description, PgcA3cConfig, seed) of every setting, in run order."""
    plan = [
        (name, acting, eps, opts, False)
        for name, (opts, _) in READINGS.items()
        for acting in ACTINGS
        for eps in EPSILONS
    ]
    if cfg.controls:
        plan += [(name, "sample", math.inf, opts, True) for name, (opts, _) in CONTROLS.items()]
    out = []
    for name, acting, eps, opts, control in plan:
        # the non-private row of a reading has no clip to change; a control's mechanism is
        # the non-private one an infinite epsilon gives
        drop = "mechanism" if control else "clip_kind" if math.isinf(eps) else ""
        opts = {k: v for k, v in opts.items() if k != drop}
        c = reproduce.engine_config(
            reproduce.Setting("laplace", eps, 1, cfg.trials, True),
            cfg.max_submissions,
            acting,
            opts,
        )
        meta = {"reading": name, "acting": acting, "epsilon": eps, "control": control}
        key = f"control-{name}" if control else _key(name, acting, eps)
        out.append((key, meta, c, reproduce.setting_seed(cfg.seed, _ROW_INDEX[eps])))
    return out


def audit_reading_mechanisms(
    epsilons: tuple[float, ...] = (1.0, 2.0, 5.0, 10.0),
    *,
    samples: int = 200_000,
    confidence: float = 0.95,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Audit the per-report mechanism of each private reading at each epsilon.

    - L1 Laplace (printed and Adam readings: the aggregator is post-processing) against its
      claim epsilon, on the tight pair (C/2 e_0, -C/2 e_0);
    - coordinate-clipped Laplace against the paper's claim epsilon and against its true
      112 epsilon, on the opposite corners of the clipping box (C/2 1, -C/2 1).

    Exact arithmetic only (``float_bits=False``: the floating-point leak of IEEE Laplace noise
    is a separate, known issue of every Laplace implementation here).

    Returns:
        One dict per audit: mechanism, claim, lower bound, violation, confidence, samples, s.
    """
    from ldp_audit.audit import audit
    from ldp_audit.training.pgc_a3c.config import PgcA3cConfig

    rows = []
    for i, eps in enumerate(epsilons):
        for kind in ("l1", "coordinate"):
            c = PgcA3cConfig(mechanism="laplace", epsilon=eps, clip_kind=kind)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                mech = c.make_mechanism()
            half = c.effective_clip / 2.0
            x = np.full(112, half) if kind == "coordinate" else np.eye(112)[0] * half
            claims = [("claimed (the paper)", eps)]
            if kind == "coordinate":
                claims.append(("true (112 x epsilon)", mech.epsilon))
            for label, claim in claims:
                target = mech if claim == mech.epsilon else ClaimedAs(mech, claim)
                res = audit(
                    target,
                    pairs=[(x, -x)],
                    samples=samples,
                    confidence=confidence,
                    rng=np.random.default_rng([seed, i, kind == "coordinate"]),
                    float_bits=False,
                )
                rows.append(
                    {
                        "clip_kind": kind,
                        "readings": ["coordinate"]
                        if kind == "coordinate"
                        else ["printed", "adam", "adam-lr0.01"],
                        "epsilon": eps,
                        "claim": label,
                        "claimed_epsilon": claim,
                        "true_epsilon": mech.epsilon,
                        "epsilon_lower_bound": res.epsilon_lower_bound,
                        "violation": bool(res.violation),
                        "confidence": confidence,
                        "samples": samples,
                        "seconds": res.seconds,
                    }
                )
    return rows


def run_readings(
    cfg: ReadingsConfig, *, progress: bool | None = None, audit: bool = True
) -> dict[str, Any]:
    """Run every reading and control (``train_grid`` batches on ``cfg.backend``, see
    :func:`ldp_audit.training.pgc_a3c.reproduce.engine_grid`) and audit the mechanisms
    (``audit=False``: training only).

    Returns:
        JSON-able results: per setting its FSTs and the Table 1-3 measures, the audits, timing.
    """
    from ldp_audit.training.pgc_a3c.privacy import PrivacyClaimWarning

    if not isinstance(cfg, ReadingsConfig):
        raise InvalidParameterError(f"cfg must be a ReadingsConfig, got {type(cfg).__name__}")
    plan = _configs(cfg)
    t0 = time.perf_counter()
    with warnings.catch_warnings():  # the true epsilon is charged and reported below
        warnings.simplefilter("ignore", PrivacyClaimWarning)
        res = reproduce.engine_grid(
            [c for _, _, c, _ in plan],
            [s for *_, s in plan],
            backend=cfg.backend,
            address=cfg.address,
            workers=cfg.workers,
            progress=progress,
        )
    train_secs = time.perf_counter() - t0
    results: dict[str, Any] = {
        "question": "which readings of Ono & Takahashi (2020) reach its tables, and what each "
        "costs in privacy (audited)",
        "config": asdict(cfg),
        **provenance(),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "versions": versions(),
        "readings": {k: {"options": o, "description": d} for k, (o, d) in READINGS.items()},
        "controls": {k: {"options": o, "description": d} for k, (o, d) in CONTROLS.items()},
        "settings": {},
    }
    zetas = {
        key: np.asarray(r.zeta, dtype=np.float64) for (key, *_), r in zip(plan, res, strict=True)
    }
    rng = np.random.default_rng(np.random.SeedSequence([cfg.seed, 2**31 + 1]))
    for (key, meta, c, seed), r, child in zip(plan, res, rng.spawn(len(plan)), strict=True):
        ref_key = _key(meta["reading"], meta["acting"], math.inf) if not meta["control"] else None
        ref = metrics.first_success_time(zetas[ref_key]) if ref_key in zetas else None
        summary = metrics.summarize(
            zetas[key],
            reference_fst=None if ref_key == key else ref,
            rng=child,
            confidence=cfg.confidence,
            n_resamples=cfg.n_resamples,
        )
        zeta = zetas[key]
        results["settings"][key] = {
            **meta,
            "epsilon": "inf" if math.isinf(meta["epsilon"]) else meta["epsilon"],
            "seed": seed,
            "config": c.to_dict(),
            "privacy": r.privacy,
            "successes": int(sum(math.isfinite(metrics.fst_from_json(v)) for v in summary["fst"])),
            "submissions_run": int(np.sum(~np.isnan(zeta))),
            "final_mean_mu": metrics.final_mean_mu(zeta),
            **summary,
        }
    results["seconds_train"] = train_secs
    if not audit:
        return results
    t1 = time.perf_counter()  # the audits of the readings' mechanisms
    results["audits"] = audit_reading_mechanisms(
        tuple(cfg.audit_epsilons),
        samples=cfg.audit_samples,
        confidence=cfg.audit_confidence,
        seed=cfg.seed,
    )
    results["seconds_audit"] = time.perf_counter() - t1
    results["seconds_total"] = results["seconds_train"] + results["seconds_audit"]
    return results


# ----------------------------------------------------------------------------------------------
# the report
# ----------------------------------------------------------------------------------------------


def _fst(v: Any) -> str:
    """An FST or interval end: "inf" for ``"inf"``."""
    f = metrics.fst_from_json(v)
    return "inf" if math.isinf(f) else f"{f:,.0f}"


def _paper(measure: str, eps: float) -> str:
    v = PAPER[measure]["laplace"].get(eps)
    if v is None:
        return "n/a"
    return f"{v:,.1f}" if measure == "median_fst" else f"{v:.2f}"


def _eps_label(e: Any) -> str:
    return "inf" if e == "inf" or (isinstance(e, float) and math.isinf(e)) else f"{e:g}"


def readings_markdown(results: dict[str, Any], notes: str | None = None) -> str:
    """The README of the readings report."""
    cfg = results["config"]
    st = results["settings"]
    head = "ldp-audit reproduce pgc-a3c --readings"
    cmd = rerun_command(head, cfg, ReadingsConfig(), ("audit_samples",))
    lines = [
        f"Generated by `{cmd}` on {results['created']} ({results['machine']}), "
        f"{results['seconds_total']:.0f} s in all ({results['seconds_train']:.0f} s training, "
        f"{results['seconds_audit']:.0f} s auditing).",
        "",
        f"- Scale: **K = {cfg['trials']} trials per setting, at most "
        f"{cfg['max_submissions']:,} submissions per trial**, trials stop at their FST "
        "(the paper: 20 x 90,000). Laplace rows of Tables 1-2 (|B| = 1, C = 0.01).",
        "- Readings (each with greedy acting, as printed, and with the non-exploring action "
        "sampled from pi):",
    ]
    for k, v in results["readings"].items():
        lines.append(f"  - `{k}`: {v['description']}")
    lines += [
        "- Row (epsilon) seeds are those of the main reproduction (`reports/pgc-a3c/`), the "
        "same under every reading: trial k starts from the same theta in every column.",
        "- Success = mu_n >= 195 within the horizon (eq. 26); intervals 95% (Wilson for "
        "ratios, percentile bootstrap for medians).",
        "",
        "## Learning: successes out of K, median FST [95% CI]",
        "",
    ]
    lines += _readings_table(
        results,
        lambda e: (
            f"{round(20 * PAPER['success_ratio']['laplace'][e])}/20, {_paper('median_fst', e)}"
        ),
        lambda s: (
            f"{s['successes']}/{s['trials']}, {_fst(s['median_fst'])} "
            f"[{_fst(s['median_fst_ci'][0])}, {_fst(s['median_fst_ci'][1])}]"
        ),
    )
    lines += [
        "",
        "Success ratio [95% Wilson CI] and relative AUC (against the same reading's and "
        "acting's eps = inf row) are in `results.json`; the success ratios:",
        "",
    ]
    lines += _readings_table(
        results,
        lambda e: _paper("success_ratio", e),
        lambda s: (
            f"{s['success_ratio']:.2f} [{s['success_ratio_ci'][0]:.2f}, "
            f"{s['success_ratio_ci'][1]:.2f}]"
        ),
    )
    lines += [
        "",
        "## Privacy: the auditor's lower bound on the per-report epsilon",
        "",
        f"`ldp_audit.audit.audit(..., float_bits=False)`, {cfg['audit_samples']:,} samples "
        f"per input, confidence {cfg['audit_confidence']}: each line's bound exceeds the true "
        f"epsilon with probability at most {1 - cfg['audit_confidence']:.2g}. The Adam reading "
        "releases exactly the printed reading's reports (the optimizer runs on released reports "
        "only), so it shares its audit.",
        "",
        "| clip | readings | eps (paper) | claim checked | true epsilon | audited lower bound "
        "| verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for a in results["audits"]:
        verdict = "**VIOLATION** (claim refuted)" if a["violation"] else "consistent (no violation)"
        lines.append(
            f"| {a['clip_kind']} | {', '.join(a['readings'])} | {a['epsilon']:g} | "
            f"{a['claim']}: {a['claimed_epsilon']:g} | {a['true_epsilon']:g} | "
            f"{a['epsilon_lower_bound']:.3g} | {verdict} |"
        )
    ctrl = [k for k in st if st[k]["control"]]
    if ctrl:
        lines += [
            "",
            "## Controls (sampled acting, non-private, |B| = 1)",
            "",
            "| control | what | successes | median FST [95% CI] | mean of last mu_n |",
            "|---|---|---|---|---|",
        ]
        for k in ctrl:
            s = st[k]
            lo, hi = s["median_fst_ci"]
            mu = s["final_mean_mu"]
            lines.append(
                f"| {s['reading']} | {results['controls'][s['reading']]['description']} | "
                f"{s['successes']}/{s['trials']} | {_fst(s['median_fst'])} "
                f"[{_fst(lo)}, {_fst(hi)}] | {'n/a' if mu is None else f'{mu:.0f}'} |"
            )
    title = "PGC-A3C: which readings of the paper reach its tables, and at what privacy cost"
    return readme_page(title, results, lines, notes)


def _readings_table(results: dict[str, Any], paper: Any, cell: Any) -> list[str]:
    """A table of the readings by epsilon: the paper's row (``paper(epsilon)`` per epsilon),
    then one row per reading and acting (``cell(setting)``, "" where not run)."""
    st = results["settings"]
    return [
        "| reading | acting | " + " | ".join(f"eps={_eps_label(e)}" for e in EPSILONS) + " |",
        "|---|---|" + "---|" * len(EPSILONS),
        "| **paper** | | " + " | ".join(paper(e) for e in EPSILONS) + " |",
    ] + [
        f"| {name} | {acting} | "
        + " | ".join(
            "" if (s := st.get(_key(name, acting, e))) is None else cell(s) for e in EPSILONS
        )
        + " |"
        for name in results["readings"]
        for acting in ACTINGS
    ]


def pages(results: dict[str, Any], notes: str | None) -> dict[str, str]:
    """The report's text page (file name -> text) from ``results`` and the folder's notes.md."""
    return {"README.md": readings_markdown(results, notes)}


def write_readings_report(
    results: dict[str, Any], out_dir: str | os.PathLike[str], *, overwrite: bool = False
) -> list[Path]:
    """Write results.json and README.md (a hand-written notes.md there is kept and appended)."""
    from ldp_audit.rundir import check_report_dir

    check_report_dir(out_dir, overwrite=overwrite)
    return write_report(out_dir, results, pages)
