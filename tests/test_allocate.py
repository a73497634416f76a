"""md.allocate: the price search on reduced rows against the same search on whole frontiers.

The reference below reads every row's budget at a price off its full sorted frontier
(``RatioIndex.budget_at_price``) and bisects on log nu; ``md.allocate`` solves two batches,
reduces each row to the tokens whose clip can still change and searches on those. Both must
give the same budgets, and the budgets must be optimal: they add up to the total, and every
row given budget has slope lam_j = nu w_j.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mdverify as md
from mdverify import prices
from mdverify.workloads import divergence_suite, llm_rows
from mdverify.workloads.instances import families

FAMILIES = families(400, 6, seed=71)


def reference(P, Q, total, entry, w):
    """(eps, acceptance, price): bisection on log nu over every row's whole frontier."""
    indexes = [md.RatioIndex(p, q) for p, q in zip(P, Q)]
    unlimited = md.mentor(P, Q, np.inf, entry)
    if w @ unlimited.divergence_value <= total:
        return unlimited.divergence_value, unlimited.acceptance, 0.0

    def budgets(nu):
        return np.array([index.budget_at_price(entry, nu * w[j]) for j, index in enumerate(indexes)])

    lo, hi = 1.0, 1.0
    while w @ budgets(lo) <= total:
        if lo <= prices.PRICES[0]:  # the floor of the prices searched: its allocation
            return budgets(lo), md.mentor(P, Q, budgets(lo), entry).acceptance, lo
        lo = max(lo / 4.0, prices.PRICES[0])
    while w @ budgets(hi) > total:
        hi *= 4.0
    for _ in range(300):
        mid = np.sqrt(lo * hi)
        if not lo < mid < hi:
            break
        lo, hi = (mid, hi) if w @ budgets(mid) > total else (lo, mid)
    eps = budgets(hi)
    jump = np.maximum(budgets(lo) - eps, 0.0)
    if jump.any():
        eps += jump * min((total - w @ eps) / (w @ jump), 1.0)
    return eps, md.mentor(P, Q, eps, entry).acceptance, hi


def check_optimal(P, Q, total, entry, w, allocation, slopes=True):
    """The budgets add up, their acceptances are what md.mentor gives (the float64 optima, also
    for float32 rows), binding slopes are equal."""
    P, Q, eps = P.astype(np.float64), Q.astype(np.float64), allocation.eps
    assert (eps >= 0).all()
    spent = w @ eps
    res = md.mentor(P, Q, eps, entry)
    np.testing.assert_allclose(allocation.acceptance, res.acceptance, rtol=0, atol=1e-9)
    assert allocation.total_acceptance == pytest.approx(allocation.acceptance.sum(), abs=1e-12)
    if allocation.price == 0.0:  # the total does not bind: every row at its limit
        limit = md.mentor(P, Q, np.inf, entry)  # (its D may differ where the last 1e-16 of acceptance costs a lot)
        np.testing.assert_allclose(allocation.acceptance, limit.acceptance, rtol=0, atol=1e-9)
        assert spent <= total * (1 + 1e-12)
        return
    if allocation.price == prices.PRICES[0]:  # the price lies below the floor searched
        assert spent <= total * (1 + 1e-12)
        return
    assert spent == pytest.approx(total, rel=1e-12)
    if allocation.price * total < 1e-10 or not slopes:  # all the budget buys is below the resolution of acceptance
        return
    # Optimality: nu w_j lies between the row's slopes just below and just above its budget. By
    # concavity (C3) a secant below eps_j is no flatter than the slope at eps_j from the left, and
    # one above no steeper than the slope from the right, so the secants must bracket nu w_j too
    # (to the resolution of the acceptances they difference).
    step = 1e-3
    below, at, above = (md.mentor(P, Q, budget, entry).acceptance for budget in
                        (eps * (1 - step), eps, np.where(eps > 0, eps * (1 + step), 1e-6 * total)))
    width_below, width_above = eps * step, np.where(eps > 0, eps * step, 1e-6 * total)
    resolution = 4e-16 * np.maximum(at, 1e-300)
    given = eps > 1e-6 * total  # smaller shares are checked through the total acceptance alone
    assert ((at - below)[given] >= (allocation.price * w * width_below - resolution)[given] * (1 - 1e-6)).all()
    assert (above - at <= allocation.price * w * width_above * (1 + 1e-6) + resolution).all()


def weights_for(rows, seed):
    return np.random.default_rng(seed).uniform(0.5, 3.0, rows)


