"""Which sample size resolves which delta: the audit's delta lower bound at expected counts.

For a correct Gaussian exactly at its claim (epsilon, delta) -- the pair +-1 with clip 1 and the
analytic sigma of that claim -- the delta lower bound of ``ldp_audit.audit`` on one threshold
event S is ``CP_lower(k1; a s / m) - e^eps CP_upper(k2; a (1 - s) / m)`` (``audit/estimation.py``;
the default audit: m = 2 verdict events, share s = 1/2, 90 % of the samples estimate). At the
expected counts ``k = n_est p`` of the best threshold (a grid of 2,001 thresholds) this is the
bound a run gets at about its median; it is 0 (floored) until the sample size resolves delta. A
bound above 0 needs at least ``e^eps CP_upper(0; a / 4) ~ e^eps ln(4 / a) / n_est < delta``
(an event never seen under x2), the floor behind "the delta bound is 0 for delta <= 1.5e-3 at
10^5 samples". Printed: per (epsilon, delta), the bound / delta at 10^5, 10^6 and 10^7 samples
per input and the smallest sample size (on a 1-2-5 grid) where it exceeds 0 and 0.5 delta.

    .venv/bin/python benchmarks/audit_delta_resolution.py
"""

from __future__ import annotations

import numpy as np
from scipy.stats import norm

from ldp_audit.mechanisms import analytic_gaussian_sigma
from ldp_audit.stats import clopper_pearson_lower, clopper_pearson_upper

ALPHA, M, SHARE, EST = 0.05, 2, 0.5, 0.9
NS = [int(b * 10**e) for e in range(3, 10) for b in (1, 2, 5)]


def delta_bound(eps: float, delta: float, n: int) -> float:
    mu = 2.0 / analytic_gaussian_sigma(eps, 2.0, delta)
    t = np.linspace(-2.0, 12.0, 2001)  # threshold in noise units; event {y > t}, x = +1
    p1, p2 = norm.sf(t - mu / 2), norm.sf(t + mu / 2)
    n_est = int(EST * n)
    lo = clopper_pearson_lower(n_est * p1, n_est, ALPHA * SHARE / M)
    hi = clopper_pearson_upper(n_est * p2, n_est, ALPHA * (1 - SHARE) / M)
    return max(0.0, float(np.max(lo - np.exp(eps) * hi)))


def main() -> None:
    print("| epsilon | delta | 10^5 | 10^6 | 10^7 | first n with bound > 0 | bound >= delta / 2 |")
    print("|---|---|---|---|---|---|---|")
    for eps in (1.0, 3.0):
        for delta in (1e-2, 3e-3, 1.5e-3, 1e-3, 1e-4, 1e-5, 1e-6):
            r = {n: delta_bound(eps, delta, n) / delta for n in NS}
            first = next((f"{n:.0e}" for n in NS if r[n] > 0), "> 5e9")
            half = next((f"{n:.0e}" for n in NS if r[n] >= 0.5), "> 5e9")
            cells = " | ".join(f"{r[10**e]:.2f}" for e in (5, 6, 7))
            print(f"| {eps:g} | {delta:g} | {cells} | {first} | {half} |", flush=True)


if __name__ == "__main__":
    main()
