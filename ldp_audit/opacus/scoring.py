"""Scoring an ``opacus`` run: the one-run audit of a run written by
:class:`~ldp_audit.opacus.CanaryAudit` (docs/opacus.md).

:func:`audit_run` reads the run directory (the auditor's view: transcript, model, ledger; the
secret bits only to count correct guesses), scores the canaries, runs every test of
:mod:`ldp_audit.attacks.one_run` that the setting can see and combines them by Bonferroni;
:func:`membership` is ``ldp-audit attack membership --run-dir``; :func:`report_sections` is what
``ldp-audit report`` shows of the run.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError, RunDirectoryError
from ldp_audit.opacus.canaries import ALGORITHM, CLIP_TOLERANCE, ROWS, canary_blocks, noise_sketch
from ldp_audit.opacus.recorder import NOISE_ARRAYS
from ldp_audit.rundir.files import fmt_number
from ldp_audit.validation import check_choice

__all__ = [
    "Evidence",
    "audit_evidence",
    "audit_run",
    "check_setting",
    "read_evidence",
    "membership",
    "opacus_epsilon_line",
    "report_sections",
    "score_inputs",
    "tensor_names",
    "TRANSCRIPT_ARRAYS",
]

#: the transcript arrays every audit reads (a run's ``transcript.npz`` lacking one is refused):
#: the projections, the hooks' per-update fields and the recorder's arrays of the released noise
TRANSCRIPT_ARRAYS = ("canary_projection", *(k for k, _ in ROWS), *NOISE_ARRAYS)


@dataclass
class Evidence:
    """What the auditor reads of a run with gradient (or input) canaries: a run written by
    :class:`~ldp_audit.opacus.CanaryAudit` (:func:`read_evidence`) or a trainer's run that
    embeds it (``train dprl``: :func:`ldp_audit.attacks.one_run_dprl.dprl_evidence`).

    Attributes:
        run_dir: the run (its ledger ``ledger.sqlite`` and ``secrets.npz`` are read from it).
        config: the public design and the claim (``canaries``, ``canary_scale``,
            ``canary_seed``, ``delta``, ``kind``, ``noise_sketch``, ``directions``, ``claim``:
            ``noise_multiplier``, ``max_grad_norm``, ``sample_rate``, ``expected_batch_size``,
            ``dataset_size``, ``tensor_sizes``, ``tensor_shapes``).
        metrics: ``updates``, ``privacy`` (the accountant's claim) and, when the audit charged,
            ``charges`` / ``prepay`` / ``prepaid_unused`` / ``charges_aborted``.
        transcript: ``canary_projection`` (T, m) in units of ``C`` and the per-update records
            (``batch_size``, ``charged``, ``noise_sq``, ``noise_sketch``, the optimizer's fields).
        black_box: (m,) black-box scores from the final model, ``-<theta_T - theta_0, u_i>``.
        mechanism: the result's ``mechanism`` (None: the claim's DP-SGD fields).
        not_sampled: why the sampling test cannot run (None: the data set size is unknown).
    """

    run_dir: Path
    config: dict[str, Any]
    metrics: dict[str, Any]
    transcript: dict[str, np.ndarray]
    black_box: np.ndarray
    algorithm: str = ALGORITHM
    mechanism: dict[str, Any] | None = None
    not_sampled: str | None = None


def _config_and_metrics(run_dir: Path) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """config.json's ``config``, metrics.json and the ``RunDir`` of an ``opacus`` run (refuses
    other runs)."""
    from ldp_audit.rundir import RunDir

    rd = RunDir(run_dir)
    doc = rd.config
    if doc.get("algorithm") != ALGORITHM:
        raise RunDirectoryError(
            f"run_dir {str(run_dir)!r} is a {doc.get('algorithm')!r} run, not an {ALGORITHM!r} run"
        )
    return doc["config"], rd.metrics(), rd


def read_evidence(run_dir: Any) -> Evidence:
    """An ``opacus`` run's :class:`Evidence` (refuses other algorithms' runs)."""
    run_dir = Path(run_dir)
    cfg, metrics, rd = _config_and_metrics(run_dir)
    model = rd.arrays("model.npz", "params", "initial")
    idx, weight = canary_blocks(cfg["claim"]["tensor_sizes"], int(cfg["canaries"]),
                                int(cfg["canary_seed"]))  # fmt: skip
    delta_theta = np.asarray(model["params"]) - np.asarray(model["initial"])
    return Evidence(
        run_dir=run_dir,
        config=cfg,
        metrics=metrics,
        transcript=rd.arrays("transcript.npz", *TRANSCRIPT_ARRAYS),
        black_box=-(delta_theta[idx] * weight).sum(axis=1),
    )


_IDLE = {
    "f-dp": "no guess to test: the canaries are all included or all excluded, or the ledger "
    "holds no single claim",
    "contribution": "no included canary joined an update: no contribution to measure",
    "sampling": "no batch size was recorded",
}


def _ledger_test(run_dir: Path, cfg: dict, met: dict, tr: dict) -> dict[str, Any]:
    """The ledger against the transcript and the metrics (deterministic: p is 0 or 1)."""
    from ldp_audit.accountant.events import event_from_json
    from ldp_audit.attacks.one_run_fdp import model_history

    claim = cfg["claim"]
    hist = model_history(run_dir)
    n_charged = int(sum(n for _, n in hist))
    kinds = [event_from_json(e) for e, _ in hist]
    T = int(tr["canary_projection"].shape[0])
    problems = []
    unused = met.get("prepaid_unused", 0)
    prepay = met.get("prepay", 1)
    aborted = met.get("charges_aborted", 0)  # charged, then the noise step raised: no release
    if not (isinstance(unused, int) and isinstance(prepay, int) and 0 <= unused < prepay):
        problems.append(f"metrics.json: prepaid_unused {unused!r} with prepay {prepay!r}")
    elif not (isinstance(aborted, int) and aborted >= 0):
        problems.append(f"metrics.json: charges_aborted {aborted!r}")
    elif n_charged != T + unused + aborted:
        problems.append(
            f"{n_charged} charges for {T} released updates ({unused} prepaid charges unused, "
            f"{aborted} aborted noise steps)"
        )
    if met.get("updates") != T or met.get("charges", n_charged) != n_charged:
        problems.append(
            f"metrics.json says {met.get('updates')} updates / {met.get('charges')} charges, "
            f"the transcript {T}, the ledger {n_charged}"
        )
    moved = met.get("moved_unreleased", [])  # absent in a run written before 2026-12-06
    if not (isinstance(moved, list) and all(type(i) is int for i in moved)):
        problems.append(f"metrics.json: moved_unreleased {moved!r}")
    elif moved:
        problems.append(
            f"the parameters or the optimizer's state changed {len(moved)} times outside a "
            f"released update (first before update {moved[0]}; {T}: after the last)"
        )
    if not np.asarray(tr["charged"], dtype=bool).all():
        bad = np.flatnonzero(~np.asarray(tr["charged"], dtype=bool))
        problems.append(
            f"{bad.size} updates not preceded by exactly one charge (first: update {bad[0]})"
        )
    from ldp_audit.opacus.writer import declared_event

    declared = declared_event(claim)
    if any(k != declared for k in kinds):
        problems.append(f"charged events {kinds!r} differ from the declared {declared!r}")
    for key in ("noise_multiplier", "max_grad_norm", "expected_batch_size"):
        if claim.get(key) is not None:
            v = np.asarray(tr[key], dtype=np.float64)
            if v.size and not np.all(v == float(claim[key])):
                i = int(np.flatnonzero(v != float(claim[key]))[0])
                problems.append(
                    f"optimizer.{key} was {v[i]:g} at update {i}, the claim (charged) "
                    f"{float(claim[key]):g}"
                )
    return {
        "rejected": bool(problems),
        "p_value": 0.0 if problems else 1.0,
        "level": 0.0,
        "charges": n_charged,
        "updates": T,
        "problems": problems,
    }


def _clip_test(met: dict, names: list[str]) -> dict[str, Any]:
    """The optimizer's clipping on the public probe rows (attach.clip_probe) and the clipped
    sums released as clipped (deterministic: p is 0 or 1, None where the probe raised and no
    sum changed)."""

    c, changed = met.get("clip_check") or {"error": "not run"}, met.get("clipped_sum_changed")
    problems = []
    if changed:
        problems.append(f"p.summed_grad changed between its clipping and its release at "
                        f"{len(changed)} updates (first: update {changed[0]}): the noise was "
                        f"measured against another sum than the clipped one")  # fmt: skip
    out: dict[str, Any] = {"level": 0.0, "problems": problems}
    if "error" in c:
        out["reason"] = f"probe: {c['error']}"
    else:
        out["worst"] = "a row over every tensor" if c["tensor"] < 0 else names[c["tensor"]]
        out["ratio"] = c["ratio"]
        if c["ratio"] > 1.0 + CLIP_TOLERANCE:
            rows = c.get("batch_rows", 1)  # > 1: after small rows in one batch (clip_probe)
            where = out["worst"] + (f", after {rows - 1} rows of 1e-6 its norm in one batch"
                                    if rows > 1 else "")  # fmt: skip
            problems.append(f"one per-sample gradient of norm {c['row_norm']:g} C (in "
                            f"{where}) was clipped to {c['ratio']:.4g} C")  # fmt: skip
        if c.get("raw", 0.0) > 50.0:  # attach.raw_probe: < 1e-500 per tensor under the claim
            problems.append(f"a public raw gradient in p.grad of {names[c['raw_tensor']]} moved "
                            f"the release by {c['raw']:.3g} noise stds: add_noise kept part "
                            f"of the raw (unclipped) gradient")  # fmt: skip
        if c.get("zero_batch_p", 1.0) < 1e-12:  # attach.raw_probe, its false alarm 1e-12
            problems.append(f"a batch of zero gradients was released with noise of "
                            f"{c['zero_batch_std']:.3g} times the claimed std "
                            f"(p {c['zero_batch_p']:.2g}): noise set by the data")  # fmt: skip
        if c.get("zero_batch_equal_p", 1.0) < 1e-12:  # attach.raw_probe, its false alarm 1e-12
            problems.append(f"{c['zero_batch_equal']} of {c['zero_batch_n']} coordinates of a "
                            f"batch of zero gradients were released with the same value in "
                            f"{c['zero_batch_releases']} releases from an advancing generator (p "
                            f"{c['zero_batch_equal_p']:.2g}): noise not drawn fresh from the "
                            f"generator (seeded by the data, reused, or none there)")  # fmt: skip
    p = 0.0 if problems else (None if "error" in c else 1.0)
    return {**out, "rejected": bool(problems), "p_value": p}


def _witness(tests: dict[str, dict | None]) -> None:
    """Where a statistical test that flagged saw it, in words: its ``problems`` (the report
    quotes the first three as the witness), one for each of its parts that rejected at its
    share of the test's level."""
    n, i = tests.get("noise") or {}, tests.get("independence") or {}
    r, d = n.get("residual") or {}, i.get("pairs") or {}
    co, sh, of = (d.get(k) or {} for k in ("coordinates", "shifts", "offsets"))

    def p(t: dict, k: str = "p_value") -> float:  # None (not run) is no evidence
        return 2.0 if t.get(k) is None else t[k]

    worst, fam = (min(x or [{}], key=p) for x in (r.get("tensors"), d.get("families")))
    lv = co.get("level", 0.0)  # each of the pairs, coordinates and shifts parts' own level
    # (the residual's size part: half its level over three families, tensor_noise_test)
    words = {
        "noise": [
            (p(r, "p_tensor") <= r.get("level", 0.0) / 6, "{tensor}: released noise "
             "{std_ratio:.3g} of the claimed std", worst),
            (p(r, "p_update") <= r.get("level", 0.0) / 6, "update {update}: released "
             "noise {std_ratio:.3g} of the claimed std", r.get("worst_update")),
            ((r.get("shape") or {}).get("rejected"), "the released noise is not Gaussian at "
             "the claimed std (its shape or precision)", {}),
            (p(n, "p_projection") <= n.get("level", 0.0) / 2, "the canary "
             "projections' noise at most {noise_upper_bound:.3g} of sigma C", n),
        ],
        "independence": [
            (p(d, "p_updates") <= lv, "the noise of updates {pair[0]} and {pair[1]} "
             "correlated {max_abs_rho:.3g} ({name})", fam),
            (co.get("rejected"), "two coordinates' noise correlated {max_abs_rho:.3g} over the "
             "updates (sketch coordinates {coordinates[0]} and {coordinates[1]}: {tensors[0]}, "
             "{tensors[1]})", co),
            (of.get("rejected"), "each update's noise correlated {rho:.3g} with itself "
             "{offset} coordinate(s) on along {tensor} (z {z:.3g} over {pairs} pairs)", of),
            ((sh.get("max_abs_rho") or 0.0) > (sh.get("threshold") or 1.0), "update "
             "{update}'s noise and that of {lag} update(s) before at a coordinate offset "
             "correlated {max_abs_rho:.3g}", sh),
            ((sh.get("same_values") or {}).get("rejected"), "updates {pair[0]} and {pair[1]} "
             "released noise of one squared norm", sh.get("same_values")),
            ((sh.get("data") or {}).get("rejected"), "the released noise follows the update's "
             "own clipped sum (the data test)", {}),
            (p(i, "p_projection") <= i.get("level", 0.0) / 2, "the canary projections "
             "change less between two updates than fresh noise allows", {}),
        ],
        "contribution": [x for con in [tests.get("contribution") or {}] if "contribution" in con
                         for x in [(True, "a joining canary contributed {contribution:.3g} C (sd "
                                   "{contribution_sd:.2g}) along its direction; the claim: 1 C",
                                   con),
                                   (p(con, "p_windows") <= con["level"] / 3, "over updates "
                                   "{window[0]}-{window[1]}: {window_contribution:.3g} C", con)]],
        "sampling": [x for sm in [tests.get("sampling") or {}] if "mean_batch" in sm for x in [
            (True, "mean batch {mean_batch:.4g} (the claim {expected_batch:.4g}), dispersion "
             "{dispersion_ratio:.3g} times Bin(N, q)'s", sm),
            (sm.get("p_repeat", 1.0) <= sm["level"] / 3, "batch sizes equal at lag {repeat_lag} "
             "in {repeat_matches} of {repeat_pairs} disjoint pairs (chance {repeat_chance:.3g} "
             "each): the same batches again", sm)]],
    }  # fmt: skip
    for k, parts in words.items():
        t = tests.get(k)
        if t and t.get("rejected") and not t.get("problems"):
            t["problems"] = []
            for hit, w, f in parts:
                try:
                    t["problems"] += [w.format(**(f or {}))] if hit else []
                except (KeyError, IndexError, TypeError, ValueError):  # a field not recorded
                    t["problems"].append(w.split("{")[0].rstrip(" :(") + " (see the test)")


