"""FRD's configuration: Table 1's settings, the declared state ranges, :class:`FrdConfig`
(with its private CartPole constant) and its validation. Part of :mod:`ldp_audit.training.frd`.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ldp_audit.config import bounds
from ldp_audit.errors import InvalidParameterError
from ldp_audit.training.device import DEVICES, check_device

ALGORITHM = "frd"

#: Declared state ranges (x, x_dot, angle, angle_dot). x and angle are CartPole's termination
#: bounds; the velocity ranges cover what a learning agent reaches (states outside are clipped
#: into the edge cells and counted).
STATE_LOW: tuple[float, ...] = (-2.4, -3.0, -0.2095, -3.5)
STATE_HIGH: tuple[float, ...] = (2.4, 3.0, 0.2095, 3.5)

#: Table 1 of the paper: (S, proxy dims, E, I, hidden width, hidden layers). Setting 3's 100^3
#: proxy states: the paper does not say which component is left uncut; we leave the cart
#: position uncut (declared choice).
PAPER_SETTINGS: dict[int, dict[str, Any]] = {
    1: dict(sections=100, proxy_dims=(0, 1, 2, 3), exchange_period=25, initial_episodes=50,
            hidden=24, layers=2),
    2: dict(sections=100, proxy_dims=(0, 1, 2, 3), exchange_period=25, initial_episodes=50,
            hidden=100, layers=2),
    3: dict(sections=100, proxy_dims=(1, 2, 3), exchange_period=25, initial_episodes=100,
            hidden=100, layers=2),
    4: dict(sections=50, proxy_dims=(0, 1, 2, 3), exchange_period=25, initial_episodes=50,
            hidden=100, layers=2),
    5: dict(sections=100, proxy_dims=(0, 1, 2, 3), exchange_period=10, initial_episodes=0,
            hidden=24, layers=1),
    6: dict(sections=100, proxy_dims=(0, 1, 2, 3), exchange_period=50, initial_episodes=0,
            hidden=24, layers=1),
    7: dict(sections=100, proxy_dims=(0, 1, 2, 3), exchange_period=25, initial_episodes=125,
            hidden=24, layers=1),
}  # fmt: skip

_MODES = ("frd", "fedavg")

#: CartPole attributes an FRD agent's private parameter may be (``FrdConfig.private_param``):
#: the physical constants of the equations of motion. Not allowed: ``tau`` (the time step: it
#: changes what an episode's standing time, the mission's unit, means), ``x_threshold`` and
#: ``theta_threshold_radians`` (the termination bounds, which are the proxy grid's declared
#: ranges for x and the angle: a private bound would move the grid's edges per agent).
PRIVATE_PARAMS: tuple[str, ...] = ("gravity", "masscart", "masspole", "length", "force_mag")
#: Gymnasium's CartPole-v1 values of those constants (what every agent has unless private).
CARTPOLE_DEFAULTS: dict[str, float] = {
    "gravity": 9.8,
    "masscart": 1.0,
    "masspole": 0.1,
    "length": 0.5,
    "force_mag": 10.0,
}
_DEFAULT_GRAVITIES = (9.7, 9.8, 9.9)


# ------------------------------------------------------------------------------------------------
# Validation helpers
# ------------------------------------------------------------------------------------------------


def check_int_at_least(v: Any, name: str, minimum: int) -> int:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise InvalidParameterError(f"{name} must be an integer >= {minimum}, got {v!r}")
    if int(v) < minimum:
        raise InvalidParameterError(f"{name} must be >= {minimum}, got {v!r}")
    return int(v)


def _real(v: Any, name: str, *, low: float | None = None, strict: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(float(v)):
        raise InvalidParameterError(f"{name} must be a finite real number, got {v!r}")
    f = float(v)
    if low is not None and (f < low or (strict and f <= low)):
        op = ">" if strict else ">="
        raise InvalidParameterError(f"{name} must be {op} {low:g}, got {v!r}")
    return f


def _count(minimum: int) -> dict[str, Any]:
    """An integer field's metadata: its lower bound (the one __post_init__ checks)."""
    return bounds(minimum=minimum)


def _positive() -> dict[str, Any]:
    """A real > 0 (a learning rate; the option also refuses a subnormal double)."""
    return bounds(minimum=0, open_min=True)


