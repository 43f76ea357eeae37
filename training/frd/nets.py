"""The agents' networks: stacked actor/critic weights in one flat buffer with a hand-written
backward pass, a per-agent Adam, and what an attacker computes from an upload (the parameter
layout, the policy and value at given states). Part of :mod:`ldp_audit.training.frd`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ldp_audit.training.frd.config import FrdConfig

# ------------------------------------------------------------------------------------------------
# Batched networks (stacked weights, hand-written backward) and a per-agent Adam step
# ------------------------------------------------------------------------------------------------


class Nets:
    """A agents' actor and critic MLPs in ONE flat float32 buffer (A, P), ReLU hidden layers.

    Layer views (A, in, out) / (A, out) slice the buffer without copies; gradients are written
    into a flat (A, P) tensor so that one per-agent Adam step updates both networks.
    """

    def __init__(self, hidden: int, layers: int, n: int, rng: np.random.Generator) -> None:
        import torch

        self.specs = param_layout(hidden, layers)
        chunks: list[np.ndarray] = []
        for spec in self.specs.values():  # the actor's layers, then the critic's
            for _, fan_in, fan_out in spec:
                lim = math.sqrt(6.0 / fan_in)  # He-uniform (ReLU)
                chunks.append(rng.uniform(-lim, lim, size=(n, fan_in * fan_out)))
                chunks.append(np.zeros((n, fan_out)))
        self.actor_size = sum(fi * fo + fo for _, fi, fo in self.specs["actor"])
        self.flat = torch.from_numpy(np.concatenate(chunks, axis=1).astype(np.float32))
        self.P = int(self.flat.shape[1])

    def forward(self, name: str, x: Any, flat: Any) -> tuple[Any, list[Any]]:
        """x (A', N, 4) -> (out (A', N, out), cache) of the A' rows ``flat`` (A', P) (the
        distillation passes its agents' rows, copied to the device)."""
        import torch

        ps = layer_views(flat, self.specs[name])
        hs = [x]
        h = x
        for i, (w, b) in enumerate(ps):
            z = torch.baddbmm(b[:, None, :], h, w)
            h = torch.relu(z) if i < len(ps) - 1 else z
            hs.append(h)
        return h, [ps, hs]

    @staticmethod
    def backward(dout: Any, cache: list[Any]) -> list[Any]:
        """Flattened gradient pieces (A', size) of sum(dout * out), in buffer order."""
        import torch

        ps, hs = cache
        pieces: list[Any] = [None] * (2 * len(ps))
        d = dout
        for i in range(len(ps) - 1, -1, -1):
            pieces[2 * i] = torch.bmm(hs[i].transpose(1, 2), d).flatten(1)
            pieces[2 * i + 1] = d.sum(dim=1)
            if i > 0:
                d = torch.bmm(d, ps[i][0].transpose(1, 2)) * (hs[i] > 0)
        return pieces


#: Adam's beta1, beta2 and eps (the online A2C step's, in :mod:`ldp_audit.training.frd.kernels`,
#: are the same)
B1, B2, EPS = 0.9, 0.999, 1e-8


def adam_step_rows(flat: Any, m: Any, v: Any, t: Any, grad: Any, cols: int, lr: float) -> None:
    """An Adam step of every row, columns ``[0, cols)`` only (the actor, for distillation), on
    given tensors (one device): parameters ``flat`` (A', P), moments ``m``, ``v`` (A', P) and
    step counts ``t`` (A', 1) float64, updated in place. The distillation runs it on its agents'
    rows copied to the device; on the CPU it is the same elementwise arithmetic as on those rows
    of the whole buffers, so the bits do not depend on which copy it ran on."""
    import torch

    t += 1.0
    bc = (lr * torch.sqrt(1.0 - B2**t) / (1.0 - B1**t)).to(torch.float32)
    mr = m[:, :cols].mul_(B1).add_(grad, alpha=1 - B1)
    vr = v[:, :cols].mul_(B2).addcmul_(grad, grad, value=1 - B2)
    flat[:, :cols] -= bc * mr / (vr.sqrt() + EPS)


# ------------------------------------------------------------------------------------------------
# What an attacker can compute from an upload (public: the protocol and the layout are known)
# ------------------------------------------------------------------------------------------------


def param_layout(hidden: int, layers: int) -> dict[str, list[tuple[int, int, int]]]:
    """Offsets ``(offset, fan_in, fan_out)`` of each layer in a flat FedAvg upload."""
    sizes = [4] + [int(hidden)] * int(layers)
    out: dict[str, list[tuple[int, int, int]]] = {}
    off = 0
    for name, o in (("actor", 2), ("critic", 1)):
        spec = []
        for fi, fo in zip(sizes, sizes[1:] + [o], strict=True):
            spec.append((off, fi, fo))
            off += fi * fo + fo
        out[name] = spec
    return out


def layer_views(x: Any, spec: list[tuple[int, int, int]]) -> list[tuple[Any, Any]]:
    """Each layer of ``spec`` (:func:`param_layout`) as views of the rows ``x`` (n, P), a numpy
    array or a torch tensor: ``(weight (n, fan_in, fan_out), bias (n, fan_out))``."""
    return [
        (x[:, o : o + fi * fo].reshape(len(x), fi, fo), x[:, o + fi * fo : o + fi * fo + fo])
        for o, fi, fo in spec
    ]


def policy_value(flat: np.ndarray, cfg: FrdConfig, states: np.ndarray) -> tuple[np.ndarray, ...]:
    """Evaluate uploaded parameters (n, P) at states (m, 4): (pi_left (n, m), value (n, m))."""
    flat = np.asarray(flat, dtype=np.float64)
    lay = param_layout(cfg.hidden, cfg.layers)
    outs = []
    for name in ("actor", "critic"):
        h = np.broadcast_to(np.asarray(states, dtype=np.float64), (flat.shape[0],) + states.shape)
        spec = lay[name]
        for i, (w, b) in enumerate(layer_views(flat, spec)):
            h = h @ w + b[:, None, :]
            if i < len(spec) - 1:
                h = np.maximum(h, 0.0)
        outs.append(h)
    logits, v = outs
    z = logits[..., 0] - logits[..., 1]
    return 1.0 / (1.0 + np.exp(-z)), v[..., 0]
