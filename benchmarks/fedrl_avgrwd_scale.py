"""FedRL's AvgRwd on a scale: a random and a shortest-path joint policy on Table 1's test maps.

Table 1's AvgRwd (``reproduce fedrl``) is the undiscounted sum of the per-step reward of
:func:`~ldp_audit.training.fedrl.gridworld.step_reward` over each greedy test episode (at most
T_m steps), averaged over the test maps. This script plays two reference policies on the same
test maps (same map seed and split as the committed report) and prints their AvgRwd under that
definition and under other readings of the paper's text:

* ``random``: a uniformly random joint action each step (``--seeds`` episodes per map);
* ``shortest``: both agents walk the BFS shortest path towards each other (the best SuccRate
  and path length; not the highest reward: c / d pays for every step spent near the other agent
  without meeting, -2 + N / d > 0 for d < N / 2);
* ``linger``: the same walk, but once 2-3 cells apart on the path the agents shift along it in
  step and never meet (where the path is too short to shift, they meet).

Readings (all from the same trajectories): ``ours`` (each agent's -1 / -10, +50, c / max(d, 1));
``team-local`` (one -1, or -10 when an agent bumps, per joint step instead of one per agent);
``no-shaping`` (without c / d); ``per-step`` (ours divided by the episode's steps, the paper's
Text2Action definition); and the means over successful and failed episodes.

``--meeting-rule public-code`` plays the same policies with the distance of the authors' public
code, ``|dx + dy|`` (papers.md, section 3), for meeting, the +50 and c / d alike. Under that rule
d = 0 occurs without the agents sharing a cell (``dx = -dy``, e.g. one cell diagonally apart),
and the step that reaches it is a meeting (d <= 1). Ours pays c / max(d, 1) = c there; the key
``d0`` gives, per policy, the share of episodes with such a step and the mean AvgRwd if c / d paid
0 at d = 0 instead. Under that rule the output also has the key ``public-code``: the reward of
the authors' public code (``github.com/FRL2019/FRL`` at 00a65fb, ``gridworld/environment.py``),
each agent's -1 / -10, plus N / (d + 1) every step (not c / d; N at d = 0), plus 50 at d <= 1,
summed undiscounted over each test episode (ended at d <= 1 or T_m steps: its 38 / 86 at 8 / 16
equal ours) and averaged over all test episodes, failures included (its ``agent.test``).

Run: ``.venv/bin/python benchmarks/fedrl_avgrwd_scale.py --size 8`` (prints JSON; seconds).
"""

from __future__ import annotations

import argparse
import json
from collections import deque

import numpy as np

from ldp_audit.training.fedrl.gridworld import (
    MOVES,
    VectorGridWorld,
    agent_distance,
    generate_maps,
)


def _path(obst: np.ndarray, a: tuple[int, int], b: tuple[int, int]) -> list[tuple[int, int]]:
    """One BFS shortest path of cells from a to b (both included)."""
    n = obst.shape[0]
    prev = {a: None}
    q = deque([a])
    while q:
        c = q.popleft()
        if c == b:
            break
        for dr, dc in MOVES:
            nx = (c[0] + dr, c[1] + dc)
            if 0 <= nx[0] < n and 0 <= nx[1] < n and not obst[nx] and nx not in prev:
                prev[nx] = c
                q.append(nx)
    out, c = [], b
    while c is not None:
        out.append(c)
        c = prev[c]
    return out[::-1]


def _move_index(frm: tuple[int, int], to: tuple[int, int]) -> int:
    d = (to[0] - frm[0], to[1] - frm[1])
    return int(np.flatnonzero((MOVES == d).all(axis=1))[0])


def rollout(maps, test, policy, rule: str) -> dict[str, np.ndarray]:
    """Per-episode components: steps, agent bumps, joint steps with a bump, met, shaping sum."""
    env = VectorGridWorld(maps, test, hist_len=1, meeting_rule=rule)
    env.reset()
    k = len(test)
    keys = ("steps", "bumps", "bump_steps", "met", "shaping", "reward", "d0", "code_shaping")
    comp = {x: np.zeros(k) for x in keys}
    for t in range(int(maps.t_max)):
        if env.done.all():
            break
        r, _, met, active = env.step(policy(t, env))
        md = agent_distance(env.pos[:, 0], env.pos[:, 1], rule)
        comp["steps"] += active
        comp["bumps"] += env.last_bumps.sum(axis=1)
        comp["bump_steps"] += env.last_bumps.any(axis=1)
        comp["met"] += met
        comp["shaping"] += np.where(active, maps.size / np.maximum(md, 1), 0.0)
        comp["code_shaping"] += np.where(active, maps.size / (md + 1.0), 0.0)
        comp["reward"] += r
        comp["d0"] += active & (md == 0)
    return comp


