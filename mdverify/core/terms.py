"""The per-token term p f~(t) of D_f, finite wherever its value is, and D_f of a row as their sum.

Where p is near the smallest normal floats and the ratio t = r/p near the largest, f~(t) can
overflow although p f~(t) does not: KL's term r log(r/p) is 351.6 at r = 0.5, p = 1e-306,
while t log t overflows from t = 2.5e305. There the term is computed as r f~*(1/t), with the
conjugate f~*(u) = u f~(1/u) derived by sympy (``_fgen.f_tilde_star``). Everywhere else it is
the plain product, bit for bit.
"""

import numpy as np

from mdverify.core._fgen import f_tilde, f_tilde_at_zero, f_tilde_prime_at_inf, f_tilde_star, weighted_f_tilde_terms
from mdverify.core.index import add_compensated
from mdverify.core.jit import kernel

#: Terms computed at a time by the vectorised loop of ``sum_weighted_f_tilde``.
CHUNK = 512


@kernel
def weighted_f_tilde(kind, alpha, weight, t):
    """weight * f~(t) for weight > 0 and t in [0, inf)."""
    value = weight * f_tilde(kind, alpha, t)
    if not value < np.inf and 1.0 < t < np.inf:  # f~(t) overflowed; the product may not
        value = (weight * t) * f_tilde_star(kind, alpha, 1.0 / t)
    return value


@kernel(reassociate=True, borrow=True)
def sum_of_terms(terms, count):
    """terms[0] + ... + terms[count - 1], added in an order the compiler chooses (vectorised)."""
    total = 0.0
    for j in range(count):
        total += terms[j]
    return total


@kernel(borrow=True)
def sum_weighted_f_tilde(kind, alpha, key, weight, s, start, end, initial, limit, terms):
    """``initial`` plus the sum of weight[i] f~(s key[i]) over i in [start, end), for weight >= 0
    and s key >= 0; or, once that with only a first part of the terms exceeds ``limit`` (inf
    for none), that: the terms are not negative, so the whole sum exceeds it too.

    Chunks of terms are computed by the generated loop without branches or calls, which the
    compiler vectorises, into ``terms`` (float64 scratch of length >= min(CHUNK, end - start)),
    and added in an order it chooses (reassociated: the rounding of the sum changes, nothing
    else); where that is not finite, term by term (``weighted_f_tilde``) up to the first
    infinite term.
    """
    chunk = max(1, min(CHUNK, terms.size))
    total = initial
    for first in range(start, end, chunk):
        count = min(chunk, end - first)
        weighted_f_tilde_terms(kind, alpha, key, weight, s, first, count, terms)
        total += sum_of_terms(terms, count)
        if limit < total < np.inf:
            return total
    if total < np.inf:
        return total
    total = initial
    for i in range(start, end):
        total += weighted_f_tilde(kind, alpha, np.float64(weight[i]), s * key[i])
        if total == np.inf:  # a term is inf (f~(0) = inf), not only its f~: so is the sum
            break
    return total


@kernel(inline=True)
def needs_f_tilde(t, r):
    """Whether a token of ratio t = r/p carries a term p f~(t) of D_f(r || p): 0 < r and t finite
    (``divergence_terms`` lays out exactly these)."""
    return (t < np.inf) & (r > 0.0)


@kernel(borrow=True)
def divergence_terms(r, p, terms):
    """The terms of D_f(r || p), laid out for ``divergence_of_terms``: in row order, the ratios
    r_i / p_i, the p_i and the r_i of the tokens whose term needs f~ (0 < r_i, the ratio finite)
    in terms[0], terms[1] and terms[2] (float64, shape (>= 3, >= n)); returns (count, zero,
    spilled): their number, the p-mass where r_i = 0 (each unit worth f~(0)), a compensated
    sum, and the r-mass where the ratio is infinite (p_i = 0, or r_i / p_i overflows; each unit
    worth f'(inf))."""
    count = 0
    zero = zero_c = spilled = 0.0
    for i in range(p.size):
        pi = np.float64(p[i])
        ri = np.float64(r[i])
        t = ri / pi
        finite = t < np.inf
        terms[0, count] = t
        terms[1, count] = pi
        terms[2, count] = ri
        count += needs_f_tilde(t, ri)
        zero, zero_c = add_compensated(zero, zero_c, pi if ri == 0.0 else 0.0)
        spilled += 0.0 if finite else ri
    return count, zero + zero_c, spilled


@kernel
def divergence_of_terms(kind, alpha, terms, count, zero, spilled, limit):
    """D_f(r || p) from ``divergence_terms``, or a value over ``limit`` (inf for none) as soon as
    D is seen to exceed it (``sum_weighted_f_tilde``). Every caller sums D this way, so equal
    rows give equal sums, to the last bit."""
    value = spilled * f_tilde_prime_at_inf(kind, alpha) if spilled > 0.0 else 0.0
    if zero > 0.0:
        value += zero * f_tilde_at_zero(kind, alpha)
    if value == np.inf or value > limit:
        return value
    chunk = np.empty(CHUNK, np.float64)
    return sum_weighted_f_tilde(kind, alpha, terms[0], terms[1], 1.0, 0, count, value, limit, chunk)


@kernel(borrow=True)
def _ratios_carrying_terms(r, p, ratios):
    """Write the ratios r_i / p_i of a chunk to ``ratios`` (float64); whether every token of it
    carries a term of D (``needs_f_tilde``), counted without a branch (vectorised)."""
    missing = 0
    for j in range(p.size):
        ri = np.float64(r[j])
        t = ri / np.float64(p[j])
        ratios[j] = t
        missing += not needs_f_tilde(t, ri)
    return missing == 0


@kernel(borrow=True)
def _divergence_in_one_pass(r, p, kind, alpha, limit, scratch):
    """(complete, D) of ``divergence_row`` in one pass over the row, chunk by chunk while in
    cache, without laying out its terms: where every token carries a term, the layout of
    ``divergence_terms`` is the row itself, zero = spilled = 0, and the chunks and their sums
    are those of ``divergence_of_terms``, bit for bit. ``complete`` is False, and D
    meaningless, where a token does not carry one or a chunk's sum is not finite (the terms
    are then laid out and summed term by term). ``scratch`` is float64 of shape (2, CHUNK)."""
    ratios, terms = scratch[0], scratch[1]
    total = 0.0
    for first in range(0, p.size, CHUNK):
        count = min(CHUNK, p.size - first)
        if not _ratios_carrying_terms(r[first:first + count], p[first:first + count], ratios):
            return False, total
        weighted_f_tilde_terms(kind, alpha, ratios, p[first:first + count], 1.0, 0, count, terms)
        total += sum_of_terms(terms, count)
        if not total < np.inf:
            return False, total
        if total > limit:
            return True, total
    return True, total


@kernel
def divergence_row(r, p, kind, alpha, limit):
    """D_f(r || p) with the normalised generator; p_i = 0 < r_i terms cost r_i f'(inf). Or a
    value over ``limit`` (inf for none) once D is seen to exceed it (``divergence_of_terms``).
    A row whose every token carries a term is summed in one pass (``_divergence_in_one_pass``)."""
    complete, value = _divergence_in_one_pass(r, p, kind, alpha, limit, np.empty((2, CHUNK), np.float64))
    if complete:
        return value
    terms = np.empty((3, p.size), np.float64)
    count, zero, spilled = divergence_terms(r, p, terms)
    return divergence_of_terms(kind, alpha, terms, count, zero, spilled, limit)
