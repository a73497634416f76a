"""Relaxed rules of SPEC C11 that modify the acceptance test or the target (one row each)."""

from __future__ import annotations

import numpy as np

from mdverify.rules.base import RuleOutput, accept_or_residual, capped_ratio, one_row, speculative
from mdverify.theory import kl


def lenience(p, q, l: float) -> RuleOutput:
    """Accept x iff p(x) / (l q(x)) >= u, u ~ U(0, 1); residual norm((p - q)_+). Lossless at l = 1."""
    p, q = one_row(p, q)
    if not 0 < l <= 1:
        raise ValueError(f"lenience needs 0 < l <= 1, got {l!r}")
    return accept_or_residual(q, capped_ratio(p / l, q), np.maximum(p - q, 0.0))


def static_ensemble(p, q, w: float) -> RuleOutput:
    """Speculative sampling towards pi = w p + (1 - w) q. Lossless at w = 1."""
    p, q = one_row(p, q)
    if not 0 <= w <= 1:
        raise ValueError(f"static_ensemble needs 0 <= w <= 1, got {w!r}")
    return speculative(w * p + (1 - w) * q, q)


def cascade_opt(p, q, alpha: float) -> RuleOutput:
    """Target pi = q unless max q < max p - alpha TV(p, q), then pi = p. Lossless for very negative alpha."""
    p, q = one_row(p, q)
    tv = 0.5 * np.abs(p - q).sum()
    return speculative(p if q.max() < p.max() - alpha * tv else q, q)


def cascade_token(p, q, alpha: float) -> RuleOutput:
    """T = {v : p(v) >= (1 - alpha) max p}; target pi(v) = q(v) 1[v in T] + q(T^c) p(v). Lossless for alpha < 0."""
    p, q = one_row(p, q)
    trusted = p >= (1 - alpha) * p.max()
    return speculative(np.where(trusted, q, 0.0) + q[~trusted].sum() * p, q)


def js_divergence(p, q) -> float:
    """JS(p, q) = KL(p || m) / 2 + KL(q || m) / 2 with m = (p + q) / 2."""
    m = 0.5 * (p + q)
    return float(0.5 * kl(p, m) + 0.5 * kl(q, m))


def fuzzy(p, q, threshold: float) -> RuleOutput:
    """Emit the draft (always accepted) if JS(p, q) < threshold, else verify losslessly. Lossless at 0."""
    p, q = one_row(p, q)
    if js_divergence(p, q) < threshold:
        return RuleOutput(r=q.copy(), acceptance=1.0)
    return speculative(p, q)


def typical(p, q, params: tuple[float, float]) -> RuleOutput:
    """Accept x iff p(x) > min(eps_t, delta_t exp(-H(p))); on rejection emit argmax p."""
    p, q = one_row(p, q)
    eps_t, delta_t = params
    with np.errstate(divide="ignore", invalid="ignore"):
        entropy = -float(np.sum(np.where(p > 0, p * np.log(p), 0.0)))
    accept = (p > min(eps_t, delta_t * np.exp(-entropy))).astype(np.float64)
    return accept_or_residual(q, accept, (np.arange(p.size) == np.argmax(p)).astype(np.float64))


def top_k(p, q, k: int) -> RuleOutput:
    """Accept x iff x is among the k most likely under p; residual norm((1[v in top-k] - q)_+)."""
    p, q = one_row(p, q)
    top = np.zeros(p.size, bool)
    top[np.argsort(-p, kind="stable")[: int(k)]] = True
    return accept_or_residual(q, top.astype(np.float64), np.maximum(top - q, 0.0))
