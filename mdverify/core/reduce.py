"""Rows reduced to the tokens a bracket of budgets leaves undecided.

Between two solutions of a row, at budgets eps_less < eps_more, the thresholds move
monotonically: a from a_less down to a_more, b from b_less up to b_more (SPEC C1). A token
whose ratio lies outside [a_more, a_less] on the low side, or outside [b_less, b_more] on the
high side, is clipped at every budget in between or released at every one. Such tokens are
merged, per class, into one token of the same p and q mass:

- clipped tokens enter the solution only through their masses (r = a p, resp. b p), so the
  merged token is exact, and its ratio stays beyond the threshold (a mean of ratios that all are);
- released tokens have r = q and enter D only through the constant sum p f~(q/p), which the
  merged token reproduces up to a Jensen gap, the same at every budget of the bracket (D of
  the original solution at one end minus D of ``clipped_divergences`` there).

The reduced row keeps the undecided tokens as they are, plus at most six merged ones (two
per side, the neutral tokens p = q, and the drafter's mass where p = 0). Its frontier
between the two budgets is the original's, with D lower by the gap, so a search over prices
within the bracket runs on it at the cost of its size. Reduced rows are stored end to end.
"""

import numpy as np
from numba import prange

from mdverify.core.jit import kernel
from mdverify.core.mentor import construct, price_row_select
from mdverify.core.terms import CHUNK, divergence_row

#: Merged tokens a reduced row may add to its undecided ones.
MERGED = 6
_ONE_BITS = np.float64(1.0).view(np.int64)


@kernel
def _undecided(p, q, a_more, a_less, b_less, b_more):
    """Whether a token (p, q) with p > 0 may change between clipped and released in the bracket
    (by its ratio, as the index orders tokens: a p or b p may underflow or overflow)."""
    rho = q / p
    in_low = (q < p) & (rho >= a_more) & (rho <= a_less)
    in_high = (q > p) & (((rho >= b_less) & (rho <= b_more)) | (rho == np.inf))  # overflowing ratios kept
    return in_low | in_high  # without branches (selects), so that the passes calling it vectorise


@kernel
def _extremes(p, q, extremes):
    """extremes = (the least ratio q/p < 1, the greatest > 1) of (p, q), 1 where a side has none."""
    lowest, highest = 1.0, 1.0
    for j in range(p.size):
        if q[j] < p[j]:
            lowest = min(lowest, q[j] / p[j])
        elif q[j] > p[j] > 0.0:
            highest = max(highest, q[j] / p[j])
    extremes[0], extremes[1] = lowest, highest


@kernel(parallel=True)
def count_undecided(P, Q, starts, sizes, bounds, out, extremes):
    """out[i] = the number of undecided tokens of row i (P[starts[i]:][:sizes[i]], likewise Q),
    extremes[i] its ``_extremes``; bounds[i] = (a_more, a_less, b_less, b_more).

    ``_undecided`` and ``_extremes`` in one pass without branches: it reads every token of the
    original rows.
    """
    for i in prange(starts.size):
        a_more, a_less, b_less, b_more = bounds[i, 0], bounds[i, 1], bounds[i, 2], bounds[i, 3]
        p, q = P[starts[i]:starts[i] + sizes[i]], Q[starts[i]:starts[i] + sizes[i]]  # indexed from 0: vectorised
        count = 0
        # The extremes compared as bits, which order ratios >= 0 as their values: vectorised.
        lowest = highest = _ONE_BITS
        for j in range(p.size):
            pj, qj = np.float64(p[j]), np.float64(q[j])
            bits = np.float64(qj / pj).view(np.int64)
            count += (pj > 0.0) & _undecided(pj, qj, a_more, a_less, b_less, b_more)
            lowest = min(lowest, bits if qj < pj else _ONE_BITS)
            highest = max(highest, bits if (qj > pj) & (pj > 0.0) else _ONE_BITS)
        out[i] = count
        extremes[i, 0], extremes[i, 1] = np.int64(lowest).view(np.float64), np.int64(highest).view(np.float64)


