"""Dynamics inference, the one-shot experiments: :func:`run` (victims simulated, scored against
the drawn gravities), :func:`run_continuous`, and the crafted thetas of a malicious aggregator.

Dynamics inference's threat model and attack: :mod:`ldp_audit.attacks.dynamics_shadow`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from ldp_audit.attacks.dynamics_shadow import (
    GRAVITIES,
    LEAF_SAMPLES,
    ShadowGradientAttack,
    Simulator,
    check_candidates,
    check_count,
    check_episodes,
    check_theta,
    mechanism_config,
    mechanism_delta,
    mechanism_epsilon,
    privatize,
    simulate_shadow,
)
from ldp_audit.attacks.scoring import (
    AttackResult,
    composed_epsilon,
)
from ldp_audit.errors import InvalidParameterError
from ldp_audit.validation import check_probability, check_rng


def run(
    mechanism: Any,
    *,
    theta: np.ndarray,
    candidates: Sequence[float] = GRAVITIES,
    n_agents: int = 300,
    reports_per_agent: int = 1,
    n_shadow: int = 2000,
    method: str = "auto",
    classifier: Any = None,
    simulator: Simulator | None = None,
    alpha: float = 0.0,
    seed: int | None = None,
    rng: np.random.Generator | None = None,
    confidence: float = 0.95,
    attack: str = "dynamics",
    progress: bool = False,
) -> AttackResult:
    """Attack ``n_agents`` simulated agents that each submit ``T`` reports at ``theta``.

    The world: each agent draws its gravity uniformly from ``candidates``, runs ``T`` episodes at
    the broadcast ``theta`` and submits ``mechanism.privatize(gradient)`` for each (``T`` reports
    at ``epsilon`` each are ``T * epsilon``-LDP together, Sec. 3.2.1). The attacker simulates
    ``n_shadow`` shadow episodes per candidate, fits :class:`ShadowGradientAttack` and predicts
    each agent's gravity from all of its reports.

    Args:
        mechanism: the agents' mechanism (``None`` or ``NoPrivacy()`` for the baseline).
        theta: broadcast parameters (d,).
        candidates: the ``k`` equally likely gravities.
        n_agents: agents attacked (the accuracy's sample size).
        reports_per_agent: reports ``T`` per agent.
        n_shadow: shadow episodes per candidate gravity.
        method: see :class:`ShadowGradientAttack`.
        classifier: optional scikit-learn classifier for the classifier method.
        simulator: ``episode_gradients``-compatible; default the public PGC-A3C simulator.
        alpha: exploration probability of agents and shadows.
        seed: seed of ``numpy.random.default_rng`` (ignored when ``rng`` is given).
        rng: explicit generator; victims, shadows and noise get independent spawned streams.
        confidence: confidence of the interval and the epsilon lower bound.
        attack: name recorded in the result.
        progress: tqdm progress on stderr.

    Returns:
        The :class:`AttackResult`, with the ceiling at ``T * epsilon``.
    """
    t0 = time.perf_counter()
    cands = check_candidates(candidates)
    n_agents = check_count(n_agents, "n_agents")
    T = check_count(reports_per_agent, "reports_per_agent")
    n_shadow = check_count(n_shadow, "n_shadow")
    check_episodes(n_agents * T, "n_agents x reports_per_agent")
    check_episodes(n_shadow * len(cands), "n_shadow x len(candidates)")
    alpha = check_probability(alpha, "alpha", open_interval=False)
    delta = mechanism_delta(mechanism)
    theta = check_theta(theta)
    rng = check_rng(rng) if rng is not None else np.random.default_rng(seed)
    world_rng, shadow_rng, noise_rng = rng.spawn(3)

    # --- the world (agents' side): secrets drawn here are used only for scoring below ---
    secret_gravity = world_rng.choice(cands, size=n_agents)
    agent_of_report = np.repeat(np.arange(n_agents), T)
    grads = simulate_shadow(
        theta, secret_gravity[agent_of_report], world_rng, simulator=simulator, alpha=alpha
    )
    reports = privatize(mechanism, grads, world_rng)

    # --- the attacker: knows theta, mechanism, MDP-but-gravity; sees only `reports` ---
    shadow_g = np.repeat(cands, n_shadow)
    shadow = simulate_shadow(
        theta, shadow_g, shadow_rng, simulator=simulator, alpha=alpha, progress=progress
    )
    est = ShadowGradientAttack(
        mechanism, method=method, classifier=classifier, random_state=noise_rng
    ).fit(shadow, shadow_g)
    ids, guess, _ = est.predict_groups(reports, agent_of_report)

    # --- scoring only ---
    correct = int(np.sum(guess == secret_gravity[ids]))
    return AttackResult.from_guesses(
        attack=attack,
        mechanism=mechanism_config(mechanism),
        epsilon=mechanism_epsilon(mechanism),
        reports_per_agent=T,
        k=cands.size,
        n=n_agents,
        correct=correct,
        confidence=confidence,
        seconds=time.perf_counter() - t0,
        delta=delta,
        extra={
            "candidates": cands.tolist(),
            "n_shadow_per_candidate": n_shadow,
            "method": est.method_,
            "alpha": alpha,
        },
    )


def run_continuous(
    mechanism: Any,
    *,
    theta: np.ndarray,
    interval: tuple[float, float] = (9.5, 10.1),
    grid: int = 7,
    n_agents: int = 300,
    reports_per_agent: int = 1,
    n_shadow: int = 1000,
    method: str = "auto",
    simulator: Simulator | None = None,
    alpha: float = 0.0,
    seed: int | None = None,
    rng: np.random.Generator | None = None,
    progress: bool = False,
) -> AttackResult:
    """Continuous variant: gravity uniform on ``interval``; report the MAE of the estimate.

    The attacker fits :class:`ShadowGradientAttack` on ``grid`` evenly spaced gravities and
    estimates each agent's gravity as the posterior mean over the grid. The baseline is the MAE of
    always answering the interval's midpoint, ``(hi - lo) / 4``. No LDP ceiling applies to the
    MAE directly, so ``ceiling``/``epsilon_lower_bound`` are left at their trivial values.
    """
    t0 = time.perf_counter()
    lo, hi = (float(v) for v in interval)
    if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo < hi):
        raise InvalidParameterError(f"interval must satisfy 0 < lo < hi, got {interval!r}")
    grid = check_count(grid, "grid", minimum=2)
    n_agents = check_count(n_agents, "n_agents")
    T = check_count(reports_per_agent, "reports_per_agent")
    n_shadow = check_count(n_shadow, "n_shadow")
    check_episodes(n_agents * T, "n_agents x reports_per_agent")
    check_episodes(n_shadow * grid, "n_shadow x grid")
    alpha = check_probability(alpha, "alpha", open_interval=False)
    theta = check_theta(theta)
    rng = check_rng(rng) if rng is not None else np.random.default_rng(seed)
    world_rng, shadow_rng, noise_rng = rng.spawn(3)

    # --- the world ---
    secret_gravity = world_rng.uniform(lo, hi, size=n_agents)
    agent_of_report = np.repeat(np.arange(n_agents), T)
    grads = simulate_shadow(
        theta, secret_gravity[agent_of_report], world_rng, simulator=simulator, alpha=alpha
    )
    reports = privatize(mechanism, grads, world_rng)

    # --- the attacker ---
    cands = np.linspace(lo, hi, grid)
    shadow_g = np.repeat(cands, n_shadow)
    shadow = simulate_shadow(
        theta, shadow_g, shadow_rng, simulator=simulator, alpha=alpha, progress=progress
    )
    est = ShadowGradientAttack(mechanism, method=method, random_state=noise_rng).fit(
        shadow, shadow_g
    )
    ids, _, post = est.predict_groups(reports, agent_of_report)
    estimate = post @ est.classes_

    # --- scoring only ---
    err = np.abs(estimate - secret_gravity[ids])
    eps = mechanism_epsilon(mechanism)
    return AttackResult(
        attack="dynamics-continuous",
        mechanism=mechanism_config(mechanism),
        epsilon=eps,
        reports_per_agent=T,
        k=0,
        n=n_agents,
        correct=0,
        accuracy=float("nan"),
        accuracy_ci=(float("nan"), float("nan")),
        ceiling=1.0,
        composed_epsilon=composed_epsilon(eps, T),
        epsilon_lower_bound=0.0,
        mae=float(err.mean()),
        mae_baseline=(hi - lo) / 4.0,
        seconds=time.perf_counter() - t0,
        extra={
            "interval": [lo, hi],
            "grid": cands.tolist(),
            "mae_se": float(err.std(ddof=1) / math.sqrt(n_agents)) if n_agents > 1 else None,
            "method": est.method_,
        },
    )


# ------------------------------------------------------------------------------------------------
# Malicious aggregator
# ------------------------------------------------------------------------------------------------


def linear_controller_theta(
    weights: Sequence[float], *, gain: float = 10.0, value_scale: float = 1.0
) -> np.ndarray:
    """A theta (112,) whose greedy policy is ``push right iff weights . s > 0``.

    Network of Ono & Takahashi 2020 (Sec. 4, no biases): ``h = ReLU(theta_c s)`` with theta_c
    (16, 4), logits ``theta_p h`` with theta_p (2, 16), value ``theta_v h`` with theta_v (1, 16);
    flattened as ``[theta_c.ravel(), theta_p.ravel(), theta_v.ravel()]`` (the PGC-A3C layout of
    ``ldp_audit.training.pgc_a3c``). Hidden unit 0 is ``ReLU(w . s)``, unit 1 is ``ReLU(-w . s)``;
    action 1
    (right) gets logit ``gain * h0``, action 0 gets ``gain * h1``. All hidden units carry the
    value head (``value_scale``), so the value gradient is active on every step.
    """
    w = np.asarray(weights, dtype=np.float64).reshape(-1)
    if w.shape != (4,) or not np.isfinite(w).all():
        raise InvalidParameterError(f"weights must be 4 finite numbers, got {weights!r}")
    theta_c = np.zeros((16, 4))
    theta_c[0] = w
    theta_c[1] = -w
    theta_p = np.zeros((2, 16))
    theta_p[1, 0] = gain
    theta_p[0, 1] = gain
    theta_v = np.zeros((1, 16))
    theta_v[0, :2] = value_scale
    return np.concatenate([theta_c.ravel(), theta_p.ravel(), theta_v.ravel()])


def craft_theta(
    *,
    candidates: Sequence[float] = GRAVITIES,
    n_probe: int = 1000,
    n_designs: int = 12,
    simulator: Simulator | None = None,
    seed: int | None = None,
    rng: np.random.Generator | None = None,
    extra_designs: Sequence[np.ndarray] = (),
) -> tuple[np.ndarray, dict[str, Any]]:
    """The active (malicious) aggregator's crafted theta: the most gravity-revealing design.

    Searches a family of linear-controller policies (:func:`linear_controller_theta`: balancing
    controllers of varied angle / angular-velocity / position gains that keep the pole up where
    gravity acts on it for many steps, plus marginal ones that topple at a gravity-dependent
    time) and ``extra_designs``. Each design is scored by the held-out accuracy of the
    *non-private* shadow classifier (fit on half of ``n_probe`` episodes per candidate, tested on
    the other half); the best design is returned. Knowledge used: the public MDP simulator only.

    Returns:
        ``(theta (d,), info)`` with the probe accuracy of every design in ``info``.
    """
    cands = check_candidates(candidates)
    # the non-private classifier is fit on n_probe // 2 per candidate: >= 2 leaves' worth in all
    n_probe = check_count(n_probe, "n_probe", minimum=2 * math.ceil(2 * LEAF_SAMPLES / cands.size))
    n_designs = check_count(n_designs, "n_designs")
    rng = check_rng(rng) if rng is not None else np.random.default_rng(seed)
    design_rng, probe_rng = rng.spawn(2)
    designs: list[tuple[str, np.ndarray]] = []
    base = [
        (0.0, 0.0, 1.0, 1.0),
        (0.0, 0.0, 1.0, 0.0),
        (0.0, 0.0, 1.0, 0.2),
        (0.1, 0.5, 1.0, 1.0),
        (0.0, 0.0, 1.0, 5.0),
        (0.0, 0.0, 0.0, 1.0),
    ]
    for w in base:
        designs.append((f"linear{list(w)}", linear_controller_theta(w)))
    while len(designs) < n_designs:
        w = design_rng.normal(size=4) * np.array([0.2, 0.5, 1.0, 1.0])
        w[2] = abs(w[2]) + 0.1
        designs.append((f"linear{np.round(w, 3).tolist()}", linear_controller_theta(w)))
    for i, th in enumerate(extra_designs):
        designs.append((f"extra{i}", np.asarray(th, dtype=np.float64).reshape(-1)))

    half = n_probe // 2
    labels = np.repeat(cands, n_probe)
    is_train = np.tile(np.arange(n_probe) < half, cands.size)
    scores: dict[str, float] = {}
    best = (-1.0, "", designs[0][1])
    for (name, th), r in zip(designs, probe_rng.spawn(len(designs)), strict=True):
        grads = simulate_shadow(th, labels, r, simulator=simulator)
        est = ShadowGradientAttack(None, method="classifier").fit(grads[is_train], labels[is_train])
        acc = float(est.score(grads[~is_train], labels[~is_train]))
        scores[name] = acc
        if acc > best[0]:
            best = (acc, name, th)
    return best[2], {"chosen": best[1], "probe_accuracy": scores, "n_probe": n_probe}
