"""``md.verify``: mentored verification of drafted token chains for a batch (SPEC C10, section 9)."""

from __future__ import annotations

import numpy as np

from mdverify.api import _solver, _workspace
from mdverify.divergences import Divergence
from mdverify.divergences import divergence as lookup
from mdverify.prices import chain_shapes
from mdverify.validate import as_budgets, as_prices, check_ratios


def verify(target_probs, draft_probs, draft_token_ids, eps=None, divergence: str | Divergence = "kl", seed=None,
           uniforms=None, method: str = "auto", *, price=None) -> tuple[np.ndarray, np.ndarray]:
    """Verify drafted chains with the mentored distribution of every position.

    Parameters
    ----------
    target_probs : array_like, shape (B, k + 1, n)
        Target distributions at the k drafted positions and at the bonus position.
    draft_probs : array_like, shape (B, k, n)
        Drafter distributions the tokens were drawn from.
    draft_token_ids : array_like of int, shape (B, k)
        Drafted tokens; a row whose draft is shorter ends with -1 entries.
    eps : float, array_like of shape (B,) or (B, k)
        Budget per row or per position (>= 0; 0 is lossless speculative sampling).
    divergence : str or Divergence
    seed : int, optional
        Seed of the uniforms (ignored when ``uniforms`` is given).
    uniforms : array_like, shape (B, k + 1, 2), optional
        Explicit uniforms in [0, 1): [b, j, 0] decides acceptance at position j, [b, j, 1]
        draws the replacement token (or, at j = k, the bonus token).
    method : {"auto", "sorted", "select"}
        The solver of each position's mentored distribution (see ``md.mentor``).
    price : float or array_like of shape (B,), optional
        Instead of ``eps``: one price per chain, whose budgets ``md.plan_chain`` sets
        (position j at the effective price nu / (1 + V_{j+1}); SPEC section 10).

    Returns
    -------
    output_token_ids : ndarray of int64, shape (B, k + 1)
        The accepted draft tokens, then the replacement or bonus token, then -1.
    num_accepted : ndarray of int64, shape (B,)

    Examples
    --------
    >>> import numpy as np, mdverify as md
    >>> p = np.array([[[0.6, 0.4], [0.5, 0.5]]])          # B = 1, k = 1, n = 2
    >>> q = np.array([[[0.3, 0.7]]])
    >>> out, accepted = md.verify(p, q, [[1]], eps=0.0, uniforms=[[[0.1, 0.5], [0.2, 0.9]]])
    >>> out.tolist(), accepted.tolist()
    ([[1, 1]], [1])
    """
    entry = lookup(divergence)
    target, draft = chain_shapes(target_probs, draft_probs)
    rows, positions, n = draft.shape
    check_ratios(target[:, :positions], draft, labels=("target_probs", "draft_probs"))
    tokens = _token_ids(draft_token_ids, draft, (rows, positions))
    if (eps is None) == (price is None):
        raise ValueError("give exactly one of eps (a budget per row or position) and price (a price per chain)")
    if price is None:
        budgets = chain_budgets(eps, rows, positions)
    else:
        prices = as_prices(price, (rows,))
    u = uniforms_for(seed, uniforms, (rows, positions + 1, 2))
    dtype = np.result_type(target.dtype, draft.dtype)
    target = np.ascontiguousarray(target, dtype)
    draft = np.ascontiguousarray(draft, dtype)
    out = np.empty((rows, positions + 1), np.int64)
    accepted = np.empty(rows, np.int64)
    solver = _solver(method, n)
    work = _workspace(solver, rows, n)
    if price is None:
        entry.kernels.verify_rows(target, draft, tokens, np.ascontiguousarray(budgets), entry.kind, entry.param, solver,
                                  u, out, accepted, work)
    else:  # md.plan_chain's budgets, planned and verified in one kernel call
        entry.kernels.verify_rows_priced(target, draft, tokens, prices, entry.kind, entry.param, solver, u, out,
                                         accepted, np.empty((rows, positions)), work)
    return out, accepted


