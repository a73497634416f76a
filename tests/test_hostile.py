"""Hostile but fair input: extreme rows, extreme parameters and malformed arguments.

Each reproduction below once gave a silent wrong answer (over the budget, an acceptance above
1, a truncated id) or a raw exception; the hypothesis tests cover the classes they belong to.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mdverify as md
from mdverify.workloads import divergence_suite, llm_rows

P3, Q3 = np.array([0.7, 0.2, 0.1]), np.array([0.2, 0.5, 0.3])


def check(p, q, eps, entry, method):
    """The result keeps its budget as returned, accepts at most 1, and says what r accepts."""
    res = md.mentor(p, q, eps, entry, method=method)
    entry = md.divergence(entry) if isinstance(entry, str) else entry
    r = res.r.astype(np.float64)
    value = entry.value(r, np.asarray(p, np.float64))
    assert np.all(value <= np.asarray(eps) * (1 + 1e-9) + 1e-300), (value, eps)
    assert np.all(res.acceptance <= 1 + 1e-12)
    np.testing.assert_allclose(res.acceptance, np.minimum(r, q).sum(-1), rtol=0, atol=1e-9)
    return res


@pytest.mark.parametrize("method", ["select", "sorted"])
def test_reverse_kl_where_the_capacities_meet_keeps_the_budget(method):
    n = 40000
    p = np.full(n, 1e-9)
    p[0] = 1
    p /= p.sum()
    q = np.full(n, 1.0)
    q[0] = 0
    q /= q.sum()
    res = check(p, q, 1000.0, "reverse_kl", method)
    assert res.r[0] > 0 and np.isfinite(res.divergence_value)


# A lifted token's r = a p underflowed to 0 in r's dtype, and f~(0) = inf for jeffreys: r came
# back with D = inf (float64), or was pulled back to p itself, acceptance 1e-10 (float32).
UNDERFLOWING = [(np.float64, [1, 7.04e-111, 1.60e-179], [9.49e-240, 1, 0]),
                (np.float32, [1, 1e-36, 1e-40], [1e-10, 1, 0])]


@pytest.mark.parametrize("dtype, p, q", UNDERFLOWING, ids=["float64", "float32"])
@pytest.mark.parametrize("method", ["select", "sorted"])
def test_a_lifted_token_never_underflows_to_zero(method, dtype, p, q):
    p, q = np.array(p, dtype), np.array(q, dtype)
    res = check(p / p.sum(), q / q.sum(), 1000.0, "jeffreys", method)
    assert res.r[2] > 0 and res.acceptance > 1 - 1e-6 and np.isfinite(res.divergence_value)


@pytest.mark.parametrize("method", ["select", "sorted"])
def test_rows_spanning_three_hundred_decades(method):
    rng = np.random.default_rng(322)
    p = 10 ** rng.uniform(-300, 0, 700)
    q = 10 ** rng.uniform(-300, 0, 700)
    check(p / p.sum(), q / q.sum(), 100.0, "reverse_kl", method)


def test_a_target_probability_near_the_smallest_normal_float():
    p, q = np.array([0.5, 0.5 - 1e-306, 1e-306]), np.array([0.2, 0.3, 0.5])
    truth = 0.2 * np.log(0.2 / 0.5) + 0.3 * np.log(0.3 / (0.5 - 1e-306)) + 0.5 * np.log(0.5 / 1e-306)  # 351.6
    for eps in (1000.0, np.inf):
        res = md.mentor(p, q, eps, "kl")
        np.testing.assert_allclose(res.r, q, rtol=1e-15, atol=0)  # KL(q || p) fits the budget: r = q
        assert res.divergence_value == pytest.approx(truth, rel=1e-12)
    assert md.divergence("kl").value(q, p) == pytest.approx(truth, rel=1e-12)
    binding = md.mentor(p, q, 300.0, "kl")
    assert binding.divergence_value == pytest.approx(300.0, rel=1e-9)


@pytest.mark.parametrize("tiny", [1e-310, 1e-320])
def test_ratios_that_overflow_are_refused(tiny):
    p, q = np.array([0.5, 0.5, tiny]), np.array([0.2, 0.3, 0.5])
    for call in (lambda: md.mentor(p, q, 1e6, "kl"), lambda: md.mentor(p, q, 0.0, "reverse_kl"),
                 lambda: md.RatioIndex(p, q), lambda: md.divergence("kl").value(q, p)):
        with pytest.raises(ValueError, match="index 2 .* ratio overflows"):
            call()
    with pytest.raises(ValueError, match=r"target_probs row \(0, 0\) has"):
        md.verify(np.stack([p, p])[None], q[None, None], [[0]], 0.1, seed=0)
    # A subnormal p whose ratio stays finite is solved.
    check(np.array([0.5, 0.5, tiny]), np.array([0.5, 0.5 - 1e-300, 1e-300]), 1.0, "kl", "sorted")


@pytest.mark.parametrize("a", [1e-20, 0.05, 1 + 1e-15, 0.95, 21.0, -9.0, 1e4, 1e300, np.nan, np.inf])
def test_alpha_members_that_cannot_be_computed_accurately_are_refused(a):
    with pytest.raises(ValueError, match="alpha"):
        md.alpha(a)


@pytest.mark.parametrize("a", [-8.0, -0.12, 0.12, 0.9, 1.1, 20.0])
def test_alpha_members_at_the_edges_agree_with_brute_force(a):
    from mdverify.oracle.bruteforce import solve

    entry = md.alpha(a)
    res = check(P3, Q3, 0.1, entry, "sorted")
    assert res.acceptance == pytest.approx(solve(P3, Q3, 0.1, entry).acceptance, abs=1e-9)


@pytest.mark.parametrize("name", ["kl", "reverse_kl", "hellinger", "pearson", "tv"])
def test_float32_rows_keep_the_budget_as_returned(name):
    p, q = llm_rows(3000, 16, seed=4, dtype=np.float32)
    for eps in (1e-4, 1e-3, 0.05):
        res = md.mentor(p, q, eps, name)
        assert res.r.dtype == np.float32
        value = md.divergence(name).value(res.r.astype(np.float64), p.astype(np.float64))
        assert (value <= eps).all()
        np.testing.assert_array_equal(res.divergence_value, value)
        exact = md.mentor(p.astype(np.float64), q.astype(np.float64), eps, name)
        assert (np.abs(res.acceptance - exact.acceptance) < 1e-6).all()  # float32 rounding, no more


@pytest.mark.parametrize("name", ["kl", "tv", "neyman", "alpha(2.5)"])
def test_float32_rows_are_rounded_toward_p(name):
    """Each entry of a float32 r is the float64 r rounded to a neighbouring float32 on the side
    of p: so no term p f~(r / p) of D grows (f~ is convex, least at r = p)."""
    from mdverify.core.mentor import construct

    entry = md.divergence(name) if "(" not in name else md.alpha(2.5)
    p, q = llm_rows(3000, 4, seed=7, dtype=np.float32)
    for i, eps in enumerate((1e-5, 1e-3, 0.05, 0.5)):
        res = md.mentor(p[i].astype(np.float64), q[i].astype(np.float64), eps, entry)
        exact, rounded = np.empty(p.shape[1]), np.empty(p.shape[1], np.float32)
        for r in (exact, rounded):
            construct(p[i], q[i], float(res.a), float(res.b), 0.0, 0.0, r)
        moved = rounded.astype(np.float64) - exact
        assert (moved * (p[i] - exact) >= 0).all()  # towards p, or not at all
        assert (np.abs(moved) <= np.spacing(np.abs(rounded))).all()  # to a neighbour
        assert (np.minimum(exact, p[i]) <= rounded).all() and (rounded <= np.maximum(exact, p[i])).all()


def test_a_float32_row_whose_tiny_entries_round_coarsely_keeps_its_acceptance():
    """``mdverify crosscheck``'s seed 9453: subnormal float32 drafter entries under neyman, where
    r = a p near 1e-40 rounds by 1e-5 of itself. Rounded to nearest, D rose by 2.7e-6 of itself
    over the budget, and the pull-back towards p lost 2.8e-6 of acceptance; rounded towards p
    the row keeps the budget as it is, and loses 1.1e-11."""
    from mdverify.crosscheck import case

    c = case(9453)
    res = md.mentor(c.p, c.q, c.eps, c.divergence)
    exact = md.mentor(c.p.astype(np.float64), c.q.astype(np.float64), c.eps, c.divergence)
    assert float(res.divergence_value) <= c.eps
    assert float(res.acceptance) == pytest.approx(np.minimum(res.r.astype(np.float64), c.q).sum(), rel=0, abs=1e-12)
    assert abs(float(res.acceptance) - float(exact.acceptance)) < 1e-9


def test_a_pull_back_evaluates_each_rounded_row_once(monkeypatch):
    """Where r differs from p by little, small steps back round to the row they started from,
    whose D is known: each row a pull-back evaluates is a new one, and each row it returns is
    within its budget (here one a little below each row's D, under tv at eps 1e-5)."""
    from mdverify import api
    from mdverify.core.mentor import FIELDS

    entry = md.divergence("tv")
    p, q = llm_rows(3000, 16, seed=4, dtype=np.float32)
    res = md.mentor(p, q, 1e-5, entry)
    r = res.r.copy()
    values = entry.value(r.astype(np.float64), p.astype(np.float64))
    budgets = values * (1.0 - 1e-9)
    fields = np.stack([getattr(res, name) for name in FIELDS], axis=1)
    evaluated = []
    original = api._row_divergence
    monkeypatch.setattr(api, "_row_divergence",
                        lambda entry, r, p: evaluated.append(r.tobytes()) or original(entry, r, p))
    api._pull_back(entry, p, q, r, fields, budgets, values.copy(), np.arange(16),
                   lambda i, row, value: value <= budgets[i], first_step=api.ROUNDING_FIRST_STEP)
    assert evaluated
    assert len(set(evaluated)) == len(evaluated)
    assert (entry.value(r.astype(np.float64), p.astype(np.float64)) <= budgets).all()


@pytest.mark.parametrize("ids, message", [
    (np.array([[2**64 - 1]], dtype=np.uint64), "outside"),
    (np.array([[np.inf]]), "not an integer"),
    (np.array([[1e30]]), "outside"),
    (np.array([[1.5]]), "not an integer"),
    (np.array([[True]]), "must hold integers"),
])
def test_verify_refuses_ids_that_would_wrap_or_truncate(ids, message):
    P, Q = np.array([[[0.6, 0.4], [0.5, 0.5]]]), np.array([[[0.3, 0.7]]])
    with pytest.raises(ValueError, match=message):
        md.verify(P, Q, ids, 0.1, seed=0)


@pytest.mark.parametrize("arguments, message", [
    ({"seed": 1.5}, "seed must be"), ({"seed": "abc"}, "seed must be"), ({"seed": b"x"}, "seed must be"),
    ({"seed": -1}, "seed must be"), ({"uniforms": np.full((1, 2, 2), 0.5j)}, "uniforms must hold real"),
    ({"eps": "0.1"}, "eps must be a number"),
])
def test_verify_refuses_malformed_arguments(arguments, message):
    P, Q = np.array([[[0.6, 0.4], [0.5, 0.5]]]), np.array([[[0.3, 0.7]]])
    arguments = {"eps": 0.1} | arguments
    with pytest.raises(ValueError, match=message):
        md.verify(P, Q, [[1]], **arguments)


def test_budgets_given_as_text_are_refused_and_byte_orders_keep_their_precision():
    with pytest.raises(ValueError, match="eps must be a number"):
        md.mentor(P3, Q3, "0.1")
    res = md.mentor(P3.astype(">f4"), Q3.astype(">f4"), 0.1)
    assert res.r.dtype == np.float32


# ---- the classes: hypothesis -------------------------------------------------------------


@st.composite
def extreme_rows(draw):
    """Rows whose entries span up to 300 decades, with zeros and ties, in float64."""
    n = draw(st.integers(2, 3000))
    rng = np.random.default_rng(draw(st.integers(0, 2**32)))
    low = draw(st.sampled_from([-300.0, -100.0, -20.0]))
    rows = 10 ** rng.uniform(low, 0, (2, n))
    if draw(st.booleans()):
        rows[rng.random((2, n)) < 0.2] = 0.0
    if draw(st.booleans()):
        rows[:, : n // 2] = rows[:, :1]  # ties in bulk
    rows[:, 0] += rows.sum(-1) == 0
    rows /= rows.sum(-1, keepdims=True)
    return rows[0], rows[1]


@settings(max_examples=40)
@given(extreme_rows(), st.sampled_from(divergence_suite()), st.sampled_from([0.0, 1e-6, 0.1, 10.0, 1000.0, np.inf]))
def test_extreme_rows_keep_the_budget_with_both_methods(pq, entry, eps):
    p, q = pq
    ours = check(p, q, eps, entry, "select")
    ref = check(p, q, eps, entry, "sorted")
    # Both optimal to the float resolution of the moved mass; on rows of 300 decades that
    # resolution is 1e-12 of the mass the tiny tokens hold at their thresholds.
    np.testing.assert_allclose(ours.acceptance, ref.acceptance, rtol=0, atol=1e-9)


@settings(max_examples=30)
@given(st.integers(1, 3), st.integers(1, 4), st.integers(2, 6), st.integers(0, 10**6))
def test_verify_outputs_are_tokens_of_the_vocabulary(rows, k, n, seed):
    rng = np.random.default_rng(seed)
    target = rng.dirichlet(np.ones(n), size=(rows, k + 1))
    draft = rng.dirichlet(np.ones(n), size=(rows, k))
    tokens = np.stack([[rng.choice(n, p=draft[b, j]) for j in range(k)] for b in range(rows)])
    out, accepted = md.verify(target, draft, tokens, rng.uniform(0, 1, rows), "kl", seed=seed)
    assert ((out >= 0) & (out < n) | (out == -1)).all()
    assert ((out >= 0).sum(-1) == accepted + 1).all()
