"""What a rule returns, and standard speculative sampling towards a modified target."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class RuleOutput:
    r: np.ndarray  # the exact distribution of the emitted token
    acceptance: float  # the probability that the draft token is accepted


def accept_or_residual(q: np.ndarray, accept: np.ndarray, residual: np.ndarray) -> RuleOutput:
    """Draft x ~ q kept with probability accept[x]; otherwise a draw from norm(residual)."""
    kept = q * accept
    acceptance = float(kept.sum())
    total = residual.sum()
    rejected = max(1.0 - acceptance, 0.0)
    r = kept + (rejected * residual / total if total > 0 else 0.0)
    return RuleOutput(r=r, acceptance=acceptance)


def speculative(target: np.ndarray, q: np.ndarray) -> RuleOutput:
    """Lossless speculative sampling towards ``target``: accept min(1, target/q), residual (target - q)_+.

    The output is ``target`` itself and the acceptance sum min(target, q).
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        accept = np.where(q > 0, np.minimum(1.0, target / q), 0.0)
    return accept_or_residual(q, accept, np.maximum(target - q, 0.0))
