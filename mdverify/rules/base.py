"""What a rule returns, and standard speculative sampling towards a modified target."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mdverify.validate import as_pair


@dataclass(frozen=True)
class RuleOutput:
    r: np.ndarray  # the exact distribution of the emitted token
    acceptance: float  # the probability that the draft token is accepted


def one_row(p, q) -> tuple[np.ndarray, np.ndarray]:
    """p and q as float64 vectors of the same shape (n,), checked as ``md.mentor`` checks them."""
    p, q = as_pair(p, q)
    if p.ndim != 1:
        raise ValueError(f"rules take one row: p and q of shape (n,), got {p.shape}")
    return p.astype(np.float64), q.astype(np.float64)


def parameter(value, name: str, low: float = -np.inf, high: float = np.inf, open_low: bool = False) -> float:
    """A rule's real parameter in [low, high] ((low, high] when ``open_low``), never nan."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real number, got {value!r}") from None
    if not (low < x if open_low else low <= x) or not x <= high:
        interval = f"{'(' if open_low else '['}{low:g}, {high:g}]"
        raise ValueError(f"{name} must lie in {interval}, got {value!r}")
    return x


def accept_or_residual(q: np.ndarray, accept: np.ndarray, residual: np.ndarray) -> RuleOutput:
    """Draft x ~ q kept with probability accept[x]; otherwise a draw from norm(residual)."""
    kept = q * accept
    acceptance = float(kept.sum())
    total = residual.sum()
    rejected = max(1.0 - acceptance, 0.0)
    r = kept + (rejected * residual / total if total > 0 else 0.0)
    return RuleOutput(r=r, acceptance=acceptance)


def capped_ratio(x: np.ndarray, q: np.ndarray) -> np.ndarray:
    """min(1, x / q) where q > 0, else 0: the probability of keeping a draft drawn from q."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(q > 0, np.minimum(1.0, x / q), 0.0)


def speculative(target: np.ndarray, q: np.ndarray) -> RuleOutput:
    """Lossless speculative sampling towards ``target``: accept min(1, target/q), residual (target - q)_+.

    The output is ``target`` itself and the acceptance sum min(target, q).
    """
    return accept_or_residual(q, capped_ratio(target, q), np.maximum(target - q, 0.0))
