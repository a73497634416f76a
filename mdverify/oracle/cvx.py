"""cvxpy oracle for P(f, eps) (SPEC section 6, item 1), in ratio variables.

Each token gets an O(1) variable, however small its probabilities:

- where q_i <= p_i, t_i = r_i / p_i, with objective p_i min(t_i, rho_i) and cost p_i f(t_i);
- where q_i > p_i > 0, v_i = r_i / q_i, with objective q_i min(v_i, 1) and cost
  p_i f(r_i / p_i) = q_i v_i f*(c_i / v_i), where f*(u) = u f(1/u) is the conjugate
  generator and c_i = p_i / q_i = 1 / rho_i;
- where p_j = 0 < q_j, s_j = r_j, with cost f'(inf) s_j (only when f'(inf) < inf).

The naive model in r is badly scaled on peaked rows, and a model in t = r/p alone fails
as soon as rho = q/p reaches 1e5 (Clarabel stops with no solution on LLM-like rows whose
target is sharpened), because its variables then range over many orders of magnitude.
Clarabel is tried first with tight tolerances, then SCS; the attempt that succeeded is
recorded. The multipliers of the budget and normalisation constraints are lam and mu.

Clarabel often stalls a little short of its 1e-11 tolerances ("optimal_inaccurate") from
n ~ 1000 on. Such an answer's r is made exactly feasible (``feasible_point``), so that A(r)
bounds the optimum from below, and counts only when the dual certificate of C3, g(lam, mu)
at the solver's own multipliers evaluated without the solver (``oracle.certificate``), an
upper bound, is within CERTIFIED_GAP of A(r); that r and A(r) are returned.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass

import numpy as np

from mdverify.divergences import Divergence

#: Clarabel's settings. The 1e-7 agreement in acceptance the oracle must meet needs tight
#: tolerances and extra iterative refinement of the KKT solves; the ratio model is already
#: well scaled, and Clarabel's own equilibration made it fail outright on some LLM-like
#: rows (jensen_shannon, n = 1000) or stop 4e-6 short (alpha(0.3)), so it is tried off first.
CLARABEL_OPTIONS = dict(
    tol_gap_abs=1e-11, tol_gap_rel=1e-11, tol_feas=1e-11, tol_ktratio=1e-9, max_iter=500,
    iterative_refinement_reltol=1e-15, iterative_refinement_abstol=1e-15, iterative_refinement_max_iter=50,
)
SCS_OPTIONS = dict(eps_abs=1e-10, eps_rel=1e-10, max_iters=10_000)
#: (label, solver, options), tried in order until one reports "optimal".
ATTEMPTS = (
    ("CLARABEL", "CLARABEL", dict(CLARABEL_OPTIONS, equilibrate_enable=False)),
    ("CLARABEL+equilibration", "CLARABEL", CLARABEL_OPTIONS),
    ("SCS", "SCS", SCS_OPTIONS),
)


class OracleFailure(RuntimeError):
    """No attempt produced a solution that is optimal or feasible to the oracle's tolerance."""


#: A returned solution must satisfy D_f(r || p) <= eps (1 + FEASIBILITY) + 1e-12 and sum to 1
#: within FEASIBILITY, evaluated independently of the solver (``bruteforce.perspective_terms``).
FEASIBILITY = 1e-6
#: The largest certified distance from the optimum, in acceptance, of an "optimal_inaccurate" answer.
CERTIFIED_GAP = 1e-9


@dataclass(frozen=True)
class OracleSolution:
    r: np.ndarray
    acceptance: float
    lam: float
    mu: float
    solver: str
    status: str  # "optimal", or "optimal_inaccurate" with a certified gap below CERTIFIED_GAP
    seconds: float  # wall time of the accepted solve (cvxpy's compilation and the solver's run)


def _family(entry: Divergence) -> str:
    from mdverify.divergences.alpha_family import KIND

    return "alpha" if entry.kind == KIND else entry.name


def generator(entry: Divergence, t):
    """f(t) elementwise, as a DCP-convex cvxpy expression."""
    import cvxpy as cp

    a = entry.param
    atoms = {
        "tv": lambda: cp.abs(t - 1) / 2,
        "kl": lambda: -cp.entr(t),
        "reverse_kl": lambda: -cp.log(t),
        "pearson": lambda: cp.square(t - 1),
        "neyman": lambda: t - 2 + cp.inv_pos(t),
        "hellinger": lambda: t - 2 * cp.sqrt(t) + 1,
        "jensen_shannon": lambda: (cp.rel_entr(t, (1 + t) / 2) + cp.rel_entr(np.ones(t.shape), (1 + t) / 2)) / 2,
        "triangular": lambda: t - 3 + 4 * cp.inv_pos(t + 1),
        "jeffreys": lambda: -cp.entr(t) - cp.log(t),
        "alpha": lambda: (cp.power(t, a, approx=False) - a * t - (1 - a)) / (a * (a - 1)),
    }
    family = _family(entry)
    if family not in atoms:
        raise ValueError(f"the cvxpy oracle has no model for divergence {entry.name!r}")
    return atoms[family]()


