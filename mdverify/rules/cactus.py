"""CACTUS (SPEC C11): its exact output, in O(n log n) and by the O(n^2) definition.

With gamma_x = min(1, p_x + sqrt(2 delta p_x (1 - p_x))), a draft x is accepted with
min(1, gamma_x / q_x); on rejection (probability w_x = (q_x - gamma_x)_+) the token is drawn
from norm((H_x - q)_+), where H_x(x) = gamma_x and H_x(v) = c_x p_v otherwise, with
c_x = (1 - gamma_x) / (1 - p_x). The residual at v = x is 0 whenever x can be rejected, so

    r'(v) = min(q_v, gamma_v) + sum_{x != v} (w_x / Z_x) (c_x p_v - q_v)_+,
    Z_x = sum_{v != x} (c_x p_v - q_v)_+.

Sorting the tokens by rho_v = q_v / p_v turns every Z_x into a prefix-sum lookup at c_x, and
sorting the rejectable x by c_x turns every r'(v) into a suffix-sum lookup at rho_v.
"""

from __future__ import annotations

import numpy as np

from mdverify.rules.base import RuleOutput, one_row, parameter


def _parts(p, q, delta: float):
    p, q = one_row(p, q)
    delta = parameter(delta, "cactus's delta", 0.0, np.finfo(np.float64).max)
    gamma = np.minimum(1.0, p + np.sqrt(2.0 * delta * p * (1.0 - p)))
    rejected = np.maximum(q - gamma, 0.0)  # w_x
    with np.errstate(divide="ignore", invalid="ignore"):
        c = np.where(rejected > 0, (1.0 - gamma) / (1.0 - p), 0.0)
    return p, q, gamma, rejected, c


def cactus(p, q, delta: float) -> RuleOutput:
    """CACTUS's output distribution and acceptance in O(n log n). Lossless at delta = 0."""
    p, q, gamma, rejected, c = _parts(p, q, delta)
    kept = np.minimum(q, gamma)
    acceptance = float(kept.sum())
    support = p > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = np.where(support, q / np.where(support, p, 1.0), np.inf)
    # Z_x = sum_{rho_v < c_x} (c_x p_v - q_v) - (c_x p_x - q_x)_+, by prefix sums over rho.
    order = np.argsort(rho, kind="stable")
    p_prefix = np.concatenate(([0.0], np.cumsum(p[order])))
    q_prefix = np.concatenate(([0.0], np.cumsum(q[order])))
    k = np.searchsorted(rho[order], c, side="left")
    z = c * p_prefix[k] - q_prefix[k] - np.maximum(c * p - q, 0.0)
    active = (rejected > 0) & (z > 0)
    share = np.where(active, rejected / np.where(active, z, 1.0), 0.0)  # w_x / Z_x
    # r'(v) gains sum_{c_x > rho_v} share_x (c_x p_v - q_v), less the x = v term.
    by_c = np.argsort(c, kind="stable")
    c_sorted = c[by_c]
    tail_sc = np.concatenate((np.cumsum((share * c)[by_c][::-1])[::-1], [0.0]))
    tail_s = np.concatenate((np.cumsum(share[by_c][::-1])[::-1], [0.0]))
    j = np.searchsorted(c_sorted, rho, side="right")
    extra = np.where(support, p * tail_sc[j] - q * tail_s[j], 0.0) - share * np.maximum(c * p - q, 0.0)
    return RuleOutput(r=kept + np.maximum(extra, 0.0), acceptance=acceptance)


def cactus_quadratic(p, q, delta: float) -> RuleOutput:
    """The same from the definition, one residual per rejectable x: O(n^2), for testing."""
    p, q, gamma, rejected, c = _parts(p, q, delta)
    r = np.minimum(q, gamma)
    for x in np.flatnonzero(rejected > 0):
        h = c[x] * p
        h[x] = gamma[x]
        residual = np.maximum(h - q, 0.0)
        if residual.sum() > 0:
            r = r + rejected[x] * residual / residual.sum()
    return RuleOutput(r=r, acceptance=float(np.minimum(q, gamma).sum()))
