"""The epsilon-LDP mechanisms of Ono & Takahashi (2020), vectorised over a batch of reports.

One file per family: :mod:`~ldp_audit.mechanisms.laplace` (Laplace, DiscreteLaplace),
:mod:`~ldp_audit.mechanisms.prs` (projected random sign), :mod:`~ldp_audit.mechanisms.bit_flip`,
:mod:`~ldp_audit.mechanisms.randomized_response`, :mod:`~ldp_audit.mechanisms.gaussian`,
:mod:`~ldp_audit.mechanisms.no_privacy`, and the LDP frequency oracles:
:mod:`~ldp_audit.mechanisms.randomized_response` (k-RR / direct encoding),
:mod:`~ldp_audit.mechanisms.unary` (SUE, OUE), :mod:`~ldp_audit.mechanisms.olh` (optimal local
hashing), :mod:`~ldp_audit.mechanisms.hadamard` (Hadamard response),
:mod:`~ldp_audit.mechanisms.rappor` (basic and one-time RAPPOR),
:mod:`~ldp_audit.mechanisms.subset_selection` (SS),
:mod:`~ldp_audit.mechanisms.histogram_encoding` (SHE, THE), binary local hashing (in ``olh``),
:mod:`~ldp_audit.mechanisms.adaptive` (ADP: GRR or OUE),
:mod:`~ldp_audit.mechanisms.approximate` ((epsilon, delta) AGRR and ASUE), and the
longitudinal (memoised) :mod:`~ldp_audit.mechanisms.longitudinal` (memoised RAPPOR,
dBitFlipPM, LOLOHA), sharing
:mod:`~ldp_audit.mechanisms.frequency` (estimator, audit statistics); shared helpers in
``base``, the registry and the config round trip in :mod:`~ldp_audit.mechanisms.registry`.
Every public name is re-exported here, so ``from ldp_audit.mechanisms import Laplace`` is the way
to import them.

Every mechanism is a frozen dataclass, validated in ``__post_init__``, holding no random state.
``privatize(x, rng)`` takes ``x`` of shape (n, d) -- one row per report -- and a
``numpy.random.Generator``; every output row is an independent randomisation. Where the maths
allows, ``privacy_loss`` gives the exact log-likelihood ratio ``log p(y | x) - log p(y | x2)`` so
tests and the auditor can check the claimed epsilon exactly.

Where each equation of the paper (``papers/ono-takahashi-2020-locally-private-distributed-rl.md``)
lives:

* eq. 4 (bit flip)                       -> :class:`BitFlip`, ``base.bitflip_log_probs``
* eq. 5 (sparse random matrix M)         -> ``prs._sign_codes``
* eq. 19 (L1 clip to C/2), eq. 20        -> ``base.clip_l1``, :class:`Laplace`
* eq. 21 / Algorithm 2 (Laplace noise)   -> :meth:`Laplace.privatize`
* eq. 23 (element clip), eq. 24 (flip),
  Algorithm 3 (projected random sign)    -> :class:`ProjectedRandomSign`
* section 3.2.1 (multi-round split)      -> :func:`split_epsilon`

Known limitation (documented, not fixed): :class:`Laplace` draws its noise with
``Generator.laplace`` in IEEE floating point, which is subject to Mironov's (CCS 2012) attack on
the least significant bits: the set of reachable outputs depends on the input, so an adversary who
sees the exact float can in principle distinguish inputs. The snapping mechanism defends against
it at the cost of rounding and a slightly larger epsilon; we leave it out (see
README.md, "Mechanisms").

Every ``privatize`` consumes its generator report by report (each row's draws are contiguous in
the stream), so splitting a batch into consecutive parts and privatising them in order with the
same generator gives exactly the same output rows: the trainers rely on this for reproducibility.
"""

from __future__ import annotations

from ldp_audit.mechanisms.adaptive import AdaptiveFrequencyOracle, adaptive_uses_grr
from ldp_audit.mechanisms.approximate import (
    ApproximateRandomizedResponse,
    ApproximateSymmetricUnaryEncoding,
)
from ldp_audit.mechanisms.base import Mechanism
from ldp_audit.mechanisms.bit_flip import BitFlip
from ldp_audit.mechanisms.frequency import FrequencyOracle, SupportStatistic
from ldp_audit.mechanisms.gaussian import (
    Gaussian,
    analytic_gaussian_delta,
    analytic_gaussian_epsilon,
    analytic_gaussian_sigma,
)
from ldp_audit.mechanisms.hadamard import HadamardResponse
from ldp_audit.mechanisms.histogram_encoding import (
    HistogramScore,
    SummationHistogramEncoding,
    ThresholdHistogramEncoding,
    optimal_threshold,
)
from ldp_audit.mechanisms.laplace import DiscreteLaplace, Laplace
from ldp_audit.mechanisms.longitudinal import CountDifference, DBitFlipPM, Loloha, MemoisedRappor
from ldp_audit.mechanisms.no_privacy import NoPrivacy
from ldp_audit.mechanisms.olh import BinaryLocalHashing, OptimalLocalHashing, olh_hash
from ldp_audit.mechanisms.prs import ProjectedRandomSign, default_reduced_dim
from ldp_audit.mechanisms.randomized_response import RandomizedResponse
from ldp_audit.mechanisms.rappor import BasicRappor, OneTimeRappor, rappor_f_for_epsilon
from ldp_audit.mechanisms.registry import MECHANISMS, from_config, split_epsilon
from ldp_audit.mechanisms.subset_selection import SubsetSelection, optimal_subset_size
from ldp_audit.mechanisms.unary import OptimizedUnaryEncoding, SymmetricUnaryEncoding

__all__ = [
    "Mechanism",
    "Laplace",
    "DiscreteLaplace",
    "ProjectedRandomSign",
    "BitFlip",
    "RandomizedResponse",
    "Gaussian",
    "NoPrivacy",
    "FrequencyOracle",
    "SupportStatistic",
    "SymmetricUnaryEncoding",
    "OptimizedUnaryEncoding",
    "OptimalLocalHashing",
    "HadamardResponse",
    "BasicRappor",
    "OneTimeRappor",
    "SubsetSelection",
    "ThresholdHistogramEncoding",
    "SummationHistogramEncoding",
    "HistogramScore",
    "BinaryLocalHashing",
    "AdaptiveFrequencyOracle",
    "ApproximateRandomizedResponse",
    "ApproximateSymmetricUnaryEncoding",
    "MemoisedRappor",
    "DBitFlipPM",
    "Loloha",
    "CountDifference",
    "adaptive_uses_grr",
    "optimal_subset_size",
    "optimal_threshold",
    "olh_hash",
    "rappor_f_for_epsilon",
    "MECHANISMS",
    "from_config",
    "split_epsilon",
    "default_reduced_dim",
    "analytic_gaussian_delta",
    "analytic_gaussian_epsilon",
    "analytic_gaussian_sigma",
]