def tensor_names(claim: dict[str, Any]) -> list[str]:
    """``tensor i (shape)`` for each trainable tensor, in the optimizer's order (the order of
    ``list(model.parameters())`` for a model made private whole)."""
    shapes = claim.get("tensor_shapes") or [[n] for n in claim["tensor_sizes"]]
    return [f"tensor {i} ({'x'.join(str(int(v)) for v in sh) or 'scalar'})"
            for i, sh in enumerate(shapes)]  # fmt: skip


def _noise_tests(
    cfg: dict, tr: dict, y: np.ndarray, sigma: float, conf: float
) -> tuple[dict, dict, dict]:
    """The noise and independence tests: on the canary projections (sound whatever the
    trainer computed) and, when the run recorded it, on the released noise itself (the
    residual of every tensor; :mod:`ldp_audit.attacks.one_run_noise`); Bonferroni over the two
    parts of each. Also the coverage: per tensor, whether its noise was tested and with what
    power, and which tensors hold canary coordinates."""
    from ldp_audit.attacks.one_run_noise import (
        coordinate_dependence_test,
        noise_shape_test,
        offset_dependence_test,
        pair_dependence_test,
        tensor_noise_test,
    )
    from ldp_audit.attacks.one_run_tests import independence_test, noise_test

    claim = cfg["claim"]
    names = tensor_names(claim)
    sizes = [int(n) for n in claim["tensor_sizes"]]
    m = int(cfg["canaries"])
    proj_n = noise_test(y, sigma=sigma, confidence=conf)
    proj_i = independence_test(y, sigma=sigma, confidence=conf)
    level = proj_n["level"]
    dense = cfg.get("directions") == "given" or max(sizes) < m  # every tensor holds canaries
    canary_in = [True] * len(sizes) if dense else [n >= m for n in sizes]
    # each of a test's two parts (projections, residual) at half its level, the noise test's
    # residual half split between its size and its shape: the powers and thresholds the
    # residual parts state are those of the level they are held to
    half, quarter = 1.0 - (1.0 - conf) / 2.0, 1.0 - (1.0 - conf) / 4.0
    at, groups = noise_sketch(sizes, int(cfg.get("noise_sketch") or tr["noise_sketch"].shape[1]),
                              int(cfg["canary_seed"]))  # fmt: skip
    tn = tensor_noise_test(tr["noise_sq"], sizes, sigma=sigma, confidence=quarter, names=names)
    shape = noise_shape_test(tr["noise_sketch"], groups, sigma=sigma, confidence=quarter,
                             names=names, grain=tr["noise_grain"],
                             unit=(float(claim["max_grad_norm"]), 1.0 / sigma))  # fmt: skip
    tn = _joined(tn, shape, 1.0 - half, p_size=tn["p_value"], shape=shape)
    # the independence test's residual half split over four: pairs, coordinates, offsets, shifts
    eighth = 1.0 - (1.0 - conf) / 8.0
    dep = pair_dependence_test(tr["noise_sketch"], groups, confidence=eighth, names=names)
    coord = coordinate_dependence_test(tr["noise_sketch"], groups, confidence=eighth,
                                       names=names)  # fmt: skip
    at = at - np.concatenate([[0], np.cumsum(sizes)[:-1]])[groups]  # position in its tensor
    lags = offset_dependence_test(tr["noise_sketch"], groups, at, confidence=eighth, names=names)
    shift = _shift_test(tr, sizes, eighth, sigma)
    dep = _joined(dep, coord, 1.0 - half, lags, shift, p_updates=dep["p_value"],
                  coordinates=coord, offsets=lags, shifts=shift)  # fmt: skip

    for row, c in zip(tn["tensors"], canary_in, strict=True):
        row["canaries"] = c
    coverage = {"tensors": tn["tensors"], "untested": tn["untested"],
                "update_detectable_std_ratio": tn.get("update_detectable_std_ratio"),
                "shape": [{k: f[k] for k in ("name", "values", "detectable_distance")}
                          for f in shape["families"]],
                "coordinates": {k: coord.get(k) for k in ("pairs", "updates",
                                                          "detectable_correlation")},
                "dependence": [{k: f[k] for k in ("name", "coordinates", "threshold",
                                                  "detectable_correlation")}
                               for f in dep["families"]]}  # fmt: skip
    return (_joined(proj_n, tn, level, p_projection=proj_n["p_value"], residual=tn),
            _joined(proj_i, dep, level, p_projection=proj_i["p_value"], pairs=dep),
            coverage)  # fmt: skip


