"""The O(n) walk over the merged breakpoints of SPEC C5, and the solve inside one segment.

Moving mass m from the low side to the high side lowers a (low tokens clipped at a p_i)
and raises b (high tokens clipped at b p_i). Between breakpoints the clipped sets are
fixed, so with ``delta`` the mass moved inside the segment

    a = a0 - delta / P_low,    b = b0 + delta / P_high,
    D(delta) = F_low + P_low f~(a) + F_high + P_high f~(b)   (+ f~'(inf) * fill on H0),

where F_* sums p_i f~(rho_i) over the unclipped tokens. Parametrising each segment by
``delta`` from its start (rather than by the total m) keeps full relative precision when
the clipped mass is tiny (p near 1e-300). D is convex and non-decreasing in m, so the
budget is crossed in exactly one segment, where one scalar equation is solved.

The walk state is a float64 vector (layout below) so that breakpoints can be recorded as
rows of a trace and any later budget resumed from the nearest row (the O(log n) query).
Where no trace is kept and the budget lies many breakpoints away, ``jump`` finds the state a
step or two before it by bisection over sums of the released tokens instead.
"""

import numpy as np

from mdverify.core._fgen import (f_prime_at_one, f_tilde, f_tilde_prime, f_tilde_prime_at_inf, segment_root,
                                 weighted_f_tilde_terms)
from mdverify.core.index import build_index
from mdverify.core.jit import kernel
from mdverify.core.terms import weighted_f_tilde

# Walk state layout.
D, M, A, B, FILL, F_LOW, F_HIGH, K_LOW, K_HIGH = range(9)
STATE_SIZE = 9
#: ``advance``'s max_steps for a walk to its end.
UNLIMITED = 2 ** 62
#: Steps of the walk from ``jump``'s state within which ``walk_or_jump`` must reach the stop
#: (the jump's sums, rounded, put its state off by more: not observed; at most 2 were needed).
JUMP_STEPS = 8


@kernel
def initial_state(n_low, n_high):
    state = np.zeros(STATE_SIZE, np.float64)
    state[A] = 1.0
    state[B] = 1.0
    state[K_LOW] = n_low
    state[K_HIGH] = n_high
    return state


@kernel
def segment_point(delta, kind, alpha, f_low, p_low, a0, a_min, f_high, p_high, b0, b_max, fpinf, fill0):
    """D and dD/dm at ``delta`` inside a segment; returns (D, slope, a, b, fill)."""
    a = a0 - delta / p_low
    if a < a_min:
        a = a_min
    value = f_low + p_low * f_tilde(kind, alpha, a) + f_high
    slope = -f_tilde_prime(kind, alpha, a)
    b = b0
    fill = fill0
    if p_high > 0.0:
        b = b0 + delta / p_high
        if b > b_max:
            b = b_max
        value += weighted_f_tilde(kind, alpha, p_high, b)
        slope += f_tilde_prime(kind, alpha, b)
    else:
        # Truncated-target tokens (p = 0) fill at the constant marginal cost f~'(inf).
        fill = fill0 + delta
        if fill > 0.0:
            value += fpinf * fill
        slope += fpinf
    return value, slope, a, b, fill


