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


@kernel(reassociate=True)
def rows_valid(P, Q, tolerance):
    """True when every row of P and Q (shape (rows, n)) sums to 1 within ``tolerance``, has no
    negative entry, and no positive p below the smallest normal double. A nan or inf entry
    makes its row's sum nan or inf, so the sum test catches it too."""
    rows, n = P.shape
    for i in range(rows):
        sum_p = 0.0
        sum_q = 0.0
        bad = 0.0
        for j in range(n):
            p = np.float64(P[i, j])
            q = np.float64(Q[i, j])
            sum_p += p
            sum_q += q
            bad += (p < 0.0) + (q < 0.0) + ((p > 0.0) & (p < SMALLEST_NORMAL))
        if not (abs(sum_p - 1.0) <= tolerance and abs(sum_q - 1.0) <= tolerance and bad == 0.0):
            return False
    return True
