"""Attacks on a FedRL transcript (what alpha and beta exchanged), scored against the guarantee.

Two attacks, each a scikit-learn estimator trained on part of the released rows (with their
ground truth from ``secrets.npz``: a shadow-knowledge attacker) and scored on the rest:

* **beta's observation**: from one released Q-output row of beta (16 numbers), predict each of
  the 24 outer cells of beta's private 5x5 window (obstacle or free): one
  ``HistGradientBoostingClassifier`` per cell, each interval at the Bonferroni level over the
  24 cells (so the best cell's interval is valid although it was picked after scoring);
* **alpha's rewards**: from one released target ``Y``, predict whether alpha's step hit an
  obstacle (a ``HistGradientBoostingClassifier`` on Y), and reconstruct the reward itself
  (``HistGradientBoostingRegressor``; mean absolute error vs predicting the mean).

Accuracy comes with a two-sided Clopper-Pearson interval (:func:`ldp_audit.attacks.scoring.
accuracy_interval`), beside chance (the majority class) and the *ceiling*: the best accuracy any
guess from one (epsilon, delta)-DP release of a binary secret with that prior can reach
(:func:`binary_accuracy_ceiling`). The ceiling uses the per-row guarantee: it bounds an
attacker who sees that one row only (the same cell also shaped other rows and beta's network;
the whole-run guarantee is the accountant's composed epsilon). An interval entirely above the
ceiling would be a violation of the claim.

Examples:
    >>> res = attack_run("runs/fedrl-x")            # doctest: +SKIP
    >>> res["results"][0]["accuracy"], res["results"][0]["ceiling"]   # doctest: +SKIP
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit.attacks.scoring import accuracy_interval, one_openmp_thread
from ldp_audit.errors import InvalidParameterError, RunDirectoryError
from ldp_audit.validation import check_probability, check_real, check_real_in

__all__ = [
    "binary_accuracy_ceiling",
    "attack_observation",
    "attack_rewards",
    "attack_arrays",
    "attack_run",
]

#: transcript kinds (see ldp_audit.training.fedrl): training-time releases only
_TRAIN_KINDS = (0, 1, 2)
_BETA = 1


def binary_accuracy_ceiling(epsilon: float, delta: float, prior: float) -> float:
    """Best accuracy of guessing a binary secret (``prior`` = P(secret = 1)) from one
    (epsilon, delta)-DP release.

    Solves the linear programme ``max p a + (1 - p) b`` over the guess's true-positive rates
    ``a`` (secret 1) and ``b`` (secret 0) subject to ``a <= e^eps (1 - b) + delta`` and
    ``b <= e^eps (1 - a) + delta`` (the DP inequalities for the guess event and its
    complement). ``inf`` epsilon gives 1.
    """
    epsilon = check_real(epsilon, "epsilon")
    prior = check_probability(prior, "prior", open_interval=False)
    check_real_in(delta, "delta", lo=0.0, lo_open=False, hi=1.0, hi_open=True)
    if math.isinf(epsilon) or epsilon > 700:
        return 1.0
    # the LP's optimum is at a vertex: (1, delta), (delta, 1) or the two lines' intersection
    e = math.exp(float(epsilon))
    p, d = float(prior), float(delta)
    return float(min(1.0, max(p + (1 - p) * d, (1 - p) + p * d, (e + d) / (1 + e))))


def implied_epsilon(accuracy_lower: float, delta: float, prior: float) -> float:
    """Smallest per-row epsilon whose :func:`binary_accuracy_ceiling` reaches
    ``accuracy_lower`` (0 when the prior alone explains it): a lower bound on epsilon when
    ``accuracy_lower`` is a confidence lower limit of the accuracy."""
    p, d, a = float(prior), float(delta), float(accuracy_lower)
    if a <= max(p + (1 - p) * d, (1 - p) + p * d, (1 + d) / 2):
        return 0.0
    if a >= 1.0:
        return math.inf
    return float(math.log((a - d) / (1.0 - a)))


def to_attack_result(out: dict[str, Any], mechanism: dict[str, Any]) -> Any:
    """The headline (beta's best cell) as an :class:`~ldp_audit.attacks.scoring.AttackResult`
    (what ``attack_fedrl.json`` holds; everything else goes in ``extra``)."""
    from ldp_audit.attacks.scoring import AttackResult

    b = out["best_cell"]
    eps = float(out["epsilon_per_row"])
    delta = float(out["delta"]) if math.isfinite(eps) else 0.0
    lb = implied_epsilon(b["accuracy_ci"][0], delta, b["prior"])
    return AttackResult(
        attack="fedrl-transcript",
        mechanism=mechanism,
        epsilon=eps,
        reports_per_agent=1,
        k=2,
        n=int(b["n_test"]),
        correct=int(b["correct"]),
        accuracy=float(b["accuracy"]),
        accuracy_ci=(float(b["accuracy_ci"][0]), float(b["accuracy_ci"][1])),
        ceiling=float(b["ceiling"]),
        composed_epsilon=eps,
        epsilon_lower_bound=lb,
        confidence=float(out.get("confidence", 0.95)),
        chance=float(b["chance"]),
        mae=out.get("rewards", {}).get("mae"),
        mae_baseline=out.get("rewards", {}).get("mae_baseline"),
        advantage=float(b["accuracy"] - b["chance"]),
        seconds=float(out.get("seconds", 0.0)),
        extra=out,
        delta=delta,
    )


def _sklearn_seed(seed: int) -> int:
    """scikit-learn takes seeds below 2**32 only: the same state for those, the rest folded
    (``attack fedrl --seed 9223372036854775807`` was exit 3 with its error: session 56)."""
    return int(seed) % 2**32


def _sample(
    seed: int, max_rows: int, test_fraction: float, *arrays: np.ndarray
) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """The arrays subsampled to at most ``max_rows`` rows, and a train / test split of them."""
    rng = np.random.default_rng(seed)
    n = arrays[0].shape[0]
    if n > max_rows:
        keep = rng.choice(n, max_rows, replace=False)
        arrays, n = tuple(a[keep] for a in arrays), max_rows
    perm = rng.permutation(n)
    k = max(1, int(round(test_fraction * n)))
    return list(arrays), perm[k:], perm[:k]


def _classify(clf: Any, x: np.ndarray, y: np.ndarray, tr: np.ndarray, te: np.ndarray) -> Any:
    """``clf`` fitted on the training rows predicts the test rows (a constant label, itself)."""
    counts = np.unique(y[tr], return_counts=True)[1]
    if counts.size == 1:
        return np.full(te.size, y[tr][0])
    if counts.min() < 2:  # early stopping's stratified validation split needs two of each class
        clf.set_params(early_stopping=False)
    with one_openmp_thread():
        return clf.fit(x[tr], y[tr]).predict(x[te])


def _score(
    target: str,
    y_true: np.ndarray,
    y_pred: np.ndarray,
    train_labels: np.ndarray,
    epsilon: float,
    delta: float,
    confidence: float,
) -> dict[str, Any]:
    n = int(y_true.size)
    k = int((y_true == y_pred).sum())
    lo, hi = accuracy_interval(k, n, confidence)
    prior = float(np.mean(train_labels))
    chance = max(prior, 1.0 - prior)
    ceiling = binary_accuracy_ceiling(epsilon, delta, prior)
    return {
        "target": target,
        "n_test": n,
        "correct": k,
        "accuracy": k / n,
        "accuracy_ci": [float(lo), float(hi)],
        "chance": chance,
        "prior": prior,
        "epsilon_per_row": epsilon,
        "delta": delta,
        "ceiling": ceiling,
        "violation": bool(lo > ceiling),
    }


def attack_observation(
    values: np.ndarray,
    obs: np.ndarray,
    *,
    epsilon: float,
    delta: float,
    seed: int = 0,
    test_fraction: float = 0.3,
    confidence: float = 0.95,
    max_rows: int = 10_000,
) -> list[dict[str, Any]]:
    """Predict each outer cell of beta's 5x5 window from its released 16-vector rows.

    Args:
        values: (n, 16) released rows of beta.
        obs: (n, 25) beta's true windows (1 = free, 0 = obstacle/outside).
        epsilon, delta: the per-row guarantee (inf when none).
        seed: split and classifier seed.
        test_fraction: share of rows held out for scoring.
        confidence: of the Clopper-Pearson intervals.
        max_rows: subsample to at most this many rows (speed).

    Returns:
        One result per cell (``target`` "cell r,c"), plus a pooled "all cells" row.
    """
    from sklearn.ensemble import HistGradientBoostingClassifier

    values = np.asarray(values, dtype=np.float64)
    obs = np.asarray(obs)
    if values.ndim != 2 or obs.shape != (values.shape[0], 25):
        raise InvalidParameterError(
            f"values must be (n, d) and obs (n, 25), got {values.shape} and {obs.shape}"
        )
    (values, obs), tr, te = _sample(seed, max_rows, test_fraction, values, obs)
    cells = [i for i in range(25) if i != 12]  # the centre is the agent's own (free) cell
    labels = (obs[:, cells] == 0).astype(np.int64)  # 1 = obstacle
    # one interval per cell at the Bonferroni level: the best cell's interval stays valid
    conf_cell = 1.0 - (1.0 - confidence) / len(cells)
    out = []
    for j, c in enumerate(cells):
        clf = HistGradientBoostingClassifier(
            max_iter=60, early_stopping=True, random_state=_sklearn_seed(seed)
        )
        pred = _classify(clf, values, labels[:, j], tr, te)
        target = f"cell {c // 5 - 2:+d},{c % 5 - 2:+d}"
        out.append(_score(target, labels[te, j], pred, labels[tr, j], epsilon, delta, conf_cell))
    return out


def attack_rewards(
    y: np.ndarray,
    reward: np.ndarray,
    bump: np.ndarray,
    *,
    epsilon: float,
    delta: float,
    seed: int = 0,
    test_fraction: float = 0.3,
    confidence: float = 0.95,
    max_rows: int = 50_000,
) -> dict[str, Any]:
    """From released targets ``Y``, predict whether alpha's step hit an obstacle, and the reward.

    Returns:
        A scored result (``target`` "bump from Y") with ``mae`` and ``mae_baseline`` of the
        reward reconstruction added.
    """
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor

    y = np.asarray(y, dtype=np.float64).reshape(-1, 1)
    reward = np.asarray(reward, dtype=np.float64)
    lab = (np.asarray(bump) > 0).astype(np.int64)
    if not (y.shape[0] == reward.size == lab.size):
        raise InvalidParameterError("y, reward and bump must have one entry per released row")
    (y, reward, lab), tr, te = _sample(seed, max_rows, test_fraction, y, reward, lab)
    clf = HistGradientBoostingClassifier(max_iter=100, random_state=_sklearn_seed(seed))
    pred = _classify(clf, y, lab, tr, te)
    res = _score("bump from Y", lab[te], pred, lab[tr], epsilon, delta, confidence)
    with one_openmp_thread():
        reg = HistGradientBoostingRegressor(max_iter=100, random_state=_sklearn_seed(seed))
        reg = reg.fit(y[tr], reward[tr])
        res["mae"] = float(np.abs(reg.predict(y[te]) - reward[te]).mean())
    res["mae_baseline"] = float(np.abs(reward[tr].mean() - reward[te]).mean())
    return res


def attack_run(run_dir: str | Path, **opts: Any) -> dict[str, Any]:
    """Run both attacks on a FedRL run directory's transcript; returns a JSON-able dict.
    ``opts``: those of :func:`attack_arrays` (``seed``, ``test_fraction``, ``confidence``,
    ``max_rows``)."""
    from ldp_audit.rundir import RunDir

    t0 = time.perf_counter()
    rd = RunDir(run_dir)
    cfg_doc = rd.config
    if cfg_doc.get("algorithm") != "fedrl":
        raise RunDirectoryError(
            f"run_dir must be a fedrl run, got algorithm {cfg_doc.get('algorithm')!r}"
        )
    cfg = rd.train_config  # the system's FedRLConfig
    tr = rd.arrays("transcript.npz", "q_report", "q_sender", "q_kind")
    sec = rd.secrets("q_obs", for_scoring=True)
    out = attack_arrays(cfg, tr, sec, **opts)
    out["seconds"] = time.perf_counter() - t0
    return out


def attack_arrays(
    cfg: Any,
    tr: dict[str, np.ndarray],
    sec: dict[str, np.ndarray],
    *,
    seed: int = 0,
    test_fraction: float = 0.3,
    confidence: float = 0.95,
    max_rows: int = 10_000,
) -> dict[str, Any]:
    """Both attacks on transcript / secrets arrays (the keys of transcript.npz / secrets.npz)."""
    t0 = time.perf_counter()
    check_probability(test_fraction, "test_fraction")
    check_probability(confidence, "confidence")
    mech, ymech = cfg.output_mechanism(), cfg.target_mechanism()
    rows = (tr["q_sender"] == _BETA) & np.isin(tr["q_kind"], _TRAIN_KINDS)
    if rows.sum() < 20:
        raise RunDirectoryError("the transcript has too few released rows of beta to attack")
    opts = dict(seed=seed, test_fraction=test_fraction, confidence=confidence)
    results = attack_observation(
        tr["q_report"][rows],
        sec["q_obs"][rows],
        epsilon=mech.epsilon,
        delta=mech.delta if mech.private else 0.0,
        max_rows=max_rows,
        **opts,
    )
    pooled_k = sum(r["correct"] for r in results)
    pooled_n = sum(r["n_test"] for r in results)
    best = max(results, key=lambda r: r["accuracy"] - r["chance"])
    out: dict[str, Any] = {
        "attack": "fedrl-transcript",
        "confidence": confidence,
        "sigma": cfg.sigma,
        "clip_outputs": cfg.clip_outputs,
        "epsilon_per_row": mech.epsilon,
        "delta": cfg.delta,
        "cells": results,
        "cells_mean_accuracy": pooled_k / pooled_n,
        "cells_mean_chance": float(np.mean([r["chance"] for r in results])),
        "best_cell": best,
    }
    res_rows = [dict(best, target=f"beta {best['target']} (best cell)")]
    if "y_report" in tr and "y_reward" in sec:
        yres = attack_rewards(
            tr["y_report"],
            sec["y_reward"],
            sec["y_bump"],
            epsilon=ymech.epsilon,
            delta=ymech.delta if ymech.private else 0.0,
            **opts,
        )
        out["rewards"] = yres
        res_rows.append(dict(yres, target="alpha's bump from Y"))
    out["results"] = res_rows
    out["violation"] = any(r["violation"] for r in results) or bool(
        out.get("rewards", {}).get("violation", False)
    )
    out["seconds"] = time.perf_counter() - t0
    out["summary"] = (
        f"sigma={cfg.sigma:g}, clip={cfg.clip_outputs}: beta's cells mean accuracy "
        f"{out['cells_mean_accuracy']:.3f} (chance {out['cells_mean_chance']:.3f}); best "
        f"{best['target']} {best['accuracy']:.3f} [{best['accuracy_ci'][0]:.3f}, "
        f"{best['accuracy_ci'][1]:.3f}] (chance {best['chance']:.3f}) vs ceiling "
        f"{best['ceiling']:.3f} (per-row eps "
        f"{mech.epsilon:.4g})"
        + (
            f"; alpha's bump from Y {out['rewards']['accuracy']:.3f} (chance "
            f"{out['rewards']['chance']:.3f}, ceiling {out['rewards']['ceiling']:.3f}), reward "
            f"MAE {out['rewards']['mae']:.2f} vs {out['rewards']['mae_baseline']:.2f}"
            if "rewards" in out
            else ""
        )
        + ("; VIOLATION" if out["violation"] else "")
    )
    return out