def conjugate_perspective(entry: Divergence, v, c: np.ndarray):
    """v f*(c / v) = (c/v)^{-1} ... elementwise: the cost of r = q v per unit of q, with c = p / q.

    Equal to f(t) p / q at t = v / c; written so that no huge ratio appears.
    """
    import cvxpy as cp

    a = entry.param
    atoms = {
        "tv": lambda: cp.abs(v - c) / 2,
        "kl": lambda: -cp.entr(v) - cp.multiply(np.log(c), v),
        "reverse_kl": lambda: -cp.multiply(c, cp.log(v)) + c * np.log(c),
        "pearson": lambda: cp.multiply(1 / c, cp.square(v - c)),
        "neyman": lambda: v - 2 * c + cp.multiply(c**2, cp.inv_pos(v)),
        "hellinger": lambda: v - 2 * cp.multiply(np.sqrt(c), cp.sqrt(v)) + c,
        "jensen_shannon": lambda: (cp.rel_entr(c, (v + c) / 2) + cp.rel_entr(v, (v + c) / 2)) / 2,
        "triangular": lambda: v - 3 * c + 4 * cp.multiply(c**2, cp.inv_pos(v + c)),
        "jeffreys": lambda: -cp.entr(v) - cp.multiply(np.log(c), v) - cp.multiply(c, cp.log(v)) + c * np.log(c),
        "alpha": lambda: (cp.multiply(c ** (1 - a), cp.power(v, a, approx=False)) - a * v - (1 - a) * c) / (a * (a - 1)),
    }
    family = _family(entry)
    if family not in atoms:
        raise ValueError(f"the cvxpy oracle has no model for divergence {entry.name!r}")
    return atoms[family]()


def solve_in_turn(problem, attempts, accept):
    """Solve ``problem`` with each (label, solver, options) of ``attempts`` in turn.

    ``accept(label, seconds)`` inspects the solved problem (solved in ``seconds``) and returns
    (result, "") to stop or (None, reason) to go on. Returns (result or None, the reasons of the
    failed attempts).
    """
    import cvxpy as cp

    failures = []
    for label, solver, options in attempts:
        start = time.perf_counter()
        try:
            with warnings.catch_warnings():
                # An inaccurate solve is reported through the status, which accept() judges.
                warnings.filterwarnings("ignore", message="Solution may be inaccurate")
                # A fresh solver each time: a cached one keeps its first setup (equilibration).
                problem.solve(solver=solver, warm_start=False, **options)
        except cp.error.SolverError as exc:
            failures.append(f"{label}: {exc}")
            continue
        result, reason = accept(label, time.perf_counter() - start)
        if result is not None:
            return result, failures
        failures.append(f"{label}: {reason}")
    return None, failures


def feasible_point(p: np.ndarray, r: np.ndarray, eps: float, entry: Divergence) -> np.ndarray:
    """r normalised, then moved towards p just far enough to meet the budget.

    D(. || p) is convex and D(p || p) = 0, so (1 - theta) r + theta p with theta = 1 - eps / D(r || p)
    costs at most eps. The solver's r may sum to 1 or meet the budget only to its tolerances.
    """
    from mdverify.oracle.bruteforce import divergence_reference

    total = r.sum()
    r = r / total if total > 0 else p.copy()
    d = divergence_reference(entry, r, p)
    if d > eps:
        theta = 1.0 - eps / d
        r = (1.0 - theta) * r + theta * p
    return r


