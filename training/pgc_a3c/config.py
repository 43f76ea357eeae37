"""The PGC-A3C run's config (:class:`PgcA3cConfig`, the paper's defaults of section 4 "Hyper
Parameters", every field validated) and what :func:`ldp_audit.training.pgc_a3c.train` returns
(:class:`TrainResult`).

The hyper-parameters and validation it shares with the Gymnasium trainer
(:class:`ldp_audit.training.pgc_a3c_gym.config.GymPgcConfig`) live here once: the option
tuples, the paper's per-mechanism clip and buffer defaults, and the checks of the fields both have.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from ldp_audit.config import bounds, config_from_dict, config_to_dict
from ldp_audit.errors import InvalidParameterError
from ldp_audit.training.cartpole import PAPER_GRAVITIES
from ldp_audit.training.pgc_a3c.model import DIM
from ldp_audit.training.reproduction import check_fields
from ldp_audit.validation import check_int

#: The largest gravity the CartPole engine takes. Its observations are float32, as Gymnasium's,
#: and one step gives the pole an angular velocity of about 0.0016 g, which overflows float32
#: near g = 2e41: the observation becomes inf and the report NaN (2026-12-07: 1e100 stopped a
#: run mid-way, exit 2 "values must be finite; found nan", where 1e39 trained).
GRAVITY_MAX = 1e30

__all__ = ["ADAPTIVE_DEFAULT_LR", "PgcA3cConfig", "TrainResult"]

_MECHANISMS = ("laplace", "prs", "none")
ACTING = ("argmax", "sample")
_CLIP_KINDS = ("l1", "coordinate")
AGGREGATORS = ("sgd", "adam", "rmsprop")
TARGETS = ("engine", "literal-eq18")
#: Step size of the adaptive aggregators when ``aggregator_lr`` is None: 1e-3, the published
#: default of Adam (Kingma & Ba 2015) and TensorFlow's for Adam and RMSprop (not tuned here).
ADAPTIVE_DEFAULT_LR = 1e-3
_PAPER_CLIP: dict[str, float] = {"laplace": 0.01, "prs": 1.0, "none": 10.0}
_PAPER_BUFFER = {"laplace": 1, "prs": 100, "none": 1}


@dataclass(frozen=True, kw_only=True)
class SharedFields:
    """What PGC-A3C's configs share (:class:`PgcA3cConfig` and the Gymnasium trainer's
    :class:`ldp_audit.training.pgc_a3c_gym.config.GymPgcConfig`): the first fields (the
    mechanism and the scale of the run, PgcA3cConfig's defaults), the checks of the fields
    both have (same bounds, same messages), the paper's per-mechanism defaults, the per-report
    mechanism and the JSON form of epsilon. The configs call the checks from ``__post_init__``."""

    mechanism: str = field(default="laplace", metadata=bounds(choices=_MECHANISMS, required=True))
    """Agent-side randomiser Q: "laplace" (Alg. 2), "prs" (Alg. 3) or "none" (eps = inf)."""
    epsilon: float = field(default=1.0, metadata=bounds(minimum=0, open_min=True, inf=True))
    """Total LDP budget of one agent (over its ``rounds`` submissions); forced to inf for none."""
    trials: int = field(default=20, metadata=bounds(minimum=1))
    """Independent training runs K (Table 1 uses 20)."""
    n_agents: int = field(default=9, metadata=bounds(minimum=1))
    """Concurrent workers per trial (the paper's 9 threads)."""
    max_submissions: int = field(default=90_000, metadata=bounds(minimum=1))
    """Submissions per trial before training stops (the paper's N = 90,000)."""
    rounds: int = field(default=1, metadata=bounds(minimum=1))
    """Submissions per agent T; each at epsilon/T (section 3.2.1). 1 = the paper's main setting."""
    clip: float | None = field(default=None, metadata=bounds(minimum=0, open_min=True))
    """C: L1 sensitivity for Laplace (eq. 19-20), element clip for PRS (eq. 23); finite, > 0
    (``train pgc-a3c`` also refuses a C whose noisy steps could overflow theta). None = paper
    default (0.01 Laplace, 1 PRS, 10 for the non-private baseline)."""
    buffer_size: int | None = field(default=None, metadata=bounds(minimum=1))
    """MAX_BUF |B| of Algorithm 1. None = paper default (1 Laplace and none, 100 PRS)."""

    # ------------------------------------------------------------------------------ checks
    def _check_shared(self) -> None:
        """Every field's type and bounds (:func:`check_fields`; a field the Gymnasium config
        declares without bounds has ``PgcA3cConfig``'s): ``epsilon`` > 0, inf only for
        "none" (forced there); integers at most ``INT_MAX``; epsilon, clip, budget and
        aggregator_lr stored as floats."""
        none = self.mechanism == "none"
        if none:
            object.__setattr__(self, "epsilon", math.inf)
        own = {f.name: f.metadata for f in fields(PgcA3cConfig)}
        given = {f.name: own[f.name] for f in fields(self) if f.name in own and not f.metadata}
        finite = {} if none else {"epsilon": bounds(minimum=0, open_min=True)}  # inf: "none" only
        check_fields(self, **(given | finite))
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in ("epsilon", "clip", "budget", "aggregator_lr") and v is not None:
                object.__setattr__(self, f.name, float(v))
            elif isinstance(v, int) and not isinstance(v, bool):
                check_int(v, f.name)  # <= INT_MAX: numpy's int64

    # ------------------------------------------------------------------------------ derived
    @property
    def effective_clip(self) -> float:
        """C actually used (paper default when ``clip`` is None)."""
        return _PAPER_CLIP[self.mechanism] if self.clip is None else float(self.clip)

    @property
    def effective_buffer_size(self) -> int:
        """|B| actually used (paper default when ``buffer_size`` is None)."""
        return _PAPER_BUFFER[self.mechanism] if self.buffer_size is None else self.buffer_size

    @property
    def epsilon_per_submission(self) -> float:
        """epsilon / T (sequential composition, section 3.2.1): the per-report epsilon the
        config *claims*. With ``PgcA3cConfig(clip_kind="coordinate")`` the true one is
        ``true_epsilon_per_submission`` (d times larger)."""
        return self.epsilon / self.rounds

    def make_mechanism(self) -> Any:
        """The per-report mechanism of :mod:`ldp_audit.mechanisms`: Laplace (Alg. 2), PRS
        (Alg. 3, with ``reduced_dim`` where the config has one) or none."""
        from ldp_audit import mechanisms as M

        if self.mechanism == "laplace":
            return M.Laplace(epsilon=self.epsilon_per_submission, clip=self.effective_clip)
        if self.mechanism == "prs":
            return M.ProjectedRandomSign(
                epsilon=self.epsilon_per_submission,
                clip=self.effective_clip,
                reduced_dim=getattr(self, "reduced_dim", None),
            )
        return M.NoPrivacy()

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict (inf epsilon as the string "inf", tuples as lists)."""
        d = config_to_dict(self)
        return d | {"epsilon": "inf"} if math.isinf(d["epsilon"]) else d


@dataclass(frozen=True, kw_only=True)
class PgcA3cConfig(SharedFields):
    """Everything that defines a PGC-A3C run (paper defaults, section 4 "Hyper Parameters")."""

    reduced_dim: int | None = field(default=None, metadata=bounds(minimum=1, maximum=DIM))
    """PRS d_hat, in [1, d] (d = 112; PRS only); None = max{1, min{d, floor(eps/2.5)}} at the
    per-submission epsilon."""
    eta: float = field(
        default=0.5,
        metadata=bounds(minimum=0, open_min=True, maximum=1000),
    )
    """Learning rate of eq. 22 (the aggregator's SGD step on mean(B)), in (0, 1000]: 2000 x the
    paper's 0.5. A step moves theta by eta x a report of L1 norm up to C/2 (5 for the
    non-private baseline), so beyond 1000 a single step can shift a logit by thousands, past
    the ~745 where the float64 softmax is exactly 0 or 1 and its gradient vanishes (unclipped
    SGD diverges already at 0.5, README)."""
    gamma: float = field(default=0.99, metadata=bounds(minimum=0, open_min=True, maximum=1))
    """Discount factor of eqs. 12 and 18, in (0, 1]: a discount (above 1 the 200-step return
    grows geometrically; 0 drops the bootstrap of eq. 12)."""
    lam: float = field(
        default=0.5,
        metadata=bounds(minimum=0, open_min=True, maximum=1000),
    )
    """Value-loss weight lambda of eq. 15, in (0, 1000]: a weight relative to the policy loss
    (weight 1; the paper's 0.5); at 1000 the objective is a value regression with the policy
    term a 0.1 % correction, so a larger weight only scales the gradient towards overflow."""
    beta: float = field(default=0.01, metadata=bounds(minimum=0, maximum=1000))
    """Entropy weight beta of eq. 16, in [0, 1000] (0: no entropy bonus): a weight relative to
    the policy loss (weight 1; the paper's 0.01), bounded for the reason of ``lam``."""
    gravities: tuple[float, ...] = field(
        default=PAPER_GRAVITIES, metadata=bounds(minimum=sys.float_info.min, maximum=GRAVITY_MAX)
    )
    """The private gravity psi of an agent is drawn uniformly from these (at most
    :data:`GRAVITY_MAX`)."""
    agent_gravities: tuple[float, ...] | None = field(
        default=None, metadata=bounds(minimum=sys.float_info.min, maximum=GRAVITY_MAX)
    )
    """Optional fixed gravity of agent a (agents numbered in arrival order within each trial),
    e.g. to plant canaries for membership inference; agents beyond its length draw from
    ``gravities``. The reset stream is consumed the same way either way."""
    episode_steps: int = field(default=200, metadata=bounds(minimum=1))
    """Episodes are cut after this many steps (score max 200)."""
    alpha_start: float = field(default=0.5, metadata=bounds(minimum=0, maximum=1))
    """Exploration at the first submission, alpha = max{0, alpha_start - n / alpha_decay}
    (section 4): the probability of a uniformly random action, so in [0, 1]."""
    alpha_decay: float = field(
        default=1800.0,
        metadata=bounds(minimum=0, open_min=True, maximum=10**12),
    )
    """Submissions over which alpha falls by 1 (see ``alpha_start``), in (0, 1e12]: a run has
    at most 10^7 submissions (the command line's cap), so at 1e12 alpha moves by less than
    1e-5 over any run, i.e. is constant; a larger value changes nothing."""
    acting: str = field(default="argmax", metadata=bounds(choices=ACTING))
    """The non-exploring action (probability 1 - alpha): "argmax" pi (Algorithm 1 and section 4
    as printed) or "sample" a ~ pi(.|s) (what the public A3C example the paper's hyper-parameters
    match does; an ablation, see README)."""
    stop_at_target: bool = False
    """Stop a trial once mu_n >= target_score is certain (FST known, eq. 26); later zeta are NaN."""
    target_score: float = field(default=195.0, metadata=bounds())
    """Theta of eq. 26 (finite; the paper's 195 of CartPole's at most 200 per episode)."""
    window: int = field(default=10, metadata=bounds(minimum=1))
    """m of eq. 25: the scores averaged into mu_n."""
    budget: float | None = field(default=None, metadata=bounds(minimum=0, open_min=True))
    """Optional per-agent epsilon budget enforced by the accountant (None = no budget)."""
    clip_kind: str = field(default="l1", metadata=bounds(choices=_CLIP_KINDS))
    """How a report is clipped before the Laplace noise: "l1" (eq. 19 as printed, L1 norm C/2,
    sensitivity C, epsilon-LDP) or "coordinate" (an ablation, a reading of the paper that is NOT
    its claim: each coordinate clipped to [-C/2, C/2], so the L1 sensitivity is d C and the same
    noise Lap(C/epsilon) gives d * epsilon = 112 epsilon per report; that true epsilon is what
    the ledger is charged and every report shows, and a :class:`PrivacyClaimWarning` is
    issued). Laplace and the non-private baseline only."""
    aggregator: str = field(default="sgd", metadata=bounds(choices=AGGREGATORS))
    """The aggregator's step on mean(B): "sgd" (eq. 22 as printed), "adam" or "rmsprop" (an
    ablation; post-processing of released reports, no privacy cost)."""
    aggregator_lr: float | None = field(default=None, metadata=bounds(minimum=0, open_min=True))
    """Step size of the aggregator: None = ``eta`` for "sgd", ``ADAPTIVE_DEFAULT_LR`` (1e-3)
    for "adam" and "rmsprop"."""
    target: str = field(default="engine", metadata=bounds(choices=TARGETS))
    """The value target: "engine" (eq. 18 with the bootstrap discounted as in eq. 12 and
    V(s_T) = 0 after a failure) or "literal-eq18" (eq. 18 as printed: + V(s_T), undiscounted,
    also after a failure; an ablation that shows why the engine deviates)."""

    def __post_init__(self) -> None:
        for key in ("gravities", "agent_gravities"):  # a list from JSON, an array: a tuple
            if isinstance(getattr(self, key), (list, np.ndarray)):
                object.__setattr__(self, key, tuple(getattr(self, key)))
        self._check_shared()
        if self.clip_kind == "coordinate" and self.mechanism == "prs":
            raise InvalidParameterError(
                "clip_kind='coordinate' applies to mechanism 'laplace' or 'none' (PRS clips its "
                f"projected coordinates itself, eq. 23), got mechanism={self.mechanism!r}"
            )
        if self.reduced_dim is not None and self.mechanism != "prs":
            raise InvalidParameterError(
                f"reduced_dim applies to mechanism='prs' only, got mechanism={self.mechanism!r}"
            )
        for key in ("gravities", "agent_gravities"):
            if getattr(self, key) is not None:
                object.__setattr__(self, key, tuple(map(float, getattr(self, key))))

    # ------------------------------------------------------------------------------ derived
    @property
    def effective_aggregator_lr(self) -> float:
        """The aggregator's step size actually used (see ``aggregator_lr``)."""
        if self.aggregator_lr is not None:
            return float(self.aggregator_lr)
        return float(self.eta) if self.aggregator == "sgd" else ADAPTIVE_DEFAULT_LR

    @property
    def true_epsilon_per_submission(self) -> float:
        """The epsilon one report actually satisfies (what the ledger is charged): equal to
        :attr:`epsilon_per_submission` except with Laplace and ``clip_kind="coordinate"``,
        where it is d C / (C / epsilon) = 112 epsilon_per_submission."""
        if self.mechanism == "laplace" and self.clip_kind == "coordinate":
            return self.make_mechanism().epsilon
        return self.epsilon_per_submission

    def make_mechanism(self) -> Any:
        """The per-submission mechanism object of :mod:`ldp_audit.mechanisms` (or, for the
        coordinate-clipping ablation, :class:`CoordinateLaplace` with its true epsilon)."""
        from ldp_audit.training.pgc_a3c.privacy import CoordinateLaplace

        if self.mechanism == "laplace" and self.clip_kind == "coordinate":
            return CoordinateLaplace(
                coordinate_epsilon=self.epsilon_per_submission, clip=self.effective_clip, dim=DIM
            )
        return super().make_mechanism()

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PgcA3cConfig:
        """Inverse of :meth:`to_dict` (:func:`ldp_audit.config.config_from_dict`)."""
        return config_from_dict(cls, d, epsilon=math.inf)


@dataclass
class TrainResult:
    """What :func:`train` returns.

    Attributes:
        config: the run's config (a ``GymPgcConfig`` for the Gymnasium trainer, which returns
            this class too).
        seed: the seed it ran from.
        zeta: (trials, max_submissions) episode score of submission n (0-based column n is the
            paper's zeta_{n+1}); NaN where the trial stopped before that submission.
        theta: (trials, 112) final global parameters.
        submissions: (trials,) submissions made.
        privacy: per-agent privacy summary (epsilon per submission, rounds, total, agents, ...).
        env_steps: total environment steps taken (all trials).
        seconds: wall-clock seconds of the run.
        stopped_at_target: (trials,) True where ``stop_at_target`` ended the trial early (None
            for the Gymnasium trainer, which has no ``stop_at_target``).
        transcript: what crossed the trust boundary (None unless recorded), see run_dir.py.
        secrets: the matching ground truth (gravity, clean gradient), None unless recorded.
    """

    config: Any
    seed: int
    zeta: np.ndarray
    theta: np.ndarray
    submissions: np.ndarray
    privacy: dict[str, Any]
    env_steps: int
    seconds: float
    stopped_at_target: np.ndarray | None = None
    transcript: dict[str, np.ndarray] | None = None
    secrets: dict[str, np.ndarray] | None = field(default=None, repr=False)
