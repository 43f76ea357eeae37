"""The fused engine (``engine="fused"``): the lock-step engine with each block of up to 256
lock-steps, CartPole physics included, in ONE compiled call
(:func:`ldp_audit.training.pgc_a3c._fused_kernel.fused_block`), with the same results bit for
bit; it charges each agent when the agent starts rather than when it submits (see
:class:`FusedEngine`).
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError
from ldp_audit.release import Charging, reserve
from ldp_audit.training.pgc_a3c.config import PgcA3cConfig
from ldp_audit.training.pgc_a3c.engine import ACT_BLOCK, Engine, equal_runs
from ldp_audit.training.pgc_a3c.model import DIM, HIDDEN

#: The fused engine charges, per top-up, the next ``_FUSED_RESERVE`` x (rows of the trial)
#: agents of a trial ahead (all their rounds), when fewer than half of that are left.
_FUSED_RESERVE = 8
#: Reports of mechanism randomness pre-drawn per top-up: this many x (rows of the config).
_FUSED_NOISE = 4


#: the per-config arrays of the release fused_block applies, in :func:`_mechanism_row`'s order
_MECH_FIELDS = "mech_kind coord_clip clip_bound prs_dh prs_p0 prs_slope noise_width".split()


def _mechanism_row(c: PgcA3cConfig, mech: Any) -> tuple:
    """One config's entries of :data:`_MECH_FIELDS`: the mechanism's kind (0 Laplace, 1 none:
    clip only, 2 PRS), whether the clip is per coordinate, the clip bound (C/2; PRS: C), PRS's
    d_hat, p0 = expit(-bit epsilon) and slope tanh(bit epsilon / 2), and the width of the
    randomness pre-drawn per report."""
    from ldp_audit.mechanisms import ProjectedRandomSign

    coord, half = c.clip_kind == "coordinate", c.effective_clip / 2.0
    if c.mechanism == "none":
        return 1, coord, half, 1, 0.0, 0.0, 0
    if c.mechanism != "prs":
        return 0, coord, half, 1, 0.0, 0.0, DIM
    if type(mech) is not ProjectedRandomSign:
        raise InvalidParameterError(
            f"engine='fused' needs the stock PRS mechanism, got {type(mech).__name__}"
        )
    dh, bit_eps = mech.effective_reduced_dim(DIM), mech.bit_epsilon(DIM)
    p0 = 1.0 / (1.0 + math.exp(bit_eps))  # scipy.special.expit(-e)
    return 2, coord, mech.clip, dh, p0, math.tanh(bit_eps / 2.0), dh * DIM + dh


class FusedEngine(Engine):
    """The lock-step engine with each block of steps in ONE compiled call
    (:func:`ldp_audit.training.pgc_a3c._fused_kernel.fused_block`): same randomness streams,
    same operations in the same order, so the same results bit for bit
    (tests/test_fused_pgc.py).

    What differs is when the ledger is charged: an agent is charged for all its rounds
    *before its first episode starts* (in blocks of agents: one ``ldp_audit.release.reserve``
    block per accountant, topped up with one durable ``Reservation.add`` per block), instead of
    at each submission; the compiled kernel stops before a release that was not reserved.
    Every release is still charged before it is randomised; the
    ledger additionally holds the agents started or reserved but not submitted when a trial
    stopped (at most ``_FUSED_RESERVE`` x n_agents per trial, plus the episodes in flight):
    charged and never released, the conservative direction. Mechanism randomness is drawn
    from each config's own generator in the same order and amounts as the lock-step engine
    uses it, ahead of use, after the agents it will be applied to were charged.
    """

    def __init__(
        self,
        configs: Sequence[PgcA3cConfig],
        seeds: Sequence[int],
        accountants: Sequence[Charging],
        record: Sequence[bool],
    ) -> None:
        super().__init__(configs, seeds, accountants, record)
        G, C = self.G, len(self.configs)
        env = self.env._env
        self.f_state = np.array(env.state, dtype=np.float64, order="C", copy=True)
        self.f_steps = np.asarray(env.steps, dtype=np.int64).copy()
        # observations are float32 values (the state rounded as Gymnasium shows it): a float32
        # episode buffer holds them exactly in half the memory the kernel streams through
        self.obs = np.zeros(self.obs.shape, dtype=np.float32)
        from ldp_audit.training.pgc_a3c._kernels import transpose_row

        # each row's theta as the kernel reads it (it keeps these current, not row_theta)
        self.row_tt = np.empty_like(self.row_theta)
        self.row_wd = np.empty((self.row_theta.shape[0], HIDDEN))
        for i in range(self.row_theta.shape[0]):
            transpose_row(self.row_theta[i], self.row_tt[i], self.row_wd[i])
        self.paid = np.zeros(G, dtype=np.int64)
        self.agent_cap = self.max_sub // self.rounds + self.n_agents
        # per config: mechanism kind and its pre-drawn randomness
        rows = [_mechanism_row(c, m) for c, m in zip(self.configs, self.mechs, strict=True)]
        for name, col in zip(_MECH_FIELDS, zip(*rows, strict=True), strict=True):
            setattr(self, name, np.array(col))
        self.noise_ptr = np.zeros(C, dtype=np.int64)
        self.noise_len = np.zeros(C, dtype=np.int64)
        self.n_thetas = np.array([len(t) for t in self.tr_thetas], dtype=np.int64)
        self.record_c = np.array(self.record, dtype=np.bool_)
        self.bad = np.zeros(1, dtype=np.int64)
        #: nonzero: the kernel returns before its next lock-step (set by :meth:`halt_soon`)
        self.halt = np.zeros(1, dtype=np.int64)
        #: ``profile = True`` before :meth:`run` times its parts (benchmarks/bench_pgc.py):
        #: ``timings`` then maps each of ``_PROFILE_PARTS`` to {"wall": s, "cpu": s}
        #: (perf_counter, process_time) and "calls" to the kernel calls; off (the default), the
        #: hook costs one call of a no-op per part per kernel call
        self.profile = False
        self.timings: dict[str, Any] = {}
        self._lap: Any = _no_lap
        # the kernel's outputs: a step's transcript rows and theta snapshots (16 steps' worth
        # when recording, else room for one step's bookkeeping)
        rec = any(self.record)
        cap = 16 * self.row_trial.size if rec else self.row_trial.size
        self.out_int = np.zeros((6, cap), dtype=np.int64)
        self.out_report = np.zeros((cap if rec else 1, DIM))
        self.out_grad = np.zeros_like(self.out_report)
        self.out_real = np.zeros((2, cap))  # score, gravity
        self.out_n = np.zeros(1, dtype=np.int64)
        self.snap_theta = np.zeros((16 * G if rec else G, DIM))
        self.snap_cfg = np.zeros(self.snap_theta.shape[0], dtype=np.int64)
        self.snap_n = np.zeros(1, dtype=np.int64)
        self._count_rows()
        # the pre-drawn mechanism randomness, in one buffer allocated once: a config tops up
        # when fewer than 2 x its live rows are left, to fewer than (2 + _FUSED_NOISE) x them
        # (rows are only ever dropped, so this bounds every later top-up too)
        k_cap = (2 + _FUSED_NOISE) * max(1, int(self.rows_c.max()))
        self.noise = np.zeros((C, k_cap, max(1, int(self.noise_width.max()))))

    def _count_rows(self) -> None:
        self.rows_g = np.bincount(self.row_trial, minlength=self.G).astype(np.int64)
        self.rows_c = np.bincount(
            self.cfg_of, weights=self.rows_g, minlength=len(self.configs)
        ).astype(np.int64)

    # ---------------------------------------------------------------- what a block needs
    def _charge_ahead(self) -> None:
        """Charge, for every running trial short of them, the next agents it may start (all
        their rounds): ONE durable ``Reservation.add`` (:func:`ldp_audit.release.reserve`) per
        accountant, before any of them plays; ``paid`` is what the kernel may release."""
        nxt, rows, cap = self.next_agent, self.rows_g, self.agent_cap
        low = np.minimum(nxt + rows * (_FUSED_RESERVE // 2), cap)
        short = np.flatnonzero(self.active & (self.paid < low))
        if short.size == 0:
            return
        high = np.minimum(nxt + rows * _FUSED_RESERVE, cap)
        per_acc: dict[int, list[tuple[str, Any]]] = {}
        shared = self.shared_accountant
        for gi, lo, hi in zip(
            short.tolist(), self.paid[short].tolist(), high[short].tolist(), strict=True
        ):
            ci = int(self.cfg_of[gi])
            head = f"{ci}:{int(self.local[gi])}/" if shared else f"{int(self.local[gi])}/"
            ev = self.events[ci]
            reps = int(self.rounds[gi])
            lst = per_acc.setdefault(0 if shared else ci, [])
            lst.extend([(head + str(a), ev) for a in range(lo, hi) for _ in range(reps)])
        self._lap("charge_ids")
        blocks = self.__dict__.setdefault("reservations", {})
        for key, charges in per_acc.items():
            if charges:
                block = blocks.get(key)
                if block is None:
                    # released inside fused_block, which counts them itself (``paid``)
                    block = blocks[key] = reserve(self.accountants[key], itemised=False)
                block.add(charges)  # durable, first, same rows in the same order
        self.paid[short] = high[short]
        self._lap("ledger_charges")

    def _draw_ahead(self) -> None:
        """Top up each config's pre-drawn mechanism randomness (after the charges), drawn
        from its own generator exactly as the mechanism draws it (Laplace: ``rng.laplace(0,
        b, (n, 112))``; PRS: ``rng.random((n, d_hat d + d_hat))``), so the values applied to
        the k-th report are those the lock-step engine applies. In place: a config's unused
        draws move to the front of its rows of ``noise``, the fresh ones follow."""
        left = self.noise_len - self.noise_ptr
        need = (self.mech_kind != 1) & (left < 2 * self.rows_c)
        if not need.any():
            return
        lap = self._lap
        for ci in np.flatnonzero(need).tolist():
            lo, n = int(self.noise_ptr[ci]), int(left[ci])
            buf = self.noise[ci]
            if n and lo:
                buf[:n] = buf[lo : lo + n]  # overlapping rows: NumPy copies through a buffer
            f = max(int(self.rows_c[ci]), 1) * _FUSED_NOISE
            rng, w = self.mech_rngs[ci], int(self.noise_width[ci])
            lap("noise_shift")
            if self.mech_kind[ci] == 0:
                buf[n : n + f, :w] = rng.laplace(0.0, self.mechs[ci].scale, size=(f, w))
            elif w == buf.shape[1]:  # contiguous rows: the generator writes them itself
                rng.random(out=buf[n : n + f])
            else:
                buf[n : n + f, :w] = rng.random((f, w))
            lap("mechanism_draws")
            self.noise_len[ci] = n + f
            self.noise_ptr[ci] = 0

    def _refill_act_block(self) -> None:
        super()._refill_act_block()
        self._lap("acting_uniforms")

    # ---------------------------------------------------------------- transcript and rows
    def _collect(self) -> None:
        n = int(self.out_n[0])
        if n:
            oi = self.out_int[:, :n]
            g = oi[0]
            cfg = self.cfg_of[g]
            first, counts = equal_runs(cfg)
            # the kernel's outputs in the order of the records (run_dir.stack_records)
            cols = (self.local[g], *oi[1:], self.out_report, *self.out_real, self.out_grad)
            for f, k in zip(first.tolist(), counts.tolist(), strict=True):
                for batches, x in zip(self.tr[int(cfg[f])].values(), cols, strict=True):
                    batches.append(x[f : f + k].copy())
            self.out_n[0] = 0
        for j in range(int(self.snap_n[0])):
            self.tr_thetas[int(self.snap_cfg[j])].append(self.snap_theta[j].copy())
        self.snap_n[0] = 0

    _ROW_FIELDS = (*Engine._ROW_FIELDS, "row_tt", "row_wd", "f_steps")

    # ---------------------------------------------------------------- main loop
    def run(self, progress: Any = None) -> None:
        """Run to the end (or to a stop request), kernel call after kernel call.

        Python's cyclic garbage collector is paused while it runs and restored afterwards
        (errors included): the loop and the ledger it charges create no reference cycles, but
        a ledger's per-agent state grows by one object per agent, and the collector's repeated
        walks over it and over everything else the process holds cost the in-process tally
        about half its time (benchmarks/bench_pgc.py, "gc" rows). Memory is still freed by
        reference counting; only cycles wait for the collector's next run.
        """
        if self.profile:
            self._start_profile()
        collector_was_on = gc.isenabled()
        gc.disable()
        try:
            self._run(progress)
        finally:
            if collector_was_on:
                gc.enable()

    def halt_soon(self) -> None:
        """End the kernel call under way at its next lock-step (callable from any thread:
        the CLI's signal watchdog calls it while the main thread is inside the kernel, which
        Python's own handler cannot reach until the call returns). The run's state stays
        consistent: the kernel stops between lock-steps, as when it needs a charge."""
        self.halt[0] = 1

    def _start_profile(self) -> None:
        tm: dict[str, Any] = {k: {"wall": 0.0, "cpu": 0.0} for k in _PROFILE_PARTS}
        tm["calls"] = 0
        wall, cpu = time.perf_counter, time.process_time
        mark = [wall(), cpu()]

        def lap(part: str) -> None:  # the time since the last lap goes to ``part``
            w, c = wall(), cpu()
            t = tm[part]
            t["wall"] += w - mark[0]
            t["cpu"] += c - mark[1]
            mark[0], mark[1] = w, c

        self.timings = tm
        self._lap = lap

    def _run(self, progress: Any) -> None:
        from ldp_audit.training.pgc_a3c._fused_kernel import (
            FUSED_NONFINITE,
            FUSED_PRS_OVERFLOW,
            FUSED_TRIAL_ENDED,
            fused_block,
        )

        agg = self.agg
        lap = self._lap
        while self.active.any() and not (self.stop_requested or self.halt[0]):
            lap("other")
            if self.block_pos[0] >= ACT_BLOCK:
                self._refill_act_block()
            self._charge_ahead()  # 1. charge the agents that may start in the block
            self._draw_ahead()  # 2. then draw the randomness that will be applied
            r_len = self.reset_block.shape[1]
            self._refill_resets_of(
                np.flatnonzero(self.active & (self.reset_ptr + 2 * self.rows_g > r_len))
            )
            lap("reset_draws")
            n0 = int(self.n_sub.sum())
            lap("other")
            if self.stop_requested:  # a signal while charging or drawing: no block after it
                break
            status = fused_block(
                ACT_BLOCK,
                self.f_state, self.f_steps, self.row_gravity, self.row_trial, self.row_worker,
                self.row_agent, self.row_round, self.row_version, self.slot, self.row_tt,
                self.row_wd, self.obs, self.acts, self.rews, self.S,
                self.act_block, self.block_pos, self.sample_g, agg.state, self.book,
                self.next_agent, self.loss,
                self.rounds, self.rows_g, self.gtable, self.glen, self.agtable, self.aglen,
                self.reset_block, self.reset_ptr, self.paid, self.agent_cap, self.cfg_of,
                self.mech_kind, self.coord_clip, self.clip_bound, self.noise, self.noise_ptr,
                self.noise_len, self.prs_dh, self.prs_p0, self.prs_slope, self.rows_c,
                self.record_c, self.recorded_version, self.recorded_index, self.n_thetas,
                self.out_int, self.out_report, self.out_real, self.out_grad,
                self.out_n, self.snap_theta, self.snap_cfg, self.snap_n, self.env_steps, self.bad,
                self.halt,
            )  # fmt: skip
            agg.check_diverged()
            lap("kernel")
            if self.profile:
                self.timings["calls"] += 1
            self._collect()
            lap("transcript")
            if progress is not None:
                progress.update(int(self.n_sub.sum()) - n0)
            what = {
                FUSED_NONFINITE: "a NaN or inf gradient",
                FUSED_PRS_OVERFLOW: "a PRS projection that overflows",
            }.get(status)
            if what is not None:
                gi = int(self.bad[0])
                raise InvalidParameterError(
                    f"x must be finite: trial {int(self.local[gi])} of config "
                    f"{int(self.cfg_of[gi])} produced {what}; nothing of that step was "
                    "released (its agents were charged)"
                )
            if status == FUSED_TRIAL_ENDED:
                # the kernel skips the rows of ended trials; drop them once they are a quarter
                # (their acting streams are never read again, so results do not change)
                live = int(self.active[self.row_trial].sum())
                if 4 * live < 3 * self.row_trial.size:
                    lap("other")
                    keep = self._keep_rows()
                    self.f_state = np.ascontiguousarray(self.f_state[:, keep])
                    self._count_rows()
                    lap("compaction")
        lap("other")


def _no_lap(part: str) -> None:
    """The profile hook when :attr:`FusedEngine.profile` is off."""


#: the parts of :meth:`FusedEngine.run` its profile hook times (``profile = True``)
_PROFILE_PARTS = (
    "kernel",  # the compiled fused_block calls
    "charge_ids",  # building the (agent id, event) pairs to charge
    "ledger_charges",  # Accountant.charge_many (the ledger's code)
    "mechanism_draws",  # rng.laplace / rng.random of the configs' mechanism generators
    "noise_shift",  # moving a config's unused draws to the front of its buffer
    "reset_draws",  # the trials' reset uniforms
    "acting_uniforms",  # the trials' acting uniforms
    "transcript",  # copying the kernel's outputs into the transcript and secrets lists
    "compaction",  # dropping the rows of ended trials
    "other",  # the rest of the Python between kernel calls
)