def _shift_test(tr: dict, sizes: list[int], conf: float, sigma: float) -> dict:
    """The shift test on the run's ``noise_shift`` (the coordinates tested in each pair's
    earlier update from ``noise_sq``), the same-values test on ``noise_sq`` and the
    data-dependence test on ``noise_data``, Bonferroni over the three (``same_values``,
    ``data``)."""
    from ldp_audit.attacks.one_run_noise import (
        data_dependence_test,
        same_values_test,
        shift_dependence_test,
    )

    third = 1.0 - (1.0 - conf) / 3.0  # a third each: shifts, same values, data
    same = same_values_test(tr["noise_sq"], sizes, sigma=sigma, confidence=third)
    rho = np.asarray(tr["noise_shift"], dtype=np.float64)
    tested = np.isfinite(np.asarray(tr["noise_sq"], dtype=np.float64)) @ np.asarray(sizes)
    k = np.zeros(rho.shape, dtype=np.int64)
    for lag in range(1, rho.shape[1] + 1):
        k[lag:, lag - 1] = tested[:-lag]
    shift = shift_dependence_test(rho, k, shifts=sum(sizes), confidence=third)
    data = data_dependence_test(tr["noise_data"], tr["noise_sq"], sizes, confidence=third)
    return _joined(shift, same, 1.0 - conf, data, same_values=same, data=data)


