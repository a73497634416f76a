"""Feasibility, clip shape, acceptance identity, duals and frontier shape of md.mentor."""

import numpy as np
import pytest

import mdverify as md
from mdverify.oracle.bruteforce import distribution_at, divergence_reference
from mdverify.symbolic.derive import t
from mdverify.workloads import divergence_suite, llm_rows

BUDGETS = np.array([1e-5, 1e-3, 0.03, 0.3, 3.0])


def _rows():
    return [llm_rows(150, 4, seed=11), llm_rows(150, 4, seed=12, truncate="both")]


def test_feasible_and_clip_shaped(entry):
    for p, q in _rows():
        for eps in BUDGETS:
            res = md.mentor(p, q, eps, entry)
            r = res.r
            assert (r >= 0).all()
            np.testing.assert_allclose(r.sum(-1), 1.0, rtol=0, atol=1e-12)
            value = entry.value(r, p)
            assert (value <= eps * (1 + 1e-9)).all(), f"{entry.name}: D {value} > eps {eps}"
            np.testing.assert_allclose(res.divergence_value, value, rtol=1e-9, atol=1e-15)
            np.testing.assert_allclose(res.acceptance, np.minimum(r, q).sum(-1), rtol=0, atol=1e-12)
            np.testing.assert_allclose(res.moved_mass, np.maximum(r - p, 0).sum(-1), rtol=0, atol=1e-12)
            # Clip shape on tokens with p > 0: r = min(max(q, a p), b p).
            a, b = res.a[:, None], res.b[:, None]
            with np.errstate(invalid="ignore"):
                clip = np.minimum(np.maximum(q, a * p), np.where(np.isinf(b), np.inf, b * p))
            pos = p > 0
            np.testing.assert_allclose(r[pos], clip[pos], rtol=1e-12, atol=1e-300)
            assert ((0 <= res.a) & (res.a <= 1) & (res.b >= 1)).all()


@pytest.mark.parametrize("entry", [d for d in divergence_suite() if d.name != "tv"], ids=lambda d: d.name)
def test_dual_is_marginal_cost(entry):
    """1/lam = dD/dm at the optimum (SPEC C3), by central differences of the reference D(m).

    tv has D(m) = m and lam = 1 exactly: see test_tv_duals.
    """
    p, q = llm_rows(100, 3, seed=5)
    h0_open = np.isfinite(entry.f_prime_at_inf)
    for eps in [1e-3, 0.05, 0.5]:
        res = md.mentor(p, q, eps, entry)
        for i in range(len(p)):
            if res.lam[i] == 0:
                continue
            m, h = res.moved_mass[i], 1e-6 * res.moved_mass[i]
            D = lambda x: divergence_reference(entry, distribution_at(p[i], q[i], x, h0_open), p[i])  # noqa: E731
            slope = (D(m + h) - D(m - h)) / (2 * h)
            assert abs(1 / res.lam[i] - slope) <= 1e-4 * slope, (entry.name, eps, i, 1 / res.lam[i], slope)
            # mu = -f'(a) lam: stationarity on a clipped low token, min(r, q) = q there.
            fprime_a = float(entry.derived.f_prime.subs(t, res.a[i]))
            assert res.mu[i] == pytest.approx(-fprime_a * res.lam[i], rel=1e-9, abs=1e-12)


def test_tv_duals():
    p, q = llm_rows(100, 3, seed=5)
    res = md.mentor(p, q, 0.01, "tv")
    np.testing.assert_allclose(res.lam, 1.0)
    np.testing.assert_allclose(res.mu, 0.5)
    np.testing.assert_allclose(res.acceptance, np.minimum(p, q).sum(-1) + 0.01, atol=1e-12)


def test_frontier_is_monotone_concave_and_matches_mentor(entry):
    p, q = llm_rows(200, 1, seed=21)
    p, q = p[0], q[0]
    index = md.RatioIndex(p, q)
    front = index.frontier(entry)
    eps_k, acc_k = front
    assert np.all(np.diff(eps_k) >= 0) and np.all(np.diff(acc_k) >= -1e-15)
    budgets = np.concatenate([np.geomspace(1e-6, max(eps_k[-1], 1e-5) * 2, 40), eps_k[1:6]])
    direct = md.mentor(np.broadcast_to(p, (budgets.size, p.size)), np.broadcast_to(q, (budgets.size, q.size)), budgets, entry)
    np.testing.assert_array_equal(front.acceptance_at(budgets), direct.acceptance)
    query = index.query(entry, budgets[7])
    np.testing.assert_array_equal(query.r, direct.r[7])
    # Concavity of A(eps) between breakpoints (strictly convex f): chords lie below the curve.
    if entry.name != "tv":
        grid = np.geomspace(1e-6, eps_k[-1] * 0.999, 200)
        values = front.acceptance_at(grid)
        mids = front.acceptance_at(0.5 * (grid[:-1] + grid[1:]))
        assert np.all(mids >= 0.5 * (values[:-1] + values[1:]) - 1e-12)


def test_float32_input_gives_float32_output(entry):
    p, q = llm_rows(300, 3, seed=2, dtype=np.float32)
    res = md.mentor(p, q, 0.1, entry)
    assert res.r.dtype == np.float32
    p64 = p.astype(np.float64)
    ref = md.mentor(p64, q.astype(np.float64), 0.1, entry)
    # Same float64 computation on the same (widened) numbers, then r rounded on output towards
    # p (where rounding to nearest moved an entry away from p, to its neighbour on p's side).
    rounded = ref.r.astype(np.float32)
    back = rounded.astype(np.float64)
    away = ((back < ref.r) & (ref.r < p64)) | ((back > ref.r) & (ref.r > p64))
    rounded[away] = np.nextafter(rounded[away], p[away])
    np.testing.assert_array_equal(res.r, rounded)
    assert (entry.value(res.r.astype(np.float64), p64) <= 0.1).all()
    returned = np.minimum(res.r.astype(np.float64), q.astype(np.float64)).sum(-1)
    np.testing.assert_allclose(res.acceptance, returned, rtol=0, atol=1e-12)  # of r as returned
    np.testing.assert_allclose(res.acceptance, ref.acceptance, rtol=0, atol=1e-6)


def test_batch_shapes_and_per_row_budgets():
    p, q = llm_rows(64, 6, seed=4)
    p3, q3 = p.reshape(2, 3, 64), q.reshape(2, 3, 64)
    eps = np.array([[0.01], [0.2]])
    res = md.mentor(p3, q3, eps, "hellinger")
    assert res.r.shape == (2, 3, 64) and res.acceptance.shape == (2, 3)
    for i in range(2):
        for j in range(3):
            one = md.mentor(p3[i, j], q3[i, j], float(eps[i, 0]), "hellinger")
            assert np.ndim(one.acceptance) == 0
            assert one.acceptance == res.acceptance[i, j]
            np.testing.assert_array_equal(one.r, res.r[i, j])
