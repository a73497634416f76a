"""The dual certificate of SPEC C3: an optimality proof that costs O(n) and needs no solver.

By weak duality, for every lam >= 0 and mu,

.. math:: g(\\lambda, \\mu) = \\lambda \\varepsilon + \\mu + \\sum_i \\sup_{r_i \\ge 0}
          \\big[\\min(r_i, q_i) - \\mu r_i - \\lambda p_i f(r_i / p_i)\\big] \\;\\ge\\; A(r)

for every feasible r. So g(lam*, mu*) - A(r*) >= 0 bounds how far A(r*) can be from the
optimum; a gap of 0 proves r* optimal. Each coordinate's sup is found here by golden-section
search on the concave function itself (after a doubling search for a bracket), which does
not assume the clip shape of the optimum, with the generator evaluated by numpy from
sympy (``bruteforce.perspective_terms``), not by the numba kernels.

The normalised generator f~ = f - f'(1)(t - 1) is used with mu~ = mu + lam f'(1), which
leaves the Lagrangian unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mdverify.divergences import Divergence
from mdverify.oracle.bruteforce import _numeric_generator, perspective_terms

_GOLDEN = (np.sqrt(5.0) - 1.0) / 2.0


@dataclass(frozen=True)
class Certificate:
    dual_value: float  # g(lam, mu)
    primal_value: float  # A(r)
    gap: float  # g - A(r), >= 0 up to rounding
    relative_gap: float  # gap / A(r)


def _coordinate_sups(entry: Divergence, p: np.ndarray, q: np.ndarray, lam: float, mu_t: float,
                     iterations: int) -> np.ndarray:
    """sup_{r >= 0} min(r, q) - mu~ r - lam p f~(r/p) for each coordinate with p > 0."""

    def phi(r):
        if lam == 0:  # the limit lam -> 0+: the cost term vanishes wherever it is finite
            return np.minimum(r, q) - mu_t * r
        return np.minimum(r, q) - mu_t * r - lam * perspective_terms(entry, r, p)

    # Bracket: double the right end while the concave function still rises.
    hi = 2.0 * np.maximum(np.maximum(p, q), 1e-300)
    rising = phi(2.0 * hi) > phi(hi)
    for _ in range(2100):
        if not rising.any():
            break
        hi = np.where(rising, 2.0 * hi, hi)
        rising = rising & (phi(2.0 * hi) > phi(hi)) & np.isfinite(hi)
    lo = np.zeros_like(hi)
    hi = 2.0 * hi
    x1 = hi - _GOLDEN * (hi - lo)
    x2 = lo + _GOLDEN * (hi - lo)
    f1, f2 = phi(x1), phi(x2)
    best = np.maximum(phi(lo), phi(np.minimum(q, hi)))  # the kink and the boundary, exactly
    for _ in range(iterations):
        left = f1 >= f2
        hi = np.where(left, x2, hi)
        lo = np.where(left, lo, x1)
        x2_new = np.where(left, x1, lo + _GOLDEN * (hi - lo))
        x1_new = np.where(left, hi - _GOLDEN * (hi - lo), x2)
        f2_new = np.where(left, f1, np.nan)
        f1_new = np.where(left, np.nan, f2)
        x1, x2 = x1_new, x2_new
        need1, need2 = np.isnan(f1_new), np.isnan(f2_new)
        f1 = np.where(need1, phi(x1), f1_new) if need1.any() else f1_new
        f2 = np.where(need2, phi(x2), f2_new) if need2.any() else f2_new
        best = np.maximum(best, np.maximum(f1, f2))
    return best


def certify(p, q, r, eps: float, lam: float, mu: float, entry: Divergence, iterations: int = 100) -> Certificate:
    """g(lam, mu) - A(r) for one row (see the module docstring).

    ``lam = inf`` (eps = 0) is the limit that forces r = p, where g = sum_i min(p_i, q_i).
    ``lam = 0`` is read as the limit 0+, in which tokens with p = 0 stay at 0 when
    f'(inf) = inf.
    """
    p = np.asarray(p, np.float64)
    q = np.asarray(q, np.float64)
    r = np.asarray(r, np.float64)
    primal = float(np.minimum(r, q).sum())
    if np.isinf(lam):
        dual = float(np.minimum(p, q).sum())
    else:
        d = entry.derived
        mu_t = mu + lam * float(d.f_prime_at_one)
        *_, fpinf = _numeric_generator(entry.expression)
        pos = p > 0
        sups = _coordinate_sups(entry, p[pos], q[pos], lam, mu_t, iterations)
        stray = q[~pos & (q > 0)]
        # p = 0: min(r, q) - (mu~ + lam f~'(inf)) r is piecewise linear; its sup is at r = 0 or r = q.
        slope = mu_t + (lam * fpinf if lam > 0 else 0.0)
        if lam == 0 and not np.isfinite(fpinf):
            stray_sup = np.zeros_like(stray)
        else:
            stray_sup = np.maximum(0.0, stray * (1.0 - slope))
        dual = lam * eps + mu_t + float(sups.sum()) + float(stray_sup.sum())
    gap = dual - primal
    return Certificate(dual_value=dual, primal_value=primal, gap=gap, relative_gap=gap / primal)
