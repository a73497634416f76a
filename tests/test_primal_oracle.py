"""The cvxpy primal oracle: which answers it accepts, and the feasible point it certifies."""

import numpy as np
import pytest

import mdverify as md
from mdverify.oracle import cvx
from mdverify.oracle.bruteforce import divergence_reference
from mdverify.workloads import llm_rows

EPS = 0.05


def test_feasible_point_meets_the_budget_and_sums_to_one(entry):
    P, Q = llm_rows(500, 1, seed=11)
    p, q = P[0], Q[0]
    budget = divergence_reference(entry, q, p) / 2
    moved = cvx.feasible_point(p, 1.01 * q, budget, entry)  # off the simplex and over the budget
    assert moved.sum() == pytest.approx(1.0, abs=1e-14)
    assert divergence_reference(entry, moved, p) <= budget * (1 + 1e-12)
    assert np.minimum(moved, q).sum() > np.minimum(p, q).sum()  # moved only part of the way to p
    inside = cvx.feasible_point(p, 2.0 * q, 4 * budget, entry)  # within the budget: only normalised
    np.testing.assert_allclose(inside, q, rtol=1e-15)


def _row():
    P, Q = llm_rows(300, 1, seed=7)
    return P[0], Q[0], md.divergence("kl")


def test_an_inaccurate_answer_counts_with_a_certificate():
    p, q, entry = _row()
    # Tolerances Clarabel cannot meet, with reduced ones it can: it stops "optimal_inaccurate".
    unreachable = dict(cvx.CLARABEL_OPTIONS, equilibrate_enable=False, tol_gap_abs=1e-15, tol_gap_rel=1e-15,
                       tol_feas=1e-15, reduced_tol_gap_abs=1e-9, reduced_tol_gap_rel=1e-9, reduced_tol_feas=1e-9)
    solution = cvx.solve_primal(p, q, EPS, entry, attempts=(("tight", "CLARABEL", unreachable),))
    assert solution.status == "optimal_inaccurate"
    exact = md.mentor(p, q, EPS, entry)
    assert float(exact.acceptance) - cvx.CERTIFIED_GAP <= solution.acceptance <= float(exact.acceptance) + 1e-12
    assert solution.acceptance == pytest.approx(np.minimum(solution.r, q).sum(), abs=1e-15)
    assert divergence_reference(entry, solution.r, p) <= EPS * (1 + 1e-12)
    assert solution.seconds > 0


def test_an_inaccurate_answer_far_from_the_optimum_is_refused():
    p, q, entry = _row()
    stopped_early = dict(max_iter=8, reduced_tol_gap_abs=1.0, reduced_tol_gap_rel=1.0, reduced_tol_feas=1.0,
                         reduced_tol_ktratio=1.0)
    with pytest.raises(cvx.OracleFailure, match="optimal_inaccurate, certified gap"):
        cvx.solve_primal(p, q, EPS, entry, attempts=(("early", "CLARABEL", stopped_early),))