def _joined(first: dict, second: dict, level: float, *others: dict, **more: Any) -> dict:
    """``first`` with the Bonferroni p-value of its, ``second``'s and ``others``' (a part that
    did not run takes no share; 0 is a p-value like any other) held to ``level``, and ``more``
    fields."""
    from ldp_audit.attacks.one_run_noise import verdict

    parts = [t.get("p_value") for t in (first, second, *others)]
    return {**first, **verdict(level, *[p for p in parts if p is not None]), **more}


def _family_bound(
    run_dir: Path,
    *,
    projections: np.ndarray | None,
    scores: np.ndarray,
    included: np.ndarray,
    sample_rate: float,
    delta: float,
    confidence: float,
    claimed_epsilon: float,
) -> dict[str, Any] | None:
    """The stated-family bound of a run, beside the assumption-free one (None when the run has
    one class of canaries only): white-box gradient canaries' ``projections`` (the released
    updates on their directions) give :func:`~ldp_audit.attacks.one_run_family.sgm_family_bound`
    with the audit's joins (the subsampled-Gaussian family); every other setting (``projections``
    None: black-box, input canaries, no update) the mu-GDP bound of ``scores``
    (:func:`~ldp_audit.attacks.one_run_family.gdp_family_bound`). A lower confidence bound on
    epsilon *under the assumption it names*: compared with the claim (``refuted``), it does not
    enter the assumption-free verdict (``flagged_by``)."""
    from ldp_audit.attacks.one_run_family import gdp_family_bound, sgm_family_bound
    from ldp_audit.rundir import RunDir

    inc = np.asarray(included, dtype=bool)
    if not (inc.any() and (~inc).any()):
        return None
    if projections is not None:
        joins = RunDir(run_dir).secrets("canary_joins", for_scoring=True)["canary_joins"]
        out = sgm_family_bound(projections, np.asarray(joins, dtype=bool), inc,
                               sample_rate=sample_rate, delta=delta,
                               confidence=confidence)  # fmt: skip
    else:
        out = gdp_family_bound(scores, inc, delta=delta, confidence=confidence)
    lb = float(out["epsilon_lower_bound"])
    claim = float(claimed_epsilon)
    out["claimed_epsilon"] = claim
    out["ratio_to_claim"] = (lb / claim) if 0 < claim < math.inf else None
    out["refuted"] = bool(lb > claim * (1.0 + 1e-12))
    out["level"] = 1.0 - float(out["confidence"])
    return out


