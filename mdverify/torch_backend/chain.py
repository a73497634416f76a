"""Mentored chain verification (SPEC C10) as one batched tensor program.

Every drafted position of every chain is solved at once (``solve_rows`` on B k rows); then,
with the uniforms of ``md.verify`` ([j, 0] decides acceptance at j, [j, 1] draws the
replacement or the bonus), the draft at j is kept when u q_j(x_j) < r_j(x_j), a chain stops at
its first rejection, and its last token is drawn by inverse CDF from norm((r_j - q_j)_+) there,
or from the target where the draft ended or every draft was kept. The same uniforms give the
same tokens as the numba kernels (``core.verify``), up to ties of the float64 scans.
"""

from __future__ import annotations

import torch

from mdverify.torch_backend.solve import Generator, solve_rows


def draw(weights: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Per row of (B, n) ``weights`` (negative entries count as 0), the index i with
    cumsum[i - 1] <= u * total < cumsum[i], as ``core.verify.draw``; the last positive index
    where rounding reaches the end, -1 where no weight is positive."""
    w = weights.clamp(min=0.0)
    running = torch.cumsum(w, -1)
    choice = torch.searchsorted(running, (u * running[:, -1])[:, None], right=True)[:, 0]
    positions = torch.arange(w.shape[-1], device=w.device)
    last = torch.where(w > 0, positions, -1).amax(-1)
    return torch.where(choice < w.shape[-1], choice, last)


def verify_chains(target: torch.Tensor, draft: torch.Tensor, tokens: torch.Tensor, budgets: torch.Tensor,
                  uniforms: torch.Tensor, gen: Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(output_token_ids (B, k + 1), num_accepted (B,)) for checked target (B, k + 1, n), draft
    (B, k, n), tokens (B, k) int64 with -1 padding, budgets (B, k) and uniforms (B, k + 1, 2)."""
    rows, k, n = draft.shape
    q = draft.to(torch.float64)
    r, _ = solve_rows(target[:, :k].reshape(rows * k, n).to(torch.float64), q.reshape(rows * k, n),
                      budgets.reshape(-1), gen)
    r = r.reshape(rows, k, n)
    drafted = tokens.clamp(min=0)[..., None]
    kept = (tokens >= 0) & (uniforms[:, :k, 0] * q.gather(-1, drafted)[..., 0] < r.gather(-1, drafted)[..., 0])
    accepted = torch.cumprod(kept.long(), -1).sum(-1)

    # The last token: a residual draw at the first rejection, else from the target.
    batch = torch.arange(rows, device=draft.device)
    at = accepted.clamp(max=k - 1)
    rejected = (accepted < k) & (tokens[batch, at] >= 0)
    r_at = r[batch, at]
    residual = r_at - q[batch, at]
    residual = torch.where((residual.clamp(min=0.0).sum(-1) > 0)[:, None], residual, r_at)
    weights = torch.where(rejected[:, None], residual, target[batch, accepted].to(torch.float64))
    last = draw(weights, uniforms[batch, accepted, 1])

    positions = torch.arange(k + 1, device=draft.device)
    out = torch.where(positions[:k] < accepted[:, None], tokens, -1)
    out = torch.cat([out, torch.full_like(out[:, :1], -1)], -1)
    out = torch.where(positions == accepted[:, None], last[:, None], out)
    return out, accepted
