"""Dynamics inference on what FRD and FedAvg agents upload: recover each agent's gravity (or the
run's other private CartPole constant, ``config.private_param``: masscart, masspole, length,
force_mag; everything below reads "gravity" as that constant).

Threat model: the server is honest-but-curious. It knows the protocol and its public config
(``config.json``: grid, schedule, network sizes, the declared gravity set, the upload mechanism)
and sees only what crossed the trust boundary (``transcript.npz``): for FRD, per upload the
(cell id, averaged policy) pairs — or their randomised versions for the LDP variant —; for
FedAvg, the uploaded parameters. Each agent's gravity is one of ``k`` equally likely values.

Attack (shadow training, Shokri et al. 2017 style, reusing
:class:`ldp_audit.attacks.dynamics_shadow.ShadowGradientAttack` as the classifier and
:mod:`ldp_audit.attacks.scoring` for the score): the attacker runs the *public* protocol itself
(:func:`ldp_audit.training.frd.train_many` with the run's config and its own seed) with shadow
agents whose gravities it knows, passes the shadow uploads through the same mechanism, turns
each upload into a fixed-length feature vector, fits a classifier ``features -> gravity`` and
applies it to the victims' uploads. An agent's uploads are combined by adding log-posteriors
(as :meth:`ShadowGradientAttack.predict_groups` does).

Features of an upload:

* FRD (proxy memory): per cut state component, the histogram of the uploaded cells over
  ``bins`` coarse bins (normalised), the mean uploaded policy value per coarse bin, and
  ``log(1 + number of rows)``; the upload's round index.
* FedAvg (parameters): the upload's *delta* from the broadcast it started from (the server
  knows both): per-layer ``log ||delta||`` and the change of pi(left) and of the value at
  ``probes`` fixed probe states (drawn once from a public seed), and the round index
  (:func:`_fedavg_features`; round-0 uploads, which start from an unknown random
  initialisation, are left out).

The accuracy is scored against ``secrets.npz`` in :func:`score_run_dir` only, with a
Clopper-Pearson interval, chance ``1/k`` and — for the LDP variant — the ceiling
``e^{T eps} / (e^{T eps} + k - 1)`` of ``T`` uploads at ``eps`` each.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit.attacks.dynamics_shadow import add_by_group
from ldp_audit.attacks.scoring import AttackResult
from ldp_audit.errors import InvalidParameterError, RunDirectoryError
from ldp_audit.rundir import RunDir
from ldp_audit.validation import check_int

__all__ = ["upload_features", "attack_run_dir", "score_run_dir", "run"]

_PROBE_SEED = 20190101  # public: the probe states are part of the attack's description


def _probe_states(n: int) -> np.ndarray:
    rng = np.random.default_rng(_PROBE_SEED)
    scale = np.array([1.0, 1.0, 0.12, 1.5])
    return rng.uniform(-1.0, 1.0, size=(n, 4)) * scale


def upload_features(
    transcript: dict[str, np.ndarray], cfg: Any, *, bins: int = 10, probes: int = 64
) -> tuple[np.ndarray, np.ndarray]:
    """One feature row per upload ((trial, agent, submission) triple) of a transcript.

    Args:
        transcript: ``transcript.npz`` arrays (trial, agent, submission, report).
        cfg: the run's :class:`~ldp_audit.training.frd.FrdConfig` (public).
        bins: coarse bins per cut state component (FRD).
        probes: probe states (FedAvg).

    Returns:
        ``(keys (U, 3) int64 [trial, agent, submission], features (U, d) float64)``.
    """
    from ldp_audit.training.frd.proxy import ProxyGrid

    keys = np.stack(
        [transcript["trial"], transcript["agent"], transcript["submission"]], axis=1
    ).astype(np.int64)
    if keys.shape[0] == 0:
        raise InvalidParameterError("transcript holds no upload to attack (0 rows)")
    uk, first, inv = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    inv = inv.reshape(-1)
    rep = np.asarray(transcript["report"], dtype=np.float64)
    rnd = uk[:, 2:3].astype(np.float64)
    if cfg.mode == "fedavg":
        return _fedavg_features(transcript, cfg, uk, first, probes)
    grid = ProxyGrid(cfg.sections, cfg.proxy_dims, cfg.state_low, cfg.state_high)
    cells = np.clip(rep[:, 0].astype(np.int64), 0, grid.n_cells - 1)
    val = rep[:, 1]
    if cfg.private:
        val = (1.0 + val) / 2.0  # the +-1 bit as a {0, 1} policy reading
    idx = (cells[:, None] // (grid.S ** np.arange(len(grid.dims)))[None, :]) % grid.S
    coarse = np.minimum(idx * bins // grid.S, bins - 1)  # (N, d)
    U, d = uk.shape[0], len(grid.dims)
    counts = np.bincount(inv, minlength=U).astype(np.float64)
    hist = np.zeros((U, d, bins))
    vsum = np.zeros((U, d, bins))
    for j in range(d):
        np.add.at(hist, (inv, j, coarse[:, j]), 1.0)
        np.add.at(vsum, (inv, j, coarse[:, j]), val)
    vmean = np.where(hist > 0, vsum / np.maximum(hist, 1.0), 0.5)
    hist = hist / counts[:, None, None]
    # joint occupancy of (angle, angle velocity) and (cart velocity, angle velocity): gravity
    # sets how fast the pole's angular velocity grows with its angle
    joints = []
    dims = list(grid.dims)
    for a, b in ((2, 3), (1, 3)):
        if a in dims and b in dims:
            ja, jb = dims.index(a), dims.index(b)
            h2 = np.zeros((U, bins * bins))
            np.add.at(h2, (inv, coarse[:, ja] * bins + coarse[:, jb]), 1.0)
            joints.append(h2 / counts[:, None])
    feats = np.concatenate(
        [hist.reshape(U, -1), vmean.reshape(U, -1), *joints, np.log1p(counts)[:, None], rnd],
        axis=1,
    )
    return uk, feats


def _fedavg_features(
    transcript: dict[str, np.ndarray], cfg: Any, uk: np.ndarray, first: np.ndarray, probes: int
) -> tuple[np.ndarray, np.ndarray]:
    """FedAvg: what this agent's local training added to the broadcast it started from.

    The server knows every broadcast (``thetas``) and which one each upload started from
    (``theta_index``), so it can take each upload's **delta** — E episodes of the agent's own
    A2C updates on its own CartPole, the only part of the upload its gravity shaped. Features:
    ``log ||delta||`` of every weight matrix and bias vector (how far E episodes of Adam moved
    each layer: it grows with the number of steps played, which the gravity sets), and the
    change of the policy pi(left) and of the value at ``probes`` public probe states (what the
    update learnt), plus the round. Uploads of round 0 start from the agent's own random
    initialisation (``theta_index = -1``), unknown to the server: they carry no delta and are
    left out (the returned keys omit them).
    """
    from ldp_audit.training.frd.nets import layer_views, param_layout, policy_value

    rep = np.asarray(transcript["report"], dtype=np.float64)
    theta = rep[first]  # each upload's first row
    ti = np.asarray(transcript.get("theta_index", np.full(rep.shape[0], -1)))[first]
    thetas = np.asarray(transcript.get("thetas", np.zeros((0, rep.shape[1]))), dtype=np.float64)
    keep = ti >= 0
    if not keep.any() or thetas.shape[0] == 0:
        raise InvalidParameterError(
            "FedAvg transcript holds no upload that started from a broadcast (only round 0): "
            "nothing to attack; raise max_episodes so that a second round is uploaded"
        )
    uk, theta, ti = uk[keep], theta[keep], ti[keep]
    prev = thetas[ti]
    delta = theta - prev
    norms = []
    for name in ("actor", "critic"):
        for layer in layer_views(delta, param_layout(cfg.hidden, cfg.layers)[name]):
            norms += [np.log(np.linalg.norm(p.reshape(len(p), -1), axis=1) + 1e-12) for p in layer]
    st = _probe_states(probes)
    pi1, v1 = policy_value(theta, cfg, st)
    pi0, v0 = policy_value(prev, cfg, st)
    feats = np.concatenate(
        [np.stack(norms, axis=1), pi1 - pi0, (v1 - v0) / 100.0, uk[:, 2:3].astype(np.float64)],
        axis=1,
    )
    return uk, feats


def attack_run_dir(
    run_dir: str | Path,
    *,
    n_shadow: int = 24,
    max_groups: int | None = None,
    seed: int | None = 0,
    progress: bool = False,
) -> dict[str, Any]:
    """Attack an FRD/FedAvg run directory; reads ``config.json`` and ``transcript.npz`` only.

    Args:
        run_dir: an ``algorithm == "frd"`` run directory.
        n_shadow: shadow agents per candidate gravity (on average); the shadow run has
            ``ceil(n_shadow * k / n_agents)`` groups of the run's config.
        max_groups: attack at most this many agents (first ones); None for all.
        seed: the attacker's seed (shadow training and classifier).
        progress: tqdm bar on stderr.

    Returns:
        Predictions without ground truth: ``{"groups": (G, 2) [trial, agent], "guess": (G,),
        "posterior": (G, k), "candidates", "mechanism", "epsilon", "reports_per_group": (G,),
        "shadow_groups", "shadow_uploads", "seconds": the attack's own time (shadow training
        and classifier; carried into the scored result)}``.
    """
    t0 = time.perf_counter()
    from sklearn.feature_selection import VarianceThreshold
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from ldp_audit.attacks.dynamics_shadow import ShadowGradientAttack
    from ldp_audit.training.frd.config import ALGORITHM, FrdConfig
    from ldp_audit.training.frd.engine import train_many

    run_dir = Path(run_dir)
    n_shadow = check_int(n_shadow, "n_shadow", minimum=1)
    rd = RunDir(run_dir)
    doc = rd.config
    if doc.get("algorithm") != ALGORITHM:
        raise RunDirectoryError(
            f"{str(run_dir)!r} is a {doc.get('algorithm')!r} run, not an FRD/FedAvg ('frd') run"
        )
    cfg = FrdConfig.from_dict(doc["config"])
    need = ("trial", "agent", "submission", "report")
    if cfg.mode == "fedavg":
        need += ("theta_index", "thetas")
    tr = rd.arrays("transcript.npz", *need)
    if tr["report"].shape[0] == 0:
        raise RunDirectoryError(
            f"{run_dir}/transcript.npz holds no upload (the run stopped before its first "
            f"exchange): nothing to attack"
        )
    keys, X = upload_features(tr, cfg)
    k = len(cfg.candidates)
    shadow_groups = max(2, math.ceil(n_shadow * k / cfg.n_agents))
    # the shadow agents train where this machine can: a run trained with --device cuda is
    # attacked with "auto" (CUDA if present, else the CPU; the device moves only the distillation)
    dev = "auto" if cfg.device == "cuda" else cfg.device
    scfg = FrdConfig.from_dict({**cfg.to_dict(), "groups": shadow_groups, "device": dev})
    rng = np.random.default_rng(seed)
    s_seed = int(rng.integers(0, 2**31 - 1))
    sres = train_many([scfg], seed=s_seed, record=True, progress=progress)[0]
    if not sres.transcript or sres.transcript.get("report", np.zeros(0)).shape[0] == 0:
        raise RunDirectoryError("the shadow run made no upload; raise max_episodes of the run")
    skeys, SX = upload_features(sres.transcript, scfg)
    sy = sres.secret[skeys[:, 0], skeys[:, 1]]  # the attacker's own shadow agents
    if np.unique(sy).size < 2:
        raise RunDirectoryError(f"shadow agents drew a single {cfg.private_param}; raise n_shadow")
    # standardise + L2 logistic regression: calibrated log-posteriors, so that the uploads of
    # one agent add up sensibly (gradient boosting measured worse on these features: docs/frd.md)
    clf = make_pipeline(
        VarianceThreshold(), StandardScaler(), LogisticRegression(C=0.1, max_iter=2000)
    )
    est = ShadowGradientAttack(None, method="classifier", classifier=clf, random_state=rng)
    est.fit(SX, sy)
    ll_known = est.log_likelihood(X)  # columns: est.classes_ (the values shadows drew)
    cands = np.asarray(sorted(cfg.candidates), dtype=np.float64)
    ll = np.full((X.shape[0], cands.size), math.log(1e-300))
    ll[:, np.searchsorted(cands, est.classes_)] = ll_known
    agents, ginv = np.unique(keys[:, :2], axis=0, return_inverse=True)
    keep = np.arange(agents.shape[0])
    if max_groups is not None:
        keep = keep[: check_int(max_groups, "max_groups", minimum=1)]
    _, _, total, post = add_by_group(ll, ginv.reshape(-1))
    total, post = total[keep], post[keep]
    eps = math.inf if not cfg.private else float(cfg.ldp_epsilon)
    return {
        "groups": agents[keep],
        "guess": cands[np.argmax(total, axis=1)],
        "posterior": post,
        "candidates": cands.tolist(),
        "mechanism": dict(doc.get("mechanism") or {"name": "no_privacy"}),
        "epsilon": eps,
        "reports_per_group": np.bincount(ginv.reshape(-1), minlength=agents.shape[0])[keep],
        "shadow_groups": shadow_groups,
        "shadow_uploads": int(SX.shape[0]),
        "mode": cfg.mode,
        "private_param": cfg.private_param,
        "seconds": time.perf_counter() - t0,
    }


def score_run_dir(
    run_dir: str | Path, prediction: dict[str, Any], *, confidence: float = 0.95
) -> AttackResult:
    """Score :func:`attack_run_dir` predictions against ``secrets.npz`` (its only reader here).

    The ceiling uses the largest number of uploads ``T`` of any attacked agent.
    """
    from ldp_audit.attacks.dynamics_run_dir import prediction_result

    t0 = time.perf_counter()
    key = f"agent_{prediction.get('private_param', 'gravity')}"
    truth_all = RunDir(run_dir).secrets(key, for_scoring=True)[key]  # the one read of secrets
    g = prediction["groups"]
    truth = truth_all[g[:, 0], g[:, 1]]
    name = "dynamics-frd-proxy" if prediction.get("mode") != "fedavg" else "dynamics-fedavg-params"
    return prediction_result(
        name,
        prediction,
        n=int(truth.size),
        correct=int(np.sum(prediction["guess"] == truth)),  # exact: see score_run_dir
        confidence=confidence,
        t0=t0,
        extra={
            "candidates": prediction["candidates"],
            "private_param": prediction.get("private_param", "gravity"),
            "shadow_groups": prediction.get("shadow_groups"),
            "shadow_uploads": prediction.get("shadow_uploads"),
            "reports_per_group_min": int(np.min(prediction["reports_per_group"])),
            # how often each candidate was guessed: a classifier that learnt nothing guesses
            # one class, and its accuracy is then that gravity's share among the victims
            "guesses": [
                int(np.sum(prediction["guess"] == c)) for c in prediction["candidates"]
            ],  # fmt: skip
            "truth_counts": [int(np.sum(truth == c)) for c in prediction["candidates"]],
        },
    )


def run(
    run_dir: str | Path,
    *,
    seed: int = 0,
    confidence: float = 0.95,
    progress: bool = False,
    n_shadow: int = 24,
    max_groups: int | None = None,
) -> AttackResult:
    """:func:`attack_run_dir` then :func:`score_run_dir`: the ``dynamics`` (and ``frd``) attack
    of an FRD/FedAvg run, with the signature of :attr:`ldp_audit.systems.System.attacks`."""
    pred = attack_run_dir(
        run_dir, n_shadow=n_shadow, max_groups=max_groups, seed=seed, progress=progress
    )
    return score_run_dir(run_dir, pred, confidence=confidence)
