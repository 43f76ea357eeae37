"""Broken DP-SGD optimizers for the Opacus one-run audit (issue 26): subclasses of Opacus's
``DPOptimizer``, each with one classic mistake, written for ``ldp_audit.opacus.CanaryAudit``
(which hooks whatever the subclass does; the ledger is charged with the declared event):

* :class:`ReusedNoise`: fresh noise on every other update, reused on the next (true epsilon
  infinite: the difference of two updates is noise-free);
* :class:`UnchargedFastPath`: every other update draws its noise inline in ``pre_step``,
  bypassing ``add_noise`` (and with it the accountant's charge): half the updates uncharged;
* :class:`NeverCharged`: every update noised that way (the ledger stays empty);
* :class:`AggregateClipping`: the summed gradient of the batch clipped to ``C`` instead of each
  sample (one record's influence is no longer bounded by ``C``);
* :class:`NoiseScaledByBatch`: noise std ``sigma C / B`` (the noise "averaged" like the
  gradient, B = expected batch size);
* :class:`PerLayerClipping`: each parameter tensor clipped to ``C`` on its own;
* :class:`NoiseHalfTheCharged`: noise drawn with half the noise multiplier the optimizer states
  (the ledger is charged with twice the real one);
* :class:`ClipAfterNoise`: the noisy sum clipped to ``C`` (clipping after the noise).
"""

from __future__ import annotations

import torch
from opacus.optimizers import DPOptimizer

from ldp_audit.training.dprl_privacy import gaussian_noise


def _noise(opt: DPOptimizer, p: torch.Tensor, std: float) -> torch.Tensor:
    return gaussian_noise(std, p.summed_grad.shape, p.summed_grad.dtype, opt.generator)


class ReusedNoise(DPOptimizer):
    """Noise drawn on even updates and reused, unchanged, on the following odd update."""

    def add_noise(self) -> None:
        k = getattr(self, "_k", 0)
        self._k = k + 1
        for p in self.params:
            if k % 2 == 0:
                p._reused_noise = _noise(self, p, self.noise_multiplier * self.max_grad_norm)
            p.grad = (p.summed_grad + p._reused_noise).view_as(p)


class UnchargedFastPath(DPOptimizer):
    """Every other update noised inline (correct noise) without calling ``add_noise``."""

    def pre_step(self, closure=None):  # noqa: ANN001, ANN201 - Opacus's signature
        k = getattr(self, "_k", 0)
        self._k = k + 1
        if k % 2 == 0:
            return super().pre_step(closure)
        self.clip_and_accumulate()
        for p in self.params:
            noise = _noise(self, p, self.noise_multiplier * self.max_grad_norm)
            p.grad = (p.summed_grad + noise).view_as(p)
        self.scale_grad()
        return True


class NeverCharged(UnchargedFastPath):
    """Every update noised inline (correct noise): the accountant never sees one."""

    def pre_step(self, closure=None):  # noqa: ANN001, ANN201 - Opacus's signature
        self._k = 1  # always the inline path
        return super().pre_step(closure)


class AggregateClipping(DPOptimizer):
    """The batch's summed gradient clipped to ``C`` (no per-sample clipping)."""

    def clip_and_accumulate(self) -> None:
        sums = [self._get_flat_grad_sample(p).to(p.dtype).sum(dim=0) for p in self.params]
        norm = torch.sqrt(sum((s * s).sum() for s in sums))
        factor = (self.max_grad_norm / (norm + 1e-6)).clamp(max=1.0)
        for p, s in zip(self.params, sums, strict=True):
            p.summed_grad = s * factor if p.summed_grad is None else p.summed_grad + s * factor


class NoiseScaledByBatch(DPOptimizer):
    """Noise std ``sigma C / expected_batch_size``."""

    def add_noise(self) -> None:
        std = self.noise_multiplier * self.max_grad_norm / self.expected_batch_size
        for p in self.params:
            p.grad = (p.summed_grad + _noise(self, p, std)).view_as(p)


class PerLayerClipping(DPOptimizer):
    """Each parameter tensor's per-sample gradient clipped to ``C`` on its own."""

    def clip_and_accumulate(self) -> None:
        for p in self.params:
            g = self._get_flat_grad_sample(p).to(p.dtype)
            norms = g.reshape(len(g), -1).norm(2, dim=-1)
            factor = (self.max_grad_norm / (norms + 1e-6)).clamp(max=1.0)
            s = torch.einsum("i,i...", factor, g)
            p.summed_grad = s if p.summed_grad is None else p.summed_grad + s


class NoiseHalfTheCharged(DPOptimizer):
    """Noise std ``sigma C / 2``: the accountant is charged with ``sigma``, twice the real one."""

    def add_noise(self) -> None:
        std = self.noise_multiplier * self.max_grad_norm / 2
        for p in self.params:
            p.grad = (p.summed_grad + _noise(self, p, std)).view_as(p)


class ClipAfterNoise(DPOptimizer):
    """The noisy sum (correct per-sample clipping and noise) clipped to ``C`` as a whole."""

    def add_noise(self) -> None:
        super().add_noise()
        norm = torch.sqrt(sum((p.grad * p.grad).sum() for p in self.params))
        factor = (self.max_grad_norm / (norm + 1e-6)).clamp(max=1.0)
        for p in self.params:
            p.grad = p.grad * factor


BROKEN = {
    "noise reused across consecutive updates": (ReusedNoise, "independence"),
    "half the updates uncharged": (UnchargedFastPath, "ledger"),
    "no update charged": (NeverCharged, "ledger"),
    "aggregate clipped instead of each sample": (AggregateClipping, "contribution"),
    "noise scaled down by the batch size": (NoiseScaledByBatch, "noise"),
    "per-layer clipping": (PerLayerClipping, "contribution"),
    "ledger charged with twice the real noise multiplier": (NoiseHalfTheCharged, "noise"),
    "clipping after the noise": (ClipAfterNoise, "noise"),
}
