"""Synthetic LLM-like target/drafter rows (SPEC section 7).

Logits are Zipf-ranked, z_i = -s log(1 + rank_i) + small noise, rather than i.i.d.
heavy-tailed (which turns one-hot at n = 1e5 and makes every solver look fast). The target
is softmax(z / T); the drafter sees the same logits through noise of scale sigma at its own
temperature. Per-row parameters are drawn so that TV(p, q) spans about 0.05 to 0.8 and the
top target probability about 0.1 to 0.9.
"""

from __future__ import annotations

import numpy as np


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def truncate_top_k(p: np.ndarray, k: int) -> np.ndarray:
    """Keep the k most likely tokens of each row (ties by index), renormalised; exact zeros elsewhere."""
    k = max(1, min(int(k), p.shape[-1]))
    order = np.argsort(-p, axis=-1, kind="stable")
    keep = np.zeros_like(p, dtype=bool)
    np.put_along_axis(keep, order[..., :k], True, axis=-1)
    out = np.where(keep, p, 0.0)
    return out / out.sum(axis=-1, keepdims=True)


def truncate_top_p(p: np.ndarray, top_p: float) -> np.ndarray:
    """Nucleus truncation: the smallest prefix (by probability) with mass >= top_p, renormalised."""
    order = np.argsort(-p, axis=-1, kind="stable")
    sorted_p = np.take_along_axis(p, order, axis=-1)
    before = np.cumsum(sorted_p, axis=-1) - sorted_p
    keep_sorted = before < top_p
    keep = np.zeros_like(p, dtype=bool)
    np.put_along_axis(keep, order, keep_sorted, axis=-1)
    out = np.where(keep, p, 0.0)
    return out / out.sum(axis=-1, keepdims=True)


def llm_rows(
    n: int,
    batch: int = 1,
    *,
    seed: int = 0,
    truncate: str | None = None,
    dtype=np.float64,
) -> tuple[np.ndarray, np.ndarray]:
    """Target and drafter rows of shape (batch, n).

    Parameters
    ----------
    n : int
        Vocabulary size.
    batch : int
        Number of rows; each row draws its own Zipf slope, temperatures and drafter noise.
    seed : int
        Seed of the numpy Generator; equal seeds give equal rows.
    truncate : {None, "top_k", "top_p", "both"}
        Truncate the target ("top_k", "top_p") or both target and drafter ("both") the way
        serving engines filter distributions, leaving exact zeros.
    dtype : numpy float dtype of the returned rows.
    """
    rng = np.random.default_rng(seed)
    slope = rng.uniform(1.0, 2.6, size=(batch, 1))
    temperature = rng.uniform(0.6, 1.4, size=(batch, 1))
    draft_temperature = temperature * rng.uniform(0.8, 1.3, size=(batch, 1))
    sigma = rng.uniform(0.3, 2.5, size=(batch, 1))
    rank = np.argsort(rng.random((batch, n)), axis=-1)
    z = -slope * np.log1p(rank) + 0.1 * rng.standard_normal((batch, n))
    p = _softmax(z / temperature)
    q = _softmax((z + sigma * rng.standard_normal((batch, n))) / draft_temperature)
    if truncate in ("top_k", "both"):
        p = truncate_top_k(p, max(1, n // 10))
    if truncate in ("top_p", "both"):
        p = truncate_top_p(p, 0.9)
    if truncate == "both":
        q = truncate_top_k(q, max(1, n // 5))
    elif truncate not in (None, "top_k", "top_p"):
        raise ValueError(f"unknown truncate {truncate!r}; valid: None, 'top_k', 'top_p', 'both'")
    p = p.astype(dtype)
    q = q.astype(dtype)
    # Renormalise in the output precision so float32 rows sum to 1 within float32 rounding.
    return p / p.sum(axis=-1, keepdims=True, dtype=np.float64).astype(dtype), q / q.sum(axis=-1, keepdims=True, dtype=np.float64).astype(dtype)