@pytest.mark.parametrize("label", [label for label, _, _ in FAMILIES])
@pytest.mark.parametrize("total", [1e-4, 0.02, 0.5, 50.0])
def test_every_family_matches_the_whole_frontier_search(label, total, entry):
    _, P, Q = next(row for row in FAMILIES if row[0] == label)
    w = weights_for(P.shape[0], len(label))
    allocation = md.allocate(P, Q, total, entry, weights=w)
    check_optimal(P, Q, total, entry, w, allocation)
    eps, acceptance, _ = reference(P.astype(np.float64), Q.astype(np.float64), total, entry, w)
    np.testing.assert_allclose(allocation.acceptance, acceptance, rtol=0, atol=1e-9)
    np.testing.assert_allclose(allocation.total_acceptance, acceptance.sum(), rtol=0, atol=1e-9)
    # tv's optimum is not unique (rows of equal weight may split differently), and where all the
    # budget buys is below the resolution of acceptance (1 - 1e-16), budgets are not determined
    if entry.name != "tv" and allocation.price * total >= 1e-10:
        np.testing.assert_allclose(allocation.eps, eps, rtol=1e-7, atol=1e-12 * total)


@pytest.mark.parametrize("factor", [1e-3, 0.3, 3.0, 1e3])
@pytest.mark.parametrize("divergence", ["kl", "hellinger", "reverse_kl", "jensen_shannon"])
def test_a_wrong_guess_moves_the_bracket_to_the_price(monkeypatch, factor, divergence):
    # The bracket misses the price on one side or the other; the search must move it there.
    P, Q = llm_rows(2000, 8, seed=72)
    w = weights_for(8, 72)
    right = md.allocate(P, Q, 0.1, divergence, weights=w)
    guess = prices._guess_price
    monkeypatch.setattr(prices, "_guess_price", lambda *args: guess(*args) * factor)
    moved = md.allocate(P, Q, 0.1, divergence, weights=w)
    check_optimal(P, Q, 0.1, md.divergence(divergence), w, moved)
    np.testing.assert_allclose(moved.eps, right.eps, rtol=1e-9, atol=1e-15)
    assert moved.price == pytest.approx(right.price, rel=1e-9)


def test_reductions_that_disagree_about_the_price_end_the_bracket_search(monkeypatch):
    # Rows reduced from other solutions may round the spending at one price to either side of
    # the total. Here each reduction overstates it a thousandfold and the next understates it
    # as much: the price seems above the bracket, then below the price just found under it. The
    # search ends there rather than swing the bracket about that price for ever.
    P, Q = llm_rows(500, 4, seed=76)
    reductions = []

    class Disagreeing(prices._ReducedRows):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            reductions.append(self)
            if len(reductions) > 50:
                raise RuntimeError("the bracket search does not end")

        def at_price(self, at):
            fields = super().at_price(at)
            fields[:, prices.EPS] *= 1e3 if len(reductions) % 2 else 1e-3
            return fields

    monkeypatch.setattr(prices, "_ReducedRows", Disagreeing)
    allocation = md.allocate(P, Q, 0.1)
    assert len(reductions) == 2 and np.isfinite(allocation.eps).all()


def test_rows_at_their_limit_that_bind_at_the_price_are_solved_there(monkeypatch):
    # At equal budgets the rows of small D(q || p) reach their limit; where the frontier's last
    # slope is below the price, they bind there and are solved at the bracket's end.
    P, Q = llm_rows(2000, 8, seed=75)
    limit = md.mentor(P, Q, np.inf).divergence_value
    total = 8 * float(np.median(limit))
    bound = []
    bind_at = prices._bind_at
    monkeypatch.setattr(prices, "_bind_at", lambda *args: bound.append(bind_at(*args)) or bound[-1])
    allocation = md.allocate(P, Q, total)
    assert any(rows.any() for rows in bound)
    check_optimal(P, Q, total, md.divergence("kl"), np.ones(8), allocation)
    eps, acceptance, _ = reference(P, Q, total, md.divergence("kl"), np.ones(8))
    np.testing.assert_allclose(allocation.eps, eps, rtol=1e-7, atol=1e-12 * total)
    np.testing.assert_allclose(allocation.acceptance, acceptance, rtol=0, atol=1e-9)


