"""Mentored distributions: one row, a batch of rows (prange), and the divergence of rows.

These are the kernels behind ``md.mentor``; they are plain numba functions that other
``@njit`` code can call directly (see the README). Inputs are trusted: the Python wrappers
in ``mdverify.api`` validate everything before it reaches a kernel.
"""

import numpy as np
from numba import prange

from mdverify.core._fgen import f_prime_at_one, f_tilde_prime, f_tilde_prime_at_inf
from mdverify.core.checks import row_valid, sum_tolerance
from mdverify.core.index import build_index
from mdverify.core.jit import kernel
from mdverify.core.terms import divergence_row
from mdverify.core.select import select_price_walk, select_walk
from mdverify.core.walk import A, B, D, FILL, K_HIGH, M, STATE_SIZE, duals, initial_state, walk, walk_row, walk_to_price

#: Field order of the vectors returned by ``mentor_row`` and written by ``mentor_rows``.
FIELDS = ("acceptance", "moved_mass", "a", "b", "lam", "mu", "divergence_value")


@kernel
def construct(p, q, a, b, fill, q0, r):
    """r_i = clip(q_i, a p_i, b p_i); tokens with p_i = 0 < q_i get fill * q_i / q0. O(n).

    A float32 r is rounded towards p (``_rounded_toward_p``), not to nearest: each term
    p f~(r / p) of D, convex with its least value at r = p, is then no greater than that of
    the float64 r, so rounding cannot take D over a budget the float64 r keeps. Returns what
    rounding added to sum (r - p)_+, and so to sum min(r, q) (0 for float64 r)."""
    share = fill / q0 if q0 > 0.0 else 0.0
    # q0 sums q over the tokens with an infinite ratio: without them no ratio is computed (a
    # division per token would be a third of the loop's time).
    finite = q0 == 0.0
    # A lifted token keeps a ratio > 0 where a p_i underflows in r's dtype: r_i = 0 < p_i would
    # cost f~(0), infinite for some f. r's smallest subnormal (<= p_i) adds a negligible mass.
    info = np.finfo(r.dtype)
    floor = info.tiny * info.eps if a > 0.0 else 0.0
    if info.bits == 32:
        return _rounded_toward_p(p, q, a, b, share, finite, floor, r)
    for i in range(p.size):
        r[i] = _clip(np.float64(p[i]), np.float64(q[i]), a, b, share, finite, floor)
    return 0.0


@kernel(inline=True)
def _clip(pi, qi, a, b, share, finite, floor):
    """``construct``'s r_i, in float64. Every case computed, one selected: a loop without
    branches, which the compiler vectorises."""
    raised = min(qi, b * pi) if finite or qi / pi < np.inf else share * qi  # share for p = 0 (or q/p overflowing)
    return max(max(qi, a * pi), floor) if qi < pi else (raised if qi > pi else pi)


@kernel
def _rounded_toward_p(p, q, a, b, share, finite, floor, r):
    """``construct`` into float32 r, each r_i rounded to the neighbouring float32 on the side of
    p_i where rounding to nearest took it away from p_i (p_i is a float32: the result lies
    between r_i and p_i). Where r_i = q_i or p_i (float32 already) nothing moves; a lifted
    token (q_i < a p_i <= r_i) stays above q_i, a clipped one (p_i <= r_i <= q_i) below it.
    Returns the sum of the clipped ones' change, where r_i = min(r_i, q_i) = p_i + (r_i - p_i)_+."""
    bits = r.view(np.int32)  # a positive float32's bits, plus or minus 1: its neighbours
    for i in range(p.size):
        pi = np.float64(p[i])
        value = _clip(pi, np.float64(q[i]), a, b, share, finite, floor)
        r[i] = value
        rounded = np.float64(r[i])
        bits[i] += np.int32((rounded < value) & (value < pi)) - np.int32((rounded > value) & (value > pi))
    return _rounding_change(p, q, a, b, share, finite, floor, r)


