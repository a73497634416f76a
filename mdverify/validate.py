"""Input checking for the public API: every problem is a ValueError that names the row.

Nothing reaches a numba kernel unchecked, and nothing is silently clipped or renormalised.
"""

from __future__ import annotations

import math

import numpy as np

#: How much of a user's text an error message quotes.
QUOTED = 80

#: How far a row's sum may stray from 1, by input precision.
SUM_TOLERANCE = {np.dtype(np.float64): 1e-6, np.dtype(np.float32): 1e-4}


def quoted(text: str) -> str:
    """Text as an error message shows it: whole when short, else its start and its length."""
    return repr(text) if len(text) <= QUOTED else f"{text[:QUOTED]!r}... ({len(text)} characters)"


def _row_name(label: str, batch_shape: tuple[int, ...], flat_row: int) -> str:
    if not batch_shape:
        return label
    index = np.unravel_index(flat_row, batch_shape)
    where = index[0] if len(index) == 1 else tuple(int(i) for i in index)
    return f"{label} row {where}"


def as_distributions(x, label: str) -> np.ndarray:
    """``x`` as a float32/float64 array of shape (..., n) whose rows are distributions."""
    try:
        arr = np.asarray(x)
    except Exception as exc:  # ragged lists and the like
        raise ValueError(f"{label} is not an array of numbers: {exc}") from None
    if arr.dtype.kind not in "fiub":
        raise ValueError(f"{label} must hold real numbers, got dtype {arr.dtype}")
    if arr.dtype not in SUM_TOLERANCE:  # other byte orders keep their precision; integers become float64
        arr = arr.astype(np.float32 if arr.dtype.kind == "f" and arr.dtype.itemsize <= 4 else np.float64)
    if arr.ndim == 0:
        raise ValueError(f"{label} must have shape (..., n), got a scalar")
    if arr.shape[-1] == 0:
        raise ValueError(f"{label} has an empty last axis: a distribution needs n >= 1 tokens")
    batch_shape = arr.shape[:-1]
    rows = arr.reshape(-1, arr.shape[-1])
    if _rows_valid(rows, SUM_TOLERANCE[arr.dtype]):
        return arr
    bad = ~np.isfinite(rows)
    if bad.any():
        row, col = np.argwhere(bad)[0]
        raise ValueError(f"{_row_name(label, batch_shape, row)} has a non-finite entry {rows[row, col]} at index {col}")
    negative = rows < 0
    if negative.any():
        row, col = np.argwhere(negative)[0]
        raise ValueError(f"{_row_name(label, batch_shape, row)} has a negative entry {rows[row, col]:.3g} at index {col}")
    with np.errstate(over="ignore"):  # entries near the float maximum: the sum is inf, refused below
        sums = rows.sum(axis=-1, dtype=np.float64)
    tol = SUM_TOLERANCE[arr.dtype]
    off = np.abs(sums - 1.0) > tol
    if off.any():
        row = int(np.argmax(off))
        raise ValueError(f"{_row_name(label, batch_shape, row)} sums to {sums[row]:.10g}, not 1 (tolerance {tol:g} for {arr.dtype})")
    return arr


