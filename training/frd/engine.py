"""The batched FRD / FedAvg engine: every agent of every config of one architecture in one
loop (:func:`train_many`, :func:`arch_batches`, :func:`train_batch`) and the results
(:class:`FrdResult`). Part of :mod:`ldp_audit.training.frd`.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError
from ldp_audit.release import Charging, Transcript, release_with, require_sealed
from ldp_audit.training.frd.config import CARTPOLE_DEFAULTS, PRIVATE_PARAMS, FrdConfig
from ldp_audit.training.frd.nets import Nets, adam_step_rows, layer_views
from ldp_audit.training.frd.proxy import ProxyGrid, aggregate_memories
from ldp_audit.validation import check_int, check_rng

# ------------------------------------------------------------------------------------------------
# Results
# ------------------------------------------------------------------------------------------------


@dataclass
class FrdResult:
    """What :func:`train` returns for one config.

    Attributes:
        config: the config.
        mission: (groups,) episodes to mission per group (inf = not within max_episodes).
        scores: (groups, n_agents, max_episodes) standing time per episode (NaN = not played).
        gravity: (groups, n_agents) each agent's gravity (its secret when private_param is
            gravity; else the config's one gravity).
        uploads: (groups, n_agents) uploads made per agent.
        clipped_states: states outside the declared ranges (clipped into the edge cells).
        memory_sizes: global proxy memory size (cells) at each exchange (FRD), per group.
        transcript: dict of arrays (what crossed the boundary) when recorded, else None.
        seconds: wall time; agent_episodes: episodes played in total.
        model: final parameters per agent, {name: (groups, n_agents, ...)}.
        secret: (groups, n_agents) each agent's private value of ``config.private_param``
            (ground truth; equals ``gravity`` for a gravity run).
    """

    config: FrdConfig
    mission: np.ndarray
    scores: np.ndarray
    gravity: np.ndarray
    uploads: np.ndarray
    clipped_states: int = 0
    memory_sizes: list[list[int]] = field(default_factory=list)
    transcript: dict[str, np.ndarray] | None = None
    secrets: dict[str, np.ndarray] | None = None
    seconds: float = 0.0
    agent_episodes: int = 0
    model: dict[str, np.ndarray] = field(default_factory=dict)
    secret: np.ndarray | None = None

    def metrics(self) -> dict[str, Any]:
        from ldp_audit.rundir import to_jsonable

        m = self.mission
        fin = m[np.isfinite(m)]
        return to_jsonable(
            {
                "mission": m,
                "mission_mean": float(fin.mean()) if fin.size else math.inf,
                "mission_median": float(np.median(m)) if m.size else math.inf,
                "missions_reached": int(fin.size),
                "groups": int(m.size),
                "uploads_per_agent_max": int(self.uploads.max()) if self.uploads.size else 0,
                "clipped_states": int(self.clipped_states),
                "memory_sizes": self.memory_sizes,
                "agent_episodes": int(self.agent_episodes),
                "seconds": self.seconds,
                "scores": self.scores,  # NaN (an episode not played): null
            }
        )


# ------------------------------------------------------------------------------------------------
# The batched engine
# ------------------------------------------------------------------------------------------------

#: an agent's empty local memory (never written in place: a flush makes new arrays)
_NO_MEMORY = (np.zeros(0, np.int64), np.zeros(0), np.zeros(0))


class _Recorder:
    """Per config: accountant, transcript, secrets rows, global thetas (FedAvg)."""

    def __init__(self, cfg: FrdConfig, accountant: Charging, record: bool) -> None:
        self.cfg = cfg
        self.accountant = accountant
        self.record = record
        self.transcript = Transcript("report")
        self.secret_gravity: list[np.ndarray] = []
        self.thetas: list[np.ndarray] = []
        self.theta_meta: list[tuple[int, int]] = []
        self.mechanism = cfg.make_mechanism()  # ProxyMemoryLDP, or NoPrivacy
        self.event = self.mechanism.event()  # one upload's ledger charge


def train_many(
    configs: Sequence[FrdConfig],
    *,
    seed: int | np.random.Generator,
    accountants: Sequence[Charging] | None = None,
    record: bool = False,
    progress: bool = False,
    _recorders: list[Any] | None = None,
    _sink: Any = None,
    force: bool = False,
) -> list[FrdResult]:
    """Train every group of every config; configs sharing an architecture run in one batch.

    Each architecture's batch is :func:`train_batch` with its own child generator
    (:func:`arch_batches`), so the batches are independent tasks: running them one by one, in
    a process pool or on Ray (``ldp-audit reproduce frd --backend``) gives the same results.

    Args:
        configs: the experiments (each ``groups`` x ``n_agents`` agents).
        seed: int seed or ``numpy.random.Generator`` (the only source of randomness).
        accountants: one :class:`~ldp_audit.accountant.Accountant` per config (default: one on
            an in-memory ledger each); every upload is charged to it first.
        record: keep the transcript (what crossed the boundary) and the matching secrets.
        progress: tqdm bar (agent-episodes) on stderr.
        force: run even when the estimated memory or time of the configs trained together
            exceeds this machine's limits (:mod:`ldp_audit.limits`).

    Returns:
        One :class:`FrdResult` per config, in order.
    """
    cfgs = checked_configs(configs, accountants, force)
    batches = arch_batches(cfgs, seed=seed)
    results: list[FrdResult | None] = [None] * len(cfgs)
    bar = _sink
    if progress and bar is None:
        from tqdm.auto import tqdm

        total = sum(c.groups * c.n_agents * c.max_episodes for c in cfgs)
        bar = tqdm(total=total, desc="agent-episodes", unit="ep")
    try:
        for idx, r in batches:
            out = train_batch(
                [cfgs[i] for i in idx],
                rng=r,
                accountants=None if accountants is None else [accountants[i] for i in idx],
                record=record,
                _recorders=_recorders,
                _sink=bar,
                force=force,
            )
            for i, res in zip(idx, out, strict=True):
                results[i] = res
    finally:
        if bar is not None and bar is not _sink:
            bar.close()
    return [r for r in results if r is not None]


def _check_configs(configs: Sequence[FrdConfig]) -> list[FrdConfig]:
    cfgs = list(configs)
    if not cfgs:
        raise InvalidParameterError("configs must hold at least one FrdConfig, got none")
    for c in cfgs:
        if not isinstance(c, FrdConfig):
            raise InvalidParameterError(f"configs must be FrdConfig objects, got {type(c)}")
    return cfgs


def checked_configs(configs: Sequence[FrdConfig], accountants: Any, force: bool) -> list[FrdConfig]:
    """The configs of :func:`train_many` / :func:`train_batch` checked before any allocation:
    types, absurd sizes (``force``), the device ("cuda" without CUDA, mixed devices) and one
    accountant per config (when given)."""
    from ldp_audit.limits import check_resources
    from ldp_audit.training.sizes import frd_estimates

    cfgs = _check_configs(configs)
    check_resources(frd_estimates(cfgs), force=force)
    batch_device(cfgs)
    if accountants is not None and len(accountants) != len(cfgs):
        raise InvalidParameterError(
            f"accountants must have one entry per config ({len(cfgs)}), got {len(accountants)}"
        )
    return cfgs


def arch_batches(
    configs: Sequence[FrdConfig], *, seed: int | np.random.Generator
) -> list[tuple[list[int], np.random.Generator]]:
    """How :func:`train_many` splits ``configs``: one batch per network architecture
    (``config.arch()``, in sorted order), each with its own child generator of ``seed``
    (``rng.spawn``). Returns ``[(config indices, generator), ...]``; ``train_batch`` of each
    gives exactly what ``train_many`` gives those configs."""
    cfgs = _check_configs(configs)
    if isinstance(seed, np.random.Generator):
        rng = check_rng(seed)
    else:
        rng = np.random.default_rng(check_int(seed, "seed", minimum=0))
    archs = sorted({c.arch() for c in cfgs})
    rngs = rng.spawn(len(archs))
    return [
        ([i for i, c in enumerate(cfgs) if c.arch() == arch], r)
        for arch, r in zip(archs, rngs, strict=True)
    ]


def train_batch(
    configs: Sequence[FrdConfig],
    *,
    rng: np.random.Generator,
    accountants: Sequence[Charging] | None = None,
    record: bool = False,
    _recorders: list[Any] | None = None,
    _sink: Any = None,
    force: bool = False,
) -> list[FrdResult]:
    """Train configs of ONE architecture in one lock-step batch drawing from ``rng`` (what
    :func:`train_many` does for each batch of :func:`arch_batches`). ``accountants``: one per
    config (default: an in-memory ledger each), charged before every upload. ``_sink``: an
    object with ``update(k)`` counting agent-episodes (a tqdm bar or a progress queue).
    ``force``: run even when the batch's estimated memory or time exceeds this machine's limits
    (:mod:`ldp_audit.limits`; otherwise InvalidParameterError before any allocation)."""
    cfgs = checked_configs(configs, accountants, force)
    rng = check_rng(rng)
    if len({c.arch() for c in cfgs}) != 1:
        raise InvalidParameterError(
            f"configs must share one architecture (hidden, layers), got "
            f"{sorted({c.arch() for c in cfgs})}"
        )
    if accountants is None:
        from ldp_audit.accountant import Accountant, Ledger

        accountants = [Accountant(ledger=Ledger(":memory:")) for _ in cfgs]
    recs = [_Recorder(c, a, record) for c, a in zip(cfgs, accountants, strict=True)]
    if _recorders is not None:  # the caller writes what was released if training is interrupted
        _recorders.extend(recs)
    return _Engine(cfgs, recs, rng, _sink).run()


class _Engine:
    RUN, WAIT, STOP = 0, 1, 2

    def __init__(
        self, cfgs: list[FrdConfig], recs: list[_Recorder], rng: np.random.Generator, bar: Any
    ) -> None:
        import torch

        from ldp_audit.training.cartpole import PrivateGravityCartPole

        self.torch = torch
        # where the distillation runs (the acting kernels and every random draw: the CPU)
        self.device = torch.device(batch_device(cfgs))
        self.cfgs, self.recs, self.rng, self.bar = cfgs, recs, rng, bar
        # groups: (config index, group index); agents: (group, slot)
        gi = [(ci, g) for ci, c in enumerate(cfgs) for g in range(c.groups)]
        ai = [(G, a) for G, (ci, _) in enumerate(gi) for a in range(cfgs[ci].n_agents)]
        self.group_cfg, self.group_num = np.array(gi, dtype=np.int64).T
        self.agent_group, self.agent_slot = np.array(ai, dtype=np.int64).T
        self.A = A = len(ai)
        self.acfg = self.group_cfg[self.agent_group]  # each agent's config index
        self.grids = [ProxyGrid(c.sections, c.proxy_dims, c.state_low, c.state_high) for c in cfgs]
        # each agent's private value, uniform over its config's declared candidates (gravity by
        # default); the other CartPole constants are the config's shared ones
        secret = np.empty(A)
        phys = {k: np.full(A, v) for k, v in CARTPOLE_DEFAULTS.items()}
        for ci, c in enumerate(cfgs):
            rows = np.flatnonzero(self.acfg == ci)
            cand = c.candidates
            secret[rows] = np.asarray(cand)[rng.integers(0, len(cand), rows.size)]
            for k, v in c.physics().items():
                phys[k][rows] = v
            phys[c.private_param][rows] = secret[rows]
        self.secret = secret
        self.gravity = phys["gravity"]
        self.varied = any(c.private_param != "gravity" for c in cfgs)
        self.nets = Nets(cfgs[0].hidden, cfgs[0].layers, A, rng)
        per = lambda name, dtype=np.float64: np.array(  # noqa: E731
            [getattr(cfgs[c], name) for c in self.acfg], dtype=dtype
        )
        self.gamma, self.fail = per("gamma"), per("fail_reward")
        self.lr_actor, self.lr_critic = per("actor_lr"), per("critic_lr")
        # per-agent Adam state: moments and a step count per row (an idle row's stay as they are)
        self.m, self.v = torch.zeros_like(self.nets.flat), torch.zeros_like(self.nets.flat)
        self.t = torch.zeros((A, 1), dtype=torch.float64)
        # numpy views of the torch buffers (shared memory) for the compiled per-step kernels
        self.np_flat = self.nets.flat.numpy()
        self.np_m, self.np_v, self.np_t = self.m.numpy(), self.v.numpy(), self.t.numpy().reshape(-1)
        # per-agent proxy grid (vectorised cell ids for every config at once): a component that
        # is not cut has multiplier 0
        self.g_low, self.g_high, self.g_S = per("state_low"), per("state_high"), per("sections")
        self.g_width = (self.g_high - self.g_low) / self.g_S[:, None]
        self.g_mult = np.zeros((A, 4), dtype=np.int64)
        for a, c in enumerate(self.acfg):
            for j, dim in enumerate(cfgs[c].proxy_dims):
                self.g_mult[a, dim] = int(cfgs[c].sections) ** j
        self.g_cut = self.g_mult > 0  # a cut component's multiplier is S^j >= 1
        self.init_eps = per("initial_episodes", np.int64)
        self.env = PrivateGravityCartPole(
            self.gravity, episode_steps=max(c.episode_steps for c in cfgs)
        )
        if self.varied:  # per-row constants (a gravity-only batch keeps Gymnasium's scalars)
            set_row_constants(self.env, phys)
        self.steps_limit = per("episode_steps", np.int64)
        maxe = max(c.max_episodes for c in cfgs)
        self.scores = np.full((A, maxe), np.nan)
        self.ep = np.zeros(A, dtype=np.int64)
        self.ep_len = np.zeros(A, dtype=np.int64)
        self.status = np.full(A, self.RUN, dtype=np.int64)
        self.max_ep = per("max_episodes", np.int64)
        self.best = np.full(len(gi), np.inf)  # mission per group (candidate while running)
        self.uploads = np.zeros(A, dtype=np.int64)
        self.rounds = np.zeros(len(gi), dtype=np.int64)
        self.last_theta = np.full(len(gi), -1, dtype=np.int64)
        self.clipped = np.zeros(len(cfgs), dtype=np.int64)
        self.memory_sizes: list[list[int]] = [[] for _ in gi]
        # each agent's sparse local memory: (cell ids, sum of pi_left, visits) per cell
        self.mem = [_NO_MEMORY] * A
        self.buf: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.buf_rows = 0
        self.is_frd = per("mode", str) == "frd"
        self.members = [np.flatnonzero(self.agent_group == G) for G in range(len(gi))]

    # -------------------------------------------------------------------------------------------
    def _flush(self) -> None:
        """Fold the step buffer into each agent's sparse local memory."""
        if not self.buf:
            return
        agents, cells, vals = (np.concatenate(col) for col in zip(*self.buf, strict=True))
        self.buf, self.buf_rows = [], 0
        order = np.argsort(agents, kind="stable")
        agents, cells, vals = agents[order], cells[order], vals[order]
        bounds = np.flatnonzero(np.diff(agents)) + 1
        for seg_a, seg_c, seg_v in zip(np.split(agents, bounds), np.split(cells, bounds),
                                       np.split(vals, bounds), strict=True):  # fmt: skip
            a = int(seg_a[0])
            new = (seg_c, seg_v, np.ones(seg_c.size))
            keys, sums, cnts = (np.concatenate(p) for p in zip(self.mem[a], new, strict=True))
            uk, inv = np.unique(keys, return_inverse=True)
            per_cell = functools.partial(np.bincount, inv, minlength=uk.size)
            self.mem[a] = (uk, per_cell(weights=sums), per_cell(weights=cnts))

    def _start(self, rows: np.ndarray) -> None:
        if rows.size:
            from ldp_audit.training.cartpole import initial_states

            st = initial_states(self.rng.random((rows.size, 4)))
            self.env._reset_rows_unchecked(rows, st, self.gravity[rows])
            self.ep_len[rows] = 0

    def run(self) -> list[FrdResult]:
        from ldp_audit.training.frd.kernels import a2c_update_rows, act_rows, cells_rows

        t0 = time.perf_counter()
        A = self.A
        H, L, pa = int(self.cfgs[0].hidden), int(self.cfgs[0].layers), self.nets.actor_size
        pi_left = np.zeros(A)
        act = np.zeros(A, dtype=np.int64)
        adv = np.zeros(A)
        self._start(np.arange(A))
        while True:
            running = self.status == self.RUN
            rows = np.flatnonzero(running)
            if rows.size == 0:
                break
            obs = self.env.observation  # (A, 4) float32
            u = self.rng.random(A)
            act[:] = 0  # idle rows: their env only has to stay legal (restarted before use)
            act_rows(self.np_flat, rows, obs, u, H, L, pi_left, act)
            # proxy memory: cells visited by collecting FRD agents and their policy there
            coll = rows[self.is_frd[rows] & (self.ep[rows] >= self.init_eps[rows])]
            if coll.size:  # cell ids on each row's own grid; clipped: a cut component was out
                cells, clipped = np.empty(coll.size, np.int64), np.empty(coll.size, bool)
                cells_rows(coll, obs, self.g_low, self.g_high, self.g_width, self.g_S, self.g_mult,
                           self.g_cut, cells, clipped)  # fmt: skip
                if clipped.any():
                    self.clipped += np.bincount(self.acfg[coll[clipped]], minlength=len(self.cfgs))
                self.buf.append((coll, cells, pi_left[coll]))
                self.buf_rows += coll.size
                if self.buf_rows > 200_000:
                    self._flush()
            obs2, _, term, trunc = self.env._step_unchecked(act)
            self.ep_len += 1
            trunc = trunc | (self.ep_len >= self.steps_limit)
            # A2C update (eq. 3) and Adam, running agents only (compiled, in place)
            a2c_update_rows(
                self.np_flat, self.np_m, self.np_v, self.np_t, rows, obs, obs2, act, term,
                self.gamma, self.fail, self.lr_actor, self.lr_critic, H, L, pa, adv,
            )  # fmt: skip
            ended = term | trunc
            if ended.any():
                self._episode_ends(np.flatnonzero(ended), running)
        self._flush()
        return self._results(time.perf_counter() - t0)

    def _episode_ends(self, ended: np.ndarray, running: np.ndarray) -> None:
        fin = ended[running[ended]]
        restart = list(ended[~running[ended]])  # idle rows: keep their env legal
        bad = fin[~np.isfinite(self.np_flat[fin]).all(axis=1)]
        if bad.size:  # before its scores count or its next release (exchange)
            a, c = int(bad[0]), self.cfgs[self.acfg[bad[0]]]
            raise InvalidParameterError(
                f"frd diverged: config {self.acfg[a]}, group {self.group_num[self.agent_group[a]]}"
                f", agent {self.agent_slot[a]} has non-finite network weights after episode "
                f"{int(self.ep[a]) + 1} (theta diverged; nothing after it was released); likely "
                f"cause: a learning rate too large (actor_lr={c.actor_lr!r}, "
                f"critic_lr={c.critic_lr!r}, distil_lr={c.distil_lr!r}), or an extreme physical "
                f"constant (this agent's private {c.private_param} is {float(self.secret[a])!r}; "
                f"CartPole-v1's is {CARTPOLE_DEFAULTS[c.private_param]!r})"
            )
        for a in fin:
            e = int(self.ep[a])
            self.scores[a, e] = self.ep_len[a]
            self.ep[a] = e + 1
            G = self.agent_group[a]
            c = self.cfgs[self.acfg[a]]
            if c.window <= e + 1 < self.best[G]:
                # the window ending at this episode (earlier windows were checked before)
                if self.scores[a, e + 1 - c.window : e + 1].mean() > c.threshold:
                    self.best[G] = float(e + 1)
            if self.bar is not None:
                self.bar.update(1)
        for a in fin:
            G = self.agent_group[a]
            c = self.cfgs[self.acfg[a]]
            if self.ep[a] >= self.max_ep[a] or (c.stops_at_mission and self.ep[a] >= self.best[G]):
                self.status[a] = self.STOP
            elif (e := int(self.ep[a]) - c.initial_episodes) > 0 and e % c.exchange_period == 0:
                self.status[a] = self.WAIT
            else:
                self.status[a] = self.RUN
            restart.append(a)
        # waiting agents of groups whose mission is now known stop too
        for G in np.unique(self.agent_group[fin]):
            mem = self.members[G]
            c = self.cfgs[self.group_cfg[G]]
            if c.stops_at_mission and math.isfinite(self.best[G]):
                w = mem[self.status[mem] == self.WAIT]
                self.status[w[self.ep[w] >= self.best[G]]] = self.STOP
            st = self.status[mem]
            if (st == self.WAIT).any() and not (st == self.RUN).any():
                self._exchange(int(G), mem[st == self.WAIT])
                self.status[mem[st == self.WAIT]] = self.RUN
                # they resume with a fresh episode (not the one their idle env row was in)
                restart.extend(mem[st == self.WAIT].tolist())
        rows = np.array(sorted(set(int(a) for a in restart)), dtype=np.int64)
        self._start(rows)

    # -------------------------------------------------------------------------------------------
    def _exchange(self, G: int, agents: np.ndarray) -> None:
        ci = int(self.group_cfg[G])
        c, rec = self.cfgs[ci], self.recs[ci]
        trial = int(self.group_num[G])
        slots = self.agent_slot[agents]
        ids = [f"{trial}/{int(s)}" for s in slots]
        rnd = int(self.rounds[G])
        torch = self.torch
        if c.mode == "fedavg":  # the upload: each agent's parameters
            raw = self.nets.flat[torch.from_numpy(agents)].numpy().astype(np.float64)
            row_agent, secrets = slots.copy(), self.secret[agents]
            # theta_index: the broadcast this round started from (-1: the agent's own init)
            theta_index = np.full(len(agents), int(self.last_theta[G]))
        else:  # the upload: each agent's proxy memory of its last window, a row per cell
            self._flush()
            rows, agent_col, secret_col = [], [], []
            for a, s in zip(agents, slots, strict=True):
                keys, sums, cnt = self.mem[a]
                if keys.size == 0:
                    raise InvalidParameterError(
                        f"proxy memory of agent {trial}/{int(s)} is empty at round {rnd}: it "
                        f"visited no cell in its last {c.exchange_period} episodes"
                    )
                if c.private:
                    pick = self.rng.integers(0, keys.size, c.ldp_samples)
                    keys, vals = keys[pick], 2.0 * (sums[pick] / cnt[pick]) - 1.0
                else:
                    vals = sums / cnt
                rows.append(np.stack([keys.astype(np.float64), vals], axis=1))
                agent_col.append(np.full(keys.size, int(s)))
                secret_col.append(np.full(keys.size, self.secret[a]))
            raw, row_agent = np.concatenate(rows), np.concatenate(agent_col)
            secrets, theta_index = np.concatenate(secret_col), np.zeros(raw.shape[0], np.int64)
        mech, noise_rng = rec.mechanism, self.rng
        rel = release_with(
            (lambda: mech.privatize(raw, noise_rng)) if c.private else (lambda: raw.copy()),
            accountant=rec.accountant,
            charges=[(i, rec.event) for i in ids],
            epsilon=float(mech.epsilon),
            meta={"trial": np.full(raw.shape[0], trial), "agent": row_agent},
        )
        if rec.record:
            rec.transcript.append(
                rel, submission=np.full(raw.shape[0], rnd), theta_index=theta_index
            )
            rec.secret_gravity.append(secrets)
        if c.mode == "fedavg":
            require_sealed(rel, "the FedAvg server")
            mean = rel.values.mean(axis=0)
            if rec.record:
                rec.thetas.append(mean.copy())
                rec.theta_meta.append((trial, rnd))
                self.last_theta[G] = len(rec.thetas) - 1
            self.nets.flat[torch.from_numpy(agents)] = torch.from_numpy(mean.astype(np.float32))[
                None, :
            ].expand(len(agents), -1)
        else:
            cells, pol = aggregate_memories(rel, mechanism=mech if c.private else None)
            self.memory_sizes[G].append(int(cells.size))
            self._distil(agents, self.grids[ci].midpoints(cells), pol, c)
            for a in agents:
                self.mem[a] = _NO_MEMORY
        self.uploads[agents] += 1
        self.rounds[G] += 1

    def _distil(self, agents: np.ndarray, states: np.ndarray, pol: np.ndarray,
                c: FrdConfig) -> None:  # fmt: skip
        """Eq. 2: cross-entropy between the global average policy and the local policy.

        The agents' rows of the parameters and of the Adam state are copied to the engine's
        device, distilled there (:func:`distil_rows`) and copied back into the CPU buffers that
        the compiled acting kernels read; the minibatch permutations are drawn here, from the
        engine's CPU generator, in the order the epochs use them. On the CPU the copies are the
        tensors the former in-place update gathered, so the bits are the same."""
        torch = self.torch
        idx = torch.from_numpy(np.asarray(agents, dtype=np.int64))
        target = np.stack([pol, 1.0 - pol], axis=1).astype(np.float32)
        n = states.shape[0]
        perms = [self.rng.permutation(n) for _ in range(c.distil_epochs)]
        dev = self.device
        buffers = (self.nets.flat, self.m, self.v, self.t)
        flat, m, v, t = (b[idx].to(dev) for b in buffers)
        distil_rows(
            self.nets, flat, m, v, t,
            torch.from_numpy(states.astype(np.float32)).to(dev), torch.from_numpy(target).to(dev),
            [torch.from_numpy(p).to(dev) for p in perms], c.distil_batch, c.distil_lr,
        )  # fmt: skip
        for b, d in zip(buffers, (flat, m, v, t), strict=True):
            b[idx] = d.to(b.device)  # in place: the acting kernels' numpy views stay valid

    # -------------------------------------------------------------------------------------------
    def _results(self, seconds: float) -> list[FrdResult]:
        out = []
        total_eps = max(int(self.ep.sum()), 1)
        for ci, c in enumerate(self.cfgs):
            Gs = np.flatnonzero(self.group_cfg == ci)
            agents = np.flatnonzero(self.acfg == ci)
            sc = self.scores[agents, : c.max_episodes].reshape(c.groups, c.n_agents, -1)
            rec = self.recs[ci]
            tr = sec = None
            if rec.record:
                tr = rec.transcript.arrays() if len(rec.transcript) else {}
                if c.mode == "fedavg":
                    tr["thetas"] = (
                        np.stack(rec.thetas) if rec.thetas else np.zeros((0, 0), np.float64)
                    )
                    tm = np.array(rec.theta_meta, dtype=np.int64).reshape(-1, 2)
                    tr["theta_trial"], tr["theta_round"] = tm[:, 0], tm[:, 1]
                p = c.private_param
                sec = {
                    p: (np.concatenate(rec.secret_gravity) if rec.secret_gravity else np.zeros(0)),
                    f"agent_{p}": self.secret[agents].reshape(c.groups, c.n_agents),
                }
            flat = self.nets.flat[self.torch.from_numpy(np.asarray(agents, dtype=np.int64))]
            model = {"flat": flat.numpy().astype(np.float64).reshape(c.groups, c.n_agents, -1)}
            for name in ("actor", "critic"):
                for k, (wt, bs) in enumerate(layer_views(flat, self.nets.specs[name])):
                    for tag, arr in (("w", wt), ("b", bs)):
                        a64 = arr.numpy().astype(np.float64)
                        shape = (c.groups, c.n_agents) + a64.shape[1:]
                        model[f"{name}_{tag}{k}"] = a64.reshape(shape)
            eps_c = int(self.ep[agents].sum())
            out.append(
                FrdResult(
                    config=c,
                    mission=self.best[Gs].copy(),
                    scores=sc,
                    gravity=self.gravity[agents].reshape(c.groups, c.n_agents),
                    secret=self.secret[agents].reshape(c.groups, c.n_agents),
                    uploads=self.uploads[agents].reshape(c.groups, c.n_agents),
                    clipped_states=int(self.clipped[ci]),
                    memory_sizes=[self.memory_sizes[G] for G in Gs],
                    transcript=tr,
                    secrets=sec,
                    seconds=seconds * eps_c / total_eps,
                    agent_episodes=eps_c,
                    model=model,
                )
            )
        return out


