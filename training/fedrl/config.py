"""The configuration of a FedRL run (:class:`FedRLConfig`, validated on construction) and the
methods it trains (:data:`METHODS`, the rows of Table 1 :data:`TABLE_ROWS`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from ldp_audit.errors import InvalidParameterError
from ldp_audit.training.fedrl.mechanisms import (
    OutputMechanism,
    TargetMechanism,
    _check_bound,
    _check_sigma,
    _is_int,
    _is_real,
)
from ldp_audit.training.gridworld import (
    N_ACTIONS,
    check_density,
    check_hist_len,
    check_meeting_rule,
    check_size,
)

#: Methods trained by :func:`train_fedrl` (FedRL yields both FedRL-1 and FedRL-2 at test time).
METHODS = ("dqn-alpha", "dqn-full", "fedrl")
#: Rows of Table 1.
TABLE_ROWS = ("DQN-alpha", "FedRL-1", "FedRL-2", "DQN-full")


# ----------------------------------------------------------------------------------------------
# Configuration
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FedRLConfig:
    """Everything a FedRL training run needs (validated on construction).

    Attributes:
        size: map size N (8, 16, 32; other sizes need ``t_max``).
        t_max: episode limit (default: the paper's 38 / 86 / 178).
        density: obstacle probability per cell, in [0, 1).
        n_maps: maps generated (paper: 8000; split 80 / 10 / 10 %).
        map_seed: seed of the maps.
        hist_len: observation history length H (Figure 4).
        sigma: noise standard deviation on every exchanged Q output (paper: 1).
        clip_outputs: B: clip exchanged Q outputs to [-B, B] (None: unbounded, as in the paper).
        target_sigma: noise on the released targets Y (0: unprotected, as in the paper).
        clip_targets: B_Y: clip Y to [-B_Y, B_Y] before its noise (needed for a finite epsilon).
        delta: the delta at which epsilons are reported.
        gamma: discount (public code: 0.9).
        lr: Adam learning rate (paper: 0.001).
        batch_size: replay minibatch.
        n_envs: maps played at once (the batched environment).
        train_steps: training iterations (each: one step of every env, one minibatch update).
        replay_size: replay memory (transitions).
        learning_starts: transitions stored before the first update.
        eps_start, eps_end, eps_decay: epsilon-greedy exploration, decayed linearly over
            ``eps_decay`` iterations.
        target_update: iterations between target-network updates.
        eval_maps: test maps evaluated at the end (greedy; <= the test split).
        methods: which of ``dqn-alpha``, ``dqn-full``, ``fedrl`` to train.
        runs: independent runs (seeds) per method.
        prepay_block: iterations charged per ledger transaction.
        device: torch device of the networks, ``"cpu"``, ``"cuda"`` or ``"auto"``
            (:mod:`ldp_audit.training.device`); every random draw stays on the CPU, so on the
            CPU a run is bit for bit the same as before the option existed.
        meeting_rule: the agents' distance for meeting, the +50, the shaping term and the
            test-time success check: ``"manhattan"`` (|dx| + |dy|, the paper's text; default,
            results unchanged) or ``"public-code"`` (|dx + dy|, what the authors' code
            computes; see :mod:`ldp_audit.training.gridworld`).
    """

    size: int = 8
    t_max: int | None = None
    density: float = 0.2
    n_maps: int = 8000
    map_seed: int = 0
    hist_len: int = 4
    sigma: float = 1.0
    clip_outputs: float | None = None
    target_sigma: float = 0.0
    clip_targets: float | None = None
    delta: float = 1e-5
    gamma: float = 0.9
    lr: float = 1e-3
    batch_size: int = 32
    n_envs: int = 16
    train_steps: int = 2000
    replay_size: int = 50_000
    learning_starts: int = 256
    eps_start: float = 1.0
    eps_end: float = 0.1
    eps_decay: int = 1000
    target_update: int = 100
    eval_maps: int = 800
    methods: tuple[str, ...] = METHODS
    runs: int = 1
    prepay_block: int = 50
    device: str = "cpu"
    meeting_rule: str = "manhattan"

    def __post_init__(self) -> None:
        from ldp_audit.training.device import check_device

        check_device(self.device)
        check_meeting_rule(self.meeting_rule)
        _, t = check_size(self.size, self.t_max)
        check_density(self.density)
        check_hist_len(self.hist_len)
        _check_sigma(self.sigma, "sigma")
        _check_bound(self.clip_outputs, "clip_outputs")
        _check_sigma(self.target_sigma, "target_sigma")
        _check_bound(self.clip_targets, "clip_targets")
        for name, lo in (
            ("n_maps", 10),
            ("map_seed", 0),
            ("batch_size", 1),
            ("n_envs", 1),
            ("train_steps", 1),
            ("replay_size", 1),
            ("learning_starts", 1),
            ("eps_decay", 1),
            ("target_update", 1),
            ("eval_maps", 1),
            ("runs", 1),
            ("prepay_block", 1),
        ):
            v = getattr(self, name)
            if not _is_int(v) or v < lo:
                raise InvalidParameterError(f"{name} must be an integer >= {lo}, got {v!r}")
        for name in ("gamma", "eps_start", "eps_end"):
            v = getattr(self, name)
            if not _is_real(v) or not 0.0 <= float(v) <= 1.0:
                raise InvalidParameterError(f"{name} must be a real number in [0, 1], got {v!r}")
        if not _is_real(self.lr) or not 0 < float(self.lr) < math.inf:
            raise InvalidParameterError(f"lr must be a real number > 0, got {self.lr!r}")
        if not _is_real(self.delta) or not 0 < float(self.delta) < 1:
            raise InvalidParameterError(f"delta must be in (0, 1), got {self.delta!r}")
        if not isinstance(self.methods, (tuple, list)) or not self.methods:
            raise InvalidParameterError(
                f"methods must be a non-empty sequence of {METHODS}, got {self.methods!r}"
            )
        object.__setattr__(self, "methods", tuple(self.methods))
        for m in self.methods:
            if m not in METHODS:
                raise InvalidParameterError(f"methods must be among {METHODS}, got {m!r}")
        if len(set(self.methods)) != len(self.methods):
            raise InvalidParameterError(f"methods must not repeat, got {self.methods!r}")
        n_test = self.n_maps - int(round(0.8 * self.n_maps)) - int(round(0.1 * self.n_maps))
        if self.eval_maps > n_test:
            raise InvalidParameterError(
                f"eval_maps must be <= the {n_test} test maps of n_maps={self.n_maps}, "
                f"got {self.eval_maps}"
            )
        _ = t

    @property
    def episode_limit(self) -> int:
        return check_size(self.size, self.t_max)[1]

    def output_mechanism(self) -> OutputMechanism:
        return OutputMechanism(self.sigma, self.clip_outputs, N_ACTIONS, self.delta)

    def target_mechanism(self) -> OutputMechanism:
        return TargetMechanism(self.target_sigma, self.clip_targets, self.delta)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["methods"] = list(self.methods)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FedRLConfig:
        d = dict(d)
        if "methods" in d:
            d["methods"] = tuple(d["methods"])
        try:
            return cls(**d)
        except TypeError as exc:
            raise InvalidParameterError(f"invalid FedRL config: {exc}") from None
