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
def _prefix_sums(x):
    out = np.zeros(x.size + 1, np.float64)
    for k in range(x.size):
        out[k + 1] = out[k] + x[k]
    return out


@kernel
def add_compensated(total, error, x):
    """(total + x, error + the rounding error of that sum): TwoSum, an error-free transformation;
    total + error is the compensated sum."""
    s = total + x
    t = s - total
    return s, error + (total - (s - t)) + (x - t)


@kernel
def split_sides(p, q, key, weight):
    """Write the low side to [0, n_low) and the high side to [size - n_high, size) of ``key``
    and ``weight`` (float64 arrays of a length size >= n), each in row order; return (n_low,
    n_high, q0, base, capacity_low, capacity_high).

    Low tokens get key = rho = q/p, high tokens key = -rho; ``weight`` holds p. ``base`` is
    sum_i min(p_i, q_i) = 1 - TV(p, q), the lossless acceptance, summed with an error-free
    transformation (TwoSum). The capacities are the most mass each side can move,
    sum p (1 - rho) and sum p (rho - 1).

    One pass without data-dependent branches: each token is written to both ends and kept
    by the one whose count it advances.
    """
    n = p.size
    top = key.size - 1
    n_low = 0
    n_high = 0
    q0 = 0.0
    base = 0.0
    base_c = 0.0
    capacity_low = 0.0
    capacity_high = 0.0
    for i in range(n):
        pi = np.float64(p[i])
        qi = np.float64(q[i])
        m = min(pi, qi)  # add_compensated, written out: as a call it costs this loop 40%
        s = base + m
        t = s - base
        base_c += (base - (s - t)) + (m - t)
        base = s
        rho = qi / pi
        is_low = qi < pi
        x = rho if is_low else -rho
        # The two free slots coincide at the last unclassified position; both carry the same key.
        key[top - n_high] = x
        weight[top - n_high] = pi
        key[n_low] = x
        weight[n_low] = pi
        is_high = (qi > pi) & (pi > 0.0) & (rho < np.inf)
        capacity_low += pi * (1.0 - rho) if is_low else 0.0
        capacity_high += pi * (rho - 1.0) if is_high else 0.0
        n_low += is_low
        n_high += is_high
        q0 += qi if qi > pi and not is_high else 0.0
    return n_low, n_high, q0, base + base_c, capacity_low, capacity_high


@kernel
def build_index(p, q):
    """Return (low_p, low_rho, low_cum, high_p, high_rho, high_cum, q0, base), base as in
    ``split_sides``."""
    key = np.empty(p.size, np.float64)
    weight = np.empty(p.size, np.float64)
    n_low, n_high, q0, base = split_sides(p, q, key, weight)[:4]
    # Stable sorts: ties keep their split order, so the index is a function of (p, q).
    order = np.argsort(key[:n_low], kind="mergesort")
    low_p = weight[:n_low][order]
    low_rho = key[:n_low][order]
    order = np.argsort(key[p.size - n_high:], kind="mergesort")  # key = -rho: rho descending
    high_p = weight[p.size - n_high:][order]
    high_rho = -key[p.size - n_high:][order]
    low_cum = _prefix_sums(low_p)
    high_cum = _prefix_sums(high_p)
    return low_p, low_rho, low_cum, high_p, high_rho, high_cum, q0, base