@kernel(reassociate=True, borrow=True)
def _rounding_change(p, q, a, b, share, finite, floor, r):
    """sum (r_i - clip_i) over the tokens clipped above p (``_rounded_toward_p``), added in an
    order the compiler chooses (vectorised): summed in that loop, each r_i read back after its
    bits changed, a row of 131072 tokens took over 0.4 ms."""
    change = 0.0
    for i in range(p.size):
        pi = np.float64(p[i])
        value = _clip(pi, np.float64(q[i]), a, b, share, finite, floor)
        change += np.float64(r[i]) - value if value > pi else 0.0
    return change


@kernel
def finish(q0, base, kind, alpha, eps, state, binding, p, q, r, out):
    """Write r and the result fields (order of ``FIELDS``) for a finished solve.

    ``q0`` is the drafter mass on p = 0 tokens and ``base`` = sum_i min(p_i, q_i). An empty r
    asks for the fields alone (``prices.allocate``): writing r is a pass over the row.
    """
    rounding = construct(p, q, state[A], state[B], state[FILL], q0, r) if r.size > 0 else 0.0
    lam, mu = duals(kind, alpha, eps, state, binding)
    out[0] = base + state[M] + rounding  # of r as written (float32 r: rounded towards p)
    out[1] = state[M] + rounding
    out[2] = state[A]
    out[3] = np.inf if state[FILL] > 0.0 else state[B]
    out[4] = lam
    out[5] = mu
    out[6] = state[D]


@kernel
def mentor_row(p, q, eps, kind, alpha, r, out):
    """The optimal mentored distribution of one row, by the sorted ratio index.

    Parameters
    ----------
    p, q : 1-d float32 or float64 arrays, distributions of the target and the drafter.
    eps : float, the budget (>= 0, may be inf).
    kind, alpha : the divergence (``Divergence.kind`` and ``Divergence.param``).
    r : 1-d output array (any float dtype) receiving the mentored distribution, or empty for
        the fields alone.
    out : float64 array of length 7 receiving the fields of ``FIELDS``.
    """
    state, binding, q0, base = walk_row(p, q, eps, kind, alpha)
    finish(q0, base, kind, alpha, eps, state, binding, p, q, r, out)


@kernel
def mentor_row_select(p, q, eps, kind, alpha, r, out, work, check=False):
    """``mentor_row`` by the sort-free solver of ``core.select`` (expected O(n)).

    The same arguments, plus ``work``: a float64 workspace of shape (4, n) or wider, reused
    across calls (a fresh allocation per call costs more than the solve at large n); and
    ``check``: check the row as ``checks.row_valid`` does (a long row in a pass the solver
    makes anyway) and leave one that fails unsolved, its fields nan.
    """
    valid, state, binding, q0, base = select_walk(p, q, eps, kind, alpha, work, check)
    if not valid:
        out[:] = np.nan
        return
    if not state[D] <= eps:
        # Rounding at a degenerate end: where both sides' capacities agree to the last bits, the
        # search's sums can place the end at a threshold whose D is over the budget (inf where
        # f~(0) is). The walk only ever steps to points it has evaluated within the budget.
        mentor_row(p, q, eps, kind, alpha, r, out)
        return
    finish(q0, base, kind, alpha, eps, state, binding, p, q, r, out)


#: Solver codes of ``mentor_rows`` and ``price_rows``. CHECKED added to one (SELECT | CHECKED)
#: checks each row first, as ``checks.rows_valid`` does, and leaves a row that fails unsolved,
#: its fields nan: so checked, a row is read while the solve's first pass finds it in cache
#: (the sort-free solver checks a long row in its first pass), and rows are checked in parallel.
SORTED, SELECT, CHECKED = 0, 1, 2


@kernel
def _to_solve(method, p, q, out):
    """Whether a row is to be solved by ``mentor_row`` or ``price_row``: ``method`` asks for no
    check, or the row passes it (else its fields are set to nan)."""
    if method & CHECKED and not row_valid(p, q, sum_tolerance(p)):
        out[:] = np.nan
        return False
    return True


