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
  canary's public direction (``transcript.npz``: ``update`` rows or the stored
  ``canary_projection``);
* **black-box** (final model only): the score is ``-<theta_T - theta_0, u_i>`` (an included
  gradient canary pushes the parameters against ``u_i``; ``theta_0`` is public, drawn from the
  seed).

The comparison is against the accountant's upper bound for the same ``delta`` (the run's
``metrics.json``): a lower bound above it is a violation. The auditor never opens
``secrets.npz`` to compute scores; only :func:`audit_run` reads the bits to count correct
guesses.

Two stronger tests of the same run (both sound: a correct trainer is flagged with probability at
most ``1 - confidence``):

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
* **White-box claimed-mechanism test** (:func:`mechanism_test`): the auditor sees every noisy
  update and tests the claimed mechanism itself: each per-sample gradient (data or canary)
  clipped to norm ``C``, fresh ``N(0, (sigma C)^2)`` noise per coordinate, canaries joining an
  update with the charged rate ``q``. On the orthonormal canary directions the noise is i.i.d.
  ``N(0, sigma^2)`` (units of ``C``), a canary adds at most 1 when it joins, and the data
  gradients of an update (at most ``n_t`` samples of norm ``<= C``) can move the weighted score
  difference by at most ``n_t ||w||`` (Bessel's inequality; whatever the data, adaptively). So
  (a) ``Delta = sum_t <y_t, w>`` (``w = 1/n_in`` on included canaries, ``-1/n_out`` on the others)
  is at most ``Bin(T n_in, q) / n_in + sum_t n_t ||w|| + N(0, T sigma^2 ||w||^2)`` and (b)
  ``sum y^2 / sigma^2`` is stochastically at least ``chi^2(T m)`` (a shifted Gaussian is never
  more concentrated, Anderson's inequality). A too-large ``Delta`` (per-layer clipping, no
  clipping, an understated sampling rate) or a too-small sum of squares (noise not multiplied
  by ``C``) rejects the claim; the two p-values are split by Bonferroni.

The code lives in four modules, every name importable from here: this one (reading and auditing
a dprl run: :func:`canary_scores`, :func:`audit_run`, :func:`one_run_result`),
:mod:`ldp_audit.attacks.one_run_steinke` (the (eps, delta) bound, its ceiling and the canary
count a refutation needs), :mod:`ldp_audit.attacks.one_run_fdp` (the f-DP test and the claimed
curve) and :mod:`ldp_audit.attacks.one_run_tests` (the claimed-mechanism test and the Opacus
integration's noise, independence, contribution and sampling tests) and
:mod:`ldp_audit.attacks.one_run_noise` (the exact per-tensor, per-update and all-lags tests of
the released noise).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit.attacks.one_run_fdp import (
    FDP_FRACTIONS,
    claimed_lines,
    fdp_audit_scores,
    fdp_tail_bound,
    gdp_delta,
    gdp_mu_lower_bound,
    profile_lines,
)
from ldp_audit.attacks.one_run_noise import pair_dependence_test, scan_p_value, tensor_noise_test
from ldp_audit.attacks.one_run_steinke import (
    FRACTIONS,
    audit_scores,
    canaries_to_refute,
    epsilon_lower_bound,
    p_value,
    steinke_ceiling,
)
from ldp_audit.attacks.one_run_tests import (
    contribution_test,
    independence_test,
    mechanism_test,
    noise_test,
    sampling_test,
)
from ldp_audit.errors import InvalidParameterError, RunDirectoryError
from ldp_audit.validation import check_probability

__all__ = [
    "FRACTIONS",
    "FDP_FRACTIONS",
    "gdp_delta",
    "profile_lines",
    "fdp_tail_bound",
    "fdp_audit_scores",
    "gdp_mu_lower_bound",
    "claimed_lines",
    "mechanism_test",
    "p_value",
    "epsilon_lower_bound",
    "audit_scores",
    "canary_scores",
    "audit_run",
    "one_run_result_class",
    "one_run_result",
    "score_run_from_args",
    "independence_test",
    "noise_test",
    "contribution_test",
    "sampling_test",
    "tensor_noise_test",
    "pair_dependence_test",
    "scan_p_value",
    "steinke_ceiling",
    "canaries_to_refute",
]


# ------------------------------------------------------------------------------------------------
# Reading a dprl run (scores never touch secrets.npz)
# ------------------------------------------------------------------------------------------------


def _public(run_dir: Path) -> tuple[Any, dict, dict, dict]:
    from ldp_audit.rundir import read_npz
    from ldp_audit.training.dprl.trainer import read_run

    run = read_run(run_dir)
    cfg = run["config"]
    if cfg.canaries < 2:
        raise RunDirectoryError(
            f"run {str(run_dir)!r} has no canaries (trained with canaries={cfg.canaries}); "
            f"train with --canaries M to audit it in one run"
        )
    tr = read_npz(run_dir, "transcript.npz")
    return cfg, run["metrics"], run["model"], tr


def canary_scores(run_dir: str | Path, setting: str = "white-box") -> np.ndarray:
    """(m,) membership scores of the canaries from the public parts of the run."""
    from ldp_audit.training.dprl.privacy import canary_directions

    if setting not in ("white-box", "black-box"):
        raise InvalidParameterError(f"setting must be 'white-box' or 'black-box', got {setting!r}")
    run_dir = Path(run_dir)
    cfg, _, model, tr = _public(run_dir)
    u = canary_directions(cfg.n_params, cfg.canaries, cfg.canary_seed)
    if setting == "black-box":
        return -(np.asarray(model["params"]) - np.asarray(model["initial"])) @ u
    if "update" in tr and tr["update"].ndim == 2:
        return (tr["update"].astype(np.float64) @ u).sum(axis=0)
    if "canary_projection" in tr:
        return tr["canary_projection"].sum(axis=0)
    raise RunDirectoryError(f"{run_dir}/transcript.npz holds no released updates to score")


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
) -> Any:
    """A one-run audit's result from its Steinke guesses (``one``: guesses, correct, the
    (eps, delta) lower bound) and membership metrics: a two-way guess per canary against the
    ceiling ``1 / (1 + e^-epsilon)`` the claim allows. Shared with :mod:`ldp_audit.opacus`."""
    from ldp_audit.attacks.scoring import accuracy_interval

    r, v = one["guesses"], one["correct"]
    return one_run_result_class()(
        attack=attack,
        mechanism=mechanism,
        epsilon=epsilon,
        reports_per_agent=1,
        k=2,
        n=canaries,
        correct=v,
        accuracy=v / r if r else float("nan"),
        accuracy_ci=accuracy_interval(v, r, confidence) if r else (0.0, 1.0),
        ceiling=1.0 if math.isinf(epsilon) else 1.0 / (1.0 + math.exp(-epsilon)),
        composed_epsilon=epsilon,
        epsilon_lower_bound=float(one["epsilon_lower_bound"]),
        confidence=confidence,
        chance=0.5,
        auc=membership["auc"],
        tpr_at_fpr=membership["tpr_at_fpr"],
        advantage=membership["advantage"],
        seconds=seconds,
        extra=extra,
    )


def one_run_result_class() -> Any:
    """The result type of a one-run audit (built on first use so importing this module does not
    import the scoring classes); shared with :mod:`ldp_audit.opacus`."""
    from ldp_audit.attacks.scoring import AttackResult

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

    return OneRunResult


def audit_run(
    run_dir: str | Path,
    *,
    setting: str = "white-box",
    confidence: float = 0.95,
    fdp: bool = True,
    mu_bound: bool = True,
) -> Any:
    """Score the canaries of a dprl run and test the claim; an ``AttackResult``.

    ``epsilon_lower_bound`` is the one-run (eps, delta) bound (Steinke et al.) at the run's
    delta; ``composed_epsilon`` (and ``epsilon``) is the accountant's upper bound at that delta.
    ``extra["f_dp"]``: the f-DP one-run test of the ledger's claimed curve
    (:func:`fdp_audit_scores`); ``extra["mechanism_test"]`` (white-box):
    :func:`mechanism_test`. ``mu_bound=False`` skips the (slow, reporting-only) GDP ``mu``
    lower bound of the f-DP test; the verdict does not use it.
    ``violation`` is true when any test flags (``extra["flagged_by"]``);
    the tests split ``1 - confidence`` (Bonferroni), so a correct trainer is flagged with
    probability at most ``1 - confidence``.
    """
    from ldp_audit.attacks.membership import membership_metrics
    from ldp_audit.rundir import read_npz
    from ldp_audit.training.dprl.privacy import canary_directions

    t0 = time.perf_counter()
    confidence = check_probability(confidence, "confidence")
    run_dir = Path(run_dir)
    cfg, met, _, tr = _public(run_dir)
    scores = canary_scores(run_dir, setting)
    white = setting == "white-box"
    n_tests = 1 + int(fdp) + int(white)
    conf_each = 1.0 - (1.0 - confidence) / n_tests
    # a run that made no update released nothing to test beyond the (eps, delta) bound
    claim = claimed_lines(run_dir) if (fdp or white) and met.get("updates") else None
    proj = None
    if white:
        if "canary_projection" in tr:
            proj = np.asarray(tr["canary_projection"], dtype=np.float64)
        else:
            u = canary_directions(cfg.n_params, cfg.canaries, cfg.canary_seed)
            proj = tr["update"].astype(np.float64) @ u
    # --- scoring only: the secret bits ---
    included = read_npz(run_dir, "secrets.npz", ("canary_included",))["canary_included"]
    one = audit_scores(scores, included, delta=cfg.delta, confidence=conf_each)
    both = bool(included.any() and (~included).any())
    mm = membership_metrics(scores, included) if both else {"auc": None, "advantage": 0.0,
                                                           "tpr_at_fpr": {}}  # fmt: skip
    priv = met.get("privacy", {})
    eps_ub = priv.get("epsilon", math.inf)
    eps_ub = math.inf if eps_ub in ("inf", None) else float(eps_ub)
    r = one["guesses"]
    flagged = []
    if one["epsilon_lower_bound"] > eps_ub * (1.0 + 1e-12):
        flagged.append("steinke")
    f_dp = None
    if fdp and both and claim is not None:
        f_dp = fdp_audit_scores(scores, included, claim["lines"], confidence=conf_each,
                                mu=claim["mu"] if mu_bound else None)  # fmt: skip
        f_dp["mu_claimed"] = claim["mu"]
        f_dp.update({k: claim[k] for k in ("kind", "sigma", "q", "updates")})
        if f_dp["rejected"]:
            flagged.append("f-dp")
    mech = None
    if white and both and claim is not None and proj is not None and len(proj):
        expected = cfg.envs if cfg.algo == "reinforce" else cfg.batch_size
        per_update = cfg.envs if cfg.algo == "reinforce" else cfg.buffer_size
        mech = mechanism_test(
            proj * (expected / cfg.clip),
            included,
            sigma=claim["sigma"],
            sample_rate=claim["q"],
            data_per_update=per_update,
            confidence=conf_each,
        )
        if mech["rejected"]:
            flagged.append("mechanism")
    return one_run_result(
        attack=f"one-run-{setting}",
        mechanism=cfg.mechanism_config(),
        epsilon=eps_ub,
        canaries=int(cfg.canaries),
        one=one,
        membership=mm,
        confidence=confidence,
        seconds=time.perf_counter() - t0,
        extra={
            "setting": setting,
            "method": "Steinke, Nasr & Jagielski 2023, Cor. 5.4 (eps, delta)",
            "delta": cfg.delta,
            "guesses": r,
            "guess_fraction": one["fraction"],
            "per_fraction": one["per_fraction"],
            "members": int(included.sum()),
            "accountant": priv.get("by_method"),
            "updates": met.get("updates"),
            "privacy_unit": priv.get("unit"),
            "canary_scale": cfg.canary_scale,
            "tests": n_tests,
            "confidence_each": conf_each,
            "f_dp": f_dp,
            "mechanism_test": mech,
            "flagged_by": flagged,
        },
    )


def score_run_from_args(args: Any) -> Any:
    """``ldp-audit attack membership --run-dir RUN`` for dprl runs (RUN_SCORERS entry).

    Returns the white-box result; the black-box result of the same run is in
    ``extra["black_box"]``.
    """
    conf = float(getattr(args, "confidence", 0.95))
    white = audit_run(args.run_dir, setting="white-box", confidence=conf)
    black = audit_run(args.run_dir, setting="black-box", confidence=conf)
    white.extra["black_box"] = black.to_dict()
    return white