def readings(c: dict[str, np.ndarray], rule: str) -> dict[str, float]:
    ours = c["reward"]
    rebuilt = -2 * c["steps"] - 9 * c["bumps"] + 50 * c["met"] + c["shaping"]
    assert np.allclose(ours, rebuilt), "reward decomposition does not add up"
    team = -c["steps"] - 9 * c["bump_steps"] + 50 * c["met"] + c["shaping"]
    code = ours - c["shaping"] + c["code_shaping"]
    return {
        **({"public-code": float(code.mean())} if rule == "public-code" else {}),
        "succ_rate": float(c["met"].mean()),
        "mean_steps": float(c["steps"].mean()),
        "ours": float(ours.mean()),
        "team-local": float(team.mean()),
        "no-shaping": float((ours - c["shaping"]).mean()),
        "per-step": float((ours / np.maximum(c["steps"], 1)).mean()),
        "ours_successes": float(ours[c["met"] > 0].mean()) if c["met"].any() else None,
        "ours_failures": float(ours[c["met"] == 0].mean()) if (c["met"] == 0).any() else None,
    }


def at_d0(c: dict[str, np.ndarray], size: int) -> dict[str, float]:
    """Steps that end at d = 0 (each pays c / max(0, 1) = c = N in ours) and ours without them."""
    return {
        "episodes_with_d0": float((c["d0"] > 0).mean()),
        "ours_if_c_over_d_pays_0_at_d0": float((c["reward"] - size * c["d0"]).mean()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=8)
    ap.add_argument("--n-maps", type=int, default=8000)
    ap.add_argument("--map-seed", type=int, default=0)
    ap.add_argument("--eval-maps", type=int, default=800)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--meeting-rule", default="manhattan")
    args = ap.parse_args()
    maps = generate_maps(args.size, args.n_maps, seed=args.map_seed)
    test = maps.split["test"][: args.eval_maps]
    paths = [
        _path(maps.obstacles[i], tuple(maps.alpha_start[i]), tuple(maps.beta_start[i]))
        for i in test
    ]

    ends = np.array([len(p) - 1 for p in paths])
    state = {}

    def walker(linger: bool):
        """Both agents on the path (alpha at index ia, beta at ib); each step they close in by
        2, or (``linger``) once 2-3 cells apart both shift along the path by +-1 in turn: the
        gap, hence d, stays 2 or 3 (no meeting) until T_m (where the path is too short to
        shift, they meet)."""

        def policy(t: int, env: VectorGridWorld) -> np.ndarray:
            if t == 0:
                state.update(ia=np.zeros_like(ends), ib=ends.copy(), last=np.ones_like(ends))
            ia, ib, last = state["ia"], state["ib"], state["last"]
            act = np.zeros(len(paths), dtype=np.int64)
            for j, p in enumerate(paths):
                na, nb = ia[j] + 1, ib[j] - 1
                if linger and ib[j] - ia[j] <= 3:
                    for sh in (-last[j], last[j]):
                        if 0 <= ia[j] + sh and ib[j] + sh <= ends[j]:
                            na, nb, last[j] = ia[j] + sh, ib[j] + sh, sh
                            break
                if not (0 <= na < len(p) and 0 <= nb < len(p)):
                    continue  # met already (the slot is done)
                act[j] = 4 * _move_index(p[ia[j]], p[na]) + _move_index(p[ib[j]], p[nb])
                ia[j], ib[j] = na, nb
            return act

        return policy

    out = {"args": vars(args), "t_max": int(maps.t_max)}
    d0 = {}
    for name, linger in (("shortest", False), ("linger", True)):
        comp = rollout(maps, test, walker(linger), args.meeting_rule)
        out[name], d0[name] = readings(comp, args.meeting_rule), at_d0(comp, args.size)
    comps = []
    for s in range(args.seeds):
        rng = np.random.default_rng(np.random.SeedSequence([args.map_seed, 4242, s]))
        comps.append(
            rollout(
                maps, test, lambda t, env, g=rng: g.integers(16, size=len(test)), args.meeting_rule
            )
        )
    pooled = {k: np.concatenate([c[k] for c in comps]) for k in comps[0]}
    out["random"], d0["random"] = readings(pooled, args.meeting_rule), at_d0(pooled, args.size)
    out["d0"] = d0
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
