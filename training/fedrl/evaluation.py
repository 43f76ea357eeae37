"""Acting and evaluation: epsilon-greedy action choice, and greedy (or epsilon-greedy) test
episodes of K trained runs on every test map at once (Table 1's SuccRate and AvgRwd).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ldp_audit.training.fedrl.config import FedRLConfig
from ldp_audit.training.fedrl.exchange import Exchange, check_finite
from ldp_audit.training.fedrl.gridworld import N_ACTIONS, MapSet, VectorGridWorld
from ldp_audit.training.fedrl.mechanisms import OutputMechanism


def eps_greedy(q: np.ndarray, eps: float, rng: np.random.Generator) -> np.ndarray:
    greedy = q.argmax(axis=-1)
    explore = rng.random(greedy.shape) < eps
    return np.where(explore, rng.integers(N_ACTIONS, size=greedy.shape), greedy)


def brief(ev: dict[str, Any]) -> dict[str, Any]:
    return {k: ev[k] for k in ("episodes", "successes", "succ_rate", "avg_reward")}


def joint_q(method: str, nets: dict, ex: Any, obs: tuple, tensor: Any, kind: int, **send: Any):
    """The joint Q values (K, n, 16) of ``method`` on alpha's / beta's observations ``obs``
    (numpy; ``tensor`` makes the networks' input of one); FedRL releases both agents' outputs
    (alpha first) through ``ex.send`` with ``send``'s keywords (mech, suffix, map_index)."""
    if method == "dqn-alpha":
        return nets["qa"](tensor(obs[0]))
    if method == "dqn-full":
        return nets["qf"](tensor(obs[0]), tensor(obs[1]))
    ca = ex.send("alpha", nets["qa"](tensor(obs[0])), obs[0], kind, **send)
    cb = ex.send("beta", nets["qb"](tensor(obs[1])), obs[1], kind, **send)
    import torch

    return nets["g"](torch.cat([ca, cb], dim=-1))


def eval_runs(
    cfg: FedRLConfig,
    maps: MapSet,
    test: np.ndarray,
    nets: dict,
    method: str,
    ex: Exchange | None,
    kk: int,
    kind: int,
    mech: OutputMechanism | None,
    suffix: str,
    explore: float = 0.0,
    rng: np.random.Generator | None = None,
) -> list[dict[str, Any]]:
    """Greedy episodes of every run on every test map at once; SuccRate, AvgRwd per run.

    ``explore`` > 0: epsilon-greedy instead (random joint action with probability ``explore``,
    drawn from ``rng``)."""
    import torch

    nt = len(test)
    env = VectorGridWorld(
        maps, np.tile(test, kk), hist_len=cfg.hist_len, meeting_rule=cfg.meeting_rule
    )
    sa, sb = env.reset()
    ret = np.zeros(kk * nt)
    met_all = np.zeros(kk * nt, dtype=bool)
    steps = np.zeros(kk * nt, dtype=np.int64)
    if ex is not None:
        # each step releases one row per map (finished maps included: charged, the safe side)
        ev = mech.exchange_event(nt)
        step = [(f"{t}/{a}{suffix}", ev) for t in ex.trials for a in ("alpha", "beta")]
        ex.acc.add(step * cfg.episode_limit)
        ex.step = -1

    dev = next(iter(nets.values())).device

    def shape(x: np.ndarray) -> Any:
        return torch.as_tensor(x.reshape(kk, nt, *x.shape[1:]), device=dev)

    for _t in range(cfg.episode_limit):
        if env.done.all():
            break
        with torch.inference_mode():
            send = {"mech": mech, "suffix": suffix, "map_index": env.map_index.copy()}
            q = joint_q(method, nets, ex, (sa, sb), shape, kind, **send)
            check_finite(cfg, q, "the joint Q-values are", -1)
        qn = q.cpu().numpy().reshape(kk * nt, -1)
        act = qn.argmax(axis=1) if explore == 0 else eps_greedy(qn, explore, rng)
        r, _done, met, active = env.step(act)
        ret += r
        steps += active
        met_all |= met
        sa, sb = env.observe()
    out = []
    shortest = np.tile(maps.shortest[test], kk)
    for k in range(kk):
        s = slice(k * nt, (k + 1) * nt)
        m, rr = met_all[s], ret[s]
        succ = int(m.sum())
        out.append(
            {
                "episodes": nt,
                "successes": succ,
                "succ_rate": succ / nt,
                "avg_reward": float(rr.mean()),
                "reward_sd": float(rr.std(ddof=1)) if nt > 1 else 0.0,
                "path_ratio": float(np.mean(steps[s][m] / shortest[s][m])) if succ else None,
            }
        )
    return out
