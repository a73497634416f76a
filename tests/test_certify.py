"""md.certify and md.mentor(certified=True): rigorous enclosures against exact arithmetic, and bad input."""

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mdverify as md
from mdverify.oracle.bruteforce import solve
from mdverify.workloads import divergence_suite, llm_rows

pytest.importorskip("flint")
mpmath = pytest.importorskip("mpmath")


def _rows(n=60, seed=3):
    p, q = llm_rows(n, 1, seed=seed)
    return p[0], q[0]


def test_enclosures_contain_the_exact_rational_values():
    p, q = _rows()
    for name, exact_term in (("tv", lambda r, p: abs(r - p) / 2), ("pearson", lambda r, p: (r - p) ** 2 / p)):
        res = md.mentor(p, q, 0.02, name)
        cert = md.certify(p, q, res, 0.02, name)
        exact = [(Fraction(float(ri)), Fraction(float(pi))) for ri, pi in zip(res.r, p)]
        divergence = sum(exact_term(r, p) for r, p in exact)
        acceptance = sum(min(Fraction(float(ri)), Fraction(float(qi))) for ri, qi in zip(res.r, q))
        mass = sum(Fraction(float(ri)) for ri in res.r)
        assert Fraction(cert.divergence[0]) <= divergence <= Fraction(cert.divergence[1])
        assert Fraction(cert.acceptance[0]) <= acceptance <= Fraction(cert.acceptance[1])
        assert Fraction(cert.mass[0]) <= mass <= Fraction(cert.mass[1])
        assert cert.divergence[1] - cert.divergence[0] < 1e-17


def test_kl_enclosure_contains_a_50_digit_sum():
    p, q = _rows(seed=4)
    res = md.mentor(p, q, 0.1, "kl")
    cert = md.certify(p, q, res, 0.1, "kl")
    with mpmath.workdps(50):
        value = mpmath.fsum(mpmath.mpf(float(r)) * mpmath.log(mpmath.mpf(float(r)) / mpmath.mpf(float(pi)))
                            for r, pi in zip(res.r, p) if r > 0)
    assert mpmath.mpf(cert.divergence[0]) <= value <= mpmath.mpf(cert.divergence[1])


@pytest.mark.parametrize("entry", divergence_suite() + [md.divergence("(t-1)*log(t)")], ids=lambda d: d.name)
def test_the_proved_optimum_bounds_the_reference_optimum(entry):
    p, q = _rows(n=40, seed=6)
    for eps in (1e-3, 0.2):
        res = md.mentor(p, q, eps, entry, certified=True)
        reference = solve(p, q, eps, entry).acceptance
        cert = res.certificate
        assert cert.feasible and cert.notes == ("",)
        assert cert.optimum_upper >= reference - 1e-12  # the reference is itself a float computation
        assert cert.gap_upper <= 1e-12


def test_certified_mode_pulls_back_only_as_far_as_needed():
    p, q = _rows(n=500, seed=8)
    plain = md.mentor(p, q, 0.05, "kl")
    res = md.mentor(p, q, 0.05, "kl", certified=True)
    assert res.certificate.feasible and res.certificate.divergence[1] <= 0.05
    assert 0 <= plain.acceptance - res.acceptance <= 1e-13
    assert np.abs(res.r - plain.r).max() <= 1e-13


def test_float32_rows_are_certified_as_returned():
    p, q = llm_rows(3000, 2, seed=9, dtype=np.float32)
    res = md.mentor(p, q, 0.03, "hellinger", certified=True)
    assert res.r.dtype == np.float32 and res.certificate.feasible.all()
    assert (res.certificate.divergence[:, 1] <= 0.03).all() and (res.certificate.gap_upper <= 1e-4).all()


def test_zero_budget_and_unbinding_budget():
    p, q = _rows(seed=10)
    zero = md.mentor(p, q, 0.0, "kl", certified=True).certificate
    assert zero.feasible and zero.divergence.tolist() == [0.0, 0.0] and zero.gap_upper <= 1e-15
    free = md.mentor(p, q, np.inf, "kl", certified=True).certificate
    assert free.feasible and free.gap_upper <= 1e-15


def test_a_dual_bound_that_cannot_be_proved_is_said_so():
    # A bare r with multipliers that make the dual unbounded (mu < 0 at lam = 0): only the
    # trivial bound A <= sum q remains, and the note says why.
    p, q = _rows(seed=12)
    cert = md.certify(p, q, q, np.inf, "kl", lam=0.0, mu=-0.5)
    assert "mu < 0" in cert.notes[0] and 1.0 <= cert.optimum_upper <= 1.0 + 1e-15


