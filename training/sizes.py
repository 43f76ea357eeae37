"""Memory and time estimates of the trainers, from their configurations alone.

Each function returns :class:`ldp_audit.limits.Estimate` parts for
:func:`ldp_audit.limits.check_resources`: the arithmetic of what the trainer allocates
(parameters x bytes x copies, per-sample gradients, buffers, transcripts, per-agent state) and
an optimistic lower bound on its floating-point work. The constants are the trainers' own (float32
networks in DP-RL and FedRL, float64 in FRD, CartPole's 500-step episodes); the estimates are
meant to be right within a small factor, which is all a bound against absurd sizes needs
(docs/cli.md, "Size limits").
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from ldp_audit.limits import Estimate, flops_seconds, label

_F32, _F64 = 4, 8
#: CartPole-v1's truncation: the longest episode (steps)
_CARTPOLE_STEPS = 500
#: the shortest CartPole episode (a pole falls in no fewer steps): time lower bounds
_MIN_EPISODE = 8
#: bytes per environment of a vector CartPole (state, counters, masks)
_ENV_BYTES = 128
#: bytes a released row costs in a transcript besides its values (trial, agent, step, ids)
_ROW_META = 48
#: resident memory of one process of the toolkit before its arrays: the interpreter, NumPy,
#: SciPy, the compiled PGC-A3C kernel (measured 0.33-0.40 GiB: benchmarks/memory_sizes.py)
_PROCESS = 300 * 2**20
#: the same without the kernel (``audit``: 129 MiB measured for ``--exact --dim 1``)
_LIGHT_PROCESS = 150 * 2**20
#: the same with PyTorch (DP-RL, FRD, FedRL: 365-500 MiB measured for their smallest runs)
_TORCH_PROCESS = 350 * 2**20
#: bytes per point of the accountant's PLD of a long mixed history (8 doubles), composed at its
#: planner's cap ``ldp_audit.accountant.pld.MAX_POINTS``: 667-723 MiB measured (FedRL, clipped)
_PLD_POINT = 64
_PLD_WHAT = "the accountant's PLD of the spent epsilon"


def dprl_estimates(cfg: Any, *, cli: bool = False) -> list[Estimate]:
    """Parts of one DP-RL run (:class:`~ldp_audit.training.dprl.config.DprlConfig`)."""
    p = int(cfg.n_params)
    h = int(cfg.hidden)
    b = int(cfg.envs)
    reinforce = cfg.algo == "reinforce"
    private = cfg.privacy == "dpsgd"
    n_upd = int(cfg.n_updates)
    nets = 1 if reinforce else 2  # DQN: online and target network
    # parameters, gradients and Adam's two moments of the trained net; the target's parameters;
    # the initial and final parameters as float64
    net_bytes = (4 + (nets - 1)) * p * _F32 + 2 * p * _F64
    if private and not cfg.ghost:  # Opacus materialises every per-sample gradient (and clips)
        batch = b if reinforce else 2 * int(cfg.batch_size)
        net_bytes += 2 * batch * p * _F32
    parts = [Estimate(label(cli, "hidden", "--hidden", h), "the networks", net_bytes)]
    parts.append(Estimate(parts[0].option, "the Python process", _TORCH_PROCESS))
    # rollouts and activations: REINFORCE keeps b whole episodes (states, actions, returns) and
    # the activations of every layer for the backward pass (dropout masks too); DQN a minibatch
    # and one step of the b environments, and its replay memory
    if reinforce:
        roll = b * _CARTPOLE_STEPS * (4 * _F32 + 3 * _F64)
        act = b * _CARTPOLE_STEPS * 4 * h * _F32
    else:
        roll = int(cfg.buffer_size) * (2 * 4 * _F32 + 3 * _F64)
        act = (2 * int(cfg.batch_size) + b) * 6 * h * _F32
    roll += b * _ENV_BYTES
    envs_l = label(cli, "num_envs", "--num-envs", b)
    hidden_l = label(cli, "hidden", "--hidden", h)
    parts.append(Estimate(envs_l, "the environments and rollouts", roll))
    default_b = 8 if reinforce else 1
    act_l = hidden_l if h / 128 >= b / default_b else envs_l
    parts.append(Estimate(act_l, "the activations", act))
    # the transcript: released updates (REINFORCE keeps them), observations (obs-noise: every
    # step), canary projections; the per-episode returns
    episodes = int(cfg.episodes) if reinforce else int(cfg.total_steps) // _MIN_EPISODE + 1
    steps = int(cfg.episodes) * _CARTPOLE_STEPS if reinforce else int(cfg.total_steps)
    size_opt = _driver(cli, _opts(cfg, **{"episodes" if reinforce else "total_steps": 1}))
    trans = episodes * 32 + n_upd * 64
    if private and cfg.keep_updates:
        trans += n_upd * p * _F64
    if cfg.privacy == "obs-noise":
        trans += steps * (4 * _F64 + _ROW_META)
    parts.append(Estimate(size_opt, "the transcript and the returns", trans))
    m = int(cfg.canaries)
    if m:
        # the public directions (QR of an n_params x m Gaussian: three float64 copies), their
        # float32 copy, the included canaries' rows, and a projection per update
        cb = p * m * (3 * _F64 + _F32 + _F32) + n_upd * m * _F64
        parts.append(Estimate(label(cli, "canaries", "--canaries", m), "the canaries", cb))
    # compute: forward + backward (x3) of every sample, per-sample clipping (x2 more)
    if reinforce:
        samples = int(cfg.episodes) * _MIN_EPISODE
        flops = samples * p * (2 + 6 + (4 if private else 0))
    else:
        flops = int(cfg.total_steps) * 2 * p
        flops += n_upd * int(cfg.batch_size) * p * (2 + 6 + (4 if private else 0))
    parts.append(
        Estimate(size_opt, "the training updates", 0.0, flops_seconds(flops, str(cfg.device)))
    )
    ev = int(cfg.eval_episodes)
    if ev:  # the greedy evaluation plays every episode at once: a vector env and activations each
        parts.append(
            Estimate(
                label(cli, "eval_episodes", "--eval-episodes", ev),
                "the greedy evaluation",
                ev * (_ENV_BYTES + 4 * h * _F32),
                flops_seconds(ev * _MIN_EPISODE * 2 * p, str(cfg.device)),
            )
        )
    return parts


def _driver(cli: bool, opts: list[tuple[float, str, str, Any]]) -> str:
    """The label of the option furthest above its default (``(value / default, param, flag,
    value)`` tuples): the one that drives an estimate."""
    _, param, flag, value = max(opts, key=lambda o: o[0])
    return label(cli, param, flag, value)


def _opts(cfg: Any, **defaults: float) -> list[tuple[float, str, str, Any]]:
    """:func:`_driver`'s tuples of ``cfg``'s fields against their ``defaults`` (flag: the
    field's option, ``n_agents`` spelled ``--agents``)."""
    return [(int(getattr(cfg, k)) / d, k, _flag(k), getattr(cfg, k)) for k, d in defaults.items()]


def _flag(param: str) -> str:
    """The command-line option of a config field (``n_agents`` spelled ``--agents``)."""
    return {"n_agents": "--agents"}.get(param, "--" + param.replace("_", "-"))


def frd_estimates(cfgs: Any, *, cli: bool = False) -> list[Estimate]:
    """Parts of FRD / FedAvg training (one :class:`~ldp_audit.training.frd.FrdConfig` or a list
    of them trained together, as ``train_many`` batches them)."""
    cfgs = list(cfgs) if isinstance(cfgs, (list, tuple)) else [cfgs]
    net = mem = trans = per_agent = flops = 0.0
    top: Any = None
    for c in cfgs:
        a = int(c.groups) * int(c.n_agents)
        h, n_l = int(c.hidden), int(c.layers)
        # training.frd.nets.param_layout in closed form (actor 4-h-...-h-2, critic 4-h-...-h-1)
        body = 4 * h + h + (n_l - 1) * (h * h + h)
        p = 2 * body + (h * 2 + 2) + (h * 1 + 1)
        # flat parameters, Adam's m and v, a gradient / update buffer, the float64 model output
        net += a * p * 5 * _F64
        # activations of one step of every agent (actor and critic, forward and backward)
        net += a * int(c.hidden) * int(c.layers) * 8 * _F64
        per_agent += a * (1024 + int(c.max_episodes) * 2 * _F64)
        rounds = int(c.max_episodes) // int(c.exchange_period) + 1
        window = int(c.exchange_period) * int(c.episode_steps)
        mem += a * min(int(c.n_cells), window) * 3 * _F64  # the local proxy memories (sparse)
        if c.mode == "fedavg":
            trans += a * rounds * (p * _F64 + _ROW_META)
        elif c.ldp_epsilon is not None:
            trans += a * rounds * (int(c.ldp_samples) * 2 * _F64 + _ROW_META)
        else:
            trans += a * rounds * (min(int(c.n_cells), window) * 2 * _F64 + _ROW_META)
        episodes = min(int(c.max_episodes), int(c.window))
        flops += a * episodes * _MIN_EPISODE * p * 8
        if top is None or a * p > top[0]:
            top = (a * p, c)
    c = top[1]
    # the option furthest above its default drives the estimate
    opts = _opts(c, groups=1, n_agents=4, hidden=24, layers=2, max_episodes=300)
    drive = _driver(cli, opts)
    # a proxy memory holds min(cells, window) entries: the window of --episode-steps x
    # --exchange-period (500 x 25 by default) is what grows it, --sections ** dims cells (10^8
    # by default) only cap it; an LDP upload holds --ldp-samples
    cells, steps, period = int(c.n_cells), int(c.episode_steps), int(c.exchange_period)
    held = ("episode_steps", steps) if steps / 500 >= period / 25 else ("exchange_period", period)
    o_held = (min(cells, steps * period) / 12_500, held[0], _flag(held[0]), held[1])
    o_ldp = _opts(c, ldp_samples=32) if c.mode != "fedavg" and c.ldp_epsilon is not None else []
    o_up = [] if c.mode == "fedavg" else (o_ldp or [o_held])  # what one upload holds
    return [
        Estimate(drive, "the Python process", _TORCH_PROCESS),
        Estimate(drive, "the agents' networks", net),
        Estimate(drive, "the per-agent state and scores", per_agent),
        Estimate(_driver(cli, [*opts, o_held]), "the proxy memories", mem),
        Estimate(_driver(cli, [*opts, *o_up]), "the transcript of the uploads", trans),
        Estimate(drive, "the agents' training", 0.0, flops_seconds(flops)),
    ]


def fedrl_estimates(cfg: Any, *, cli: bool = False) -> list[Estimate]:
    """Parts of one FedRL training (:class:`~ldp_audit.training.fedrl.FedRLConfig`)."""
    from ldp_audit.accountant.pld import MAX_POINTS
    from ldp_audit.training.fedrl.gridworld import ALPHA_VIEW, BETA_VIEW, N_ACTIONS

    n, h = int(cfg.size), int(cfg.hist_len)
    runs, nm = int(cfg.runs), int(cfg.n_maps)
    steps, ne, bs = int(cfg.train_steps), int(cfg.n_envs), int(cfg.batch_size)
    t_max = int(cfg.episode_limit)
    obs = h * (ALPHA_VIEW**2 + BETA_VIEW**2)  # one transition's two windows (float32)
    # the maps (uint8 obstacles, starts, BFS temporaries) and the padded free-cell grids of the
    # maps played at once and evaluated
    maps = nm * (n * n + 48) + n * n * 3 * _F64
    maps += (ne + int(cfg.eval_maps)) * (n + 16) ** 2 * _F32
    replay = runs * int(cfg.replay_size) * (2 * obs * _F32 + 3 * _F64)
    # the networks (local Q of each agent, DQN-full's, FedRL's MLP): params, grads, Adam, target
    p = 32 * 9 * h + 32 * (ALPHA_VIEW**2 + BETA_VIEW**2 + 34) * 256 + 3 * 256 * N_ACTIONS
    nets = runs * p * 5 * _F32
    act = runs * (2 * bs + ne) * 32 * (ALPHA_VIEW**2 + BETA_VIEW**2) * (h + 4) * _F32
    # the transcript: every released Q row (16 values, the sender's 25-cell window, ids) while
    # training (acting and minibatches, both agents) and evaluating (two FedRL variants)
    rows = runs * (steps * (2 * ne + 3 * bs) + int(cfg.eval_maps) * t_max * 4)
    trans = rows * (N_ACTIONS * _F64 + 25 + _ROW_META) + runs * steps * 64
    flops = runs * len(cfg.methods) * steps * (ne + 3 * bs) * 2 * p
    o_runs, o_hist, o_envs, o_batch, o_steps = _opts(
        cfg, runs=1, hist_len=4, n_envs=16, batch_size=32, train_steps=2000
    )
    # the evaluation: --eval-maps x --t-max (defaults 800 x 38), named by the larger factor
    o_eval = (int(cfg.eval_maps) * t_max / (800 * 38), "eval_maps", "--eval-maps", cfg.eval_maps)
    if t_max / 38 > int(cfg.eval_maps) / 800:
        o_eval = (o_eval[0], "t_max", "--t-max", t_max)
    maps_l = _driver(cli, _opts(cfg, size=8, n_maps=8000))
    trans_l = _driver(cli, [o_steps, o_runs, o_envs, o_batch, o_eval])
    return [
        Estimate(maps_l, "the Python process", _TORCH_PROCESS),
        Estimate(maps_l, "the maps", maps),
        Estimate(_driver(cli, [o_runs, o_hist]), "the replay memories", replay),
        Estimate(_driver(cli, [o_runs, o_hist, o_envs, o_batch]), "the networks", nets + act),
        Estimate(trans_l, "the transcript of the released Q outputs", trans),
        Estimate(trans_l, "the training", 0.0, flops_seconds(flops, str(cfg.device))),
        Estimate(label(cli, "clip_outputs", "--clip-outputs", cfg.clip_outputs), _PLD_WHAT,
                 0.0 if cfg.clip_outputs is None else _PLD_POINT * MAX_POINTS),  # its privacy table
    ]  # fmt: skip


def pgc_estimates(
    cfgs: Any, record: Any = None, *, cli: bool = False, processes: int = 1
) -> list[Estimate]:
    """Parts of PGC-A3C trials run in one lock-step batch (one
    :class:`~ldp_audit.training.pgc_a3c.PgcA3cConfig` or a list; ``record``: whether each
    keeps its transcript, default yes) by ``processes`` processes (a reproduction's parent and
    its workers)."""
    from ldp_audit.accountant.ledger_tally import SLOT_BYTES
    from ldp_audit.training.pgc_a3c.model import DIM

    cfgs = list(cfgs) if isinstance(cfgs, (list, tuple)) else [cfgs]
    rec = [True] * len(cfgs) if record is None else [bool(r) for r in record]
    res = agents = trans = flops = 0.0
    top = max(cfgs, key=lambda c: int(c.trials) * int(c.max_submissions))
    for c, r in zip(cfgs, rec, strict=True):
        cells = int(c.trials) * int(c.max_submissions)
        # zeta, the per-submission bookkeeping, the results' copies; the tally of the charges
        # (agents charged once: runs, about a byte each; several rounds: a slot per agent)
        res += cells * 3 * _F64 + (cells * SLOT_BYTES / c.rounds if c.rounds > 1 else cells)
        agents += int(c.trials) * int(c.n_agents) * DIM * 6 * _F64
        if r:  # every report (DIM values) with its trial, agent, submission ids
            trans += cells * (DIM * _F64 + _ROW_META)
        flops += cells * _MIN_EPISODE * DIM * 10
    drive = _driver(cli, _opts(top, trials=20, max_submissions=90_000))
    return [
        Estimate(label(cli, "workers", "--workers", processes - 1) if processes > 1 else drive,
                 "the Python processes", processes * _PROCESS),
        Estimate(drive, "the per-submission results", res),
        Estimate(drive, "the agents", agents),
        Estimate(drive, "the transcript of the reports", trans),
        Estimate(drive, "the trials", 0.0, flops_seconds(flops)),
    ]  # fmt: skip


def pgc_reproduce_estimates(cfg: Any) -> list[Estimate]:
    """``reproduce pgc-a3c`` (:class:`~ldp_audit.training.pgc_a3c.reproduce.ReproduceConfig`): the
    grid's settings and the Figure 2 runs (every one counted: an upper bound), no transcripts,
    in this process and ``workers`` worker processes (none with one worker)."""
    from ldp_audit.training.pgc_a3c.config import PgcA3cConfig

    grid = [PgcA3cConfig(mechanism="none", trials=cfg.trials, max_submissions=cfg.max_submissions)]
    grid *= len(cfg.mechanisms) * len(cfg.epsilons)
    if cfg.figure2:
        fig2 = PgcA3cConfig(
            mechanism="none",
            trials=cfg.figure2_trials or cfg.trials,
            max_submissions=cfg.figure2_submissions or cfg.max_submissions,
        )
        grid += [fig2] * (2 * len(cfg.mechanisms))
    workers = min(int(cfg.workers), len(grid)) if cfg.backend == "local" else 1
    parts = pgc_estimates(
        grid, [False] * len(grid), cli=True, processes=1 + (workers > 1) * workers
    )
    if cfg.figure2 and fig2.trials * fig2.max_submissions > cfg.trials * cfg.max_submissions:
        # the Figure 2 runs are the largest: name the --figure2-* options that made them so
        for old, new in (("trials", "trials"), ("max-submissions", "submissions")):
            value = getattr(cfg, f"figure2_{new}")
            parts = (
                parts if value is None else _relabel(parts, f"--{old}", f"--figure2-{new} {value}")
            )
    return parts


def gym_pgc_estimates(cfg: Any, *, record: bool = True, cli: bool = False) -> list[Estimate]:
    """Parts of PGC-A3C on a Gymnasium env
    (:class:`~ldp_audit.training.pgc_a3c_gym.config.GymPgcConfig`, validated: its env's shapes
    known). ``record``: the transcript is kept (a run directory)."""
    d = int(cfg.network.dim)
    trials, agents, subs = int(cfg.trials), int(cfg.n_agents), int(cfg.max_submissions)
    steps, obs, width = int(cfg.steps), int(cfg.info.obs_dim), int(cfg.network.width)
    cells = trials * subs
    res = cells * 3 * _F64
    # every running agent's parameters (theta, its gradient and the two A3C buffers) and one
    # episode of observations, actions (``width`` numbers each), rewards and values
    ag = trials * agents * (d * 4 * _F64 + (steps + 1) * (obs + 3 + width) * _F64)
    # the reports and the secret gradients, kept as per-submission rows (arrays in dicts) until
    # the run ends, then concatenated and written: about 10 doubles per parameter (9.0 KB per
    # submission measured at d = 112, 4000 -> 20000 submissions; d x 8 B + 48 counted 0.9 KB)
    trans = cells * 10 * d * _F64 if record else 0.0
    flops = cells * _MIN_EPISODE * d * 10
    opts = _opts(cfg, trials=1, max_submissions=2000, n_agents=9, hidden=16)
    drive = _driver(cli, [*opts, (steps / 500, "episode_steps", "--episode-steps", steps)])
    return [
        Estimate(drive, "the Python process", _PROCESS),  # 0.5 MiB without it, 197 measured
        Estimate(drive, "the per-submission results", res),
        Estimate(drive, "the agents and their episodes", ag),
        Estimate(drive, "the transcript of the reports", trans),
        Estimate(drive, "the trials", 0.0, flops_seconds(flops)),
    ]


def combine(jobs: list[list[Estimate]], workers: int = 1) -> list[Estimate]:
    """Estimates of several trainings run ``workers`` at a time: memory of the largest one times
    ``workers``, time of all of them summed."""
    big = max(jobs, key=lambda g: sum(e.nbytes for e in g))
    out = [replace(e, nbytes=e.nbytes * max(1, workers), seconds=0.0) for e in big if e.nbytes]
    if workers > 1:  # the processes: the workers drive them
        out = [replace(e, option=f"--workers {workers}") if "process" in e.what else e for e in out]
    out += [replace(e, nbytes=0.0) for g in jobs for e in g if e.seconds]
    return out


def _relabel(parts: list[Estimate], old: str, new: str) -> list[Estimate]:
    return [replace(e, option=new) if e.option.startswith(old + " ") else e for e in parts]


def dprl_reproduce_estimates(s: Any, *, workers: int = 1) -> list[Estimate]:
    """``reproduce dprl`` (:class:`~ldp_audit.training.dprl.config.ReproduceSettings`): the
    noise grid's REINFORCE and DQN runs and the audit table's canary runs (command-line
    labels)."""
    from ldp_audit.training.dprl.config import AUDIT_DQN, AUDIT_REINFORCE, DprlConfig

    grid = (len(s.dpsgd_noise) + len(s.obs_noise)) * int(s.seeds)
    jobs = []
    for algo, kw in (
        ("reinforce", {"episodes": s.episodes}),
        ("dqn", {"total_steps": s.total_steps}),
    ):
        cfg = DprlConfig(algo=algo, privacy="dpsgd", eval_episodes=s.eval_episodes, **kw)
        parts = dprl_estimates(cfg, cli=True)
        jobs.append([replace(e, seconds=e.seconds * grid) for e in parts])
    m = int(s.audit_canaries)
    for base, mm in ((AUDIT_REINFORCE, min(m, 898)), (AUDIT_DQN, m)):
        cfg = DprlConfig(**{**base, "canaries": mm, "delta": s.delta})
        jobs.append(_relabel(dprl_estimates(cfg, cli=True), "--canaries", f"--audit-canaries {m}"))
    return combine(jobs, workers)


def frd_reproduce_estimates(s: Any, *, workers: int = 1) -> list[Estimate]:
    """``reproduce frd`` (:class:`~ldp_audit.training.frd.reproduce.ReproduceSettings`): every
    sweep config (counted as if trained together: an upper bound) and the leak runs."""
    from ldp_audit.training.frd.config import FrdConfig, setting_config

    common = dict(groups=s.groups, max_episodes=s.max_episodes, threshold=s.threshold)
    sweep = [setting_config(st, n_agents=int(n), **common) for st in s.settings for n in s.agents]
    jobs = [frd_estimates(sweep, cli=True)]
    if s.leak:
        victims = FrdConfig(groups=int(s.leak_groups), n_agents=4)
        jobs.append(
            _relabel(frd_estimates(victims, cli=True), "--groups", f"--leak-groups {s.leak_groups}")
        )
        shadow = FrdConfig(groups=max(2, math.ceil(int(s.leak_shadow) * 3 / 4)), n_agents=4)
        jobs.append(
            _relabel(frd_estimates(shadow, cli=True), "--groups", f"--leak-shadow {s.leak_shadow}")
        )
    return combine(jobs, workers)


def fedrl_reproduce_estimates(rc: Any, *, workers: int = 1) -> list[Estimate]:
    """``reproduce fedrl`` (:class:`~ldp_audit.training.fedrl.reproduce.ReproConfig`): Table 1
    per size (a task per (method, run): one run's memory, no transcript kept), Figure 4 per
    history length (no transcript), the attack runs (one recorded run each)."""
    from ldp_audit.accountant.pld import MAX_POINTS as PLD_CAP
    from ldp_audit.training.fedrl.config import FedRLConfig

    kw = dict(n_maps=rc.n_maps, map_seed=rc.seed, n_envs=rc.n_envs, eval_maps=rc.eval_maps)
    held = "the transcript"  # Table 1 and Figure 4 train with record=False
    jobs = []
    for i, size in enumerate(rc.sizes):  # one run per task, --runs of them per method
        cfg = FedRLConfig(size=size, hist_len=rc.hist_len, train_steps=rc.steps_for(i), runs=1,
                          **kw)  # fmt: skip
        parts = _relabel(fedrl_estimates(cfg, cli=True), "--runs", f"--runs {rc.runs}")
        jobs.append([replace(e, seconds=e.seconds * rc.runs) for e in parts if held not in e.what])
    for h in rc.hist_lens:
        cfg = FedRLConfig(size=max(rc.sizes), hist_len=h, train_steps=rc.fig4_train_steps(),
                          runs=rc.fig4_runs, **kw)  # fmt: skip
        parts = _relabel(fedrl_estimates(cfg, cli=True), "--runs", f"--fig4-runs {rc.fig4_runs}")
        if rc.fig4_steps is not None:
            parts = _relabel(parts, "--train-steps", f"--fig4-steps {rc.fig4_steps}")
        jobs.append([e for e in parts if held not in e.what])
    kw["eval_maps"] = min(rc.eval_maps, 200)
    cfg = FedRLConfig(size=rc.sizes[0], hist_len=rc.hist_len, train_steps=rc.attack_steps,
                      runs=1, methods=("fedrl",), **kw)  # fmt: skip
    flag = f"--attack-steps {rc.attack_steps}"
    attack = [replace(e, option=flag) for e in fedrl_estimates(cfg, cli=True)]
    jobs += [attack] * (2 * len(rc.attack_sigmas))  # with and without clipping
    # the PLD of a clipped attack run's spent epsilon (one per clipped run at once)
    clipped = min(int(workers), len(rc.attack_sigmas))
    pld = Estimate(flag, _PLD_WHAT, clipped * _PLD_POINT * PLD_CAP)
    return combine(jobs, workers) + [pld]


def frd_attack_estimates(cfg: Any, n_shadow: int, **_: Any) -> list[Estimate]:
    """``attack frd``: the shadow run (the run's config with ``ceil(n_shadow * k / n_agents)``
    groups, as :func:`ldp_audit.attacks.frd.run` trains it)."""
    k = len(cfg.candidates)  # the private parameter's candidates (gravity or another)
    groups = max(2, math.ceil(int(n_shadow) * k / int(cfg.n_agents)))
    scfg = replace(cfg, groups=groups)
    parts = frd_estimates(scfg, cli=True)
    return [replace(e, option=f"--shadow {n_shadow}") for e in parts]


def attack_estimates(
    agents: int, shadow: int, reports: int, subs: int = 0, sweep: int = 0
) -> list[Estimate]:
    """A simulated ``attack dynamics|membership``, or with ``sweep`` cells run at once
    (``--workers``) one of ``attack sweep`` at its largest ``reports``: (agents + 3 shadow sets)
    x T reports of 112 float64 values and their statistics per cell, the honest theta's run
    (``subs`` submissions, 3 float64 each), the processes (a pool's workers and its parent)."""
    opts = [(agents / 300, "--agents", agents), (shadow / 1000, "--shadow", shadow)]
    opts += [] if sweep else [(reports, "--reports-per-agent", reports)]
    drive, held = "{1} {2}".format(*max(opts)), (agents + 3 * shadow) * reports * 1792
    # fmt: off
    return [Estimate(drive, "the Python processes", _PROCESS * (1 + sweep if sweep > 1 else 1)),
            Estimate(drive, "the simulated reports", held * max(1, sweep)),
            Estimate(f"--train-submissions {subs}", "the honest theta's run", 24 * subs)]
    # fmt: on


def audit_probe_estimates(d: int) -> list[Estimate]:
    """``audit --exact``: its probe draws 20,000 outputs of each input at once (4 float64 arrays
    of d values) in a process without the PGC-A3C kernel or PyTorch."""
    flag = f"--exact with --dim {d}"
    return [Estimate(flag, "the Python process", _LIGHT_PROCESS),
            Estimate(flag, "the exact epsilon's probe draws", 20_000 * d * _F64 * 4)]  # fmt: skip