@kernel
def solve_segment(eps, length, d0, kind, alpha, f_low, p_low, a0, a_min, f_high, p_high, b0, b_max, fpinf, fill0):
    """The largest delta in [0, length] with D(delta) <= eps, to machine precision.

    Requires D(0) = d0 <= eps < D(length). Safeguarded Newton: D is convex, so a Newton
    step from the right end and a secant step from the bracket both stay on their side of
    the root; a bisection step is taken whenever they fail to halve the bracket (this also
    covers D(length) = inf). The left end is returned, so the result is always feasible.
    Where sympy solved the segment equation in closed form (tv, pearson) the bracket starts
    at that root, and a Newton step from its left end (which convexity puts past the root)
    closes it; the iteration then only polishes the rounding of the closed form.
    """
    lo = 0.0
    g_lo = d0 - eps
    hi = length
    value, s_hi, _, _, _ = segment_point(hi, kind, alpha, f_low, p_low, a0, a_min, f_high, p_high, b0, b_max, fpinf, fill0)
    g_hi = value - eps
    if p_high > 0.0:
        x = segment_root(kind, alpha, eps - f_low - f_high, p_low, 1.0 - a0, p_high, b0 - 1.0)
        for _ in range(2):  # the closed-form root, then a Newton step from its left
            if not lo < x < hi:
                break
            value, slope, _, _, _ = segment_point(x, kind, alpha, f_low, p_low, a0, a_min, f_high, p_high, b0, b_max, fpinf, fill0)
            if value - eps > 0.0:
                hi = x
                g_hi = value - eps
                s_hi = slope
                break
            lo = x
            g_lo = value - eps
            x = lo - g_lo / slope if slope > 0.0 else hi
    for _ in range(2000):
        width = hi - lo
        if g_lo >= 0.0 or width <= 4e-16 * hi:
            break
        for step in range(3):
            if step == 0:
                if not (g_hi < np.inf and 0.0 < s_hi < np.inf):
                    continue
                x = hi - g_hi / s_hi
            elif step == 1:
                if not g_hi < np.inf:
                    continue
                x = lo + (hi - lo) * (g_lo / (g_lo - g_hi))
            else:
                if hi - lo <= 0.5 * width:
                    break
                x = lo + 0.5 * (hi - lo)
            if not (lo < x < hi):
                continue
            value, slope, _, _, _ = segment_point(x, kind, alpha, f_low, p_low, a0, a_min, f_high, p_high, b0, b_max, fpinf, fill0)
            if value - eps <= 0.0:
                lo = x
                g_lo = value - eps
            else:
                hi = x
                g_hi = value - eps
                s_hi = slope
    return lo


@kernel
def solve_slope(limit, length, kind, alpha, f_low, p_low, a0, a_min, f_high, p_high, b0, b_max, fpinf, fill0):
    """The largest delta in [0, length] with dD/dm(delta) <= ``limit``, by bisection.

    The slope f~'(b) - f~'(a) (f~'(inf) - f~'(a) while tokens with p = 0 fill) is
    non-decreasing in delta, D being convex; requires it to exceed ``limit`` at ``length``.
    """
    lo = 0.0
    hi = length
    for _ in range(2000):
        if hi - lo <= 4e-16 * hi:
            break
        x = lo + 0.5 * (hi - lo)
        if not lo < x < hi:
            break
        _, slope, _, _, _ = segment_point(x, kind, alpha, f_low, p_low, a0, a_min, f_high, p_high, b0, b_max, fpinf, fill0)
        if slope <= limit:
            lo = x
        else:
            hi = x
    return lo


@kernel
def walk(low_p, low_rho, low_cum, high_p, high_rho, high_cum, q0, kind, alpha, eps, state, trace):
    """Advance ``state`` in place until D would exceed ``eps`` or m reaches m_max.

    Every breakpoint passed with positive step is written as a row of ``trace`` (pass an
    array with no rows to skip recording). Returns (binding, rows_written, steps):
    ``binding`` is True when the budget stopped the walk inside a segment, and ``steps``
    counts loop iterations, each of which retires at least one token or ends the walk, so
    steps <= n_low + n_high + 2 (the O(n) bound of SPEC C5, checked in proofs_checks).
    """
    return advance(low_p, low_rho, low_cum, high_p, high_rho, high_cum, q0, kind, alpha, eps, np.inf, state, trace,
                   UNLIMITED)


@kernel
def walk_row(p, q, eps, kind, alpha):
    """(state, binding, q0, base): ``walk`` of a row on its sorted ratio index
    (``index.build_index``), from nothing moved to the budget or m_max; O(n log n)."""
    low_p, low_rho, low_cum, high_p, high_rho, high_cum, q0, base = build_index(p, q)
    state = initial_state(low_p.size, high_p.size)
    binding, _, _ = walk(low_p, low_rho, low_cum, high_p, high_rho, high_cum, q0, kind, alpha, eps, state,
                         np.empty((0, STATE_SIZE), np.float64))
    return state, binding, q0, base


@kernel
def walk_to_price(low_p, low_rho, low_cum, high_p, high_rho, high_cum, q0, kind, alpha, price, state):
    """Advance ``state`` to the frontier point of slope ``price`` = dA/dD (SPEC section 10).

    The maximiser of A(r) - price D_f(r || p) moves mass while dD/dm = f'(b) - f'(a) stays
    at most 1 / price; returns (stopped_inside, rows, steps) as ``walk`` does.
    """
    return advance(low_p, low_rho, low_cum, high_p, high_rho, high_cum, q0, kind, alpha, np.inf, 1.0 / price, state,
                   np.empty((0, STATE_SIZE), np.float64), UNLIMITED)


