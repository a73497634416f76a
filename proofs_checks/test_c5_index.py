"""C5, the sorted ratio index.

One O(n)-space structure per row, built in O(sort(n)) independently of the divergence:
L sorted by rho ascending, H by rho descending, prefix sums of p. Any f is then answered
by one walk over the merged breakpoints, each step retiring at least one token, so a query
costs O(n); recording the breakpoints gives the whole frontier in O(n), and each later
budget resumes from the nearest breakpoint.

Checked: one index answers every divergence exactly as md.mentor does; the breakpoint count
is at most n + 1 and the index holds O(n) floats (measured); the walk takes at most
n_low + n_high + 2 steps (counted); a budget resumed from the frontier takes O(1) steps.
"""

import numpy as np

import mdverify as md
from mdverify.core.index import build_index, split_sides
from mdverify.workloads import divergence_suite, edge_rows, families, llm_rows
from mdverify.workloads.instances import report
from mdverify.workloads.synthetic import truncate_top_k

DIVERGENCES = divergence_suite()


def test_the_index_is_the_stable_sort_of_each_side():
    """L by rho ascending and H by rho descending, ties in row order: what numpy's stable
    argsort gives on the same split (the build sorts long sides by radix, not by comparison)."""
    rows = [(p, q) for n in (300, 3000) for _, P, Q in families(n, 2, seed=502) for p, q in zip(P, Q)]
    rows += [(p, q) for _, p, q in edge_rows()]
    rows += list(zip(*llm_rows(40000, 2, seed=503, truncate="both")))
    rows += list(zip(*llm_rows(5000, 2, seed=504, dtype=np.float32)))
    # A top-k drafter: most of the low side has rho = 0 and is placed before the rest is sorted.
    rows += [(p, truncate_top_k(q, 2000)) for p, q in zip(*llm_rows(40000, 2, seed=505))]
    for p, q in rows:
        key, weight = np.empty(p.size), np.empty(p.size)
        n_low, n_high = split_sides(p, q, key, weight)[:2]
        low, high = slice(0, n_low), slice(p.size - n_high, p.size)
        low_order, high_order = np.argsort(key[low], kind="stable"), np.argsort(key[high], kind="stable")
        low_p, low_rho, _, high_p, high_rho = build_index(p, q)[:5]
        np.testing.assert_array_equal(low_rho, key[low][low_order])
        np.testing.assert_array_equal(low_p, weight[low][low_order])
        np.testing.assert_array_equal(high_rho, -key[high][high_order])
        np.testing.assert_array_equal(high_p, weight[high][high_order])


def test_one_index_answers_every_divergence():
    worst_steps = 0.0
    worst_rows = 0.0
    for label, P, Q in families(3000, 2, seed=501):
        for i in range(P.shape[0]):
            index = md.RatioIndex(P[i], Q[i])
            n = P.shape[1]
            held = sum(a.size for a in index._arrays[:6])
            assert held <= 2 * n + 2 + 2 * n, (label, held)  # p, rho per side plus two prefix sums
            for entry in DIVERGENCES:
                for eps in (1e-4, 0.02, 0.5):
                    direct = md.mentor(P[i], Q[i], eps, entry, method="sorted")
                    via = index.query(entry, eps)
                    assert via.acceptance == direct.acceptance, (label, entry.name, eps)
                    np.testing.assert_array_equal(via.r, direct.r)
                    # The sort-free solver reaches the same optimum without the index.
                    unsorted = md.mentor(P[i], Q[i], eps, entry, method="select")
                    assert abs(unsorted.acceptance - via.acceptance) <= 1e-12, (label, entry.name, eps)
                trace = index._trace(entry)
                n_low, n_high = index._arrays[0].size, index._arrays[3].size
                assert trace.shape[0] <= n_low + n_high + 2
                worst_rows = max(worst_rows, trace.shape[0] / n)
                # A fresh walk from m = 0 with an unlimited budget: every step retires a token.
                state, _, steps = index._resume(entry, trace[:1], np.inf)
                assert steps <= n_low + n_high + 2, (label, entry.name, steps)
                worst_steps = max(worst_steps, steps / n)
    report("C5", breakpoints_per_token=worst_rows, walk_steps_per_token=worst_steps)


def test_resumed_queries_take_constant_steps():
    P, Q = families(20000, 1, seed=502)[0][1:]
    index = md.RatioIndex(P[0], Q[0])
    most = 0
    for entry in DIVERGENCES:
        trace = index._trace(entry)
        for eps in np.geomspace(1e-5, 5, 50):
            _, _, steps = index._resume(entry, trace, eps)
            most = max(most, steps)
    report("C5 resume", n=20000, most_steps_after_resume=most)
    assert most <= 3
