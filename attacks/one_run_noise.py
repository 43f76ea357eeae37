"""Tests of a DP-SGD run's released noise itself, coordinate by coordinate (issue 36).

The Opacus integration (:mod:`ldp_audit.opacus`) records, at every released update and for
every parameter tensor, the *residual*: the released noisy sum minus the clipped sum the
optimizer computed (Opacus's ``p.summed_grad``), in units of ``C``. Under the claim it is the
optimizer's fresh noise, exactly i.i.d. ``N(0, sigma^2)`` on every coordinate of every tensor
and independent across updates, whatever the data (the data only enter the clipped sum, which
is subtracted). So the tests below are exact, need no canary and no bound on the data:

* :func:`tensor_noise_test`: too little noise anywhere: per tensor pooled over the updates
  (``|r_l|^2 / sigma^2 ~ chi^2(T d_l)``), per update over all coordinates (a scan over the
  updates) and per (update, tensor) cell (a scan over the cells); lower tails, Bonferroni over
  the three families;
* :func:`noise_shape_test`: noise of the claimed size but not Gaussian (bounded, e.g. uniform
  or random-sign noise of the claimed std, which the size tests cannot see and which lets a
  record's contribution show outside the noise's support): a Kolmogorov-Smirnov test of the
  sketch coordinates divided by ``sigma`` against ``N(0, 1)``, pooled and per tensor; with
  the recorder's rounding grain, also noise rounded to few significant bits before it is added
  (bfloat16, float16: its values on the grid of such floats);
* :func:`pair_dependence_test`: noise correlated across any two updates (any lag: reused,
  partly reused, a generator reseeded each epoch): the normalised inner product of two
  independent isotropic Gaussian vectors of ``k`` coordinates has ``(1 + rho) / 2 ~
  Beta((k - 1) / 2, (k - 1) / 2)`` exactly; two-sided, the largest over all pairs with a
  Bonferroni correction, on a public sketch of coordinates and on each tensor's part of it;
* :func:`shift_dependence_test`: noise shared between updates at a coordinate offset (windows
  of one pool of draws that overlap, a counter-based generator advanced by fewer draws than an
  update takes): for a fixed shift ``s`` the normalised circular cross-correlation of two
  updates' full noise vectors is the normalised inner product of two independent isotropic
  Gaussian vectors (the rolled one is still one), so it has the same exact law with ``k`` the
  coordinates tested; the largest over all ``n`` shifts and the pairs at lags 1..L, Bonferroni;
* :func:`offset_dependence_test`: noise correlated within each update between the coordinates
  of one tensor at a fixed offset (``z_i + c z_{i+k}`` along the flattened tensor, each
  coordinate's std and every update's freshness right): the pooled lag-k product over the
  updates, at every offset of every tensor, is a Gaussian chaos whose tail has a
  scale-free bound (Laurent-Massart); the largest over the offsets, Bonferroni;
* :func:`same_values_test`: two updates' noise of one squared norm (the same values again in
  another order or with other signs, at any lag, which no correlation lines up): independent
  ``sigma^2 chi^2(d)`` norms coincide within ``g`` with probability at most ``2 g`` times the
  law's largest density; the closest pair of all, Bonferroni over the pairs;
* :func:`coordinate_dependence_test`: noise shared or correlated across coordinates or tensors
  within the updates (one draw added to two tensors, a vector tiled or broadcast): the same
  exact law for two coordinates' vectors over the updates, the largest over all pairs of sketch
  coordinates with a Bonferroni correction.

A tensor the optimizer released without a clipped sum to subtract (no ``summed_grad``, no
gradient) cannot be tested this way: it is named in the result (``untested``), never skipped
in silence.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError
from ldp_audit.validation import check_int, check_probability, check_real_in

__all__ = [
    "tensor_noise_test",
    "noise_shape_test",
    "pair_dependence_test",
    "coordinate_dependence_test",
    "shift_dependence_test",
    "offset_dependence_test",
    "same_values_test",
    "data_dependence_test",
    "scan_p_value",
    "verdict",
]


def scan_p_value(p_min: float, n: int) -> float:
    """``P[min of n independent Uniform(0, 1) <= p_min] = 1 - (1 - p_min)^n`` (exact; at most
    ``n p_min``, the Bonferroni bound)."""
    if n <= 0 or p_min >= 1.0:
        return 1.0
    return float(-np.expm1(n * np.log1p(-p_min)))


def verdict(level: float, *parts: float, **fields: Any) -> dict[str, Any]:
    """A test's result from the p-values of its ``parts``, Bonferroni over them (``p = min(1,
    n min(parts))``, rejected when ``p <= level``; no part: p None, not rejected), with its
    other ``fields``."""
    p = min(1.0, len(parts) * min(parts)) if parts else None
    return {"rejected": p is not None and bool(p <= level), "p_value": p, **fields, "level": level}


def _power_ratio(dof: float, level: float, power: float = 0.95) -> float:
    """The largest noise std ratio ``r`` (released / claimed) that a lower-tail chi-square test
    on ``dof`` coordinates at ``level`` detects with probability ``power``:
    ``P[r^2 chi^2(dof) <= q_level] = power``."""
    from scipy.stats import chi2

    return float(math.sqrt(chi2.ppf(level, dof) / chi2.ppf(power, dof)))


def _noise_sq(
    noise_sq: Any, dims: Any, sigma: Any, confidence: Any
) -> tuple[np.ndarray, np.ndarray, float, float]:
    """The (T, L) squared norms, the (L,) tensor sizes, sigma and the level, checked."""
    s = np.asarray(noise_sq, dtype=np.float64)
    d = np.asarray(dims, dtype=np.int64).reshape(-1)
    if s.ndim != 2 or s.shape[1] != d.size or (d < 1).any():
        raise InvalidParameterError(
            f"noise_sq must be (T, L) with L = {d.size} tensor sizes >= 1, got {s.shape}"
        )
    sigma = check_real_in(sigma, "sigma", lo=0.0, lo_open=True)
    return s, d, sigma, 1.0 - check_probability(confidence, "confidence")


def tensor_noise_test(
    noise_sq: Any,
    dims: Any,
    *,
    sigma: float,
    confidence: float = 0.95,
    names: list[str] | None = None,
) -> dict[str, Any]:
    """Too little noise in any tensor, any update or any (update, tensor) cell.

    Args:
        noise_sq: (T, L) squared norms of the residual noise of each update in each tensor, in
            units of ``C`` (NaN where the tensor could not be tested at that update).
        dims: (L,) the tensors' coordinate counts.
        sigma: the claimed noise multiplier.
        confidence: the test's level is ``1 - confidence``, split over three families (per
            tensor: Bonferroni over the tested tensors; per update and per cell: exact scans).
        names: the tensors' names for the result (default ``tensor i``).

    Returns:
        ``{"rejected", "p_value", "level", "p_tensor", "p_update", "p_cell", "tensors",
        "untested", "worst_update", ...}``; ``tensors`` holds per tensor its entries, updates
        tested, p-value (Bonferroni-adjusted over tensors), the estimated noise std ratio and
        the smallest ratio detected with 95 % power (``detectable_std_ratio``; 0 = no noise is
        always detected). p-values are None when nothing could be tested.
    """
    from scipy.stats import chi2

    s, d, sigma, level = _noise_sq(noise_sq, dims, sigma, confidence)
    T, L = s.shape
    names = list(names) if names is not None else [f"tensor {i}" for i in range(L)]
    ok = np.isfinite(s) & (s >= 0)
    x = np.where(ok, s, 0.0) / sigma**2
    tested = [i for i in range(L) if ok[:, i].any()]
    untested = [names[i] for i in range(L) if i not in tested]
    out: dict[str, Any] = {"updates": T, "untested": untested}
    if not tested or T == 0:
        return verdict(level, **out, p_tensor=None, p_update=None, p_cell=None,
                       tensors=_rows(names, d, ok, None, None, None))  # fmt: skip
    lt = len(tested)
    lvl_tensor = level / 3 / lt
    # per tensor, pooled over its tested updates
    p_l = np.full(L, np.nan)
    ratio = np.full(L, np.nan)
    power = np.full(L, np.nan)
    for i in tested:
        dof = float(ok[:, i].sum() * d[i])
        p_l[i] = float(chi2.cdf(x[ok[:, i], i].sum(), dof))
        ratio[i] = math.sqrt(x[ok[:, i], i].sum() / dof)
        power[i] = _power_ratio(dof, lvl_tensor)
    p_tensor = min(1.0, lt * float(np.nanmin(p_l)))
    # per update, over its tested coordinates
    dof_t = (ok * d[None, :]).sum(axis=1).astype(np.float64)
    rows = dof_t > 0
    p_t = np.ones(T)
    p_t[rows] = chi2.cdf(x.sum(axis=1)[rows], dof_t[rows])
    p_update = scan_p_value(float(p_t[rows].min()), int(rows.sum()))
    # per (update, tensor) cell
    p_c = np.ones((T, L))
    for i in tested:
        p_c[ok[:, i], i] = chi2.cdf(x[ok[:, i], i], float(d[i]))
    cell = np.unravel_index(int(np.argmin(np.where(ok, p_c, 2.0))), p_c.shape)
    p_cell = scan_p_value(float(p_c[cell]), int(ok.sum()))
    worst_t = int(np.argmin(np.where(rows, p_t, 2.0)))
    return verdict(
        level,
        p_tensor,
        p_update,
        p_cell,
        **out,
        p_tensor=p_tensor,
        p_update=p_update,
        p_cell=p_cell,
        worst_update={
            "update": worst_t,
            "p_value": float(p_t[worst_t]),
            "std_ratio": math.sqrt(x[worst_t].sum() / dof_t[worst_t]),
        },
        worst_cell={
            "update": int(cell[0]),
            "tensor": names[int(cell[1])],
            "p_value": float(p_c[cell]),
        },
        update_detectable_std_ratio=_power_ratio(float(dof_t[rows].min()), level / 3 / T),
        tensors=_rows(names, d, ok, np.minimum(1.0, lt * p_l), ratio, power),
    )


def _sketch(sketch: Any, groups: Any, confidence: Any) -> tuple[np.ndarray, np.ndarray, float]:
    """The (T, K) sketch as float64, the (K,) tensor index of each coordinate and the level,
    checked."""
    z = np.asarray(sketch, dtype=np.float64)
    g = np.asarray(groups, dtype=np.int64).reshape(-1)
    if z.ndim != 2 or z.shape[1] != g.size:
        raise InvalidParameterError(f"sketch must be (T, K) with K = {g.size}, got {z.shape}")
    return z, g, 1.0 - check_probability(confidence, "confidence")


def _families(g: np.ndarray, names: list[str] | None, min_size: int) -> list[tuple[str, Any]]:
    """The whole sketch and, when it spans several tensors, each tensor holding at least
    ``min_size`` of its coordinates: ``(name, coordinate mask)``."""
    fams: list[tuple[str, Any]] = [("all tensors", np.ones(g.size, dtype=bool))]
    ids = np.unique(g)
    if ids.size > 1:
        fams += [(names[i] if names else f"tensor {int(i)}", g == i)
                 for i in ids if (g == i).sum() >= min_size]  # fmt: skip
    return fams


PRECISION_BITS = (8, 11)
"""The significand bits the precision test tries: bfloat16 (and every 8-bit float) and float16
(and TensorFloat-32)."""

PRECISION_WINDOW = 1 / 32
"""The precision test counts values within this fraction of a grid step of the grid."""


def noise_shape_test(
    sketch: Any,
    groups: Any,
    *,
    sigma: float,
    confidence: float = 0.95,
    names: list[str] | None = None,
    grain: Any = None,
    unit: Any = 1.0,
) -> dict[str, Any]:
    """Released noise whose distribution is not the claimed ``N(0, sigma^2)``.

    Under the claim every sketch coordinate (the residual in units of ``C``) divided by
    ``sigma`` is an independent ``N(0, 1)`` draw, so a two-sided Kolmogorov-Smirnov test against
    ``N(0, 1)`` (SciPy's ``kstest``, exact for up to 10,000 values, asymptotic beyond) is exact.
    It sees what the size tests cannot: noise of the claimed std with another shape (uniform,
    random signs, a discretised or truncated Gaussian), whose bounded support lets a record's
    contribution show. Families: the whole sketch and each tensor holding sketch coordinates
    (when there are several); Bonferroni over them.

    With ``grain`` (a bound on each value's rounding grain, the recorder's ``noise_grain``), a
    tenth of the level goes to a precision test of the noise in the units it was drawn in (the
    sketch times ``unit``, the clip norm ``C`` of a residual in units of ``C``; the grain
    likewise; a tuple of units tests each, Bonferroni: ``(C, 1 / sigma)`` reads both noise
    ``N(0, (sigma C)^2)`` rounded and a standard normal rounded, then scaled by ``sigma C``):
    noise rounded to ``b`` significant bits
    (``PRECISION_BITS``: bfloat16 or float16 before it is added) lies on the grid of ``b``-bit
    floats. A value ``v`` in ``[2^(e-1), 2^e)`` is on it when ``v / 2^(e-b)`` is an integer;
    ``delta`` is its distance to the nearest one. Only values whose grain is at most 1/64 of the
    grid step ``2^(e-b)`` are read (a residual is a lattice of that grain shifted by the clipped
    sum). Under the claim a value's law is a Gaussian density on that lattice, so ``P[delta <
    w] <= (2 w + 1/64) x`` the density's largest ratio over one grid step (``exp(2^(1-b)
    v^2 / sigma^2)``: below 1.3 for ``|v| < 5.5 sigma`` at b = 8); the test counts the values
    with ``delta < w`` (``w = PRECISION_WINDOW``) against a binomial of ``p0 = 2 (2 w + 1/64)``
    (twice the bound; independent values), upper tail, Bonferroni over the bits and families.

    Args:
        sketch: (T, K) the residual noise of each update on ``K`` public coordinates, in units
            of ``C`` (NaN where that tensor could not be tested at that update).
        groups: (K,) the tensor index of each coordinate.
        sigma: the claimed noise multiplier.
        confidence: the level is ``1 - confidence``.
        names: the tensors' names.

    Returns:
        ``{"rejected", "p_value", "level", "families": [{name, values, ks_distance, p_value,
        detectable_distance}]}``; ``detectable_distance`` is the family's exact critical
        Kolmogorov distance (a CDF gap above it is flagged). p_value is None when no value
        could be tested.
    """
    from scipy.stats import kstest, kstwo

    z, g, level = _sketch(sketch, groups, confidence)
    sigma = check_real_in(sigma, "sigma", lo=0.0, lo_open=True)
    fams = _families(g, names, 1)
    share = 1.0 if grain is None else 0.9  # the KS test's part of the level
    F = len(fams) / share
    out, best = [], None
    for name, sel in fams:
        v = z[:, sel].ravel()
        v = v[np.isfinite(v)] / sigma
        fam: dict[str, Any] = {"name": name, "values": int(v.size)}
        if v.size == 0:
            out.append({**fam, "ks_distance": None, "p_value": None, "detectable_distance": None})
            continue
        r = kstest(v, "norm")
        p = min(1.0, F * float(r.pvalue))
        out.append({**fam, "ks_distance": float(r.statistic), "p_value": p,
                    "detectable_distance": float(kstwo.isf(level / F, v.size))})  # fmt: skip
        best = p if best is None else min(best, p)
    res = {"level": level, "families": out}
    if grain is not None:
        units = [check_real_in(u, "unit", lo=0.0, lo_open=True) for u in np.atleast_1d(unit)]
        res["precision"] = _precision(z, np.asarray(grain, dtype=np.float64), fams, level / 10,
                                      units)  # fmt: skip
        p = res["precision"]["p_value"]
        best = p if best is None else best if p is None else min(best, p)
    return {**res, "rejected": bool(best is not None and best <= level), "p_value": best}


def _precision(z: np.ndarray, grain: np.ndarray, fams: list, level: float,
               units: list[float]) -> dict[str, Any]:  # fmt: skip
    """The precision part of :func:`noise_shape_test` at ``level`` (a tenth of the shape
    test's): per unit, family and bits, the values read, those within the window and the
    p-value (Bonferroni-adjusted over the units, families and bits and scaled to the whole
    shape level)."""
    from scipy.stats import binom

    if grain.shape != z.shape:
        raise InvalidParameterError(f"grain must be {z.shape} like the sketch, got {grain.shape}")
    w = PRECISION_WINDOW
    p0 = 2.0 * (2.0 * w + 1.0 / 64)
    n_tests = len(units) * len(fams) * len(PRECISION_BITS)
    rows, best = [], None
    for unit in units:
        m, e = np.frexp(np.where(np.isfinite(z), z * unit, 0.0))
        for b in PRECISION_BITS:
            u = np.abs(m) * 2.0**b
            on = np.abs(u - np.round(u)) < w
            ok = (m != 0) & np.isfinite(grain) & (grain * unit * 64 <= np.ldexp(1.0, e - b))
            for name, sel in fams:
                n, k = int(ok[:, sel].sum()), int((on & ok)[:, sel].sum())
                p = min(1.0, 10.0 * n_tests * float(binom.sf(k - 1, n, p0))) if n else None
                rows.append({"name": name, "unit": unit, "bits": b, "values": n, "on_grid": k,
                             "p_value": p})  # fmt: skip
                best = p if best is None or (p is not None and p < best) else best
    rejected = bool(best is not None and best <= 10 * level)
    return {"p_value": best, "level": level, "null_rate": p0, "window": w,
            "rejected": rejected, "families": rows}  # fmt: skip


def _rows(names: list[str], d: np.ndarray, ok: np.ndarray, p: Any, ratio: Any,
          power: Any) -> list[dict[str, Any]]:  # fmt: skip
    out = []
    for i, name in enumerate(names):
        n = int(ok[:, i].sum())
        row: dict[str, Any] = {"tensor": name, "entries": int(d[i]), "updates_tested": n}
        if n == 0 or p is None:
            why = "no clipped sum to subtract (summed_grad) or no gradient"
            row.update(tested=False, p_value=None, std_ratio=None, detectable_std_ratio=None,
                       reason=why)  # fmt: skip
        else:
            row.update(tested=True, p_value=float(p[i]), std_ratio=float(ratio[i]),
                       detectable_std_ratio=float(power[i]))  # fmt: skip
        out.append(row)
    return out


def _rho_sf(rho: np.ndarray, k: Any) -> np.ndarray:
    """Two-sided p-value of a normalised inner product ``rho`` of two independent isotropic
    Gaussian vectors of ``k`` coordinates: ``(1 + rho) / 2 ~ Beta((k-1)/2, (k-1)/2)``."""
    from scipy.stats import beta

    a = (k - 1) / 2.0
    return np.minimum(1.0, 2.0 * beta.sf((1.0 + np.abs(rho)) / 2.0, a, a))


def _threshold(k: int, level: float, power: float = 0.95) -> dict[str, float]:
    """The exact two-sided ``threshold`` on ``|rho|`` at ``level`` for ``k`` coordinates and the
    correlation detected with ``power`` (Fisher's approximation: the sample correlation of
    ``k`` pairs is about ``N(rho, (1 - rho^2)^2 / k)``)."""
    from scipy.optimize import brentq
    from scipy.stats import beta, norm

    a = (k - 1) / 2.0
    thr = float(2.0 * beta.isf(level / 2.0, a, a) - 1.0)
    z = norm.ppf(power) / math.sqrt(k)
    det = brentq(lambda r: r - z * (1 - r * r) - thr, thr, 1.0, xtol=1e-15)
    return {"threshold": thr, "detectable_correlation": float(det)}


def pair_dependence_test(
    sketch: Any,
    groups: Any,
    *,
    confidence: float = 0.95,
    names: list[str] | None = None,
    min_coordinates: int = 3,
) -> dict[str, Any]:
    """Noise correlated across any pair of updates, at any lag.

    Args:
        sketch: (T, K) the residual noise of each update on ``K`` public coordinates (NaN where
            that tensor could not be tested at that update); any scale (the statistic is
            normalised).
        groups: (K,) the tensor index of each coordinate.
        confidence: level ``1 - confidence``, Bonferroni over the families (the whole sketch,
            and each tensor with at least ``min_coordinates`` coordinates in it when there are
            several) and over the ``T (T - 1) / 2`` pairs of each family.
        names: the tensors' names.

    Returns:
        ``{"rejected", "p_value", "level", "pairs", "families": [{name, coordinates, p_value,
        max_abs_rho, pair, lag, threshold, detectable_correlation}], ...}``.
    """
    z, g, level = _sketch(sketch, groups, confidence)
    T = z.shape[0]
    fams = _families(g, names, min_coordinates)
    P = T * (T - 1) // 2
    base = {"level": level, "pairs": P, "updates": T}
    if T < 2 or g.size < min_coordinates:
        return {**base, "rejected": False, "p_value": None, "families": []}
    F = len(fams)
    out = []
    best = 1.0
    for name, sel in fams:
        x = z[:, sel]
        rows = np.isfinite(x).all(axis=1)
        nrm = np.linalg.norm(np.where(np.isfinite(x), x, 0.0), axis=1)
        rows &= nrm > 0  # no noise at all: the noise test's to flag
        k = int(sel.sum())
        idx = np.flatnonzero(rows)
        fam: dict[str, Any] = {"name": name, "coordinates": k, "updates": int(idx.size),
                               **_threshold(k, level / F / max(P, 1))}  # fmt: skip
        if idx.size < 2:
            out.append({**fam, "p_value": None, "max_abs_rho": None})
            continue
        u = x[idx] / nrm[idx, None]
        rho = u @ u.T
        iu = np.triu_indices(idx.size, 1)
        r = rho[iu]
        j = int(np.argmax(np.abs(r)))
        pmin = float(_rho_sf(r[j : j + 1], k)[0])
        p = min(1.0, P * pmin)
        s, t = int(idx[iu[0][j]]), int(idx[iu[1][j]])
        out.append({**fam, "p_value": p, "max_abs_rho": float(r[j]), "pair": [s, t],
                    "lag": t - s})  # fmt: skip
        best = min(best, p)
    p = min(1.0, F * best)
    return {**base, "rejected": bool(p <= level), "p_value": p, "families": out}


def coordinate_dependence_test(
    sketch: Any,
    groups: Any,
    *,
    confidence: float = 0.95,
    names: list[str] | None = None,
    block: int = 512,
) -> dict[str, Any]:
    """Noise shared or correlated between two coordinates (of one tensor or of two).

    Under the claim the ``T`` values of one sketch coordinate over the updates form an
    isotropic Gaussian vector independent of every other coordinate's, so the normalised inner
    product of two coordinates' vectors has the exact law of :func:`pair_dependence_test` with
    ``k = T``. Two-sided, the largest over all ``K (K - 1) / 2`` pairs of coordinates, Bonferroni
    over the pairs (computed in blocks of ``block`` coordinates; no pair matrix is kept). Updates
    where a coordinate could not be tested (NaN) are left out; coordinates with no noise at all
    are the size test's to flag.

    Returns:
        ``{"rejected", "p_value", "level", "pairs", "updates", "max_abs_rho", "coordinates",
        "tensors", "threshold", "detectable_correlation"}``; p_value is None with fewer than
        two updates or coordinates.
    """
    z, g, level = _sketch(sketch, groups, confidence)
    x = z[np.isfinite(z).all(axis=1)]
    nrm = np.linalg.norm(x, axis=0)
    cols = np.flatnonzero(nrm > 0)
    T, K = x.shape[0], cols.size
    P = K * (K - 1) // 2
    base: dict[str, Any] = {"level": level, "pairs": P, "updates": T}
    if T < 2 or K < 2:
        return {**base, "rejected": False, "p_value": None, "max_abs_rho": None}
    u = x[:, cols] / nrm[cols]
    best, arg = -1.0, (0, 1)
    for a in range(0, K, block):
        # row i is coordinate a + i, column j coordinate a + j: each pair once (j > i)
        r = np.abs(u[:, a : a + block].T @ u[:, a:])
        r[np.arange(K - a)[None, :] <= np.arange(r.shape[0])[:, None]] = -1.0
        j = int(np.argmax(r))
        if r.flat[j] > best:
            best, arg = float(r.flat[j]), (a + j // (K - a), a + j % (K - a))
    p = min(1.0, P * float(_rho_sf(np.array([best]), T)[0]))
    i, j = (int(cols[k]) for k in arg)
    tensor = [names[g[k]] if names else f"tensor {int(g[k])}" for k in (i, j)]
    return {**base, "rejected": bool(p <= level), "p_value": p, "max_abs_rho": best,
            "coordinates": [i, j], "tensors": tensor, **_threshold(T, level / P)}  # fmt: skip


def shift_dependence_test(
    max_rho: Any, earlier: Any, *, shifts: int, confidence: float = 0.95
) -> dict[str, Any]:
    """Noise of two updates sharing values at a coordinate offset (any shift, lags 1..L).

    Args:
        max_rho: (T, L) per update ``t`` and lag ``l``, the largest ``|rho_s|`` over the
            ``shifts`` shifts of the normalised circular cross-correlation of the noise of
            updates ``t - l`` and ``t`` (NaN where not computed).
        earlier: (T, L) the coordinates tested in update ``t - l``'s vector (untested ones were
            set to 0: with ``k`` its tested coordinates, ``|rho_s|`` is at most the exact law's
            variable of ``k``, so the test is exact with every tensor tested, conservative
            otherwise).
        shifts: the vectors' length (every shift is tried).
        confidence: level ``1 - confidence``, Bonferroni over the shifts and the pairs.

    Returns:
        ``{"rejected", "p_value", "level", "pairs", "shifts", "max_abs_rho", "update",
        "lag", "threshold", "detectable_correlation"}`` (p None when no pair was computed).
    """
    rho = np.asarray(max_rho, dtype=np.float64)
    k = np.asarray(earlier, dtype=np.int64)
    if rho.ndim != 2 or k.shape != rho.shape:
        raise InvalidParameterError(
            f"max_rho and earlier must be (T, L) of one shape, got {rho.shape}, {k.shape}"
        )
    n = check_int(shifts, "shifts", minimum=1)
    level = 1.0 - check_probability(confidence, "confidence")
    ok = np.isfinite(rho) & (k >= 3)
    N = int(ok.sum())
    base: dict[str, Any] = {"level": level, "pairs": N, "shifts": n}
    if not N:
        return {**base, "rejected": False, "p_value": None, "max_abs_rho": None}
    p_cell = np.ones(rho.shape)
    p_cell[ok] = _rho_sf(np.minimum(rho[ok], 1.0), k[ok])  # each pair's law: its own k
    t, lag = np.unravel_index(int(np.argmin(p_cell)), p_cell.shape)
    p = min(1.0, N * n * float(p_cell[t, lag]))
    return {**base, "rejected": bool(p <= level), "p_value": p,
            "max_abs_rho": float(rho[t, lag]), "update": int(t), "lag": int(lag) + 1,
            **_threshold(int(k[ok].min()), level / N / n)}  # fmt: skip


def offset_dependence_test(sketch: Any, groups: Any, at: Any, *,
                           confidence: float = 0.95, names: list[str] | None = None,
                           block: int = 512) -> dict[str, Any]:  # fmt: skip
    """Noise of one update correlated between the coordinates of a tensor at a fixed offset.

    For tensor ``l`` and offset ``k = 1..n_l - 1`` along the flattened tensor, ``S_k = sum_t
    sum_pairs x_{t,i} x_{t,i+k}`` over the ``N_k`` pairs of sketch coordinates ``at`` that offset
    (``n_l - k`` when the sketch holds the tensor whole) and the updates where the tensor was
    tested. Under the claim its ``D`` values are i.i.d. ``N(0, sigma^2)`` and ``S_k / sum x^2``
    is a ratio of quadratic forms, the numerator's of zero trace with ``sum lam^2 = T N_k / 2``
    and eigenvalues in [-1, 1] (each coordinate has at most two partners): Laurent and
    Massart's bound (it holds for weights of either sign) gives ``P[|S_k| / sum x^2 >= r] <=
    2 exp(-u^2)``, ``u = r D / (a + sqrt(a^2 + 2 (1 - r) r D))``, ``a^2 = T N_k / 2 + r^2 D``
    (scale-free, no normal approximation; conservative). The largest over every ``(tensor,
    offset)`` holding a pair, Bonferroni over them. ``z``: ``S_k`` in standard deviations
    (the pooled ``x^2`` as the variance); ``rho``: the mean lag-k product over that variance.
    No cap on ``k``: a tensor's pairs at one offset are at most ``n_l`` (its sketch share).

    Returns:
        ``{"rejected", "p_value", "level", "offsets", "tensor", "offset", "pairs", "rho", "z"}``
        (p None when no tensor has two tested sketch coordinates).
    """
    z, g, level = _sketch(sketch, groups, confidence)
    at = np.asarray(at, dtype=np.int64).reshape(-1)
    found: list[tuple[float, int, int, int, float, float]] = []  # (p, tensor, k, N_k, rho, z)
    count = 0
    for i in np.unique(g):
        col = np.flatnonzero(g == i)
        x = z[:, col][np.isfinite(z[:, col]).all(axis=1)]
        ss, pos = float((x * x).sum()), at[col]
        if col.size < 2 or ss <= 0:
            continue
        ks, sums = [], []
        ascending = bool((np.diff(pos) > 0).all())  # then a pair's later coordinate comes later
        for a in range(0, col.size, block):
            b = a if ascending else 0  # the columns that can hold a later coordinate
            d = pos[None, b:] - pos[a : a + block, None]
            keep = d > 0  # each pair once
            ks.append(d[keep])
            sums.append((x[:, a : a + block].T @ x[:, b:])[keep])
        d = np.concatenate(ks)  # offsets are small positive integers: count them directly
        N, S = np.bincount(d), np.bincount(d, np.concatenate(sums))
        k = np.flatnonzero(N)
        N, S = N[k], S[k]
        r0 = np.minimum(np.abs(S) / ss, 1.0)
        a = np.sqrt(x.shape[0] * N / 2.0 + r0 * r0 * x.size)
        sx = r0 * x.size / (a + np.sqrt(a * a + 2.0 * (1.0 - r0) * r0 * x.size))  # sqrt(x)
        p = np.minimum(1.0, 2.0 * np.exp(-sx * sx))
        j, count = int(np.argmin(p)), count + k.size
        var = ss / x.size
        found.append((float(p[j]), int(i), int(k[j]), int(N[j]), S[j] / N[j] / x.shape[0] / var,
                      S[j] / var / math.sqrt(x.shape[0] * N[j])))  # fmt: skip
    if not found:
        return {"rejected": False, "p_value": None, "level": level, "offsets": 0}
    p, i, k, N, rho, zz = min(found)
    p = min(1.0, count * p)
    return {"rejected": bool(p <= level), "p_value": p, "level": level, "offsets": count,
            "tensor": names[i] if names else f"tensor {i}", "offset": k, "pairs": N,
            "rho": float(rho), "z": float(zz)}  # fmt: skip


def same_values_test(noise_sq: Any, dims: Any, *, sigma: float, confidence: float = 0.95) -> dict:
    """Two updates whose noise has the same squared norm (one draw released again permuted,
    sign-flipped or rotated: any isometry, at any lag).

    Each update's squared norm ``S_t`` over its tested tensors is ``sigma^2 chi^2(d_t)``,
    independent over the updates; for two of them ``P[|S_s - S_t| <= g] <= 2 g f`` with ``f``
    the largest density of either law (that of a difference of independent variables is at
    most either's), here the largest over the updates (``d_t >= 3``: bounded). p: the closest
    pair's ``2 g f``, Bonferroni over the pairs. The residual's float32 rounding keeps a
    repeat's gap from 0 (1e-7 to 1e-6 at d = 4,258); the largest gap flagged, ``gap`` in the
    result, shrinks as ``1 / T^2`` (2.5e-5 at T = 80 there: docs/opacus.md, Coverage).

    Args:
        noise_sq: (T, L) as :func:`tensor_noise_test` takes it (NaN cells left out).
        dims: (L,) the tensors' coordinate counts.
        sigma: the claimed noise multiplier.
        confidence: the level is ``1 - confidence``.

    Returns:
        ``{"rejected", "p_value", "level", "pairs", "min_gap", "pair", "gap"}`` (p None when
        fewer than two updates hold 3 tested coordinates).
    """
    from scipy.stats import chi2

    s, d, sigma, level = _noise_sq(noise_sq, dims, sigma, confidence)
    ok = np.isfinite(s)
    tot, dof = np.where(ok, s, 0.0).sum(axis=1), ok @ d
    rows = np.flatnonzero(dof >= 3)
    N = len(rows) * (len(rows) - 1) // 2
    if not N:
        return {"rejected": False, "p_value": None, "level": level, "pairs": 0}
    f = float(chi2.pdf(dof[rows].min() - 2, dof[rows].min())) / sigma**2
    order = rows[np.argsort(tot[rows], kind="stable")]
    gaps = np.diff(tot[order])
    i = int(np.argmin(gaps))
    p = min(1.0, N * 2.0 * float(gaps[i]) * f)
    return {"rejected": bool(p <= level), "p_value": p, "level": level, "pairs": N,
            "min_gap": float(gaps[i]), "pair": sorted(int(order[j]) for j in (i, i + 1)),
            "gap": level / (2.0 * N * f)}  # fmt: skip


def data_dependence_test(noise_data: Any, noise_sq: Any, dims: Any, *,
                         confidence: float = 0.95) -> dict:  # fmt: skip
    """Released noise that follows the data (the raw gradient or a running mean of it left in
    the released update: the residual is then noise plus a data term along the gradient).

    ``noise_data[t, l] = (<r_{t,l}, s_{t,l}>, |s_{t,l}|^2)``: the released noise ``r`` and the
    clipped sum ``s`` of tensor ``l`` at update ``t``. ``s`` is computed before the noise is
    drawn, so under the claim (fresh isotropic Gaussian noise of any scale) the cosine
    ``c_t = <r_t, s_t> / |r_t| |s_t|`` is that of a uniform direction on the sphere of the ``d``
    tested coordinates, given the past: symmetric, sub-Gaussian with variance proxy ``1 / d``
    (its moment generating function ``0F1(; d/2; lambda^2/4) <= exp(lambda^2 / 2d)``), so
    ``P[|sum_t c_t| >= x] <= 2 exp(-x^2 / 2 V)``, ``V = sum_t 1 / d_t`` (a martingale: each
    cosine is centred given the past). Exact for more noise than claimed too (the scale drops
    out). Families: the whole vector (every tested tensor) and each tensor, Bonferroni.

    Returns:
        ``{"rejected", "p_value", "level", "families": [{"name", "sum", "threshold", "p"}]}``
        (p None when no update has a nonzero clipped sum and noise).
    """
    nd = np.asarray(noise_data, dtype=np.float64)
    s = np.asarray(noise_sq, dtype=np.float64)
    d = np.asarray(dims, dtype=np.int64).reshape(-1)
    if nd.shape != (*s.shape, 2) or s.ndim != 2 or s.shape[1] != d.size:
        raise InvalidParameterError(f"noise_data must be (T, {d.size}, 2), got {nd.shape}")
    level = 1.0 - check_probability(confidence, "confidence")
    ok = np.isfinite(nd).all(axis=2) & np.isfinite(s)
    dot, ss, rr = (np.where(ok, a, 0.0) for a in (nd[..., 0], nd[..., 1], s))
    fams = [("all tensors", dot.sum(1), ss.sum(1), rr.sum(1), ok @ d)]
    fams += [(f"tensor {i}", dot[:, i], ss[:, i], rr[:, i], ok[:, i] * d[i]) for i in range(d.size)]
    rows = []
    for name, a, b, c, k in fams:
        use = (b > 0) & (c > 0) & (k > 0)
        if not use.any():
            continue
        total = float((a[use] / np.sqrt(b[use] * c[use])).sum())
        V = float((1.0 / k[use]).sum())
        p = min(1.0, 2.0 * math.exp(-(total**2) / (2.0 * V)))
        thr = math.sqrt(2.0 * V * math.log(2.0 * len(fams) / level))  # at the Bonferroni share
        rows.append({"name": name, "sum": total, "p": p, "threshold": thr})
    return verdict(level, *[r["p"] for r in rows], families=rows)