def _decided_by(tests: dict[str, dict | None]) -> str | None:
    """The flagged test with the smallest p / level (None when no test flagged)."""

    def ratio(t: dict) -> float:  # a deterministic check (level 0) decides first
        lv = t.get("level") or 0.0
        return t["p_value"] / lv if lv > 0 else 0.0

    hits = [k for k, t in tests.items() if t and t.get("p_value") is not None and t["rejected"]]
    return min(hits, key=lambda k: ratio(tests[k]), default=None)


def check_setting(setting: Any) -> str:
    """``setting`` is ``"white-box"`` or ``"black-box"`` (checked before any file is read)."""
    return check_choice(setting, "setting", ("white-box", "black-box"))


def audit_run(run_dir: Any, *, setting: str = "white-box", confidence: float = 0.95) -> Any:
    """The one-run audit of an ``opacus`` run: :func:`audit_evidence` of :func:`read_evidence`."""
    check_setting(setting)
    return audit_evidence(read_evidence(run_dir), setting=setting, confidence=confidence)


def audit_evidence(ev: Evidence, *, setting: str = "white-box", confidence: float = 0.95) -> Any:
    """The one-run audit of a run's :class:`Evidence`; an ``AttackResult`` (``violation`` = any
    test).

    ``extra`` holds every test (``tests``: p-value, level, rejected), ``flagged_by``,
    ``decided_by``, the per-tensor ``coverage``, the ``family_bound``, the perfect-attacker
    ceiling of the (eps, delta) bound for this canary count (``steinke_ceiling``) and the canary
    count a refutation of the claim by that bound would need (``canaries_to_refute``, None when
    no count does). White-box results also carry the black-box result in
    ``extra["black_box"]`` when called through :func:`membership` or
    :meth:`CanaryAudit.finish`. A run without a released update is audited by the (eps, delta)
    bound alone (the white-box tests are named in ``tests_not_run``).
    """
    from ldp_audit.attacks import one_run_steinke as S  # noqa: N812
    from ldp_audit.attacks.membership import membership_metrics
    from ldp_audit.attacks.one_run import one_run_result
    from ldp_audit.attacks.one_run_fdp import claimed_lines, fdp_audit_scores
    from ldp_audit.attacks.one_run_tests import contribution_test, sampling_test
    from ldp_audit.rundir import RunDir
    from ldp_audit.validation import check_confidence

    check_setting(setting)
    confidence = check_confidence(confidence)
    t0 = time.perf_counter()
    run_dir, cfg, met, tr = ev.run_dir, ev.config, ev.metrics, ev.transcript
    claim = cfg["claim"]
    m = int(cfg["canaries"])
    y = np.asarray(tr["canary_projection"], dtype=np.float64)
    T = int(y.shape[0])
    white = setting == "white-box"
    kind = cfg.get("kind", "gradient")
    if kind == "input":  # the examples' scores on the final model (white-box can do no better)
        if "canary_score" not in tr:
            raise RunDirectoryError(f"{run_dir}/transcript.npz lacks canary_score (kind input)")
        scores = np.asarray(tr["canary_score"], dtype=np.float64)
    else:
        scores = y.sum(axis=0) if white else np.asarray(ev.black_box, dtype=np.float64)
    sigma = float(claim["noise_multiplier"])
    q = float(claim["sample_rate"])
    N = claim.get("dataset_size")
    names = ["steinke", "f-dp"]
    if white and T:
        names += ["noise", "independence"] + (["contribution"] if kind == "gradient" else [])
        names += ["sampling"] if N else []
    conf_each = 1.0 - (1.0 - confidence) / len(names)
    beta = 1.0 - conf_each
    delta = float(cfg["delta"])
    try:
        claimed = claimed_lines(run_dir)
    except RunDirectoryError:  # nothing (or several kinds) charged: the ledger test says so
        claimed = None
    # --- scoring only: the secret bits ---
    sec = RunDir(run_dir).secrets("canary_included", for_scoring=True)
    included = np.asarray(sec["canary_included"], dtype=bool)
    one = S.audit_scores(scores, included, delta=delta, confidence=conf_each)
    priv = met.get("privacy", {})
    eps_ub = priv.get("epsilon", math.inf)
    eps_ub = math.inf if eps_ub in ("inf", None) else float(eps_ub)
    both = bool(included.any() and (~included).any())
    tests: dict[str, dict | None] = {}
    stein_rej = one["epsilon_lower_bound"] > eps_ub * (1.0 + 1e-12)
    tests["steinke"] = {"rejected": bool(stein_rej), "p_value": None, "level": beta,
                        "epsilon_lower_bound": one["epsilon_lower_bound"]}  # fmt: skip
    tests["f-dp"] = (
        fdp_audit_scores(scores, included, claimed["lines"], confidence=conf_each)
        if both and claimed is not None and T
        else None
    )
    if tests["f-dp"] is not None:
        f = tests["f-dp"]
        f["p_value"] = min((r["p_value"] for r in f["p_values"]), default=1.0)
        # the f-DP test rejects when one of its fractions is below level / fractions
        f["level_each"] = f["level"]
        f.update({"mu_claimed": claimed["mu"], "kind": claimed["kind"], "sigma": claimed["sigma"],
                  "q": claimed["q"], "updates": claimed["updates"]})  # fmt: skip
    coverage = None
    not_run: dict[str, str] = {}
    if white and not T:
        not_run["white-box tests"] = "no update was released: nothing to test but the bound"
    elif white:
        tests["noise"], tests["independence"], coverage = _noise_tests(cfg, tr, y, sigma, conf_each)
        if coverage["untested"]:
            not_run["noise (per tensor)"] = "untested tensors: " + ", ".join(coverage["untested"])
        if not N:
            not_run["sampling"] = ev.not_sampled or (
                "the data set size was not recorded (pass dataset_size= to attach with "
                "sample_rate=): the batch sizes could not be tested against Poisson sampling"
            )
        if kind == "gradient":
            joins = RunDir(run_dir).secrets("canary_joins", for_scoring=True)["canary_joins"]
            bs = np.maximum(np.asarray(tr["batch_size"], dtype=np.int64), 0)
            tests["contribution"] = contribution_test(
                y, joins, included, bs, sigma=sigma, sample_rate=q,
                canary_norm=float(cfg["canary_scale"]), confidence=conf_each,
            )  # fmt: skip
        if N:
            sizes = np.asarray(tr["batch_size"])
            sizes = sizes[sizes >= 0]  # -1: not known
            tests["sampling"] = (
                sampling_test(sizes, dataset_size=int(N), sample_rate=q, confidence=conf_each)
                if sizes.size
                else None
            )
    if white:
        tests["ledger"] = _ledger_test(run_dir, cfg, met, tr)
        if "clip_check" in met or met.get("clipped_sum_changed"):  # not in older runs
            tests["clipping"] = _clip_test(met, tensor_names(claim))
            if "raw_error" in met.get("clip_check", {}):  # the clipping part still judged
                not_run["clipping (raw-gradient probe)"] = met["clip_check"]["raw_error"]
    for k, t in tests.items():  # a test that ran on nothing is named, never passed in silence
        if k != "steinke" and (t is None or t.get("p_value") is None):
            why = (t or {}).get("reason") or _IDLE.get(k, "nothing to test: no p-value")
            not_run.setdefault(k, why)
    _witness(tests)
    flagged = [k for k, t in tests.items() if t and t.get("rejected")]
    family = _family_bound(run_dir, projections=y if white and T and kind == "gradient" else None,
                          scores=scores, included=included, sample_rate=q, delta=delta,
                          confidence=confidence, claimed_epsilon=eps_ub)  # fmt: skip
    mm = membership_metrics(scores, included) if both else {"auc": None, "advantage": 0.0,
                                                           "tpr_at_fpr": {}}  # fmt: skip
    ceiling_eps = S.steinke_ceiling(m, delta=delta, beta=beta / len(S.FRACTIONS))
    need = S.canaries_to_refute(eps_ub, delta=delta, beta=beta / len(S.FRACTIONS))
    keys = ("noise_multiplier", "max_grad_norm", "sample_rate", "expected_batch_size")
    return one_run_result(
        attack=f"one-run-{setting}",
        mechanism=ev.mechanism or {"name": "dp-sgd", **{k: claim[k] for k in keys}},
        epsilon=eps_ub,
        canaries=m,
        one=one,
        membership=mm,
        confidence=confidence,
        seconds=time.perf_counter() - t0,
        extra={
            "setting": setting,
            "algorithm": ev.algorithm,
            "method": "Steinke, Nasr & Jagielski 2023, Cor. 5.4 (eps, delta)",
            "delta": delta,
            "guesses": one["guesses"],
            "guess_fraction": one["fraction"],
            "per_fraction": one["per_fraction"],
            "members": int(included.sum()),
            "accountant": priv.get("by_method"),
            "updates": met.get("updates"),
            "privacy_unit": priv.get("unit"),
            "claim": claim,
            "canary_scale": cfg["canary_scale"],
            "n_tests": len(names),
            "confidence_each": conf_each,
            "tests": tests,
            "f_dp": tests["f-dp"],
            "steinke_ceiling": ceiling_eps,
            "family_bound": family,
            "canaries_to_refute": need,
            "flagged_by": flagged,
            "decided_by": _decided_by(tests),
            "coverage": coverage,
            "tests_not_run": not_run,
        },
    )


