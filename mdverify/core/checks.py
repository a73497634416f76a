"""Validation's fast path: one fused pass over p and q that says whether every row is valid.

``validate.as_pair`` and ``validate.check_ratios`` make about eight numpy passes over the
rows (sums, minima, the subnormal test); on a row of 131072 tokens that costs more than a
tenth of a millisecond, a large share of a solve. This kernel makes one pass, and only when
it finds something wrong do the numpy checks run, to name the row and the problem.
"""

import numpy as np

from mdverify.core.jit import kernel

#: The smallest normal double: a positive p below it may make q / p overflow (``check_ratios``).
SMALLEST_NORMAL = np.finfo(np.float64).tiny


@kernel(inline=True)
def invalid_entries(pj, qj):
    """How many of the tests an entry fails: p < 0, q < 0, 0 < p below the smallest normal."""
    return (pj < 0.0) + (qj < 0.0) + ((pj > 0.0) & (pj < SMALLEST_NORMAL))


@kernel
def sums_valid(sum_p, sum_q, invalid, tolerance):
    """The verdict of ``row_valid`` from its sums and its count of ``invalid_entries``."""
    return abs(sum_p - 1.0) <= tolerance and abs(sum_q - 1.0) <= tolerance and invalid == 0.0


@kernel(reassociate=True, borrow=True)
def row_valid(p, q, tolerance):
    """True when p and q (one row each) sum to 1 within ``tolerance``, have no negative entry,
    and p no positive entry below the smallest normal double. A nan or inf entry makes its
    row's sum nan or inf, so the sum test catches it too."""
    sum_p = 0.0
    sum_q = 0.0
    invalid = 0  # an integer count: a float one costs the loop its conversions, half its time
    for j in range(p.size):
        pj = np.float64(p[j])
        qj = np.float64(q[j])
        sum_p += pj
        sum_q += qj
        invalid += invalid_entries(pj, qj)
    return sums_valid(sum_p, sum_q, invalid, tolerance)


@kernel
def rows_valid(P, Q, tolerance):
    """``row_valid`` for every row of P and Q (shape (rows, n))."""
    for i in range(P.shape[0]):
        if not row_valid(P[i], Q[i], tolerance):
            return False
    return True


#: ``validate.SUM_TOLERANCE`` of float32 and float64 rows, repeated here so that the kernels
#: import nothing outside ``core`` (``tests/test_validation.py`` checks that the two agree).
FLOAT32_TOLERANCE = 1e-4
FLOAT64_TOLERANCE = 1e-6


@kernel
def sum_tolerance(p):
    """``validate.SUM_TOLERANCE`` of p's dtype (float32 or float64)."""
    return FLOAT32_TOLERANCE if p.itemsize == 4 else FLOAT64_TOLERANCE
