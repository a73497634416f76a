"""The peer algorithm of SPEC section 8 (a vLLM fork's MentoredSampler), reimplemented in numpy.

It sorts the ratios p/q, bisects at most 10 times on a scalar alpha in [0, 1] until
sum_i p_i log(p_i / s_i), with s_i = min(p_i / alpha, q_i), is within 10% of the budget,
then accepts a draft x with probability min(1, p_x / (alpha q_x)) and on rejection draws from
norm((p - alpha q)_+). ``induced`` computes the distribution that sampler actually produces,
so that its true divergence and acceptance can be set beside mdverify's exact optimum.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mdverify.rules.base import accept_or_residual, capped_ratio


@dataclass(frozen=True)
class PeerResult:
    alpha: float
    steps: int  # bisection steps taken (at most 10)
    within_tolerance: bool  # whether the stop rule was met
    r: np.ndarray  # the distribution the sampler induces
    acceptance: float  # probability that the draft token is accepted: sum_i min(q_i, p_i / alpha)


def _budget_value(p: np.ndarray, q: np.ndarray, alpha: float) -> float:
    s = np.minimum(p / alpha, q)
    pos = p > 0
    with np.errstate(divide="ignore"):
        return float(np.sum(p[pos] * np.log(p[pos] / s[pos])))


def induced(p: np.ndarray, q: np.ndarray, alpha: float) -> tuple[np.ndarray, float]:
    """(r, acceptance) of accept-with-min(1, p/(alpha q)), else draw from norm((p - alpha q)_+)."""
    out = accept_or_residual(q, capped_ratio(p / alpha, q), np.maximum(p - alpha * q, 0.0))
    return out.r, out.acceptance


def peer_sampler(p, q, eps: float, max_steps: int = 10, tolerance: float = 0.1) -> PeerResult:
    """Run the peer's search for one row (p, q: 1-d float64) and return what it induces."""
    p = np.asarray(p, np.float64)
    q = np.asarray(q, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        np.sort(p / q)  # the peer sorts the ratios first; kept for a faithful cost
    lo, hi = 0.0, 1.0
    alpha = 1.0
    steps = 0
    within = False
    for steps in range(1, max_steps + 1):
        alpha = 0.5 * (lo + hi)
        value = _budget_value(p, q, alpha)
        if abs(value - eps) <= tolerance * eps:
            within = True
            break
        # The value falls as alpha falls (s grows towards q).
        if value > eps:
            hi = alpha
        else:
            lo = alpha
    r, acceptance = induced(p, q, alpha)
    return PeerResult(alpha=alpha, steps=steps, within_tolerance=within, r=r, acceptance=acceptance)