def membership(
    run_dir: Any, *, seed: int = 0, confidence: float = 0.95, progress: bool = False
) -> Any:
    """``ldp-audit attack membership --run-dir RUN`` of an opacus run: the white-box result,
    the black-box one in ``extra["black_box"]`` (``seed`` and ``progress`` are unused: the
    audit draws nothing)."""
    return white_and_black(read_evidence(run_dir), confidence)


def white_and_black(ev: Evidence, confidence: float) -> Any:
    """The white-box audit of a run's :class:`Evidence`, the black-box result in its
    ``extra["black_box"]`` (shared with ``train dprl``'s membership attack)."""
    white = audit_evidence(ev, setting="white-box", confidence=confidence)
    white.extra["black_box"] = audit_evidence(
        ev, setting="black-box", confidence=confidence
    ).to_dict()
    return white


_fmt = partial(fmt_number, nd=4, nan="nan")


def report_sections(run_dir: Path, extra: list[Path] | None = None) -> dict[str, Any]:
    """The claim, the accountant's guarantee, the one-run audit and its coverage (every tensor:
    tested or not, with the power of its noise test), for ``ldp-audit report``; the privacy
    statement's sampling row from the sampling test (``statement``)."""
    from ldp_audit.report.plugin import section

    run_dir = Path(run_dir)
    cfg, met, _ = _config_and_metrics(run_dir)
    priv = met.get("privacy", {})
    claim = cfg["claim"]
    rows = [[k, v if isinstance(v, str) else str(v) if isinstance(v, list) else _fmt(v)]
            for k, v in claim.items()]  # fmt: skip
    rows += [["epsilon (accountant)", _fmt(priv.get("epsilon"))], ["delta", _fmt(cfg["delta"])],
             ["updates", met.get("updates")], ["canaries", cfg["canaries"]]]  # fmt: skip
    why = opacus_epsilon_line(claim, met, float(cfg["delta"]))
    if why:
        rows.append(["epsilon Opacus's get_epsilon gives (prv, updates taken)",
                     _fmt(why["opacus_epsilon"])])  # fmt: skip
    words = [str(priv.get("words", ""))] + ([why["line"]] if why else [])
    sections = [
        section(
            "opacus-claim",
            "DP-SGD claim read from the Opacus optimizer",
            words,
            ("claim", ["quantity", "value"], rows),
            data={"claim": claim, "privacy": priv},
        )
    ]
    more, sampling = audit_sections(
        run_dir, extra, claim, met.get("updates"), prefix="opacus", trainer="Opacus"
    )
    out: dict[str, Any] = {"sections": sections + more}
    if sampling is not None:
        out["statement"] = {"sampling": [sampling, "attack_membership.json sampling test"]}
    return out


