"""The edge rows of SPEC section 4, handled exactly."""

import numpy as np
import pytest

import mdverify as md
from mdverify.oracle.bruteforce import solve
from mdverify.workloads import edge_rows

EDGE_ROWS = edge_rows()


@pytest.mark.parametrize("label,p,q", EDGE_ROWS, ids=[row[0] for row in EDGE_ROWS])
@pytest.mark.parametrize("eps", [0.0, 1e-3, 0.1, 1.0, np.inf])
def test_edge_rows(entry, label, p, q, eps):
    res = md.mentor(p, q, eps, entry)
    r = res.r
    assert np.isfinite(r).all() and (r >= 0).all()
    for field in ("acceptance", "moved_mass", "a", "b", "divergence_value"):
        assert not np.isnan(getattr(res, field)), field
    assert not np.isnan(res.lam) and not np.isnan(res.mu)
    np.testing.assert_allclose(r.sum(), 1.0, atol=1e-12)
    assert entry.value(r, p) <= eps * (1 + 1e-9) + 1e-300
    assert res.acceptance == pytest.approx(np.minimum(r, q).sum(), abs=1e-12)
    ref = solve(p, q, eps, entry)
    assert res.acceptance == pytest.approx(ref.acceptance, abs=1e-9)
    # Inert tokens (p = q = 0) stay at 0.
    assert (r[(p == 0) & (q == 0)] == 0).all()


def test_eps_zero_is_lossless(entry):
    for _, p, q in EDGE_ROWS:
        res = md.mentor(p, q, 0.0, entry)
        np.testing.assert_array_equal(res.r, p)
        assert res.lam == np.inf and res.moved_mass == 0
        assert res.acceptance == pytest.approx(np.minimum(p, q).sum(), abs=1e-15)


def test_p_equals_q_keeps_p(entry):
    p = np.array([0.1, 0.2, 0.3, 0.4])
    for eps in [0.0, 0.5, np.inf]:
        res = md.mentor(p, p, eps, entry)
        np.testing.assert_array_equal(res.r, p)
        assert res.acceptance == pytest.approx(1.0, abs=1e-15)


def test_truncated_target_mass(entry):
    """Tokens with p = 0 get mass only when f'(inf) < inf, in proportion to q (SPEC C1)."""
    p = np.array([0.7, 0.3, 0.0, 0.0])
    q = np.array([0.2, 0.2, 0.4, 0.2])
    res = md.mentor(p, q, np.inf, entry)
    stray = res.r[2:]
    if np.isfinite(entry.f_prime_at_inf):
        assert stray.sum() > 0
        assert stray[0] == pytest.approx(2 * stray[1], rel=1e-12)
        assert res.b == np.inf
    else:
        assert (stray == 0).all()


def test_reverse_kl_fills_truncated_tokens_for_free():
    """With reverse_kl f'(inf) = 0: a top-k-truncated target leaks mass at no extra cost per unit."""
    p = np.array([0.5, 0.5, 0.0])
    q = np.array([0.25, 0.25, 0.5])
    entry = md.divergence("reverse_kl")
    assert entry.f_prime_at_inf == 0.0
    res = md.mentor(p, q, 0.2, entry)
    assert res.r[2] > 0.1
