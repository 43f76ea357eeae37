"""Broken DP-SGD trainers (test fixtures for the one-run audit, issue 13).

Each is a :class:`ldp_audit.training.dprl.privacy.TrainerHooks` that swaps one piece of a correct
DP-SGD step for a classic mistake; the ledger still charges what the correct trainer would, so
the accountant over-states the privacy and a good audit should notice:

* ``NOISE_NOT_TIMES_CLIP``: noise std ``sigma`` instead of ``sigma * C`` (harmful with C = 10:
  the effective noise multiplier is ``sigma / 10``);
* ``NO_CLIPPING``: per-sample gradients are summed unclipped (a canary of norm
  ``canary_scale * C`` then counts in full);
* ``PER_LAYER_CLIPPING``: the slides' REINFORCE code: each parameter tensor clipped to ``C``
  separately and noised with ``sigma * C`` per tensor, so a sample's total norm reaches
  ``C sqrt(#tensors)``: the noise is understated by ``sqrt(#tensors)`` (2 for the REINFORCE MLP);
* ``HALF_SAMPLE_RATE``: DQN's accountant charged with ``q / 2`` instead of the true ``q``.
"""

from __future__ import annotations

import torch
from opacus.optimizers import DPOptimizer

from ldp_audit.training.dprl.privacy import TrainerHooks, gaussian_noise


class NoiseNotTimesClip(DPOptimizer):
    """Noise std ``noise_multiplier`` (the clip norm forgotten)."""

    def add_noise(self) -> None:
        for p in self.params:
            g = p.summed_grad
            noise = gaussian_noise(self.noise_multiplier, g.shape, g.dtype, self.generator)
            p.grad = (p.summed_grad + noise).view_as(p)


class NoClipping(DPOptimizer):
    """Per-sample gradients summed without clipping."""

    def clip_and_accumulate(self) -> None:
        for p, g in zip(self.params, self.grad_samples, strict=True):
            p.summed_grad = g.to(p.dtype).sum(dim=0)


class PerLayerClipping(DPOptimizer):
    """Each parameter tensor's per-sample gradient clipped to C on its own (slides' REINFORCE)."""

    def clip_and_accumulate(self) -> None:
        for p, g in zip(self.params, self.grad_samples, strict=True):
            g = g.to(p.dtype)
            norms = g.reshape(len(g), -1).norm(2, dim=-1)
            factor = (self.max_grad_norm / (norms + 1e-6)).clamp(max=1.0)
            p.summed_grad = torch.einsum("i,i...", factor, g)


NOISE_NOT_TIMES_CLIP = TrainerHooks(optimizer_class=NoiseNotTimesClip)
NO_CLIPPING = TrainerHooks(optimizer_class=NoClipping)
PER_LAYER_CLIPPING = TrainerHooks(optimizer_class=PerLayerClipping)
HALF_SAMPLE_RATE = TrainerHooks(charged_sample_rate=lambda q: q / 2)
