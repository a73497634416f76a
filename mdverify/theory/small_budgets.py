"""SPEC C6: small budgets look alike for every f twice differentiable at 1.

D_f(r || p) = f''(1)/2 * pearson(r || p) + O(max_i |r_i / p_i - 1|^3), so the optimum for
(f, eps) is approximated by the pearson optimum at eps' = 2 eps / f''(1). This module
measures both statements on a row and fits the log-log slope of each error:

- the expansion error |D_f - f''(1)/2 pearson| along r = p (1 + s v), against s (slope 3
  where f'''(1) != 0, 4 where it vanishes, and 2 if f''(1) were wrong);
- the acceptance error |A_f(eps) - A_pearson(2 eps / f''(1))|, against eps. The acceptance
  gain itself grows like sqrt(eps), and the error like eps (slope 1): the moved mass solves
  D(m) = eps with D(m) = c m^2 + O(m^3), and the cubic term shifts it by O(eps). A wrong
  scale of eps' would leave an O(sqrt(eps)) error (slope 1/2).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Steps s of the expansion check and budgets of the acceptance check.
STEPS = np.geomspace(0.05, 5e-4, 9)
BUDGETS = np.geomspace(1e-9, 1e-5, 9)


@dataclass(frozen=True)
class SmallBudgetFit:
    """Errors and fitted log-log slopes of SPEC C6 on one row, for one divergence."""

    expansion_error: np.ndarray  # |D_f - f''(1)/2 pearson| at STEPS
    expansion_slope: float
    acceptance_error: np.ndarray  # |A_f(eps) - A_pearson(2 eps / f''(1))| at BUDGETS
    acceptance_gain: np.ndarray  # A_f(eps) - (1 - TV(p, q)), which grows like sqrt(eps)
    acceptance_slope: float


def loglog_slope(x: np.ndarray, y: np.ndarray) -> float:
    """Least-squares slope of log y against log x (y > 0)."""
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def small_budget_fit(p, q, divergence, rng: np.random.Generator) -> SmallBudgetFit:
    """Measure C6 on the row (p, q); the expansion direction is drawn from ``rng``."""
    import mdverify as md

    entry = md.divergence(divergence)
    second = entry.f_second_at_one
    if not second > 0:
        raise ValueError(f"C6 needs f twice differentiable at 1 with f''(1) > 0; {entry.name} has f''(1) = {second}")
    p, q = np.asarray(p, np.float64), np.asarray(q, np.float64)
    support = p > 0
    v = np.where(support, rng.standard_normal(p.shape), 0.0)
    v -= np.sum(p * v) / np.sum(p[support]) * support  # sum_i p_i v_i = 0: r stays a distribution
    v /= np.abs(v).max()
    pearson = md.divergence("pearson")
    rows = p * (1 + STEPS[:, None] * v)
    ps = np.broadcast_to(p, rows.shape)
    expansion = np.abs(entry.value(rows, ps) - second / 2 * pearson.value(rows, ps))
    ps, qs = np.broadcast_to(p, (BUDGETS.size, p.size)), np.broadcast_to(q, (BUDGETS.size, p.size))
    ours = md.mentor(ps, qs, BUDGETS, entry)
    surrogate = md.mentor(ps, qs, 2 * BUDGETS / second, pearson)
    error = np.abs(ours.acceptance - surrogate.acceptance)
    gain = ours.acceptance - np.minimum(p, q).sum()
    return SmallBudgetFit(
        expansion_error=expansion,
        expansion_slope=loglog_slope(STEPS, expansion),
        acceptance_error=error,
        acceptance_gain=gain,
        acceptance_slope=loglog_slope(BUDGETS, error),
    )
