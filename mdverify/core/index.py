"""The sorted ratio index of SPEC C5: divergence-independent, O(n) space, O(n log n) build.

Tokens split by their ratio rho = q/p:

- low side L (rho < 1), sorted by rho ascending, with prefix sums of p;
- finite high side H (1 < rho < inf), sorted by rho descending, with prefix sums of p;
- the truncated-target set H0 (p = 0 < q), kept only as its total drafter mass q0;
- neutral (p = q) and inert (p = q = 0) tokens, which keep r = p.

With the first k low tokens clipped at a p_i, the clipped mass is ``low_cum[k]``; the walk
over breakpoints needs nothing else. A p so small that q/p overflows is treated as 0.
"""

import numpy as np

from mdverify.core.jit import kernel


@kernel
def _gather(p, q, which, count):
    """p and q / p of the tokens ``which[:count]``, as float64."""
    out_p = np.empty(count, np.float64)
    out_rho = np.empty(count, np.float64)
    for k in range(count):
        i = which[k]
        out_p[k] = np.float64(p[i])
        out_rho[k] = np.float64(q[i]) / out_p[k]
    return out_p, out_rho


@kernel
def _prefix_sums(x):
    out = np.zeros(x.size + 1, np.float64)
    for k in range(x.size):
        out[k + 1] = out[k] + x[k]
    return out


@kernel
def build_index(p, q):
    """Return (low_p, low_rho, low_cum, high_p, high_rho, high_cum, q0, base).

    ``base`` is sum_i min(p_i, q_i) = 1 - TV(p, q), the lossless acceptance, summed with
    Neumaier compensation.
    """
    n = p.size
    low = np.empty(n, np.int64)
    high = np.empty(n, np.int64)
    n_low = 0
    n_high = 0
    q0 = 0.0
    base = 0.0
    base_c = 0.0
    for i in range(n):
        pi = np.float64(p[i])
        qi = np.float64(q[i])
        m = min(pi, qi)
        s = base + m
        if abs(base) >= abs(m):
            base_c += (base - s) + m
        else:
            base_c += (m - s) + base
        base = s
        if qi < pi:
            low[n_low] = i
            n_low += 1
        elif qi > pi:
            if pi > 0.0 and qi / pi < np.inf:
                high[n_high] = i
                n_high += 1
            else:
                q0 += qi
    low_p, low_rho = _gather(p, q, low, n_low)
    high_p, high_rho = _gather(p, q, high, n_high)
    # Stable sorts: ties keep token order, so the index is a deterministic function of (p, q).
    order = np.argsort(low_rho, kind="mergesort")
    low_p = low_p[order]
    low_rho = low_rho[order]
    order = np.argsort(-high_rho, kind="mergesort")
    high_p = high_p[order]
    high_rho = high_rho[order]
    low_cum = _prefix_sums(low_p)
    high_cum = _prefix_sums(high_p)
    return low_p, low_rho, low_cum, high_p, high_rho, high_cum, q0, base + base_c
