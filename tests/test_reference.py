"""Both solvers of md.mentor against the brute-force nested-bisection reference."""

import numpy as np
import pytest

import mdverify as md
from mdverify.oracle.bruteforce import solve
from mdverify.workloads import llm_rows

BUDGETS = [0.0, 1e-6, 1e-4, 1e-2, 0.1, 1.0, 10.0, np.inf]


@pytest.mark.parametrize("method", ["sorted", "select"])
@pytest.mark.parametrize("truncate", [None, "top_k", "both"])
def test_agrees_with_bruteforce(entry, truncate, method):
    p, q = llm_rows(120, 3, seed=7, truncate=truncate)
    worst = 0.0
    for eps in BUDGETS:
        res = md.mentor(p, q, eps, entry, method=method)
        for i in range(len(p)):
            ref = solve(p[i], q[i], eps, entry)
            worst = max(worst, abs(ref.acceptance - res.acceptance[i]))
    assert worst <= 1e-9, f"{entry.name}: worst acceptance gap {worst:.3g}"


def test_budget_beyond_maximum_gives_q(entry):
    p, q = llm_rows(80, 2, seed=3)
    res = md.mentor(p, q, np.inf, entry)
    finite = np.isfinite(entry.value(q, p))
    # Where D_f(q || p) is finite, an unlimited budget reaches r = q exactly.
    np.testing.assert_allclose(res.r[finite], q[finite], rtol=0, atol=1e-15)
    np.testing.assert_allclose(res.acceptance[finite], 1.0, atol=1e-12)
    np.testing.assert_array_equal(res.lam, 0.0)
