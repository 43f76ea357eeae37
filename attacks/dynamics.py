"""Dynamics inference: recover each agent's gravity from its submitted (noisy) gradients.

Threat model (issue 6; Ono & Takahashi 2020, Sec. 1, after Pan et al. 2019): the aggregator is
honest-but-curious. It knows the MDP except each agent's gravity, the mechanism and its
parameters, and the theta it broadcast; it sees only what crossed the trust boundary (the
transcript: agent id, theta version, noisy report). Gravity is one of ``k`` equally likely
candidates (the paper's {9.7, 9.8, 9.9}).

Attack (shadow gradients): for each candidate gravity, simulate many episodes at the broadcast
theta with the *public* simulator of the known MDP
(``ldp_audit.training.pgc_a3c.episode_gradients``, one
batched call for thousands of episodes), then either

* ``method="likelihood"`` — evaluate the exact likelihood of the report under the known noise law,
  marginalised over the episode by Monte Carlo over the shadow gradients:
  ``p(y | g) ~= mean_j q(y | grad_j(g))`` with ``q`` the mechanism's density (Laplace, Alg. 2 eqs.
  19-21: ``q(y | x) = prod_i (eps / 2C) exp(-eps |y_i - clip(x)_i| / C)``; k-ary randomized
  response: ``e^eps / (e^eps + k - 1)`` on the truth), or
* ``method="classifier"`` — privatise the shadow gradients with the same mechanism and fit a
  scikit-learn classifier on them (any mechanism, including PRS whose projection matrix is not in
  the transcript, and the non-private baseline whose "density" is a point mass).

Several reports of one agent (multi-round mode, Sec. 3.2.1) are independent given the gravity, so
their log-likelihoods add (uniform prior). The estimator follows scikit-learn (``fit -> self``,
fitted attributes end in ``_``, ``predict``, ``predict_proba``, ``score``); :func:`run` is the
one-shot experiment returning an :class:`~ldp_audit.attacks.scoring.AttackResult`.

Separation of knowledge: the attacker functions take reports, thetas and the mechanism only.
Ground truth is touched in one place per entry point, marked ``# --- scoring only ---``
(:func:`run` draws the victims' gravities as the world, :func:`score_run_dir` reads
``secrets.npz``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy.spatial.distance import cdist
from scipy.special import logsumexp
from sklearn.base import BaseEstimator, ClassifierMixin, clone

from ldp_audit.attacks.scoring import (
    AttackResult,
    composed_epsilon,
)
from ldp_audit.errors import InvalidParameterError, RunDirectoryError
from ldp_audit.validation import check_batch, check_probability, check_rng

__all__ = [
    "GRAVITIES",
    "ShadowGradientAttack",
    "Simulator",
    "attack_private_param_run",
    "attack_run_dir",
    "craft_theta",
    "linear_controller_theta",
    "mechanism_epsilon",
    "private_param_dynamics",
    "run",
    "run_continuous",
    "score_private_param_run",
    "score_run_dir",
    "simulate_shadow",
]

#: The paper's candidate gravities (Ono & Takahashi 2020, Sec. 4: psi uniform in {9.7, 9.8, 9.9}).
GRAVITIES: tuple[float, ...] = (9.7, 9.8, 9.9)

#: ``simulator(theta (B, d), gravity (B,), rng, alpha) -> (grads (B, d), scores (B,))``
Simulator = Callable[..., tuple[np.ndarray, np.ndarray]]

_CHUNK = 4096  # episodes per simulator call (bounded memory, still one vectorised call each)


def _default_simulator() -> Simulator:
    """The public simulator of the known MDP (lazy import: it needs the training package)."""
    from ldp_audit.training.pgc_a3c import episode_gradients

    return episode_gradients


def mechanism_epsilon(mechanism: Any) -> float:
    """The mechanism's per-report epsilon (``inf`` for ``None`` / the non-private baseline)."""
    if mechanism is None:
        return math.inf
    return float(getattr(mechanism, "epsilon", math.inf))


def _mechanism_config(mechanism: Any) -> dict[str, Any]:
    if mechanism is None:
        return {"name": "none"}
    to_config = getattr(mechanism, "to_config", None)
    return dict(to_config()) if callable(to_config) else {"name": type(mechanism).__name__}