@kernel
def advance(low_p, low_rho, low_cum, high_p, high_rho, high_cum, q0, kind, alpha, eps, slope_limit, state, trace,
            max_steps):
    """``walk`` to the first of the budget ``eps`` and the marginal cost ``slope_limit`` = dD/dm;
    or, after ``max_steps`` steps (UNLIMITED for none), stopped where it is, with steps > max_steps."""
    fpinf = f_tilde_prime_at_inf(kind, alpha)
    h0_open = q0 > 0.0 and fpinf < np.inf
    rows = 0
    steps = 0
    while True:
        steps += 1
        if steps > max_steps:
            return False, rows, steps
        k_low = int(state[K_LOW])
        k_high = int(state[K_HIGH])
        if k_low == 0:
            return False, rows, steps
        p_low = low_cum[k_low]
        a = state[A]
        a_next = low_rho[k_low - 1]
        d_low = max(p_low * (a - a_next), 0.0)
        b = state[B]
        fill = state[FILL]
        if k_high > 0:
            p_high = high_cum[k_high]
            b_next = high_rho[k_high - 1]
            d_high = max(p_high * (b_next - b), 0.0)
        elif h0_open and fill < q0:
            p_high = 0.0
            b_next = b
            d_high = q0 - fill
        else:
            return False, rows, steps
        step = min(d_low, d_high)
        low_event = d_low <= d_high
        high_event = d_high <= d_low
        a_end = a_next if low_event else max(a - step / p_low, a_next)
        b_end = b
        fill_end = fill
        if k_high > 0:
            b_end = b_next if high_event else min(b + step / p_high, b_next)
        else:
            fill_end = q0 if high_event else fill + step
        d_end = state[F_LOW] + p_low * f_tilde(kind, alpha, a_end) + state[F_HIGH]
        if k_high > 0:
            d_end += weighted_f_tilde(kind, alpha, p_high, b_end)
        elif fill_end > 0.0:
            d_end += fpinf * fill_end
        over_slope = False
        if slope_limit < np.inf:
            high_slope = f_tilde_prime(kind, alpha, b_end) if k_high > 0 else fpinf
            over_slope = high_slope - f_tilde_prime(kind, alpha, a_end) > slope_limit
        if d_end > eps or over_slope:
            if over_slope:
                delta = solve_slope(slope_limit, step, kind, alpha, state[F_LOW], p_low, a, a_next,
                                    state[F_HIGH], p_high, b, b_next, fpinf, fill)
            else:
                delta = solve_segment(
                    eps, step, state[D], kind, alpha, state[F_LOW], p_low, a, a_next,
                    state[F_HIGH], p_high, b, b_next, fpinf, fill,
                )
            value, _, a_at, b_at, fill_at = segment_point(
                delta, kind, alpha, state[F_LOW], p_low, a, a_next,
                state[F_HIGH], p_high, b, b_next, fpinf, fill,
            )
            if delta > 0.0:  # at delta = 0 keep the committed value, known to be <= eps
                state[D] = value
            state[M] += delta
            state[A] = a_at
            state[B] = b_at
            state[FILL] = fill_at
            return True, rows, steps
        state[D] = d_end
        state[M] += step
        state[A] = a_end
        state[B] = b_end
        state[FILL] = fill_end
        if low_event:
            state[F_LOW] += low_p[k_low - 1] * f_tilde(kind, alpha, low_rho[k_low - 1])
            state[K_LOW] = k_low - 1
        if high_event and k_high > 0:
            state[F_HIGH] += weighted_f_tilde(kind, alpha, high_p[k_high - 1], high_rho[k_high - 1])
            state[K_HIGH] = k_high - 1
        if step > 0.0 and rows < trace.shape[0]:
            trace[rows, :] = state
            rows += 1


@kernel
def walk_or_jump(low_p, low_rho, low_cum, high_p, high_rho, high_cum, q0, kind, alpha, eps, slope_limit, walked,
                 jump_steps):
    """(found, state, binding): ``advance``'s stop from nothing moved, walked to where it lies
    within ``walked`` steps, else reached within ``jump_steps`` steps from ``jump``'s state.
    ``found`` is False where that fails (the jump's sums, rounded, put its state off by more:
    the caller then walks or searches); nothing else is meaningful then."""
    no_trace = np.empty((0, STATE_SIZE), np.float64)
    state = initial_state(low_p.size, high_p.size)
    binding, _, steps = advance(low_p, low_rho, low_cum, high_p, high_rho, high_cum, q0, kind, alpha, eps,
                                slope_limit, state, no_trace, walked)
    if steps <= walked:
        return True, state, binding
    state = jump(low_p, low_rho, low_cum, high_p, high_rho, high_cum, q0, kind, alpha, eps, slope_limit)
    binding, _, steps = advance(low_p, low_rho, low_cum, high_p, high_rho, high_cum, q0, kind, alpha, eps,
                                slope_limit, state, no_trace, jump_steps)
    return steps <= jump_steps, state, binding


