"""Mentored decoding as one round of boosting (SPEC C7, C8), on extended reals.

With h = log(r / p) the mentor's weak hypothesis (h_i = clip(log rho_i, log a, log b) at the
optimum), sum_i p_i e^{h_i} = 1 and, for a truth pi with supp(pi) within supp(p),

    KL(pi || r) = KL(pi || p) - E_pi[h],

so r beats p (is closer to the truth) iff E_pi[h] > 0, i.e. iff the edge
gamma = E_pi[h] - E_p[h] exceeds KL(p || r) = -E_p[h]. Where pi charges a token that p or r
excludes, the divergences are +inf and the functions here say so (never nan).

All functions take arrays of shape (..., n) and reduce over the last axis.
"""

from __future__ import annotations

import numpy as np


def kl(a, b) -> np.ndarray:
    """KL(a || b) = sum a log(a / b), with 0 log 0 = 0 and +inf where a > 0 = b."""
    a, b = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(b, np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(a > 0, a * (np.log(a) - np.log(b)), 0.0)
    return terms.sum(-1)


def weak_hypothesis(p, r) -> np.ndarray:
    """h = log(r / p): -inf where r = 0 < p, +inf where p = 0 < r, 0 where both are 0."""
    p, r = np.broadcast_arrays(np.asarray(p, np.float64), np.asarray(r, np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        h = np.log(r) - np.log(p)
    return np.where((p == 0) & (r == 0), 0.0, h)


def _expectation(weights, p, h) -> np.ndarray:
    """E_w[h] over the tokens of supp(p) that w charges, where h is log(r / p) in [-inf, inf)."""
    weights = np.asarray(weights, np.float64)
    with np.errstate(invalid="ignore"):
        terms = np.where((weights > 0) & (p > 0), weights * h, 0.0)
    return terms.sum(-1)


def edge(pi, p, r) -> np.ndarray:
    """gamma = E_pi[h] - E_p[h] over supp(p), the weak hypothesis' edge on the truth over its cost.

    Where r excludes a token of supp(p), E_p[h] = -KL(p || r) = -inf: the edge is +inf if pi
    avoids every such token and -inf if it charges one (its cross-entropy under r is then
    +inf, so r cannot win).
    """
    p = np.asarray(p, np.float64)
    h = weak_hypothesis(p, r)
    on_truth, on_target = _expectation(pi, p, h), _expectation(p, p, h)
    with np.errstate(invalid="ignore"):
        return np.where(on_truth == -np.inf, -np.inf, on_truth - on_target)


def beats_target(pi, p, r) -> np.ndarray:
    """True where KL(pi || r) < KL(pi || p), decided by E_pi[h] > 0 (SPEC C7).

    Where pi charges a token with p = 0, both divergences are +inf and neither wins (False).
    """
    pi = np.asarray(pi, np.float64)
    p = np.asarray(p, np.float64)
    outside = ((pi > 0) & (p == 0)).any(-1)
    gain = _expectation(pi, p, weak_hypothesis(p, r))
    return np.where(outside, False, gain > 0)


def first_order_indicator(pi, p, r) -> np.ndarray:
    """The first-order (small m) sign of C8: sum_i (pi_i / p_i)(r_i - p_i) > 0 over supp(p).

    It asks whether the tokens that receive mass have a higher truth-to-target ratio than
    the tokens that give it; it does not depend on the divergence.
    """
    pi, p, r = np.broadcast_arrays(*(np.asarray(x, np.float64) for x in (pi, p, r)))
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, pi / p * (r - p), 0.0)
    return terms.sum(-1) > 0


def segment_threshold(p, q, r) -> np.ndarray:
    """s* = KL(p || r) / (KL(p || r) + E_q[h]): r beats p for the truth p + s (q - p) iff s > s*.

    0 where r = p; 1 where KL(p || r) = +inf (r excludes a token of supp(p), so only the
    drafter's own end of the segment can be won); +inf where the denominator is not positive
    (r loses on the whole segment).
    """
    p = np.asarray(p, np.float64)
    cost = kl(p, r)
    gain = _expectation(q, p, weak_hypothesis(p, r))
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(cost + gain > 0, cost / (cost + gain), np.inf)
    return np.where(cost == 0, 0.0, np.where(cost == np.inf, 1.0, ratio))
