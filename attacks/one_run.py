"""One-run privacy auditing of DP-SGD training (Steinke, Nasr & Jagielski 2023).

``m`` canaries are planted at training time, each included independently with probability 1/2
(the secret bits, stored in the run's ``secrets.npz``). After the run, the auditor scores each
canary from what the run published, guesses "in" for the ``k`` highest scores and "out" for the
``k`` lowest (abstaining on the rest), and counts ``v`` correct guesses out of ``r = 2k``.

If the training is ``(eps, delta)``-DP with respect to one canary, Steinke et al. (2023,
Corollary 5.4; the code of their Appendix D) bound the chance of ``>= v`` correct guesses by::

    p(eps, delta) = P[Bin(r, q) >= v] + 2 m delta max_{i=1..v} P[v - i <= Bin(r, q) < v] / i,
    q = e^eps / (1 + e^eps)

so the largest ``eps`` with ``p(eps, delta) < beta`` is a lower bound on the true epsilon holding
with confidence ``1 - beta`` (:func:`epsilon_lower_bound`). Several guess counts ``k`` (fixed in
advance, :data:`FRACTIONS`) are tried with a Bonferroni split of ``beta``.

Two settings, both from the same run:

* **white-box** (the auditor sees every noisy update, as in federated training): canary ``i``'s
  score is ``sum_t <released_t, u_i>``, the released noisy mean gradients projected on the
  canary's public direction (``transcript.npz`` ``canary_projection``);
* **black-box** (final model only): the score is ``-<theta_T - theta_0, u_i>`` (an included
  gradient canary pushes the parameters against ``u_i``; ``theta_0`` is public, drawn from the
  seed).

The comparison is against the accountant's upper bound for the same ``delta`` (the run's
``metrics.json``): a lower bound above it is a violation. The auditor never opens
``secrets.npz`` to compute scores; only :func:`audit_run` reads the bits to count correct
guesses.

Stronger tests of the same run (each sound: a correct trainer is flagged with probability at
most its level):

* **f-DP one-run bound** (after Mahloujifar, Melis & Chaudhuri 2024, "Auditing f-differential
  privacy in one run"): the whole claimed privacy curve, not one ``(eps, delta)`` pair, bounds
  the number of correct guesses. For one canary ``i`` and any fixed other bits, flipping bit ``i``
  turns the event "guess ``i`` correct and ``W - 1`` in ``R``" into "guess ``i`` wrong and ``W``
  in ``R``"; an f-DP mechanism bounds the first probability by ``g = 1 - f`` of the second
  (both directions of neighbouring, convexity of ``f``), and averaging over the ``m`` canaries
  (Jensen, ``g`` concave) gives, for ``p_j = P[W = j]`` with ``k`` guesses and every set ``R``,
  ``sum_{j in R} (j + 1) p_{j+1} <= m g(sum_{j in R} (k - j) p_j / m)``. Writing ``g`` as the
  minimum of the lines ``delta(eps) + e^eps x`` of the claimed privacy profile, the worst-case
  ``P[W >= v]`` over all ``p`` meeting these constraints is a linear programme
  (:func:`fdp_tail_bound`, SciPy's HiGHS). For a pure ``eps`` it is exactly Steinke et al.'s
  binomial tail (tested). The claimed curve is read from the run's ledger: ``G_mu`` with
  ``mu = sqrt(T) / sigma`` for unsampled Gaussian updates, else the PLD privacy profile
  (dp_accounting, pessimistic) of what was charged (:func:`claimed_lines`).
* **The claimed mechanism, white-box** (:mod:`ldp_audit.attacks.one_run_tests`,
  :mod:`ldp_audit.attacks.one_run_noise`): the released noise per tensor, per update and at
  every lag, a canary's contribution along its direction, the sampling and the ledger, with the
  stated-family bound beside the assumption-free one. A dprl run is audited by the same door as
  a user's Opacus loop (:mod:`ldp_audit.attacks.one_run_dprl`: ``audit_run`` =
  :func:`ldp_audit.opacus.scoring.audit_evidence` of ``dprl_evidence``; docs/opacus.md).

The code lives in six modules, each name imported from the one that defines it: this one (the
result type :func:`one_run_result`), :mod:`ldp_audit.attacks.one_run_dprl` (reading a dprl run
into the audit's evidence: ``dprl_evidence``, ``audit_run``),
:mod:`ldp_audit.attacks.one_run_steinke` (the (eps, delta) bound, its ceiling and the canary
count a refutation needs), :mod:`ldp_audit.attacks.one_run_fdp` (the f-DP test and the claimed
curve), :mod:`ldp_audit.attacks.one_run_tests` (the noise, independence, contribution and
sampling tests) and
:mod:`ldp_audit.attacks.one_run_noise` (the exact per-tensor, per-update and all-lags tests of
the released noise).
"""

