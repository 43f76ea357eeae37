"""Membership inference with canary agents, and one-run auditing (Steinke, Nasr & Jagielski 2023).

Setting (issue 6): ``m`` canary agents, environments with an unusual gravity (e.g. 12.0), are
each included independently with probability 1/2 in *one* training run; an excluded canary's slot
is filled by an ordinary agent (gravity from the paper's {9.7, 9.8, 9.9}), so the number of
agents is fixed and the neighbouring datasets differ by replacing one agent's environment. The
attacker knows which agent slots are canary slots (they are public in the audit), not which ones
hold a canary; it scores every slot from what the run published (transcript and/or final model)
and guesses membership.

Why this audits the guarantee: every report of an agent is epsilon-LDP in its gradient, hence in
its gravity (post-processing), and the thetas an agent receives depend on its own reports only
through earlier noisy reports, so the whole run is ``T * epsilon``-DP with respect to each agent's
gravity (adaptive sequential composition; Ono & Takahashi 2020, Sec. 3.2.1). For pure
``eps``-DP, Steinke, Nasr & Jagielski (2023, Thm. 3.1 with delta = 0) show that when the attacker
guesses ``r`` of the independent canary bits, the number ``V`` of correct guesses is
stochastically dominated by ``Binomial(r, e^eps / (e^eps + 1))``; so the one-sided
Clopper-Pearson lower limit ``p_lo`` of ``V / r`` gives ``eps >= ln(p_lo / (1 - p_lo))`` with
confidence ``1 - beta``.

Generic API (any trainer that writes a run directory plugs in):

* a *trainer* is ``trainer(gravities (n_agents,), run_dir, rng) -> None`` and writes the run
  directory of docs/interfaces.md (``transcript.npz`` whose ``agent`` column indexes
  ``gravities``; ``model.npz``; ``config.json`` with the mechanism). :class:`FixedThetaTrainer`
  is the built-in one (one round of PGC at a fixed broadcast theta); adapters for PGC-A3C,
  DP-SGD, FedRL and FRD only need to map per-agent gravities to their configs.
* a *scorer* is ``scorer(run_dir, agents (m,)) -> scores (m,)`` (higher: more likely a canary);
  it must not open ``secrets.npz``. :class:`TranscriptScorer` is the built-in one (the dynamics
  attack's shadow-gradient likelihood ratio "canary gravity vs ordinary gravities").
* :func:`run` draws the canary bits, trains once, scores, and returns an
  :class:`~ldp_audit.attacks.scoring.AttackResult` with AUC, TPR at FPR 1% and 0.1%, advantage, the
  ceiling ``TPR <= e^eps FPR + delta`` and the one-run epsilon lower bound.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit.attacks.dynamics_run_dir import attack_run_dir
from ldp_audit.attacks.dynamics_shadow import (
    GRAVITIES,
    Simulator,
    check_count,
    mechanism_config,
    mechanism_epsilon,
    simulate_shadow,
)
from ldp_audit.attacks.one_run import one_run_result
from ldp_audit.attacks.one_run_steinke import audit_scores
from ldp_audit.attacks.scoring import (
    AttackResult,
    composed_epsilon,
    membership_tpr_ceiling,
)
from ldp_audit.errors import InvalidParameterError, RunDirectoryError
from ldp_audit.validation import check_int, check_positive, check_probability, check_rng

__all__ = [
    "FixedThetaTrainer",
    "Scorer",
    "Trainer",
    "TranscriptScorer",
    "membership_metrics",
    "run",
]

#: ``trainer(gravities (n_agents,), run_dir, rng) -> None`` writes a run directory.
Trainer = Callable[[np.ndarray, Path, np.random.Generator], None]
#: ``scorer(run_dir, agents (m,)) -> scores (m,)``; higher means "more likely a canary".
Scorer = Callable[[Path, np.ndarray], np.ndarray]

#: Fractions of the canaries guessed "in" (top scores) and "out" (bottom scores) that the one-run
#: bound tries; fixed in advance, with a Bonferroni split of beta over them. At delta = 0 the
#: bound of :func:`ldp_audit.attacks.one_run_steinke.audit_scores` is Steinke, Nasr & Jagielski
#: (2023, Thm. 3.1): ``V`` correct of ``r`` guesses give ``eps >= logit(CP_lower(V, r, beta /
#: len(fractions)))``.
GUESS_FRACTIONS: tuple[float, ...] = (0.02, 0.05, 0.1, 0.2, 0.5)


def membership_metrics(
    scores: np.ndarray,
    included: np.ndarray,
    *,
    fprs: Sequence[float] = (0.01, 0.001),
) -> dict[str, Any]:
    """AUC, TPR at fixed FPRs, and advantage ``max_t TPR(t) - FPR(t)`` of membership scores."""
    from sklearn.metrics import roc_auc_score, roc_curve

    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    inc = np.asarray(included, dtype=bool).reshape(-1)
    if inc.all() or not inc.any():
        raise InvalidParameterError("included must hold both members and non-members")
    fpr, tpr, _ = roc_curve(inc, s)
    out: dict[str, Any] = {
        "auc": float(roc_auc_score(inc, s)),
        "advantage": float(np.max(tpr - fpr)),
        "tpr_at_fpr": {},
    }
    for target in fprs:
        ok = fpr <= target
        out["tpr_at_fpr"][f"{target:g}"] = float(tpr[ok].max()) if ok.any() else 0.0
    return out


# ------------------------------------------------------------------------------------------------
# Built-in trainer and scorer
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FixedThetaTrainer:
    """One round of PGC at a fixed broadcast theta: every agent submits ``T`` noisy gradients.

    The simplest trainer that writes a run directory (docs/interfaces.md); used by the tests, the
    sweep and as the reference for adapters. Each agent runs ``reports_per_agent`` episodes at
    ``theta`` in its own environment (gravity from ``gravities``) and submits
    ``mechanism.privatize(gradient)`` for each; the final model is ``theta`` (nothing is learned,
    so membership can leak only through the transcript).

    Args:
        theta: broadcast parameters (d,).
        mechanism: the agents' mechanism (``None`` or ``NoPrivacy()``: non-private).
        reports_per_agent: reports ``T`` per agent.
        simulator: ``episode_gradients``-compatible (default the public PGC-A3C one).
        alpha: exploration probability.
    """

    theta: np.ndarray
    mechanism: Any = None
    reports_per_agent: int = 1
    simulator: Simulator | None = None
    alpha: float = 0.0

    def __call__(self, gravities: np.ndarray, run_dir: Path, rng: np.random.Generator) -> None:
        rng = check_rng(rng)
        g = np.asarray(gravities, dtype=np.float64).reshape(-1)
        T = check_count(self.reports_per_agent, "reports_per_agent")
        theta = np.asarray(self.theta, dtype=np.float64).reshape(-1)
        agent = np.repeat(np.arange(g.size), T)
        grads = simulate_shadow(theta, g[agent], rng, simulator=self.simulator, alpha=self.alpha)
        n = agent.size
        # the run-directory contract: a new folder, every report charged to the run's ledger
        # (agent id "0/<agent>") before it is randomised (ldp_audit.release)
        from ldp_audit.accountant import Accountant
        from ldp_audit.mechanisms import NoPrivacy
        from ldp_audit.release import release
        from ldp_audit.rundir import RunWriter

        mech = NoPrivacy() if self.mechanism is None else self.mechanism  # what the run records
        config = {"reports_per_agent": T, "alpha": self.alpha, "n_agents": int(g.size)}
        w = RunWriter(
            Path(run_dir),
            algorithm="fixed-theta",
            config=config,
            seed=0,
            mechanism=mechanism_config(mech),
        )
        try:
            rel = release(
                grads,
                mechanism=mech,
                accountant=Accountant(ledger=w.open_ledger()),
                agent_ids=[f"0/{int(a)}" for a in agent],
                rng=rng,
            )
            transcript = {
                "trial": np.zeros(n, dtype=np.int64),
                "agent": agent.astype(np.int64),
                "submission": np.arange(n, dtype=np.int64),
                "theta_index": np.zeros(n, dtype=np.int64),
                "score": np.full(n, np.nan),
                "thetas": theta[None, :],
                "report": np.asarray(rel.values, float),
            }
            w.write_npz("transcript.npz", transcript)
            w.write_npz("secrets.npz", {"gravity": g[agent], "gradient": grads})
            w.write_npz("model.npz", {"theta": theta[None, :]})
            w.write_json("metrics.json", {})
        except BaseException:
            w.finish(status="interrupted")
            raise
        w.finish()


@dataclass(frozen=True)
class PgcA3cTrainer:
    """PGC-A3C training (``ldp_audit.training.pgc_a3c.train``) as a membership :data:`Trainer`.

    Agent ``a`` of the single trial (agents numbered in arrival order) gets ``gravities[a]``
    through ``PgcA3cConfig.agent_gravities``, so canaries are planted in real asynchronous training
    and their reports are computed at whatever theta the aggregator broadcast when their episode
    started. The run stops after ``len(gravities) * rounds`` submissions; a canary whose episode is
    still running then never submits (the scorer gives it the lowest score).

    Args:
        config: a ``PgcA3cConfig``; ``trials``, ``agent_gravities`` and ``max_submissions`` are set
            per call. Pass ``scorer=TranscriptScorer(mechanism=config.make_mechanism())`` and
            ``mechanism=config.make_mechanism()`` to :func:`run`.
    """

    config: Any

    def __call__(self, gravities: np.ndarray, run_dir: Path, rng: np.random.Generator) -> None:
        import dataclasses

        from ldp_audit.training.pgc_a3c.grid import train

        rng = check_rng(rng)
        g = tuple(float(x) for x in np.asarray(gravities, dtype=np.float64).reshape(-1))
        cfg = dataclasses.replace(
            self.config,
            trials=1,
            agent_gravities=g,
            max_submissions=len(g) * int(self.config.rounds),
        )
        train(cfg, seed=int(rng.integers(2**62)), run_dir=run_dir, progress=False)


@dataclass(frozen=True)
class TranscriptScorer:
    """Score canary slots by the shadow-gradient log-likelihood ratio of their reports.

    For each canary slot, ``score = log p(reports | canary gravity) - log mean_b p(reports | b)``
    over the ordinary gravities ``b`` (uniform mixture), computed by
    :func:`ldp_audit.attacks.dynamics_run_dir.attack_run_dir` with the candidates ``background +
    (canary,)``. Reads
    ``transcript.npz`` and ``config.json`` only.
    """

    canary_gravity: float = 12.0
    background: tuple[float, ...] = GRAVITIES
    n_shadow: int = 400
    method: str = "auto"
    mechanism: Any = None
    simulator: Simulator | None = None
    alpha: float | str = "schedule"
    seed: int | None = 0

    def __call__(self, run_dir: Path, agents: np.ndarray) -> np.ndarray:
        cands = tuple(sorted({*self.background, float(self.canary_gravity)}))
        same = ("mechanism", "n_shadow", "method", "simulator", "alpha", "seed")
        kw = {k: getattr(self, k) for k in same}
        pred = attack_run_dir(run_dir, max_groups=None, candidates=cands, **kw)
        post = np.clip(pred["posterior"], 1e-300, 1.0)
        ci = cands.index(float(self.canary_gravity))
        # log posterior odds canary vs. the ordinary mixture (uniform prior cancels up to a const)
        others = np.delete(post, ci, axis=1).sum(axis=1)
        llr = np.log(post[:, ci]) - np.log(np.clip(others, 1e-300, None))
        agent_ids = pred["groups"][:, 1]  # sorted (np.unique)
        agents = np.asarray(agents, dtype=np.int64).reshape(-1)
        hit, out = np.isin(agents, agent_ids), np.full(agents.size, -np.inf)  # -inf: no report
        out[hit] = llr[np.searchsorted(agent_ids, agents[hit])]
        if not np.isfinite(out).any():
            raise RunDirectoryError("no canary agent appears in the transcript")
        return np.where(np.isfinite(out), out, np.nanmin(out[np.isfinite(out)]) - 1.0)


def run(
    trainer: Trainer,
    *,
    run_dir: str | Path,
    mechanism: Any,
    n_agents: int = 400,
    n_canaries: int = 200,
    canary_gravity: float = 12.0,
    background: Sequence[float] = GRAVITIES,
    scorer: Scorer | None = None,
    seed: int | None = None,
    rng: np.random.Generator | None = None,
    confidence: float = 0.95,
    delta: float = 0.0,
) -> AttackResult:
    """One-run membership audit: draw canary bits, train once, score, bound epsilon.

    Agent slots ``0..n_canaries-1`` are canary slots: slot ``i`` gets ``canary_gravity`` if its
    secret bit is 1 (probability 1/2, independent), else an ordinary gravity; the other slots
    always get ordinary gravities (uniform over ``background``).

    Args:
        trainer: writes the run directory (see :data:`Trainer`).
        run_dir: where the trainer writes.
        mechanism: the mechanism the trainer uses (for the claimed epsilon and the ceiling).
        n_agents: agents in the run.
        n_canaries: canary slots (``<= n_agents``).
        canary_gravity: the unusual gravity of a canary.
        background: ordinary gravities.
        scorer: membership scorer (default :class:`TranscriptScorer`).
        seed, rng: randomness (canary bits, ordinary gravities, the trainer's stream).
        confidence: confidence of the intervals and the epsilon lower bound.
        delta: the claimed delta for the TPR ceiling (0 for pure LDP).

    Returns:
        :class:`AttackResult` (attack ``"membership"``): ``accuracy`` = correct / guesses of the
        one-run bound's best fraction, ``ceiling`` = ``e^{T eps} / (e^{T eps} + 1)``,
        ``epsilon_lower_bound`` the one-run bound, plus AUC, TPR at FPR 1% / 0.1%, advantage and
        the TPR ceilings in ``extra``.

    Raises:
        InvalidParameterError: before the trainer runs, for a bad argument or canary bits that
            all came out equal (probability ``2^(1 - n_canaries)``: nothing could be scored).
    """
    t0 = time.perf_counter()
    n_agents = check_count(n_agents, "n_agents", minimum=2)
    n_canaries = check_int(n_canaries, "n_canaries", minimum=2, maximum=n_agents)  # <= n_agents
    if isinstance(background, str) or not isinstance(background, Sequence) or not background:
        raise InvalidParameterError(f"background must be a non-empty list, got {background!r}")
    bg = np.array([check_positive(g, "background gravity") for g in background])
    canary_gravity = check_positive(canary_gravity, "canary_gravity")
    if np.any(np.isclose(bg, float(canary_gravity), rtol=0, atol=1e-9)):
        raise InvalidParameterError(
            f"canary_gravity must differ from every background gravity {sorted(set(bg))}, got "
            f"{canary_gravity!r} (a canary indistinguishable by design makes the audit "
            f"meaningless)"
        )
    check_probability(confidence, "confidence")
    check_probability(delta, "delta", open_interval=False)
    rng = check_rng(rng) if rng is not None else np.random.default_rng(seed)
    bits_rng, grav_rng, train_rng = rng.spawn(3)
    # --- secrets (scoring only): canary bits and every agent's gravity ---
    included = bits_rng.random(n_canaries) < 0.5
    if included.all() or not included.any():  # refused before training: nothing to score
        raise InvalidParameterError(
            f"the {n_canaries} canary bits all came out {bool(included[0])} (probability "
            f"2^(1-{n_canaries})): no membership can be scored; use more canaries or another seed"
        )
    gravities = grav_rng.choice(bg, size=n_agents)
    gravities[:n_canaries][included] = float(canary_gravity)
    run_dir = Path(run_dir)
    trainer(gravities, run_dir, train_rng)

    # --- the attacker: sees the run directory (not secrets.npz) and the canary slots ---
    agents = np.arange(n_canaries)
    scorer = scorer if scorer is not None else TranscriptScorer(canary_gravity=canary_gravity)
    scores = np.asarray(scorer(run_dir, agents), dtype=np.float64)

    # --- scoring only ---
    from ldp_audit.rundir import RunDir

    agent = RunDir(run_dir).arrays("transcript.npz", "agent")["agent"]
    T = int(np.bincount(agent.astype(np.int64), minlength=n_canaries)[agents].max())
    eps = mechanism_epsilon(mechanism)
    one = audit_scores(
        scores, included, delta=0.0, confidence=confidence, fractions=GUESS_FRACTIONS
    )
    met = membership_metrics(scores, included)
    ceilings = {
        k: membership_tpr_ceiling(composed_epsilon(eps, T), float(k), delta)
        for k in met["tpr_at_fpr"]
    }
    return one_run_result(
        attack="membership",
        mechanism=mechanism_config(mechanism),
        epsilon=eps,
        canaries=int(n_canaries),
        one=one,
        membership=met,
        confidence=confidence,
        seconds=time.perf_counter() - t0,
        reports_per_agent=T,
        result_class=AttackResult,
        extra={
            "tpr_ceiling_at_fpr": ceilings,
            "guesses": one["guesses"],
            "guess_fraction": one["fraction"],
            "n_agents": int(n_agents),
            "members": int(included.sum()),
            "canary_gravity": float(canary_gravity),
            "delta": delta,
            "note": "TPR at FPR 0.001 needs >= 1000 non-members to be informative",
        },
    )