def solve_primal(p, q, eps: float, entry: Divergence, attempts=ATTEMPTS) -> OracleSolution:
    """Solve P(f, eps) for one row with cvxpy; raise OracleFailure if every attempt fails.

    An attempt counts if the solver reports "optimal" and its r is feasible when checked
    independently of the solver (see FEASIBILITY), or if it reports "optimal_inaccurate" and
    its r, made feasible, is certified within CERTIFIED_GAP of the optimum (uncertified, such
    answers were seen 1e-3 below the optimum on sharpened rows, or over budget).
    """
    from mdverify.oracle.bruteforce import divergence_reference
    from mdverify.oracle.certificate import certify

    import cvxpy as cp

    p = np.asarray(p, np.float64)
    q = np.asarray(q, np.float64)
    low = (p > 0) & (q <= p)
    high = (p > 0) & (q > p)
    stray = (p == 0) & (q > 0)
    pl, ql = p[low], q[low]
    ph, qh = p[high], q[high]
    t = cp.Variable(pl.size, nonneg=True)
    v = cp.Variable(ph.size, nonneg=True)
    objective = pl @ cp.minimum(t, ql / pl) + qh @ cp.minimum(v, 1)
    mass = pl @ t + qh @ v
    cost = pl @ generator(entry, t) + (qh @ conjugate_perspective(entry, v, ph / qh) if ph.size else 0)
    fpinf = entry.f_prime_at_inf
    s = None
    if stray.any() and np.isfinite(fpinf):
        s = cp.Variable(int(stray.sum()), nonneg=True)
        objective = objective + cp.sum(cp.minimum(s, q[stray]))
        mass = mass + cp.sum(s)
        cost = cost + fpinf * cp.sum(s)
    # The budget row is scaled to O(1) (its multiplier is rescaled below): small budgets
    # otherwise leave Clarabel's exponential cones poorly conditioned.
    scale = 1.0 / eps if 0 < eps < np.inf else 1.0
    budget = scale * cost <= scale * eps
    normalisation = mass == 1
    problem = cp.Problem(cp.Maximize(objective), [budget, normalisation])

    def accept(label, seconds):
        if problem.status not in ("optimal", "optimal_inaccurate"):
            return None, f"status {problem.status}"
        r = np.zeros_like(p)
        if pl.size:
            r[low] = pl * np.maximum(t.value, 0.0)
        if ph.size:
            r[high] = qh * np.maximum(v.value, 0.0)
        if s is not None:
            r[stray] = np.maximum(s.value, 0.0)
        if budget.dual_value is None or normalisation.dual_value is None:
            return None, f"{problem.status} without multipliers"
        lam, mu = float(budget.dual_value) * scale, float(normalisation.dual_value)
        if problem.status == "optimal":
            overrun = divergence_reference(entry, r, p) - eps * (1 + FEASIBILITY) - 1e-12
            if overrun > 0 or abs(r.sum() - 1) > FEASIBILITY:
                return None, f"optimal but infeasible (budget overrun {overrun:.2g}, mass {r.sum():.10g})"
            acceptance = float(problem.value)
        else:
            # A(r) of a feasible r bounds the optimum from below and g(lam, mu) from above.
            r = feasible_point(p, r, eps, entry)
            certificate = certify(p, q, r, eps, max(lam, 0.0), mu, entry)
            if not certificate.gap <= CERTIFIED_GAP:
                return None, f"{problem.status}, certified gap {certificate.gap:.2g}"
            acceptance = certificate.primal_value
        return OracleSolution(r=r, acceptance=acceptance, lam=lam, mu=mu, solver=label,
                              status=problem.status, seconds=seconds), ""

    solution, failures = solve_in_turn(problem, attempts, accept)
    if solution is not None:
        return solution
    raise OracleFailure(f"cvxpy could not solve P({entry.name}, {eps}): " + "; ".join(failures))


def solve_allocation(P, Q, total: float, entry: Divergence, weights=None) -> tuple[float, np.ndarray]:
    """The joint problem of ``md.allocate`` for small rows with p > 0: max sum_j A(r_j) subject to
    sum_j w_j D_f(r_j || p_j) <= total, each r_j in the simplex, in the ratio variables t = r / p.

    Returns (total acceptance, budgets D_f(r_j || p_j)); raises OracleFailure if no solver
    reaches "optimal".
    """
    import cvxpy as cp

    P, Q = np.asarray(P, np.float64), np.asarray(Q, np.float64)
    w = np.ones(P.shape[0]) if weights is None else np.asarray(weights, np.float64)
    t = cp.Variable(P.shape, nonneg=True)
    r = cp.multiply(P, t)
    spend = cp.sum(cp.multiply(P, generator(entry, t)), axis=1)
    problem = cp.Problem(cp.Maximize(cp.sum(cp.minimum(r, Q))), [cp.sum(r, axis=1) == 1, w @ spend <= total])

    def accept(label, seconds):
        if problem.status != "optimal":
            return None, problem.status
        return (float(problem.value), np.asarray(spend.value, np.float64)), ""

    result, failures = solve_in_turn(problem, ATTEMPTS, accept)
    if result is None:
        raise OracleFailure("; ".join(failures))
    return result