def audit_sections(run_dir: Path, extra: list[Path] | None, claim: dict[str, Any], updates: Any,
                   *, prefix: str, trainer: str) -> tuple[list[dict], str | None]:  # fmt: skip
    """The report's sections of a run's one-run audits (:func:`audit_evidence` results in its
    attack files): the coverage (every tensor: tested or not, with the power of its noise test)
    and every test with the family bound; and the privacy statement's sampling line (None
    without a white-box audit). Shared by the ``opacus`` and ``dprl`` systems (``prefix``: the
    sections' id prefix; ``trainer``: what trained, in the audit section's title)."""
    from ldp_audit.report import one_run_audit_documents
    from ldp_audit.report.plugin import section

    sections: list[dict] = []
    audits = [d for _, d in one_run_audit_documents(run_dir, extra)]
    arows: list[list[Any]] = []
    assumptions: dict[str, str] = {}
    sampling = None
    cov_rows: list[list[Any]] = []
    for top in audits:
        ex = top.get("extra", {})
        t = (ex.get("tests") or {}).get("sampling")
        if sampling is None and ex.get("setting") == "white-box":
            why = (ex.get("tests_not_run") or {}).get("sampling")
            sampling = (
                f"Poisson subsampling at q = {_fmt(claim.get('sample_rate'))} is charged; the "
                f"sampling test on the run's {updates} batch sizes: p = "
                f"{_fmt(t.get('p_value'))} at level {_fmt(t.get('level'))}, "
                + ("REJECTED: the code does not sample that way" if t.get("rejected")
                   else "consistent with Poisson sampling at that rate")
                if isinstance(t, dict)
                else f"Poisson subsampling is charged; not tested: {why or 'no sampling test'}"
            )  # fmt: skip
        if not cov_rows and ex.get("setting") == "white-box":
            for row in (ex.get("coverage") or {}).get("tensors") or []:
                tested = row.get("updates_tested", 0) if row.get("tested") else None
                cov_rows.append(
                    [row["tensor"], row["entries"], "yes" if row.get("canaries") else "no",
                     f"NOT TESTED: {row.get('reason', '')}" if tested is None else f"{tested}"]
                    + [_fmt(row.get(k)) for k in ("p_value", "std_ratio", "detectable_std_ratio")]
                )  # fmt: skip
        bb = ex.get("black_box")
        for d in [top] + ([bb] if isinstance(bb, dict) else []):
            ex = d.get("extra", {})
            setting = ex.get("setting", d.get("attack"))
            for name, t in (ex.get("tests") or {}).items():
                if t:
                    value = _fmt(t.get("epsilon_lower_bound", t.get("p_value")))
                    result = "REJECTED" if t.get("rejected") else "consistent"
                    arows.append([setting, name, value, _fmt(t.get("level")), result])
            fb = ex.get("family_bound")
            if isinstance(fb, dict):
                name = f"family bound ({fb['family']}; its assumption in the text above)"
                result = "REFUTED under the assumption" if fb.get("refuted") else "consistent"
                result += f" ({_fmt(fb.get('ratio_to_claim'))} x the claim)"
                arows.append([setting, name, _fmt(fb.get("epsilon_lower_bound")),
                              _fmt(fb.get("level")), result])  # fmt: skip
                assumptions[fb["family"]] = fb["assumption"]
            value = (
                f"eps lb {_fmt(d.get('epsilon_lower_bound'))} vs accountant "
                f"{_fmt(d.get('composed_epsilon'))} (ceiling {_fmt(ex.get('steinke_ceiling'))}"
                f", canaries to refute {_fmt(ex.get('canaries_to_refute'))})"
            )
            result = ("VIOLATION" if d.get("violation") else "consistent") + (
                f" (decided by {ex['decided_by']})" if ex.get("decided_by") else ""
            )
            arows.append([setting, "verdict", value, _fmt(d.get("confidence")), result])
    if cov_rows:
        cov = audits[0].get("extra", {}).get("coverage") or {}
        dep = ", ".join(
            f"{d['name']} ({d['coordinates']} coordinates): {_fmt(d['detectable_correlation'])}"
            for d in cov.get("dependence") or []
        )
        pooled = next(iter(cov.get("shape") or []), None)
        co = cov.get("coordinates") or {}
        shp = (
            (f"Shape: flagged when the released noise's empirical distribution function "
             f"strays more than {_fmt(pooled['detectable_distance'])} from the claimed one "
             f"(all tensors, {pooled['values']} values). "
             if pooled and pooled.get("detectable_distance") else "")
            + (f"Smallest correlation between two coordinates' noise detected with 95 % power: "
               f"{_fmt(co['detectable_correlation'])} ({co['pairs']} pairs, {co['updates']} "
               f"updates)." if co.get("detectable_correlation") is not None else "")
        )  # fmt: skip
        header = ["tensor", "entries", "canaries", "updates tested", "p (noise, per tensor)",
                  "std ratio", "detectable"]  # fmt: skip
        sections.append(
            section(
                f"{prefix}-coverage",
                "What the audit covered: every tensor, every update, every lag",
                [
                    "The released noise of every update is tested tensor by tensor (the released "
                    "sum minus the optimizer's clipped sum, exactly N(0, sigma^2 C^2) per "
                    "coordinate under the claim): per tensor over the updates, per update over "
                    "all coordinates, per (update, tensor) cell, for its shape (Kolmogorov-"
                    "Smirnov against N(0, sigma^2 C^2), pooled and per tensor), and for "
                    "dependence between any two updates, between any two coordinates of a "
                    "public sketch and, within each update, at every offset along a tensor. std "
                    "ratio: the released noise's std over the claimed one "
                    "(1 under the claim); detectable: the largest ratio flagged with 95 % power "
                    "(no noise, 0, is always flagged). A tensor that could not be tested is "
                    "named NOT TESTED.",
                    "Smallest correlation between two updates' noise detected with 95 % power "
                    f"(any lag): {dep or 'none tested'}. {shp}",
                ],
                ("per-tensor coverage of the noise tests", header, cov_rows),
            )
        )
    if arows:
        family = (
            "The family bound is a lower confidence bound on epsilon that holds only under the "
            "stated assumption (it is not part of the assumption-free verdict): "
            + "; ".join(v for _, v in sorted(assumptions.items()))
            + "."
        )
        sections.append(
            section(
                f"{prefix}-audit",
                f"One-run audit of the {trainer} training",
                [
                    "Each test reads the same run and takes a Bonferroni share of 1 - "
                    "confidence (the ledger check is deterministic): a correct trainer is "
                    "flagged with probability at most 1 - confidence. For the (eps, delta) bound "
                    "the value is the lower bound on epsilon; for the others the p-value.",
                ]
                + ([family] if assumptions else []),
                ("one-run audit", ["setting", "test", "value", "level", "result"], arows),
                data={"audits": audits},
            )
        )
    return sections, sampling


