"""Brute-force reference for P(f, eps) (SPEC section 6, item 3): nested bisection.

Slow and simple on purpose, and independent of the core: the divergence is evaluated with
numpy from sympy's lambdified normalised generator f - f'(1)(t - 1) (not from the
generated numba kernels; the normalisation leaves D unchanged on the simplex and avoids the
cancellation that would let tiny moves pass a zero budget), and the clip thresholds are
found by bisection on the mass balance rather than by walking sorted breakpoints.

For a moved mass m, a(m) solves R(a) = sum_L (p - max(q, a p)) = m and b(m) solves
Add(b) = sum_H (min(q, b p) - p) = m; truncated-target tokens (p = 0 < q) receive
whatever the finite high side cannot take, in proportion to q, when f'(inf) < inf. The
optimum is the largest m in [0, m_max] with D(r(m) || p) <= eps, found by bisection.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from mdverify.divergences import Divergence


@lru_cache(maxsize=None)
def _numeric_generator(expression: str):
    import sympy as sp

    from mdverify.symbolic.derive import derive, parse_generator, t, u

    d = derive(parse_generator(expression))
    f = sp.lambdify(t, d.f_tilde, modules="numpy")
    f_star = sp.lambdify(u, d.f_tilde_star, modules="numpy")
    return f, f_star, float(d.f_tilde_at_zero), float(d.f_tilde_prime_at_inf)


def perspective_terms(entry: Divergence, r: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Elementwise p f~(r / p) with the limit conventions of SPEC section 1.

    Terms with r > p are written r f~*(p / r) (the conjugate generator), which cannot
    overflow where p is tiny; p = 0 < r costs r f~'(inf); p = r = 0 costs 0.
    """
    f, f_star, f0, fpinf = _numeric_generator(entry.expression)
    r, p = np.broadcast_arrays(np.asarray(r, np.float64), np.asarray(p, np.float64))
    out = np.zeros(r.shape)
    pos = p > 0
    with np.errstate(all="ignore"):
        t = np.where(pos, r / np.where(pos, p, 1.0), 0.0)
        low = pos & (t <= 1)
        high = pos & (t > 1)
        out[low] = np.where(t[low] > 0, p[low] * f(np.where(t[low] > 0, t[low], 1.0)), p[low] * f0)
        out[high] = r[high] * f_star(p[high] / r[high])
        stray = ~pos & (r > 0)
        out[stray] = r[stray] * fpinf
    return out


def divergence_reference(entry: Divergence, r: np.ndarray, p: np.ndarray) -> float:
    """D_f(r || p) for one row of distributions (sum of ``perspective_terms``)."""
    return float(np.sum(perspective_terms(entry, r, p)))


@dataclass(frozen=True)
class Reference:
    r: np.ndarray
    acceptance: float
    moved_mass: float
    divergence_value: float


def _bisect(fn, lo: float, hi: float, increasing: bool, target: float, iterations: int = 200) -> float:
    """The point in [lo, hi] where the monotone fn crosses target (fn(lo) side kept)."""
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi:
            break
        if (fn(mid) <= target) == increasing:
            lo = mid
        else:
            hi = mid
    return lo if increasing else hi


def distribution_at(p: np.ndarray, q: np.ndarray, m: float, h0_open: bool) -> np.ndarray:
    """r(m): the clip-shaped distribution with moved mass m (SPEC C2)."""
    low = q < p
    finite_high = (q > p) & (p > 0)
    h0 = (q > 0) & (p == 0)
    r = p.copy()
    if m <= 0:
        return r
    removed = lambda a: float(np.sum(p[low] - np.maximum(q[low], a * p[low])))  # noqa: E731
    a = _bisect(removed, 0.0, 1.0, increasing=False, target=m)
    r[low] = np.maximum(q[low], a * p[low])
    high_cap = float(np.sum(q[finite_high] - p[finite_high]))
    to_high = min(m, high_cap)
    if finite_high.any():
        added = lambda b: float(np.sum(np.minimum(q[finite_high], b * p[finite_high]) - p[finite_high]))  # noqa: E731
        b_max = float(np.max(q[finite_high] / p[finite_high]))
        b = _bisect(added, 1.0, b_max, increasing=True, target=to_high) if to_high < high_cap else b_max
        r[finite_high] = np.minimum(q[finite_high], b * p[finite_high])
    if h0_open and m > high_cap and h0.any():
        r[h0] = q[h0] * min(1.0, (m - high_cap) / q[h0].sum())
    return r


def solve(p, q, eps: float, entry: Divergence) -> Reference:
    """The optimum of P(f, eps) for one row by nested bisection on m, a and b."""
    p = np.asarray(p, np.float64)
    q = np.asarray(q, np.float64)
    *_, fpinf = _numeric_generator(entry.expression)
    h0_open = fpinf < np.inf
    tv = float(np.sum(np.maximum(p - q, 0)))
    q0 = float(q[p == 0].sum())
    m_max = tv if h0_open else max(tv - q0, 0.0)
    D = lambda m: divergence_reference(entry, distribution_at(p, q, m, h0_open), p)  # noqa: E731
    if eps == 0:
        # D(r || p) = 0 only at r = p; float64 cannot see D ~ m^2 below m ~ 1e-8, so the
        # bisection would otherwise accept such moves.
        m = 0.0
    elif D(m_max) <= eps:
        m = m_max
    else:
        m = _bisect(D, 0.0, m_max, increasing=True, target=eps)
    r = distribution_at(p, q, m, h0_open)
    return Reference(r=r, acceptance=float(np.minimum(r, q).sum()), moved_mass=m, divergence_value=D(m))
