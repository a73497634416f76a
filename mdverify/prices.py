"""Budgets by price (SPEC section 10, claim C12): drafted chains and batches.

One price nu for a request replaces a budget per position. A row at price nu takes the point
of its frontier A(eps) with slope nu (``md.mentor(..., price=nu)``); from that:

- **chains** (``plan_chain``): drafts j = 1..k are verified in order and position j counts
  only when every earlier draft was accepted, so the expected number of accepted drafts is
  sum_j prod_{i<=j} A_i and the expected divergence spent sum_j (prod_{i<j} A_i) eps_j.
  Maximising their difference, accepted - nu spent, is solved exactly backwards: V_{k+1} = 0,
  position j takes its row optimum at the effective price nu / (1 + V_{j+1}), and
  V_j = A_j (1 + V_{j+1}) - nu eps_j. Earlier positions pay less.
- **batches** (``allocate``): maximising sum_j A_j(eps_j) under sum_j w_j eps_j <= E is
  solved by one price nu, row j taking price nu w_j, found so that the budgets add up to E;
  the rows given budget then have equal slopes lam_j / w_j = nu.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mdverify.api import RatioIndex, mentor
from mdverify.divergences import Divergence
from mdverify.divergences import divergence as lookup
from mdverify.validate import as_distributions, as_pair, as_prices


@dataclass(frozen=True)
class ChainPlan:
    """Budgets of drafted chains at one price per chain.

    Attributes
    ----------
    eps, acceptance : ndarray, shape (B, k)
        The budget each position takes and the acceptance it buys.
    expected_accepted : ndarray, shape (B,)
        sum_j prod_{i<=j} A_i, the expected number of accepted drafts.
    expected_divergence : ndarray, shape (B,)
        sum_j (prod_{i<j} A_i) eps_j, the expected divergence spent by the chain's emitted tokens.
    """

    eps: np.ndarray
    acceptance: np.ndarray
    expected_accepted: np.ndarray
    expected_divergence: np.ndarray


def chain_shapes(target_probs, draft_probs) -> tuple[np.ndarray, np.ndarray]:
    """target (B, k + 1, n) and draft (B, k, n), checked as distributions with matching shapes."""
    target = as_distributions(target_probs, "target_probs")
    draft = as_distributions(draft_probs, "draft_probs")
    check_chain_shapes(target.shape, draft.shape)
    return target, draft


def check_chain_shapes(target: tuple[int, ...], draft: tuple[int, ...]) -> None:
    """Refuse shapes other than target (B, k + 1, n) and draft (B, k, n)."""
    if len(target) != 3 or len(draft) != 3:
        raise ValueError(f"target_probs must have shape (B, k + 1, n) and draft_probs (B, k, n), got "
                         f"{target} and {draft}")
    rows, positions, n = draft
    if target != (rows, positions + 1, n):
        raise ValueError(f"target_probs must have shape (B, k + 1, n) = {(rows, positions + 1, n)} to match "
                         f"draft_probs {draft}, got {target}")


def _spent(price: np.ndarray, eps: np.ndarray) -> np.ndarray:
    """price * eps, with 0 where eps is 0 (an infinite price buys nothing and spends nothing)."""
    return np.where(eps > 0, price * eps, 0.0)


def plan_chain(target_probs, draft_probs, price, divergence: str | Divergence = "kl") -> ChainPlan:
    """The budgets that maximise accepted drafts minus ``price`` times divergence spent, per chain.

    Parameters
    ----------
    target_probs : array_like, shape (B, k + 1, n)
    draft_probs : array_like, shape (B, k, n)
    price : float or array_like of shape (B,)
        nu > 0 per chain (inf: lossless).
    divergence : str or Divergence

    Returns
    -------
    ChainPlan

    Examples
    --------
    >>> import numpy as np, mdverify as md
    >>> P = np.array([[[0.6, 0.4], [0.5, 0.5], [0.5, 0.5]]]); Q = np.array([[[0.3, 0.7], [0.2, 0.8]]])
    >>> plan = md.plan_chain(P, Q, price=2.0, divergence="kl")
    >>> bool(plan.eps[0, 0] >= plan.eps[0, 1])                  # the first position pays less
    True
    """
    entry = lookup(divergence)
    target, draft = chain_shapes(target_probs, draft_probs)
    rows, positions, _ = draft.shape
    prices = as_prices(price, (rows,))
    eps = np.empty((rows, positions))
    acceptance = np.empty((rows, positions))
    value = np.zeros(rows)  # V_{j+1}
    for j in reversed(range(positions)):
        res = mentor(target[:, j], draft[:, j], price=prices / (1.0 + value), divergence=entry)
        eps[:, j] = res.divergence_value
        acceptance[:, j] = res.acceptance
        value = acceptance[:, j] * (1.0 + value) - _spent(prices, eps[:, j])
    reached = np.cumprod(np.concatenate([np.ones((rows, 1)), acceptance[:, :-1]], axis=1), axis=1)
    return ChainPlan(eps=eps, acceptance=acceptance, expected_accepted=(reached * acceptance).sum(1),
                     expected_divergence=(reached * eps).sum(1))


@dataclass(frozen=True)
class Allocation:
    """Budgets of a batch of rows under one total.

    Attributes
    ----------
    eps, acceptance : ndarray, shape (B,)
    price : float
        nu: every row given budget has lam_j = nu w_j; 0 when the total does not bind.
    total_acceptance : float
    """

    eps: np.ndarray
    acceptance: np.ndarray
    price: float
    total_acceptance: float


#: Relative agreement of sum w_j eps_j with the total at which the price search stops.
TOTAL_TOLERANCE = 1e-13


def allocate(P, Q, total: float, divergence: str | Divergence = "kl", weights=None) -> Allocation:
    """Budgets eps_j maximising sum_j A_j(eps_j) subject to sum_j w_j eps_j <= total.

    The price nu is found by bisection on log nu until the weighted budgets add up to ``total``
    within TOTAL_TOLERANCE relative, each step reading every row's budget at price nu w_j off
    its frontier (``RatioIndex.budget_at_price``, built once per row); where a
    row's budget jumps at the final price (tv, whose frontier is a straight line), the rest of
    the total goes to the rows that jump, in proportion to their jumps.

    Parameters
    ----------
    P, Q : array_like, shape (B, n)
    total : float
        E >= 0.
    weights : array_like of shape (B,), optional
        w_j > 0 (default 1).
    """
    entry = lookup(divergence)
    p, q = as_pair(P, Q)
    if p.ndim != 2:
        raise ValueError(f"allocate takes a batch of rows, P and Q of shape (B, n), got {p.shape}")
    rows = p.shape[0]
    if not (isinstance(total, (int, float, np.integer, np.floating)) and total >= 0 and np.isfinite(total)):
        raise ValueError(f"total must be a finite number >= 0, got {total!r}")
    if weights is None:
        w = np.ones(rows)
    else:
        w = np.asarray(weights, dtype=np.float64) if np.asarray(weights).dtype.kind in "iuf" else None
        if w is None or w.shape != (rows,) or not np.all(w > 0) or not np.all(np.isfinite(w)):
            raise ValueError(f"weights must be {rows} finite numbers > 0, one per row, got {weights!r}")

    unlimited = mentor(p, q, np.inf, entry)
    if np.sum(w * unlimited.divergence_value) <= total:  # the total does not bind: every row at its limit
        return Allocation(unlimited.divergence_value, unlimited.acceptance, 0.0, float(unlimited.acceptance.sum()))
    if total == 0:
        lossless = mentor(p, q, 0.0, entry)
        return Allocation(np.zeros(rows), lossless.acceptance, np.inf, float(lossless.acceptance.sum()))
    indexes = [RatioIndex(p[j], q[j]) for j in range(rows)]  # each price then costs O(log n) per row

    def budgets(nu: float) -> np.ndarray:
        return np.array([index.budget_at_price(entry, nu * w[j]) for j, index in enumerate(indexes)])

    lo, hi = 1.0, 1.0  # lo spends more than the total, hi no more
    while w @ budgets(lo) <= total:
        lo /= 16.0
    while w @ budgets(hi) > total:
        hi *= 16.0
    for _ in range(200):
        mid = np.sqrt(lo * hi)
        if not lo < mid < hi:
            break
        spent = w @ budgets(mid)
        if spent > total:
            lo = mid
        else:
            hi = mid
            if total - spent <= TOTAL_TOLERANCE * total:
                break
    eps = budgets(hi)
    spent = w @ eps
    if total - spent > TOTAL_TOLERANCE * total:  # budgets that jump at the price: share the rest
        jump = np.maximum(budgets(lo) - eps, 0.0)
        eps += jump * min((total - spent) / float(w @ jump), 1.0)
    res = mentor(p, q, eps, entry)
    return Allocation(eps, res.acceptance, float(hi), float(res.acceptance.sum()))