def chain_budgets(eps, rows: int, positions: int) -> np.ndarray:
    """Budgets of shape (B, k) from a number, one per row (B,) or one per position (B, k)."""
    per_row = np.ndim(eps) == 1  # (B,): one budget for each row's positions
    return as_budgets(np.asarray(eps)[:, None] if per_row else eps, (rows, positions)).reshape(rows, positions)


def _token_ids(ids, draft: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """Drafted ids as int64 (B, k): in [0, n) then only -1, each with positive draft probability."""
    arr = token_ids(ids, draft.shape[-1], shape)
    rows, cols = np.nonzero(arr >= 0)
    refuse_undrafted(draft[rows, cols, arr[rows, cols]] == 0, rows, cols, arr)
    return arr


def refuse_undrafted(zero: np.ndarray, rows: np.ndarray, cols: np.ndarray, ids: np.ndarray) -> None:
    """Name the first drafted token (at ``rows``, ``cols`` of ``ids``) whose draft probability is 0."""
    if zero.any():
        row, col = rows[np.argmax(zero)], cols[np.argmax(zero)]
        raise ValueError(f"draft_token_ids row {row} drafted token {ids[row, col]} at position {col}, "
                         "which the drafter gives probability 0")


def token_ids(ids, n: int, shape: tuple[int, int]) -> np.ndarray:
    """Drafted ids as int64 (B, k): in [0, n) then only -1.

    Checked in the ids' own dtype before any cast, so that no id wraps (2**64 - 1 as uint64
    is not -1) and non-integral or non-finite floats are named rather than truncated.
    """
    try:
        arr = np.asarray(ids)
    except Exception as exc:
        raise ValueError(f"draft_token_ids is not an array of integers: {exc}") from None
    if arr.dtype.kind not in "iuf":
        raise ValueError(f"draft_token_ids must hold integers, got dtype {arr.dtype}")
    if arr.shape != shape:
        raise ValueError(f"draft_token_ids must have shape (B, k) = {shape}, got {arr.shape}")
    if arr.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            integral = np.isfinite(arr) & (arr == np.floor(arr))
        if not integral.all():
            row, col = np.argwhere(~integral)[0]
            raise ValueError(f"draft_token_ids row {row} has {arr[row, col].item()!r} at position {col}, not an integer")
    bad = (arr < -1) | (arr >= n)
    if bad.any():
        row, col = np.argwhere(bad)[0]
        raise ValueError(f"draft_token_ids row {row} has token {arr[row, col].item()!r} at position {col}, outside [0, {n})")
    arr = arr.astype(np.int64)
    padding = arr == -1
    if (padding[:, :-1] & ~padding[:, 1:]).any():
        row = int(np.argmax((padding[:, :-1] & ~padding[:, 1:]).any(-1)))
        raise ValueError(f"draft_token_ids row {row} has a token after -1 padding; -1 may only end a row")
    return np.ascontiguousarray(arr)


def uniforms_for(seed, uniforms, shape: tuple[int, int, int]) -> np.ndarray:
    """The uniforms of ``verify``: drawn from ``seed`` (an int or None), or checked as given."""
    if uniforms is None:
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
            raise ValueError(f"seed must be a non-negative integer or None, got {seed!r}")
        return np.random.default_rng(seed).random(shape)
    u = np.asarray(uniforms)
    if u.dtype.kind not in "iuf":
        raise ValueError(f"uniforms must hold real numbers in [0, 1), got dtype {u.dtype}")
    u = u.astype(np.float64)
    if u.shape != shape:
        raise ValueError(f"uniforms must have shape (B, k + 1, 2) = {shape}, got {u.shape}")
    if not ((u >= 0) & (u < 1)).all():
        raise ValueError("uniforms must lie in [0, 1)")
    return np.ascontiguousarray(u)
