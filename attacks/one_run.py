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
  a user's Opacus loop (:func:`audit_run` = :func:`ldp_audit.opacus.scoring.audit_evidence` of
  :func:`dprl_evidence`; docs/opacus.md).

The code lives in five modules, every name importable from here: this one (reading a dprl run
into the audit's evidence: :func:`canary_scores`, :func:`dprl_evidence`, :func:`audit_run`;
the result type :func:`one_run_result`),
:mod:`ldp_audit.attacks.one_run_steinke` (the (eps, delta) bound, its ceiling and the canary
count a refutation needs), :mod:`ldp_audit.attacks.one_run_fdp` (the f-DP test and the claimed
curve), :mod:`ldp_audit.attacks.one_run_tests` (the noise, independence, contribution and
sampling tests) and
:mod:`ldp_audit.attacks.one_run_noise` (the exact per-tensor, per-update and all-lags tests of
the released noise).
"""

from __future__ import annotations

import math
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
    noise_test,
    sampling_test,
)
from ldp_audit.errors import RunDirectoryError

__all__ = [
    "FRACTIONS",
    "FDP_FRACTIONS",
    "gdp_delta",
    "profile_lines",
    "fdp_tail_bound",
    "fdp_audit_scores",
    "gdp_mu_lower_bound",
    "claimed_lines",
    "p_value",
    "epsilon_lower_bound",
    "audit_scores",
    "canary_scores",
    "dprl_evidence",
    "audit_run",
    "one_run_result_class",
    "one_run_result",
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
    from ldp_audit.rundir import RunDir
    from ldp_audit.training.dprl.trainer import read_run

    run = read_run(run_dir)
    cfg = run["config"]
    if cfg.canaries < 2:
        raise RunDirectoryError(
            f"run {str(run_dir)!r} has no canaries (trained with canaries={cfg.canaries}); "
            f"train with --canaries M to audit it in one run"
        )
    tr = RunDir(run_dir).arrays("transcript.npz", "canary_projection", "batch_size")
    return cfg, run["metrics"], run["model"], tr


def canary_scores(run_dir: str | Path, setting: str = "white-box") -> np.ndarray:
    """(m,) membership scores of a dprl run's canaries from the public parts of the run:
    white-box ``sum_t <g_t, u_i>`` (the released updates on the public directions), black-box
    ``-<theta_T - theta_0, u_i>``."""
    from ldp_audit.opacus.scoring import check_setting
    from ldp_audit.training.dprl.privacy import canary_directions

    check_setting(setting)
    cfg, _, model, tr = _public(Path(run_dir))
    if setting == "white-box":
        return np.asarray(tr["canary_projection"], dtype=np.float64).sum(axis=0)
    u = canary_directions(cfg.n_params, cfg.canaries, cfg.canary_seed)
    return -(np.asarray(model["params"]) - np.asarray(model["initial"])) @ u


def dprl_evidence(run_dir: str | Path) -> Any:
    """A dprl run's :class:`ldp_audit.opacus.scoring.Evidence`: the audit of ``train dprl``
    goes through the same door as a user's Opacus loop (its embedded ``CanaryAudit`` recorded
    the same per-update records). The claim is the run's DprlConfig (sigma, C, the expected
    batch, the rate ``q``) and the public directions are dense (:func:`canary_directions`)."""
    from ldp_audit.opacus.canaries import NOISE_SKETCH
    from ldp_audit.opacus.scoring import Evidence

    run_dir = Path(run_dir)
    cfg, met, _, tr = _public(run_dir)
    batch = cfg.envs if cfg.algo == "reinforce" else cfg.batch_size
    s = cfg.layer_sizes
    shapes = [sh for a, b in zip(s[:-1], s[1:], strict=False) for sh in ([b, a], [b])]
    claim = {
        "optimizer": f"train dprl {cfg.algo} (Opacus DPOptimizer)",
        "noise_multiplier": float(cfg.noise_multiplier),
        "max_grad_norm": float(cfg.clip),
        "expected_batch_size": int(batch),
        "loss_reduction": "mean",
        "sample_rate": float(cfg.sample_rate),
        "dataset_size": None,
        "n_params": int(cfg.n_params),
        "tensor_sizes": [int(np.prod(sh)) for sh in shapes],
        "tensor_shapes": shapes,
    }
    y = np.asarray(tr["canary_projection"], dtype=np.float64) * (batch / cfg.clip)
    why = (
        "REINFORCE uses every episode in exactly one update (q = 1): no sampling to test"
        if cfg.algo == "reinforce"
        else "the replay buffer fills during the run (the batch sizes are Bin(fill, q), not "
        "Bin(buffer_size, q)); the charged rate is checked by the ledger test"
    )
    return Evidence(
        run_dir=run_dir,
        config={
            "kind": "gradient",
            "canaries": int(cfg.canaries),
            "canary_scale": float(cfg.canary_scale),
            "canary_seed": int(cfg.canary_seed),
            "delta": float(cfg.delta),
            "noise_sketch": NOISE_SKETCH,
            "directions": "given",
            "claim": claim,
        },  # fmt: skip
        metrics=met,
        transcript={**tr, "canary_projection": y},
        black_box=canary_scores(run_dir, "black-box"),
        algorithm="dprl",
        mechanism=cfg.mechanism_config(),
        not_sampled=why,
    )


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


def audit_run(run_dir: str | Path, *, setting: str = "white-box", confidence: float = 0.95) -> Any:
    """The one-run audit of a dprl run: :func:`ldp_audit.opacus.scoring.audit_evidence` of
    :func:`dprl_evidence`, the same tests, coverage and family bound as a user's Opacus loop
    (docs/opacus.md); ``violation`` is true when any test flags (``extra["flagged_by"]``), at
    most ``1 - confidence`` on a correct trainer (Bonferroni)."""
    from ldp_audit.opacus.scoring import audit_evidence, check_setting

    check_setting(setting)
    return audit_evidence(dprl_evidence(run_dir), setting=setting, confidence=confidence)
