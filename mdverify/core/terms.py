"""The per-token term p f~(t) of D_f, finite wherever its value is, and D_f of a row as their sum.

Where p is near the smallest normal floats and the ratio t = r/p near the largest, f~(t) can
overflow although p f~(t) does not: KL's term r log(r/p) is 351.6 at r = 0.5, p = 1e-306,
while t log t overflows from t = 2.5e305. There the term is computed as r f~*(1/t), with the
conjugate f~*(u) = u f~(1/u) derived by sympy (``_fgen.f_tilde_star``). Everywhere else it is
the plain product, bit for bit.
"""

import numpy as np

from mdverify.core._fgen import f_tilde, f_tilde_prime_at_inf, f_tilde_star
from mdverify.core.jit import kernel


@kernel
def weighted_f_tilde(kind, alpha, weight, t):
    """weight * f~(t) for weight > 0 and t in [0, inf)."""
    value = weight * f_tilde(kind, alpha, t)
    if not value < np.inf and 1.0 < t < np.inf:  # f~(t) overflowed; the product may not
        value = (weight * t) * f_tilde_star(kind, alpha, 1.0 / t)
    return value


@kernel
def divergence_row(r, p, kind, alpha):
    """D_f(r || p) with the normalised generator; p_i = 0 < r_i terms cost r_i f'(inf)."""
    fpinf = f_tilde_prime_at_inf(kind, alpha)
    total = 0.0
    for i in range(p.size):
        pi = np.float64(p[i])
        ri = np.float64(r[i])
        if pi > 0.0 and ri / pi < np.inf:
            total += weighted_f_tilde(kind, alpha, pi, ri / pi)
        elif ri > 0.0:
            total += ri * fpinf
    return total
