"""The audit gallery (docs/audit-gallery.md): frequency oracles audited, correct and broken.

Ours (ldp_audit.mechanisms) at eps 1 and 4 on k = 8 items, known-broken variants of them, and
the clients of pure-ldp 1.2.0 (a third-party library; installed only for this measurement:
``pip install pure-ldp==1.2.0 statsmodels "xxhash<4"``: it imports statsmodels without declaring
it and passes ``str`` to xxhash, which xxhash 4 refuses).

    .venv/bin/python benchmarks/audit_gallery.py [--samples 200000] [--out PATH]

Every audit: ``audit(mech, samples=S, rng=seed, float_bits=False, tradeoff=False)`` at
confidence 0.95 over the mechanism's candidate pairs (or the pairs named here), the
mechanism's shipped statistics (``audit_statistics()``) used automatically; "opaque" rows audit
the same mechanism seen only through epsilon / privatize / candidate_pairs. Writes JSON (one row
per audit: claim, exact true epsilon where known, bound, verdict, witness, seconds).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import special

from ldp_audit import mechanisms as m
from ldp_audit.audit import audit
from ldp_audit.rundir import to_jsonable


class Opaque:
    """A mechanism seen only through epsilon / privatize / candidate_pairs (no statistics)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.epsilon = inner, inner.epsilon

    def privatize(self, x: Any, rng: np.random.Generator) -> np.ndarray:
        return self.inner.privatize(x, rng)

    def candidate_pairs(self, dim: int) -> list:
        return self.inner.candidate_pairs(dim)


# ---- broken variants of our oracles --------------------------------------------------------


@dataclass(frozen=True)
class OlhWrongP(m.OptimalLocalHashing):
    """Claims ``epsilon`` (and uses its g) but keeps the hash with the p of eps 7.3."""

    @property
    def keep_probability(self) -> float:
        return float(special.expit(7.3 - math.log(self.hash_range - 1)))


@dataclass(frozen=True)
class SueDoubleEps(m.SymmetricUnaryEncoding):
    """SUE with p = e^eps / (e^eps + 1) (the exponent eps instead of eps/2): true 2 eps."""

    @property
    def bit_probabilities(self) -> tuple[float, float]:
        return float(special.expit(self.epsilon)), float(special.expit(-self.epsilon))


@dataclass(frozen=True)
class HadamardDoubleEps(m.HadamardResponse):
    """Hadamard response drawing inside C_v with probability e^{2eps}/(e^{2eps}+1): true 2 eps."""

    @property
    def in_set_probability(self) -> float:
        return float(special.expit(2.0 * self.epsilon))


class _Sticky:
    def _prr(self, xi: np.ndarray, u: np.ndarray) -> np.ndarray:
        out = super()._prr(xi, u)  # type: ignore[misc]
        out[np.arange(len(xi)), xi[:, 0]] = 1
        return out


@dataclass(frozen=True)
class RapporStickyBit(_Sticky, m.BasicRappor):
    """Basic RAPPOR whose PRR never clears the item's bit (pure-ldp's defect, with the IRR)."""


@dataclass(frozen=True)
class OneTimeRapporStickyBit(_Sticky, m.OneTimeRappor):
    """One-time RAPPOR whose PRR never clears the item's bit: infinite epsilon."""


# ---- pure-ldp adapters ---------------------------------------------------------------------


