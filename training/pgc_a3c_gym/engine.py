"""The lock-step engine of PGC-A3C on a Gymnasium environment: every agent's episode, its
report released through the one release path, the aggregator's step.

Part of :mod:`ldp_audit.training.pgc_a3c_gym`: :func:`~ldp_audit.training.pgc_a3c_gym.trainer.train`
drives it; it returns the CartPole engine's
:class:`~ldp_audit.training.pgc_a3c.config.TrainResult` (``stopped_at_target`` None).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError
from ldp_audit.training.gym_envs import make_param_vector_env
from ldp_audit.training.pgc_a3c.config import TrainResult
from ldp_audit.training.pgc_a3c.engine import equal_runs
from ldp_audit.training.pgc_a3c.privacy import privacy_summary, privatize_reports
from ldp_audit.training.pgc_a3c.run_dir import TRANSCRIPT_KEYS, stack_records
from ldp_audit.training.pgc_a3c_gym.config import GymPgcConfig
from ldp_audit.training.pgc_a3c_gym.model import SEED_BOUND, episode_loss

BLOCK = 256  # acting uniforms drawn per trial in blocks of this many lock-steps


class Engine:
    """All agents of all trials in lock-step over one ParamVectorEnv."""

    def __init__(self, cfg: GymPgcConfig, seed: int, accountant: Any, record: bool) -> None:
        self.cfg, self.seed, self.acc, self.record = cfg, seed, accountant, record
        self.net = cfg.network
        k, n = cfg.trials, cfg.n_agents
        self.R = k * n
        self.row_trial = np.repeat(np.arange(k), n)
        self.row_worker = np.tile(np.arange(n), k)
        from ldp_audit.training.pgc_a3c.aggregator import Aggregator
        from ldp_audit.training.pgc_a3c.engine import TrialStream, mechanism_rng

        # the CartPole engine's streams: initial theta, acting uniforms, resets; the noise
        self.streams = [TrialStream(seed, t) for t in range(k)]
        self.mech_rng = mechanism_rng(seed)
        self.mechanism = cfg.make_mechanism()
        theta0 = np.stack([self.net.init(st.init) for st in self.streams])
        self.agg = Aggregator(theta0, cfg.eta, cfg.effective_buffer_size)
        self.cand = np.asarray(cfg.values, dtype=np.float64)
        self.steps = cfg.steps
        self.env = make_param_vector_env(
            cfg.info, cfg.private_param, self.R, max_episode_steps=self.steps
        )
        self.n_sub = np.zeros(k, dtype=np.int64)
        self.next_agent = np.zeros(k, dtype=np.int64)
        self.zeta = np.full((k, cfg.max_submissions), np.nan)
        self.env_steps = 0
        # per row: the agent, its round, its value, its theta copy and the snapshot index
        self.agent = np.zeros(self.R, dtype=np.int64)
        self.round = np.zeros(self.R, dtype=np.int64)
        self.value = np.zeros(self.R)
        self.theta = np.zeros((self.R, self.net.dim))
        self.tidx = np.zeros(self.R, dtype=np.int64)
        self.snaps: list[np.ndarray] = []
        self.snap_ver = np.full(k, -1, dtype=np.int64)
        self.snap_idx = np.zeros(k, dtype=np.int64)
        self.t = np.zeros(self.R, dtype=np.int64)
        self.obs = np.zeros((self.R, self.steps + 1, self.net.obs_dim))
        self.act = self.net.actions(self.R, self.steps)
        self.rew = np.zeros((self.R, self.steps))
        # per-submission batches in the order of run_dir.stack_records (the secrets last)
        self.rec: dict[str, list[np.ndarray]] = {
            k: [] for k in (*TRANSCRIPT_KEYS[:-1], "value", "gradient")
        }
        self.ublock = np.zeros((self.R, BLOCK, self.net.draws))
        self.upos = BLOCK

    # -------------------------------------------------------------------------------- helpers
    def _theta_index(self, trial: int) -> int:
        v = int(self.agg.version[trial])
        if self.snap_ver[trial] != v:
            self.snaps.append(self.agg.theta[trial].copy())
            self.snap_ver[trial] = v
            self.snap_idx[trial] = len(self.snaps) - 1
        return int(self.snap_idx[trial])

    def _start(self, rows: np.ndarray, new_agent: np.ndarray) -> np.ndarray:
        """(Re)start the episodes of ``rows`` (row order); returns their first observations."""
        seeds = []
        for r, new in zip(rows.tolist(), new_agent.tolist(), strict=True):
            tr = int(self.row_trial[r])
            rr = self.streams[tr].reset
            if new:
                self.agent[r] = self.next_agent[tr]
                self.next_agent[tr] += 1
                self.round[r] = 0
                self.value[r] = self.cand[int(rr.integers(self.cand.size))]
            else:
                self.round[r] += 1
            seeds.append(int(rr.integers(0, SEED_BOUND)))
            self.theta[r] = self.agg.theta[tr]
            self.tidx[r] = self._theta_index(tr)
        self.env.set_param(rows, self.value[rows])
        mask = np.isin(np.arange(self.R), rows)
        o, _ = self.env.reset(seed=seeds, options={"reset_mask": mask})
        self.t[rows] = 0
        self.rew[rows] = 0.0  # a score sums its own episode's rewards only
        return np.asarray(o, dtype=np.float64).reshape(self.R, -1)[rows]

    def _rank(self, rows: np.ndarray) -> np.ndarray:
        """Each of ``rows``' (sorted) rank among the rows of its trial."""
        first, counts = equal_runs(self.row_trial[rows])
        return np.arange(rows.size) - np.repeat(first, counts)

    def _uniforms(self) -> np.ndarray:
        if self.upos == BLOCK:
            n = self.cfg.n_agents
            for tr in range(self.cfg.trials):
                u = self.streams[tr].act.random((BLOCK, n, self.net.draws))
                self.ublock[tr * n : (tr + 1) * n] = u.transpose(1, 0, 2)
            self.upos = 0
        u = self.ublock[:, self.upos]
        self.upos += 1
        return u

    # -------------------------------------------------------------------------------- the loop
    def run(self, bar: Any = None) -> None:
        cfg, R = self.cfg, self.R
        cur = self._start(np.arange(R), np.ones(R, dtype=bool))  # (R, obs_dim) float64
        live = np.ones(cfg.trials, dtype=bool)
        sample = cfg.acting == "sample"
        rows_all = np.arange(R)
        while live.any():
            alpha_tr = np.maximum(0.0, cfg.alpha_start - self.n_sub / cfg.alpha_decay)
            alpha = alpha_tr[self.row_trial]
            a = self.net.act(self.theta, cur, self._uniforms(), alpha, sample)
            t = self.t
            self.obs[rows_all, t] = cur
            self.act[rows_all, t] = a
            nxt, r, term, trunc, _ = self.env.step(a)
            nxt = np.asarray(nxt, dtype=np.float64).reshape(R, -1)
            self.rew[rows_all, t] = r
            self.env_steps += int(live[self.row_trial].sum())
            t += 1
            done = term | trunc | (t == self.steps)
            cur = nxt
            if not done.any():
                continue
            ended = np.flatnonzero(done)
            self.obs[ended, t[ended]] = nxt[ended]
            # the reports of this step, in row order, capped at max_submissions per trial
            take = ended[
                self._rank(ended) < cfg.max_submissions - self.n_sub[self.row_trial[ended]]
            ]
            if take.size:
                self._submit(take, term, bar)
            live &= self.n_sub < cfg.max_submissions
            if not live.any():
                break
            new_agent = self.round[ended] + 1 >= cfg.rounds
            cur[ended] = self._start(ended, new_agent)

    def _submit(self, rows: np.ndarray, term: np.ndarray, bar: Any) -> None:
        cfg = self.cfg
        ep = (self.obs[rows], self.act[rows], self.rew[rows], self.t[rows], ~term[rows])
        grads = episode_loss(cfg, self.theta[rows], *ep)
        if not np.all(np.isfinite(grads)):
            raise InvalidParameterError(
                "a gradient is not finite (theta diverged); nothing of this step was released"
            )
        trial = self.row_trial[rows]
        ids = [f"{t}/{a}" for t, a in zip(trial.tolist(), self.agent[rows].tolist(), strict=True)]
        rel = privatize_reports(
            grads,
            mechanism=self.mechanism,
            accountant=self.acc,
            agent_ids=ids,
            trial=trial,
            agent=self.agent[rows],
            rng=self.mech_rng,
            clip=cfg.effective_clip if cfg.mechanism == "none" else None,
        )
        sub = self.n_sub[trial] + self._rank(rows)
        np.add.at(self.n_sub, trial, 1)
        score = ep[2][:, : int(ep[3].max())].sum(axis=1)  # the same sum as before, bit for bit
        self.zeta[trial, sub] = score
        self.agg.receive(rel)  # eq. 22 on sealed reports only, in row order
        if self.record:
            row = (trial, self.agent[rows], self.row_worker[rows], self.round[rows], sub,
                   self.tidx[rows], np.array(rel.values, dtype=np.float64), score,
                   self.value[rows], grads)  # fmt: skip
            for batches, x in zip(self.rec.values(), row, strict=True):
                batches.append(x)
        if bar is not None:
            bar.update(rows.size)

    def result(self, seconds: float) -> TrainResult:
        tr = sec = None
        if self.record:
            tr, sec = stack_records(self.rec, self.snaps, self.net.dim)
        return TrainResult(
            config=self.cfg,
            seed=self.seed,
            zeta=self.zeta,
            theta=self.agg.theta.copy(),
            submissions=self.n_sub.copy(),
            privacy=privacy_summary(self.cfg, self.next_agent),
            env_steps=self.env_steps,
            seconds=seconds,
            transcript=tr,
            secrets=sec,
        )
