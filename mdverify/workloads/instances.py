"""Named families of verification instances: the rows every check of a claim must cover."""

from __future__ import annotations

import numpy as np

from mdverify.workloads.synthetic import llm_rows, truncate_top_k


def divergence_suite() -> list:
    """Every registered divergence plus alpha-family members on each side of 0 and 1."""
    import mdverify as md

    return [md.divergence(name) for name in md.names()] + [md.alpha(0.3), md.alpha(-1.0), md.alpha(2.5)]


def edge_rows() -> list[tuple[str, np.ndarray, np.ndarray]]:
    """The edge rows of SPEC section 4, as (label, p, q) with 1-d float64 p and q."""
    rows = [
        ("zeros_in_q", [0.5, 0.3, 0.2, 0.0], [0.0, 0.0, 0.6, 0.4]),
        ("zeros_in_p", [0.6, 0.4, 0.0, 0.0], [0.2, 0.3, 0.3, 0.2]),
        ("zeros_both", [0.5, 0.0, 0.5, 0.0, 0.0], [0.0, 0.5, 0.25, 0.25, 0.0]),
        ("ties", [0.2, 0.2, 0.2, 0.2, 0.2], [0.1, 0.1, 0.3, 0.3, 0.2]),
        ("p_equals_q", [0.25, 0.25, 0.5], [0.25, 0.25, 0.5]),
        ("n_is_1", [1.0], [1.0]),
        ("tiny_tail", [1 - 2e-300, 1e-300, 1e-300], [0.5, 0.25, 0.25]),
        ("tiny_draft", [0.5, 0.25, 0.25], [1 - 2e-300, 1e-300, 1e-300]),
        ("one_hot_pair", [1.0, 0.0], [0.0, 1.0]),
        ("low_token_last", [0.5, 0.5], [0.9, 0.1]),
    ]
    return [(label, np.array(p, np.float64), np.array(q, np.float64)) for label, p, q in rows]


def _tied(n: int, rows: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Small integer weights: many equal ratios q/p and many p = q tokens."""
    p = rng.integers(0, 4, size=(rows, n)).astype(np.float64)
    q = rng.integers(0, 4, size=(rows, n)).astype(np.float64)
    p[:, 0] += 1
    q[:, 0] += 1
    return p / p.sum(-1, keepdims=True), q / q.sum(-1, keepdims=True)


def families(n: int, rows: int, seed: int) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(label, p, q) batches of shape (rows, n) covering the regimes a check must see.

    llm (Zipf-ranked logits), peaked (low temperature: probabilities down to 1e-30 and
    below), top_k and top_p (target truncated, exact zeros in p), draft_truncated (zeros
    in q), both (both truncated), ties (integer weights), float32.
    """
    rng = np.random.default_rng(seed)
    seeds = rng.integers(1 << 31, size=8)
    p, q = llm_rows(n, rows, seed=int(seeds[0]))
    peaked_p, peaked_q = llm_rows(n, rows, seed=int(seeds[1]))
    peaked_p = peaked_p ** 2
    peaked_p /= peaked_p.sum(-1, keepdims=True)
    dp, dq = llm_rows(n, rows, seed=int(seeds[2]))
    out = [
        ("llm", p, q),
        ("peaked", peaked_p, peaked_q),
        ("top_k", *llm_rows(n, rows, seed=int(seeds[3]), truncate="top_k")),
        ("top_p", *llm_rows(n, rows, seed=int(seeds[4]), truncate="top_p")),
        ("draft_truncated", dp, truncate_top_k(dq, max(1, n // 10))),
        ("both", *llm_rows(n, rows, seed=int(seeds[5]), truncate="both")),
        ("ties", *_tied(n, rows, rng)),
        ("float32", *llm_rows(n, rows, seed=int(seeds[6]), dtype=np.float32)),
    ]
    return out


def report(claim: str, **measured) -> None:
    """Print a check's measured worst case (shown by ``pytest -s`` or ``-rA``)."""
    values = ", ".join(f"{key} = {value:.3g}" if isinstance(value, float) else f"{key} = {value}" for key, value in measured.items())
    print(f"[{claim}] {values}")
