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
"""

import numpy as np

from mdverify.core._fgen import f_prime_at_one, f_tilde, f_tilde_prime, f_tilde_prime_at_inf, segment_root
from mdverify.core.jit import kernel
from mdverify.core.terms import weighted_f_tilde

# Walk state layout.
D, M, A, B, FILL, F_LOW, F_HIGH, K_LOW, K_HIGH = range(9)
STATE_SIZE = 9
#: ``advance``'s max_steps for a walk to its end.
UNLIMITED = 2 ** 62


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
