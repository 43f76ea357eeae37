"""Dynamics inference, the estimator: shadow gradients simulated at the broadcast theta for each
candidate gravity, scored by the exact likelihood of the report or by a classifier.

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
fitted attributes end in ``_``, ``predict``, ``predict_proba``, ``score``);
:func:`~ldp_audit.attacks.dynamics_experiment.run` is the one-shot experiment returning an
:class:`~ldp_audit.attacks.scoring.AttackResult`.

Separation of knowledge: the attacker functions take reports, thetas and the mechanism only.
Ground truth is touched in one place per entry point, marked ``# --- scoring only ---``
(:func:`~ldp_audit.attacks.dynamics_experiment.run` draws the victims' gravities as the world,
:func:`~ldp_audit.attacks.dynamics_run_dir.score_run_dir` reads ``secrets.npz``).

Where the code lives: the estimator and the shadow simulation here, the one-shot experiments and
crafted thetas in :mod:`~ldp_audit.attacks.dynamics_experiment`, the attacks on a run directory
in :mod:`~ldp_audit.attacks.dynamics_run_dir`; each name is imported from its module. The helpers
the other attacks modules share (the mechanism's :func:`privatize`, :func:`mechanism_config`,
:func:`known_law`, and the parameter checks :func:`check_count`, :func:`check_episodes`,
:func:`check_candidates`, :func:`check_theta`, :func:`check_method`) are public here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from scipy.spatial.distance import cdist
from scipy.special import logsumexp
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.utils.validation import check_is_fitted

from ldp_audit.attacks.scoring import one_openmp_thread
from ldp_audit.errors import InvalidParameterError
from ldp_audit.validation import check_batch, check_choice, check_int, check_probability, check_rng

#: The paper's candidate gravities (Ono & Takahashi 2020, Sec. 4: psi uniform in {9.7, 9.8, 9.9}).
GRAVITIES: tuple[float, ...] = (9.7, 9.8, 9.9)

#: ``simulator(theta (B, d), gravity (B,), rng, alpha) -> (grads (B, d), scores (B,))``
Simulator = Callable[..., tuple[np.ndarray, np.ndarray]]

_CHUNK = 4096  # episodes per simulator call (bounded memory, still one vectorised call each)


def mechanism_epsilon(mechanism: Any) -> float:
    """The mechanism's per-report epsilon (``inf`` for ``None`` / the non-private baseline)."""
    return float(getattr(mechanism, "epsilon", math.inf))


def mechanism_delta(mechanism: Any) -> float:
    """The mechanism's per-report delta, checked in [0, 1] (0.0 for a pure mechanism, one
    without ``delta`` and ``None``)."""
    return check_probability(
        getattr(mechanism, "delta", 0.0), "mechanism.delta", open_interval=False
    )


def mechanism_config(mechanism: Any) -> dict[str, Any]:
    """The mechanism's description for a result: its ``to_config()`` if it has one, else its class
    name (``{"name": "none"}`` for ``None``, the non-private baseline)."""
    if mechanism is None:
        return {"name": "none"}
    to_config = getattr(mechanism, "to_config", None)
    return dict(to_config()) if callable(to_config) else {"name": type(mechanism).__name__}