class PureLdpOlh:
    """pure-ldp's LHClient(use_olh=True) on items 0..d-1 (its index_mapper is data - 1, so item v
    is sent as v + 1). The report is ``(y, seed)`` with seed < 2^63 (int64, exact). pure-ldp
    draws from Python's ``random`` and NumPy's global generator: both are seeded from the
    auditor's generator at every call. ``p_epsilon`` set: its p and q are recomputed for that
    epsilon after construction (the claim stays ``epsilon``)."""

    def __init__(self, epsilon: float, d: int, p_epsilon: float | None = None) -> None:
        from pure_ldp.frequency_oracles.local_hashing import LHClient

        self.epsilon, self.d = float(epsilon), d
        self.client = LHClient(epsilon=epsilon, d=d, use_olh=True)
        if p_epsilon is not None:
            e, g = math.exp(p_epsilon), self.client.g
            self.client.p, self.client.q = e / (e + g - 1), 1.0 / (e + g - 1)

    def privatize(self, x: Any, rng: np.random.Generator) -> np.ndarray:
        random.seed(int(rng.integers(2**63)))
        np.random.seed(int(rng.integers(2**32)))  # noqa: NPY002 - pure-ldp uses the global one
        return np.array([self.client.privatise(int(v) + 1) for v in x[:, 0]], dtype=np.int64)

    def candidate_pairs(self, dim: int) -> list:
        return [(np.array([0.0]), np.array([1.0]))]


def pure_ldp_olh_statistic(g: int):
    """1{y = H_seed(x)} - 1{y = H_seed(x')} with pure-ldp's own hash (xxh32 of str(index))."""
    import xxhash

    def h(v: int, seeds: np.ndarray) -> np.ndarray:
        s = str(int(v))
        return np.array([xxhash.xxh32(s, seed=int(t)).intdigest() % g for t in seeds])

    def stat(outputs: np.ndarray, x: np.ndarray, x_prime: np.ndarray) -> np.ndarray:
        y, seeds = outputs[:, 0], outputs[:, 1]
        return (y == h(x[0], seeds)).astype(float) - (y == h(x_prime[0], seeds))

    stat.name = "pure-ldp OLH support of x minus support of x'"  # type: ignore[attr-defined]
    return stat


class PureLdpRappor:
    """pure-ldp's RAPPORClient with one cohort and one hash function into m bits; the claim is
    the epsilon the user asked for (f = client.convert_eps_to_f(epsilon), as its docs suggest).
    The report is the Bloom filter (the cohort number is always 0)."""

    def __init__(self, epsilon: float, m_bits: int = 16) -> None:
        from pure_ldp.core import generate_hash_funcs
        from pure_ldp.frequency_oracles.rappor import RAPPORClient

        self.epsilon = float(epsilon)
        funcs = generate_hash_funcs(1, m_bits)
        self.client = RAPPORClient(f=0.5, m=m_bits, hash_funcs=[funcs], num_of_cohorts=1)
        self.client.f = self.client.convert_eps_to_f(epsilon)
        self.bits = {v: funcs[0](str(v)) for v in range(8)}

    def privatize(self, x: Any, rng: np.random.Generator) -> np.ndarray:
        random.seed(int(rng.integers(2**63)))
        return np.array([self.client.privatise(int(v) + 1)[0] for v in x[:, 0]], dtype=np.int64)

    def candidate_pairs(self, dim: int) -> list:
        a = 0
        b = next(v for v in range(1, 8) if self.bits[v] != self.bits[a])  # distinct Bloom bits
        return [(np.array([float(a)]), np.array([float(b)]))]


# ---- the runs ------------------------------------------------------------------------------


