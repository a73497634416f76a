"""Mentored chain verification (SPEC C10): the kernels behind ``md.verify``.

For each row, positions j = 0..k-1 in turn: the mentored r_j of (target_j, draft_j) is solved
exactly, the drafted token x_j is kept with probability min(1, r_j(x_j) / q_j(x_j)), and at
the first rejection a token is drawn from norm((r_j - q_j)_+) and the row stops. If every
drafted token is kept, a bonus token is drawn from the target at position k. Each emitted
token is then distributed as r_j (or as the bonus target), exactly.

Randomness comes in as uniforms of shape (B, k + 1, 2): [j, 0] decides acceptance at j and
[j, 1] draws the replacement (or, at j = k, the bonus), so results are reproducible and
independent of the thread count.
"""

import numpy as np
from numba import prange

from mdverify.core.jit import kernel
from mdverify.core.mentor import FIELDS, mentor_row_by, price_row_by


@kernel
def draw(weights, u):
    """The index i with cumsum(weights)[i - 1] <= u * sum(weights) < cumsum(weights)[i] (float64 scan)."""
    total = 0.0
    for i in range(weights.size):
        total += max(weights[i], 0.0)
    target = u * total
    running = 0.0
    last = -1
    for i in range(weights.size):
        w = max(weights[i], 0.0)
        if w > 0.0:
            last = i
            running += w
            if target < running:
                return i
    return last  # u * total reached the end through rounding


@kernel
def _emit(target, draft, tokens, j, r, uniforms, out_tokens, residual):
    """Position j with its mentored r: keep the draft (True) or write the replacement (False)."""
    x = tokens[j]
    qx = np.float64(draft[j, x])
    if uniforms[j, 0] * qx < r[x]:  # accept with probability min(1, r(x) / q(x))
        out_tokens[j] = x
        return True
    for i in range(r.size):
        residual[i] = r[i] - np.float64(draft[j, i])
    choice = draw(residual, uniforms[j, 1])
    out_tokens[j] = choice if choice >= 0 else draw(r, uniforms[j, 1])
    return False


@kernel
def verify_row(target, draft, tokens, eps, kind, alpha, method, uniforms, out_tokens, r, fields, residual, work):
    """Chain verification of one row; returns the number of accepted draft tokens.

    target: (k + 1, n), draft: (k, n), tokens: (k,) int64 with -1 padding at the end; eps: (k,)
    float64, the budget of each position; out_tokens: (k + 1,) receives the emitted tokens, -1
    after the last; r, residual: (n,)
    float64 scratch; fields: (7,) float64 scratch; work: (4, n) float64 workspace.
    """
    k = tokens.size
    out_tokens[:] = -1
    for j in range(k):
        x = tokens[j]
        if x < 0:  # the draft ended early: the bonus comes from the target at this position
            out_tokens[j] = draw(target[j], uniforms[j, 1])
            return j
        mentor_row_by(method, target[j], draft[j], eps[j], kind, alpha, r, fields, work)
        if not _emit(target, draft, tokens, j, r, uniforms, out_tokens, residual):
            return j
    out_tokens[k] = draw(target[k], uniforms[k, 1])
    return k


@kernel
def verify_row_priced(target, draft, tokens, price, kind, alpha, method, uniforms, out_tokens, rs, fields, residual,
                      work, eps):
    """``verify_row`` with the budgets of ``md.plan_chain`` at ``price``, in one pass back and one forth.

    Backwards, position j takes the optimum at the effective price price / (1 + V_{j+1}) and
    V_j = A_j (1 + V_{j+1}) - price eps_j (SPEC section 10), its r kept in ``rs`` (k, n) and its
    budget in ``eps`` (k,); forwards, the drafts are verified with those r, none solved twice.
    """
    k = tokens.size
    value = 0.0
    for j in range(k - 1, -1, -1):
        price_row_by(method, target[j], draft[j], price / (1.0 + value), kind, alpha, rs[j], fields, work)
        eps[j] = fields[6]
        value = fields[0] * (1.0 + value) - (price * eps[j] if eps[j] > 0.0 else 0.0)
    out_tokens[:] = -1
    for j in range(k):
        if tokens[j] < 0:
            out_tokens[j] = draw(target[j], uniforms[j, 1])
            return j
        if not _emit(target, draft, tokens, j, rs[j], uniforms, out_tokens, residual):
            return j
    out_tokens[k] = draw(target[k], uniforms[k, 1])
    return k


@kernel(parallel=True)
def verify_rows(target, draft, tokens, eps, kind, alpha, method, uniforms, out_tokens, num_accepted, work):
    """``verify_row`` over a batch (B rows) in parallel; eps has shape (B, k), ``work`` (chunks, 4, n)."""
    rows = target.shape[0]
    chunks = work.shape[0]
    if chunks == 1:  # one chunk: no parallel region to start (as in mentor_rows)
        _verify_chunk(target, draft, tokens, eps, kind, alpha, method, uniforms, out_tokens, num_accepted, work[0], 0,
                      rows)
        return
    for c in prange(chunks):
        _verify_chunk(target, draft, tokens, eps, kind, alpha, method, uniforms, out_tokens, num_accepted, work[c],
                      c * rows // chunks, (c + 1) * rows // chunks)


@kernel
def _verify_chunk(target, draft, tokens, eps, kind, alpha, method, uniforms, out_tokens, num_accepted, work, first,
                  end):
    """``verify_row`` for rows [first, end) with one workspace."""
    n = target.shape[2]
    r = np.empty(n, np.float64)
    residual = np.empty(n, np.float64)
    fields = np.empty(len(FIELDS), np.float64)
    for b in range(first, end):
        num_accepted[b] = verify_row(target[b], draft[b], tokens[b], eps[b], kind, alpha, method, uniforms[b],
                                     out_tokens[b], r, fields, residual, work)


@kernel(parallel=True)
def verify_rows_priced(target, draft, tokens, prices, kind, alpha, method, uniforms, out_tokens, num_accepted, eps,
                       work):
    """``verify_row_priced`` over a batch in parallel; prices (B,), eps (B, k) receives the plans' budgets."""
    rows = target.shape[0]
    chunks = work.shape[0]
    if chunks == 1:  # as in verify_rows
        _verify_priced_chunk(target, draft, tokens, prices, kind, alpha, method, uniforms, out_tokens, num_accepted,
                             eps, work[0], 0, rows)
        return
    for c in prange(chunks):
        _verify_priced_chunk(target, draft, tokens, prices, kind, alpha, method, uniforms, out_tokens, num_accepted,
                             eps, work[c], c * rows // chunks, (c + 1) * rows // chunks)


@kernel
def _verify_priced_chunk(target, draft, tokens, prices, kind, alpha, method, uniforms, out_tokens, num_accepted, eps,
                         work, first, end):
    """``verify_row_priced`` for rows [first, end) with one workspace."""
    rs = np.empty((draft.shape[1], target.shape[2]), np.float64)
    residual = np.empty(target.shape[2], np.float64)
    fields = np.empty(len(FIELDS), np.float64)
    for b in range(first, end):
        num_accepted[b] = verify_row_priced(target[b], draft[b], tokens[b], prices[b], kind, alpha, method,
                                            uniforms[b], out_tokens[b], rs, fields, residual, work, eps[b])