def test_tv_fills_the_rows_of_least_weight_first():
    P, Q = llm_rows(500, 4, seed=73)
    limit = md.mentor(P, Q, np.inf, "tv").divergence_value
    w = np.array([2.0, 1.0, 2.0, 3.0])
    total = limit[1] * 1.0 + 0.5 * 2.0 * (limit[0] + limit[2])  # row 1 full, rows 0 and 2 half
    allocation = md.allocate(P, Q, total, "tv", weights=w)
    np.testing.assert_allclose(allocation.eps, [limit[0] / 2, limit[1], limit[2] / 2, 0.0], rtol=1e-12)
    assert allocation.price == 0.5
    check_optimal(P, Q, total, md.divergence("tv"), w, allocation)


def test_a_user_generator_allocates_as_its_registered_twin():
    P, Q = llm_rows(1000, 5, seed=74)
    user = md.allocate(P, Q, 0.2, md.divergence("(t-1)*log(t)"))
    registered = md.allocate(P, Q, 0.2, "jeffreys")
    np.testing.assert_allclose(user.eps, registered.eps, rtol=1e-9)
    np.testing.assert_allclose(user.acceptance, registered.acceptance, rtol=0, atol=1e-12)


@st.composite
def batches(draw):
    """Batches of 1-8 rows spanning up to 300 decades, with zeros on either side."""
    rows, n = draw(st.integers(1, 8)), draw(st.integers(2, 300))
    rng = np.random.default_rng(draw(st.integers(0, 2**32)))
    pq = 10 ** rng.uniform(draw(st.sampled_from([-300.0, -30.0, -3.0])), 0, (2, rows, n))
    if draw(st.booleans()):
        pq[rng.random(pq.shape) < 0.3] = 0.0
    pq[:, :, 0] += pq.sum(-1) == 0
    pq /= pq.sum(-1, keepdims=True)
    return pq[0], pq[1], rng.uniform(0.2, 5.0, rows)


@settings(max_examples=40, deadline=None)
@given(batches(), st.sampled_from(divergence_suite()), st.sampled_from([1e-6, 1e-3, 0.1, 2.0, 100.0]))
def test_fuzz_allocations_are_optimal(batch, entry, total):
    P, Q, w = batch
    entry = md.divergence(entry) if isinstance(entry, str) else entry
    allocation = md.allocate(P, Q, total, entry, weights=w)
    # On rows spanning 300 decades, secants of the frontier over 1e-3 of a budget are not resolved
    # (a slope's acceptance is 1e-15 and below): the total acceptance is compared instead.
    check_optimal(P, Q, total, entry, w, allocation, slopes=False)
    _, acceptance, _ = reference(P, Q, total, entry, w)
    np.testing.assert_allclose(allocation.total_acceptance, acceptance.sum(), rtol=0, atol=1e-8)


def test_the_first_price_estimate_survives_tiny_slopes():
    """Slopes near 1e-200 (rows whose budget barely binds) square below the smallest float:
    the estimate scales them first, and equals the one at ordinary scale times that scale."""
    first = np.zeros((3, len(prices.FIELDS)))
    first[:, prices.LAM] = [3.0, 4.0, 0.0]
    first[:, prices.EPS] = [0.1, 0.1, 0.02]
    w = np.array([1.0, 2.0, 1.0])
    ordinary = prices._guess_price(first, 0.1, w, 0.5)
    assert ordinary == pytest.approx(np.sqrt(0.1 * (9.0 + 16.0 / 2.0) / (0.5 - 0.02)), rel=1e-15)
    first[:, prices.LAM] *= 1e-200
    assert prices._guess_price(first, 0.1, w, 0.5) == pytest.approx(ordinary * 1e-200, rel=1e-15)


def test_the_price_search_takes_brackets_whose_ends_are_far_apart():
    """Ends 1e-300 and 1e10 overflow hi / lo, and 1e-300 and 1e-100 underflow lo hi; the search
    works in logs and still closes on the price where spent(nu) meets the total."""
    import warnings

    for ends, price in (((1e-300, 1e10), 1e-5), ((1e-300, 1e-100), 1e-200)):

        def spent(nu, lo, hi):
            return 2.0 * (price / nu) ** 0.5

        with warnings.catch_warnings():
            warnings.simplefilter("error")
            lo, hi = prices._search_price(*map(np.float64, ends), spent, 2.0)
        assert lo < hi and spent(hi, lo, hi) <= 2.0
        assert spent(hi, lo, hi) == pytest.approx(2.0, rel=1e-12)
        assert hi == pytest.approx(price, rel=1e-11)
