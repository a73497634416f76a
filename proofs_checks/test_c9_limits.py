"""C9, limits.

eps = 0 gives r = p (lossless speculative sampling); eps >= D(m_max) gives r = q wherever
D_f(q || p) < inf; p = q gives r = p for every eps; n = 1 is trivial (r = p = q = [1]).
"""

import numpy as np

import mdverify as md
from mdverify.workloads import edge_rows, families

from mdverify.workloads import divergence_suite
from mdverify.workloads.instances import report

DIVERGENCES = divergence_suite()


def test_limits():
    worst = 0.0
    rows = [(label, P, Q) for label, P, Q in families(500, 3, seed=901)]
    rows += [(label, p[None], q[None]) for label, p, q in edge_rows()]
    for entry in DIVERGENCES:
        for label, P, Q in rows:
            P64, Q64 = P.astype(np.float64), Q.astype(np.float64)
            lossless = md.mentor(P, Q, 0.0, entry)
            np.testing.assert_array_equal(lossless.r, P)
            assert np.all(lossless.lam == np.inf)
            np.testing.assert_allclose(lossless.acceptance, np.minimum(P64, Q64).sum(-1), atol=1e-12)
            unlimited = md.mentor(P, Q, np.inf, entry)
            finite = np.isfinite(entry.value(Q, P))
            # r = min(q, b p) with b the largest ratio, reached to rounding of b p.
            gap = np.abs(unlimited.r[finite].astype(np.float64) - Q64[finite]).max(initial=0.0)
            worst = max(worst, gap if P.dtype == np.float64 else 0.0)
            assert gap <= (1e-13 if P.dtype == np.float64 else 1e-7), (entry.name, label, gap)
            same = md.mentor(P, P, 0.3, entry)
            np.testing.assert_array_equal(same.r, P)
        one = md.mentor([1.0], [1.0], 0.5, entry)
        assert one.r.tolist() == [1.0] and one.acceptance == 1.0
    report("C9", worst_unlimited_budget_distance_to_q=worst)