@kernel
def jump(low_p, low_rho, low_cum, high_p, high_rho, high_cum, q0, kind, alpha, eps, slope_limit):
    """A walk state from which ``advance`` reaches the stop of the budget ``eps`` and the marginal
    cost ``slope_limit`` within a step or two: the later of the last breakpoints of each side
    that the walk passes, found by bisection over sums of the released tokens (one
    vectorised pass of f~ over each side) instead of walked to.

    The state's sums are taken in another order than the walk's, so near the budget they may
    differ from it by rounding: a state a breakpoint early costs a step, one just past the
    stop a delta of about that rounding.
    """
    fill_open = q0 > 0.0 and f_tilde_prime_at_inf(kind, alpha) < np.inf
    low_f, low_moved = _released_sums(kind, alpha, low_p, low_rho, 1.0)
    high_f, high_moved = _released_sums(kind, alpha, high_p, high_rho, -1.0)
    low_start, k_low = _last_within(low_rho, low_cum, low_f, low_moved, high_rho, high_cum, high_f, high_moved, 1.0,
                                    q0, fill_open, kind, alpha, eps, slope_limit)
    high_start, k_high = _last_within(high_rho, high_cum, high_f, high_moved, low_rho, low_cum, low_f, low_moved,
                                      -1.0, q0, fill_open, kind, alpha, eps, slope_limit)
    # The later breakpoint's side is known exactly (its threshold is a ratio); the other is located.
    start = max(low_start, high_start)
    if low_start >= high_start:
        a = low_rho[k_low] if k_low < low_rho.size else 1.0
        k_high, b, fill = _side_at(start, high_rho, high_cum, high_moved, -1.0, 0, high_rho.size)
    else:
        b = high_rho[k_high] if k_high < high_rho.size else 1.0
        fill = 0.0
        k_low, a, _ = _side_at(start, low_rho, low_cum, low_moved, 1.0, 0, low_rho.size)
    # Tokens whose ratio the threshold has reached are released, as the walk's steps of zero
    # length release those tied with it (n-gram rows tie thousands).
    while k_low > 0 and low_rho[k_low - 1] >= a:
        k_low -= 1
    while k_high > 0 and high_rho[k_high - 1] <= b:
        k_high -= 1
    state = initial_state(k_low, k_high)
    state[D] = _point_value(k_low, a, k_high, b, fill, low_cum, low_f, high_cum, high_f, kind, alpha)[0]
    state[M] = start
    state[A] = a
    state[B] = b
    state[FILL] = fill
    state[F_LOW] = low_f[k_low]
    state[F_HIGH] = high_f[k_high]
    return state


@kernel
def _released_sums(kind, alpha, weight, rho, s):
    """(f, moved): f[k] the sum of weight f~(rho) and moved[k] that of the mass moved,
    weight s (1 - rho), over tokens k and after: the tokens released while k stay clipped.
    Summed from the last token, as the walk adds them, each term as the walk takes it."""
    f = np.empty(rho.size + 1, np.float64)
    weighted_f_tilde_terms(kind, alpha, rho, weight, 1.0, 0, rho.size, f)  # each token's term, summed below
    f[rho.size] = 0.0
    moved = np.empty(rho.size + 1, np.float64)
    moved[rho.size] = 0.0
    for k in range(rho.size - 1, -1, -1):
        if not f[k] < np.inf:  # f~ overflowed where weight f~ does not (tiny weight): the walk's term
            f[k] = weighted_f_tilde(kind, alpha, weight[k], rho[k])
        f[k] += f[k + 1]
        moved[k] = moved[k + 1] + weight[k] * (s * (1.0 - rho[k]))
    return f, moved


@kernel(borrow=True)
def _breakpoint_mass(rho, cum, moved, k, s):
    """The mass moved on one side where its threshold reaches token k's ratio, tokens [0, k)
    clipped (k = all: ratio 1, nothing moved)."""
    threshold = rho[k] if k < rho.size else 1.0
    return moved[k] + s * (1.0 - threshold) * cum[k]


