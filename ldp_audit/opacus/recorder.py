"""Recording the released updates of a :class:`~ldp_audit.opacus.CanaryAudit` (docs/opacus.md):
what the one-run audit's white-box tests read of each update.

:class:`UpdateRecorder` keeps, per released update, its projection on the canary directions,
its norm, and the released noise (the released sum minus the optimizer's clipped sum, in units
of ``C``: exactly ``N(0, sigma^2)`` per coordinate under the claim) as a squared norm per tensor
and on the public noise sketch. A step only copies the released update and the clipped sum
into a preallocated block of ``BLOCK`` rows (two ``torch.cat`` calls); the block's projections,
norms and noise statistics are computed together when it is full and at the end (the per-step
cost of a handful of small tensor operations, paid once per block; the same numbers, bit for
bit, as one update at a time). An embedded audit's projections on a dense frame of directions
are computed at once in float64 (``<g_t, u_i>``, as its caller's transcript holds them).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["BLOCK", "SHIFT_LAGS", "UpdateRecorder", "fft_backend"]

BLOCK = 32
"""Updates per block of the recorder's batched statistics."""

SHIFT_LAGS = 2
"""Lags 1..SHIFT_LAGS of the shift test: each update's noise against the previous ones'."""

#: the recorder's arrays of the released noise per update and tensor, copied to the transcript
NOISE_ARRAYS = (
    "noise_sq",
    "noise_sketch",
    "noise_shift",
    "noise_shift_at",
    "noise_data",
    "noise_grain",
)


def fft_backend(x: Any) -> tuple[Any, Any, float]:
    """``(library, vector, norm)`` for the shift test's FFTs of the noise ``x`` (a torch
    tensor): ``scipy.fft`` and a NumPy view on the CPU, ``torch.fft`` and ``x`` itself on a GPU."""
    if x.device.type == "cpu":
        import scipy.fft

        return scipy.fft, x.numpy(), float(np.linalg.norm(x.numpy()))
    import torch

    return torch.fft, x, float(torch.linalg.vector_norm(x))


