"""Observation-noise "LDP" for CartPole (Doulazmi & Odonnat slides 25-28).

The agent never sees the true state: every observation is replaced by
``s + N(0, (sigma * IQR_i)^2)`` per state component ``i``, where ``IQR_i`` is the interquartile
range of component ``i`` (the slides' calibration, "Noise N(0_4, sigma x IQR)"). The IQRs are
measured once (:func:`measure_iqr`, random policy, seed 0, 20,000 steps) and stored in
:data:`CARTPOLE_IQR`; every run writes the IQR it used into its config.

What this guarantees, said plainly:

* on **raw** states the noise has **no finite epsilon**: CartPole's velocities are unbounded, so
  two states can be arbitrarily far apart and no Gaussian noise hides the difference
  (``epsilon = inf``; the tool prints it in words);
* with states **clipped to a declared box** ``[lo_i, hi_i]`` before the noise, one observation is
  a Gaussian mechanism: in the coordinates ``s_i / IQR_i`` the noise std is ``sigma`` and the L2
  sensitivity (replace one state by any other in the box) is the box diagonal
  ``D = sqrt(sum_i ((hi_i - lo_i) / IQR_i)^2)``, so one observation is charged
  ``GaussianEvent(sigma / D)`` and an episode's ``H`` observations compose
  (``SelfComposedEvent``-like, one ledger row per observation);
* the reward and the termination signal are not noised (as in the slides), so an episode's length
  is public: the guarantee covers the states only.

:class:`ObservationNoiseMechanism` is also a ``Mechanism`` the auditor accepts (``epsilon``,
``delta``, ``privatize(x, rng)``, ``to_config()``); :class:`ObservationNoise` is the Gymnasium
``ObservationWrapper`` for a single environment.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from ldp_audit.errors import InvalidParameterError
from ldp_audit.mechanisms.base import check_no_overflow
from ldp_audit.validation import check_batch, check_real_in, check_rng

#: the largest noise multiplier, the trainer's bound (``config.MAX_SCALE``, equal; config
#: imports this module, so the number is written here, and tests/test_dprl_obs.py checks it)
MAX_SCALE = 1e6

__all__ = [
    "CARTPOLE_IQR",
    "CARTPOLE_BOX",
    "ObservationNoiseMechanism",
    "ObservationNoise",
    "measure_iqr",
    "check_box",
]

#: IQR of each CartPole state component (x, x_dot, theta, theta_dot) under a uniformly random
#: policy: ``measure_iqr(seed=0, steps=20_000)`` (checked equal in tests/test_dprl_obs.py).
CARTPOLE_IQR: tuple[float, float, float, float] = (
    0.08346910402178764,
    0.7027862891554832,
    0.1055775498971343,
    1.0052652582526207,
)

#: A declared state box for the clipped variant: the termination limits for x and theta
#: (|x| <= 2.4, |theta| <= 12 degrees) and +-3 (x_dot), +-3.5 (theta_dot) for the velocities.
CARTPOLE_BOX: tuple[tuple[float, float], ...] = (
    (-2.4, 2.4),
    (-3.0, 3.0),
    (-0.2095, 0.2095),
    (-3.5, 3.5),
)


def measure_iqr(*, seed: int = 0, steps: int = 20_000) -> np.ndarray:
    """IQR of each state component over ``steps`` states of a uniformly random policy.

    Args:
        seed: seeds the environment and the random actions.
        steps: number of states measured.

    Returns:
        (4,) float64 array of ``q75 - q25`` per component.
    """
    rng = np.random.default_rng(seed)
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=seed)
    states = np.empty((steps, 4))
    for t in range(steps):
        states[t] = obs
        obs, _, term, trunc, _ = env.step(int(rng.integers(2)))
        if term or trunc:
            obs, _ = env.reset()
    env.close()
    q75, q25 = np.percentile(states, [75, 25], axis=0)
    return q75 - q25


def check_box(box: Any, iqr: np.ndarray, name: str = "state_box") -> np.ndarray | None:
    """Validate a declared state box ((lo, hi) per component): (d, 2) array, or None.

    Each component's interval must be finite with ``hi - lo >= IQR_i`` (a box narrower than the
    declared IQR would clip typical states: refused).
    """
    if box is None:
        return None
    try:
        b = np.asarray(box, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidParameterError(
            f"{name} must be (lo, hi) pairs of numbers, got {box!r}"
        ) from None
    if b.shape != (iqr.size, 2) or not np.isfinite(b).all():
        raise InvalidParameterError(
            f"{name} must be {iqr.size} finite (lo, hi) pairs, got {np.asarray(box).tolist()!r}"
        )
    width = b[:, 1] - b[:, 0]
    bad = np.flatnonzero(width < iqr)
    if bad.size:
        i = int(bad[0])
        raise InvalidParameterError(
            f"{name} must contain the declared IQRs (hi - lo >= IQR per component); component "
            f"{i} has [{b[i, 0]:g}, {b[i, 1]:g}] (width {width[i]:g}) < IQR {iqr[i]:g}, got "
            f"{b.tolist()!r}"
        )
    return b


@dataclass(frozen=True)
class ObservationNoiseMechanism:
    """``s -> clip_box(s) + N(0, diag(sigma * IQR)^2)``, one observation per row.

    Attributes:
        noise_multiplier: ``sigma`` (0 = no noise: epsilon inf).
        iqr: per-component IQR (default :data:`CARTPOLE_IQR`).
        box: declared state box ``((lo, hi), ...)``; None = raw states (epsilon inf).
        target_delta: the delta at which :attr:`epsilon` is reported.
    """

    noise_multiplier: float
    iqr: tuple[float, ...] = CARTPOLE_IQR
    box: tuple[tuple[float, float], ...] | None = None
    target_delta: float = 1e-5
    _iqr: np.ndarray = field(init=False, repr=False, compare=False)
    _box: np.ndarray | None = field(init=False, repr=False, compare=False)

    name = "observation-noise"

    def __post_init__(self) -> None:
        # the trainer's bound (its float32 networks stay finite; 1e308 was taken, outputs ~1e307)
        sigma = check_real_in(
            self.noise_multiplier, "noise_multiplier", lo=0.0, lo_open=False, hi=MAX_SCALE
        )
        object.__setattr__(self, "noise_multiplier", sigma)
        try:
            iqr = np.asarray(self.iqr, dtype=np.float64)
        except (TypeError, ValueError):  # was a raw ValueError ("could not convert string")
            iqr = np.empty(0)
        if iqr.ndim != 1 or iqr.size == 0 or not (np.isfinite(iqr).all() and (iqr > 0).all()):
            raise InvalidParameterError(f"iqr must be finite positive numbers, got {self.iqr!r}")
        check_real_in(self.target_delta, "delta", lo=0.0, lo_open=True, hi=1.0, hi_open=True)
        object.__setattr__(self, "_iqr", iqr)
        b = check_box(self.box, iqr)
        top = np.abs(b).max() if b is not None else 0.0  # a raw state is checked finite
        check_no_overflow(sigma * float(iqr.max()), float(top), "noise_multiplier x iqr")
        object.__setattr__(self, "_box", b)
        if b is not None:
            object.__setattr__(self, "box", tuple((float(lo), float(hi)) for lo, hi in b))
        object.__setattr__(self, "iqr", tuple(float(v) for v in iqr))

    @property
    def sensitivity(self) -> float:
        """L2 sensitivity in IQR units (the box diagonal), inf for raw states."""
        if self._box is None:
            return math.inf
        return float(np.sqrt((((self._box[:, 1] - self._box[:, 0]) / self._iqr) ** 2).sum()))

    @property
    def event_noise_multiplier(self) -> float:
        """Noise std / sensitivity of one observation (0 when there is no finite guarantee)."""
        s = self.sensitivity
        return 0.0 if math.isinf(s) or self.noise_multiplier == 0 else self.noise_multiplier / s

    def event(self) -> Any:
        """The ledger event of ONE observation."""
        from ldp_audit.accountant import GaussianEvent, NonPrivateEvent

        z = self.event_noise_multiplier
        return NonPrivateEvent() if z == 0 else GaussianEvent(z)

    @property
    def epsilon(self) -> float:
        """Epsilon of one observation at :attr:`delta` (analytic Gaussian); inf on raw states."""
        z = self.event_noise_multiplier
        if z == 0:
            return math.inf
        from ldp_audit.mechanisms import analytic_gaussian_epsilon

        return float(analytic_gaussian_epsilon(z, 1.0, self.target_delta))

    @property
    def delta(self) -> float:
        return float(self.target_delta)

    def describe(self) -> str:
        """The guarantee in words."""
        if self._box is None:
            return (
                "observation noise on raw (unbounded) states: epsilon = inf (no finite "
                "guarantee; declare a state box to get one)"
            )
        if self.noise_multiplier == 0:
            return "no observation noise: epsilon = inf"
        return (
            f"each observation clipped to the declared box then noised: (epsilon, delta) = "
            f"({self.epsilon:.4g}, {self.delta:g}) per observation, composed over an episode's "
            f"observations by the accountant"
        )

    def clip(self, x: np.ndarray) -> np.ndarray:
        """Project states onto the declared box (identity on raw states)."""
        if self._box is None:
            return x
        return np.clip(x, self._box[:, 0], self._box[:, 1])

    def privatize(self, x: Any, rng: np.random.Generator) -> np.ndarray:
        """Noisy observations: (n, d) float64, each row independent."""
        arr = check_batch(x, "x", dim=self._iqr.size)  # finite: a NaN or inf would leak through
        noise = check_rng(rng).standard_normal(arr.shape) * (self.noise_multiplier * self._iqr)
        return self.clip(arr) + noise

    def candidate_pairs(self, dim: int | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
        """Neighbouring states the auditor should try: opposite corners of the declared box
        (the L2-extreme pair) and each component's two bounds; far-apart states when raw."""
        d = self._iqr.size
        if dim is not None and dim != d:
            raise InvalidParameterError(f"dim must be {d} (the state dimension), got {dim!r}")
        # raw states: any states (no box bounds them); else the box's bounds (copied below)
        lo, hi = (-100.0 * self._iqr, 100.0 * self._iqr) if self._box is None else self._box.T
        pairs = [(lo.copy(), hi.copy()), (hi.copy(), lo.copy())]
        mid = 0.5 * (lo + hi)
        for i in range(d):
            a, b = mid.copy(), mid.copy()
            a[i], b[i] = lo[i], hi[i]
            pairs.append((a, b))
        return pairs

    def to_config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "noise_multiplier": self.noise_multiplier,
            "iqr": list(self.iqr),
            "box": None if self.box is None else [list(b) for b in self.box],
            "delta": self.target_delta,
        }


class ObservationNoise(gym.ObservationWrapper):
    """Gymnasium ``ObservationWrapper``: every observation goes through the mechanism.

    Args:
        env: a CartPole-like environment with (4,) observations.
        mechanism: :class:`ObservationNoiseMechanism`.
        rng: the noise generator (``numpy.random.Generator``).

    The wrapper is for single environments and user code; the trainer
    (:mod:`ldp_audit.training.dprl`) routes every observation of its vector environment
    through ``ldp_audit.release.release`` (charged first) with the same mechanism.
    """

    def __init__(
        self, env: Any, mechanism: ObservationNoiseMechanism, rng: np.random.Generator
    ) -> None:
        super().__init__(env)
        if not isinstance(mechanism, ObservationNoiseMechanism):
            raise InvalidParameterError(
                f"mechanism must be an ObservationNoiseMechanism, got {type(mechanism).__name__}"
            )
        self.mechanism = mechanism
        self.rng = check_rng(rng)

    def observation(self, observation: Any) -> np.ndarray:
        x = np.asarray(observation, dtype=np.float64).reshape(1, -1)
        return self.mechanism.privatize(x, self.rng)[0].astype(np.float32)
