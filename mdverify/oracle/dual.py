"""cvxpy model of the Lagrangian dual of P(f, eps) (SPEC section 6, item 2).

With min(r, q) = min_{w in [0, 1]} [w r + (1 - w) q] and a minimax swap (w ranges over a
compact set), the dual function of C3 becomes

.. math:: g(\\lambda, \\mu) = \\lambda \\varepsilon + \\mu + \\min_{w \\in [0,1]^n} \\sum_i
          \\big[(1 - w_i) q_i + p_i\\, h_f(w_i - \\mu, \\lambda)\\big],

where h_f(y, lam) = sup_{t >= 0} [y t - lam f(t)] = lam f^c(y / lam) is the perspective of the
convex conjugate of f over t >= 0, jointly convex in (y, lam). Minimising over lam >= 0, mu and
w is one convex problem whose value is the optimum of P(f, eps) by strong duality, and whose
lam and mu are the multipliers mdverify reports. Tokens with p = 0 < q contribute
(1 - w) q subject to w - mu <= lam f'(inf), or nothing when f'(inf) = inf (they stay at 0).

Each h_f is written by hand below as an epigraph in exponential, power or second-order cones;
``tests/test_dual_oracle.py`` checks every one against a numerical sup of y t - lam f(t), so a
wrong conjugate cannot pass silently.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mdverify.divergences import Divergence
from mdverify.oracle.cvx import ATTEMPTS, OracleFailure, _family, solve_in_turn


@dataclass(frozen=True)
class DualSolution:
    value: float  # the dual optimum, an upper bound on every feasible acceptance
    lam: float
    mu: float
    solver: str
    seconds: float  # wall time of the accepted solve (cvxpy's compilation and the solver's run)


def _power_epigraph(base, lam, exponent: float):
    """(z, constraints) with z >= base^exponent lam^(1 - exponent), for exponent > 1 and base >= 0."""
    import cvxpy as cp

    z = cp.Variable(base.shape)
    return z, [cp.constraints.PowCone3D(z, lam, base, 1.0 / exponent)]


def _geometric_hypograph(x, y, weight: float):
    """(g, constraints) with g <= x^weight y^(1 - weight), for weight in (0, 1)."""
    import cvxpy as cp

    g = cp.Variable(x.shape)
    return g, [cp.constraints.PowCone3D(x, y, g, weight)]


def conjugate_perspective(entry: Divergence, y, lam):
    """(expression, constraints) for h_f(y, lam) = sup_{t >= 0} y t - lam f(t), elementwise.

    ``lam`` is an expression of the shape of ``y``. Each expression is exact where the
    conjugate is finite; the constraints carry its domain.
    """
    import cvxpy as cp

    family = _family(entry)
    if family == "tv":  # f^c(s) = max(s, -1/2) on s <= 1/2
        return cp.maximum(y, -lam / 2), [y <= lam / 2]
    if family == "kl":  # f^c(s) = exp(s - 1)
        z = cp.Variable(y.shape)
        return z, [cp.constraints.ExpCone(y - lam, lam, z)]
    if family == "reverse_kl":  # f^c(s) = -1 - log(-s) on s < 0
        return -lam + cp.rel_entr(lam, -y), []
    if family == "pearson":  # f^c(s) = -1 + max(s + 2, 0)^2 / 4
        u = cp.Variable(y.shape, nonneg=True)
        z, cons = _power_epigraph(u, 4 * lam, 2.0)
        return -lam + z, cons + [u >= y + 2 * lam]
    if family == "neyman":  # f^c(s) = 2 - 2 sqrt(1 - s) on s <= 1
        g, cons = _geometric_hypograph(lam, lam - y, 0.5)
        return 2 * lam - 2 * g, cons
    if family == "hellinger":  # f^c(s) = s / (1 - s) = -1 + 1 / (1 - s) on s < 1
        z = cp.Variable(y.shape)
        return -lam + z, [cp.constraints.PowCone3D(z, lam - y, lam, 0.5)]
    if family == "jensen_shannon":  # f^c(s) = -log(2 - exp(2 s)) / 2 on s < log(2) / 2
        z, a, b = cp.Variable(y.shape), cp.Variable(y.shape), cp.Variable(y.shape)
        # z >= h  <=>  lam exp(2 y / lam) + lam exp(-2 z / lam) <= 2 lam
        return z, [cp.constraints.ExpCone(2 * y, lam, a), cp.constraints.ExpCone(-2 * z, lam, b), a + b <= 2 * lam]
    if family == "triangular":  # f^c(s) = max(2 - sqrt(1 - s), 0)^2 - 1 on s <= 1
        g, cons = _geometric_hypograph(lam, lam - y, 0.5)
        u = cp.Variable(y.shape, nonneg=True)
        z, square = _power_epigraph(u, lam, 2.0)
        return -lam + z, cons + square + [u >= 2 * lam - g]
    if family == "jeffreys":  # f = t log t - log t: the conjugate is an infimal convolution
        y_kl = cp.Variable(y.shape)
        kl_term, kl_cons = conjugate_perspective(_named("kl"), y_kl, lam)
        rkl_term, rkl_cons = conjugate_perspective(_named("reverse_kl"), y - y_kl, lam)
        return kl_term + rkl_term, kl_cons + rkl_cons
    if family == "alpha":
        return _alpha_conjugate_perspective(entry.param, y, lam)
    raise ValueError(f"the cvxpy dual oracle has no model for divergence {entry.name!r}")


def _named(name: str) -> Divergence:
    from mdverify.divergences import divergence

    return divergence(name)


def _alpha_conjugate_perspective(a: float, y, lam):
    """f = t^a / (a (a - 1)) - t / (a - 1) + 1 / a, so f^c(s) = k^c(s + 1 / (a - 1)) - 1 / a
    with k(t) = t^a / (a (a - 1)); k^c is a power of sigma = s + 1 / (a - 1), b = a / (a - 1):

    - a > 1:     k^c = (a - 1)^b / a * max(sigma, 0)^b                  (b > 1)
    - 0 < a < 1: k^c = (1 - a)^b / a * (-sigma)^b on sigma < 0         (b < 0)
    - a < 0:     k^c = -(1 - a)^b / (-a) * (-sigma)^b on sigma <= 0    (0 < b < 1)
    """
    import cvxpy as cp

    b = a / (a - 1)
    sigma = y + lam / (a - 1)
    if a > 1:
        u = cp.Variable(y.shape, nonneg=True)
        z, cons = _power_epigraph(u, lam, b)
        return (a - 1) ** b / a * z - lam / a, cons + [u >= sigma]
    if a > 0:
        z = cp.Variable(y.shape)
        # z >= lam^(1 - b) (-sigma)^b  <=>  z^(1/(1-b)) (-sigma)^(-b/(1-b)) >= lam
        return (1 - a) ** b / a * z - lam / a, [cp.constraints.PowCone3D(z, -sigma, lam, 1.0 / (1.0 - b))]
    g, cons = _geometric_hypograph(-sigma, lam, b)
    return -(1 - a) ** b / (-a) * g - lam / a, cons


def solve_dual(p, q, eps: float, entry: Divergence, attempts=ATTEMPTS) -> DualSolution:
    """Minimise g(lam, mu) over lam >= 0 and mu for one row; raise OracleFailure if no attempt
    reports "optimal". Needs 0 < eps < inf (at eps = 0 the dual optimum is not attained)."""
    import cvxpy as cp

    if not 0 < eps < np.inf:
        raise ValueError(f"the dual oracle needs 0 < eps < inf, got {eps!r}")
    p = np.asarray(p, np.float64)
    q = np.asarray(q, np.float64)
    pos = p > 0
    stray = ~pos & (q > 0)
    lam = cp.Variable(nonneg=True)
    mu = cp.Variable()
    w = cp.Variable(int(pos.sum()), bounds=[0, 1])
    lam_vec = lam * np.ones(int(pos.sum()))
    term, constraints = conjugate_perspective(entry, w - mu, lam_vec)
    objective = lam * eps + mu + q[pos] @ (1 - w) + p[pos] @ term
    fpinf = entry.f_prime_at_inf
    if stray.any() and np.isfinite(fpinf):
        w_stray = cp.Variable(int(stray.sum()), bounds=[0, 1])
        objective = objective + q[stray] @ (1 - w_stray)
        constraints.append(w_stray - mu <= lam * fpinf)
    problem = cp.Problem(cp.Minimize(objective), constraints)

    def accept(label, seconds):
        if problem.status == "optimal" and np.isfinite(problem.value):
            return DualSolution(value=float(problem.value), lam=float(lam.value), mu=float(mu.value), solver=label,
                                seconds=seconds), ""
        return None, f"status {problem.status}"

    solution, failures = solve_in_turn(problem, attempts, accept)
    if solution is not None:
        return solution
    raise OracleFailure(f"cvxpy could not solve the dual of P({entry.name}, {eps}): " + "; ".join(failures))
