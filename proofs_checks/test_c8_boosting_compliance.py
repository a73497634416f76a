"""C8, boosting compliance to first order.

For small moved mass m, h_i ~ (r_i - p_i) / p_i, so the sign of E_pi[h] (C7's exact test of
r beating p) is to first order the sign of sum_i (pi_i / p_i)(r_i - p_i): the tokens that
receive mass must have a higher truth-to-target ratio than those that give it. The test does
not depend on f.

Measured: over rows, divergences and truths near p, the rate at which the first-order sign
agrees with the exact one, per budget. It must tend to 1 as eps -> 0 (printed table); it
is not expected to be 1 at large budgets, and the table shows by how much it is not.
"""

import numpy as np

import mdverify as md
from mdverify.theory import beats_target, first_order_indicator
from mdverify.workloads import divergence_suite, llm_rows
from mdverify.workloads.instances import report

BUDGETS = (1e-6, 1e-4, 1e-2, 0.3, 3.0)


def test_first_order_sign_agrees_as_eps_vanishes():
    rng = np.random.default_rng(88)
    P, Q = llm_rows(200, 6, seed=808)
    truths = []
    for i in range(P.shape[0]):
        # Truths on both sides of the target: tilted towards the drafter or away from it.
        for _ in range(8):
            pi = P[i] * rng.lognormal(0.0, 0.3, P.shape[1]) + rng.uniform(-0.3, 0.6) * (Q[i] - P[i]).clip(-P[i], None)
            pi = np.clip(pi, 0, None)
            truths.append((i, pi / pi.sum()))
    rates = {}
    for eps in BUDGETS:
        agree = total = 0
        for entry in divergence_suite():
            R = md.mentor(P, Q, eps, entry).r
            for i, pi in truths:
                agree += bool(first_order_indicator(pi, P[i], R[i]) == beats_target(pi, P[i], R[i]))
                total += 1
        rates[eps] = agree / total
    report("C8 agreement by eps", **{f"eps={eps:g}": rate for eps, rate in rates.items()})
    assert rates[BUDGETS[0]] >= 0.99
    assert rates[BUDGETS[0]] >= rates[BUDGETS[-1]]
