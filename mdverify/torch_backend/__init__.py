"""``mentor`` and ``verify`` for torch tensors on any device, as batched tensor programs.

The numba kernels stay the reference; this backend computes the same optima (to 1e-12 in
acceptance and r on float64 rows, checked in ``tests/test_torch_backend.py``) where the
logits already are, without copying them to the CPU: the sorted ratio index of SPEC C5 by one
``torch.sort`` per row, the frontier by prefix sums, the budget's segment by a batched search
over the breakpoints and the segment equation by vectorised safeguarded Newton steps
(``solve``). No Python loop runs over rows or tokens. Accumulation is float64 on every device;
float32 rows come back float32, pulled back towards p where rounding took them over the budget,
as ``md.mentor`` does.

``mdverify.torch_adapter`` and ``mdverify.hf`` choose this backend for tensors off the CPU;
``backend="torch"`` chooses it on the CPU too.

Examples
--------
>>> import torch                                                          # doctest: +SKIP
>>> from mdverify import torch_backend as mdt                             # doctest: +SKIP
>>> p = torch.tensor([0.7, 0.2, 0.1], device="cuda")                      # doctest: +SKIP
>>> res = mdt.mentor(p, torch.tensor([0.2, 0.5, 0.3], device="cuda"), 0.1, "tv")  # doctest: +SKIP
>>> res.acceptance                                                        # doctest: +SKIP
tensor(0.6000, device='cuda:0', dtype=torch.float64)
"""

from __future__ import annotations

import numpy as np
import torch

from mdverify.api import ROUNDING_FIRST_STEP, STEP_GROWTH, MentorResult
from mdverify.core.mentor import FIELDS
from mdverify.divergences import Divergence
from mdverify.divergences import divergence as lookup
from mdverify.prices import check_chain_shapes
from mdverify.torch_backend.chain import verify_chains
from mdverify.torch_backend.inputs import distributions, generator, host, on, pair, ratios
from mdverify.torch_backend.solve import Generator, divergence_rows, solve_rows
from mdverify.validate import as_budgets
from mdverify.verification import chain_budgets, refuse_undrafted, token_ids, uniforms_for

__all__ = ["mentor", "verify"]

def mentor(p, q, eps, divergence: str | Divergence = "kl") -> MentorResult:
    """``md.mentor`` for tensors on any device: the same optimum, every field a tensor there.

    Parameters
    ----------
    p, q : torch.Tensor, shape (..., n)
        float32 or float64 distributions on one device.
    eps : float or tensor or array_like broadcastable to (...)
        Budgets, >= 0 (inf allowed).
    divergence : str or Divergence
        Any divergence ``md.mentor`` takes, user-defined generators included.

    Returns
    -------
    MentorResult
        ``r`` in the input's dtype, the other fields float64, all on the input's device.
    """
    entry = lookup(divergence)
    gen = generator(entry)
    p, q = pair(p, q)
    batch_shape, n = tuple(p.shape[:-1]), p.shape[-1]
    budgets = on(p.device, as_budgets(host(eps), batch_shape))
    P, Q = p.reshape(-1, n).to(torch.float64), q.reshape(-1, n).to(torch.float64)
    R, fields = solve_rows(P, Q, budgets, gen, p.dtype)
    if p.dtype != torch.float64:
        R = _rounded_within_budget(R, P, Q, fields, budgets, gen, p.dtype)
    columns = {name: fields[:, j].reshape(batch_shape) for j, name in enumerate(FIELDS)}
    return MentorResult(r=R.reshape(p.shape), **columns)


def _rounded_within_budget(R, P, Q, fields, budgets, gen: Generator, dtype) -> torch.Tensor:
    """R rounded to ``dtype`` towards P (``core.mentor.construct``: no term of D grows), rows that
    the float64 sum of D still finds over their budget pulled back along the segment to p
    (``api._pull_back``: theta = min(1, eps / D)(1 - step), steps growing from
    ROUNDING_FIRST_STEP by STEP_GROWTH, p itself at the end); ``fields`` then describe the returned rows."""
    rounded = R.to(dtype)
    back = rounded.to(torch.float64)
    away = ((back < R) & (R < P)) | ((back > R) & (R > P))  # rounded to nearest, away from p
    rounded = torch.where(away, torch.nextafter(rounded, P.to(dtype)), rounded)
    change = torch.where(R > P, rounded.to(torch.float64) - R, 0.0).sum(-1)  # to sum (r - p)_+ and sum min(r, q)
    fields[:, 0] += change
    fields[:, 1] += change
    values = divergence_rows(rounded.to(torch.float64), P, gen)
    pending = values > budgets
    pulled = pending.clone()
    if bool(pending.any()):
        start = rounded.to(torch.float64)
        scale = torch.where(values > 0, torch.clamp(budgets / values, max=1.0), 1.0)[:, None]
        step = ROUNDING_FIRST_STEP
        while step < 1.0 and bool(pending.any()):
            candidate = (P + scale * (1.0 - step) * (start - P)).to(dtype)
            candidate_values = divergence_rows(candidate.to(torch.float64), P, gen)
            accept = pending & (candidate_values <= budgets)
            rounded = torch.where(accept[:, None], candidate, rounded)
            values = torch.where(accept, candidate_values, values)
            pending = pending & ~accept
            step *= STEP_GROWTH
        rounded = torch.where(pending[:, None], P.to(dtype), rounded)
        values = torch.where(pending, 0.0, values)
        r = rounded.to(torch.float64)
        fields[:, 0] = torch.where(pulled, torch.minimum(r, Q).sum(-1), fields[:, 0])
        fields[:, 1] = torch.where(pulled, (r - P).clamp(min=0.0).sum(-1), fields[:, 1])
    fields[:, 6] = values
    return rounded


def verify(target_probs, draft_probs, draft_token_ids, eps, divergence: str | Divergence = "kl", seed=None,
           uniforms=None) -> tuple[torch.Tensor, torch.Tensor]:
    """``md.verify`` for tensors on any device: (output_token_ids (B, k + 1), num_accepted (B,)),
    int64 tensors on the inputs' device.

    The arguments are those of ``md.verify`` (eps per chain (B,) or per position (B, k));
    budgets, ids and uniforms are small and checked on the CPU, the distributions where they
    are. With the same ``uniforms`` the tokens are those of ``md.verify``.
    """
    entry = lookup(divergence)
    gen = generator(entry)
    target, draft = distributions(target_probs, "target_probs"), distributions(draft_probs, "draft_probs")
    check_chain_shapes(tuple(target.shape), tuple(draft.shape))
    if target.device != draft.device:
        raise ValueError(f"target_probs is on {target.device} and draft_probs on {draft.device}; put both on one device")
    rows, positions, n = draft.shape
    ratios(target[:, :positions], draft, ("target_probs", "draft_probs"))
    ids = token_ids(host(draft_token_ids), n, (rows, positions))
    tokens = on(draft.device, ids, torch.long)
    unlikely = (tokens >= 0) & (draft.gather(-1, tokens.clamp(min=0)[..., None])[..., 0] == 0)
    if bool(unlikely.any()):
        refuse_undrafted(unlikely.cpu().numpy()[ids >= 0], *np.nonzero(ids >= 0), ids)
    budgets = chain_budgets(host(eps), rows, positions)
    u = uniforms_for(seed, host(uniforms), (rows, positions + 1, 2))
    return verify_chains(target, draft, tokens, on(draft.device, budgets), on(draft.device, u), gen)