def privatize(mechanism: Any, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``mechanism.privatize(x, rng)`` as float64; for ``None`` (the non-private baseline) a float64
    copy of ``x`` (``rng`` untouched)."""
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
    sim = simulator
    if sim is None:  # the public simulator of the known MDP (it needs the training package)
        from ldp_audit.training.pgc_a3c.rollout import episode_gradients as sim
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
    return simulate_chunks(sim, th, g, rng, alpha, _CHUNK, progress)


def simulate_chunks(
    sim: Simulator,
    theta_rows: np.ndarray,
    values: np.ndarray,
    rng: np.random.Generator,
    alpha: Any,
    chunk: int,
    progress: bool,
) -> np.ndarray:
    """``sim``'s gradients, ``chunk`` episodes per call (one row of ``theta_rows`` and one
    entry of ``values`` each; ``alpha`` a scalar or one per episode), stacked; ``progress``: a
    tqdm bar of the chunks on stderr."""
    out = []
    starts: Any = range(0, values.size, chunk)
    if progress:
        from tqdm.auto import tqdm

        starts = tqdm(starts, desc="shadow episodes", unit="chunk", leave=False)
    for s in starts:
        a = alpha if np.ndim(alpha) == 0 else np.asarray(alpha)[s : s + chunk].copy()
        th = np.ascontiguousarray(theta_rows[s : s + chunk])
        grads, _ = sim(th, values[s : s + chunk].copy(), rng, a)
        out.append(np.asarray(grads, dtype=np.float64))
    return np.concatenate(out, axis=0)


def known_law(mechanism: Any) -> str | None:
    """Name of the noise law the likelihood method can evaluate exactly (``"laplace"``, ``"rr"``),
    else None (PRS, the non-private baseline, a mechanism of another class)."""
    return {"Laplace": "laplace", "RandomizedResponse": "rr"}.get(type(mechanism).__name__)


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
        check_method(self.method)
        law = known_law(self.mechanism)
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
        rng = np.random.default_rng(self.random_state)  # a Generator is returned as it is
        n_noise = check_int(self.n_noise, "n_noise", minimum=1)
        Xr = np.repeat(X, n_noise, axis=0)
        yr = np.repeat(np.searchsorted(classes, y), n_noise)  # class indices (sklearn labels)
        Xp = privatize(self.mechanism, Xr, rng)
        if self.classifier is None:
            clf = _default_classifier(Xp, classes.size, self.mechanism)
        else:
            clf = clone(self.classifier)
        with one_openmp_thread():
            self.classifier_ = clf.fit(Xp, yr)
        return self

    # -- scoring reports -----------------------------------------------------------------------
    def log_likelihood(self, R: np.ndarray) -> np.ndarray:
        """Per report, ``log p(report | gravity)`` up to a per-report constant, shape (n, k).

        Likelihood method: Monte Carlo mixture over the shadow episodes under the exact noise law.
        Classifier method: the classifier's log posterior (balanced classes = uniform prior),
        which differs from the log-likelihood by a per-report constant.
        """
        check_is_fitted(self, "classes_")
        R = check_batch(R, "R", dim=self.n_features_in_)
        if self.method_ == "classifier":
            with one_openmp_thread():
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
        hit = (pred == np.asarray(y, dtype=np.float64).reshape(-1)).astype(np.float64)
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
        ids, _, total, post = add_by_group(ll, groups)
        return ids, self.classes_[np.argmax(total, axis=1)], post


def add_by_group(
    ll: np.ndarray, groups: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per group, the sum of its rows' log-likelihoods ``ll`` (reports independent given the
    value) and the posterior (uniform prior): ``(group ids, row -> group, totals, posterior)``."""
    ids, inv = np.unique(groups, return_inverse=True)
    total = np.zeros((ids.size, ll.shape[1]))
    np.add.at(total, inv, ll)
    return ids, inv, total, np.exp(total - logsumexp(total, axis=1, keepdims=True))


#: the non-private baseline's gradient boosting puts at least this many samples in a leaf.
LEAF_SAMPLES = 20


def check_nonprivate_shadows(n: int, k: int) -> None:
    """Refuse ``n`` shadow gradients for ``k`` candidates that the non-private classifier cannot
    learn from (fewer than two leaves' worth): a silent chance result would prove nothing."""
    if n < 2 * LEAF_SAMPLES:
        raise InvalidParameterError(
            f"{n} shadow gradients for {k} candidates: the non-private classifier "
            f"(gradient boosting, >= {LEAF_SAMPLES} samples a leaf) cannot split fewer than "
            f"{2 * LEAF_SAMPLES}, so every posterior would be flat (chance: the attack would "
            "prove nothing); raise "
            "the shadow count (n_shadow, --shadow; with --run-dir, each distinct theta attacked "
            f"gets that many) until each candidate has >= {math.ceil(2 * LEAF_SAMPLES / k)}"
        )