@kernel(borrow=True)
def _side_at(m, rho, cum, moved, s, lo, hi):
    """(k, threshold, excess) of one side at moved mass m: k tokens clipped (sought in [lo,
    hi]), the threshold between their ratios, and the mass beyond the side's capacity (k = 0,
    every token released)."""
    while lo < hi:  # the least k whose breakpoint's mass is at most m
        k = (lo + hi) // 2
        if _breakpoint_mass(rho, cum, moved, k, s) <= m:
            hi = k
        else:
            lo = k + 1
    if lo == 0:
        return 0, (rho[0] if rho.size > 0 else 1.0), max(m - moved[0], 0.0)
    end = rho[lo] if lo < rho.size else 1.0
    threshold = 1.0 - s * (m - moved[lo]) / cum[lo] if cum[lo] > 0.0 else end
    if s > 0.0:
        threshold = min(max(threshold, rho[lo - 1]), end)
    else:
        threshold = min(max(threshold, end), rho[lo - 1])
    return lo, threshold, 0.0


@kernel(borrow=True)
def _point_value(k_low, a, k_high, b, fill, low_cum, low_f, high_cum, high_f, kind, alpha):
    """(D, dD/dm) of the walk at thresholds a and b with k_low and k_high tokens clipped and
    ``fill`` moved onto tokens with p = 0."""
    value = low_f[k_low] + high_f[k_high]
    if k_low > 0:
        value += weighted_f_tilde(kind, alpha, low_cum[k_low], a)
    if k_high > 0:
        value += weighted_f_tilde(kind, alpha, high_cum[k_high], b)
        high_slope = f_tilde_prime(kind, alpha, b)
    else:
        high_slope = f_tilde_prime_at_inf(kind, alpha)
        if fill > 0.0:
            value += high_slope * fill
    return value, high_slope - f_tilde_prime(kind, alpha, a)


@kernel(borrow=True)
def _last_within(rho, cum, f, moved, other_rho, other_cum, other_f, other_moved, s, q0, fill_open, kind, alpha, eps,
                 slope_limit):
    """(m, k): the moved mass of the last breakpoint of one side (s = 1: low, -1: high) that is
    reachable with D and dD/dm within ``eps`` and ``slope_limit``, and the k tokens it leaves
    clipped. Bisection over k (moved mass falls as k grows; k = all: m = 0, within any
    budget), the other side located at each mass within the bracket the masses tried leave it."""
    lo, hi = 0, rho.size
    other_lo, other_hi = 0, other_rho.size
    while lo < hi:
        k = (lo + hi) // 2
        m = _breakpoint_mass(rho, cum, moved, k, s)
        threshold = rho[k] if k < rho.size else 1.0
        j, other_threshold, excess = _side_at(m, other_rho, other_cum, other_moved, -s, other_lo, other_hi)
        if s > 0.0:
            value, slope = _point_value(k, threshold, j, other_threshold, excess, cum, f, other_cum, other_f, kind,
                                        alpha)
            reachable = excess == 0.0 or (fill_open and excess <= q0)
        else:
            value, slope = _point_value(j, other_threshold, k, threshold, 0.0, other_cum, other_f, cum, f, kind,
                                        alpha)
            reachable = excess == 0.0
        if reachable and value <= eps and (slope_limit == np.inf or slope <= slope_limit):
            hi = k
            other_hi = j  # more mass: the other side's k no greater
        else:
            lo = k + 1
            other_lo = j
    return _breakpoint_mass(rho, cum, moved, lo, s), lo


@kernel
def duals(kind, alpha, eps, state, binding):
    """(lam, mu) of SPEC C3 at a walk's final state.

    lam = 1 / (f'(b) - f'(a)) and mu = -f'(a) lam while the budget binds; lam = mu = 0 when
    it does not; lam = inf at eps = 0, where mu is reported as -f'(1) lam (0 when f'(1) = 0).
    """
    fp1 = f_prime_at_one(kind, alpha)
    if eps == 0.0:
        return np.inf, (0.0 if fp1 == 0.0 else -np.copysign(np.inf, fp1))
    if not binding:
        return 0.0, 0.0
    low_slope = f_tilde_prime(kind, alpha, state[A])
    if int(state[K_HIGH]) > 0:
        high_slope = f_tilde_prime(kind, alpha, state[B])
    else:
        high_slope = f_tilde_prime_at_inf(kind, alpha)
    lam = 1.0 / (high_slope - low_slope)
    if lam == 0.0:
        return 0.0, 0.0
    return lam, -(low_slope + fp1) * lam
