"""Dynamics inference on a run directory: the transcript a trainer wrote (PGC-A3C's CartPole
gravity, or any declared private parameter of a Gymnasium or own-loop run), scored against its
secrets.

Dynamics inference's threat model and attack: :mod:`ldp_audit.attacks.dynamics_shadow`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit.attacks.dynamics_shadow import (
    GRAVITIES,
    ShadowGradientAttack,
    Simulator,
    add_by_group,
    check_candidates,
    check_count,
    check_episodes,
    check_method,
    known_law,
    mechanism_config,
    mechanism_delta,
    mechanism_epsilon,
    simulate_chunks,
    simulate_shadow,
)
from ldp_audit.attacks.scoring import (
    AttackResult,
    one_openmp_thread,
)
from ldp_audit.errors import InvalidParameterError, RunDirectoryError, UserCodeError
from ldp_audit.limits import Estimate, check_resources
from ldp_audit.rundir import RunDir
from ldp_audit.systems import ArraySpec, TranscriptSchema
from ldp_audit.validation import check_probability

#: What these attacks read of transcript.npz, whichever system wrote the run (PGC-A3C, its
#: Gymnasium path, an own loop, a test's trainer): the PGC-A3C layout.
_READS = TranscriptSchema(
    (
        *(ArraySpec(k, "iu", 1) for k in ("trial", "agent", "submission")),
        ArraySpec("theta_index", "iu", 1, indexes="thetas"),
        ArraySpec("report", "f", 2),
        ArraySpec("thetas", "f", 2, rows=None),
    )
)

# ------------------------------------------------------------------------------------------------
# Attacking a run directory (transcript written by a trainer)
# ------------------------------------------------------------------------------------------------


def attack_run_dir(
    run_dir: str | Path,
    *,
    mechanism: Any = None,
    n_shadow: int = 200,
    max_groups: int | None = 200,
    method: str = "auto",
    candidates: Sequence[float] | None = None,
    simulator: Simulator | None = None,
    alpha: float | str = "schedule",
    seed: int | None = None,
    progress: bool = False,
    force: bool = False,
) -> dict[str, Any]:
    """Attack the transcript of a run directory; reads ``transcript.npz`` + ``config.json`` only.

    Each report is scored with shadow episodes simulated at the theta it was computed at
    (``thetas[theta_index]``), under the mechanism in ``config.json`` (or ``mechanism``), and the
    log-likelihoods of a group's reports add up.

    Args:
        run_dir: the run directory (docs/interfaces.md).
        mechanism: override the mechanism read from ``config.json``.
        n_shadow: shadow episodes per candidate per distinct theta.
        max_groups: attack at most this many groups (first ones in arrival order); None for all.
        alpha: exploration probability of the shadows, or ``"schedule"``: the protocol's public
            ``max(0, alpha_start - n / alpha_decay)`` at the report's submission index ``n``
            (read from ``config.json``; PGC-A3C defaults 0.5 and 1800).
        candidates: the candidate gravities; None: the run's ``gravities`` (config.json),
            else the paper's.
        method, simulator, seed, progress: as in :func:`run`.
        force: run even where the shadows held at once exceed the memory limit
            (:func:`shadow_estimate`, ``ldp_audit.limits``).

    Returns:
        Predictions, without any ground truth: ``{"rows": [...], "groups": (G, 2),
        "group_of_row": (R,), "guess": (G,), "posterior": (G, k), "candidates": [...],
        "mechanism": config, "epsilon": eps, "delta": the mechanism's delta (0 if pure),
        "reports_per_group": (G,), "seconds": the
        attack's own time (carried into the scored result)}``.
    """
    t0 = time.perf_counter()  # the attack's own time, recorded in its result's seconds
    run = RunDir(run_dir)
    tr = run.transcript(_READS)  # what crossed the trust boundary (never secrets.npz)
    alpha_at, train_cfg = _alpha_at(alpha, method, run.config, 0.5)
    if candidates is None:  # the run's public candidate gravities (the paper's by default)
        candidates = train_cfg.get("gravities") or GRAVITIES
    cands = check_candidates(candidates)
    if mechanism is None:
        mechanism = _run_mechanism(run.config)
    grouping = _groups(tr, max_groups, arrival=False)
    sim = partial(simulate_shadow, simulator=simulator)
    pred, _ = _predict(
        tr, grouping, cands, n_shadow, mechanism, method, alpha_at, seed, sim, progress, force
    )
    return {**pred, "seconds": time.perf_counter() - t0}


def _groups(
    tr: dict[str, np.ndarray], max_groups: int | None, *, arrival: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The attacked groups of the transcript (agents): their (trial, agent) keys, each row's
    group, and the rows of the first ``max_groups`` groups (in key order, or with
    ``arrival`` in the order of their first report)."""
    if not tr["trial"].size:  # scoring raised ValueError on the empty guesses (exit 3)
        raise InvalidParameterError(
            "the run's transcript holds no report (a run interrupted before its first "
            "release): nothing to attack"
        )
    keys = np.stack([tr["trial"], tr["agent"]], axis=1)
    uniq, first_row, group_of_row = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    group_of_row = group_of_row.reshape(-1)
    order = np.arange(uniq.shape[0])
    if arrival:  # groups in arrival order (first report), not in id order
        order = np.argsort(first_row, kind="stable")
    if max_groups is not None:
        order = order[: check_count(max_groups, "max_groups")]
    return uniq, group_of_row, np.flatnonzero(np.isin(group_of_row, order))


def _alpha_at(
    alpha: float | str, method: str, cfg: dict[str, Any], start: float
) -> tuple[Callable[[float], float], dict[str, Any]]:
    """``method`` and ``alpha`` checked, and the shadows' exploration at a report's submission
    index: ``alpha``, or for ``"schedule"`` the run's fixed ``alpha`` or its public ``max(0,
    alpha_start - n / alpha_decay)`` (Sec. 4; ``start`` where the config has no
    ``alpha_start``); with the run's training config (``config.json``'s ``config``)."""
    check_method(method)
    if isinstance(alpha, str) and alpha != "schedule":
        raise InvalidParameterError(f"alpha must be a probability or 'schedule', got {alpha!r}")
    train_cfg = cfg.get("config") if isinstance(cfg.get("config"), dict) else {}
    if not isinstance(alpha, str):
        a = check_probability(alpha, "alpha", open_interval=False)
        return (lambda n: a), train_cfg
    if "alpha" in train_cfg:  # a fixed-alpha protocol
        return (lambda n: float(train_cfg["alpha"])), train_cfg
    a0 = float(train_cfg.get("alpha_start", start))
    decay = float(train_cfg.get("alpha_decay", 1800.0))
    return (lambda n: max(0.0, a0 - float(n) / decay)), train_cfg


def _predict(
    tr: dict[str, np.ndarray],
    grouping: tuple[np.ndarray, np.ndarray, np.ndarray],
    cands: np.ndarray,
    n_shadow: int,
    mechanism: Any,
    method: str,
    alpha_at: Callable[[float], float],
    seed: int | None,
    simulate: Callable[..., np.ndarray],
    progress: bool,
    force: bool = False,
) -> tuple[dict[str, Any], str]:
    """The attack's prediction for the groups of :func:`_groups` (``grouping``), and the method
    used.

    Per row, the log-likelihood of its report under each candidate: known noise law (or
    ``method="likelihood"``): shadows at each report's own theta (Monte Carlo per distinct
    theta). Else one classifier on shadows pooled over the distinct thetas (consecutive thetas
    differ by one small update), ``n_shadow`` per candidate per theta, one batched call.
    ``simulate(theta, values, rng, alpha=, progress=)``. The reports of one group are
    independent given its value, so their log-likelihoods add (uniform prior); the guess is the
    argmax, the posterior normalised. The shadow reports held at once (``n_shadow`` per
    candidate, for one theta or, with the classifier, for all) are checked against the memory
    limit first (:func:`shadow_estimate`; ``force`` runs anyway).
    """
    groups, group_of_row, rows = grouping
    tidx = tr["theta_index"][rows]
    sub = tr["submission"][rows]
    thetas_used, first = np.unique(tidx, return_index=True)
    likelihood = method == "likelihood" or (method == "auto" and known_law(mechanism) is not None)
    at_once = cands.size * n_shadow * (1 if likelihood else thetas_used.size)
    check_resources([shadow_estimate(n_shadow, at_once, tr["report"].shape[-1])], force=force)
    rng = np.random.default_rng(seed)
    ll = np.zeros((rows.size, cands.size))
    if likelihood:
        it: Any = zip(thetas_used, rng.spawn(thetas_used.size), strict=True)
        if progress:
            from tqdm.auto import tqdm

            it = tqdm(list(it), desc="thetas", unit="theta")
        for v, r in it:
            sel = np.flatnonzero(tidx == v)
            shadow_g = np.repeat(cands, n_shadow)
            s_rng, n_rng = r.spawn(2)
            a = alpha_at(sub[sel].min())
            shadow = simulate(tr["thetas"][v], shadow_g, s_rng, alpha=a, progress=False)
            est = ShadowGradientAttack(mechanism, method="likelihood", random_state=n_rng)
            ll[sel] = est.fit(shadow, shadow_g).log_likelihood(tr["report"][rows[sel]])
        used = "likelihood"
    else:
        s_rng, n_rng = rng.spawn(2)
        th_rows = np.repeat(thetas_used, cands.size * n_shadow)
        shadow_g = np.tile(np.repeat(cands, n_shadow), thetas_used.size)
        a_rows = np.repeat([alpha_at(sub[i]) for i in first], cands.size * n_shadow)
        shadow = simulate(tr["thetas"][th_rows], shadow_g, s_rng, alpha=a_rows, progress=progress)
        est = ShadowGradientAttack(mechanism, method="classifier", random_state=n_rng)
        with one_openmp_thread():
            ll[:] = est.fit(shadow, shadow_g).log_likelihood(tr["report"][rows])
        used = "classifier"
    gids, inv, total, post = add_by_group(ll, group_of_row[rows])
    return {
        "rows": rows,
        "groups": groups[gids],
        "group_of_row": inv,
        "guess": cands[np.argmax(total, axis=1)],
        "posterior": post,
        "candidates": cands.tolist(),
        "mechanism": mechanism_config(mechanism),
        "epsilon": mechanism_epsilon(mechanism),
        "delta": mechanism_delta(mechanism),
        "reports_per_group": np.bincount(inv, minlength=gids.size),
    }, used


#: Peak bytes per shadow report value held by :func:`_predict` (the shadows, their gradients'
#: working copies, the likelihood's or the classifier's arrays), measured as the growth of the
#: maximum RSS of `attack dynamics --run-dir` with --shadow (session 55): a CartPole PGC-A3C run
#: (112 values, Laplace likelihood, --shadow 4,000 to 48,000) 33 bytes per value, a MountainCar-v0
#: run (96 values) 26 with the likelihood and 19 with the classifier (PRS); 40 leaves a margin.
_BYTES_PER_VALUE = 40


def shadow_estimate(n_shadow: int, reports: int, d: int) -> Estimate:
    """The memory of ``reports`` shadow reports of ``d`` values held at once (``n_shadow`` per
    candidate and theta): the estimate :func:`_predict` checks before any simulation."""
    return Estimate(f"n_shadow={n_shadow}", f"{reports:,} shadow reports of {d} values held at "
                    "once", float(reports) * d * _BYTES_PER_VALUE)  # fmt: skip


class _ClippedRelease:
    """PGC-A3C's ``mechanism="none"``: the gradient is L1-clipped to C/2 (eq. 19), no noise."""

    epsilon = math.inf

    def __init__(self, clip: float) -> None:
        self.clip = float(clip)

    def privatize(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        norms = np.abs(x).sum(axis=1, keepdims=True)
        return x * np.minimum(1.0, (self.clip / 2.0) / np.maximum(norms, 1e-300))

    def to_config(self) -> dict[str, Any]:
        return {"name": "none", "clip": self.clip}


def _secret_truth(
    run_dir: str | Path, prediction: dict[str, Any], key: str
) -> tuple[np.ndarray, np.ndarray]:
    """The secret ``key`` of ``secrets.npz`` (scoring only: the one place these attacks open
    it) of every attacked transcript row, and of every group (its rows')."""
    run = RunDir(run_dir)
    values = np.asarray(run.secrets(key, for_scoring=True)[key], dtype=np.float64)
    if values.shape[0] <= int(prediction["rows"].max(initial=-1)):
        raise RunDirectoryError(f"{run.path}/secrets.npz: {key} has fewer rows than the transcript")
    truth_rows = values[prediction["rows"]]
    truth = np.full(prediction["guess"].shape[0], np.nan)
    truth[prediction["group_of_row"]] = truth_rows
    return truth_rows, truth


def check_uniform_secrets(run_dir: str | Path) -> None:
    """Refuse a run whose config fixes agents' gravities (``agent_gravities``, the membership
    canaries): the ceiling ``e^eps/(e^eps+k-1)`` and chance ``1/k`` hold for gravities drawn
    uniformly, and always guessing a planted gravity could beat them (s53-attackprobe)."""
    fixed = (RunDir(run_dir).config.get("config") or {}).get("agent_gravities")
    if fixed is not None:
        raise InvalidParameterError(
            f"{run_dir}: config.agent_gravities fixes {len(fixed)} agents' gravities, so they are "
            "not equally likely: the dynamics attack's ceiling e^eps/(e^eps+k-1) and chance 1/k "
            "do not apply (score such a run with ldp_audit.attacks.membership)"
        )


def score_run_dir(
    run_dir: str | Path, prediction: dict[str, Any], *, confidence: float = 0.95
) -> AttackResult:
    """Score :func:`attack_run_dir` predictions against ``secrets.npz`` (the only reader of it).

    The ceiling uses the largest number of reports in any attacked group; a run with fixed
    ``agent_gravities`` is refused (:func:`check_uniform_secrets`).
    """
    check_uniform_secrets(run_dir)
    t0 = time.perf_counter()
    inv = prediction["group_of_row"]
    truth_rows, truth = _secret_truth(run_dir, prediction, "gravity")
    G = truth.size
    consistent = np.ones(G, dtype=bool)  # every row of the group has the group's gravity
    np.logical_and.at(consistent, inv, truth_rows == truth[inv])
    # exact: a guess is a candidate; np.isclose's rtol 1e-5 counted 9.8 for 9.800000001 (acc 1.0)
    correct = int(np.sum(prediction["guess"] == truth))
    return prediction_result(
        "dynamics-transcript",
        prediction,
        n=G,
        correct=correct,
        confidence=confidence,
        t0=t0,
        extra={
            "groups_with_one_gravity": int(consistent.sum()),
            "reports_per_group_min": int(prediction["reports_per_group"].min()),
            "candidates": prediction["candidates"],
        },
    )


def prediction_result(
    attack: str,
    prediction: dict[str, Any],
    *,
    n: int,
    correct: int,
    confidence: float,
    t0: float,
    extra: dict[str, Any],
    shares: tuple[float, ...] | None = None,
) -> AttackResult:
    """Score a run's predictions (``n`` groups, ``correct`` right): k candidates, T reports per
    group at most, the ceiling the run's epsilon (and delta, if any) allows (shared with
    :mod:`ldp_audit.attacks.frd`), raised where the secrets' ``shares`` are unequal
    (:meth:`AttackResult.from_guesses`)."""
    return AttackResult.from_guesses(
        attack=attack,
        mechanism=dict(prediction["mechanism"]),
        epsilon=float(prediction["epsilon"]),
        delta=float(prediction.get("delta", 0.0)),
        reports_per_agent=int(prediction["reports_per_group"].max()),
        k=len(prediction["candidates"]),
        n=n,
        correct=correct,
        confidence=confidence,
        # the attack's simulation and fit (the prediction's seconds) plus this scoring: an
        # attack of 37 CPU-s once recorded 0.03 s, the scoring alone (issue 39)
        seconds=float(prediction.get("seconds", 0.0)) + time.perf_counter() - t0,
        extra=extra,
        shares=shares,
    )


# ------------------------------------------------------------------------------------------------
# Any private parameter of any environment: runs that declare one (config.json
# "private_parameter": the generic Gymnasium trainer, ldp_audit.run's own loops)
# ------------------------------------------------------------------------------------------------

#: Episodes per simulator call of the generic attack (bounded memory; each call is batched).
_GENERIC_CHUNK = 2048


def _run_mechanism(cfg: dict[str, Any], generic: bool = False) -> Any:
    """The per-report mechanism of a run (``config.json``), as the attacker knows it: the
    non-private baseline of PGC-A3C (any run whose config says ``mechanism: none``; with
    ``generic`` only a ``pgc-a3c-gym`` run's) is an L1 clip to C/2 (C = ``clip``, else 10)."""
    from ldp_audit.mechanisms import from_config

    mech = cfg.get("mechanism")
    if not isinstance(mech, dict):
        raise RunDirectoryError("config.json has no single per-report mechanism to attack")
    train_cfg = cfg.get("config") if isinstance(cfg.get("config"), dict) else {}
    if train_cfg.get("mechanism") == "none" and (
        not generic or cfg.get("algorithm") == "pgc-a3c-gym"
    ):
        clip = train_cfg.get("clip")
        return _ClippedRelease(10.0 if clip is None else float(clip))
    return from_config(mech)


def _simulate_generic(
    sim: Simulator,
    theta: np.ndarray,
    values: np.ndarray,
    rng: np.random.Generator,
    alpha: Any,
    progress: bool = False,
) -> np.ndarray:
    theta_rows = np.broadcast_to(theta, (values.size, np.shape(theta)[-1]))
    alpha = np.broadcast_to(np.asarray(alpha, dtype=np.float64), values.shape)
    return simulate_chunks(sim, theta_rows, values, rng, alpha, _GENERIC_CHUNK, progress)


def _user_simulator(sim: Simulator, d: int) -> Simulator:
    """``sim`` whose failure, or gradients not finite and of shape (theta rows, ``d``: the
    reports' size, which need not be theta's), is a :class:`UserCodeError` naming it (the
    user's code, never a bug of this toolkit)."""
    name = getattr(sim, "__qualname__", repr(sim))

    def run(theta: np.ndarray, values: np.ndarray, rng: Any, alpha: Any) -> Any:
        try:
            grads, scores = sim(theta, values, rng, alpha)
            g = np.asarray(grads, dtype=np.float64)
        except Exception as exc:  # noqa: BLE001 - anything the user's simulator raises
            raise UserCodeError(f"simulator {name!r} raised {type(exc).__name__}: {exc}") from exc
        if g.shape != (theta.shape[0], d) or not np.isfinite(g).all():
            raise UserCodeError(
                f"simulator {name!r} returned gradients of shape {g.shape}, expected "
                f"{(theta.shape[0], d)} (one finite report per theta row)"
            )
        return g, scores

    return run


def attack_private_param_run(
    run_dir: str | Path,
    *,
    simulator: Simulator | None = None,
    env_module: str | None = None,
    n_shadow: int = 50,
    max_groups: int | None = 200,
    method: str = "auto",
    alpha: float | str = "schedule",
    seed: int | None = None,
    progress: bool = False,
    force: bool = False,
) -> dict[str, Any]:
    """Attack a run that declares a private parameter; reads config.json and transcript.npz.

    The candidates come from ``config.json``'s ``private_parameter``; shadow agents are
    simulated in each candidate environment at the theta each report was computed at
    (``thetas[theta_index]``). Laplace (known law): the exact likelihood, shadows per distinct
    theta; otherwise one classifier on shadows pooled over the distinct thetas
    (:class:`ShadowGradientAttack`). Reports of one agent add their log-likelihoods.

    Args:
        run_dir: the run directory.
        simulator: ``simulator(theta (B, d), values (B,), rng, alpha (B,)) -> (grads (B, m),
            scores)``, m the reports' size (need not be d),
            the public MDP; default for a ``pgc-a3c-gym`` run: its environment and network
            (:func:`ldp_audit.training.pgc_a3c_gym.model.simulator_for`). An own loop passes
            its own.
        env_module: the module registering the run's environment (imported only when named
            here: a run directory never makes the attacker import code).
        n_shadow: shadow episodes per candidate per distinct theta.
        max_groups: agents attacked (first in arrival order); None for all.
        method: "auto", "likelihood" or "classifier" (:class:`ShadowGradientAttack`).
        alpha: the shadows' exploration, or "schedule" (``alpha_start``, ``alpha_decay`` of the
            run's config at the report's submission index; 0 where the config has none).
        seed: seed of the attacker's randomness.
        progress: tqdm bars on stderr.
        force: as in :func:`attack_run_dir`.

    Returns:
        Predictions without any ground truth (the keys of :func:`attack_run_dir`, plus
        ``parameter`` and ``env_id``).
    """
    t0 = time.perf_counter()  # the attack's own time, recorded in its result's seconds
    run = RunDir(run_dir)
    cfg = run.config
    pp = cfg.get("private_parameter")
    if not isinstance(pp, dict) or not isinstance(pp.get("name"), str):
        raise RunDirectoryError(
            f"{run.path}: config.json declares no private_parameter (name, values): the generic "
            "dynamics attack needs one (docs/own-loop.md)"
        )
    if not isinstance(pp.get("values"), list) or len(pp["values"]) < 2:
        raise RunDirectoryError(
            f"{run.path}: private_parameter.values must list >= 2 candidates, got "
            f"{pp.get('values')!r}"
        )
    n_shadow = check_count(n_shadow, "n_shadow")
    alpha_at, _ = _alpha_at(alpha, method, cfg, 0.0)
    cands = np.sort(np.asarray(pp["values"], dtype=np.float64))
    if np.unique(cands).size != cands.size or not np.isfinite(cands).all():
        raise RunDirectoryError(f"{run.path}: private_parameter.values must be distinct and finite")
    user = simulator is not None
    if simulator is None:
        if cfg.get("algorithm") != "pgc-a3c-gym":
            raise InvalidParameterError(
                f"a {cfg.get('algorithm')!r} run needs its simulator (the public MDP and "
                "update rule that produced its reports): pass simulator= (Python) or "
                "--simulator MODULE:FUNCTION (CLI)"
            )
        from ldp_audit.training.pgc_a3c_gym.config import config_from_run
        from ldp_audit.training.pgc_a3c_gym.model import simulator_for

        gym_cfg = config_from_run(cfg, env_module)
        simulator = simulator_for(gym_cfg)
    mechanism = _run_mechanism(cfg, generic=True)
    tr = run.transcript(_READS)  # what crossed the trust boundary (never secrets.npz)
    if not user and tr["thetas"].shape[-1] != gym_cfg.network.dim:  # was "theta must have 112
        raise InvalidParameterError(  # columns, got shape (240, 96)", naming no cause
            f"env {pp.get('env_id')!r} as registered now gives a network of "
            f"{gym_cfg.network.dim} parameters, but this run trained one of "
            f"{tr['thetas'].shape[-1]}: its observation or action space is not the one the "
            "run trained on (its module changed?); attack with the env the run trained on"
        )
    if user:
        simulator = _user_simulator(simulator, tr["report"].shape[-1])
    grouping = _groups(tr, max_groups, arrival=True)
    check_episodes(
        int(np.unique(tr["theta_index"][grouping[2]]).size) * cands.size * n_shadow, "the shadows"
    )
    sim = partial(_simulate_generic, simulator)
    pred, used = _predict(
        tr, grouping, cands, n_shadow, mechanism, method, alpha_at, seed, sim, progress, force
    )
    return {
        **pred,
        "parameter": pp["name"],
        "env_id": pp.get("env_id"),
        "method": used,
        "n_shadow": n_shadow,
        "seconds": time.perf_counter() - t0,
    }


def score_private_param_run(
    run_dir: str | Path, prediction: dict[str, Any], *, confidence: float = 0.95
) -> AttackResult:
    """Score :func:`attack_private_param_run` against ``secrets.npz``'s ``value`` (the only
    reader of it). The ceiling is e^(T eps) / (e^(T eps) + k - 1) with T the largest number of
    reports of any attacked agent and eps the per-report epsilon (sequential composition); an
    (eps, delta) mechanism adds (k - 1) min(1, T delta) to the numerator. The ceiling is raised
    where the agents' values are not equally common: an own loop draws them as it likes, and an
    attack that learnt nothing (every likelihood tied, the first candidate guessed) read
    0.900 [0.850, 0.938], "VIOLATION" at epsilon 0.1, on 200 agents of whom 90 % held that
    value (session 57 probe)."""
    t0 = time.perf_counter()
    _, truth = _secret_truth(run_dir, prediction, "value")
    correct = int(np.sum(prediction["guess"] == truth))
    shares = tuple(float(np.mean(truth == c)) for c in prediction["candidates"])
    return prediction_result(
        "dynamics-private-parameter",
        prediction,
        n=truth.size,
        correct=correct,
        confidence=confidence,
        t0=t0,
        extra={
            "parameter": prediction["parameter"],
            "env_id": prediction["env_id"],
            "candidates": prediction["candidates"],
            "method": prediction["method"],
            "n_shadow_per_candidate_per_theta": prediction["n_shadow"],
            "reports_per_group_min": int(prediction["reports_per_group"].min()),
            "shares": list(shares),
        },
        shares=shares,
    )


def private_param_dynamics(
    run_dir: str | Path,
    *,
    seed: int = 0,
    confidence: float = 0.95,
    progress: bool = False,
    n_shadow: int = 50,
    max_groups: int | None = 200,
    simulator: Simulator | None = None,
    env_module: str | None = None,
    force: bool = False,
) -> AttackResult:
    """``attack dynamics --run-dir`` on a run that declares a private parameter: the attack
    (:func:`attack_private_param_run`) scored against ``secrets.npz``."""
    pred = attack_private_param_run(
        run_dir,
        simulator=simulator,
        env_module=env_module,
        n_shadow=n_shadow,
        max_groups=max_groups,
        seed=seed,
        progress=progress,
        force=force,
    )
    return score_private_param_run(run_dir, pred, confidence=confidence)