def opacus_epsilon_line(claim: dict, met: dict, delta: float) -> dict[str, Any] | None:
    """Why the report's claim and Opacus's ``PrivacyEngine.get_epsilon`` differ, in one line.

    The claim composes every ledger charge (the updates and the prepaid charges left unused,
    ``prepay``) by the smaller of rdp and prv; Opacus's default accountant (PRV, the same
    numbers as the ledger's ``prv``) composes the steps it saw. None when the metrics lack the
    counts or the claim is not a (sampled) Gaussian.
    """
    from ldp_audit.accountant import compose
    from ldp_audit.opacus.writer import declared_event

    T, charges = met.get("updates"), met.get("charges")
    eps = met.get("privacy", {}).get("epsilon")
    if not isinstance(T, int) or not isinstance(charges, int) or T < 1 or eps is None:
        return None
    try:
        theirs = float(compose([(declared_event(claim), T)], delta=delta, method="prv")[0])
    except Exception:  # noqa: BLE001 - a claim prv cannot compose: nothing to explain
        return None
    unused = charges - T
    line = (
        f"Opacus's PrivacyEngine.get_epsilon({delta:g}) with its default PRV accountant gives "
        f"{theirs:.4g} for the {T} updates taken; this claim, {float(eps):.4g}, composes the "
        f"ledger's {charges} charges ({T} updates + {unused} prepaid before their noise and "
        f"never used, prepay {met.get('prepay')}) by the smaller of rdp and prv"
        + (" (the same count: the methods alone differ)." if unused == 0 else ".")
    )
    return {"opacus_epsilon": theirs, "claimed_epsilon": float(eps), "line": line}


def score_inputs(data: Any, model: Any, score_fn: Any, m: int) -> np.ndarray:
    """``kind="input"``: each of the ``m`` canary examples ``data`` scored on the final
    ``model`` (``score_fn(model, data)``, or ``-cross_entropy(model(x), y)`` of ``(x, y)``
    pairs); higher means "more likely trained on"."""
    import torch

    if score_fn is not None:
        s = np.asarray(score_fn(model, data), dtype=np.float64).reshape(-1)
    else:
        out = []
        with torch.no_grad():
            for i in range(0, len(data), 256):
                items = [data[j] for j in range(i, min(i + 256, len(data)))]
                try:
                    x = torch.stack([torch.as_tensor(it[0]) for it in items])
                    y = torch.as_tensor([int(it[1]) for it in items])
                except (TypeError, IndexError, ValueError):
                    raise InvalidParameterError(
                        "score_fn: the canary examples are not (x, y) pairs; pass "
                        "score_fn(model, canaries) -> scores"
                    ) from None
                loss = torch.nn.functional.cross_entropy(model(x), y, reduction="none")
                out.append(-loss.double().numpy())
        s = np.concatenate(out)
    if s.shape != (m,) or not np.isfinite(s).all():
        raise InvalidParameterError(f"score_fn must give {m} finite scores, got shape {s.shape}")
    return s
