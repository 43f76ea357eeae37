"""Scoring an attack against the guarantee it attacks.

An attack's success means little on its own; beside the ceiling that the epsilon-LDP guarantee
allows it becomes an end-to-end audit. This module holds the side-effect-free arithmetic:

* the accuracy ceiling for guessing one of ``k`` equally likely secrets from an epsilon-LDP
  release, ``e^eps / (e^eps + k - 1)`` (Ono & Takahashi 2020, Sec. 1 motivation; the standard
  Bayes bound for k-ary hypotheses under pure DP), and its composition: ``T`` reports at
  epsilon each are together ``T * epsilon``-LDP (sequential composition, Ono & Takahashi 2020,
  Sec. 3.2.1);
* for an (epsilon, delta) release the ceiling ``(e^eps + (k - 1) delta) / (e^eps + k - 1)`` (the
  same sum with ``+ delta`` on each inequality; ``T`` reports compose to ``(T eps, T delta)``);
* the implied lower bound ``e^eps >= (k - 1)(acc - delta) / (1 - acc)`` from an observed accuracy,
  taken at the Clopper-Pearson lower confidence limit of the accuracy so that the bound holds
  with the stated confidence;
* the (epsilon, delta) hypothesis-testing bound ``TPR <= e^eps FPR + delta`` (and its mirror
  ``1 - FPR <= e^eps (1 - TPR) + delta``) as a TPR ceiling (Steinke, Nasr & Jagielski 2023,
  Def. 2.1 / eq. (1)); the epsilon it implies from membership rates, and its lower bound from
  counts, are :func:`ldp_audit.stats.epsilon_from_tpr_fpr` and
  :func:`ldp_audit.stats.epsilon_lower_bound_from_tpr_fpr_counts`;
* :class:`AttackResult`, the frozen record every attack returns.

A result whose confidence interval lies entirely above the ceiling is a *privacy violation*: the
pipeline leaked more than it claims. No violation proves nothing about the absence of leaks.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError
from ldp_audit.rundir import to_jsonable
from ldp_audit.stats import clopper_pearson_interval
from ldp_audit.validation import check_epsilon, check_int, check_probability

__all__ = [
    "AttackResult",
    "accuracy_ceiling",
    "accuracy_interval",
    "composed_epsilon",
    "epsilon_from_accuracy",
    "membership_tpr_ceiling",
    "one_openmp_thread",
]


def one_openmp_thread() -> Any:
    """A context in which OpenMP (scikit-learn's gradient boosting) runs one thread: its threads
    spin-wait, and on a shared, loaded machine that costs minutes where one thread takes seconds
    (the same fitted model)."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="openmp")


def _check_counts(k: Any, n: Any, kname: str, nname: str) -> tuple[int, int]:
    """``(k, n)`` checked: integers with ``n >= 1`` and ``0 <= k <= n``."""
    n = check_int(n, nname, minimum=1)
    k = check_int(k, kname, minimum=0)
    if k > n:
        raise InvalidParameterError(f"{kname} must be <= {nname}={n}, got {k}")
    return k, n


def composed_epsilon(epsilon: float, reports: int = 1) -> float:
    """Epsilon of ``reports`` independent epsilon-LDP reports about the same secret.

    Sequential composition (Ono & Takahashi 2020, Sec. 3.2.1): ``T`` reports at ``epsilon`` each
    are ``T * epsilon``-LDP together. ``inf`` stays ``inf``.

    Args:
        epsilon: per-report epsilon (``inf`` allowed: the non-private baseline).
        reports: number of reports ``T >= 1``.

    Returns:
        ``T * epsilon``.
    """
    eps = check_epsilon(epsilon, "epsilon", allow_inf=True)
    return eps * check_int(reports, "reports", minimum=1)


def accuracy_ceiling(epsilon: float, k: int, reports: int = 1, delta: float = 0.0) -> float:
    """Largest accuracy any attacker can reach guessing one of ``k`` equally likely secrets.

    For an (epsilon, delta)-LDP release ``M``, a uniform prior over ``k`` secrets and
    ``p_s = P[A(M(s)) = s]``: ``p_s <= e^eps P[A(M(s')) = s] + delta`` for each of the ``k - 1``
    wrong secrets ``s'``; summing over ``s'`` and ``s`` (the wrong guesses of each ``s'`` sum to
    ``1 - p_s'``) gives ``(k - 1) acc <= e^eps (1 - acc) + (k - 1) delta``, so
    ``acc <= (e^eps + (k - 1) delta) / (e^eps + k - 1)`` (``e^eps / (e^eps + k - 1)`` under pure
    LDP). With ``T`` reports the guarantee composes to ``(T epsilon, min(1, T delta))``.

    Args:
        epsilon: per-report epsilon (``inf`` gives 1.0).
        k: number of equally likely secrets (e.g. 3 gravities).
        reports: reports per agent ``T``.
        delta: per-report delta in [0, 1] (0 for a pure epsilon-LDP mechanism).

    Returns:
        ``(e^{T eps} + (k - 1) T delta) / (e^{T eps} + k - 1)`` in ``[1/k, 1]``.
    """
    k = check_int(k, "k", minimum=2)
    eps = composed_epsilon(epsilon, reports)
    d = _composed_delta(delta, reports)
    if math.isinf(eps):
        return 1.0
    # e^e / (e^e + k - 1) = 1 / (1 + (k - 1) e^{-e}), stable for large eps; delta adds
    # (k - 1) delta / (e^e + k - 1) = (1 - pure) delta.
    pure = 1.0 / (1.0 + (k - 1) * math.exp(-eps))
    return pure + (1.0 - pure) * d


def _composed_delta(delta: Any, reports: Any) -> float:
    """``min(1, T delta)``: the delta of ``T`` reports at ``delta`` each (basic composition)."""
    d = check_probability(delta, "delta", open_interval=False)
    return min(1.0, d * check_int(reports, "reports", minimum=1))


def epsilon_from_accuracy(accuracy: float, k: int, delta: float = 0.0) -> float:
    """Epsilon implied by an accuracy: ``ln((k - 1)(acc - delta) / (1 - acc))``, 0 at or below
    the zero-epsilon ceiling ``(1 + (k - 1) delta) / k`` (chance under pure LDP).

    The inverse of :func:`accuracy_ceiling` for one report; ``inf`` at accuracy 1.

    Args:
        accuracy: accuracy in ``[0, 1]``.
        k: number of equally likely secrets.
        delta: the release's delta in [0, 1] (for ``T`` reports their composed delta).
    """
    k = check_int(k, "k", minimum=2)
    acc = check_probability(accuracy, "accuracy", open_interval=False)
    d = check_probability(delta, "delta", open_interval=False)
    if acc <= (1.0 + (k - 1) * d) / k:
        return 0.0
    if acc >= 1.0:
        return math.inf
    return math.log((k - 1) * (acc - d) / (1.0 - acc))


def _shares_ceiling(epsilon: float, delta: float, shares: tuple[float, ...]) -> float:
    """Largest expected accuracy any attacker reaches on agents whose secrets are the
    candidates in ``shares`` (fractions of the agents; a remainder is never guessed right),
    each agent's release (epsilon, delta)-LDP: the largest sum over secrets i of
    ``shares[i] P[i, i]`` over every k x k guess channel ``P`` (rows sum to 1) that is
    (epsilon, delta)-DP, ``P[i, j] <= e^eps P[i', j] + delta`` (any mechanism followed by any
    guess rule is such a channel, and every such channel is a mechanism), solved by
    ``scipy.optimize.linprog``. At equal shares it is :func:`accuracy_ceiling`'s
    ``(e^eps + (k - 1) delta) / (e^eps + k - 1)``; at delta 0 the largest over s of the s
    commonest shares' sum times e^eps / (e^eps + s - 1) (randomized response over them), at
    epsilon 0 the commonest share (always guessing it)."""
    from scipy.optimize import linprog

    k = len(shares)
    if math.isinf(epsilon) or delta >= 1.0:
        return min(1.0, sum(shares))
    e = math.exp(min(epsilon, 700.0))
    rows = []
    for i in range(k):
        for i2 in range(k):
            if i != i2:
                for j in range(k):
                    r = np.zeros(k * k)
                    r[i * k + j], r[i2 * k + j] = 1.0, -e
                    rows.append(r)
    eq = np.kron(np.eye(k), np.ones(k))
    c = -np.array([shares[i] if i == j else 0.0 for i in range(k) for j in range(k)])
    res = linprog(c, A_ub=np.array(rows), b_ub=np.full(len(rows), delta), A_eq=eq,
                  b_eq=np.ones(k), bounds=(0, 1), method="highs")  # fmt: skip
    return min(1.0, float(-res.fun)) if res.success else min(1.0, sum(shares))


def _shares_epsilon(accuracy: float, delta: float, shares: tuple[float, ...]) -> float:
    """The smallest epsilon whose :func:`_shares_ceiling` reaches ``accuracy``, by bisection
    (the ceiling grows with epsilon): 0 where the epsilon-0 ceiling already does, inf where no
    epsilon does, else within 1e-6."""
    if _shares_ceiling(0.0, delta, shares) >= accuracy:
        return 0.0
    if min(1.0, sum(shares)) < accuracy:
        return math.inf
    lo, hi = 0.0, 1.0
    while _shares_ceiling(hi, delta, shares) < accuracy and hi < 700.0:
        lo, hi = hi, 2.0 * hi
    while hi - lo > 1e-6:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _shares_ceiling(mid, delta, shares) < accuracy else (lo, mid)
    return hi


def accuracy_interval(correct: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """Two-sided Clopper-Pearson interval for an accuracy ``correct / trials``.

    Args:
        correct: number of correct guesses.
        trials: number of guesses (agents attacked).
        confidence: coverage of the interval, in (0, 1).
    """
    correct, trials = _check_counts(correct, trials, "correct", "trials")
    confidence = check_probability(confidence, "confidence")
    lo, hi = clopper_pearson_interval(correct, trials, 1.0 - confidence)
    return float(lo), float(hi)


def membership_tpr_ceiling(epsilon: float, fpr: float, delta: float = 0.0) -> float:
    """Largest TPR an (epsilon, delta)-DP guarantee allows at a given FPR.

    ``TPR <= min(1, e^eps FPR + delta, 1 - e^{-eps} (1 - delta - FPR))`` — the two inequalities
    of the hypothesis-testing view of DP (Steinke, Nasr & Jagielski 2023, eq. (1), both
    directions).

    Args:
        epsilon: the claimed epsilon (``inf`` gives 1.0).
        fpr: false-positive rate in [0, 1].
        delta: the claimed delta in [0, 1].
    """
    eps = check_epsilon(epsilon, "epsilon", allow_inf=True)
    fpr = check_probability(fpr, "fpr", open_interval=False)
    delta = check_probability(delta, "delta", open_interval=False)
    if math.isinf(eps):
        return 1.0
    # e^eps overflows a float above ~709.78; there e^eps * fpr >= 1 for any fpr > 1e-300.
    first = delta if fpr == 0.0 else (math.inf if eps > 700.0 else math.exp(eps) * fpr + delta)
    bound = min(1.0, first, 1.0 - math.exp(-eps) * (1.0 - delta - fpr))
    return max(bound, 0.0)


@dataclass(frozen=True)
class AttackResult:
    """What an attack achieved, beside what the guarantee allows.

    Attributes:
        attack: attack name (``"dynamics"``, ``"dynamics-malicious"``, ``"membership"``...).
        mechanism: the attacked mechanism's ``to_config()`` (``{"name": "none"}`` if non-private).
        epsilon: claimed per-report epsilon (``inf`` for the non-private baseline).
        reports_per_agent: reports ``T`` the attacker combines per secret.
        k: number of equally likely secrets (0 for continuous / membership attacks).
        n: number of attacked secrets (agents or canaries).
        correct: number of correct guesses (classification attacks; else 0).
        accuracy: ``correct / n`` (or balanced accuracy for membership).
        accuracy_ci: two-sided Clopper-Pearson interval at ``confidence``.
        ceiling: accuracy ceiling of the guarantee at ``T * epsilon`` (and ``T * delta``).
        composed_epsilon: ``T * epsilon``.
        epsilon_lower_bound: epsilon (composed over T reports) implied by the attack, holding with
            probability ``confidence``; compare with ``composed_epsilon``.
        confidence: confidence level of the interval and the bound.
        chance: accuracy of guessing blindly (``1/k``; the commonest secret's share where the
            scorer gave unequal ``shares``, see :meth:`from_guesses`).
        mae: mean absolute error (continuous variant), else None.
        mae_baseline: MAE of always guessing the prior mean (continuous variant), else None.
        auc: ROC AUC (membership), else None.
        tpr_at_fpr: ``{"0.01": tpr, "0.001": tpr}`` (membership), else empty.
        advantage: ``TPR - FPR`` at the best threshold, or ``(acc - chance) / (1 - chance)``.
        seconds: wall-clock time of the attack.
        extra: free-form, JSON-able details (settings, per-class counts...).
        delta: claimed per-report delta (0 for pure epsilon-LDP); the ceiling and the implied
            epsilon of a guessing attack hold at the composed ``min(1, T * delta)``.
    """

    attack: str
    mechanism: dict[str, Any]
    epsilon: float
    reports_per_agent: int
    k: int
    n: int
    correct: int
    accuracy: float
    accuracy_ci: tuple[float, float]
    ceiling: float
    composed_epsilon: float
    epsilon_lower_bound: float
    confidence: float = 0.95
    chance: float = 0.0
    mae: float | None = None
    mae_baseline: float | None = None
    auc: float | None = None
    tpr_at_fpr: dict[str, float] = field(default_factory=dict)
    advantage: float = 0.0
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    delta: float = 0.0

    @classmethod
    def from_guesses(
        cls,
        *,
        attack: str,
        mechanism: dict[str, Any],
        epsilon: float,
        reports_per_agent: int,
        k: int,
        n: int,
        correct: int,
        confidence: float = 0.95,
        seconds: float = 0.0,
        extra: dict[str, Any] | None = None,
        shares: tuple[float, ...] | None = None,
        delta: float = 0.0,
    ) -> AttackResult:
        """The result of a ``k``-way guessing attack: ``correct`` of ``n`` secrets right, scored
        (interval, ceiling at ``reports_per_agent * epsilon`` and, for an (epsilon, delta)
        mechanism, ``min(1, reports_per_agent * delta)``, implied epsilon, advantage).
        The implied epsilon is taken at the two-sided interval's lower end (it holds with
        probability ``(1 + confidence) / 2``), so ``violation`` is exactly "the interval lies
        above the ceiling".

        ``shares`` (the fraction of the ``n`` agents holding each candidate, where the scorer
        knows them) raises the ceiling where the secrets are not equally common: always
        guessing a secret 90 % of the agents hold is right 90 % of the time whatever epsilon
        is (the ceiling e^eps / (e^eps + k - 1) holds for equally likely secrets only); the
        ceiling is then the larger of the two, the implied epsilon the smaller, and chance the
        commonest share where it is above 1/k (what a guess that learnt nothing reaches)."""
        acc = correct / n
        ci = accuracy_interval(correct, n, confidence)
        d = _composed_delta(delta, reports_per_agent)
        ceiling = accuracy_ceiling(epsilon, k, reports_per_agent, delta)
        eps_lb, chance = epsilon_from_accuracy(ci[0], k, d), 1.0 / k
        if shares is not None:
            chance = max(chance, *shares)
            composed = composed_epsilon(epsilon, reports_per_agent)
            ceiling = max(ceiling, _shares_ceiling(composed, d, tuple(shares)))
            eps_lb = min(eps_lb, _shares_epsilon(ci[0], d, tuple(shares)))
        return cls(
            attack=attack,
            mechanism=mechanism,
            epsilon=epsilon,
            reports_per_agent=reports_per_agent,
            k=k,
            n=n,
            correct=correct,
            accuracy=acc,
            accuracy_ci=ci,
            ceiling=ceiling,
            composed_epsilon=composed_epsilon(epsilon, reports_per_agent),
            # at the interval's lower end, so the verdict is "the interval printed lies above
            # the ceiling" (the one-sided limit at `confidence` sits higher: s53-attackprobe)
            epsilon_lower_bound=eps_lb,
            confidence=confidence,
            chance=chance,
            advantage=(acc - chance) / (1.0 - chance) if chance < 1 else 0.0,
            seconds=seconds,
            extra=dict(extra or {}),
            delta=float(delta),
        )

    @property
    def violation(self) -> bool:
        """True when the attack beats the guarantee beyond its confidence interval.

        Equivalently the implied epsilon lower bound exceeds the claimed (composed) epsilon.
        False proves nothing: a weak attack never violates.
        """
        return bool(self.epsilon_lower_bound > self.composed_epsilon * (1.0 + 1e-12))

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict (``inf`` written as the string ``"inf"``, NaN as null: the project's
        :func:`ldp_audit.rundir.to_jsonable`), with ``violation``."""
        return to_jsonable({**asdict(self), "violation": self.violation})

    def summary(self) -> str:
        """One human-readable line (for the CLI)."""
        eps = "inf" if math.isinf(self.epsilon) else f"{self.epsilon:g}"
        if self.delta:
            eps += f" delta={self.delta:g}"
        lo, hi = self.accuracy_ci
        if self.k == 0 and self.mae is not None:  # continuous variant: no accuracy / ceiling
            head = f"{self.attack}: eps={eps} x T={self.reports_per_agent} n={self.n}"
        else:
            head = (
                f"{self.attack}: eps={eps} x T={self.reports_per_agent} n={self.n} "
                f"acc={self.accuracy:.3f} [{lo:.3f}, {hi:.3f}] ceiling={self.ceiling:.3f} "
                f"chance={self.chance:.3f} eps_lb={self.epsilon_lower_bound:.3f}"
            )
        if self.mae is not None:
            head += f" mae={self.mae:.4f} (baseline {self.mae_baseline:.4f})"
        if self.auc is not None:
            head += f" auc={self.auc:.3f}"
        verdict = "VIOLATION" if self.violation else "no violation (proves nothing)"
        return f"{head} -> {verdict}"
