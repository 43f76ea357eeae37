"""Development check behind the FedAvg attack features (docs/frd.md, "What the attack measures").

One FedAvg run (4 agents x GROUPS groups, S=10, E=5, I=5, 40 episodes, 24x1 networks, seed 7),
5-fold group cross-validation of feature sets x classifiers on the uploads that start from a
broadcast; per-upload accuracy and per-agent accuracy (log-posteriors of an agent's uploads
added). Usage (the numbers quoted in docs/frd.md)::

    OMP_NUM_THREADS=1 python reports/frd/fedavg_features_check.py wide 30
"""

from __future__ import annotations

import sys
import time

import numpy as np
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GroupKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from ldp_audit.attacks.frd import _probe_states
from ldp_audit.training.frd.kernels import act_rows
from ldp_audit.training.cartpole import PrivateGravityCartPole, initial_states
from ldp_audit.training.frd.config import FrdConfig
from ldp_audit.training.frd.nets import param_layout, policy_value
from ldp_audit.training.frd.engine import train_many


def _lr(c: float = 0.1):  # noqa: ANN202
    return make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=3000))


def _hgb():  # noqa: ANN202
    return HistGradientBoostingClassifier(max_iter=100)


def _cv(name, X, clfs, y, groups, m, tr) -> None:  # noqa: ANN001
    for cname, clf in clfs:
        accs, aggc, aggn = [], 0, 0
        for trn, tst in GroupKFold(5).split(X[m], y[m], groups[m]):
            clf.fit(X[m][trn], y[m][trn])
            accs.append((clf.predict(X[m][tst]) == y[m][tst]).mean())
            lp = np.log(clf.predict_proba(X[m][tst]) + 1e-12)
            keys = tr["trial"][m][tst] * 100 + tr["agent"][m][tst]
            uk, inv = np.unique(keys, return_inverse=True)
            tot = np.zeros((uk.size, lp.shape[1]))
            np.add.at(tot, inv, lp)
            yt = np.zeros(uk.size)
            yt[inv] = y[m][tst]
            aggc += (clf.classes_[tot.argmax(1)] == yt).sum()
            aggn += uk.size
        print(
            f"{name:10s} {cname}: per-upload {np.mean(accs):.3f}  per-agent {aggc / aggn:.3f} "
            f"(n={aggn})"
        )


def rollout_len(flat, gravs, cfg, R, rng):  # noqa: ANN001, ANN201, N803
    """log mean episode length of each parameter row's policy under its gravity (R episodes)."""
    n = flat.shape[0]
    F = np.repeat(flat.astype(np.float32), R, axis=0)
    G = np.repeat(gravs, R)
    env = PrivateGravityCartPole(G, episode_steps=cfg.episode_steps)
    env.reset_rows(np.arange(F.shape[0]), initial_states(rng.random((F.shape[0], 4))))
    alive = np.ones(F.shape[0], bool)
    length = np.zeros(F.shape[0])
    pi = np.zeros(F.shape[0])
    act = np.zeros(F.shape[0], np.int64)
    for _ in range(cfg.episode_steps):
        rows = np.flatnonzero(alive)
        if rows.size == 0:
            break
        act[:] = 0
        act_rows(F, rows, env.observation, rng.random(F.shape[0]), cfg.hidden, cfg.layers, pi, act)
        _, _, term, trunc = env._step_unchecked(act)
        length[rows] += 1
        done = term | trunc
        alive &= ~done
        e = np.flatnonzero(done)  # ended rows restart to keep the env legal (count frozen)
        if e.size:
            env.reset_rows(e, initial_states(rng.random((e.size, 4))))
    return np.log(length.reshape(n, R).mean(1))


def main() -> None:
    gs = (4.9, 9.8, 19.6) if sys.argv[1] == "wide" else (9.7, 9.8, 9.9)
    base = dict(n_agents=4, groups=int(sys.argv[2]), sections=10, exchange_period=5,
                initial_episodes=5, hidden=24, layers=1, max_episodes=40,
                stop_at_mission=False)  # fmt: skip
    cfg = FrdConfig(mode="fedavg", gravities=gs, **base)
    t = time.time()
    r = train_many([cfg], seed=7, record=True)[0]
    print("train", time.time() - t)
    tr = r.transcript
    up, ti, th = tr["report"], tr["theta_index"], tr["thetas"]
    y = np.searchsorted(np.array(sorted(gs)), r.gravity[tr["trial"], tr["agent"]])
    has = ti >= 0
    prev = np.where(has[:, None], th[np.maximum(ti, 0)], 0.0)
    delta = up - prev
    probes = _probe_states(64)
    pi1, v1 = policy_value(up, cfg, probes)
    pi0, v0 = policy_value(prev, cfg, probes)
    norms = []
    for name in ("actor", "critic"):
        for off, fi, fo in param_layout(cfg.hidden, cfg.layers)[name]:
            norms.append(np.log(np.linalg.norm(delta[:, off : off + fi * fo], axis=1) + 1e-12))
            b = delta[:, off + fi * fo : off + fi * fo + fo]
            norms.append(np.log(np.linalg.norm(b, axis=1) + 1e-12))
    norms = np.stack(norms, 1)
    beh = np.concatenate([pi1 - pi0, (v1 - v0) / 100], 1)
    beh_abs = np.concatenate([pi1, v1 / 100], 1)
    groups, m = tr["trial"], has
    both = [("lr", _lr()), ("hgb", _hgb())]
    for name, X in [("norms", norms), ("beh", beh), ("norms+beh", np.concatenate([norms, beh], 1)),
                    ("delta", delta), ("all", np.concatenate([norms, beh, delta], 1)),
                    ("beh_abs", beh_abs)]:  # fmt: skip
        _cv(name, X, both if X.shape[1] <= 200 else both[:1], y, groups, m, tr)
    # conditioning on the starting policy: rollouts of the broadcast and of the upload under
    # each candidate gravity
    rng = np.random.default_rng(0)
    cands = np.array(sorted(gs))
    t = time.time()
    L0 = np.stack([rollout_len(prev, np.full(len(prev), g), cfg, 8, rng) for g in cands], 1)
    L1 = np.stack([rollout_len(up, np.full(len(up), g), cfg, 8, rng) for g in cands], 1)
    print("rollouts", time.time() - t)
    for name, X in [("L0", L0), ("L1", L1), ("L0L1", np.concatenate([L0, L1], 1)),
                    ("norms+L0", np.concatenate([norms, L0], 1)),
                    ("norms+L0L1", np.concatenate([norms, L0, L1], 1)),
                    ("norms+beh+L0L1", np.concatenate([norms, beh, L0, L1], 1))]:  # fmt: skip
        _cv(name, X, both, y, groups, m, tr)
    tot = np.log(np.linalg.norm(delta, axis=1) + 1e-12)
    D = tot[:, None] - L0
    D2 = (D - D[m].mean()) ** 2
    three = [("lr", _lr()), ("lr1", _lr(1.0)), ("hgb", _hgb())]
    for name, X in [("D", np.concatenate([D, D2], 1)),
                    ("norms+beh+D", np.concatenate([norms, beh, D, D2], 1))]:  # fmt: skip
        _cv(name, X, three, y, groups, m, tr)


if __name__ == "__main__":
    main()
