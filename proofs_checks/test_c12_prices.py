"""C12, budgets by price (SPEC section 10).

1. Price per row: for nu > 0 the maximiser of A(r) - nu D_f(r || p) is the clip solution with
   lam = nu: the frontier point of slope nu, whose budget eps* = D_f(r || p) the eps solve
   reproduces, and which beats every other budget in A - nu D.
2. Chain: with A_j and eps_j at the drafted positions j = 1..k, the backward pass V_{k+1} = 0,
   position j at price nu / (1 + V_{j+1}), V_j = A_j (1 + V_{j+1}) - nu eps_j maximises
   sum_j prod_{i<=j} A_i - nu sum_j (prod_{i<j} A_i) eps_j over all (eps_1, ..., eps_k).
3. Batch: max sum_j A_j(eps_j) subject to sum_j w_j eps_j <= E is reached at one price nu, row
   j at nu w_j: the budgets add up to E and every row whose budget binds has lam_j = nu w_j
   (a row at its limit, r = q, has lam_j = 0: more budget buys it nothing).

Checked: (1) against the eps solve at eps* to 1e-12 in acceptance and against budgets 1% off
on either side, every divergence, LLM-like, truncated and edge rows; (2) against a dense grid
of budgets per position for k = 1, 2, 3 (the plan wins to 1e-9), with the per-position price
that ignores the chain as a control that loses; (3) against cvxpy's model of the joint
problem (``oracle.cvx.solve_allocation``) to 1e-7 in total acceptance, slopes equal to
1e-9 relative, budgets summing to E to 1e-12 relative.
"""

import numpy as np
import pytest

import mdverify as md
from mdverify.oracle.cvx import OracleFailure, solve_allocation
from mdverify.workloads import divergence_suite, edge_rows, llm_rows
from mdverify.workloads.instances import report

PRICES = (0.3, 1.5, 10.0, 1e3)


@pytest.mark.parametrize("entry", divergence_suite(), ids=lambda d: d.name)
def test_a_price_solve_is_the_eps_solve_at_the_budget_it_buys(entry):
    rows = [llm_rows(400, 4, seed=1201), llm_rows(400, 4, seed=1202, truncate="both")]
    rows += [(p[None], q[None]) for _, p, q in edge_rows()]
    worst = 0.0
    for P, Q in rows:
        for nu in PRICES:
            res = md.mentor(P, Q, price=nu, divergence=entry)
            same = md.mentor(P, Q, res.divergence_value, entry)
            worst = max(worst, float(np.max(np.abs(res.acceptance - same.acceptance))))
            inside = res.lam > 0
            assert np.all(res.lam[inside] == nu)
            for factor in (0.99, 1.01):  # no other budget does better at this price
                other = md.mentor(P, Q, res.divergence_value * factor, entry)
                gain = (other.acceptance - nu * other.divergence_value) - (res.acceptance - nu * res.divergence_value)
                assert np.all(gain <= 1e-12), (entry.name, nu, factor, gain.max())
    report("C12 price = eps solve", divergence=entry.name, worst_acceptance_difference=worst)
    assert worst <= 1e-12


