"""The conjugate perspectives of the cvxpy dual model, against a numerical sup."""

import numpy as np
import pytest
import sympy as sp
from scipy.optimize import minimize_scalar

from mdverify.oracle.dual import conjugate_perspective
from mdverify.symbolic.derive import t

LAMBDAS = np.array([0.5, 1.0, 2.0, 1.0, 3.0, 0.7])
SLOPES = np.array([-1.0, -0.3, 0.2, -5.0, 0.1, -40.0])  # y = lam * slope


def numerical_sup(f, y, lam):
    """sup_{t >= 0} y t - lam f(t), by a log grid and a bounded refinement (no conjugate formula)."""
    grid = np.linspace(-40.0, 40.0, 8001)
    with np.errstate(all="ignore"):
        values = y * np.exp(grid) - lam * f(np.exp(grid))
    k = int(np.nanargmax(values))
    best = minimize_scalar(lambda s: -(y * np.exp(s) - lam * f(np.exp(s))),
                           bounds=(grid[max(k - 1, 0)], grid[min(k + 1, grid.size - 1)]),
                           method="bounded", options=dict(xatol=1e-12))
    return max(values[k], -best.fun)


def test_conjugate_perspectives_match_a_numerical_sup(entry):
    import cvxpy as cp

    f = sp.lambdify(t, entry.f, modules="numpy")
    y = LAMBDAS * SLOPES
    reference = np.array([numerical_sup(f, yi, li) for yi, li in zip(y, LAMBDAS)])
    finite = reference < 1e6  # outside the conjugate's domain the sup is +inf
    expr, constraints = conjugate_perspective(entry, cp.Constant(y[finite]), cp.Constant(LAMBDAS[finite]))
    problem = cp.Problem(cp.Minimize(cp.sum(expr)), constraints)
    problem.solve(solver="CLARABEL")
    assert problem.status == "optimal"
    np.testing.assert_allclose(np.asarray(expr.value).ravel(), reference[finite], rtol=1e-6, atol=1e-7)
    assert finite.sum() >= 4


def test_the_dual_needs_a_positive_finite_budget():
    from mdverify.divergences import divergence
    from mdverify.oracle.dual import solve_dual

    with pytest.raises(ValueError, match="0 < eps < inf"):
        solve_dual([0.5, 0.5], [0.9, 0.1], 0.0, divergence("kl"))