def test_an_f_the_ball_library_cannot_evaluate_is_said_so():
    p, q = _rows(seed=13)
    entry = md.divergence("cosh(t-1) - 1")
    res = md.mentor(p, q, 0.01, entry)
    cert = md.certify(p, q, res, 0.01, entry)
    assert not cert.feasible and "no function 'cosh'" in cert.notes[0]
    assert cert.divergence.tolist() == [-np.inf, np.inf] and cert.optimum_upper >= 1.0
    with pytest.raises(ValueError, match="certified=True cannot prove rows"):
        md.mentor(p, q, 0.01, entry, certified=True)


def test_bad_input_is_named():
    p, q = _rows()
    res = md.mentor(p, q, 0.1)
    with pytest.raises(ValueError, match="r has shape"):
        md.certify(p, q, res.r[:-1], 0.1, lam=1.0, mu=0.0)
    with pytest.raises(ValueError, match="needs the multipliers"):
        md.certify(p, q, res.r, 0.1)
    with pytest.raises(ValueError, match="only with a bare r"):
        md.certify(p, q, res, 0.1, lam=1.0)
    with pytest.raises(ValueError, match="unknown divergence"):
        md.certify(p, q, res, 0.1, "klx")
    with pytest.raises(ValueError, match="lam of row 0"):
        md.certify(p, q, res.r, 0.1, lam=-1.0, mu=0.0)
    with pytest.raises(ValueError, match="mu of row 0"):
        md.certify(p, q, res.r, 0.1, lam=1.0, mu=np.nan)
    with pytest.raises(ValueError, match="eps"):
        md.certify(p, q, res, -0.1)
    with pytest.raises(ValueError, match="mass_tolerance"):
        md.certify(p, q, res, 0.1, mass_tolerance=-1.0)
    with pytest.raises(ValueError, match="give eps, not price"):
        md.mentor(p, q, price=2.0, certified=True)


def test_a_negative_or_unnormalised_r_is_not_feasible():
    p, q = _rows()
    res = md.mentor(p, q, 0.1)
    negative = res.r.copy()
    negative[0] = -1e-300
    cert = md.certify(p, q, negative, 0.1, lam=res.lam, mu=res.mu)
    assert not cert.feasible and "negative" in cert.notes[0]
    heavy = res.r * (1 + 1e-9)
    cert = md.certify(p, q, heavy, 0.1, lam=res.lam, mu=res.mu)
    assert not cert.feasible and "sum r" in cert.notes[0]


def test_a_row_pulled_back_is_bounded_at_the_optimum():
    """At eps = 1e-9 the proof of this row's budget needs a pull-back towards p of 1.2e-7 of its
    move. Its dual bound is taken at the float64 optimum, where lam (1e4) and mu (-1e4) are the
    multipliers: taken at the pulled row's own ratios, it came out 8.2e-8 over the optimum,
    where the pulled row lies 2e-12 below it."""
    p, q = np.array([0.9375, 0.4734802423413015, 0.125]), np.array([0.0, 1.0, 0.0])
    p = p / p.sum()
    res = md.mentor(p, q, 1e-9, "kl", certified=True)
    optimum = md.mentor(p, q, 1e-9, "kl")
    assert res.certificate.feasible and not np.array_equal(res.r, optimum.r)  # pulled back
    assert res.certificate.gap_upper <= 1e-11
    at_pulled = md.certify(p, q, res.r, 1e-9, "kl", lam=res.lam, mu=res.mu)
    assert at_pulled.gap_upper > 1e-9  # the bound this replaces
    with pytest.raises(ValueError, match="dual_r has shape"):
        md.certify(p, q, res.r, 1e-9, "kl", lam=res.lam, mu=res.mu, dual_r=optimum.r[:2])


probabilities = st.lists(st.one_of(st.just(0.0), st.floats(1e-300, 1.0)), min_size=1, max_size=8)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(p=probabilities, q=probabilities, eps=st.one_of(st.just(0.0), st.floats(1e-9, 10.0)),
       which=st.integers(0, len(divergence_suite()) - 1))
def test_fuzz_certified_rows_are_always_feasible(p, q, eps, which):
    n = min(len(p), len(q))
    p, q = np.array(p[:n]), np.array(q[:n])
    if p.sum() == 0 or q.sum() == 0:
        return
    p, q = p / p.sum(), q / q.sum()
    entry = divergence_suite()[which]
    try:
        res = md.mentor(p, q, eps, entry, certified=True)
    except ValueError as exc:  # ratios that overflow are refused up front, by name
        assert "ratio" in str(exc) or "overflow" in str(exc)
        return
    cert = res.certificate
    assert cert.feasible, cert.notes
    assert np.isfinite(cert.acceptance).all() and cert.acceptance[0] <= res.acceptance + 1e-15
    assert cert.gap_upper <= 1e-9 or cert.optimum_upper == np.inf
