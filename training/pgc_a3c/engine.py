"""The lock-step engine: every agent of every trial (of every config of a grid) in lock-step.

The ``n_agents`` workers of a trial step together; a worker copies the current theta when its
episode starts and submits when it ends; reports arriving at the same step are applied in worker
order; workers restart with the theta after those updates. One vectorised CartPole over all
rows, one compiled acting pass per step, one compiled backward over the agents whose episodes
ended at that step: there is no per-step Python loop over agents.

Single-round mode: every episode is a new agent with a fresh gravity psi ~ U{gravities};
``rounds=T``: an agent plays T consecutive episodes (same gravity, fresh theta each time) and
submits each at epsilon/T (section 3.2.1). ``max_submissions`` caps submissions per trial; the
episodes still running when a trial stops are discarded (never released, never charged).

Randomness: ``seed`` -> ``SeedSequence(seed, spawn_key=(0, k))`` per trial k (initial theta,
acting uniforms, resets) and ``spawn_key=(1,)`` for the config's mechanism noise; a trial's
acting and reset streams are consumed in blocks independently of which other trials run beside
it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError
from ldp_audit.mechanisms import Mechanism
from ldp_audit.release import Charging, release_many
from ldp_audit.training.cartpole import PrivateGravityCartPole, initial_states
from ldp_audit.training.pgc_a3c._kernels import (
    TrialBook,
    act_and_record,
    ended_episodes,
    episode_gradients_kernel,
    record_scores,
)
from ldp_audit.training.pgc_a3c.aggregator import Aggregator
from ldp_audit.training.pgc_a3c.config import PgcA3cConfig, TrainResult
from ldp_audit.training.pgc_a3c.model import DIM, OBS_DIM, init_theta
from ldp_audit.training.pgc_a3c.privacy import privacy_summary, report_request
from ldp_audit.training.pgc_a3c.run_dir import TRANSCRIPT_KEYS, stack_records

#: Acting uniforms are drawn per trial in blocks of this many lock-steps.
ACT_BLOCK = 256
#: Reset uniforms (1 for gravity + 4 for the initial state) drawn per trial in blocks.
RESET_BLOCK = 256

# per-submission arrays recorded: the transcript's rows (run_dir.TRANSCRIPT_KEYS less the theta
# table) and the secrets the attacker must not see
_TR_KEYS = (*(k for k in TRANSCRIPT_KEYS if k != "thetas"), "gravity", "gradient")


def equal_runs(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start index and length of each run of equal values in a sorted 1-D array."""
    edges = np.empty(x.size + 1, dtype=bool)
    edges[0] = edges[-1] = True
    np.not_equal(x[1:], x[:-1], out=edges[1:-1])
    pos = np.flatnonzero(edges)
    return pos[:-1], pos[1:] - pos[:-1]


def padded(rows: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """The float rows (of any lengths) as one zero-padded table, and their lengths."""
    lengths = np.array([len(r) for r in rows], dtype=np.int64)
    table = np.zeros((len(rows), max(1, int(lengths.max(initial=0)))))
    for i, r in enumerate(rows):
        table[i, : lengths[i]] = r
    return table, lengths


class TrialStream:
    """A trial's acting/reset randomness, consumed in blocks (independent of batching)."""

    def __init__(self, seed: int, trial: int) -> None:
        ss = np.random.SeedSequence(seed, spawn_key=(0, trial))
        self.init, self.act, self.reset = (np.random.default_rng(s) for s in ss.spawn(3))


def mechanism_rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(1,)))