def _privatize(mechanism: Any, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    if mechanism is None:
        return np.array(x, dtype=np.float64, copy=True)
    return np.asarray(mechanism.privatize(x, rng), dtype=np.float64)


def simulate_shadow(
    theta: np.ndarray,
    gravities: Sequence[float] | np.ndarray,
    rng: np.random.Generator,
    *,
    simulator: Simulator | None = None,
    alpha: float | np.ndarray = 0.0,
    progress: bool = False,
) -> np.ndarray:
    """Clean gradients of one episode per entry of ``gravities``, at ``theta``, batched.

    Args:
        theta: the broadcast parameters, shape (d,) (the same theta for every episode) or
            (B, d) (one theta per episode).
        gravities: gravity of each episode, shape (B,).
        rng: randomness of the episodes (initial states, exploration).
        simulator: ``episode_gradients``-compatible callable; default the public PGC-A3C one.
        alpha: exploration probability of the simulated agents (0: greedy), scalar or (B,).
        progress: show a tqdm bar on stderr.

    Returns:
        Gradients, shape (B, d).
    """
    rng = check_rng(rng)
    sim = simulator if simulator is not None else _default_simulator()
    g = np.asarray(gravities, dtype=np.float64).reshape(-1)
    if g.size == 0 or not np.isfinite(g).all() or (g <= 0).any():
        raise InvalidParameterError(f"gravities must be finite and > 0, got {g[:5]!r}...")
    th = np.asarray(theta, dtype=np.float64)
    if th.ndim == 1:
        th = np.broadcast_to(th, (g.size, th.size))
    if th.ndim != 2 or th.shape[0] != g.size:
        raise InvalidParameterError(
            f"theta must have shape (d,) or ({g.size}, d), got {np.shape(theta)}"
        )
    out = []
    starts = range(0, g.size, _CHUNK)
    if progress:
        from tqdm.auto import tqdm

        starts = tqdm(starts, desc="shadow episodes", unit="chunk", leave=False)
    for s in starts:
        a = alpha if np.ndim(alpha) == 0 else np.asarray(alpha)[s : s + _CHUNK]
        grads, _ = sim(np.ascontiguousarray(th[s : s + _CHUNK]), g[s : s + _CHUNK], rng, a)
        out.append(np.asarray(grads, dtype=np.float64))
    return np.concatenate(out, axis=0)


def _known_law(mechanism: Any) -> str | None:
    """Name of the noise law the likelihood method can evaluate exactly, else None."""
    name = type(mechanism).__name__
    if name == "Laplace":
        return "laplace"
    if name == "RandomizedResponse":
        return "rr"
    return None


class ShadowGradientAttack(ClassifierMixin, BaseEstimator):
    """Gravity classifier trained on shadow gradients (scikit-learn estimator).

    ``fit(X, y)`` takes *clean* shadow gradients ``X`` simulated at the broadcast theta (see
    :func:`simulate_shadow`) with their gravities ``y``; the attack privatises them itself (the
    classifier method) or keeps them as Monte Carlo support of the likelihood (the likelihood
    method). ``predict_proba(R)`` then scores *noisy reports* ``R`` (uniform prior), and
    :meth:`predict_groups` combines all reports of one agent.

    Args:
        mechanism: the attacked mechanism (``None`` for the non-private baseline).
        method: ``"likelihood"`` (exact noise law; Laplace and randomized response),
            ``"classifier"`` (sklearn classifier on privatised shadows) or ``"auto"``
            (likelihood where the law is known, else classifier).
        classifier: a scikit-learn classifier with ``predict_proba`` (default: gradient boosting
            for the non-private baseline, standardise + shrinkage LDA under noise).
        n_noise: privatised copies of each shadow gradient for the classifier method.
        random_state: seed or ``numpy.random.Generator`` for privatising the shadows.

    Attributes:
        classes_: candidate gravities, sorted.
        method_: the method used.
        support_: per class, the clipped shadow gradients (likelihood method).
        classifier_: the fitted classifier (classifier method).
    """

    def __init__(
        self,
        mechanism: Any = None,
        *,
        method: str = "auto",
        classifier: Any = None,
        n_noise: int = 1,
        random_state: int | np.random.Generator | None = None,
    ) -> None:
        self.mechanism = mechanism
        self.method = method
        self.classifier = classifier
        self.n_noise = n_noise
        self.random_state = random_state

    # -- fitting -----------------------------------------------------------------------------
    def fit(self, X: np.ndarray, y: np.ndarray) -> ShadowGradientAttack:
        """Fit on clean shadow gradients ``X`` (n, d) labelled with gravities ``y`` (n,)."""
        X = check_batch(X, "X")
        y = np.asarray(y, dtype=np.float64).reshape(-1)
        if y.shape[0] != X.shape[0]:
            raise InvalidParameterError(f"y must have {X.shape[0]} entries, got {y.shape[0]}")
        classes = np.unique(y)
        if classes.size < 2:
            raise InvalidParameterError(f"y must hold >= 2 gravities, got {classes.tolist()}")
        if self.method not in ("auto", "likelihood", "classifier"):
            raise InvalidParameterError(
                f"method must be 'auto', 'likelihood' or 'classifier', got {self.method!r}"
            )
        law = _known_law(self.mechanism)
        method = self.method
        if method == "auto":
            method = "likelihood" if law is not None else "classifier"
        if method == "likelihood" and law is None:
            raise InvalidParameterError(
                "method='likelihood' needs a mechanism with a known noise law (Laplace, "
                f"RandomizedResponse), got {type(self.mechanism).__name__}"
            )
        self.classes_ = classes
        self.method_ = method
        self.n_features_in_ = X.shape[1]
        if method == "likelihood":
            self.law_ = law
            if law == "laplace":
                X = self.mechanism.clip_rows(X)  # eq. 19, the mechanism's own clipping
            self.support_ = [X[y == c] for c in classes]
            return self
        rs = self.random_state
        rng = rs if isinstance(rs, np.random.Generator) else np.random.default_rng(rs)
        n_noise = int(self.n_noise)
        if n_noise < 1:
            raise InvalidParameterError(f"n_noise must be >= 1, got {self.n_noise!r}")
        Xr = np.repeat(X, n_noise, axis=0)
        yr = np.repeat(np.searchsorted(classes, y), n_noise)  # class indices (sklearn labels)
        Xp = _privatize(self.mechanism, Xr, rng)
        clf = (
            clone(self.classifier)
            if self.classifier is not None
            else _default_classifier(self.mechanism)
        )
        self.classifier_ = clf.fit(Xp, yr)
        return self

    # -- scoring reports -----------------------------------------------------------------------
    def log_likelihood(self, R: np.ndarray) -> np.ndarray:
        """Per report, ``log p(report | gravity)`` up to a per-report constant, shape (n, k).

        Likelihood method: Monte Carlo mixture over the shadow episodes under the exact noise law.
        Classifier method: the classifier's log posterior (balanced classes = uniform prior),
        which differs from the log-likelihood by a per-report constant.
        """
        self._check_fitted()
        R = check_batch(R, "R", dim=self.n_features_in_)
        if self.method_ == "classifier":
            proba = self.classifier_.predict_proba(R)
            out = np.full((R.shape[0], self.classes_.size), 1e-300)
            out[:, self.classifier_.classes_] = proba  # columns -> class indices
            return np.log(np.clip(out, 1e-300, None))
        out = np.empty((R.shape[0], self.classes_.size))
        eps = float(self.mechanism.epsilon)
        for c, S in enumerate(self.support_):
            if self.law_ == "laplace":
                b = float(self.mechanism.clip) / eps  # Lap(C / eps), Alg. 2 eq. 21
                for s in range(0, R.shape[0], 1024):
                    d1 = cdist(R[s : s + 1024], S, metric="cityblock")  # (n, m) L1 distances
                    out[s : s + 1024, c] = logsumexp(-d1 / b, axis=1) - math.log(S.shape[0])
            else:  # k-ary randomized response on an index column
                k = int(self.mechanism.k)
                hit = R[:, :1] == S[:, 0][None, :]  # (n, m)
                p_hit = 1.0 / (1.0 + (k - 1) * math.exp(-eps))
                p_miss = (1.0 - p_hit) / (k - 1)
                frac = hit.mean(axis=1)
                out[:, c] = np.log(frac * p_hit + (1.0 - frac) * p_miss)
        return out

    def predict_log_proba(self, R: np.ndarray) -> np.ndarray:
        """Log posterior over ``classes_`` of each report (uniform prior), shape (n, k)."""
        ll = self.log_likelihood(R)
        return ll - logsumexp(ll, axis=1, keepdims=True)

    def predict_proba(self, R: np.ndarray) -> np.ndarray:
        """Posterior over ``classes_`` of each report (uniform prior), shape (n, k)."""
        return np.exp(self.predict_log_proba(R))

    def predict(self, R: np.ndarray) -> np.ndarray:
        """Most likely gravity of each report, shape (n,)."""
        ll = self.log_likelihood(R)
        return self.classes_[np.argmax(ll, axis=1)]

    def score(self, X: np.ndarray, y: np.ndarray, sample_weight: Any = None) -> float:
        """Accuracy of :meth:`predict` on reports ``X`` with true gravities ``y``."""
        pred = self.predict(X)
        hit = np.isclose(pred, np.asarray(y, dtype=np.float64).reshape(-1)).astype(np.float64)
        return float(np.average(hit, weights=sample_weight))

    def predict_groups(
        self, R: np.ndarray, groups: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Combine all reports of each group (agent): log-likelihoods add (reports independent).

        Args:
            R: noisy reports (n, d).
            groups: group id of each report (n,), e.g. agent ids.

        Returns:
            ``(group_ids (G,), predicted gravity (G,), posterior (G, k))``.
        """
        ll = self.log_likelihood(R)
        groups = np.asarray(groups).reshape(-1)
        if groups.shape[0] != ll.shape[0]:
            raise InvalidParameterError(
                f"groups must have {ll.shape[0]} entries, got {groups.size}"
            )
        ids, inv = np.unique(groups, return_inverse=True)
        total = np.zeros((ids.size, ll.shape[1]))
        np.add.at(total, inv, ll)
        post = np.exp(total - logsumexp(total, axis=1, keepdims=True))
        return ids, self.classes_[np.argmax(total, axis=1)], post

    def _check_fitted(self) -> None:
        if not hasattr(self, "classes_"):
            from sklearn.exceptions import NotFittedError

            raise NotFittedError("ShadowGradientAttack is not fitted yet; call fit(X, y) first")


def _default_classifier(mechanism: Any) -> Any:
    """Default classifier: gradient boosting without noise, shrinkage LDA with noise.

    Measured (README.md, "Attacks"): on clean gradients the gravity signal is non-linear and
    tiny (LDA stays at chance where boosting reaches ~0.39 per report at the crafted theta); under
    LDP noise the noise dominates and the fast linear rule is as good as any we tried.
    """
    from sklearn.feature_selection import VarianceThreshold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if mechanism is None or mechanism_epsilon(mechanism) == math.inf:
        from sklearn.ensemble import HistGradientBoostingClassifier

        return make_pipeline(
            VarianceThreshold(),
            HistGradientBoostingClassifier(max_iter=100, random_state=0),
        )
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

    return make_pipeline(
        VarianceThreshold(),
        StandardScaler(),
        LinearDiscriminantAnalysis(solver="lsqr", shrinkage="auto"),
    )


# ------------------------------------------------------------------------------------------------
# One-shot experiments
# ------------------------------------------------------------------------------------------------


def _check_candidates(candidates: Sequence[float]) -> np.ndarray:
    c = np.asarray(candidates, dtype=np.float64).reshape(-1)
    if c.size < 2 or np.unique(c).size != c.size or not np.isfinite(c).all() or (c <= 0).any():
        raise InvalidParameterError(
            f"candidates must be >= 2 distinct finite gravities > 0, got {list(c)}"
        )
    return np.sort(c)


#: Largest count of simulated episodes (agents x reports, shadows x candidates) one call may ask
#: for: each is a CartPole episode and a (d,) gradient row, so 10^8 is already tens of GB.
MAX_EPISODES = 100_000_000


def _check_int(value: Any, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise InvalidParameterError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if value > MAX_EPISODES:
        raise InvalidParameterError(f"{name} must be <= {MAX_EPISODES:,}, got {value!r}")
    return int(value)


def _check_episodes(count: int, what: str) -> None:
    if count > MAX_EPISODES:
        raise InvalidParameterError(
            f"{what} asks for {count:,} simulated episodes, more than {MAX_EPISODES:,}"
        )


def _check_theta(theta: Any) -> np.ndarray:
    try:
        t = np.asarray(theta, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise InvalidParameterError(
            f"theta must be a real array of parameters, got {type(theta).__name__}"
        ) from None
    if t.size == 0 or not np.isfinite(t).all():
        raise InvalidParameterError("theta must be a non-empty array of finite numbers")
    return t


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
    cands = _check_candidates(candidates)
    n_agents = _check_int(n_agents, "n_agents")
    T = _check_int(reports_per_agent, "reports_per_agent")
    n_shadow = _check_int(n_shadow, "n_shadow")
    _check_episodes(n_agents * T, "n_agents x reports_per_agent")
    _check_episodes(n_shadow * len(cands), "n_shadow x len(candidates)")
    alpha = check_probability(alpha, "alpha", open_interval=False)
    theta = _check_theta(theta)
    rng = check_rng(rng) if rng is not None else np.random.default_rng(seed)
    world_rng, shadow_rng, noise_rng = rng.spawn(3)

    # --- the world (agents' side): secrets drawn here are used only for scoring below ---
    secret_gravity = world_rng.choice(cands, size=n_agents)
    agent_of_report = np.repeat(np.arange(n_agents), T)
    grads = simulate_shadow(
        theta, secret_gravity[agent_of_report], world_rng, simulator=simulator, alpha=alpha
    )
    reports = _privatize(mechanism, grads, world_rng)

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
    return _result(
        attack=attack,
        mechanism=mechanism,
        T=T,
        k=cands.size,
        n=n_agents,
        correct=correct,
        confidence=confidence,
        seconds=time.perf_counter() - t0,
        extra={
            "candidates": cands.tolist(),
            "n_shadow_per_candidate": n_shadow,
            "method": est.method_,
            "alpha": alpha,
        },
    )


def _result(
    *,
    attack: str,
    mechanism: Any,
    T: int,
    k: int,
    n: int,
    correct: int,
    confidence: float,
    seconds: float,
    extra: dict[str, Any],
) -> AttackResult:
    return AttackResult.from_guesses(
        attack=attack,
        mechanism=_mechanism_config(mechanism),
        epsilon=mechanism_epsilon(mechanism),
        reports_per_agent=T,
        k=k,
        n=n,
        correct=correct,
        confidence=confidence,
        seconds=seconds,
        extra=extra,
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
    grid = _check_int(grid, "grid", minimum=2)
    n_agents = _check_int(n_agents, "n_agents")
    T = _check_int(reports_per_agent, "reports_per_agent")
    n_shadow = _check_int(n_shadow, "n_shadow")
    _check_episodes(n_agents * T, "n_agents x reports_per_agent")
    _check_episodes(n_shadow * grid, "n_shadow x grid")
    alpha = check_probability(alpha, "alpha", open_interval=False)
    theta = _check_theta(theta)
    rng = check_rng(rng) if rng is not None else np.random.default_rng(seed)
    world_rng, shadow_rng, noise_rng = rng.spawn(3)

    # --- the world ---
    secret_gravity = world_rng.uniform(lo, hi, size=n_agents)
    agent_of_report = np.repeat(np.arange(n_agents), T)
    grads = simulate_shadow(
        theta, secret_gravity[agent_of_report], world_rng, simulator=simulator, alpha=alpha
    )
    reports = _privatize(mechanism, grads, world_rng)

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
        mechanism=_mechanism_config(mechanism),
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
    cands = _check_candidates(candidates)
    n_probe = _check_int(n_probe, "n_probe", minimum=4)
    n_designs = _check_int(n_designs, "n_designs")
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


# ------------------------------------------------------------------------------------------------
# Attacking a run directory (transcript written by a trainer)
# ------------------------------------------------------------------------------------------------


def attack_run_dir(
    run_dir: str | Path,
    *,
    mechanism: Any = None,
    n_shadow: int = 200,
    max_groups: int | None = 200,
    group_by: str = "agent",
    method: str = "auto",
    candidates: Sequence[float] | None = None,
    simulator: Simulator | None = None,
    alpha: float | str = "schedule",
    seed: int | None = None,
    progress: bool = False,
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
        group_by: ``"agent"`` ((trial, agent) pairs) or ``"report"`` (each report alone).
        alpha: exploration probability of the shadows, or ``"schedule"``: the protocol's public
            ``max(0, alpha_start - n / alpha_decay)`` at the report's submission index ``n``
            (read from ``config.json``; PGC-A3C defaults 0.5 and 1800).
        candidates: the candidate gravities; None: the run's ``gravities`` (config.json),
            else the paper's.
        method, simulator, seed, progress: as in :func:`run`.

    Returns:
        Predictions, without any ground truth: ``{"rows": [...], "groups": (G, 2 or 1),
        "group_of_row": (R,), "guess": (G,), "posterior": (G, k), "candidates": [...],
        "mechanism": config, "epsilon": eps, "reports_per_group": (G,)}``.
    """
    from ldp_audit.training.run_dir import read_config, read_transcript

    run_dir = Path(run_dir)
    tr = read_transcript(run_dir)  # what crossed the trust boundary (never secrets.npz)
    cfg: dict[str, Any] = {}
    if (run_dir / "config.json").exists():
        cfg = read_config(run_dir)
    if candidates is None:  # the run's public candidate gravities (the paper's by default)
        run_cfg = cfg.get("config") if isinstance(cfg.get("config"), dict) else {}
        candidates = run_cfg.get("gravities") or GRAVITIES
    cands = _check_candidates(candidates)
    if mechanism is None and cfg:
        mechanism = _mechanism_from_run_config(cfg)
    train_cfg = cfg.get("config", {}) if isinstance(cfg.get("config"), dict) else {}
    if isinstance(alpha, str) and alpha != "schedule":
        raise InvalidParameterError(f"alpha must be a probability or 'schedule', got {alpha!r}")
    if group_by == "agent":
        keys = np.stack([tr["trial"], tr["agent"]], axis=1)
    elif group_by == "report":
        keys = np.arange(tr["report"].shape[0])[:, None]
    else:
        raise InvalidParameterError(f"group_by must be 'agent' or 'report', got {group_by!r}")
    uniq, group_of_row = np.unique(keys, axis=0, return_inverse=True)
    group_of_row = group_of_row.reshape(-1)
    keep_groups = np.arange(uniq.shape[0])
    if max_groups is not None:
        keep_groups = keep_groups[: _check_int(max_groups, "max_groups")]
    rows = np.flatnonzero(np.isin(group_of_row, keep_groups))
    rng = np.random.default_rng(seed)
    ll = np.zeros((rows.size, cands.size))
    tidx = tr["theta_index"][rows]
    sub = tr["submission"][rows]
    thetas_used, first = np.unique(tidx, return_index=True)

    def alpha_at(submission: float) -> float:
        if alpha == "schedule" and "alpha" in train_cfg:  # a fixed-alpha protocol
            return float(train_cfg["alpha"])
        if alpha == "schedule":  # the public exploration schedule of the protocol (Sec. 4)
            a0 = float(train_cfg.get("alpha_start", 0.5))
            decay = float(train_cfg.get("alpha_decay", 1800.0))
            return max(0.0, a0 - float(submission) / decay)
        return float(alpha)

    law = _known_law(mechanism)
    if method == "likelihood" or (method == "auto" and law is not None):
        # exact noise law: shadows at each report's own theta (Monte Carlo per theta)
        it: Any = zip(thetas_used, rng.spawn(thetas_used.size), strict=True)
        if progress:
            from tqdm.auto import tqdm

            it = tqdm(list(it), desc="thetas", unit="theta")
        for v, r in it:
            sel = np.flatnonzero(tidx == v)
            shadow_g = np.repeat(cands, n_shadow)
            s_rng, n_rng = r.spawn(2)
            a = alpha_at(sub[sel].min())
            shadow = simulate_shadow(tr["thetas"][v], shadow_g, s_rng, simulator=simulator, alpha=a)
            est = ShadowGradientAttack(mechanism, method="likelihood", random_state=n_rng)
            ll[sel] = est.fit(shadow, shadow_g).log_likelihood(tr["report"][rows[sel]])
    else:
        # classifier: one classifier on shadows pooled over the distinct thetas (consecutive
        # thetas differ by one small update), n_shadow per candidate per theta, one batched call
        s_rng, n_rng = rng.spawn(2)
        th_rows = np.repeat(thetas_used, cands.size * n_shadow)
        shadow_g = np.tile(np.repeat(cands, n_shadow), thetas_used.size)
        a_rows = np.repeat([alpha_at(sub[i]) for i in first], cands.size * n_shadow)
        shadow = simulate_shadow(
            tr["thetas"][th_rows],
            shadow_g,
            s_rng,
            simulator=simulator,
            alpha=a_rows,
            progress=progress,
        )
        est = ShadowGradientAttack(mechanism, method="classifier", random_state=n_rng)
        ll[:] = est.fit(shadow, shadow_g).log_likelihood(tr["report"][rows])
    g_rows = group_of_row[rows]
    gids, inv = np.unique(g_rows, return_inverse=True)
    total = np.zeros((gids.size, cands.size))
    np.add.at(total, inv, ll)
    post = np.exp(total - logsumexp(total, axis=1, keepdims=True))
    return {
        "rows": rows,
        "groups": uniq[gids],
        "group_of_row": inv,
        "guess": cands[np.argmax(total, axis=1)],
        "posterior": post,
        "candidates": cands.tolist(),
        "mechanism": _mechanism_config(mechanism),
        "epsilon": mechanism_epsilon(mechanism),
        "reports_per_group": np.bincount(inv, minlength=gids.size),
    }


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


def _mechanism_from_run_config(cfg: dict[str, Any]) -> Any:
    """The per-report mechanism of a run (``config.json``), as the attacker knows it."""
    from ldp_audit.mechanisms import from_config

    train_cfg = cfg.get("config") if isinstance(cfg.get("config"), dict) else {}
    if train_cfg.get("mechanism") == "none":
        from ldp_audit.training.pgc_a3c import PgcA3cConfig  # public config: the baseline's clip C

        return _ClippedRelease(PgcA3cConfig.from_dict(train_cfg).effective_clip)
    return from_config(cfg["mechanism"])


def score_run_dir(
    run_dir: str | Path, prediction: dict[str, Any], *, confidence: float = 0.95
) -> AttackResult:
    """Score :func:`attack_run_dir` predictions against ``secrets.npz`` (the only reader of it).

    The ceiling uses the largest number of reports in any attacked group.
    """
    t0 = time.perf_counter()
    # --- scoring only: the one place the attack module opens secrets.npz ---
    from ldp_audit.training.run_dir import read_secrets

    spath = Path(run_dir) / "secrets.npz"
    if not spath.exists():
        raise RunDirectoryError(f"{spath} is missing (needed to score the attack)")
    gravity = np.asarray(read_secrets(run_dir)["gravity"], dtype=np.float64)
    rows, inv = prediction["rows"], prediction["group_of_row"]
    truth_rows = gravity[rows]
    G = prediction["guess"].shape[0]
    truth = np.full(G, np.nan)
    truth[inv] = truth_rows
    consistent = np.zeros(G, dtype=bool)
    first = np.full(G, np.nan)
    first[inv[::-1]] = truth_rows[::-1]
    consistent[:] = True
    np.logical_and.at(consistent, inv, np.isclose(truth_rows, first[inv]))
    correct = int(np.sum(np.isclose(prediction["guess"], truth)))
    return _prediction_result(
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


class _RunMechanism:
    """The attacked run's mechanism as a result records it: its epsilon and its config."""

    def __init__(self, prediction: dict[str, Any]) -> None:
        self.epsilon = prediction["epsilon"]
        self._config = prediction["mechanism"]

    def to_config(self) -> dict[str, Any]:
        return self._config


def _prediction_result(
    attack: str,
    prediction: dict[str, Any],
    *,
    n: int,
    correct: int,
    confidence: float,
    t0: float,
    extra: dict[str, Any],
) -> Any:
    """Score a run's predictions (``n`` groups, ``correct`` right): k candidates, T reports per
    group at most, the ceiling the run's epsilon allows."""
    return _result(
        attack=attack,
        mechanism=_RunMechanism(prediction),
        T=int(prediction["reports_per_group"].max()),
        k=len(prediction["candidates"]),
        n=n,
        correct=correct,
        confidence=confidence,
        seconds=time.perf_counter() - t0,
        extra=extra,
    )


# ------------------------------------------------------------------------------------------------
# Any private parameter of any environment: runs that declare one (config.json
# "private_parameter": the generic Gymnasium trainer, ldp_audit.run's own loops)
# ------------------------------------------------------------------------------------------------

#: Episodes per simulator call of the generic attack (bounded memory; each call is batched).
_GENERIC_CHUNK = 2048


def _private_parameter(cfg: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    pp = cfg.get("private_parameter")
    if not isinstance(pp, dict) or not isinstance(pp.get("name"), str):
        raise RunDirectoryError(
            f"{run_dir}: config.json declares no private_parameter (name, values): the generic "
            "dynamics attack needs one (docs/own-loop.md)"
        )
    vals = pp.get("values")
    if not isinstance(vals, list) or len(vals) < 2:
        raise RunDirectoryError(
            f"{run_dir}: private_parameter.values must list >= 2 candidates, got {vals!r}"
        )
    return pp


def _generic_mechanism(cfg: dict[str, Any]) -> Any:
    """The per-report mechanism of a run that declares a private parameter (as the attacker
    knows it): the non-private baseline of the Gymnasium trainer is an L1 clip to C/2."""
    from ldp_audit.mechanisms import from_config

    mech = cfg.get("mechanism")
    if not isinstance(mech, dict):
        raise RunDirectoryError("config.json has no single per-report mechanism to attack")
    train_cfg = cfg.get("config") if isinstance(cfg.get("config"), dict) else {}
    if cfg.get("algorithm") == "pgc-a3c-gym" and train_cfg.get("mechanism") == "none":
        clip = train_cfg.get("clip")
        return _ClippedRelease(10.0 if clip is None else float(clip))
    return from_config(mech)


def _simulate_generic(
    sim: Simulator,
    theta_rows: np.ndarray,
    values: np.ndarray,
    rng: np.random.Generator,
    alpha: np.ndarray,
    progress: bool = False,
) -> np.ndarray:
    out = []
    starts: Any = range(0, values.size, _GENERIC_CHUNK)
    if progress:
        from tqdm.auto import tqdm

        starts = tqdm(starts, desc="shadow episodes", unit="chunk", leave=False)
    for s in starts:
        e = s + _GENERIC_CHUNK
        grads, _ = sim(
            np.ascontiguousarray(theta_rows[s:e]), values[s:e].copy(), rng, alpha[s:e].copy()
        )
        out.append(np.asarray(grads, dtype=np.float64))
    return np.concatenate(out, axis=0)


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
) -> dict[str, Any]:
    """Attack a run that declares a private parameter; reads config.json and transcript.npz.

    The candidates come from ``config.json``'s ``private_parameter``; shadow agents are
    simulated in each candidate environment at the theta each report was computed at
    (``thetas[theta_index]``). Laplace (known law): the exact likelihood, shadows per distinct
    theta; otherwise one classifier on shadows pooled over the distinct thetas
    (:class:`ShadowGradientAttack`). Reports of one agent add their log-likelihoods.

    Args:
        run_dir: the run directory.
        simulator: ``simulator(theta (B, d), values (B,), rng, alpha (B,)) -> (grads, scores)``,
            the public MDP; default for a ``pgc-a3c-gym`` run: its environment and network
            (:func:`ldp_audit.training.gym_pgc.simulator_for`). An own loop passes its own.
        env_module: the module registering the run's environment (imported only when named
            here: a run directory never makes the attacker import code).
        n_shadow: shadow episodes per candidate per distinct theta.
        max_groups: agents attacked (first in arrival order); None for all.
        method: "auto", "likelihood" or "classifier" (:class:`ShadowGradientAttack`).
        alpha: the shadows' exploration, or "schedule" (``alpha_start``, ``alpha_decay`` of the
            run's config at the report's submission index; 0 where the config has none).
        seed: seed of the attacker's randomness.
        progress: tqdm bars on stderr.

    Returns:
        Predictions without any ground truth (the keys of :func:`attack_run_dir`, plus
        ``parameter`` and ``env_id``).
    """
    from ldp_audit.rundir import read_config
    from ldp_audit.training.run_dir import read_transcript

    run_dir = Path(run_dir)
    cfg = read_config(run_dir)
    pp = _private_parameter(cfg, run_dir)
    n_shadow = _check_int(n_shadow, "n_shadow")
    if method not in ("auto", "likelihood", "classifier"):
        raise InvalidParameterError(
            f"method must be 'auto', 'likelihood' or 'classifier', got {method!r}"
        )
    if isinstance(alpha, str) and alpha != "schedule":
        raise InvalidParameterError(f"alpha must be a probability or 'schedule', got {alpha!r}")
    if not isinstance(alpha, str):
        alpha = check_probability(alpha, "alpha", open_interval=False)
    cands = np.sort(np.asarray(pp["values"], dtype=np.float64))
    if np.unique(cands).size != cands.size or not np.isfinite(cands).all():
        raise RunDirectoryError(f"{run_dir}: private_parameter.values must be distinct and finite")
    train_cfg = cfg.get("config") if isinstance(cfg.get("config"), dict) else {}
    if simulator is None:
        if cfg.get("algorithm") != "pgc-a3c-gym":
            raise InvalidParameterError(
                f"a {cfg.get('algorithm')!r} run needs its simulator (the public MDP and "
                "update rule that produced its reports): pass simulator= (Python) or "
                "--simulator MODULE:FUNCTION (CLI)"
            )
        from ldp_audit.training.gym_pgc import config_from_run, simulator_for

        simulator = simulator_for(config_from_run(cfg, env_module))
    mechanism = _generic_mechanism(cfg)
    tr = read_transcript(run_dir)  # what crossed the trust boundary (never secrets.npz)
    trial = tr["trial"]
    keys = np.stack([trial, tr["agent"]], axis=1)
    uniq, group_of_row = np.unique(keys, axis=0, return_inverse=True)
    group_of_row = group_of_row.reshape(-1)
    # groups in arrival order (first report), not in id order
    first_row = np.full(uniq.shape[0], group_of_row.size)
    np.minimum.at(first_row, group_of_row, np.arange(group_of_row.size))
    order = np.argsort(first_row, kind="stable")
    keep_groups = order if max_groups is None else order[: _check_int(max_groups, "max_groups")]
    rows = np.flatnonzero(np.isin(group_of_row, keep_groups))
    _check_episodes(
        int(np.unique(tr["theta_index"][rows]).size) * cands.size * n_shadow, "the shadows"
    )
    rng = np.random.default_rng(seed)
    tidx = tr["theta_index"][rows]
    sub = tr["submission"][rows]
    thetas_used, first = np.unique(tidx, return_index=True)

    def alpha_at(submission: float) -> float:
        if not isinstance(alpha, str):
            return float(alpha)
        if "alpha" in train_cfg:
            return float(train_cfg["alpha"])
        if "alpha_start" not in train_cfg:
            return 0.0
        a0 = float(train_cfg["alpha_start"])
        return max(0.0, a0 - float(submission) / float(train_cfg.get("alpha_decay", 1800.0)))

    law = _known_law(mechanism)
    ll = np.zeros((rows.size, cands.size))
    if method == "likelihood" or (method == "auto" and law is not None):
        it: Any = zip(thetas_used, rng.spawn(thetas_used.size), strict=True)
        if progress:
            from tqdm.auto import tqdm

            it = tqdm(list(it), desc="thetas", unit="theta")
        for v, r in it:
            sel = np.flatnonzero(tidx == v)
            shadow_g = np.repeat(cands, n_shadow)
            s_rng, n_rng = r.spawn(2)
            a = np.full(shadow_g.size, alpha_at(sub[sel].min()))
            th = np.broadcast_to(tr["thetas"][v], (shadow_g.size, tr["thetas"].shape[1]))
            shadow = _simulate_generic(simulator, th, shadow_g, s_rng, a)
            est = ShadowGradientAttack(mechanism, method="likelihood", random_state=n_rng)
            ll[sel] = est.fit(shadow, shadow_g).log_likelihood(tr["report"][rows[sel]])
        used = "likelihood"
    else:
        s_rng, n_rng = rng.spawn(2)
        th_rows = np.repeat(thetas_used, cands.size * n_shadow)
        shadow_g = np.tile(np.repeat(cands, n_shadow), thetas_used.size)
        a_rows = np.repeat([alpha_at(sub[i]) for i in first], cands.size * n_shadow)
        shadow = _simulate_generic(
            simulator, tr["thetas"][th_rows], shadow_g, s_rng, a_rows, progress
        )
        est = ShadowGradientAttack(mechanism, method="classifier", random_state=n_rng)
        from threadpoolctl import threadpool_limits

        # one OpenMP thread: gradient boosting's threads spin-wait, and on a shared, loaded
        # machine that cost minutes where one thread takes seconds (same fitted model)
        with threadpool_limits(limits=1, user_api="openmp"):
            ll[:] = est.fit(shadow, shadow_g).log_likelihood(tr["report"][rows])
        used = "classifier"
    g_rows = group_of_row[rows]
    gids, inv = np.unique(g_rows, return_inverse=True)
    total = np.zeros((gids.size, cands.size))
    np.add.at(total, inv, ll)
    post = np.exp(total - logsumexp(total, axis=1, keepdims=True))
    return {
        "rows": rows,
        "groups": uniq[gids],
        "group_of_row": inv,
        "guess": cands[np.argmax(total, axis=1)],
        "posterior": post,
        "candidates": cands.tolist(),
        "mechanism": _mechanism_config(mechanism),
        "epsilon": mechanism_epsilon(mechanism),
        "reports_per_group": np.bincount(inv, minlength=gids.size),
        "parameter": pp["name"],
        "env_id": pp.get("env_id"),
        "method": used,
        "n_shadow": n_shadow,
    }


def score_private_param_run(
    run_dir: str | Path, prediction: dict[str, Any], *, confidence: float = 0.95
) -> AttackResult:
    """Score :func:`attack_private_param_run` against ``secrets.npz``'s ``value`` (the only
    reader of it). The ceiling is e^(T eps) / (e^(T eps) + k - 1) with T the largest number of
    reports of any attacked agent and eps the per-report epsilon (sequential composition)."""
    t0 = time.perf_counter()
    # --- scoring only: the one place this attack opens secrets.npz ---
    from ldp_audit.rundir import read_npz

    spath = Path(run_dir) / "secrets.npz"
    if not spath.exists():
        raise RunDirectoryError(f"{spath} is missing (needed to score the attack)")
    value = np.asarray(read_npz(run_dir, "secrets.npz", ("value",))["value"], dtype=np.float64)
    rows, inv = prediction["rows"], prediction["group_of_row"]
    if value.shape[0] <= int(rows.max(initial=-1)):
        raise RunDirectoryError(f"{spath}: value has fewer rows than the transcript")
    truth_rows = value[rows]
    G = prediction["guess"].shape[0]
    truth = np.full(G, np.nan)
    truth[inv] = truth_rows
    correct = int(np.sum(np.isclose(prediction["guess"], truth, rtol=0.0, atol=0.0)))
    return _prediction_result(
        "dynamics-private-parameter",
        prediction,
        n=G,
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
        },
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
    )
    return score_private_param_run(run_dir, pred, confidence=confidence)