def _row(name: str, mech: Any, true_eps: float | None, samples: int, seed: int, **kw: Any):
    t = time.perf_counter()
    r = audit(mech, samples=samples, rng=seed, float_bits=False, tradeoff=False, **kw)
    row = {
        "name": name,
        "claimed": float(mech.epsilon),
        "true_epsilon": true_eps,
        "samples": samples,
        "seed": seed,
        "bound": float(r.epsilon_lower_bound),
        "violation": bool(r.violation),
        "witness": None if r.witness is None else str(r.witness.event),
        "statistics": list(r.statistics),
        "warnings": [str(w) for w in r.warnings],
        "seconds": round(time.perf_counter() - t, 2),
    }
    print(json.dumps(row), file=sys.stderr)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=200_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="benchmarks/results/audit_gallery.json")
    ap.add_argument("--skip-third-party", action="store_true")
    args = ap.parse_args()
    n, s = args.samples, args.seed
    rows = []
    k = 8
    for eps in (1.0, 4.0):
        for o in (
            m.RandomizedResponse(epsilon=eps, k=k),
            m.SymmetricUnaryEncoding(epsilon=eps, k=k),
            m.OptimizedUnaryEncoding(epsilon=eps, k=k),
            m.OptimalLocalHashing(epsilon=eps, k=k),
            m.HadamardResponse(epsilon=eps, k=k),
            m.OneTimeRappor(k=k, f=m.rappor_f_for_epsilon(eps)),
        ):
            rows.append(_row(f"{type(o).__name__} eps {eps:g}", o, o.epsilon, n, s))
    chrome = m.BasicRappor(k=k)
    rows.append(_row("BasicRappor f 0.5, p 0.5, q 0.75", chrome, chrome.epsilon, n, s))
    olh_opaque = Opaque(m.OptimalLocalHashing(epsilon=4.0, k=k))
    rows.append(_row("OptimalLocalHashing eps 4, opaque", olh_opaque, 4.0, n, s))

    broken = OlhWrongP(epsilon=4.0, k=k)
    rows.append(_row("broken OLH (p of eps 7.3), shipped statistic", broken, 7.3, n, s))
    rows.append(_row("broken OLH (p of eps 7.3), opaque", Opaque(broken), 7.3, n, s))
    rows.append(_row("broken SUE (exponent eps, not eps/2)", SueDoubleEps(1.0, k), 2.0, n, s))
    rows.append(_row("broken Hadamard (2 eps inside)", HadamardDoubleEps(1.0, k), 2.0, n, s))
    sticky = RapporStickyBit(k=k)
    q_star, p_star = sticky.bit_probabilities
    true_sticky = math.log(sticky.q * (1 - p_star) / (p_star * (1 - sticky.q)))
    rows.append(_row("BasicRappor, PRR never clears a bit", sticky, true_sticky, n, s))
    one = OneTimeRapporStickyBit(k=k, f=m.rappor_f_for_epsilon(2.0))
    rows.append(_row("OneTimeRappor eps 2, PRR never clears a bit", one, math.inf, n, s))

    third: dict[str, Any] = {}
    if not args.skip_third_party:
        import pure_ldp
        import xxhash
        from pure_ldp.frequency_oracles.rappor import RAPPORClient

        third["versions"] = {
            "pure-ldp": getattr(pure_ldp, "__version__", "1.2.0"),
            "xxhash": xxhash.VERSION,
        }
        conv = RAPPORClient(f=0.5, m=16, hash_funcs=[[]]).convert_eps_to_f
        third["convert_eps_to_f"] = {
            str(e): {
                "f": conv(e),
                "true_epsilon_pure_ldp": RAPPORClient.convert_f_to_eps(None, conv(e), 1),
                "true_epsilon_ldp_audit": m.OneTimeRappor(k=2, f=conv(e)).epsilon,
            }
            for e in (1.0, 2.0, 3.0, 4.0)
        }
        rows.append(_row("pure-ldp RAPPORClient, asked eps 3", PureLdpRappor(3.0), math.inf, n, s))
        plain = PureLdpOlh(4.0, 16)
        stat = pure_ldp_olh_statistic(plain.client.g)
        rows.append(_row("pure-ldp OLH eps 4, no statistic", plain, 4.0, n, s))
        rows.append(_row("pure-ldp OLH eps 4, its hash as statistic", plain, 4.0, n, s,
                         statistics=[stat]))  # fmt: skip
        wrong = PureLdpOlh(4.0, 16, p_epsilon=7.3)
        rows.append(_row("pure-ldp OLH p of eps 7.3 claiming 4, no statistic", wrong, 7.3, n, s))
        rows.append(_row("pure-ldp OLH p of eps 7.3 claiming 4, its hash as statistic", wrong,
                         7.3, n, s, statistics=[stat]))  # fmt: skip
    out = {
        "command": " ".join(["benchmarks/audit_gallery.py", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "confidence": 0.95,
        "rows": rows,
        "third_party": third,
    }
    Path(args.out).write_text(json.dumps(to_jsonable(out), indent=1, allow_nan=False) + "\n")


if __name__ == "__main__":
    main()