@kernel(reassociate=True)
def _classify(p, q, a_more, a_less, b_less, b_more, undecided, merged_p, merged_q):
    """undecided[j] = whether token j of (p, q) is undecided (``_undecided``, p > 0); the masses
    of the others added to merged_p[g] and merged_q[g] by group g: clipped low, released low,
    neutral, released high, clipped high, p = 0. Branch-free, the masses added in an order the
    compiler chooses: vectorised."""
    p0 = p1 = p2 = p3 = p4 = q0 = q1 = q2 = q3 = q4 = q5 = 0.0
    for j in range(p.size):
        pj, qj = np.float64(p[j]), np.float64(q[j])
        rho = qj / pj
        kept = (pj > 0.0) & _undecided(pj, qj, a_more, a_less, b_less, b_more)
        undecided[j] = kept
        live = (pj > 0.0) & ~kept
        low = live & (qj < pj)
        high = live & (qj > pj)
        clipped_low = low & (rho < a_more)
        released_low = low & ~(rho < a_more)
        neutral = live & (qj == pj)
        released_high = high & ~(rho > b_more)
        clipped_high = high & (rho > b_more)
        p0 += pj if clipped_low else 0.0
        q0 += qj if clipped_low else 0.0
        p1 += pj if released_low else 0.0
        q1 += qj if released_low else 0.0
        p2 += pj if neutral else 0.0
        q2 += qj if neutral else 0.0
        p3 += pj if released_high else 0.0
        q3 += qj if released_high else 0.0
        p4 += pj if clipped_high else 0.0
        q4 += qj if clipped_high else 0.0
        q5 += qj if pj == 0.0 else 0.0
    merged_p[0] += p0
    merged_p[1] += p1
    merged_p[2] += p2
    merged_p[3] += p3
    merged_p[4] += p4
    merged_q[0] += q0
    merged_q[1] += q1
    merged_q[2] += q2
    merged_q[3] += q3
    merged_q[4] += q4
    merged_q[5] += q5


@kernel(parallel=True)
def reduce_rows(P, Q, starts, sizes, bounds, out_starts, P_out, Q_out, out_sizes, out_extremes):
    """Write row i's reduced row into P_out and Q_out from out_starts[i], out_sizes[i] tokens,
    and its ``_extremes`` into out_extremes[i].

    Row i needs ``count_undecided`` + MERGED places from out_starts[i]. Each chunk of CHUNK
    tokens is classified by a vectorised loop, then its few undecided tokens copied.
    """
    for i in prange(starts.size):
        a_more, a_less, b_less, b_more = bounds[i, 0], bounds[i, 1], bounds[i, 2], bounds[i, 3]
        p, q = P[starts[i]:starts[i] + sizes[i]], Q[starts[i]:starts[i] + sizes[i]]
        p_out, q_out = P_out[out_starts[i]:], Q_out[out_starts[i]:]
        merged_p, merged_q = np.zeros(MERGED), np.zeros(MERGED)
        undecided = np.empty(CHUNK, np.bool_)
        at = 0
        for first in range(0, p.size, CHUNK):
            chunk_p, chunk_q = p[first:first + CHUNK], q[first:first + CHUNK]
            _classify(chunk_p, chunk_q, a_more, a_less, b_less, b_more, undecided, merged_p, merged_q)
            for j in range(chunk_p.size):
                if undecided[j]:
                    p_out[at] = chunk_p[j]
                    q_out[at] = chunk_q[j]
                    at += 1
        for group in range(MERGED):
            if merged_p[group] > 0.0 or merged_q[group] > 0.0:
                p_out[at] = merged_p[group]
                q_out[at] = merged_q[group]
                at += 1
        out_sizes[i] = at
        _extremes(p_out[:at], q_out[:at], out_extremes[i])


@kernel
def clipped_row(p, q, a, b, moved, r):
    """r = clip(q, a p, b p), the drafter's mass on p = 0 (and on ratios that overflow) filled
    with what the high side does not take of the moved mass; b = inf where that fill is
    positive (``core.mentor.FIELDS``)."""
    q0 = 0.0
    taken = 0.0
    for j in range(p.size):
        if not q[j] / p[j] < np.inf:
            q0 += q[j]
        elif q[j] > p[j]:
            taken += min(q[j], b * p[j]) - p[j]
    fill = max(moved - taken, 0.0) if b == np.inf else 0.0
    construct(p, q, a, b, fill, q0, r)


@kernel(parallel=True)
def price_reduced(P, Q, starts, sizes, prices, kind, alpha, R, out, work):
    """``price_row_select`` of every reduced row i (P[starts[i]:][:sizes[i]], likewise Q, R) in
    parallel, chunked as ``mentor_rows``; ``work`` has shape (chunks, 4, max(sizes))."""
    rows = starts.size
    chunks = work.shape[0]
    for c in prange(chunks):
        for i in range(c * rows // chunks, (c + 1) * rows // chunks):
            s, n = starts[i], sizes[i]
            price_row_select(P[s:s + n], Q[s:s + n], prices[i], kind, alpha, R[s:s + n], out[i], work[c])


@kernel(parallel=True)
def clipped_divergences(P, Q, starts, sizes, a, b, moved, kind, alpha, R, out):
    """out[i] = D of ``clipped_row`` of reduced row i at (a[i], b[i], moved[i]), r written to R:
    with D of the original row at the same solution, the row's gap."""
    for i in prange(starts.size):
        s, n = starts[i], sizes[i]
        clipped_row(P[s:s + n], Q[s:s + n], a[i], b[i], moved[i], R[s:s + n])
        out[i] = divergence_row(R[s:s + n], P[s:s + n], kind, alpha, np.inf)
