"""The auditor's package layout (issue 25, "rooms"): one file per stage, each under ~800 lines,
the bounds taken from :mod:`ldp_audit.stats` (no private copy of the Clopper-Pearson / binomial
maths); the package gives its public names, a private name lives in its stage only."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import ldp_audit.audit as A

PKG = Path(A.__file__).parent


def test_every_stage_is_a_small_file():
    sizes = {f.name: len(f.read_text().splitlines()) for f in PKG.glob("*.py")}
    assert {"api.py", "selection.py", "statistics.py", "sampling.py", "exact.py"} <= set(sizes)
    assert max(sizes.values()) <= 800, sizes


def test_no_private_copy_of_the_beta_function_maths():
    """Clopper-Pearson bounds, the Poisson ratio bound and the binomial tail are stats'."""
    for f in PKG.glob("*.py"):
        text = f.read_text()
        assert not re.search(r"\bbetainc(inv)?\b", text), f.name
        assert "from scipy import special" not in text, f.name


@pytest.mark.parametrize("name", A.__all__)
def test_public_names_are_read_from_the_package(name):
    assert getattr(A, name) is not None


@pytest.mark.parametrize(
    "name,stage",
    [("_tail_rates", "selection"), ("_TAIL_FIT", "selection"), ("_CHUNK_ELEMENTS", "sampling")],
)
def test_a_private_name_has_one_address_its_stage(name, stage):
    """No compatibility layer (issue 37): ``ldp_audit.audit`` gives its public names only."""
    import importlib

    assert hasattr(importlib.import_module(f"ldp_audit.audit.{stage}"), name)
    assert not hasattr(A, name)


# ----------------------------------------------------------------------------------------------
# results bit for bit as the single module gave them (golden values, generated with the
# one-file ldp_audit/audit.py of commit cf616fc; in-test mechanisms, so a change elsewhere in
# the toolkit cannot move them)
# ----------------------------------------------------------------------------------------------


class _Lap:
    """Laplace(1/eps) on x clipped to [0, 1], in doubles (its float bits leak)."""

    epsilon = 1.0

    def privatize(self, x, rng):
        return np.clip(x, 0.0, 1.0) + rng.laplace(0.0, 1.0 / self.epsilon, x.shape)

    def candidate_pairs(self, dim):
        return [(np.zeros(dim), np.ones(dim))]


class _Gauss:
    """Gaussian noise sigma 1 on x clipped to [0, 1], claiming (3, 1e-3)."""

    epsilon, delta, sigma, sensitivity = 3.0, 1e-3, 1.0, 1.0

    def privatize(self, x, rng):
        return np.clip(x, 0.0, 1.0) + rng.normal(0.0, self.sigma, x.shape)

    def candidate_pairs(self, dim):
        return [(np.zeros(dim), np.ones(dim)), (np.ones(dim), np.zeros(dim))]


class _RR:
    """Binary randomized response claiming half its true epsilon (broken)."""

    epsilon = 0.5

    def privatize(self, x, rng):
        keep = rng.random(x.shape) < np.e / (1.0 + np.e)
        return np.where(keep, x, 1.0 - x)

    def candidate_pairs(self, dim):
        return [(np.zeros(dim), np.ones(dim))]


#: (bound, distribution, implementation, per-event bounds, witness counts, delta bound, profile,
#: sum of the f-DP curve's type II upper points, events estimated, samples used)
_GOLDEN = {
    "laplace": (
        7.387623504785161,
        0.9177533286878077,
        7.387623504785161,
        (0.9177533286878077, 0.8071030113970652, 7.387623504785161),
        (6977, 18000, 0, 18000),
        None,
        None,
        4.105672234085231,
        3,
        20000,
    ),
    "laplace-pool-poisson": (
        0.9707084836082132,
        0.9707084836082132,
        None,
        (0.9422594629172867, 0.9707084836082132),
        (15359, 36298, 5643, 36298),
        None,
        None,
        4.246530726625198,
        2,
        20000,
    ),
    "gauss-delta-event": (
        7.394038985156921,
        2.166699114440555,
        7.394038985156921,
        (2.166699114440555, 1.7903300704700804, 7.394038985156921),
        (7039, 18000, 0, 18000),
        0.37570431669778304,
        (
            2.163241853566162,
            2.1632181610693633,
            2.1630049033343366,
            2.160869820906397,
            2.1392644636060956,
            1.928172334968706,
            1.398778654273277,
            1.0458965785352794,
        ),
        3.4364258151392946,
        3,
        20000,
    ),
    # session 52: the input cells' events are marked over any number of output values (binary
    # here), read at the 25% level: the same event and counts, another error split chosen (a
    # deliberate change of selection): 0.9760893331128916 before
    "rr-sequential": (
        0.9786901838242887,
        0.9786901838242887,
        0.9786901838242887,
        (0.9786901838242887,),
        (1358, 1800, 455, 1800),
        None,
        None,
        1.2710526252020604,
        1,
        2000,
    ),
}


@pytest.mark.parametrize("case", sorted(_GOLDEN))
def test_results_are_bit_for_bit_those_of_the_single_module(case, monkeypatch):
    import ldp_audit.audit.selection as selection
    from ldp_audit.audit import audit

    # the goldens predate issue 40's normal tail model of the delta > 0 selection (a deliberate
    # change of which events are chosen); with it off the code path is the split's, bit for bit
    monkeypatch.setattr(selection, "_NORMAL_TAIL", False)

    mech, kw = {
        "laplace": (_Lap(), dict(samples=20_000, rng=0)),
        "laplace-pool-poisson": (
            _Lap(),
            dict(samples=20_000, rng=1, pool=True, ratio_test="poisson", float_bits=False),
        ),
        "gauss-delta-event": (_Gauss(), dict(samples=20_000, rng=2, pool=True, delta_event=True)),
        "rr-sequential": (_RR(), dict(samples=40_000, rng=3, sequential=True)),
    }[case]
    r = audit(mech, **kw)
    w = r.witness
    got = (
        r.epsilon_lower_bound,
        r.distribution.epsilon_lower_bound,
        None if r.implementation is None else r.implementation.epsilon_lower_bound,
        r.bounds,
        (w.k1, w.n1, w.k2, w.n2),
        r.delta_lower_bound,
        None if r.profile is None else r.profile.epsilon_lower,
        None if r.tradeoff is None else sum(r.tradeoff.type2_upper),
        r.events_estimated,
        r.samples,
    )
    assert got == _GOLDEN[case]  # exact: the split moved code, it must not move a bit
