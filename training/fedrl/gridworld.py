"""The GridWorld of FedRL (Zhuo et al. 2019, section 5.1): two agents that must meet.

An ``N x N`` binary map with random obstacles (N = 8, 16, 32); agents alpha and beta start at
random free cells of the same connected region. Alpha observes the 3x3 window around itself,
beta the 5x5 window around itself (cells outside the map read as obstacles); each observation is
a stack of the last ``H`` windows (the history length of the paper's Figure 4). The action is
joint, ``a = 4 * a_alpha + a_beta`` (16 actions; as in the authors' public code, each agent has
the 4 moves east/south/west/north). Reward per step (paper, "Rewards"):

* local part: for each agent -10 if its move hits an obstacle or the border (it then stays),
  else -1; +50 once when the agents meet (distance <= 1);
* global part: ``c / max(d(alpha, beta), 1)`` with ``c = N``.

The distance ``d`` follows ``meeting_rule`` (:data:`MEETING_RULES`, :func:`agent_distance`):

* ``"manhattan"`` (default): ``|dx| + |dy|``, the paper's text;
* ``"public-code"``: ``|dx + dy|``, what the authors' public code computes
  (``abs(sum(b_xy - a_xy))``) for meeting, the +50, the shaping term and the test-time success
  check. Under it the agents "meet" anywhere on the same anti-diagonal band (e.g. at (0, 0) and
  (3, -3)), so a random walk succeeds far more often.

An episode ends when they meet (success) or after ``T_m`` steps (38 / 86 / 178 for 8 / 16 / 32:
twice the longest optimal path, as in the paper).

Maps are generated from a seed (:func:`generate_maps`; 8000 per size, split 6400 / 800 / 800),
with the shortest path between the two start cells computed by BFS. Unlike the public code
(which starts a large share of 8x8 episodes on an obstacle), no start is on an obstacle and the
two agents are always connected; :func:`validate_starts` refuses such a map with a clear error.

Two implementations with identical dynamics (tested against each other):

* :class:`GridWorldEnv`, a Gymnasium environment (one map per instance; registered as
  ``ldp_audit/FedRLGridWorld-v0``);
* :class:`VectorGridWorld`, many maps at once in NumPy (no Python loop over maps per step).

Example:
    >>> maps = generate_maps(8, n_maps=16, seed=0)
    >>> env = VectorGridWorld(maps, np.arange(16), hist_len=2)
    >>> obs_a, obs_b = env.reset()
    >>> obs_a.shape, obs_b.shape
    ((16, 2, 3, 3), (16, 2, 5, 5))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from ldp_audit.errors import InvalidParameterError
from ldp_audit.validation import check_choice, check_int, check_real_in

__all__ = [
    "T_MAX",
    "N_ACTIONS",
    "MOVES",
    "MapSet",
    "generate_maps",
    "validate_starts",
    "check_size",
    "GridWorldEnv",
    "VectorGridWorld",
    "step_reward",
    "MEETING_RULES",
    "agent_distance",
]

#: Episode limit T_m of the paper per map size.
T_MAX = {8: 38, 16: 86, 32: 178}
#: Joint actions: 4 moves per agent.
N_ACTIONS = 16
#: (d_row, d_col) of east, south, west, north.
MOVES = np.array([[0, 1], [1, 0], [0, -1], [-1, 0]], dtype=np.int64)
#: Distances between the agents that decide meeting, the +50 and the shaping term:
#: ``"manhattan"`` = |dx| + |dy| (the paper's text), ``"public-code"`` = |dx + dy| (the
#: authors' code).
MEETING_RULES = ("manhattan", "public-code")
ALPHA_VIEW = 3
BETA_VIEW = 5
_PAD = BETA_VIEW // 2


def check_size(size: Any, t_max: Any = None) -> tuple[int, int]:
    """Validate a map size and episode limit; returns ``(size, t_max)``.

    Sizes other than 8 / 16 / 32 are allowed only with an explicit ``t_max``.
    """
    check_int(size, "size", minimum=3)
    if t_max is not None:
        check_int(t_max, "t_max", minimum=1)
    elif size not in T_MAX:
        raise InvalidParameterError(
            f"size must be one of 8, 16, 32 (the paper's sizes) unless t_max is given, got {size!r}"
        )
    return int(size), int(t_max if t_max is not None else T_MAX[size])


def agent_distance(pos_a: Any, pos_b: Any, rule: str = "manhattan") -> np.ndarray:
    """Distance between alpha at ``pos_a`` and beta at ``pos_b`` ((..., 2) row, col) under
    ``rule``: ``|dx| + |dy|`` (``"manhattan"``) or ``|dx + dy|`` (``"public-code"``, the
    authors' ``abs(sum(b_xy - a_xy))``). The two differ exactly where dx and dy have opposite
    signs (both non-zero)."""
    rule = check_choice(rule, "meeting_rule", MEETING_RULES)
    diff = np.asarray(pos_a) - np.asarray(pos_b)
    if rule == "manhattan":
        return np.abs(diff).sum(axis=-1)
    return np.abs(diff.sum(axis=-1))


def batched_shortest(obstacles: np.ndarray, alpha: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """BFS path length alpha -> beta for many maps at once (-1: unreachable).

    A breadth-first search run on all maps together as a frontier dilation (NumPy shifts):
    step ``k`` marks every free cell at distance ``k``.
    """
    obstacles = np.asarray(obstacles, dtype=bool)
    n, h, w = obstacles.shape
    idx = np.arange(n)
    free = ~obstacles
    seen = np.zeros_like(free)
    seen[idx, alpha[:, 0], alpha[:, 1]] = True
    frontier = seen.copy()
    out = np.full(n, -1, dtype=np.int64)
    out[(alpha == beta).all(axis=1)] = 0
    for k in range(1, h * w + 1):
        grow = np.zeros_like(free)
        grow[:, 1:, :] |= frontier[:, :-1, :]
        grow[:, :-1, :] |= frontier[:, 1:, :]
        grow[:, :, 1:] |= frontier[:, :, :-1]
        grow[:, :, :-1] |= frontier[:, :, 1:]
        frontier = grow & free & ~seen
        if not frontier.any():
            break
        seen |= frontier
        hit = frontier[idx, beta[:, 0], beta[:, 1]] & (out < 0)
        out[hit] = k
    return out


def validate_starts(obstacles: np.ndarray, alpha: Any, beta: Any) -> int:
    """Check one map's start cells; returns the BFS shortest-path length between them.

    Raises:
        InvalidParameterError: a start outside the map, on an obstacle, the two starts equal,
            or beta unreachable from alpha.
    """
    obstacles = np.asarray(obstacles)
    if obstacles.ndim != 2 or obstacles.shape[0] != obstacles.shape[1]:
        raise InvalidParameterError(f"obstacles must be a square 2-D map, got {obstacles.shape}")
    n = obstacles.shape[0]
    for name, p in (("alpha", alpha), ("beta", beta)):
        p = np.asarray(p)
        if p.shape != (2,) or not (0 <= p[0] < n and 0 <= p[1] < n):
            raise InvalidParameterError(f"{name} start must be a cell of the map, got {p.tolist()}")
        if obstacles[p[0], p[1]]:
            raise InvalidParameterError(f"{name} start {p.tolist()} is on an obstacle")
    if tuple(alpha) == tuple(beta):
        raise InvalidParameterError(f"alpha and beta must start apart, got {list(alpha)} twice")
    d = int(batched_shortest(obstacles[None], np.array([alpha]), np.array([beta]))[0])
    if d < 0:
        raise InvalidParameterError(
            f"unreachable map: beta at {list(beta)} cannot be reached from alpha at {list(alpha)}"
        )
    return d


@dataclass(frozen=True)
class MapSet:
    """Generated maps: ``obstacles`` (n, N, N) uint8 (1 = obstacle), start cells, BFS lengths.

    ``split`` holds the map indices of "train" / "valid" / "test" (80 / 10 / 10 %).
    """

    size: int
    t_max: int
    density: float
    seed: int
    obstacles: np.ndarray
    alpha_start: np.ndarray
    beta_start: np.ndarray
    shortest: np.ndarray
    split: dict[str, np.ndarray]

    def __len__(self) -> int:
        return int(self.obstacles.shape[0])


def generate_maps(
    size: int,
    n_maps: int = 8000,
    *,
    density: float = 0.2,
    seed: int = 0,
    t_max: int | None = None,
) -> MapSet:
    """Generate ``n_maps`` random maps from ``seed`` (paper: 8000 per size).

    Each cell is an obstacle with probability ``density``; the two agents start at distinct
    cells of the largest connected free region, at Manhattan distance >= 2 (not already met).
    A map whose free region has no such pair is redrawn. The split (6400 / 800 / 800 for 8000
    maps) is a seeded permutation.
    """
    size, t_max = check_size(size, t_max)
    density = check_real_in(density, "density", lo=0, lo_open=False, hi=1, hi_open=True)
    check_int(n_maps, "n_maps", minimum=1)
    check_int(seed, "seed", minimum=0)
    from scipy import ndimage

    rng = np.random.default_rng(seed)
    obstacles = np.zeros((n_maps, size, size), dtype=np.uint8)
    a_start = np.zeros((n_maps, 2), dtype=np.int64)
    b_start = np.zeros((n_maps, 2), dtype=np.int64)
    for i in range(n_maps):
        for _attempt in range(1000):
            obs = (rng.random((size, size)) < density).astype(np.uint8)
            labels, n_lab = ndimage.label(obs == 0)
            if n_lab == 0:
                continue
            counts = np.bincount(labels.ravel())[1:]
            lab = int(np.argmax(counts)) + 1
            cells = np.argwhere(labels == lab)
            if len(cells) < 3:
                continue
            a = cells[rng.integers(len(cells))]
            far = cells[np.abs(cells - a).sum(axis=1) >= 2]
            if len(far) == 0:
                continue
            b = far[rng.integers(len(far))]
            obstacles[i], a_start[i], b_start[i] = obs, a, b
            break
        else:  # pragma: no cover - needs density close to 1
            raise InvalidParameterError(
                f"density {density} leaves no two connected free cells in 1000 draws"
            )
    shortest = batched_shortest(obstacles, a_start, b_start)  # >= 2: one region, apart
    perm = rng.permutation(n_maps)
    n_tr, n_va = int(round(0.8 * n_maps)), int(round(0.1 * n_maps))
    split = {
        "train": np.sort(perm[:n_tr]),
        "valid": np.sort(perm[n_tr : n_tr + n_va]),
        "test": np.sort(perm[n_tr + n_va :]),
    }
    return MapSet(size, t_max, density, int(seed), obstacles, a_start, b_start, shortest, split)


def step_reward(size: int, bump_a: Any, bump_b: Any, md: Any) -> Any:
    """The paper's reward: local (-10 bump / -1 move per agent, +50 on meeting) + c / md.

    ``md`` is the agents' distance under the meeting rule (:func:`agent_distance`)."""
    bump_a, bump_b, md = np.asarray(bump_a), np.asarray(bump_b), np.asarray(md)
    local = np.where(bump_a, -10.0, -1.0) + np.where(bump_b, -10.0, -1.0)
    met = md <= 1
    return local + np.where(met, 50.0, 0.0) + float(size) / np.maximum(md, 1)


# ----------------------------------------------------------------------------------------------
# Batched (vector) version
# ----------------------------------------------------------------------------------------------


class VectorGridWorld:
    """``B`` GridWorld episodes at once, all in NumPy (no loop over maps per step).

    Args:
        maps: the :class:`MapSet`.
        indices: (B,) map index of each slot's first episode.
        hist_len: observation history length H.
        meeting_rule: the distance that decides meeting, the +50 and the shaping term
            (:data:`MEETING_RULES`; default ``"manhattan"``, the paper's text).

    ``reset()`` returns ``(obs_alpha (B, H, 3, 3), obs_beta (B, H, 5, 5))`` float32, 1 = free,
    0 = obstacle / outside (the paper's encoding). Before H steps have passed, the first window
    fills the history.
    """

    def __init__(
        self, maps: MapSet, indices: Any, *, hist_len: int = 1, meeting_rule: str = "manhattan"
    ) -> None:
        self.maps = maps
        self.hist_len = check_int(hist_len, "hist_len", minimum=1)
        self.meeting_rule = check_choice(meeting_rule, "meeting_rule", MEETING_RULES)
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if idx.size == 0 or idx.min() < 0 or idx.max() >= len(maps):
            raise InvalidParameterError(f"indices must be map indices in [0, {len(maps)})")
        self.n = idx.size
        n = maps.size
        # free-cell padded maps, 1 = free, 0 = obstacle/outside
        self._free = np.zeros((len(maps), n + 2 * _PAD, n + 2 * _PAD), dtype=np.float32)
        self._free[:, _PAD : _PAD + n, _PAD : _PAD + n] = 1.0 - maps.obstacles
        self.map_index = idx.copy()
        self.pos = np.zeros((self.n, 2, 2), dtype=np.int64)  # slot, agent, (row, col)
        self.t = np.zeros(self.n, dtype=np.int64)
        self.done = np.zeros(self.n, dtype=bool)
        self.last_bumps = np.zeros((self.n, 2), dtype=bool)
        self.hist_a = np.zeros((self.n, self.hist_len, ALPHA_VIEW, ALPHA_VIEW), np.float32)
        self.hist_b = np.zeros((self.n, self.hist_len, BETA_VIEW, BETA_VIEW), np.float32)
        oa = np.arange(ALPHA_VIEW) - ALPHA_VIEW // 2
        ob = np.arange(BETA_VIEW) - BETA_VIEW // 2
        self._off_a = (oa[:, None], oa[None, :])
        self._off_b = (ob[:, None], ob[None, :])

    def _windows(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        m = self.map_index[slots][:, None, None]
        wa, wb = (
            self._free[m, p[:, 0, None, None] + off[0], p[:, 1, None, None] + off[1]]
            for p, off in (
                (self.pos[slots, 0] + _PAD, self._off_a),
                (self.pos[slots, 1] + _PAD, self._off_b),
            )
        )
        return wa, wb

    def reset_slots(self, slots: Any, indices: Any) -> None:
        """Start new episodes in ``slots`` on maps ``indices``."""
        slots = np.asarray(slots, dtype=np.int64)
        self.map_index[slots] = np.asarray(indices, dtype=np.int64)
        self.pos[slots, 0] = self.maps.alpha_start[self.map_index[slots]]
        self.pos[slots, 1] = self.maps.beta_start[self.map_index[slots]]
        self.t[slots] = 0
        self.done[slots] = False
        wa, wb = self._windows(slots)
        self.hist_a[slots] = wa[:, None]
        self.hist_b[slots] = wb[:, None]

    def reset(self) -> tuple[np.ndarray, np.ndarray]:
        """Start every slot on its map; returns copies of the observations."""
        self.reset_slots(np.arange(self.n), self.map_index)
        return self.observe()

    def observe(self) -> tuple[np.ndarray, np.ndarray]:
        """Current observation histories (copies)."""
        return self.hist_a.copy(), self.hist_b.copy()

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Apply joint actions (B,) in 0..15 to every slot that is not done.

        Returns:
            ``(reward (B,), done (B,), met (B,), active (B,))``: the step's reward (0 for slots
            already done), whether the episode is now over, whether the agents met, and which
            slots actually stepped.
        """
        a = np.asarray(actions).reshape(-1)  # integers: 2.7 is no action (was read as 2)
        if a.dtype.kind not in "iu" or a.shape != (self.n,) or a.min() < 0 or a.max() >= N_ACTIONS:
            raise InvalidParameterError(f"actions must be {self.n} integers in [0, 16), got {a!r}")
        active = ~self.done
        n = self.maps.size
        moves = np.stack([MOVES[a // 4], MOVES[a % 4]], axis=1)  # (B, 2, 2)
        new = self.pos + moves
        inside = ((new >= 0) & (new < n)).all(axis=2)
        newc = np.clip(new, 0, n - 1)
        m = self.map_index[:, None]
        blocked = (~inside) | (self.maps.obstacles[m, newc[..., 0], newc[..., 1]] == 1)
        moved = np.where(blocked[..., None], self.pos, new)
        self.pos = np.where(active[:, None, None], moved, self.pos)
        md = agent_distance(self.pos[:, 0], self.pos[:, 1], self.meeting_rule)
        r = step_reward(n, blocked[:, 0], blocked[:, 1], md).astype(np.float64)
        r = np.where(active, r, 0.0)
        met = active & (md <= 1)
        self.t = self.t + active
        done_now = active & (met | (self.t >= self.maps.t_max))
        self.done = self.done | done_now
        #: obstacles hit by (alpha, beta) in the last step (B, 2), for scoring attacks only
        self.last_bumps = blocked & active[:, None]
        slots = np.flatnonzero(active)
        if slots.size:
            wa, wb = self._windows(slots)
            for hist, w in ((self.hist_a, wa), (self.hist_b, wb)):
                hist[slots] = np.roll(hist[slots], -1, axis=1)
                hist[slots, -1] = w
        return r, done_now, met, active


# ----------------------------------------------------------------------------------------------
# Gymnasium environment (one map)
# ----------------------------------------------------------------------------------------------


class GridWorldEnv(gym.Env):
    """One FedRL GridWorld episode per reset, as a Gymnasium environment.

    Args:
        maps: the :class:`MapSet`; ``reset(options={"map_index": i})`` picks map ``i``
            (default: a map of the "train" split drawn with the reset's RNG).
        hist_len: history length H.
        meeting_rule: ``"manhattan"`` (default, the paper's text) or ``"public-code"``
            (the authors' ``|dx + dy|``); see :data:`MEETING_RULES`.

    Observation: ``{"alpha": (H, 3, 3), "beta": (H, 5, 5)}`` float32; action: Discrete(16).
    ``info`` carries ``met``, ``map_index`` and ``shortest`` (the BFS path length).
    """

    metadata = {"render_modes": []}

    def __init__(self, maps: MapSet, hist_len: int = 1, meeting_rule: str = "manhattan") -> None:
        super().__init__()
        self.maps = maps
        self._vec = VectorGridWorld(maps, [0], hist_len=hist_len, meeting_rule=meeting_rule)
        h = self._vec.hist_len
        self.observation_space = spaces.Dict(
            {
                "alpha": spaces.Box(0.0, 1.0, (h, ALPHA_VIEW, ALPHA_VIEW), np.float32),
                "beta": spaces.Box(0.0, 1.0, (h, BETA_VIEW, BETA_VIEW), np.float32),
            }
        )
        self.action_space = spaces.Discrete(N_ACTIONS)
        self._map = 0

    def _obs(self) -> dict[str, np.ndarray]:
        return {"alpha": self._vec.hist_a[0].copy(), "beta": self._vec.hist_b[0].copy()}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        super().reset(seed=seed)
        opts = options or {}
        if "map_index" in opts:
            i = check_int(opts["map_index"], "map_index", minimum=0, maximum=len(self.maps) - 1)
        else:
            tr = self.maps.split["train"]
            i = int(tr[self.np_random.integers(len(tr))])
        self._map = int(i)
        self._vec.reset_slots(np.array([0]), np.array([self._map]))
        return self._obs(), {"map_index": self._map, "shortest": int(self.maps.shortest[i])}

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict]:
        if self._vec.done[0]:
            raise InvalidParameterError("step() called after the episode ended; reset()")
        action = check_int(action, "action", minimum=0, maximum=N_ACTIONS - 1)  # not 3.0, True
        r, done, met, _ = self._vec.step(np.array([action]))
        terminated = bool(met[0])
        truncated = bool(done[0]) and not terminated
        return self._obs(), float(r[0]), terminated, truncated, {"met": terminated}


if "ldp_audit/FedRLGridWorld-v0" not in gym.registry:
    gym.register(
        id="ldp_audit/FedRLGridWorld-v0",
        entry_point="ldp_audit.training.fedrl.gridworld:GridWorldEnv",
        disable_env_checker=True,
    )
