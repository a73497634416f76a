"""C3, duals and the optimality certificate.

Where f is differentiable at the clip thresholds a and b,

    lam* = 1 / (f'(b) - f'(a)),   mu* = -f'(a) lam*,   dD/dm = 1 / lam*,

with lam* = 0 when the budget does not bind. Weak duality gives g(lam, mu) >= A(r) for
every feasible r and every lam >= 0, mu; strong duality makes the gap g(lam*, mu*) - A(r*)
zero. The certificate evaluates g exactly from its separable form, each coordinate's sup
found by golden-section search that does not assume the clip shape, at any n.

Checked: (lam, mu) against the multipliers cvxpy reports for the budget and normalisation
constraints; the optimum of cvxpy's model of the dual itself (``oracle.dual``) against
mdverify's acceptance, with the certificate re-evaluating g at cvxpy's (lam, mu); the
certificate gap below 1e-9 relative for every divergence at n up to 1e6; and the check's power: r moved 1% towards p, or lam moved 1%, gives a clearly positive gap.
"""

import pytest

import mdverify as md
from mdverify.oracle.certificate import certify
from mdverify.oracle.cvx import OracleFailure, solve_primal
from mdverify.oracle.dual import solve_dual
from mdverify.workloads import families, llm_rows

from mdverify.workloads import divergence_suite
from mdverify.workloads.instances import report

DIVERGENCES = divergence_suite()


@pytest.mark.parametrize("entry", DIVERGENCES, ids=lambda d: d.name)
def test_duals_match_cvxpy_multipliers(entry):
    worst_lam = worst_mu = 0.0
    compared = 0
    for label, P, Q in [f for f in families(300, 2, seed=301) if f[0] != "peaked"]:
        for eps in (1e-3, 0.05):
            res = md.mentor(P, Q, eps, entry)
            for i in range(P.shape[0]):
                if not 1e-6 < res.lam[i] < 1e6:
                    continue  # a budget that does not bind (or barely) has a set of dual solutions
                try:
                    sol = solve_primal(P[i], Q[i], eps, entry)
                except OracleFailure:
                    continue
                if sol.solver == "SCS":
                    continue  # first-order multipliers are too coarse for this comparison
                compared += 1
                worst_lam = max(worst_lam, abs(sol.lam - res.lam[i]) / res.lam[i])
                worst_mu = max(worst_mu, abs(sol.mu - res.mu[i]) / max(abs(res.mu[i]), 1.0))
    report("C3 multipliers", divergence=entry.name, compared=compared, lam_rel=worst_lam, mu_rel=worst_mu)
    assert compared >= 3  # the oracle's failures are skipped (see the README)
    # Interior-point multipliers are accurate to about the square root of the 1e-11 tolerances.
    assert worst_lam <= 1e-4 and worst_mu <= 1e-4


@pytest.mark.parametrize("entry", DIVERGENCES, ids=lambda d: d.name)
def test_dual_model_reaches_the_optimum(entry):
    worst_value = worst_lam = worst_g = 0.0
    compared = failed = 0
    for label, P, Q in families(300, 1, seed=303):
        for eps in (1e-3, 0.05):
            res = md.mentor(P[0], Q[0], eps, entry)
            try:
                sol = solve_dual(P[0], Q[0], eps, entry)
            except OracleFailure:
                failed += 1
                continue
            compared += 1
            acceptance = float(res.acceptance)
            worst_value = max(worst_value, abs(sol.value - acceptance))
            if 1e-6 < res.lam < 1e6 and sol.solver != "SCS":
                worst_lam = max(worst_lam, abs(sol.lam - float(res.lam)) / float(res.lam))
            # g at cvxpy's (lam, mu), evaluated without cvxpy: an upper bound on the optimum.
            g = certify(P[0], Q[0], res.r, eps, sol.lam, sol.mu, entry).dual_value
            assert g >= acceptance - 1e-12, "weak duality violated"
            worst_g = max(worst_g, abs(g - sol.value))
    report("C3 dual model", divergence=entry.name, n=300, compared=compared, not_optimal=failed,
           acceptance_gap=worst_value, lam_rel=worst_lam, g_vs_cvxpy=worst_g)
    assert compared >= 4  # the instances cvxpy does not solve are counted above (see the README)
    assert worst_value <= 1e-7 and worst_lam <= 1e-4 and worst_g <= 1e-6


@pytest.mark.parametrize("entry", DIVERGENCES, ids=lambda d: d.name)
def test_certificate_gap_vanishes(entry):
    worst = 0.0
    for n, budgets in ((1_000, (1e-3, 0.1, 10.0)), (100_000, (1e-3, 0.1, 10.0)), (1_000_000, (0.05,))):
        p, q = llm_rows(n, 1, seed=n % 97, truncate="top_p" if n == 100_000 else None)
        for eps in budgets:
            res = md.mentor(p, q, eps, entry)
            cert = certify(p[0], q[0], res.r[0], eps, float(res.lam[0]), float(res.mu[0]), entry)
            assert cert.relative_gap >= -1e-12, "weak duality violated: the certificate is broken"
            worst = max(worst, abs(cert.relative_gap))
    report("C3 certificate", divergence=entry.name, n_max=1_000_000, worst_relative_gap=worst)
    assert worst <= 1e-9


@pytest.mark.parametrize("entry", DIVERGENCES, ids=lambda d: d.name)
def test_certificate_detects_suboptimal_points(entry):
    p, q = llm_rows(2000, 1, seed=3)
    p, q = p[0], q[0]
    res = md.mentor(p, q, 0.05, entry)
    off_r = res.r + 0.01 * (p - res.r)
    moved = certify(p, q, off_r, 0.05, float(res.lam), float(res.mu), entry)
    off_lam = certify(p, q, res.r, 0.05, float(res.lam) * 1.01 + 1e-3, float(res.mu), entry)
    report("C3 power", divergence=entry.name, gap_r_moved=moved.relative_gap, gap_lam_moved=off_lam.relative_gap)
    assert moved.relative_gap > 1e-6
    assert off_lam.relative_gap > 1e-9