def _chain_value(acceptance, eps, nu):
    """sum_j prod_{i<=j} A_i - nu sum_j (prod_{i<j} A_i) eps_j, over the last axis."""
    reached = np.cumprod(np.concatenate([np.ones_like(acceptance[..., :1]), acceptance[..., :-1]], -1), -1)
    return (reached * acceptance).sum(-1) - nu * (reached * eps).sum(-1)


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("name", ["kl", "hellinger", "reverse_kl"])
def test_the_chain_plan_beats_every_budget_grid(k, name):
    rng = np.random.default_rng(1210 + k)
    worst_margin, control_loss = np.inf, 0.0
    for trial in range(4):
        target = rng.dirichlet(np.full(5, 0.6), size=(1, k + 1))
        draft = 0.5 * target[:, :k] + 0.5 * rng.dirichlet(np.full(5, 0.6), size=(1, k))
        nu = float(rng.choice([0.5, 2.0, 8.0]))
        plan = md.plan_chain(target, draft, nu, name)
        best = float(_chain_value(plan.acceptance[0], plan.eps[0], nu))
        assert best == pytest.approx(float(plan.expected_accepted[0] - nu * plan.expected_divergence[0]), abs=1e-12)
        # A dense grid of budgets per position, each row's acceptance from its frontier.
        grids = []
        for j in range(k):
            frontier = md.frontier(target[0, j], draft[0, j], name)
            top = float(frontier.eps[-1]) if frontier.eps.size else 0.0
            budgets = np.unique(np.concatenate([np.linspace(0, top, 60), np.geomspace(1e-6, max(top, 1e-6), 60)]))
            grids.append((budgets, frontier.acceptance_at(budgets)))
        mesh_eps = np.stack(np.meshgrid(*[g[0] for g in grids], indexing="ij"), -1)
        mesh_acc = np.stack(np.meshgrid(*[g[1] for g in grids], indexing="ij"), -1)
        grid_best = float(_chain_value(mesh_acc, mesh_eps, nu).max())
        worst_margin = min(worst_margin, best - grid_best)
        # Control: every position at price nu, ignoring the chain, is never better.
        flat = md.mentor(target[0, :k], draft[0, :k], price=nu, divergence=name)
        control_loss = max(control_loss, best - float(_chain_value(flat.acceptance, flat.divergence_value, nu)))
        assert best >= float(_chain_value(flat.acceptance, flat.divergence_value, nu)) - 1e-12
    report("C12 chain", divergence=name, k=k, plan_minus_best_grid=worst_margin, gain_over_flat_price=control_loss)
    assert worst_margin >= -1e-9
    if k > 1:
        assert control_loss > 1e-6  # the chain matters: the flat price loses somewhere


@pytest.mark.parametrize("name", ["kl", "pearson", "hellinger"])
def test_one_price_allocates_a_batch(name):
    entry = md.divergence(name)
    P, Q = llm_rows(8, 5, seed=1220)
    weights = np.array([1.0, 2.0, 0.5, 1.0, 3.0])
    worst = 0.0
    for total in (0.005, 0.05, 0.3):
        allocation = md.allocate(P, Q, total, entry, weights=weights)
        assert np.sum(weights * allocation.eps) == pytest.approx(total, rel=1e-12)
        res = md.mentor(P, Q, allocation.eps, entry)
        binding = res.lam > 0  # the others are at their limit (r = q): more budget buys nothing
        assert binding.any()
        np.testing.assert_allclose(res.lam[binding] / weights[binding], allocation.price, rtol=1e-9)
        try:
            oracle_total, oracle_eps = solve_allocation(P, Q, total, entry, weights)
        except OracleFailure:
            continue
        worst = max(worst, abs(oracle_total - allocation.total_acceptance))
        assert allocation.total_acceptance >= oracle_total - 1e-7
        assert abs(oracle_total - allocation.total_acceptance) <= 1e-7, (name, total)
    # Control: an equal split of the same total accepts less.
    equal = md.mentor(P, Q, 0.05 / weights.sum(), entry)
    assert equal.acceptance.sum() < md.allocate(P, Q, 0.05, entry, weights=weights).total_acceptance
    report("C12 allocation", divergence=name, worst_difference_to_cvxpy=worst)


def test_prices_refuse_bad_input():
    P, Q = llm_rows(8, 2, seed=1230)
    for call, message in ((lambda: md.mentor(P, Q, 0.1, price=1.0), "exactly one"),
                          (lambda: md.mentor(P, Q), "exactly one"),
                          (lambda: md.mentor(P, Q, price=0.0), "prices must be > 0"),
                          (lambda: md.mentor(P, Q, price=np.nan), "prices must be > 0"),
                          (lambda: md.allocate(P, Q, -1.0), "total must be"),
                          (lambda: md.allocate(P, Q, 0.1, weights=[1.0]), "weights must be"),
                          (lambda: md.allocate(P, Q, 0.1, weights=[1.0, 0.0]), "weights must be"),
                          (lambda: md.allocate([[0.5, 0.5 - 1e-310, 1e-310]], [[0.2, 0.3, 0.5]], 0.1), "overflows"),
                          (lambda: md.allocate([[0.5, 0.6]], [[0.5, 0.5]], 0.1), "sums to")):
        with pytest.raises(ValueError, match=message):
            call()
