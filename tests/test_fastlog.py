"""``core.fastlog``: log within 1 ulp of numpy's everywhere, special values included; the
excess x - 1 - log x that ``log_excess`` gives with it; and the variants for positive normal
numbers, with the test of that domain."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numba import njit

from mdverify.core.fastlog import (NO_BITS, domain_bits, log, log_excess, log_excess_normal, log_normal,
                                   normal_or_zero)


@njit(cache=False)
def _logs(x, out):
    for i in range(x.size):
        out[i] = log(x[i])


def _ulps(x: np.ndarray) -> np.ndarray:
    out = np.empty_like(x)
    _logs(x, out)
    exact = np.log(x)
    return np.abs(out - exact) / np.spacing(np.abs(exact))


def test_within_one_ulp_over_every_binade():
    rng = np.random.default_rng(0)
    x = np.concatenate([np.ldexp(rng.uniform(1.0, 2.0, 400_000), rng.integers(-1074, 1024, 400_000)),
                        1.0 + rng.uniform(-1e-3, 1e-3, 100_000), 1.0 + rng.uniform(-1e-12, 1e-12, 10_000),
                        rng.uniform(0.5, 2.0, 100_000), np.nextafter(1.0, [0.0, 2.0]),
                        [5e-324, 2.0 ** -1022, np.nextafter(2.0 ** -1022, 0.0), 1e-300, np.finfo(float).max]])
    x = x[(x > 0) & (x != 1.0)]
    assert np.max(_ulps(x)) <= 1.0


@given(st.floats(min_value=0.0, exclude_min=True, allow_infinity=False))
def test_within_one_ulp_fuzzed(x):
    x = np.array([x])
    if x[0] == 1.0:
        return
    assert _ulps(x)[0] <= 1.0


def test_special_values():
    x = np.array([0.0, -0.0, 1.0, np.inf, -1.0, -np.inf, np.nan, 2.0, 0.5])
    out = np.empty_like(x)
    _logs(x, out)
    assert out[0] == out[1] == -np.inf and out[2] == 0.0 and out[3] == np.inf
    assert np.isnan(out[4:7]).all()
    assert out[7] == np.log(2.0) and out[8] == np.log(0.5)


@njit(cache=False, fastmath={"reassoc"})
def _logs_reassociated(x, out):
    for i in range(x.size):
        out[i] = log(x[i])


def test_a_reassociating_caller_keeps_it_within_one_ulp():
    """Called from a kernel compiled with reassociation (the vectorised sums), log's own
    arithmetic, which carries its rounding, keeps its order."""
    x = np.ldexp(np.random.default_rng(1).uniform(1.0, 2.0, 200_000), np.arange(200_000) % 2000 - 1000)
    out = np.empty_like(x)
    _logs_reassociated(x, out)
    assert np.max(np.abs(out - np.log(x)) / np.spacing(np.abs(np.log(x)))) <= 1.0


def test_excess_within_a_few_ulps_where_the_logarithm_is_reduced_to_itself():
    """log_excess(x) = (log x, x - 1 - log x): the log is ``log``'s, bit for bit, and the excess
    within EXCESS_ULPS (which the generated code's forms assume) of its 50-digit value on
    [sqrt(2)/2, sqrt(2)), down to 1e-15 from 1 where x - 1 - log(x) as written is all
    rounding; as written elsewhere."""
    import mpmath

    from mdverify.symbolic.codegen import EXCESS_ULPS

    rng = np.random.default_rng(2)
    x = np.concatenate([rng.uniform(np.sqrt(0.5), np.sqrt(2.0), 2000), 1 + np.geomspace(1e-15, 0.4, 300),
                        1 - np.geomspace(1e-15, 0.29, 300), [1.0, 3.0, 0.25, 1e-300, 1e300]])
    for value in x:
        logarithm, excess = log_excess(value)
        assert logarithm == log(value)
        with mpmath.workdps(50):
            truth = mpmath.mpf(float(value)) - 1 - mpmath.log(mpmath.mpf(float(value)))
        if np.sqrt(0.5) <= value < np.sqrt(2.0):
            assert abs(excess - truth) <= EXCESS_ULPS * np.spacing(float(truth)), (value, excess, truth)
        else:
            assert excess == (value - 1.0) - logarithm
    zero, at_zero = log_excess(0.0)
    assert zero == -np.inf and at_zero == np.inf
    assert log_excess(np.inf) == (np.inf, np.inf) and np.isnan(log_excess(-1.0)).all()


@njit(cache=False)
def _both_logs(x, normal, out):
    for i in range(x.size):
        out[0, i], out[1, i] = log_excess_normal(x[i]) if normal else log_excess(x[i])
        out[2, i] = log_normal(x[i]) if normal else log(x[i])


def test_the_normal_variants_are_log_and_log_excess_bit_for_bit_on_normal_numbers():
    """``log_normal`` and ``log_excess_normal`` skip the scaling of subnormals and the special
    values: on positive normal finite numbers, every binade and around 1, they are ``log`` and
    ``log_excess`` to the last bit."""
    rng = np.random.default_rng(3)
    x = np.concatenate([np.ldexp(rng.uniform(1.0, 2.0, 200_000), rng.integers(-1022, 1024, 200_000)),
                        1.0 + rng.uniform(-0.3, 0.4, 50_000), [2.0 ** -1022, np.finfo(float).max, 1.0]])
    got, want = np.empty((3, x.size)), np.empty((3, x.size))
    _both_logs(x, True, got)
    _both_logs(x, False, want)
    assert np.array_equal(got, want)


@njit(cache=False)
def _domain(x):
    bits = NO_BITS
    for i in range(x.size):
        bits = domain_bits(bits, x[i])
    return normal_or_zero(bits)


@pytest.mark.parametrize("outside", [5e-324, np.nextafter(2.0 ** -1022, 0.0), np.inf, np.nan, -np.nan, -0.0, -1.0,
                                     -np.inf])
def test_the_domain_of_the_normal_variants(outside):
    """``normal_or_zero`` holds for rows of +0 and positive normal finite numbers, and fails as
    soon as one value lies outside (a subnormal, inf, nan, a negative, -0), wherever it lies."""
    inside = np.array([0.0, 2.0 ** -1022, 1.0, 0.5, 3.0, 1e300, np.finfo(float).max])
    assert _domain(inside) and _domain(np.zeros(3)) and _domain(np.empty(0))
    for position in range(inside.size + 1):
        assert not _domain(np.insert(inside, position, outside))
