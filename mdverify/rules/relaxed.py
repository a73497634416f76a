"""Relaxed rules of SPEC C11 that modify the acceptance test or the target (one row each)."""

from __future__ import annotations

import numpy as np

from mdverify.rules.base import RuleOutput, accept_or_residual, capped_ratio, one_row, parameter, speculative
from mdverify.theory import kl


def lenience(p, q, l: float) -> RuleOutput:
    """Accept x iff p(x) / (l q(x)) >= u, u ~ U(0, 1); residual norm((p - q)_+). Lossless at l = 1."""
    p, q = one_row(p, q)
    l = parameter(l, "lenience's l", 0.0, 1.0, open_low=True)
    return accept_or_residual(q, capped_ratio(p / l, q), np.maximum(p - q, 0.0))


def static_ensemble(p, q, w: float) -> RuleOutput:
    """Speculative sampling towards pi = w p + (1 - w) q. Lossless at w = 1."""
    p, q = one_row(p, q)
    w = parameter(w, "static_ensemble's w", 0.0, 1.0)
    return speculative(w * p + (1 - w) * q, q)


def cascade_opt(p, q, alpha: float) -> RuleOutput:
    """Target pi = q unless max q < max p - alpha TV(p, q), then pi = p. Lossless for very negative alpha."""
    p, q = one_row(p, q)
    alpha = parameter(alpha, "cascade_opt's alpha", -np.finfo(np.float64).max, np.finfo(np.float64).max)
    tv = 0.5 * np.abs(p - q).sum()
    return speculative(p if q.max() < p.max() - alpha * tv else q, q)


def cascade_token(p, q, alpha: float) -> RuleOutput:
    """T = {v : p(v) >= (1 - alpha) max p}; target pi(v) = q(v) 1[v in T] + q(T^c) p(v). Lossless for alpha < 0."""
    p, q = one_row(p, q)
    alpha = parameter(alpha, "cascade_token's alpha", -np.finfo(np.float64).max, np.finfo(np.float64).max)
    trusted = p >= (1 - alpha) * p.max()
    return speculative(np.where(trusted, q, 0.0) + q[~trusted].sum() * p, q)


def js_divergence(p, q) -> float:
    """JS(p, q) = KL(p || m) / 2 + KL(q || m) / 2 with m = (p + q) / 2."""
    m = 0.5 * (p + q)
    return float(0.5 * kl(p, m) + 0.5 * kl(q, m))


def fuzzy(p, q, threshold: float) -> RuleOutput:
    """Emit the draft (always accepted) if JS(p, q) < threshold, else verify losslessly. Lossless at 0."""
    p, q = one_row(p, q)
    threshold = parameter(threshold, "fuzzy's threshold")
    if js_divergence(p, q) < threshold:
        return RuleOutput(r=q.copy(), acceptance=1.0)
    return speculative(p, q)


def typical(p, q, params: tuple[float, float]) -> RuleOutput:
    """Accept x iff p(x) > min(eps_t, delta_t exp(-H(p))); on rejection emit argmax p."""
    p, q = one_row(p, q)
    if np.ndim(params) != 1 or len(params) != 2:
        raise ValueError(f"typical's params must be a pair (eps_t, delta_t), got {params!r}")
    eps_t = parameter(params[0], "typical's eps_t", 0.0, np.finfo(np.float64).max)
    delta_t = parameter(params[1], "typical's delta_t", 0.0, np.finfo(np.float64).max)
    with np.errstate(divide="ignore", invalid="ignore"):
        entropy = -float(np.sum(np.where(p > 0, p * np.log(p), 0.0)))
    accept = (p > min(eps_t, delta_t * np.exp(-entropy))).astype(np.float64)
    return accept_or_residual(q, accept, (np.arange(p.size) == np.argmax(p)).astype(np.float64))


def top_k(p, q, k: int) -> RuleOutput:
    """Accept x iff x is among the k most likely under p; residual norm((1[v in top-k] - q)_+)."""
    p, q = one_row(p, q)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"top_k's k must be an integer >= 1, got {k!r}")
    top = np.zeros(p.size, bool)
    top[np.argsort(-p, kind="stable")[: int(k)]] = True
    return accept_or_residual(q, top.astype(np.float64), np.maximum(top - q, 0.0))