def read_gravities(opt: str) -> Any:
    """The command line's reader of ``gravities`` (``bounds(parse=..., whole=True)``): two or
    more comma-separated numbers > 0, each read strictly (no nan, ``1_000`` or non-ASCII digits:
    :func:`ldp_audit.parse.parse_real`)."""
    import argparse

    from ldp_audit.parse import parse_real

    def read(text: str) -> tuple[float, ...]:
        try:
            vals = tuple(parse_real(t, opt) for t in text.split(",") if t.strip())
        except argparse.ArgumentTypeError:
            vals = ()
        if len(vals) < 2 or any(not (math.isfinite(v) and v > 0) for v in vals):
            raise argparse.ArgumentTypeError(
                f"{opt} must be >= 2 comma-separated numbers > 0, got {text!r}"
            )
        return vals

    return read


@dataclass(frozen=True, kw_only=True)
class FrdConfig:
    """One FRD / FedAvg experiment: ``groups`` independent groups of ``n_agents`` agents.

    Every field but ``private_param`` / ``private_values`` (one option sets both:
    ``--private-param NAME=V1,V2``) is also an option of ``ldp-audit train frd``
    (``max_episodes`` -> ``--max-episodes``), generated by :mod:`ldp_audit.config` from the
    field's type, default, bounds (its metadata) and the text below; ``n_agents`` is spelled
    ``--agents`` and ``ldp_epsilon`` ``--epsilon`` there (``bounds(option=...)``), and
    ``--gravities`` takes comma-separated values (:func:`read_gravities`).

    Attributes:
        mode: frd (proxy memory exchange) or fedavg (parameter averaging, same schedule).
        n_agents: agents per group (U).
        groups: independent groups (trials) of this config.
        sections: S, sections per cut state component (Table 1; --setting sets it unless given).
        proxy_dims: which state components (0..3) are cut (others are not: setting 3's 100^3;
            --setting sets it unless given).
        exchange_period: E, episodes between exchanges (Table 1; --setting sets it unless
            given).
        initial_episodes: I, episodes before the first collection window (Table 1; --setting
            sets it unless given).
        hidden: Table 1 hidden width, actor and critic alike (--setting sets it unless given).
        layers: Table 1 hidden layers, actor and critic alike (--setting sets it unless given).
        max_episodes: episodes per agent at most (a group without mission is censored).
        threshold: mission threshold on the mean standing time over window episodes (at most
            episode_steps).
        window: episodes averaged for the mission (10 in the paper).
        stop_at_mission: stop a group once its mission time is known (--no-stop-at-mission: run
            every agent to max_episodes).
        episode_steps: CartPole-v1 truncation (500).
        gravities: declared set each agent's private gravity is drawn from (uniformly); with
            another ``private_param``, the one gravity every agent has (default 9.8). On the
            command line: comma-separated; the same as --private-param gravity=V1,V2.
        private_param: which CartPole constant is each agent's secret (:data:`PRIVATE_PARAMS`;
            default "gravity", whose candidates are ``gravities``).
        private_values: the declared candidates of a ``private_param`` other than gravity (each
            agent draws one uniformly); validated on a CartPole before any episode.
        state_low: declared lower ends of the 4 state components (x, x_dot, angle, angle_dot;
            a state outside is clipped into the edge cell and counted).
        state_high: declared upper ends of the 4 state components.
        gamma: A2C discount (declared hyperparameter).
        actor_lr, critic_lr: A2C learning rates (declared hyperparameters).
        fail_reward: A2C reward of the step that ends an episode by failing (declared).
        distil_epochs, distil_batch, distil_lr: distillation of the global proxy memory (eq. 2).
        ldp_epsilon: LDP variant: epsilon per upload (> 0, composed over the run); None or inf:
            the non-private upload (NonPrivateEvent).
        ldp_samples: m, pairs per private upload.
        ldp_cell_share: share of a pair's epsilon spent on the cell id (rest on the policy bit).
        device: torch device of the distillation (eq. 2, the torch part): cpu, cuda or auto
            (cuda if available, else the cpu). The agents' acting and online A2C updates stay
            compiled on the CPU and every random draw stays on the CPU generator, so cpu
            results do not change (:mod:`ldp_audit.training.device`, docs/frd.md).
    """

    mode: str = field(default="frd", metadata=bounds(choices=_MODES))
    n_agents: int = field(default=4, metadata=bounds(minimum=1, option="--agents"))
    groups: int = field(default=1, metadata=_count(1))
    sections: int = field(default=100, metadata=_count(2))
    proxy_dims: tuple[int, ...] = field(default=(0, 1, 2, 3), metadata=bounds(minimum=0, maximum=3))
    exchange_period: int = field(default=25, metadata=_count(1))
    initial_episodes: int = field(default=50, metadata=_count(0))
    hidden: int = field(default=24, metadata=_count(1))
    layers: int = field(default=2, metadata=_count(1))
    max_episodes: int = field(default=300, metadata=_count(1))
    threshold: float = field(default=195.0, metadata=bounds(minimum=0))
    window: int = field(default=10, metadata=_count(1))
    stop_at_mission: bool = True
    episode_steps: int = field(default=500, metadata=_count(1))
    gravities: tuple[float, ...] = field(
        default=_DEFAULT_GRAVITIES, metadata=bounds(parse=read_gravities, whole=True)
    )
    state_low: tuple[float, ...] = STATE_LOW
    state_high: tuple[float, ...] = STATE_HIGH
    gamma: float = field(default=0.99, metadata=bounds(minimum=0, maximum=1))
    actor_lr: float = field(default=1e-3, metadata=_positive())
    critic_lr: float = field(default=5e-3, metadata=_positive())
    fail_reward: float = -100.0
    distil_epochs: int = field(default=1, metadata=_count(0))
    distil_batch: int = field(default=256, metadata=_count(1))
    distil_lr: float = field(default=1e-3, metadata=_positive())
    ldp_epsilon: float | None = field(
        default=None, metadata=bounds(minimum=0, open_min=True, inf=True, option="--epsilon")
    )
    ldp_samples: int = field(default=32, metadata=_count(1))
    ldp_cell_share: float = field(
        default=0.5, metadata=bounds(minimum=0, maximum=1, open_min=True, open_max=True)
    )
    private_param: str = field(default="gravity", metadata=bounds(choices=PRIVATE_PARAMS))
    private_values: tuple[float, ...] = ()
    device: str = field(default="cpu", metadata=bounds(choices=DEVICES))

    def __post_init__(self) -> None:
        check_device(self.device)  # a str among DEVICES (resolved, CUDA checked, by the runs)
        if self.mode not in _MODES:
            raise InvalidParameterError(f"mode must be one of {_MODES}, got {self.mode!r}")
        if not isinstance(self.stop_at_mission, (bool, np.bool_)):
            raise InvalidParameterError(
                f"stop_at_mission must be True or False, got {self.stop_at_mission!r}"
            )
        check_int_at_least(self.n_agents, "n_agents", 1)
        check_int_at_least(self.groups, "groups", 1)
        check_int_at_least(self.sections, "sections (S)", 2)
        check_int_at_least(self.exchange_period, "exchange_period (E)", 1)
        check_int_at_least(self.initial_episodes, "initial_episodes (I)", 0)
        check_int_at_least(self.hidden, "hidden", 1)
        check_int_at_least(self.layers, "layers", 1)
        check_int_at_least(self.max_episodes, "max_episodes", 1)
        check_int_at_least(self.window, "window", 1)
        check_int_at_least(self.episode_steps, "episode_steps", 1)
        check_int_at_least(self.distil_epochs, "distil_epochs", 0)
        check_int_at_least(self.distil_batch, "distil_batch", 1)
        check_int_at_least(self.ldp_samples, "ldp_samples", 1)
        _real(self.threshold, "threshold", low=0.0)
        if self.threshold > self.episode_steps:
            raise InvalidParameterError(
                f"threshold must be <= episode_steps ({self.episode_steps}: no standing time is "
                f"longer, the mission could never be reached), got {self.threshold!r}"
            )
        for name in ("proxy_dims", "gravities", "state_low", "state_high"):
            if not isinstance(getattr(self, name), (tuple, list)):
                raise InvalidParameterError(
                    f"{name} must be a tuple of numbers, got {getattr(self, name)!r}"
                )
        dims = tuple(self.proxy_dims)
        if (
            not dims
            or len(set(dims)) != len(dims)
            or any(isinstance(d, bool) or not isinstance(d, numbers.Integral) for d in dims)
            or any(not 0 <= int(d) <= 3 for d in dims)
        ):
            raise InvalidParameterError(
                f"proxy_dims must be distinct state components in 0..3, got {self.proxy_dims!r}"
            )
        object.__setattr__(self, "proxy_dims", tuple(sorted(int(d) for d in dims)))
        if self.sections ** len(dims) >= 2**53:
            raise InvalidParameterError(
                f"sections ** len(proxy_dims) must be < 2^53 (cell ids), got "
                f"{self.sections}^{len(dims)}"
            )
        self._check_private_param()
        lo = tuple(_real(x, "state_low") for x in self.state_low)
        hi = tuple(_real(x, "state_high") for x in self.state_high)
        if len(lo) != 4 or len(hi) != 4 or any(b <= a for a, b in zip(lo, hi, strict=True)):
            raise InvalidParameterError(
                f"state_low/state_high must be 4 finite ranges with low < high, got "
                f"{self.state_low!r} / {self.state_high!r}"
            )
        if not all(math.isfinite(v) for v in lo + hi):
            raise InvalidParameterError(f"state ranges must be finite, got {lo!r} / {hi!r}")
        object.__setattr__(self, "state_low", lo)
        object.__setattr__(self, "state_high", hi)
        _real(self.gamma, "gamma", low=0.0)
        if self.gamma > 1:
            raise InvalidParameterError(f"gamma must be in [0, 1], got {self.gamma!r}")
        for name in ("actor_lr", "critic_lr", "distil_lr"):
            _real(getattr(self, name), name, low=0.0, strict=True)
        _real(self.fail_reward, "fail_reward")
        share = _real(self.ldp_cell_share, "ldp_cell_share", low=0.0, strict=True)
        if share >= 1:
            raise InvalidParameterError(f"ldp_cell_share must be in (0, 1), got {share!r}")
        if self.ldp_epsilon is not None:
            eps = self.ldp_epsilon
            if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or math.isnan(eps):
                raise InvalidParameterError(f"ldp_epsilon must be a real number > 0, got {eps!r}")
            if eps <= 0:
                raise InvalidParameterError(f"ldp_epsilon must be > 0, got {eps!r}")
            if math.isinf(eps):
                object.__setattr__(self, "ldp_epsilon", None)  # inf = the non-private upload
            else:
                if self.mode != "frd":
                    raise InvalidParameterError(
                        f"ldp_epsilon is for mode 'frd' (the LDP proxy memory), got mode "
                        f"{self.mode!r}"
                    )
                object.__setattr__(self, "ldp_epsilon", float(eps))

    def _check_private_param(self) -> None:
        """``private_param`` / ``private_values`` / ``gravities``, normalised (see the class)."""
        from ldp_audit.training.gym_envs import check_candidates

        name = self.private_param
        if not isinstance(name, str) or name not in PRIVATE_PARAMS:
            raise InvalidParameterError(
                f"private_param must be one of {PRIVATE_PARAMS} (CartPole's physical constants; "
                f"tau and the termination bounds would change the mission's unit or the proxy "
                f"grid's declared ranges), got {name!r}"
            )
        if not isinstance(self.private_values, (tuple, list)):
            raise InvalidParameterError(
                f"private_values must be a tuple of numbers, got {self.private_values!r}"
            )
        if name == "gravity":
            if self.private_values:  # the candidates of gravity live in ``gravities``
                if tuple(self.gravities) != _DEFAULT_GRAVITIES:
                    raise InvalidParameterError(
                        f"private_param 'gravity': give its candidates once, as gravities or as "
                        f"private_values, got gravities={self.gravities!r} and "
                        f"private_values={self.private_values!r}"
                    )
                object.__setattr__(self, "gravities", tuple(self.private_values))
                object.__setattr__(self, "private_values", ())
            g = check_candidates("gravity", self.gravities, field="gravities", positive=True)
            object.__setattr__(self, "gravities", g)
            return
        vals = check_candidates(name, self.private_values, field="private_values", positive=True)
        grav = tuple(self.gravities)
        if grav == _DEFAULT_GRAVITIES:
            grav = (CARTPOLE_DEFAULTS["gravity"],)
        if len(grav) != 1:
            raise InvalidParameterError(
                f"gravities holds the candidates of private_param 'gravity'; with private_param "
                f"{name!r} every agent has one gravity: give one value (default 9.8), got "
                f"{self.gravities!r}"
            )
        g0 = _real(grav[0], "gravities", low=0.0, strict=True)
        _probe_cartpole(name, vals)
        object.__setattr__(self, "gravities", (g0,))
        object.__setattr__(self, "private_values", vals)

    # ------------------------------------------------------------------------------------------
    @property
    def candidates(self) -> tuple[float, ...]:
        """The declared values of the private parameter (``gravities`` for gravity)."""
        return self.gravities if self.private_param == "gravity" else self.private_values

    def private_parameter(self) -> dict[str, Any]:
        """``config.json``'s ``private_parameter`` record: env id, name, candidate values."""
        return {"env_id": "CartPole-v1", "name": self.private_param,
                "values": list(self.candidates)}  # fmt: skip

    def physics(self) -> dict[str, float]:
        """The CartPole constants every agent of this config shares (the private one aside)."""
        out = dict(CARTPOLE_DEFAULTS)
        out["gravity"] = float(self.gravities[0])
        out.pop(self.private_param)
        return out

    @property
    def private(self) -> bool:
        """True for the LDP variant."""
        return self.ldp_epsilon is not None

    @property
    def n_cells(self) -> int:
        """Size of the declared cell set, S^len(proxy_dims)."""
        return int(self.sections) ** len(self.proxy_dims)

    def arch(self) -> tuple[int, int]:
        return (int(self.hidden), int(self.layers))

    def make_mechanism(self) -> Any:
        """The upload's mechanism (:class:`ProxyMemoryLDP` or ``NoPrivacy``)."""
        from ldp_audit.mechanisms import NoPrivacy
        from ldp_audit.training.frd.proxy import ProxyMemoryLDP  # proxy imports this module

        if self.ldp_epsilon is None:
            return NoPrivacy()
        return ProxyMemoryLDP(
            epsilon=self.ldp_epsilon,
            n_cells=self.n_cells,
            samples=self.ldp_samples,
            cell_share=self.ldp_cell_share,
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-able fields; a gravity run leaves out ``private_param`` / ``private_values``
        and a CPU run ``device`` (its config.json is what it was before they existed)."""
        d = asdict(self)
        for k in ("proxy_dims", "gravities", "state_low", "state_high", "private_values"):
            d[k] = list(d[k])
        if self.private_param == "gravity":
            del d["private_param"], d["private_values"]
        if self.device == "cpu":
            del d["device"]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FrdConfig:
        d = dict(d)
        for k in ("proxy_dims", "gravities", "state_low", "state_high", "private_values"):
            if k in d:
                d[k] = tuple(d[k])
        if d.get("ldp_epsilon") == "inf":
            d["ldp_epsilon"] = None
        return cls(**d)


_PROBED: set[tuple[str, tuple[float, ...]]] = set()


def _probe_cartpole(name: str, values: tuple[float, ...]) -> None:
    """Each candidate set on a Gymnasium CartPole-v1, reset and stepped
    (:func:`ldp_audit.training.gym_envs.check_private_param`): a value the environment rejects
    (an exception, a non-finite observation or reward) is refused naming it. Once per set."""
    if (name, values) in _PROBED:
        return
    from ldp_audit.training.gym_envs import check_private_param

    check_private_param("CartPole-v1", name, values)
    _PROBED.add((name, values))


def setting_config(setting: int, **overrides: Any) -> FrdConfig:
    """The :class:`FrdConfig` of Table 1 setting 1..7, with ``overrides``."""
    if isinstance(setting, bool) or setting not in PAPER_SETTINGS:
        raise InvalidParameterError(f"setting must be one of 1..7 (Table 1), got {setting!r}")
    return FrdConfig(**{**PAPER_SETTINGS[setting], **overrides})
