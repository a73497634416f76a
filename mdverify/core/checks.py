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
#: Start of the reductions of ``entry_bits`` (no entry seen): the least signed and unsigned.
NO_NEGATIVE = np.int64(0)
NO_POSITIVE = np.uint64(0xFFFFFFFFFFFFFFFF)


@kernel(inline=True)
def entry_bits(x):
    """The bits of float64(x) as an integer, less 1. As a signed integer it is below -1 exactly
    where x < 0 (-0 wraps round to the greatest); as an unsigned one, below ``entry_bits(y)`` of
    a positive y exactly where 0 < x < y. So the entry tests are minima of integers, which the
    compiler vectorises (of floats, it does not): a nan may fail the first, and its row's sum
    fails anyway."""
    return np.float64(x).view(np.int64) - 1


@kernel(inline=True)
def least_positive_below(least, y):
    """Whether some entry x had 0 < x < y, from ``least``, the unsigned minimum of ``entry_bits(x)``."""
    return least < np.uint64(entry_bits(y))


@kernel
def sums_valid(sum_p, sum_q, lowest, least_p, tolerance):
    """The verdict of ``row_valid`` from its sums, the signed minimum ``lowest`` of ``entry_bits``
    over p and q and its unsigned minimum ``least_p`` over p."""
    return (abs(sum_p - 1.0) <= tolerance and abs(sum_q - 1.0) <= tolerance and lowest >= -1
            and not least_positive_below(least_p, SMALLEST_NORMAL))


@kernel(reassociate=True, borrow=True)
def row_valid(p, q, tolerance):
    """True when p and q (one row each) sum to 1 within ``tolerance``, have no negative entry,
    and p no positive entry below the smallest normal double. A nan or inf entry makes its
    row's sum nan or inf, so the sum test catches it too."""
    sum_p = 0.0
    sum_q = 0.0
    lowest, least_p = NO_NEGATIVE, NO_POSITIVE
    for j in range(p.size):
        pj = np.float64(p[j])
        qj = np.float64(q[j])
        sum_p += pj
        sum_q += qj
        bits_p = entry_bits(pj)
        lowest = min(lowest, min(bits_p, entry_bits(qj)))
        least_p = min(least_p, np.uint64(bits_p))
    return sums_valid(sum_p, sum_q, lowest, least_p, tolerance)


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
