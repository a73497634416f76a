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
def split_sides(p, q, key, weight, pivot, spill_key, spill_weight):
    """Write the low side to [0, n_low) and the high side to [size - n_high, size) of ``key``
    and ``weight`` (float64 arrays of a length size >= n); return (n_low, n_high, q0, base,
    capacity_low, capacity_high, n_spill, p_left, p_right, moved_right).

    Low tokens get key = rho = q/p, high tokens key = -rho; ``weight`` holds p. ``base`` is
    sum_i min(p_i, q_i) = 1 - TV(p, q), the lossless acceptance, summed with an error-free
    transformation (TwoSum). The capacities are the most mass each side can move,
    sum p (1 - rho) and sum p (rho - 1).

    The low side comes out partitioned around ``pivot`` as ``select``'s partition would leave
    it: keys <= pivot first, in row order, then the n_spill others in reverse row order, with
    the p-mass of each part and the moved mass p (1 - rho) of the second. The spilled tokens
    travel with the high side (both key and weight are written at the top, key >= 0 telling
    them apart) and are moved down after the pass, through ``spill_key`` and
    ``spill_weight`` (length >= n_spill; with pivot = inf nothing spills and length 1 will do).

    One pass without data-dependent branches: each token is written to both ends and kept
    by the one whose count it advances.
    """
    n = p.size
    top = key.size - 1
    n_left = 0
    n_top = 0
    n_spill = 0
    q0 = 0.0
    base = 0.0
    base_c = 0.0
    capacity_low = 0.0
    capacity_high = 0.0
    p_left = 0.0
    p_right = 0.0
    moved_right = 0.0
    for i in range(n):
        pi = np.float64(p[i])
        qi = np.float64(q[i])
        m = min(pi, qi)
        s = base + m
        t = s - base
        base_c += (base - (s - t)) + (m - t)
        base = s
        rho = qi / pi
        is_low = qi < pi
        x = rho if is_low else -rho
        # The two free slots coincide at the last unclassified position; both carry the same key.
        key[top - n_top] = x
        weight[top - n_top] = pi
        key[n_left] = x
        weight[n_left] = pi
        spills = is_low & (rho > pivot)
        is_high = (qi > pi) & (pi > 0.0) & (rho < np.inf)
        capacity_low += pi * (1.0 - rho) if is_low else 0.0
        capacity_high += pi * (rho - 1.0) if is_high else 0.0
        p_left += pi if is_low and not spills else 0.0
        p_right += pi if spills else 0.0
        moved_right += pi * (1.0 - rho) if spills else 0.0
        n_left += is_low & ~spills
        n_spill += spills
        n_top += spills | is_high
        q0 += qi if qi > pi and not is_high else 0.0
    if n_spill > 0:
        # Walk the top in row order: high tokens close up at the top, spilled ones are set aside.
        n_high = 0
        j = 0
        for r in range(top, top - n_top, -1):
            x = key[r]
            y = weight[r]
            spill_key[j] = x
            spill_weight[j] = y
            key[top - n_high] = x  # at or above r: already read
            weight[top - n_high] = y
            high = x < 0.0
            n_high += high
            j += 1 - high
        for j in range(n_spill):
            key[n_left + n_spill - 1 - j] = spill_key[j]
            weight[n_left + n_spill - 1 - j] = spill_weight[j]
    return (n_left + n_spill, n_top - n_spill, q0, base + base_c, capacity_low, capacity_high,
            n_spill, p_left, p_right, moved_right)


@kernel
def heavy_tokens(p, q, threshold, out):
    """Write the indices of tokens with p or q above ``threshold`` to out (length >= n); return
    their count. Branch-free: every index is written, and kept when the count advances."""
    count = 0
    for i in range(p.size):
        out[count] = i
        count += (p[i] > threshold) | (q[i] > threshold)
    return count


@kernel
def build_index(p, q):
    """Return (low_p, low_rho, low_cum, high_p, high_rho, high_cum, q0, base), base as in
    ``split_sides``."""
    key = np.empty(p.size, np.float64)
    weight = np.empty(p.size, np.float64)
    one = np.empty(1, np.float64)
    n_low, n_high, q0, base = split_sides(p, q, key, weight, np.inf, one, one)[:4]
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
