"""FRD's configuration: Table 1's settings, the declared state ranges, :class:`FrdConfig`
(with its private CartPole constant) and its validation. Part of :mod:`ldp_audit.training.frd`.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any

from ldp_audit.config import bounds, config_from_dict, config_to_dict, option_words
from ldp_audit.errors import InvalidParameterError
from ldp_audit.training.device import DEVICES
from ldp_audit.training.reproduction import check_fields
from ldp_audit.validation import check_real_in

ALGORITHM = "frd"

#: Declared state ranges (x, x_dot, angle, angle_dot). x and angle are CartPole's termination
#: bounds; the velocity ranges cover what a learning agent reaches (states outside are clipped
#: into the edge cells and counted).
STATE_LOW: tuple[float, ...] = (-2.4, -3.0, -0.2095, -3.5)
STATE_HIGH: tuple[float, ...] = (2.4, 3.0, 0.2095, 3.5)

#: Table 1 of the paper: (S, proxy dims, E, I, hidden width, hidden layers). Setting 3's 100^3
#: proxy states: the paper does not say which component is left uncut; we leave the cart
#: position uncut (declared choice).
_TABLE1_KEYS = ("sections", "proxy_dims", "exchange_period", "initial_episodes", "hidden", "layers")
PAPER_SETTINGS: dict[int, dict[str, Any]] = {
    k: dict(zip(_TABLE1_KEYS, row, strict=True))
    for k, row in {
        1: (100, (0, 1, 2, 3), 25, 50, 24, 2),
        2: (100, (0, 1, 2, 3), 25, 50, 100, 2),
        3: (100, (1, 2, 3), 25, 100, 100, 2),
        4: (50, (0, 1, 2, 3), 25, 50, 100, 2),
        5: (100, (0, 1, 2, 3), 10, 0, 24, 1),
        6: (100, (0, 1, 2, 3), 50, 0, 24, 1),
        7: (100, (0, 1, 2, 3), 25, 125, 24, 1),
    }.items()
}  # fmt: skip

_MODES = ("frd", "fedavg")
#: largest |fail_reward|: the critic's float32 weights stay finite (measured on the tiny
#: config: -1e30 trained, -1e40 diverged after one episode, refused only after the run started)
MAX_FAIL_REWARD = 1e6
#: the upload mechanism's parameters as this config's fields (its refusals, said in them)
_PROXY_FIELDS = {"epsilon": "ldp_epsilon", "samples": "ldp_samples", "cell_share": "ldp_cell_share"}

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


def read_list(maximum: int | None = None, at_least: int = 0) -> Any:
    """``bounds(parse=..., whole=True)`` reader of a comma-separated list, each value read
    strictly (no nan, ``1_000`` or non-ASCII digits: :mod:`ldp_audit.parse`): one or more
    integers in [1, ``maximum``] (``--settings 1,3``, ``--agents 1,2,4``), or without
    ``maximum`` ``at_least`` or more finite numbers > 0, normal doubles (``--gravities
    9.7,9.8,9.9``, ``--ldp-epsilons 1,10``; blank: none); the message names the option and
    the text."""

    def factory(opt: str) -> Any:
        import argparse
        import sys

        from ldp_audit.parse import parse_int, parse_real

        if maximum is None:
            read, least, lo, hi = parse_real, at_least, sys.float_info.min, math.inf
            what = (
                f"at least {at_least} " if at_least else ""
            ) + "comma-separated finite numbers > 0"
        else:
            read, least, lo, hi = parse_int, 1, 1, maximum
            what = f"a comma-separated list of integers in [1, {maximum}]"

        def convert(text: str) -> tuple[Any, ...]:
            try:
                vals = tuple(read(t, opt) for t in text.split(",")) if text.strip() else ()
            except argparse.ArgumentTypeError:
                vals = None
            if vals is None or len(vals) < least or not all(lo <= v <= hi for v in vals):
                raise argparse.ArgumentTypeError(f"{opt} must be {what}, got {text!r}")
            return vals

        return convert

    return factory


@dataclass(frozen=True, kw_only=True)
class FrdConfig:
    """One FRD / FedAvg experiment: ``groups`` independent groups of ``n_agents`` agents.

    Every field but ``private_param`` / ``private_values`` (one option sets both:
    ``--private-param NAME=V1,V2``) is also an option of ``ldp-audit train frd``
    (``max_episodes`` -> ``--max-episodes``), generated by :mod:`ldp_audit.config` from the
    field's type, default, bounds (its metadata) and the text below; ``n_agents`` is spelled
    ``--agents`` and ``ldp_epsilon`` ``--epsilon`` there (``bounds(option=...)``), and
    ``--gravities`` takes comma-separated values (:func:`read_list`).

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
            every agent to max_episodes); default: yes for the non-private upload, no for the
            LDP variant, which keeps a fixed schedule (when a group stops depends on the agents'
            private dynamics, so the server would learn it from how many uploads arrive: the
            LDP variant refuses --stop-at-mission).
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
    groups: int = field(default=1, metadata=bounds(minimum=1))
    sections: int = field(default=100, metadata=bounds(minimum=2))
    proxy_dims: tuple[int, ...] = field(default=(0, 1, 2, 3), metadata=bounds(minimum=0, maximum=3))
    exchange_period: int = field(default=25, metadata=bounds(minimum=1))
    initial_episodes: int = field(default=50, metadata=bounds(minimum=0))
    hidden: int = field(default=24, metadata=bounds(minimum=1))
    layers: int = field(default=2, metadata=bounds(minimum=1))
    max_episodes: int = field(default=300, metadata=bounds(minimum=1))
    threshold: float = field(default=195.0, metadata=bounds(minimum=0))
    window: int = field(default=10, metadata=bounds(minimum=1))
    stop_at_mission: bool | None = None
    episode_steps: int = field(default=500, metadata=bounds(minimum=1))
    gravities: tuple[float, ...] = field(
        default=_DEFAULT_GRAVITIES, metadata=bounds(parse=read_list(at_least=2), whole=True)
    )
    state_low: tuple[float, ...] = STATE_LOW
    state_high: tuple[float, ...] = STATE_HIGH
    gamma: float = field(default=0.99, metadata=bounds(minimum=0, maximum=1))
    actor_lr: float = field(default=1e-3, metadata=bounds(minimum=0, open_min=True))
    critic_lr: float = field(default=5e-3, metadata=bounds(minimum=0, open_min=True))
    fail_reward: float = field(
        default=-100.0, metadata=bounds(minimum=-MAX_FAIL_REWARD, maximum=MAX_FAIL_REWARD)
    )
    distil_epochs: int = field(default=1, metadata=bounds(minimum=0))
    distil_batch: int = field(default=256, metadata=bounds(minimum=1))
    distil_lr: float = field(default=1e-3, metadata=bounds(minimum=0, open_min=True))
    ldp_epsilon: float | None = field(
        default=None, metadata=bounds(minimum=0, open_min=True, inf=True, option="--epsilon")
    )
    ldp_samples: int = field(default=32, metadata=bounds(minimum=1))
    ldp_cell_share: float = field(
        default=0.5, metadata=bounds(minimum=0, maximum=1, open_min=True, open_max=True)
    )
    private_param: str = field(default="gravity", metadata=bounds(choices=PRIVATE_PARAMS))
    private_values: tuple[float, ...] = ()
    device: str = field(default="cpu", metadata=bounds(choices=DEVICES))

    def __post_init__(self) -> None:
        # every field's type and bounds (those of its command-line option; private_param one of
        # PRIVATE_PARAMS); private_values may be empty (the private parameter is gravity)
        check_fields(self, private_values=bounds(empty=True))
        if self.threshold > self.episode_steps:
            raise InvalidParameterError(
                f"threshold must be <= episode_steps ({self.episode_steps}: no standing time is "
                f"longer, the mission could never be reached), got {self.threshold!r}"
            )
        dims = tuple(self.proxy_dims)
        if len(set(dims)) != len(dims):
            raise InvalidParameterError(
                f"proxy_dims must be distinct state components in 0..3, got {self.proxy_dims!r}"
            )
        object.__setattr__(self, "proxy_dims", tuple(sorted(dims)))
        if self.sections ** len(dims) >= 2**53:
            raise InvalidParameterError(
                f"sections ** len(proxy_dims) must be < 2^53 (cell ids), got "
                f"{self.sections}^{len(dims)}"
            )
        self._check_private_param()
        lo, hi = tuple(map(float, self.state_low)), tuple(map(float, self.state_high))
        if len(lo) != 4 or len(hi) != 4 or any(b <= a for a, b in zip(lo, hi, strict=True)):
            raise InvalidParameterError(
                f"state_low/state_high must be 4 finite ranges with low < high, got "
                f"{self.state_low!r} / {self.state_high!r}"
            )
        object.__setattr__(self, "state_low", lo)
        object.__setattr__(self, "state_high", hi)
        if self.ldp_epsilon is not None and math.isinf(self.ldp_epsilon):
            object.__setattr__(self, "ldp_epsilon", None)  # inf = the non-private upload
        elif self.ldp_epsilon is not None:
            if self.mode != "frd":
                raise InvalidParameterError(
                    f"ldp_epsilon is for mode 'frd' (the LDP proxy memory), got mode {self.mode!r}"
                )
            object.__setattr__(self, "ldp_epsilon", float(self.ldp_epsilon))
            if self.stop_at_mission:
                raise InvalidParameterError(
                    f"stop_at_mission=True with ldp_epsilon={self.ldp_epsilon!r}: a group that "
                    f"stops at its mission stops uploading when its agents' private dynamics say "
                    f"so, and the server counts the uploads (not covered by the epsilon); the LDP "
                    f"variant runs every agent to max_episodes (leave stop_at_mission unset or "
                    f"pass --no-stop-at-mission)"
                )
            try:  # its parts' epsilons checked before any work
                self.make_mechanism()
            except InvalidParameterError as exc:  # said in this config's names (its options)
                exc.args = (option_words(str(exc), _PROXY_FIELDS),)
                raise

    def _check_private_param(self) -> None:
        """``private_param`` / ``private_values`` / ``gravities``, normalised (see the class)."""
        from ldp_audit.training.gym_envs import check_candidates

        name = self.private_param
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
        g = check_real_in(grav[0], "gravities", lo=0, lo_open=True)
        _probe_cartpole(name, vals)
        object.__setattr__(self, "gravities", (g,))
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
    def stops_at_mission(self) -> bool:
        """Whether a group stops once its mission time is known (``stop_at_mission``; unset:
        only the non-private upload does, the LDP variant keeps a fixed schedule)."""
        return not self.private if self.stop_at_mission is None else self.stop_at_mission

    @property
    def n_cells(self) -> int:
        """Size of the declared cell set, S^len(proxy_dims)."""
        return int(self.sections) ** len(self.proxy_dims)

    def arch(self) -> tuple[int, int]:
        return (int(self.hidden), int(self.layers))

    def make_mechanism(self) -> Any:
        """The upload's mechanism (:class:`ProxyMemoryLDP` or ``NoPrivacy``)."""
        from ldp_audit.mechanisms import NoPrivacy
        from ldp_audit.training.frd.proxy import ProxyMemoryLDP

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
        d = config_to_dict(self)
        if self.private_param == "gravity":
            del d["private_param"], d["private_values"]
        if self.device == "cpu":
            del d["device"]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FrdConfig:
        """Inverse of :meth:`to_dict` (:func:`ldp_audit.config.config_from_dict`; an
        ``ldp_epsilon`` of "inf" reads as None)."""
        return config_from_dict(cls, d, ldp_epsilon=None)


@functools.cache
def _probe_cartpole(name: str, values: tuple[float, ...]) -> None:
    """Each candidate set on a Gymnasium CartPole-v1, reset and stepped
    (:func:`ldp_audit.training.gym_envs.check_private_param`): a value the environment rejects
    (an exception, a non-finite observation or reward) is refused naming it. Once per set (a
    refused set is probed again)."""
    from ldp_audit.training.gym_envs import check_private_param

    check_private_param("CartPole-v1", name, values)


def setting_config(setting: int, **overrides: Any) -> FrdConfig:
    """The :class:`FrdConfig` of Table 1 setting 1..7, with ``overrides``."""
    if isinstance(setting, bool) or setting not in PAPER_SETTINGS:
        raise InvalidParameterError(f"setting must be one of 1..7 (Table 1), got {setting!r}")
    return FrdConfig(**{**PAPER_SETTINGS[setting], **overrides})
