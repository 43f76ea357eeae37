"""The registry of built-in mechanisms (``to_config`` names), the config round trip and the
sequential-composition helper."""

from __future__ import annotations

from typing import Any

from ldp_audit.errors import InvalidParameterError
from ldp_audit.mechanisms.adaptive import AdaptiveFrequencyOracle
from ldp_audit.mechanisms.approximate import (
    ApproximateRandomizedResponse,
    ApproximateSymmetricUnaryEncoding,
)
from ldp_audit.mechanisms.base import Mechanism
from ldp_audit.mechanisms.bit_flip import BitFlip
from ldp_audit.mechanisms.gaussian import Gaussian
from ldp_audit.mechanisms.hadamard import HadamardResponse
from ldp_audit.mechanisms.histogram_encoding import (
    SummationHistogramEncoding,
    ThresholdHistogramEncoding,
)
from ldp_audit.mechanisms.laplace import DiscreteLaplace, Laplace
from ldp_audit.mechanisms.longitudinal import DBitFlipPM, Loloha, MemoisedRappor
from ldp_audit.mechanisms.no_privacy import NoPrivacy
from ldp_audit.mechanisms.olh import BinaryLocalHashing, OptimalLocalHashing
from ldp_audit.mechanisms.prs import ProjectedRandomSign
from ldp_audit.mechanisms.randomized_response import RandomizedResponse
from ldp_audit.mechanisms.rappor import BasicRappor, OneTimeRappor
from ldp_audit.mechanisms.subset_selection import SubsetSelection
from ldp_audit.mechanisms.unary import OptimizedUnaryEncoding, SymmetricUnaryEncoding
from ldp_audit.validation import check_epsilon, check_int

#: name -> class for every built-in mechanism (the ``"name"`` of ``to_config``).
MECHANISMS: dict[str, type[Mechanism]] = {
    cls.name: cls
    for cls in (
        Laplace,
        DiscreteLaplace,
        ProjectedRandomSign,
        BitFlip,
        RandomizedResponse,
        Gaussian,
        NoPrivacy,
        SymmetricUnaryEncoding,
        OptimizedUnaryEncoding,
        OptimalLocalHashing,
        HadamardResponse,
        BasicRappor,
        OneTimeRappor,
        SubsetSelection,
        ThresholdHistogramEncoding,
        SummationHistogramEncoding,
        BinaryLocalHashing,
        AdaptiveFrequencyOracle,
        ApproximateRandomizedResponse,
        ApproximateSymmetricUnaryEncoding,
        MemoisedRappor,
        DBitFlipPM,
        Loloha,
    )
}


def from_config(config: dict[str, Any]) -> Mechanism:
    """Rebuild a mechanism from ``mech.to_config()``.

    Raises:
        InvalidParameterError: unknown name, unknown or invalid fields.
    """
    if not isinstance(config, dict) or "name" not in config:
        raise InvalidParameterError(f"config must be a dict with a 'name' key, got {config!r}")
    kwargs = dict(config)
    name = kwargs.pop("name")
    cls = MECHANISMS.get(name)
    if cls is None:
        raise InvalidParameterError(
            f"config['name'] must be one of {sorted(MECHANISMS)}, got {name!r}"
        )
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise InvalidParameterError(f"invalid fields for {name!r}: {exc}") from None


def split_epsilon(total: float, rounds: int) -> float:
    """Per-submission epsilon for T submissions under sequential composition (section 3.2.1):
    ``total / T``, so T reports of an epsilon/T-LDP mechanism are epsilon-LDP together.

    ``total = inf`` (explicit non-private baseline) returns inf.
    """
    t = check_epsilon(total, "total", allow_inf=True)
    r = check_int(rounds, "rounds", minimum=1)
    return t / r
