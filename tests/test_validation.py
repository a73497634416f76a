"""Bad input gets a ValueError that names the row and the problem."""

import numpy as np
import pytest

import mdverify as md

P = np.array([[0.5, 0.5], [0.25, 0.75]])
Q = np.array([[0.5, 0.5], [0.5, 0.5]])


def bad(p=P, q=Q, eps=0.1, divergence="kl", **kw):
    return md.mentor(p, q, eps, divergence, **kw)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"p": np.array([[0.5, 0.5], [np.nan, 1.0]])}, r"p row 1 has a non-finite entry nan at index 0"),
        ({"q": np.array([[0.5, 0.5], [np.inf, 0.0]])}, r"q row 1 has a non-finite entry inf"),
        ({"p": np.array([[0.5, 0.5], [-0.1, 1.1]])}, r"p row 1 has a negative entry -0.1 at index 0"),
        ({"q": np.array([[0.5, 0.4], [0.5, 0.5]])}, r"q row 0 sums to 0.9, not 1"),
        ({"q": np.array([0.5, 0.5])}, r"same shape"),
        ({"p": np.ones((2, 3)) / 3}, r"same shape"),
        ({"eps": -0.1}, r"eps row 0 is -0.1; budgets must be >= 0"),
        ({"eps": [0.1, np.nan]}, r"eps row 1 is nan"),
        ({"eps": [0.1, 0.2, 0.3]}, r"does not broadcast"),
        ({"eps": "big"}, r"eps must be a number"),
        ({"divergence": "kullback"}, r"unknown divergence 'kullback'; valid names are: tv, kl, reverse_kl"),
        ({"divergence": 3}, r"divergence must be a name"),
        ({"method": "fastest"}, r"unknown method 'fastest'"),
        ({"p": np.zeros((2, 0)), "q": np.zeros((2, 0))}, r"empty last axis"),
        ({"p": 1.0, "q": 1.0}, r"scalar"),
        ({"p": np.array([["a", "b"]])}, r"real numbers"),
        ({"p": [[0.5, 0.5], [1.0]]}, r"not an array of numbers"),
    ],
)
def test_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        bad(**kwargs)


def test_single_row_is_named_without_index():
    with pytest.raises(ValueError, match=r"^p sums to 0.5"):
        md.mentor([0.25, 0.25], [0.5, 0.5], 0.1)


def test_nested_batch_row_index():
    p = np.full((2, 2, 2), 0.5)
    p[1, 0] = [0.9, 0.3]
    with pytest.raises(ValueError, match=r"p row \(1, 0\) sums to 1.2"):
        md.mentor(p, np.full((2, 2, 2), 0.5), 0.1)


def test_float32_sum_tolerance():
    p = np.array([0.5, 0.50005], np.float32)
    md.mentor(p, p, 0.1)  # within 1e-4 for float32
    with pytest.raises(ValueError, match="tolerance 1e-06"):
        md.mentor(p.astype(np.float64), p.astype(np.float64), 0.1)


@pytest.mark.parametrize("a", [0.0, 1.0, np.nan, np.inf])
def test_alpha_excluded_values(a):
    with pytest.raises(ValueError, match="alpha"):
        md.alpha(a)


def test_ratio_index_rejects_batches_and_bad_budget():
    with pytest.raises(ValueError, match="one row"):
        md.RatioIndex(P, Q)
    index = md.RatioIndex(P[1], Q[1])
    with pytest.raises(ValueError, match="budgets must be >= 0"):
        index.query("kl", -1.0)
    with pytest.raises(ValueError, match="unknown divergence"):
        index.frontier("nope")


def test_divergence_value_checks_input():
    with pytest.raises(ValueError, match="r row 0 has a negative entry"):
        md.divergence("kl").value([[-0.5, 1.5]], [[0.5, 0.5]])


def test_entries_whose_sum_overflows_are_refused():
    with pytest.raises(ValueError, match="sums to inf"):
        md.mentor(np.full(3, 6e307), np.full(3, 1 / 3), 0.1, "kl")


@pytest.mark.parametrize("n", [500, 3000])  # the sort-free solver checks a long row as it samples it
def test_the_kernels_check_each_row_as_they_solve(n):
    """With CHECKED, ``mentor_rows`` and ``price_rows`` check every row as ``rows_valid`` does and
    leave one that fails unsolved, its fields nan; the rows that pass are solved as unchecked."""
    from mdverify.api import _workspace
    from mdverify.core import mentor as kernels

    rng = np.random.default_rng(4)
    P, Q = rng.dirichlet(np.ones(n), 6), rng.dirichlet(np.ones(n), 6)
    P[1, 0] = np.nan
    Q[2, :2] = (-0.1, Q[2, 0] + Q[2, 1] + 0.1)
    P[3] *= 1.01
    P[4, :2] = (P[4, 0] + P[4, 1] - 1e-310, 1e-310)  # below the smallest normal: refused by the fast check
    valid = np.array([True, False, False, False, False, True])
    entry = md.divergence("hellinger")
    for solve, limits in ((kernels.mentor_rows, np.full(6, 0.05)), (kernels.price_rows, np.full(6, 3.0))):
        for solver in (kernels.SORTED, kernels.SELECT):
            R, fields = np.zeros_like(P), np.empty((6, len(kernels.FIELDS)))
            work = _workspace(solver, 6, n)
            solve(P, Q, limits, entry.kind, entry.param, solver | kernels.CHECKED, R, fields, work)
            assert np.isnan(fields[~valid]).all() and not np.isnan(fields[valid]).any()
            R_alone, fields_alone = np.zeros((2, n)), np.empty((2, len(kernels.FIELDS)))
            solve(P[valid], Q[valid], limits[valid], entry.kind, entry.param, solver, R_alone, fields_alone,
                  _workspace(solver, 2, n))
            np.testing.assert_array_equal(fields[valid], fields_alone)
            np.testing.assert_array_equal(R[valid], R_alone)


def test_a_row_the_kernel_check_refuses_but_the_checks_accept_is_solved():
    """A p below the smallest normal float whose ratio with q does not overflow: the kernels'
    fused check refuses it, the checks that name problems accept it, so it is solved."""
    P = np.array([[0.5, 0.5], [1.0 - 1e-310, 1e-310]])
    Q = np.array([[0.2, 0.8], [1.0 - 1e-311, 1e-311]])
    for kw in ({"eps": 0.1}, {"price": 2.0}):
        both = md.mentor(P, Q, divergence="kl", **kw)
        for i in range(2):
            alone = md.mentor(P[i].tolist(), Q[i].tolist(), divergence="kl", **kw)  # lists: the numpy checks first
            np.testing.assert_array_equal(both.r[i], alone.r)
            assert both.acceptance[i] == alone.acceptance


def test_the_kernels_check_rows_with_the_tolerance_of_their_dtype():
    from mdverify.core.checks import sum_tolerance
    from mdverify.validate import SUM_TOLERANCE

    assert SUM_TOLERANCE.keys() == {np.dtype(np.float32), np.dtype(np.float64)}
    for dtype, tolerance in SUM_TOLERANCE.items():
        assert sum_tolerance(np.zeros(3, dtype)) == tolerance
