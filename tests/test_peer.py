"""The peer baseline of SPEC section 8: what its sampler induces, and its search."""

import numpy as np

import mdverify as md
from mdverify.bench.peer import _budget_value, induced, peer_sampler
from mdverify.workloads import llm_rows


def test_induced_distribution_matches_a_simulation():
    p = np.array([0.5, 0.3, 0.2, 0.0])
    q = np.array([0.1, 0.3, 0.2, 0.4])
    r, acceptance = induced(p, q, 0.6)
    assert abs(r.sum() - 1) < 1e-15 and (r >= 0).all()
    assert np.isclose(acceptance, np.minimum(q, p / 0.6).sum())
    # Simulate: draft x ~ q, accept with min(1, p/(alpha q)), else draw from norm((p - alpha q)_+).
    rng = np.random.default_rng(0)
    draws = 400_000
    x = rng.choice(4, size=draws, p=q)
    accept = rng.random(draws) < np.minimum(1.0, p[x] / (0.6 * q[x]))
    residual = np.maximum(p - 0.6 * q, 0)
    x[~accept] = rng.choice(4, size=int((~accept).sum()), p=residual / residual.sum())
    np.testing.assert_allclose(np.bincount(x, minlength=4) / draws, r, atol=4e-3)


def test_lossless_at_alpha_one_and_search_direction():
    p, q = llm_rows(500, 1, seed=4)
    p, q = p[0], q[0]
    r, acceptance = induced(p, q, 1.0)
    np.testing.assert_allclose(r, p, atol=1e-15)
    assert np.isclose(acceptance, np.minimum(p, q).sum())
    values = [_budget_value(p, q, a) for a in (0.2, 0.5, 0.9)]
    assert values[0] < values[1] < values[2]  # the measure falls with alpha, as the search assumes
    result = peer_sampler(p, q, values[1])
    assert result.within_tolerance and result.steps <= 10
    # Mentored decoding at the peer's true divergence accepts at least as often.
    true_d = md.divergence("reverse_kl").value(result.r, p)
    assert md.mentor(p, q, true_d, "reverse_kl").acceptance >= np.minimum(result.r, q).sum() - 1e-12