class Engine:
    """Runs a list of configs in one lock-step batch; see the module docstring."""

    def __init__(
        self,
        configs: Sequence[PgcA3cConfig],
        seeds: Sequence[int],
        accountants: Sequence[Charging],
        record: Sequence[bool],
    ) -> None:
        self.configs = list(configs)
        self.stop_requested = False  # set by a SIGINT/SIGTERM handler: stop at the next step
        steps = {c.episode_steps for c in self.configs}
        if len(steps) != 1:
            raise InvalidParameterError(
                f"configs of one grid must share episode_steps, got {sorted(steps)}"
            )
        self.S = steps.pop()
        self.seeds = [int(s) for s in seeds]
        self.accountants = list(accountants)
        # one accountant object for every config (train_grid without ledgers or run dirs):
        # agent ids get a "<config>:" prefix and each step is charged in one transaction
        self.shared_accountant = len(self.accountants) > 1 and all(
            a is self.accountants[0] for a in self.accountants
        )
        self.record = list(record)
        self.mechs: list[Mechanism] = [c.make_mechanism() for c in self.configs]
        self.events = [m.event() for m in self.mechs]  # each report's ledger event
        self.mech_rngs = [mechanism_rng(s) for s in self.seeds]

        # ---- per trial (global index g) ----
        trials = [c.trials for c in self.configs]
        cfg_of = self.cfg_of = np.repeat(np.arange(len(trials), dtype=np.int64), trials)
        self.local = np.concatenate([np.arange(k, dtype=np.int64) for k in trials])
        self.streams = [
            TrialStream(s, k) for s, n in zip(self.seeds, trials, strict=True) for k in range(n)
        ]
        thetas = [init_theta(st.init) for st in self.streams]
        G = self.G = cfg_of.size

        def per(attr: str, dtype: Any = np.float64) -> np.ndarray:
            return np.array([getattr(self.configs[c], attr) for c in cfg_of], dtype=dtype)

        # eqs. 15-18's constants per trial (gamma, lam, beta, literal), as the kernels take them
        self.loss = (per("gamma"), per("lam"), per("beta"), per("target", object) == "literal-eq18")
        self.alpha0, self.alpha_decay = per("alpha_start"), per("alpha_decay")
        self.sample_g = per("acting", object) == "sample"
        self.max_sub = per("max_submissions", np.int64)
        self.rounds = per("rounds", np.int64)
        self.n_agents = per("n_agents", np.int64)
        self.stop_target = per("stop_at_target", bool)
        self.target, self.window = per("target_score"), per("window", np.int64)
        self.agg = Aggregator(
            np.stack(thetas),
            per("effective_aggregator_lr"),
            per("effective_buffer_size", np.int64),
            optimizer=list(per("aggregator", object)),
        )
        # gravity table per trial, padded: psi = table[g, floor(u * len_g)]
        self.gtable, self.glen = padded([self.configs[c].gravities for c in cfg_of])
        # fixed per-agent gravities (canaries), per trial, padded: agent a < aglen[g] has
        # agtable[g, a] (aglen 0 when not set)
        self.agtable, self.aglen = padded([self.configs[c].agent_gravities or () for c in cfg_of])

        self.n_sub = np.zeros(G, dtype=np.int64)
        self.next_agent = np.zeros(G, dtype=np.int64)
        self.active = np.ones(G, dtype=bool)
        self.at_target = np.zeros(G, dtype=bool)
        # zeta_n of every trial in one flat array (trial g owns [zoff[g], zoff[g] + max_sub[g]))
        self.zoff = np.concatenate([[0], np.cumsum(self.max_sub)[:-1]]).astype(np.int64)
        self.zeta_flat = np.full(int(self.max_sub.sum()), np.nan)
        self.alpha_g = np.maximum(0.0, self.alpha0 - self.n_sub / self.alpha_decay)
        self.book = TrialBook._make(getattr(self, k) for k in TrialBook._fields)
        self.env_steps = np.zeros(1, dtype=np.int64)  # (1,): the fused kernel counts in place

        # ---- per row (trial-major, worker order) ----
        self.row_trial = np.repeat(np.arange(G), self.n_agents)
        self.row_worker = np.concatenate([np.arange(n) for n in self.n_agents])
        E = self.row_trial.size
        self.row_agent = np.zeros(E, dtype=np.int64)
        self.row_round = np.zeros(E, dtype=np.int64)
        self.row_gravity = np.zeros(E)
        self.row_theta = np.zeros((E, DIM))
        self.row_version = np.full(E, -1, dtype=np.int64)
        self.obs = np.zeros((E, self.S + 1, OBS_DIM))  # s_0..s_T of each row's episode
        self.acts = np.zeros((E, self.S), dtype=np.int8)
        self.rews = np.zeros((E, self.S), dtype=np.float32)
        # row -> buffer row of obs/acts/rews: dropping finished trials' rows (_compact) only
        # renumbers the rows, it never moves the episode buffers
        self.slot = np.arange(E, dtype=np.int64)
        self.env = PrivateGravityCartPole(np.full(E, 9.8), episode_steps=self.S)
        self.actions = np.zeros(E, dtype=np.int64)

        # ---- randomness in blocks ----
        self.act_block = np.zeros((ACT_BLOCK, E))
        self.block_pos = np.array([ACT_BLOCK], dtype=np.int64)  # (1,), as the fused kernel's
        r_len = max(RESET_BLOCK, 2 * int(self.n_agents.max()))  # holds any step's restarts
        self.reset_block = np.zeros((G, r_len, 5))
        self.reset_ptr = np.full(G, r_len, dtype=np.int64)

        # ---- transcript (per config) ----
        self.tr: list[dict[str, list[np.ndarray]]] = [
            {k: [] for k in _TR_KEYS} for _ in self.configs
        ]
        self.tr_thetas: list[list[np.ndarray]] = [[] for _ in self.configs]
        self.recorded_version = np.full(G, -1, dtype=np.int64)
        self.recorded_index = np.full(G, -1, dtype=np.int64)

        self._start_rows(np.arange(E), new_agent=np.ones(E, dtype=bool))

    # ------------------------------------------------------------------------------ streams
    def _refill_act_block(self) -> None:
        """The next ``ACT_BLOCK`` acting uniforms of every row, per trial from its own stream,
        drawn only for the rows of running trials (the fused engine keeps the rows of ended
        trials until it drops them; their streams are never read again), into the same buffer
        while the row count is unchanged."""
        rt = self.row_trial
        first, counts = equal_runs(rt)
        blk = self.act_block
        if blk.shape != (ACT_BLOCK, rt.size):
            blk = np.empty((ACT_BLOCK, rt.size))
        for f, n in zip(first.tolist(), counts.tolist(), strict=True):
            if self.active[rt[f]]:
                blk[:, f : f + n] = self.streams[int(rt[f])].act.random((ACT_BLOCK, n))
        self.act_block = blk
        self.block_pos[0] = 0

    def _take_resets(self, g: np.ndarray) -> np.ndarray:
        """5 uniforms per restart, rows grouped by trial in order; consumed per trial."""
        first, counts = equal_runs(g)
        tg = g[first]
        self._refill_resets_of(tg[self.reset_ptr[tg] + counts > self.reset_block.shape[1]])
        rank = np.arange(g.size) - np.repeat(first, counts)
        out = self.reset_block[g, self.reset_ptr[g] + rank]
        self.reset_ptr[tg] += counts
        return out

    def _refill_resets_of(self, trials: np.ndarray) -> None:
        """Move each of ``trials``' unused reset uniforms to the front of its block and draw
        the rest from its stream (the values ``random((used, 5))`` gives)."""
        r_len = self.reset_block.shape[1]
        for gi in trials.tolist():
            p = int(self.reset_ptr[gi])
            blk = self.reset_block[gi]
            blk[: r_len - p] = blk[p:]  # overlapping rows: NumPy copies through a buffer
            self.streams[gi].reset.random(out=blk[r_len - p :])
            self.reset_ptr[gi] = 0

    # ------------------------------------------------------------------------------ restarts
    def _start_rows(self, rows: np.ndarray, new_agent: np.ndarray) -> None:
        """Start an episode in ``rows`` (sorted): copy the current theta, maybe a new agent."""
        g = self.row_trial[rows]
        u = self._take_resets(g)
        na_rows, na_g = rows[new_agent], g[new_agent]
        if na_rows.size:
            first, counts = equal_runs(na_g)
            rank = np.arange(na_g.size) - np.repeat(first, counts)
            self.row_agent[na_rows] = self.next_agent[na_g] + rank
            self.next_agent[na_g[first]] += counts
            self.row_round[na_rows] = 0
            n_g = self.glen[na_g]  # psi uniform over the config's gravities
            idx = np.minimum((u[new_agent, 0] * n_g).astype(np.int64), n_g - 1)
            self.row_gravity[na_rows] = self.gtable[na_g, idx]
            a = self.row_agent[na_rows]
            fixed = a < self.aglen[na_g]
            self.row_gravity[na_rows[fixed]] = self.agtable[na_g[fixed], a[fixed]]
        self.row_round[rows[~new_agent]] += 1
        th = self.agg.theta[g]
        self.row_theta[rows] = th
        self.env._reset_rows_unchecked(rows, initial_states(u[:, 1:]), self.row_gravity[rows])
        if not any(self.record):
            return
        for gi in np.unique(g).tolist():  # each broadcast theta recorded once
            ci = int(self.cfg_of[gi])
            if self.record[ci] and self.recorded_version[gi] != self.agg.version[gi]:
                self.tr_thetas[ci].append(self.agg.theta[gi].copy())
                self.recorded_version[gi] = self.agg.version[gi]
                self.recorded_index[gi] = len(self.tr_thetas[ci]) - 1
        self.row_version[rows] = self.recorded_index[g]

    # ------------------------------------------------------------------------------ main loop
    def run(self, progress: Any = None) -> None:
        while self.active.any() and not self.stop_requested:
            if self.block_pos[0] >= ACT_BLOCK:
                self._refill_act_block()
            u = self.act_block[self.block_pos[0]]
            self.block_pos += 1
            env = self.env._env
            t = env.steps.copy()  # step() increments in place
            # alpha-greedy (section 4): alpha = max{0, 0.5 - n/1800}; records s_t and a_t
            act_and_record(
                env.state,
                self.row_theta,
                u,
                self.alpha_g[self.row_trial],
                self.sample_g[self.row_trial],
                t,
                self.obs,
                self.acts,
                self.actions,
                self.slot,
            )
            obs, r, term, trunc = self.env._step_unchecked(self.actions)
            E = self.row_trial.size
            self.rews[self.slot, t] = r
            self.env_steps += E
            done = term | trunc
            if done.any():
                n0 = int(self.n_sub.sum())
                self._on_done(np.flatnonzero(done), t, obs, term, trunc)
                if progress is not None:
                    progress.update(int(self.n_sub.sum()) - n0)

    def _on_done(
        self,
        rows: np.ndarray,
        t: np.ndarray,
        obs: np.ndarray,
        term: np.ndarray,
        trunc: np.ndarray,
    ) -> None:
        n = rows.size
        sub, gs, rk = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64)
        lengths, boot = np.empty(n, np.int64), np.empty(n, np.bool_)
        # the cap: a trial's later arrivals beyond max_submissions are discarded
        m = ended_episodes(
            rows, self.row_trial, self.max_sub, self.n_sub, t + 1, term, trunc,
            sub, gs, rk, lengths, boot,
        )  # fmt: skip
        sub, gs, rk, lengths, boot = sub[:m], gs[:m], rk[:m], lengths[:m], boot[:m]
        g = self.row_trial[rows]
        slots = self.slot[sub]
        self.obs[slots, lengths] = obs[sub]  # s_T, the state the episode ended in
        grads = np.empty((sub.size, DIM))
        scores = np.empty(sub.size)  # zeta: steps survived
        episode_gradients_kernel(  # eqs. 15-18, one compiled loop over the ended episodes
            self.row_theta[sub],
            slots,
            self.obs,
            self.acts,
            self.rews,
            lengths,
            boot,
            tuple(x[gs] for x in self.loss),
            grads,
            scores,
        )
        sub_index = self.n_sub[gs] + rk
        cfg = self.cfg_of[gs]  # sorted: configs own contiguous blocks of trials
        groups, cis, sels = [], [], []
        c_first, c_count = equal_runs(cfg)
        for f, k in zip(c_first.tolist(), c_count.tolist(), strict=True):
            ci = int(cfg[f])
            sel = slice(f, f + k)
            c = self.configs[ci]
            lt, ag = self.local[gs[sel]], self.row_agent[sub[sel]]
            prefix = f"{ci}:" if self.shared_accountant else ""
            ids = [f"{prefix}{a}/{b}" for a, b in zip(lt.tolist(), ag.tolist(), strict=True)]
            clip = c.effective_clip if c.mechanism == "none" else None
            groups.append(
                report_request(
                    grads[sel], self.mechs[ci], ids, gs[sel], ag, self.mech_rngs[ci], clip,
                    self.events[ci], c.clip_kind,
                )
            )  # fmt: skip
            cis.append(ci)
            sels.append(sel)
        if self.shared_accountant:  # one ledger transaction for the whole step
            reports = release_many(groups, accountant=self.accountants[0])
        else:
            reports = [
                release_many([g], accountant=self.accountants[c])[0]
                for g, c in zip(groups, cis, strict=True)
            ]
        # ---------------- trust boundary: only `reports` cross it ----------------
        for ci, sel, report in zip(cis, sels, reports, strict=True):
            if self.record[ci]:
                s = sub[sel]
                row = (self.local[gs[sel]], self.row_agent[s], self.row_worker[s],
                       self.row_round[s], sub_index[sel], self.row_version[s],
                       np.array(report.values), scores[sel], self.row_gravity[s],
                       grads[sel])  # fmt: skip
                for batches, x in zip(self.tr[ci].values(), row, strict=True):
                    batches.append(x)
        self.agg.receive(*reports)
        # zeta_n, submission counts, alpha, and the stop criteria (max_submissions; eqs. 25-26)
        any_ended = record_scores(gs, sub_index, scores, self.book)

        # ---- restart the workers whose episodes ended (trials still running) ----
        still = self.active[g]
        if still.any():
            rr = rows[still]
            new_agent = self.row_round[rr] + 1 >= self.rounds[g[still]]
            self._start_rows(rr, new_agent)
        if any_ended:
            self._compact()

    #: per-row arrays (one entry per running worker) that ``_keep_rows`` filters together
    _ROW_FIELDS: tuple[str, ...] = (
        "row_trial",
        "row_worker",
        "row_agent",
        "row_round",
        "row_gravity",
        "row_theta",
        "row_version",
        "slot",
    )

    def _keep_rows(self) -> np.ndarray:
        """Keep only the rows of running trials in every per-row array (the workers of ended
        trials go); returns the rows kept."""
        keep = np.flatnonzero(self.active[self.row_trial])
        for name in self._ROW_FIELDS:
            setattr(self, name, np.ascontiguousarray(getattr(self, name)[keep]))
        self.act_block = np.ascontiguousarray(self.act_block[:, keep])
        return keep

    def _compact(self) -> None:
        keep = self._keep_rows()
        self.env.select(keep)
        self.actions = np.zeros(keep.size, dtype=np.int64)

    # ------------------------------------------------------------------------------ results
    def results(self, seconds: float) -> list[TrainResult]:
        out = []
        for ci, c in enumerate(self.configs):
            gs = np.flatnonzero(self.cfg_of == ci)
            transcript = secrets = None
            if self.record[ci]:
                transcript, secrets = stack_records(self.tr[ci], self.tr_thetas[ci], DIM)
            out.append(
                TrainResult(
                    config=c,
                    seed=self.seeds[ci],
                    zeta=np.stack(
                        [self.zeta_flat[self.zoff[g] : self.zoff[g] + self.max_sub[g]] for g in gs]
                    ),
                    theta=self.agg.theta[gs].copy(),
                    submissions=self.n_sub[gs].copy(),
                    stopped_at_target=self.at_target[gs].copy(),
                    privacy=privacy_summary(c, self.next_agent[gs]),
                    env_steps=int(self.env_steps[0]),
                    seconds=seconds,
                    transcript=transcript,
                    secrets=secrets,
                )
            )
        return out
