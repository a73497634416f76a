"""C2, acceptance and moved mass.

Every r between p and q (coordinatewise) satisfies A(r) = 1 - TV(p, q) + m with
m = sum_i (r_i - p_i)_+. With R(a) = Add(b) = m fixing a(m) and b(m), the divergence
D(m) = D_f(r(m) || p) is convex and non-decreasing on [0, m_max], and the optimum is
m* = max{m : D(m) <= eps}.

Checked on the solutions of md.mentor for every family and divergence, and on D(m)
sampled along the frontier: with m_k the optimal moved mass at budgets eps_k, the points
(m_k, D(m_k) = eps_k) must have non-decreasing slopes.
"""

import numpy as np
import pytest

import mdverify as md
from mdverify.workloads import families

from mdverify.workloads import divergence_suite
from mdverify.workloads.instances import report

DIVERGENCES = divergence_suite()


@pytest.mark.parametrize("entry", DIVERGENCES, ids=lambda d: d.name)
def test_acceptance_is_lossless_plus_moved_mass(entry):
    worst = 0.0
    for label, P, Q in families(500, 3, seed=201):
        P64, Q64 = P.astype(np.float64), Q.astype(np.float64)
        tv = 0.5 * np.abs(P64 - Q64).sum(-1)
        for eps in (1e-4, 1e-2, 0.3, np.inf):
            res = md.mentor(P, Q, eps, entry)
            r = res.r.astype(np.float64)
            m = np.maximum(r - P64, 0).sum(-1)
            between = (np.minimum(P64, Q64) - 1e-7 <= r) & (r <= np.maximum(P64, Q64) + 1e-7)
            assert between.all(), label
            tol = 1e-12 if P.dtype == np.float64 else 1e-6
            gap = np.abs(np.minimum(r, Q64).sum(-1) - (1 - tv + m)).max()
            assert gap <= tol, (label, eps, gap)
            worst = max(worst, gap if P.dtype == np.float64 else 0.0)
    report("C2 identity", divergence=entry.name, worst_float64=worst)


@pytest.mark.parametrize("entry", [d for d in DIVERGENCES if d.name != "tv"], ids=lambda d: d.name)
def test_divergence_of_moved_mass_is_convex(entry):
    worst = np.inf
    for label, P, Q in families(400, 2, seed=202):
        for i in range(P.shape[0]):
            index = md.RatioIndex(P[i], Q[i])
            front = index.frontier(entry)
            top = front.eps[-1] if front.eps.size > 1 else 1.0
            budgets = np.linspace(0, top, 400)[1:]
            m = front.acceptance_at(budgets) - index.base
            keep = np.concatenate([[True], np.diff(m) > 1e-9])  # drop the flat tail past m_max
            m, budgets = m[keep], budgets[keep]
            assert np.all(np.diff(m) >= -1e-15), label
            if m.size < 3:
                continue
            slopes = np.diff(budgets) / np.diff(m)
            worst = min(worst, np.min(np.diff(slopes) / slopes[1:]))
            assert np.all(np.diff(slopes) >= -1e-6 * slopes[1:]), (label, np.min(np.diff(slopes)))
    report("C2 convexity", divergence=entry.name, worst_relative_slope_drop=float(worst))


def test_tv_divergence_is_the_moved_mass():
    for _, P, Q in families(300, 2, seed=203):
        res = md.mentor(P, Q, 0.05, "tv")
        np.testing.assert_allclose(res.divergence_value, res.moved_mass, atol=1e-7)