@kernel
def mentor_row_by(method, p, q, eps, kind, alpha, r, out, work):
    """``mentor_row_select`` when ``method`` has SELECT, else ``mentor_row`` (which ignores
    ``work``); either checking the row first where it has CHECKED."""
    if method & SELECT:
        mentor_row_select(p, q, eps, kind, alpha, r, out, work, method & CHECKED != 0)
    elif _to_solve(method, p, q, out):
        mentor_row(p, q, eps, kind, alpha, r, out)


@kernel(parallel=True)
def mentor_rows(P, Q, eps, kind, alpha, method, R, out, work):
    """The optimum of every row of 2-d P, Q (shape (B, n)) in parallel; out has shape (B, 7), R
    (B, n), or (B, 0) for the fields alone.

    ``method`` is SORTED (``mentor_row``) or SELECT (``mentor_row_select``), plus CHECKED to
    check each row first. ``work`` has shape (chunks, 4, n): the rows are cut into that many
    contiguous chunks, one workspace each.
    Each row is solved from its own inputs alone, so results do not depend on the thread
    count or the number of chunks.
    """
    rows = P.shape[0]
    chunks = work.shape[0]
    if chunks == 1:  # one chunk: no parallel region to start (about 1 us, a short row's 4%)
        _mentor_chunk(P, Q, eps, kind, alpha, method, R, out, work[0], 0, rows)
        return
    for c in prange(chunks):
        _mentor_chunk(P, Q, eps, kind, alpha, method, R, out, work[c], c * rows // chunks, (c + 1) * rows // chunks)


@kernel
def _mentor_chunk(P, Q, eps, kind, alpha, method, R, out, work, first, end):
    """``mentor_row_by`` for rows [first, end) with one workspace."""
    for i in range(first, end):
        mentor_row_by(method, P[i], Q[i], eps[i], kind, alpha, R[i], out[i], work)


@kernel
def price_row(p, q, price, kind, alpha, r, out):
    """The maximiser of A(r) - price D_f(r || p) for one row (SPEC section 10), by the sorted index.

    Writes r and the fields of ``FIELDS``: lam = price where the price stops the moved mass
    between 0 and m_max (the frontier point of slope price), 0 where r reaches its limit
    m_max; divergence_value is the budget eps* = D_f(r || p) that this price buys.
    """
    if price == np.inf:  # an infinite price buys nothing: the eps = 0 solve, with its multipliers
        mentor_row(p, q, 0.0, kind, alpha, r, out)
        return
    index = build_index(p, q)
    state = initial_state(index[0].size, index[3].size)
    inside, _, _ = walk_to_price(index[0], index[1], index[2], index[3], index[4], index[5], index[6], kind, alpha,
                                 price, state)
    finish(index[6], index[7], kind, alpha, np.inf, state, inside, p, q, r, out)
    if inside:  # the exact multiplier of the priced problem, not its bisection's rounding
        out[4] = price
        out[5] = -(f_tilde_prime(kind, alpha, state[A]) + f_prime_at_one(kind, alpha)) * price


@kernel
def price_row_select(p, q, price, kind, alpha, r, out, work, check=False):
    """``price_row`` by the sort-free search (``core.select.select_price_walk``, expected O(n));
    ``check`` as in ``mentor_row_select``."""
    if price == np.inf:
        mentor_row_select(p, q, 0.0, kind, alpha, r, out, work, check)
        return
    valid, state, inside, q0, base = select_price_walk(p, q, price, kind, alpha, work, check)
    if not valid:
        out[:] = np.nan
        return
    if not state[D] < np.inf:  # a degenerate end, as in ``mentor_row_select``: the walk never steps there
        price_row(p, q, price, kind, alpha, r, out)
        return
    finish(q0, base, kind, alpha, np.inf, state, inside, p, q, r, out)
    if inside:
        out[4] = price
        out[5] = -(f_tilde_prime(kind, alpha, state[A]) + f_prime_at_one(kind, alpha)) * price


@kernel
def price_row_by(method, p, q, price, kind, alpha, r, out, work):
    """``price_row_select`` when ``method`` has SELECT, else ``price_row`` (which ignores
    ``work``); either checking the row first where it has CHECKED."""
    if method & SELECT:
        price_row_select(p, q, price, kind, alpha, r, out, work, method & CHECKED != 0)
    elif _to_solve(method, p, q, out):
        price_row(p, q, price, kind, alpha, r, out)


@kernel(parallel=True)
def price_rows(P, Q, prices, kind, alpha, method, R, out, work):
    """``price_row_by`` for every row of 2-d P, Q in parallel, in chunks as ``mentor_rows``
    (each row from its own inputs alone)."""
    rows = P.shape[0]
    chunks = work.shape[0]
    if chunks == 1:  # as in mentor_rows
        _price_chunk(P, Q, prices, kind, alpha, method, R, out, work[0], 0, rows)
        return
    for c in prange(chunks):
        _price_chunk(P, Q, prices, kind, alpha, method, R, out, work[c], c * rows // chunks, (c + 1) * rows // chunks)


@kernel
def _price_chunk(P, Q, prices, kind, alpha, method, R, out, work, first, end):
    """``price_row_by`` for rows [first, end) with one workspace."""
    for i in range(first, end):
        price_row_by(method, P[i], Q[i], prices[i], kind, alpha, R[i], out[i], work)


@kernel
def frontier_trace(low_p, low_rho, low_cum, high_p, high_rho, high_cum, q0, kind, alpha):
    """Every breakpoint state of the walk with an unlimited budget, starting with m = 0."""
    trace = np.empty((low_p.size + high_p.size + 2, STATE_SIZE), np.float64)
    state = initial_state(low_p.size, high_p.size)
    trace[0, :] = state
    _, rows, _ = walk(low_p, low_rho, low_cum, high_p, high_rho, high_cum, q0, kind, alpha, np.inf, state, trace[1:])
    return trace[: rows + 1].copy()


@kernel
def trace_slopes(trace, kind, alpha):
    """dD/dm as the walk leaves each state of a frontier trace: non-decreasing along it (D is convex)."""
    fpinf = f_tilde_prime_at_inf(kind, alpha)
    out = np.empty(trace.shape[0], np.float64)
    for i in range(trace.shape[0]):
        high = f_tilde_prime(kind, alpha, trace[i, B]) if trace[i, K_HIGH] > 0 else fpinf
        out[i] = high - f_tilde_prime(kind, alpha, trace[i, A])
    return out


@kernel(parallel=True)
def divergence_rows(R, P, kind, alpha, out):
    """out[i] = D_f(R[i] || P[i]) for every row, in parallel; one row without starting a parallel
    region, whose start waits for its threads where other work keeps the cores busy (8 ms
    against the row's own 0.06 ms at n = 16384, measured beside a test run)."""
    if P.shape[0] == 1:
        out[0] = divergence_row(R[0], P[0], kind, alpha, np.inf)
        return
    for i in prange(P.shape[0]):
        out[i] = divergence_row(R[i], P[i], kind, alpha, np.inf)


@kernel(borrow=True)
def toward(p, r, theta, out):
    """out = p + theta (r - p), in float64 and rounded to out's dtype: a point of the segment
    from p to r (``api._pull_back``)."""
    for i in range(p.size):
        pi = np.float64(p[i])
        out[i] = pi + theta * (np.float64(r[i]) - pi)


@kernel(reassociate=True, borrow=True)
def acceptance_and_moved(r, p, q):
    """(sum min(r, q), sum (r - p)_+) of one row, in float64, added in an order the compiler
    chooses (vectorised)."""
    acceptance = moved = 0.0
    for i in range(p.size):
        ri = np.float64(r[i])
        acceptance += min(ri, np.float64(q[i]))
        moved += max(ri - np.float64(p[i]), 0.0)
    return acceptance, moved