def _rows_valid(rows: np.ndarray, tolerance: float) -> bool:
    """Every row finite, non-negative and summing to 1 within ``tolerance``, in two vectorised
    passes (a nan or inf entry makes its row's sum nan or inf, and its minimum nan or negative).

    False sends the caller to the checks that name what is wrong.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        sums = rows.sum(axis=-1, dtype=np.float64)
        minima = rows.min(axis=-1)
    return bool(np.all(minima >= 0) and np.all(np.abs(sums - 1.0) <= tolerance))


def as_pair(p, q, labels: tuple[str, str] = ("p", "q")) -> tuple[np.ndarray, np.ndarray]:
    """Two distributions with matching shapes, in one common float dtype."""
    p = as_distributions(p, labels[0])
    q = as_distributions(q, labels[1])
    if p.shape != q.shape:
        raise ValueError(f"{labels[0]} and {labels[1]} must have the same shape, got {p.shape} and {q.shape}")
    dtype = np.result_type(p.dtype, q.dtype)
    return p.astype(dtype, copy=False), q.astype(dtype, copy=False)


def check_ratios(p: np.ndarray, q: np.ndarray, labels: tuple[str, str] = ("p", "q")) -> None:
    """Refuse entries whose ratio q/p overflows float64 although p > 0 (p subnormal).

    The kernels work with ratios; such a token would be taken for one the target excludes
    (p = 0), which changes the problem (for reverse_kl it makes an infinite divergence free).
    Only p below the smallest normal float can overflow a ratio of a distribution's q.
    """
    tiny = (p > 0) & (p < np.finfo(np.float64).tiny)
    if not tiny.any():
        return
    where = np.argwhere(tiny)
    with np.errstate(over="ignore"):
        ratio = q[tuple(where.T)].astype(np.float64) / p[tuple(where.T)].astype(np.float64)
    overflow = np.isinf(ratio)
    if overflow.any():
        index = tuple(int(i) for i in where[np.argmax(overflow)])
        batch_shape = p.shape[:-1]
        flat_row = int(np.ravel_multi_index(index[:-1], batch_shape)) if batch_shape else 0
        raise ValueError(f"{_row_name(labels[0], batch_shape, flat_row)} has {p[index]:.3g} at index {index[-1]} where "
                         f"{labels[1]} has {q[index]:.3g}: their ratio overflows float64, so the token cannot be told "
                         f"from one {labels[0]} excludes; set it to 0 (excluded) or to at least "
                         f"{np.finfo(np.float64).tiny:.3g}")


def _per_row(values, name: str, batch_shape: tuple[int, ...], kinds: str) -> np.ndarray:
    """``values`` (numbers of the dtype kinds ``kinds``, never text) broadcast to the batch shape, flat float64."""
    if type(values) in (float, int):  # the common case, one Python number: no array conversions
        return np.full(int(np.prod(batch_shape, dtype=np.int64)), float(values))
    if np.asarray(values).dtype.kind not in kinds:  # not strings, whose conversion numpy would allow
        raise ValueError(f"{name} must be a number or an array of numbers, got {values!r}")
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number or an array of numbers, got {values!r}") from None
    try:
        arr = np.broadcast_to(arr, batch_shape)
    except ValueError:
        raise ValueError(f"{name} of shape {arr.shape} does not broadcast to the batch shape {batch_shape}") from None
    return np.ascontiguousarray(arr.reshape(-1))


def _refuse_first(bad: np.ndarray, flat: np.ndarray, name: str, batch_shape: tuple[int, ...], rule: str) -> None:
    if bad.any():
        row = int(np.argmax(bad))
        raise ValueError(f"{_row_name(name, batch_shape, row)} is {flat[row]}; {rule}")


def as_budgets(eps, batch_shape: tuple[int, ...]) -> np.ndarray:
    """Budgets broadcast to the batch shape, as float64; each >= 0 (inf allowed), never nan."""
    if type(eps) in (float, int) and eps >= 0:  # the common case, checked without array operations
        return np.full(math.prod(batch_shape), float(eps))
    flat = _per_row(eps, "eps", batch_shape, "iufb")
    _refuse_first(np.isnan(flat) | (flat < 0), flat, "eps", batch_shape, "budgets must be >= 0 (inf allowed), not nan")
    return flat


def as_prices(price, batch_shape: tuple[int, ...]) -> np.ndarray:
    """Prices broadcast to the batch shape, as float64; each > 0 (inf allowed), never nan."""
    flat = _per_row(price, "price", batch_shape, "iuf")
    _refuse_first(~(flat > 0), flat, "price", batch_shape, "prices must be > 0 (inf allowed), not nan")
    return flat