def _default_classifier(Xp: np.ndarray, k: int, mechanism: Any) -> Any:
    """Default classifier for the privatised shadows ``Xp`` of ``k`` candidates: gradient
    boosting without noise, shrinkage LDA with noise.

    Measured (README.md, "Attacks"): on clean gradients the gravity signal is non-linear and
    tiny (LDA stays at chance where boosting reaches ~0.39 per report at the crafted theta); under
    LDP noise the noise dominates and the fast linear rule is as good as any we tried. Shadows
    it cannot learn from are refused, instead of a silent chance result (a flat posterior, AUC
    0.5) or sklearn's raw ValueError.
    """
    if np.all(Xp == Xp[:1]):
        raise InvalidParameterError(
            f"all {Xp.shape[0]} shadow gradients are identical (every feature constant, e.g. "
            "zero gradients at theta = 0): they carry no information about the candidates, so "
            "any attack is at chance; attack reports computed at trained parameters"
        )
    if mechanism_epsilon(mechanism) == math.inf:
        check_nonprivate_shadows(Xp.shape[0], k)
    from sklearn.feature_selection import VarianceThreshold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if mechanism_epsilon(mechanism) == math.inf:  # None too
        from sklearn.ensemble import HistGradientBoostingClassifier

        return make_pipeline(
            VarianceThreshold(),
            HistGradientBoostingClassifier(
                max_iter=100, min_samples_leaf=LEAF_SAMPLES, random_state=0
            ),
        )
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

    return make_pipeline(
        VarianceThreshold(),
        StandardScaler(),
        LinearDiscriminantAnalysis(solver="lsqr", shrinkage="auto"),
    )


# ------------------------------------------------------------------------------------------------
# Checks shared by the experiments and the run-directory attacks
# ------------------------------------------------------------------------------------------------


def check_method(method: Any) -> str:
    """``method`` of :class:`ShadowGradientAttack` (and of the run-directory attacks)."""
    return check_choice(method, "method", ("auto", "likelihood", "classifier"))


def check_candidates(candidates: Sequence[float]) -> np.ndarray:
    """The candidate gravities, sorted: at least two, distinct, finite and > 0, else
    :class:`~ldp_audit.errors.InvalidParameterError`."""
    c = np.asarray(candidates, dtype=np.float64).reshape(-1)
    if c.size < 2 or np.unique(c).size != c.size or not np.isfinite(c).all() or (c <= 0).any():
        raise InvalidParameterError(
            f"candidates must be >= 2 distinct finite gravities > 0, got {list(c)}"
        )
    return np.sort(c)


#: Largest count of simulated episodes (agents x reports, shadows x candidates) one call may ask
#: for: each is a CartPole episode and a (d,) gradient row, so 10^8 is already tens of GB.
MAX_EPISODES = 100_000_000


def check_count(value: Any, name: str, minimum: int = 1) -> int:
    """``value`` as an int if it is an integer (not bool) in [``minimum``, :data:`MAX_EPISODES`],
    else :class:`~ldp_audit.errors.InvalidParameterError` naming ``name`` and the value."""
    return check_int(value, name, minimum=minimum, maximum=MAX_EPISODES)


def check_episodes(count: int, what: str) -> None:
    """Refuse a product of counts (``what``, e.g. ``"n_agents x reports_per_agent"``) that asks
    for more than :data:`MAX_EPISODES` simulated episodes."""
    if count > MAX_EPISODES:
        raise InvalidParameterError(
            f"{what} asks for {count:,} simulated episodes, more than {MAX_EPISODES:,}"
        )


def check_theta(theta: Any) -> np.ndarray:
    """``theta`` as a flat float64 array: non-empty, real and finite, else
    :class:`~ldp_audit.errors.InvalidParameterError`."""
    try:
        t = np.asarray(theta, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise InvalidParameterError(
            f"theta must be a real array of parameters, got {type(theta).__name__}"
        ) from None
    if t.size == 0 or not np.isfinite(t).all():
        raise InvalidParameterError("theta must be a non-empty array of finite numbers")
    return t