from __future__ import annotations

import math
from typing import Any

from ldp_audit.attacks.scoring import AttackResult, accuracy_interval

__all__ = ["OneRunResult", "one_run_result"]


class OneRunResult(AttackResult):
    """An ``AttackResult`` whose verdict is any of the run's tests (``extra["flagged_by"]``).

    ``epsilon_lower_bound`` stays the Steinke et al. (eps, delta) bound; the f-DP test and
    the white-box mechanism test are reported in ``extra`` and also make ``violation``
    true when they reject (each test at ``(1 - confidence) / n_tests``, so the verdict's
    false-alarm probability on a correct trainer is at most ``1 - confidence``).
    """

    @property
    def violation(self) -> bool:
        return bool(super().violation or self.extra.get("flagged_by"))

    def summary(self) -> str:
        """One line: the claim over the run's updates, the (eps, delta) lower bound and the
        most it could show with this canary count, the guesses and the verdict (the
        accuracy ceiling and ``T`` of a per-report attack do not apply to a one-run audit)."""
        ex = self.extra
        eps = "inf" if math.isinf(self.epsilon) else f"{self.epsilon:.4g}"
        d = ex.get("delta")
        T = ex.get("updates")
        head = f"{self.attack}: claim eps={eps}" + (f" at delta={d:g}" if d else "")
        head += f" over {T} updates" if isinstance(T, int) else ""
        head += f", {self.n} canaries: eps_lb={self.epsilon_lower_bound:.3f}"
        cap = ex.get("steinke_ceiling")
        head += f" (at most {cap:.3f} with {self.n} canaries)" if cap is not None else ""
        r = ex.get("guesses")
        if r:
            lo, hi = self.accuracy_ci
            head += (f", guesses {self.correct}/{r} correct (accuracy {self.accuracy:.3f} "
                     f"[{lo:.3f}, {hi:.3f}])")  # fmt: skip
        if self.auc is not None:
            head += f", auc={self.auc:.3f}"
        by = ex.get("flagged_by")
        if self.violation:
            verdict = "VIOLATION" + (f" (flagged by: {', '.join(by)})" if by else "")
        else:
            verdict = "no violation (proves nothing)"
        return f"{head} -> {verdict}"


def one_run_result(
    *,
    attack: str,
    mechanism: Any,
    epsilon: float,
    canaries: int,
    one: dict[str, Any],
    membership: dict[str, Any],
    confidence: float,
    seconds: float,
    extra: dict[str, Any],
    reports_per_agent: int = 1,
    result_class: type[AttackResult] = OneRunResult,
) -> Any:
    """A one-run audit's result from its Steinke guesses (``one``: guesses, correct, the
    (eps, delta) lower bound) and membership metrics: a two-way guess per canary against the
    ceiling ``1 / (1 + e^-(T epsilon))`` the claim allows over ``T = reports_per_agent``
    reports. Shared with :mod:`ldp_audit.opacus` and :func:`ldp_audit.attacks.membership.run`
    (``result_class=AttackResult``: its verdict is the bound alone)."""
    r, v = one["guesses"], one["correct"]
    eps = epsilon * reports_per_agent
    return result_class(
        attack=attack,
        mechanism=mechanism,
        epsilon=epsilon,
        reports_per_agent=reports_per_agent,
        k=2,
        n=canaries,
        correct=v,
        accuracy=v / r if r else float("nan"),
        accuracy_ci=accuracy_interval(v, r, confidence) if r else (0.0, 1.0),
        ceiling=1.0 if math.isinf(eps) else 1.0 / (1.0 + math.exp(-eps)),
        composed_epsilon=eps,
        epsilon_lower_bound=float(one["epsilon_lower_bound"]),
        confidence=confidence,
        chance=0.5,
        auc=membership["auc"],
        tpr_at_fpr=membership["tpr_at_fpr"],
        advantage=membership["advantage"],
        seconds=seconds,
        extra=extra,
    )