def distil_rows(nets: Nets, flat: Any, m: Any, v: Any, t: Any, X: Any, T: Any,
                perms: Sequence[Any], batch: int, lr: float) -> None:  # fmt: skip
    """Eq. 2's distillation of A' agents at once, in place on their rows (one device, any).

    ``flat``, ``m``, ``v`` (A', P) float32 and ``t`` (A', 1) float64: the agents' parameters
    and Adam state (a copy of their rows); ``X`` (n, 4) the global proxy states, ``T`` (n, 2)
    the global policy there; ``perms``: one permutation of ``range(n)`` per epoch (drawn on the
    CPU generator, moved here). Minibatches of ``batch`` states, one Adam step each on the
    actor's columns. Every tensor must be on ``flat``'s device; nothing is drawn here."""
    import torch

    a = flat.shape[0]
    for perm in perms:
        for s in range(0, perm.numel(), batch):
            b = perm[s : s + batch]
            xb = X[b][None].expand(a, -1, -1)
            # ``flat`` is contiguous (A', P), as the former per-minibatch gather of the rows was
            logits, cache = nets.forward("actor", xb, flat=flat)
            p = torch.softmax(logits, dim=2)
            g = torch.cat(Nets.backward((p - T[b][None]) / b.numel(), cache), dim=1)
            adam_step_rows(flat, m, v, t, g, nets.actor_size, lr)


