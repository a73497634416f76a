"""C6, small budgets look alike for every f.

For f twice differentiable at 1 with f''(1) > 0:

    D_f(r || p) = f''(1)/2 * pearson(r || p) + O(max_i |r_i / p_i - 1|^3),

so the optimum for (f, eps) is approximated by the pearson optimum at eps' = 2 eps / f''(1):
|A_f(eps) - A_pearson(eps')| = O(eps) while the gain A_f(eps) - (1 - TV) grows like sqrt(eps).

Checked on LLM-like rows (untruncated and truncated, so with exact zeros) for every registered
f except tv (not differentiable at 1) and pearson (the approximation is itself), plus alpha
members on each side of 0 and 1: the fitted log-log slope of the expansion error against the
step is >= 2.8 (2 would mean a wrong f''(1)), and the slope of the acceptance error against
eps is >= 0.9 (1/2 would mean a wrong eps'). Both slopes are printed per divergence.
"""

import numpy as np

from mdverify.theory.small_budgets import small_budget_fit
from mdverify.workloads import divergence_suite, llm_rows
from mdverify.workloads.instances import report

DIVERGENCES = [d for d in divergence_suite() if d.name not in ("tv", "pearson")]


def test_small_budgets_follow_pearson():
    rng = np.random.default_rng(606)
    rows = [llm_rows(1000, 3, seed=606), llm_rows(1000, 3, seed=607, truncate="both")]
    worst_expansion, worst_acceptance = np.inf, np.inf
    for entry in DIVERGENCES:
        slopes = [], []
        for P, Q in rows:
            for p, q in zip(P, Q):
                fit = small_budget_fit(p, q, entry, rng)
                slopes[0].append(fit.expansion_slope)
                slopes[1].append(fit.acceptance_slope)
                assert fit.expansion_slope >= 2.8, (entry.name, fit.expansion_slope, fit.expansion_error)
                assert fit.acceptance_slope >= 0.9, (entry.name, fit.acceptance_slope, fit.acceptance_error)
                # The error is of smaller order than the gain it approximates.
                assert fit.acceptance_error[0] <= 1e-3 * fit.acceptance_gain[0], (entry.name, fit.acceptance_error[0])
        report("C6", divergence=entry.name, expansion_slope_min=min(slopes[0]),
               acceptance_slope_min=min(slopes[1]), acceptance_slope_median=float(np.median(slopes[1])))
        worst_expansion = min(worst_expansion, min(slopes[0]))
        worst_acceptance = min(worst_acceptance, min(slopes[1]))
    report("C6", smallest_expansion_slope=worst_expansion, smallest_acceptance_slope=worst_acceptance)