class UpdateRecorder:
    """The per-update records of one audit (see the module docstring).

    Args:
        params: the optimizer's trainable tensors (flat layout in this order).
        idx, weight: the canary blocks (:func:`~ldp_audit.opacus.canaries.canary_blocks`).
        dense: a dense (n_params, m) float64 frame of directions (embedded), or None.
        clip: the claimed clip norm ``C``.
        sketch: the flat coordinates of the public noise sketch
            (:func:`~ldp_audit.opacus.canaries.noise_sketch`).
    """

    def __init__(self, params: list[Any], *, idx: Any, weight: Any, dense: np.ndarray | None,
                 clip: float, sketch: np.ndarray) -> None:  # fmt: skip
        import torch

        self._params = params
        self._sizes = [int(p.numel()) for p in params]
        # the significand bits of each tensor's released values (at most float32's: the
        # recorder computes in float32), on the sketch: the residual's rounding grain
        bits = [min(24, 1 - round(np.log2(torch.finfo(p.dtype).eps))) for p in params]
        ends = np.cumsum(self._sizes)
        owner = np.searchsorted(ends, np.asarray(sketch), side="right")
        self._bits = torch.as_tensor(np.asarray(bits, dtype=np.float32)[owner])
        self._dense = dense
        self._idx = torch.as_tensor(idx)
        self._flat_idx = self._idx.reshape(-1)
        self._weight = torch.as_tensor(weight)
        self._clip = float(clip)
        self._sketch = torch.as_tensor(sketch)
        # the sketch's coordinates per tensor (local), to read p.summed_grad there at clipping
        sk = np.sort(np.asarray(sketch))
        self._at = [torch.as_tensor(sk[(sk >= e - n) & (sk < e)] - (e - n))
                    for e, n in zip(ends, self._sizes, strict=True)]  # fmt: skip
        self._at_flat = torch.as_tensor(sk)
        self._clip_sk: Any = None  # the clipped sum on the sketch, as the last clipping left it
        self._g: Any = None  # (BLOCK, n) released updates of the open block
        self._s: Any = None  # (BLOCK, n) the optimizer's clipped sums (NaN where none)
        self._c: Any = None  # (BLOCK, K) the clipped sums on the sketch at their clipping
        self._k: list[float] = []  # the open block's factors to units of C
        self._proj: list[Any] = []  # (m,) per update (float64 rows when dense)
        self._done: dict[str, list[Any]] = {"norm": [], "sq": [], "sketch": [], "shift": [],
                                            "changed": [], "data": [], "grain": []}  # fmt: skip
        self._ffts: list[tuple[Any, float]] = []  # the last SHIFT_LAGS updates' (rfft, norm)

    @property
    def updates(self) -> int:
        return sum(len(x) for x in self._done["norm"]) + len(self._k)

    def clipped(self) -> None:
        """Keep the clipped sums (``p.summed_grad``) on the sketch as the clipping left them
        (compared at the release: a sum changed in between is named, :meth:`arrays`)."""
        import torch

        parts = []
        for i, (p, n) in enumerate(zip(self._params, self._sizes, strict=True)):
            sg = getattr(p, "summed_grad", None)
            if sg is None or sg.numel() != n:  # a tensor without a clipped sum: not compared
                self._clip_sk = None
                return
            if self._at[i].device != sg.device:  # moved once, not every step
                self._at[i] = self._at[i].to(sg.device)
            parts.append(sg.reshape(-1)[self._at[i]].float())
        self._clip_sk = torch.cat(parts)

    def record(self, k: float) -> None:
        """Keep the released update (``p.grad`` of every tensor) and the clipped sums
        (``p.summed_grad``); ``k`` turns the released mean into the released sum in units of
        ``C`` (``expected_batch * accumulated / C`` under mean reduction)."""
        import torch

        ps = self._params
        j = len(self._k)
        if self._g is None or j == self._g.shape[0]:
            self._flush()
            j = 0
            if self._g is None:
                dev = ps[0].grad.device
                self._g = torch.empty((BLOCK, sum(self._sizes)), device=dev)
                self._s = torch.empty_like(self._g)
                self._c = torch.empty((BLOCK, len(self._at_flat)), device=dev)
        torch.cat([p.grad.reshape(-1).float() for p in ps], out=self._g[j])
        for s, p, n in zip(self._s[j].split(self._sizes), ps, self._sizes, strict=True):
            sg = getattr(p, "summed_grad", None)
            if sg is not None and sg.numel() == n:
                s.copy_(sg.reshape(-1))
            else:  # a tensor without a clipped sum: its released noise is unknown (NaN, named)
                s.fill_(float("nan"))
        if self._clip_sk is None:  # no clipping since the last update
            self._c[j].fill_(float("nan"))
        else:
            self._c[j].copy_(self._clip_sk)
        self._clip_sk = None
        self._k.append(float(k))
        if self._dense is not None:  # <g_t, u_i> in float64, one update at a time (bits)
            v = self._g[j].cpu().numpy().astype(np.float64)
            self._proj.append((v[None] @ self._dense).reshape(-1))  # (1, n): gemm bits

    def _flush(self) -> None:
        """The open block's projections, norms and released noise, computed together."""
        import torch

        n = len(self._k)
        if not n:
            return
        g, s = self._g[:n], self._s[:n]
        if self._dense is None:
            sel = g.index_select(1, self._flat_idx.to(g.device)).view(n, *self._idx.shape)
            self._proj.extend((sel * self._weight.to(g.device)).sum(dim=2).cpu())
        self._done["norm"].append(g.norm(dim=1).cpu())
        c, now = self._c[:n], s.index_select(1, self._at_flat.to(s.device))
        self._done["changed"].append(((c != now) & (c == c) & (now == now)).any(dim=1).cpu())
        k = torch.as_tensor(self._k, dtype=g.dtype, device=g.device)[:, None]
        r = torch.sub(g * k, s, alpha=1.0 / self._clip)
        # float64 sums per tensor (exact enough for chi^2 on millions of entries)
        self._done["sq"].append(torch.stack(
            [(c * c).sum(dim=1) for c in r.double().split(self._sizes, dim=1)], dim=1
        ).cpu())  # fmt: skip
        at = self._sketch.to(r.device)
        self._done["sketch"].append(r.index_select(1, at).cpu())
        # a bound on the grain of each sketch residual's rounding: 4 units in the last place,
        # at the tensor's bits, of the larger of the released sum and the clipped sum
        gk = (g * k).index_select(1, at).abs()
        big = torch.maximum(gk, s.index_select(1, at).abs() / self._clip)
        bits = self._bits.to(r.device)[None, :]
        e = torch.frexp(big)[1].float() - bits + 2.0
        # below float32's bits: the clipped sum is fixed given the past, so the residual's
        # values lie on the released value's own grid (2 units in its last place: the mean's
        # scale k need not be a power of two; a released 0 has the finest grid), plus
        # float32's rounding (4 units of the larger)
        at_own = torch.where(gk > 0, torch.frexp(gk)[1].float() - bits + 1.0, -200.0)
        own = torch.maximum(at_own, e + bits - 24.0)
        e = torch.where(bits < 24, own, e)
        self._done["grain"].append(torch.where(big == big, torch.exp2(e), big).cpu())
        # per tensor, <r, s> and |s|^2 (s in units of C): does the noise follow the data?
        sc = s.double() / self._clip
        self._done["data"].append(torch.stack([torch.stack(((a * b).sum(1), (b * b).sum(1)), 1)
            for a, b in zip(r.double().split(self._sizes, 1), sc.split(self._sizes, 1),
                            strict=True)], 1).cpu())  # fmt: skip
        self._done["shift"].extend(self._shifts(x) for x in r.double())
        self._k = []

    def _shifts(self, x: Any) -> list[tuple[float, int]]:
        """Per lag 1..SHIFT_LAGS, the largest ``|rho_s|`` over the shifts ``s`` of the normalised
        circular cross-correlation ``rho_s = <x_{t-lag}, roll(x_t, -s)> / |x_{t-lag}| |x_t|``
        of the full noise vectors (NaN coordinates as 0) and its shift (NaN, -1 where there
        is no earlier update or no noise). The linear cross-correlation by an FFT of a fast
        length ``n >= 2P - 1`` (no Bluestein transform of an awkward ``P``), folded to the
        circular one: ``lin[:P] + lin[n - P:]``; by ``torch.fft`` on the noise's device when
        that is a GPU (no host copy), by ``scipy.fft`` on the CPU (half torch's CPU time at
        P = 11.7 M, one thread). Keeps the last updates' FFTs only."""
        import scipy.fft
        import torch

        P = x.numel()
        n = scipy.fft.next_fast_len(2 * P - 1, real=True)
        lib, x, nrm = fft_backend(torch.nan_to_num(x))
        f = lib.rfft(x, n=n)
        out = [(float("nan"), -1)] * SHIFT_LAGS
        for lag, (g, m) in enumerate(reversed(self._ffts), start=1):
            if nrm > 0 and m > 0:
                lin = lib.irfft(g.conj() * f, n=n)
                c = abs(lin[:P] + lin[n - P :])
                s = int(c.argmax())
                out[lag - 1] = (float(c[s]) / (nrm * m), s)
        self._ffts = [*self._ffts, (f, nrm)][-SHIFT_LAGS:]
        return out

    def changed(self) -> list[int]:
        """The updates whose clipped sum (on the sketch) changed between its clipping and its
        release: the residual tests then measured the noise against another sum."""
        self._flush()
        return [i for i, c in enumerate(x for b in self._done["changed"] for x in b) if c]

    def arrays(self) -> dict[str, np.ndarray]:
        """``canary_projection`` (raw: gradient units, the caller scales), ``update_norm``,
        ``noise_sq`` (T, L), ``noise_sketch`` (T, K), ``noise_shift`` (T, SHIFT_LAGS) and
        ``noise_shift_at`` (its shifts), ``noise_data`` (T, L, 2: per tensor the noise's inner
        product with the clipped sum and the sum's squared norm) and ``noise_grain`` (T, K: a
        bound on the rounding grain of each sketch value, for the precision test), one row per
        recorded update."""
        self._flush()
        T = len(self._proj)
        m, L, K = int(self._idx.shape[0]), len(self._sizes), int(self._sketch.numel())
        shift = np.array(self._done["shift"], dtype=np.float64).reshape(T, SHIFT_LAGS, 2)

        def cat(parts: list[Any], width: int, dtype: Any) -> np.ndarray:
            import torch

            return torch.cat(parts).numpy().astype(dtype) if parts else np.zeros((0, width))

        return {
            "canary_projection": np.stack([np.asarray(p, dtype=np.float64) for p in self._proj])
            if T
            else np.zeros((0, m if self._dense is None else self._dense.shape[1])),
            "update_norm": cat(self._done["norm"], 0, np.float64).reshape(-1),
            "noise_sq": cat(self._done["sq"], L, np.float64),
            "noise_sketch": cat(self._done["sketch"], K, np.float32),
            "noise_shift": shift[..., 0],
            "noise_shift_at": shift[..., 1].astype(np.int64),  # shifts < 2^53: exact
            "noise_data": cat(self._done["data"], 0, np.float64).reshape(T, L, 2),
            "noise_grain": cat(self._done["grain"], K, np.float32),
        }
