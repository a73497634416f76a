"""Hypothesis fuzz of the public API: any input either raises ValueError or gives a valid, nan-free result."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import mdverify as md
from mdverify.workloads import divergence_suite

# Entries drawn from a small set of values, so that zeros, ties and 1e-300 tails are common.
ATOMS = st.sampled_from([0.0, 0.0, 1e-300, 1e-200, 1e-12, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0])


@st.composite
def distributions(draw):
    n = draw(st.integers(1, 12))
    batch = draw(st.sampled_from([(), (1,), (3,), (2, 2)]))
    weights = draw(hnp.arrays(np.float64, batch + (2, n), elements=ATOMS))
    weights[..., 0] += weights.sum(-1) == 0  # an all-zero row becomes one-hot
    rows = weights / weights.sum(-1, keepdims=True)
    dtype = draw(st.sampled_from([np.float64, np.float32]))
    p, q = rows[..., 0, :].astype(dtype), rows[..., 1, :].astype(dtype)
    return p, q


@given(distributions(), st.sampled_from(divergence_suite()), st.sampled_from([0.0, 1e-9, 1e-3, 0.2, 5.0, np.inf]),
       st.sampled_from(["sorted", "select"]))
def test_valid_inputs_give_valid_outputs(pq, entry, eps, method):
    p, q = pq
    p = p / p.sum(-1, keepdims=True, dtype=np.float64).astype(p.dtype)
    q = q / q.sum(-1, keepdims=True, dtype=np.float64).astype(q.dtype)
    res = md.mentor(p, q, eps, entry, method=method)
    other = md.mentor(p, q, eps, entry, method="select" if method == "sorted" else "sorted")
    close = 1e-12 if p.dtype == np.float64 else 1e-6  # float32 rows round apart, and accept as rounded
    np.testing.assert_allclose(res.acceptance, other.acceptance, rtol=0, atol=close)
    assert res.r.dtype == p.dtype and res.r.shape == p.shape
    for name in ("acceptance", "moved_mass", "a", "b", "lam", "mu", "divergence_value"):
        assert not np.isnan(getattr(res, name)).any(), name
    assert (res.r >= 0).all() and np.isfinite(res.r).all()
    assert (np.asarray(res.divergence_value) <= eps * (1 + 1e-9) + 1e-300).all()


@given(distributions(), st.sampled_from(divergence_suite()), st.sampled_from([1e-3, 0.5, 3.0, 1e3, np.inf]))
def test_price_solves_agree_and_stay_valid(pq, entry, price):
    p, q = pq
    p = p / p.sum(-1, keepdims=True, dtype=np.float64).astype(p.dtype)
    q = q / q.sum(-1, keepdims=True, dtype=np.float64).astype(q.dtype)
    res = md.mentor(p, q, price=price, divergence=entry, method="select")
    ref = md.mentor(p, q, price=price, divergence=entry, method="sorted")
    np.testing.assert_allclose(res.acceptance, ref.acceptance, rtol=0, atol=1e-12 if p.dtype == np.float64 else 1e-6)
    for name in ("acceptance", "moved_mass", "a", "b", "lam", "mu", "divergence_value"):
        assert not np.isnan(getattr(res, name)).any(), name
    assert (res.r >= 0).all() and np.isfinite(res.r).all()
    tolerance = 1e-12 if p.dtype == np.float64 else 1e-6
    assert (np.asarray(res.acceptance) <= q.sum(-1, dtype=np.float64) + 1e-12).all()
    np.testing.assert_allclose(res.r.sum(-1, dtype=np.float64), p.sum(-1, dtype=np.float64), atol=tolerance)


@given(
    hnp.arrays(np.float64, st.tuples(st.integers(1, 3), st.integers(1, 5)),
               elements=st.floats(allow_nan=True, allow_infinity=True, width=64)),
    hnp.arrays(np.float64, st.tuples(st.integers(1, 3), st.integers(1, 5)),
               elements=st.floats(-1, 2)),
    st.one_of(st.floats(allow_nan=True), st.just("x"), st.lists(st.floats(), max_size=3)),
)
def test_arbitrary_input_raises_value_error_or_succeeds(p, q, eps):
    try:
        res = md.mentor(p, q, eps, "kl")
    except ValueError:
        return
    assert not np.isnan(res.acceptance).any()


@st.composite
def long_rows(draw):
    """Rows long enough to be screened (select.SAMPLE_FROM): LLM-like, a smoothed model's (one
    side a mixture of a sparse model and the other: a tie of most tokens), or a short pattern
    of atoms repeated (ties, zeros and 1e-300 tails in bulk), with a random dtype."""
    from mdverify.core.select import SAMPLE_FROM
    from mdverify.workloads import llm_rows

    n = SAMPLE_FROM * draw(st.sampled_from([1, 4, 20])) + draw(st.integers(0, 3000))
    dtype = draw(st.sampled_from([np.float64, np.float32]))
    if draw(st.booleans()):
        truncate = draw(st.sampled_from([None, "top_k", "top_p", "both"]))
        P, Q = llm_rows(n, 1, seed=draw(st.integers(0, 10**6)), truncate=truncate, dtype=dtype)
        return P[0], Q[0]
    if draw(st.booleans()):
        rng = np.random.default_rng(draw(st.integers(0, 10**6)))
        base = rng.dirichlet(np.full(n, draw(st.sampled_from([0.05, 1.0]))))
        sparse = np.zeros(n)
        sparse[rng.choice(n, draw(st.integers(1, 200)), replace=False)] = 1.0
        smoothing = draw(st.floats(0.01, 0.99))
        mixed = (1.0 - smoothing) * sparse / sparse.sum() + smoothing * base
        rows = (mixed, base) if draw(st.booleans()) else (base, mixed)
        return rows[0].astype(dtype), rows[1].astype(dtype)
    pattern = draw(hnp.arrays(np.float64, (2, draw(st.integers(2, 12))), elements=ATOMS))
    pattern[:, 0] += 1.0  # no all-zero row
    rows = np.resize(pattern, (2, n)) * np.random.default_rng(draw(st.integers(0, 10))).uniform(0.5, 1.5, (2, n)) ** draw(
        st.sampled_from([0, 1]))  # exact repeats (ties), or jittered
    rows /= rows.sum(-1, keepdims=True)
    return rows[0].astype(dtype), rows[1].astype(dtype)


@settings(max_examples=25)
@given(long_rows(), st.sampled_from(divergence_suite()), st.sampled_from([0.0, 1e-6, 1e-3, 0.05, 0.5, 5.0, np.inf]))
def test_fuzzed_screened_rows_match_sorted(pq, entry, eps):
    p, q = pq
    ours = md.mentor(p, q, eps, entry, method="select")
    ref = md.mentor(p, q, eps, entry, method="sorted")
    close = 1e-12 if p.dtype == np.float64 else 1e-6  # float32 rows round apart, and accept as rounded
    np.testing.assert_allclose(ours.acceptance, ref.acceptance, rtol=0, atol=close)
    np.testing.assert_allclose(ours.r, ref.r, rtol=0, atol=close)
    assert ours.divergence_value <= eps * (1 + 1e-9) + 1e-300


@settings(max_examples=25)
@given(long_rows(), st.sampled_from(divergence_suite()), st.sampled_from([1e-3, 0.5, 3.0, 1e3, 1e9]))
def test_fuzzed_screened_price_solves_match_sorted(pq, entry, price):
    p, q = pq
    ours = md.mentor(p, q, price=price, divergence=entry, method="select")
    ref = md.mentor(p, q, price=price, divergence=entry, method="sorted")
    close = 1e-12 if p.dtype == np.float64 else 1e-6  # float32 rows round (and pull back) apart
    np.testing.assert_allclose(ours.acceptance, ref.acceptance, rtol=0, atol=close)
    np.testing.assert_allclose(ours.r, ref.r, rtol=0, atol=close)


@settings(max_examples=40)
@given(long_rows(), st.sampled_from(divergence_suite() + [md.divergence("pearson"), md.alpha(2.5), md.alpha(4.0)] * 4),
       st.sampled_from([0.0, 0.3, 0.05]), st.sampled_from([30.0, 150.0, 280.0]), st.integers(0, 10**6),
       st.sampled_from([0.5, 0.999, 1.0, 1.001]))
def test_fuzzed_budgets_near_the_drafters_divergence_match_sorted(pq, entry, share, exponent, seed, fraction):
    """Budgets relative to D_f(q || p), so that they reach r = q however large D is; on a share
    of the tokens p is divided by 10^exponent, so that ratios near 1e30-1e280 overflow f~ of
    the fast-growing divergences (pearson, alpha(a > 1): drawn more often) where p f~ stays
    finite."""
    p, q = (x.astype(np.float64) for x in pq)
    rng = np.random.default_rng(seed)
    shrunk = rng.random(p.size) < share
    p[shrunk] *= 10.0 ** -exponent
    p /= p.sum()
    try:
        drafter = float(entry.value(q, p))
    except ValueError:  # a subnormal p whose ratio overflows: refused, as md.mentor refuses it
        return
    if not drafter < np.inf:
        return
    eps = drafter * fraction
    ours = md.mentor(p, q, eps, entry, method="select")
    ref = md.mentor(p, q, eps, entry, method="sorted")
    np.testing.assert_allclose(ours.acceptance, ref.acceptance, rtol=0, atol=1e-12)
    assert ours.divergence_value <= eps * (1 + 1e-9) + 1e-300
