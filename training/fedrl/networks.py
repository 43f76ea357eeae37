"""The networks of FedRL (torch, imported lazily): the local Q-networks, DQN-full's network and
the shared MLP, and :class:`Stacked`, K independent copies of one evaluated at once with
batched matmuls (the convolution as one gather + matmul).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ldp_audit.training.fedrl.gridworld import ALPHA_VIEW, BETA_VIEW, N_ACTIONS

# ----------------------------------------------------------------------------------------------
# Networks (torch, imported lazily)
# ----------------------------------------------------------------------------------------------


def _init_params(module: Any, gen: Any) -> None:
    """Re-initialise ``module`` from an explicit ``torch.Generator`` (no global seeding)."""
    import torch

    for m in module.modules():
        if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d)):
            torch.nn.init.kaiming_uniform_(m.weight, a=math.sqrt(5), generator=gen)
            fan_in = m.weight[0].numel()
            bound = 1.0 / math.sqrt(fan_in)
            torch.nn.init.uniform_(m.bias, -bound, bound, generator=gen)


def local_q(view: int, hist: int) -> Any:
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(hist, 32, 3, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(32 * view * view, 256),
        nn.ReLU(),
        nn.Linear(256, N_ACTIONS),
    )


def mlp() -> Any:
    from torch import nn

    return nn.Sequential(
        nn.Linear(2 * N_ACTIONS, 2 * N_ACTIONS), nn.ReLU(), nn.Linear(2 * N_ACTIONS, N_ACTIONS)
    )


@functools.cache  # one class per process (torch.func.stack_module_state needs the same class)
def full_q_class() -> Any:
    """DQN-full's network (``full_q_class()(hist)``): one conv branch per observation,
    concatenated, 256 hidden, 16 out."""
    import torch

    nn = torch.nn

    class FullQ(nn.Module):
        def __init__(self, hist: int) -> None:
            super().__init__()
            self.ca = nn.Sequential(nn.Conv2d(hist, 32, 3, padding=1), nn.ReLU(), nn.Flatten())
            self.cb = nn.Sequential(nn.Conv2d(hist, 32, 3, padding=1), nn.ReLU(), nn.Flatten())
            self.head = nn.Sequential(
                nn.Linear(32 * (ALPHA_VIEW**2 + BETA_VIEW**2), 256),
                nn.ReLU(),
                nn.Linear(256, N_ACTIONS),
            )

        def forward(self, sa: Any, sb: Any) -> Any:
            return self.head(torch.cat([self.ca(sa), self.cb(sb)], dim=1))

    return FullQ


# ----------------------------------------------------------------------------------------------
# K networks at once (batched matmuls)
# ----------------------------------------------------------------------------------------------


@functools.cache
def _im2col_index(c: int, v: int, device: str = "cpu") -> Any:
    """Gather index (v*v*c*9,) into a zero-padded (c, v+2, v+2) window, flattened: row p of
    the result holds the 3x3 neighbourhood of position p of every channel, in the (c, kh, kw)
    order of a ``Conv2d`` weight (on ``device``, made once per process and device)."""
    if device != "cpu":
        return _im2col_index(c, v).to(device)
    p = v + 2
    ci, pi, pj, di, dj = np.meshgrid(
        np.arange(c), np.arange(v), np.arange(v), np.arange(3), np.arange(3), indexing="ij"
    )
    flat = ci * p * p + (pi + di) * p + (pj + dj)  # (c, v, v, 3, 3)
    import torch

    return torch.as_tensor(flat.transpose(1, 2, 0, 3, 4).reshape(-1))


def _conv3x3_relu(x: Any, w: Any, b: Any) -> Any:
    """Batched 3x3 convolution (padding 1) + ReLU of K runs at once, as one matmul.

    ``x`` (K, B, C, v, v), ``w`` (K, C*9, 32) (the ``Conv2d`` weight, see :class:`Stacked`),
    ``b`` (K, 32) -> (K, B, v*v*32), flattened position-major (the next layer's weight is kept
    in that order: :func:`_pos_major`). Same arithmetic as ``torch.nn.Conv2d`` (im2col as one
    gather, then a matmul), without the grouped convolution that ``vmap`` over K weights
    turns into.
    """
    import torch

    k, bsz, c, v = x.shape[0], x.shape[1], x.shape[2], x.shape[3]
    xp = torch.nn.functional.pad(x.reshape(k * bsz, c, v, v), (1, 1, 1, 1))
    cols = xp.reshape(k * bsz, -1).index_select(1, _im2col_index(c, v, str(x.device)))
    out = torch.baddbmm(b[:, None, :], cols.reshape(k, bsz * v * v, c * 9), w)
    return torch.relu(out).reshape(k, bsz, v * v * w.shape[2])


def _pos_major(w: Any, views: Sequence[int], inverse: bool = False, ch: int = 32) -> Any:
    """Reorder the input columns of a dense weight (K, out, sum(ch*v*v)) between torch's
    channel-major flatten of each conv output (``nn.Flatten`` of (ch, v, v)) and the
    position-major order :func:`_conv3x3_relu` produces (``inverse``: back to torch's order)."""
    import torch

    k, o = w.shape[0], w.shape[1]
    parts, start = [], 0
    for v in views:
        seg = w[:, :, start : start + ch * v * v]
        shape = (k, o, v * v, ch) if inverse else (k, o, ch, v * v)
        parts.append(seg.reshape(shape).transpose(2, 3).reshape(k, o, ch * v * v))
        start += ch * v * v
    return torch.cat(parts, dim=2).contiguous()


def _dense(x: Any, w: Any, b: Any) -> Any:
    """K dense layers at once: ``x`` (K, B, in), ``w`` (K, in, out) (transposed ``Linear``
    weight, see :class:`Stacked`), ``b`` (K, out)."""
    import torch

    return torch.baddbmm(b[:, None, :], x, w)


def fwd_local_q(p: dict, x: Any) -> Any:
    """The stacked local Q-networks (:func:`local_q`) on ``x`` (K, B, H, v, v)."""
    import torch

    h = _conv3x3_relu(x, p["0.weight"], p["0.bias"])
    h = torch.relu(_dense(h, p["3.weight"], p["3.bias"]))
    return _dense(h, p["5.weight"], p["5.bias"])


def fwd_full_q(p: dict, sa: Any, sb: Any) -> Any:
    """The stacked DQN-full networks (:func:`full_q_class`) on both windows."""
    import torch

    ha = _conv3x3_relu(sa, p["ca.0.weight"], p["ca.0.bias"])
    hb = _conv3x3_relu(sb, p["cb.0.weight"], p["cb.0.bias"])
    h = torch.relu(_dense(torch.cat([ha, hb], dim=2), p["head.0.weight"], p["head.0.bias"]))
    return _dense(h, p["head.2.weight"], p["head.2.bias"])


def fwd_mlp(p: dict, x: Any) -> Any:
    """The stacked shared MLPs (:func:`mlp`) on ``x`` (K, B, 32)."""
    import torch

    h = torch.relu(_dense(x, p["0.weight"], p["0.bias"]))
    return _dense(h, p["2.weight"], p["2.bias"])


#: How :class:`Stacked` stores each weight: ``"conv"`` (K, C*9, 32); ``"dense"`` transposed
#: (K, in, out), with the given conv views' columns position-major (None: the input's view).
_LAYOUT: dict[Callable[..., Any], dict[str, tuple[str, Any]]] = {
    fwd_local_q: {
        "0.weight": ("conv", ()),
        "3.weight": ("dense", None),
        "5.weight": ("dense", ()),
    },
    fwd_full_q: {
        "ca.0.weight": ("conv", ()),
        "cb.0.weight": ("conv", ()),
        "head.0.weight": ("dense", (ALPHA_VIEW, BETA_VIEW)),
        "head.2.weight": ("dense", ()),
    },
    fwd_mlp: {"0.weight": ("dense", ()), "2.weight": ("dense", ())},
}


class Stacked:
    """K independent copies of a network, evaluated at once with batched matmuls.

    The parameters are the ``torch.func.stack_module_state`` of K modules initialised from the
    runs' own generators; ``forward`` computes the module's function for all K at once (one
    ``torch.baddbmm`` per layer for all K; the convolution as one gather + matmul), cheaper on
    a CPU than ``vmap`` over ``functional_call``, which turns the K convolutions into one
    grouped convolution. Weights are stored in the layout the matmuls read (:data:`_LAYOUT`:
    transposed, conv-reading columns position-major), so no forward or backward pass copies a
    weight; Adam is element-wise, so a fixed permutation of a parameter changes nothing.
    :meth:`state` and :meth:`torch_params` return torch's layout. A test checks the forward
    pass and the gradients against ``vmap(functional_call)`` of the module.

    One Adam over the stacked parameters is exactly K independent Adams, and the sum of the K
    runs' losses gives each run its own gradient.
    """

    def __init__(
        self,
        make: Callable[[], Any],
        gens: Sequence[Any],
        forward: Callable[..., Any],
        view: int | None = None,
        device: Any = None,
    ) -> None:
        import torch

        self.device = torch.device("cpu" if device is None else device)
        with torch.device("meta"):  # built without torch's global-RNG init, then set from gens
            mods = [make() for _ in gens]
        mods = [m.to_empty(device="cpu") for m in mods]
        for m, g in zip(mods, gens, strict=True):
            _init_params(m, g)
        params, _ = torch.func.stack_module_state(mods)
        self._layout = {
            name: (kind, (view,) if views is None else views)
            for name, (kind, views) in _LAYOUT[forward].items()
        }
        self._shapes = {n: tuple(v.shape) for n, v in params.items()}
        with torch.no_grad():
            params = {n: self.to_internal(n, v) for n, v in params.items()}
        # initialised on the CPU from the runs' CPU generators, then moved (same values anywhere)
        self.params = {
            k: v.detach().to(self.device).clone().requires_grad_(True) for k, v in params.items()
        }
        self.target = {k: v.detach().clone() for k, v in self.params.items()}
        self.module = mods[0]  # the architecture (for reference checks)
        self._f = forward

    def to_internal(self, name: str, v: Any) -> Any:
        """A stacked parameter (or gradient) from torch's layout to the stored one."""
        if name not in self._layout:
            return v
        kind, views = self._layout[name]
        k = v.shape[0]
        if kind == "conv":
            return v.reshape(k, v.shape[1], -1).transpose(1, 2).contiguous()
        if views:
            v = _pos_major(v, views)
        return v.transpose(1, 2).contiguous()

    def to_torch(self, name: str, v: Any) -> Any:
        """A stacked parameter (or gradient) from the stored layout to torch's."""
        if name not in self._layout:
            return v
        kind, views = self._layout[name]
        v = v.transpose(1, 2)
        if kind == "conv":
            return v.reshape(self._shapes[name]).contiguous()
        return _pos_major(v, views, inverse=True) if views else v.contiguous()

    def __call__(self, *xs: Any) -> Any:
        return self._f(self.params, *xs)

    def tgt(self, *xs: Any) -> Any:
        return self._f(self.target, *xs)

    def sync(self) -> None:
        self.target = {k: v.detach().clone() for k, v in self.params.items()}

    def torch_params(self) -> dict[str, Any]:
        """The stacked parameters in torch's layout (detached; for ``functional_call``)."""
        return {n: self.to_torch(n, v.detach()) for n, v in self.params.items()}

    def state(self, k: int) -> dict[str, np.ndarray]:
        return {n: v[k].cpu().numpy().copy() for n, v in self.torch_params().items()}