def batch_device(configs: Sequence[FrdConfig]) -> str:
    """The torch device (``"cpu"`` or ``"cuda"``) of configs trained in one batch: each
    config's ``device`` resolved (:func:`ldp_audit.training.device.resolve_device`; ``"cuda"``
    without CUDA: InvalidParameterError); configs that resolve to different devices are
    refused (one batch is one set of stacked buffers). Nothing is allocated."""
    from ldp_audit.training.device import resolve_device

    devs = {resolve_device(c.device) for c in configs}
    if len(devs) != 1:
        raise InvalidParameterError(
            f"configs trained together must run on one device, got {sorted(devs)} (their "
            f"device fields: {sorted({c.device for c in configs})})"
        )
    return devs.pop()


def set_row_constants(env: Any, values: Mapping[str, Any]) -> None:
    """Give each row of ``env`` (a ``PrivateGravityCartPole`` of N rows) its own constants:
    ``values[name]`` is an (N,) array of finite values > 0 for every name of
    :data:`~ldp_audit.training.frd.config.PRIVATE_PARAMS` (the constants of the equations of
    motion; gravity included: the wrapper's reset writes it per row).

    :class:`ldp_audit.training.cartpole.PrivateGravityCartPole` steps Gymnasium's vectorised
    ``CartPoleVectorEnv`` physics, whose step broadcasts every constant it reads (``gravity``,
    ``masscart``, ``masspole``, ``total_mass``, ``length``, ``polemass_length``, ``force_mag``)
    over the rows; the two quantities CartPole derives in its constructor (``total_mass =
    masspole + masscart``, ``polemass_length = masspole * length``) are recomputed here."""
    inner = getattr(env, "_env", None)
    if inner is None or not hasattr(inner, "polemass_length"):
        raise InvalidParameterError(
            f"env must be a PrivateGravityCartPole (Gymnasium's CartPoleVectorEnv inside), got "
            f"{type(env).__name__}"
        )
    n = int(env.num_envs)
    arr: dict[str, np.ndarray] = {}
    for name in PRIVATE_PARAMS:
        if name not in values:
            raise InvalidParameterError(f"values must give {name!r} per row, got {sorted(values)}")
        a = np.asarray(values[name], dtype=np.float64)
        if a.shape != (n,) or not np.all(np.isfinite(a)) or np.any(a <= 0):
            raise InvalidParameterError(
                f"{name} must be ({n},) finite values > 0, got {values[name]!r}"
            )
        arr[name] = a.copy()
    for name, a in arr.items():
        setattr(inner, name, a)
    inner.total_mass = arr["masspole"] + arr["masscart"]
    inner.polemass_length = arr["masspole"] * arr["length"]
