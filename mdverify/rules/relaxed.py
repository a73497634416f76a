"""Relaxed rules of SPEC C11 that modify the acceptance test or the target (one row each)."""

from __future__ import annotations

import numpy as np

from mdverify.rules.base import RuleOutput, accept_or_residual, speculative


def _row(p, q) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(p, np.float64)
    q = np.asarray(q, np.float64)
    if p.ndim != 1 or p.shape != q.shape:
        raise ValueError(f"rules take one row: p and q of the same shape (n,), got {p.shape} and {q.shape}")
    return p, q


def lenience(p, q, l: float) -> RuleOutput:
    """Accept x iff p(x) / (l q(x)) >= u, u ~ U(0, 1); residual norm((p - q)_+). Lossless at l = 1."""
    p, q = _row(p, q)
    if not 0 < l <= 1:
        raise ValueError(f"lenience needs 0 < l <= 1, got {l!r}")
    with np.errstate(divide="ignore", invalid="ignore"):
        accept = np.where(q > 0, np.minimum(1.0, p / (l * q)), 0.0)
    return accept_or_residual(q, accept, np.maximum(p - q, 0.0))


def static_ensemble(p, q, w: float) -> RuleOutput:
    """Speculative sampling towards pi = w p + (1 - w) q. Lossless at w = 1."""
    p, q = _row(p, q)
    if not 0 <= w <= 1:
        raise ValueError(f"static_ensemble needs 0 <= w <= 1, got {w!r}")
    return speculative(w * p + (1 - w) * q, q)


def cascade_opt(p, q, alpha: float) -> RuleOutput:
    """Target pi = q unless max q < max p - alpha TV(p, q), then pi = p. Lossless for very negative alpha."""
    p, q = _row(p, q)
    tv = 0.5 * np.abs(p - q).sum()
    return speculative(p if q.max() < p.max() - alpha * tv else q, q)


def cascade_token(p, q, alpha: float) -> RuleOutput:
    """T = {v : p(v) >= (1 - alpha) max p}; target pi(v) = q(v) 1[v in T] + q(T^c) p(v). Lossless for alpha < 0."""
    p, q = _row(p, q)
    trusted = p >= (1 - alpha) * p.max()
    return speculative(np.where(trusted, q, 0.0) + q[~trusted].sum() * p, q)


def js_divergence(p, q) -> float:
    m = 0.5 * (p + q)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, p * np.log(p / m), 0.0) + np.where(q > 0, q * np.log(q / m), 0.0)
    return float(0.5 * terms.sum())


def fuzzy(p, q, threshold: float) -> RuleOutput:
    """Emit the draft (always accepted) if JS(p, q) < threshold, else verify losslessly. Lossless at 0."""
    p, q = _row(p, q)
    if js_divergence(p, q) < threshold:
        return RuleOutput(r=q.copy(), acceptance=1.0)
    return speculative(p, q)


def typical(p, q, params: tuple[float, float]) -> RuleOutput:
    """Accept x iff p(x) > min(eps_t, delta_t exp(-H(p))); on rejection emit argmax p."""
    p, q = _row(p, q)
    eps_t, delta_t = params
    with np.errstate(divide="ignore", invalid="ignore"):
        entropy = -float(np.sum(np.where(p > 0, p * np.log(p), 0.0)))
    accept = (p > min(eps_t, delta_t * np.exp(-entropy))).astype(np.float64)
    return accept_or_residual(q, accept, (np.arange(p.size) == np.argmax(p)).astype(np.float64))


def top_k(p, q, k: int) -> RuleOutput:
    """Accept x iff x is among the k most likely under p; residual norm((1[v in top-k] - q)_+)."""
    p, q = _row(p, q)
    top = np.zeros(p.size, bool)
    top[np.argsort(-p, kind="stable")[: int(k)]] = True
    return accept_or_residual(q, top.astype(np.float64), np.maximum(top - q, 0.0))
