"""C4, total variation is geometric.

For tv the optimal acceptance is min(1 - TV(p, q) + eps, 1 - TV(p, q) + m_max), a straight line
in eps (m_max = TV(p, q) for tv). The optimal set is every r of the simplex that lies
coordinatewise between p and q with TV(r, p) = min(eps, m_max); it contains the interpolation
r = p + t (q - p), t = min(1, eps / TV(p, q)) (a static ensemble weighted per context), and
the clip solution.

Checked: the interpolation's acceptance and TV against md.mentor; the clip solution and
cvxpy's optimum (which knows nothing of the set) lie in the set; random members of the set
(other than both) reach the same acceptance; the acceptance is base + min(eps, TV) exactly
along the whole frontier. A point moved off the set (outside [p, q] on one token) loses
acceptance, so the set's description can fail.
"""

import numpy as np

import mdverify as md
from mdverify.oracle.cvx import OracleFailure, solve_primal
from mdverify.workloads import families
from mdverify.workloads.instances import report

BUDGETS = (1e-4, 0.01, 0.1, 0.3, 2.0)


def _rows():
    for label, P, Q in families(400, 3, seed=404):
        for i in range(P.shape[0]):
            p, q = P[i].astype(np.float64), Q[i].astype(np.float64)
            yield label, p / p.sum(), q / q.sum()  # float32 rows, renormalised in float64


def _in_set(r, p, q, eps, tv):
    between = max(np.max(np.minimum(p, q) - r), np.max(r - np.maximum(p, q)), 0.0)
    return between, abs(0.5 * np.abs(r - p).sum() - min(eps, tv))


def test_interpolation_and_clip_solution_are_optimal():
    worst_interp = worst_set = worst_line = 0.0
    for label, p, q in _rows():
        tv = 0.5 * np.abs(p - q).sum()
        base = np.minimum(p, q).sum()
        for eps in BUDGETS:
            res = md.mentor(p, q, eps, "tv")
            t = min(1.0, eps / tv) if tv > 0 else 1.0
            interp = p + t * (q - p)
            worst_interp = max(worst_interp, abs(np.minimum(interp, q).sum() - res.acceptance))
            worst_set = max(worst_set, *_in_set(res.r, p, q, eps, tv), *_in_set(interp, p, q, eps, tv))
            worst_line = max(worst_line, abs(res.acceptance - (base + min(eps, tv))))
        front = md.frontier(p, q, "tv")
        worst_line = max(worst_line, np.max(np.abs(front.acceptance - (base + np.minimum(front.eps, tv)))))
    report("C4 interpolation", acceptance_gap=worst_interp, clip_and_interpolation_off_set=worst_set,
           off_straight_line=worst_line)
    assert worst_interp <= 1e-12 and worst_set <= 1e-12 and worst_line <= 1e-12


def test_every_member_of_the_set_is_optimal_and_nothing_else():
    rng = np.random.default_rng(44)
    worst = 0.0
    losses = []
    for label, p, q in _rows():
        tv = 0.5 * np.abs(p - q).sum()
        if tv == 0:
            continue
        eps = 0.5 * tv
        up, down = q > p, q < p
        for _ in range(5):
            # A random member: move a random share of each side's gap, scaled to total eps.
            w = np.zeros_like(p)
            for side in (up, down):
                u = rng.random(side.sum())
                w[side] = u * eps / (np.abs(q - p)[side] * u).sum()
            if w.max() > 1:
                continue
            r = p + w * (q - p)
            worst = max(worst, abs(np.minimum(r, q).sum() - (np.minimum(p, q).sum() + eps)))
        # Off the set but feasible: take delta from the H token with the most moved mass and
        # lift an L token above p with it; TV(r, p) falls, acceptance must fall by delta.
        interp = p + 0.5 * (q - p)
        j = int(np.argmax(np.where(up, interp - p, -1.0)))
        lows = np.flatnonzero(down)
        l = int(lows[np.argmin((p - interp)[lows])]) if lows.size else -1
        delta = interp[j] - p[j]
        if l >= 0 and p[l] - interp[l] < delta:
            off = interp.copy()
            off[j] -= delta
            off[l] += delta
            assert 0.5 * np.abs(off - p).sum() <= eps + 1e-15 and off[l] > p[l]
            losses.append(np.minimum(interp, q).sum() - np.minimum(off, q).sum())
    report("C4 optimal set", members_gap=worst, off_set_min_loss=min(losses), off_set_cases=len(losses))
    assert worst <= 1e-12
    assert min(losses) > 0


def test_cvxpy_optimum_lies_in_the_set():
    entry = md.divergence("tv")
    solved = 0
    worst_between = worst_tv = 0.0
    for label, P, Q in families(200, 1, seed=405):
        p, q = P[0].astype(np.float64), Q[0].astype(np.float64)
        tv = 0.5 * np.abs(p - q).sum()
        for eps in (0.01, 0.1):
            try:
                sol = solve_primal(p, q, eps, entry)
            except OracleFailure:
                continue
            solved += 1
            between, tv_gap = _in_set(sol.r, p, q, eps, tv)
            worst_between, worst_tv = max(worst_between, between), max(worst_tv, tv_gap)
    report("C4 cvxpy in set", n=200, solved=solved, outside_between=worst_between, tv_gap=worst_tv)
    assert solved >= 8
    assert worst_between <= 1e-7 and worst_tv <= 1e-7
