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

from mdverify.api import RatioIndex, _checked_pair, _solver, _workspace, mentor
from mdverify.core import walk
from mdverify.core.mentor import FIELDS, SELECT
from mdverify.core.reduce import MERGED, count_undecided, reduce_rows
from mdverify.divergences import Divergence
from mdverify.divergences import divergence as lookup
from mdverify.validate import as_distributions, as_prices


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
        # Validated above: the kernels alone, for the fields (r is never used), on float64 rows.
        p, q = (np.ascontiguousarray(x[:, j], np.float64) for x in (target, draft))
        fields = _solved(p, q, entry, price=prices / (1.0 + value))
        eps[:, j] = fields[:, EPS]
        acceptance[:, j] = fields[:, ACCEPTANCE]
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

    Row j takes the frontier point of slope nu w_j, for the price nu at which the weighted
    budgets add up to ``total`` within TOTAL_TOLERANCE relative (``_search_price``); where a
    row's budget jumps at that price (tv, whose frontier is a straight line), the rest of the
    total goes to the rows that jump, in proportion to their jumps.

    Two batched solves bracket the price: one at equal budgets, one at budgets estimated from
    its slopes (``_other_end``); a row at its limit at the greater budget that binds at the
    bracket's lower end is solved there (``_bind_at``). Between them each row is reduced to the
    tokens whose clip can still change (``core.reduce``), solved at the bracket's ends, reduced
    again between those solutions, and every price the search tries is solved on what is left,
    reduced again as the bracket narrows; a bracket that misses the price moves past its end
    (``_allocate_between``). The solves write no r, only the fields. A row's result is the
    original row's where its thresholds lie within the bounds of the reduction it was found on
    (the merged tokens are then clipped, or released, as merged); the other rows are checked by
    an eps solve of the original rows, and where that disagrees, the search is redone on every
    row's whole frontier (``_allocate_by_frontiers``). tv is solved in closed form
    (``_allocate_straight``).

    Parameters
    ----------
    P, Q : array_like, shape (B, n)
    total : float
        E >= 0.
    weights : array_like of shape (B,), optional
        w_j > 0 (default 1).
    """
    entry = lookup(divergence)
    p, q = (np.ascontiguousarray(x, np.float64) for x in _checked_pair(P, Q))  # float64 optima, never pulled back
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
    if total == 0:
        return _allocation(np.zeros(rows), mentor(p, q, 0.0, entry).acceptance, np.inf)
    if entry == lookup("tv"):
        return _allocate_straight(p, q, w, total, entry)
    even = total / w.sum()
    first = _solved(p, q, entry, eps=even)
    binding = first[:, LAM] > 0
    if not binding.any():  # every row reaches its limit within the even budget: the total does not bind
        return _allocation(first[:, EPS], first[:, ACCEPTANCE], 0.0)
    guess = _guess_price(first, even, w, total)
    second = _solved(p, q, entry, eps=_other_end(first, even, w, guess))
    more = (second[:, EPS] > first[:, EPS])[:, None]
    more, less = np.where(more, second, first), np.where(more, first, second)
    found, vouched = _allocate_between(p, q, w, total, entry, more, less, guess)
    if vouched.all():
        return found
    # The other rows checked on the original rows: a result that no reduction vouches for (a
    # jump shared, a threshold past its bounds) may stray from its original.
    check = found.acceptance.copy()
    check[~vouched] = _solved(p[~vouched], q[~vouched], entry, eps=found.eps[~vouched])[:, ACCEPTANCE]
    if np.allclose(check, found.acceptance, rtol=1e-9, atol=1e-12):
        return _allocation(found.eps, check, found.price)
    return _allocate_by_frontiers(p, q, w, total, entry)


#: Columns of the solution fields (``core.mentor.FIELDS``) used here.
ACCEPTANCE, A, B, LAM, MOVED, EPS = (FIELDS.index(name) for name in
                                     ("acceptance", "a", "b", "lam", "moved_mass", "divergence_value"))
#: Estimated budgets are placed this factor beyond where the price is expected; a bracket of
#: prices that misses the price is moved beyond its end by this factor, then its square...
BRACKET_SPREAD = 2.0
#: The prices searched; beyond them, the allocation at the nearer end.
PRICES = (1e-300, 1e300)
#: The reduced rows are reduced again whenever the price bracket has narrowed this many times (in log).
NARROWING = 8.0


def _solved(p, q, entry: Divergence, eps=None, price=None) -> np.ndarray:
    """The fields (B, 7, in the order of ``FIELDS``) of ``md.mentor``'s solutions of rows that
    ``allocate`` has validated (float64, C-contiguous): its kernels without its checks, which
    on 64 rows of 131072 tokens cost a fifth of a solve each time."""
    rows, n = p.shape
    fields, solver = np.empty((rows, len(FIELDS))), _solver("auto", n)
    solve = entry.kernels.mentor_rows if price is None else entry.kernels.price_rows
    limits = np.broadcast_to(np.asarray(eps if price is None else price, np.float64), (rows,))
    solve(p, q, np.ascontiguousarray(limits), entry.kind, entry.param, solver, np.empty((rows, 0)), fields,
          _workspace(solver, rows, n))  # R of width 0: the fields alone, r never written
    return fields


def _allocation(eps, acceptance, price: float) -> Allocation:
    return Allocation(eps, acceptance, price, float(acceptance.sum()))


def _allocate_straight(p, q, w, total, entry: Divergence) -> Allocation:
    """tv: D = the moved mass, so each frontier is a straight line of slope 1 up to the row's
    limit, and the total goes to the rows of least weight first (price 1 / w), rows of equal
    weight sharing in proportion to their limits."""
    unlimited = mentor(p, q, np.inf, entry)
    limit = unlimited.divergence_value
    base = unlimited.acceptance - limit
    eps = np.zeros_like(limit)
    left, price = float(total), 0.0
    for weight in np.unique(w):
        group = w == weight
        cost = float(weight * limit[group].sum())
        if cost <= left:
            eps[group], left = limit[group], left - cost
            continue
        eps[group], price = limit[group] * (left / cost), 1.0 / weight
        break
    return _allocation(eps, base + eps, price)


def _guess_price(first, even: float, w: np.ndarray, total: float) -> float:
    """The price estimated from ``first``, every row solved at budget ``even``.

    Near the solution of a smooth f, D grows as the square of the moved mass and so the slope
    lam as eps^(-1/2): a row's budget at price nu is about even (lam_j / (nu w_j))^2, and the
    nu making those add up to the total has a closed form. Rows not binding at ``even`` are
    counted at their limit.
    """
    lam, limit = first[:, LAM], first[:, EPS]
    binding = lam > 0
    spare = total - w[~binding] @ limit[~binding]
    scale = lam[binding].max()  # lam near 1e-200 would square to 0
    return float(scale * np.sqrt(even * np.sum((lam[binding] / scale) ** 2 / w[binding]) / spare))


def _other_end(first, even: float, w: np.ndarray, guess: float) -> np.ndarray:
    """Budgets that, with ``first``, likely bracket every row's budget at the price ``guess``:
    its estimate (``_guess_price``) times BRACKET_SPREAD away from ``even``; below the limit of a
    row not binding at ``even``."""
    lam, limit = first[:, LAM], first[:, EPS]
    estimate = np.where(lam > 0, even * (lam / (guess * w)) ** 2, limit)
    return np.where((lam > 0) & (estimate > even), estimate * BRACKET_SPREAD, estimate / BRACKET_SPREAD)


def _allocate_between(p, q, w, total, entry: Divergence, more, less, guess: float) -> tuple[Allocation, np.ndarray]:
    """The allocation from rows reduced between two solutions of them (fields), at more and at
    less budget, and the rows whose result a reduction vouches for (``_search_within``).

    The search runs over a bracket of prices [lo, hi]: initially the prices at which every row's
    budget lies between its two solutions (widened to hold ``guess`` where those do not meet);
    rows whose solutions do not hold the bracket are solved at its ends. Each row is reduced to
    the tokens undecided between its solutions. Where the price lies beyond an end of the
    bracket, the solutions at that end become every row's new solutions on that side and the
    bracket moves past it.
    """
    # more holds for prices from more_from up, less for prices up to less_to (a row at its limit
    # at less budget may leave it at a price above its final slope, which is not known)
    more_from, less_to = more[:, LAM] / w, less[:, LAM] / w
    none = np.zeros(len(w), bool)
    if not more_from.any() and w @ more[:, EPS] <= total:  # every row at its limit within the total
        return _allocation(more[:, EPS], more[:, ACCEPTANCE], 0.0), none
    low, high = float(np.max(more_from)), float(np.min(less_to))
    lo, hi = np.clip((low, high) if 0 < low <= high else (min(high, guess), max(low, guess)), *PRICES)
    rows, n = p.shape
    spread = BRACKET_SPREAD
    above = 0.0  # the greatest price found below the one sought (the bracket moved up past it)
    while True:
        more, more_from = _solved_at(p, q, w, entry, more, more_from, (more_from > lo) | _bind_at(more, lo * w, entry),
                                     lo)
        less, less_to = _solved_at(p, q, w, entry, less, less_to, less_to < hi, hi)
        reduced = _ReducedRows(p.ravel(), q.ravel(), np.arange(rows) * n, np.full(rows, n), _bounds(more, less), less,
                               entry)
        at_lo = reduced.at_price(lo * w)
        if w @ at_lo[:, EPS] <= total:  # the price lies below lo
            # At the floor, or every row at its limit; or lo was found below the price before, by
            # rows reduced from other solutions, which round the spending at lo to the other side of
            # the total: the price is lo itself, and the bracket would swing about it for ever.
            if lo == PRICES[0] or not (at_lo[:, LAM] > 0).any() or lo <= above:
                return _allocation(at_lo[:, EPS], at_lo[:, ACCEPTANCE], float(lo) if at_lo[:, LAM].any() else 0.0), none
            less, less_to, lo, hi = at_lo, np.full(rows, lo), max(lo / spread, PRICES[0]), lo
        else:
            at_hi = reduced.at_price(hi * w)
            if w @ at_hi[:, EPS] <= total:
                return _search_within(reduced, lo, hi, at_lo, at_hi, w, total)
            if hi == PRICES[1]:  # the total buys nothing even there
                return _allocation(np.zeros(rows), at_hi[:, ACCEPTANCE] - at_hi[:, MOVED], np.inf), none
            # the price lies above hi
            above = hi
            more, more_from, lo, hi = at_hi, np.full(rows, hi), hi, min(hi * spread, PRICES[1])
        spread *= spread


def _bounds(more, less) -> np.ndarray:
    """(a_more, a_less, b_less, b_more) per row, for ``core.reduce``. A threshold is not always
    determined to the last bit (where the clipped tokens' q dwarfs b p, any b in a wide range
    gives the same floats), so two solutions may order theirs either way: the bounds take both."""
    a, b = np.sort(np.stack([more[:, A], less[:, A]], 1), 1), np.sort(np.stack([less[:, B], more[:, B]], 1), 1)
    return np.concatenate([a, b], axis=1)


def _bind_at(fields, prices: np.ndarray, entry: Divergence) -> np.ndarray:
    """The rows whose solution (fields) is at their limit m_max (lam = 0) but that bind at their
    ``prices``: the frontier's last slope lam = 1 / (dD/dm at m_max) is below the price. Solved at
    the price, such a row bounds its budget in the bracket far more tightly than its limit does,
    below which every token of the low side stays undecided."""
    limit = fields[:, LAM] == 0
    if not limit.any():
        return limit
    states = np.zeros((len(fields), walk.STATE_SIZE))
    states[:, walk.A], states[:, walk.B], states[:, walk.K_HIGH] = fields[:, A], fields[:, B], fields[:, B] < np.inf
    return limit & (entry.kernels.trace_slopes(states, entry.kind, entry.param) * prices > 1)


def _solved_at(p, q, w, entry: Divergence, fields, holds_at, rows, price: float) -> tuple[np.ndarray, np.ndarray]:
    """``fields`` and the prices at which they hold, with the selected rows replaced by their
    solutions at price ``price`` (times their weights)."""
    if not rows.any():
        return fields, holds_at
    fields, holds_at = fields.copy(), np.where(rows, price, holds_at)
    if rows.all():
        fields[:] = _solved(p, q, entry, price=price * w)
    else:
        fields[rows] = _solved(p[rows], q[rows], entry, price=price * w[rows])
    return fields, holds_at


def _search_within(reduced, lo, hi, at_lo, at_hi, w, total) -> tuple[Allocation, np.ndarray]:
    """The allocation at the price within [lo, hi] (spent(lo) > total >= spent(hi)), searched on
    rows reduced for that bracket, reduced again between its ends' solutions and as it narrows;
    and the rows whose result is the original row's for certain: the thresholds found within
    the bounds of the rows they were found on, and no jump shared."""
    points = {lo: at_lo, hi: at_hi}  # price -> fields of every row (divergence_value that of the original row)
    bounds = {lo: reduced.bounds, hi: reduced.bounds}  # price -> the bounds of the rows it was solved on
    narrowed_at = np.inf  # the bracket's log width when the rows were last reduced: first, between its ends

    def spent(nu: float, lo: float, hi: float) -> float:
        nonlocal reduced, narrowed_at
        if nu not in points:
            if _log_width(lo, hi) < narrowed_at / NARROWING:
                reduced = reduced.narrowed(points[lo], points[hi])
                narrowed_at = _log_width(lo, hi)
            points[nu], bounds[nu] = reduced.at_price(nu * w), reduced.bounds
        return float(w @ points[nu][:, EPS])

    lo, hi = _search_price(lo, hi, spent, total)
    share = _shares(points[lo][:, EPS], points[hi][:, EPS], w, total)
    eps = points[hi][:, EPS] + share * (points[lo][:, EPS] - points[hi][:, EPS])
    acceptance = points[hi][:, ACCEPTANCE] + share * (points[lo][:, ACCEPTANCE] - points[hi][:, ACCEPTANCE])
    a, b, (a_more, a_less, b_less, b_more) = points[hi][:, A], points[hi][:, B], bounds[hi].T
    vouched = (share == 0) & (a_more <= a) & (a <= a_less) & (b_less <= b) & (b <= b_more)
    return _allocation(eps, acceptance, float(hi)), vouched


def _shares(eps_lo, eps_hi, w, total: float) -> np.ndarray:
    """Where the budgets at the final prices lo < hi differ by a jump (a straight piece of the
    frontier, tv), the share of each row's jump that the rest of the total buys; 0 elsewhere."""
    rest = total - w @ eps_hi
    jump = np.maximum(eps_lo - eps_hi, 0.0)
    if rest <= TOTAL_TOLERANCE * total or not jump.any():
        return np.zeros_like(jump)
    return np.where(jump > 0, min(rest / float(w @ jump), 1.0), 0.0)


def _allocate_by_frontiers(p, q, w, total, entry: Divergence) -> Allocation:
    """The same search on every row's whole frontier (``RatioIndex``: a sort per row, no reduction)."""
    unlimited = mentor(p, q, np.inf, entry)
    if w @ unlimited.divergence_value <= total:
        return _allocation(unlimited.divergence_value, unlimited.acceptance, 0.0)
    indexes = [RatioIndex(row_p, row_q) for row_p, row_q in zip(p, q)]
    points = {}  # price -> every row's budget

    def spent(nu: float, *bracket) -> float:
        if nu not in points:
            points[nu] = np.array([index.budget_at_price(entry, nu * w[j]) for j, index in enumerate(indexes)])
        return float(w @ points[nu])

    lo = hi = 1.0
    while spent(lo) <= total and lo > PRICES[0]:
        lo = max(lo / 16.0, PRICES[0])
    while spent(hi) > total and hi < PRICES[1]:
        hi = min(hi * 16.0, PRICES[1])
    if spent(lo) <= total or spent(hi) > total:  # the price lies beyond the prices searched
        price = lo if spent(lo) <= total else hi
        eps = points[price] if spent(price) <= total else np.zeros(len(indexes))
    else:
        lo, hi = _search_price(lo, hi, spent, total)
        price = hi
        eps = points[hi] + _shares(points[lo], points[hi], w, total) * (points[lo] - points[hi])
    return _allocation(eps, mentor(p, q, eps, entry).acceptance, float(price))


def _search_price(lo: float, hi: float, spent, total: float) -> tuple[float, float]:
    """Shrink [lo, hi] (spent(lo) > total >= spent(hi), spent non-increasing) until spent(hi) is
    within TOTAL_TOLERANCE of the total, or the bracket holds no float between its ends.

    Regula falsi with the Illinois rule on log spent against log nu, where a frontier whose
    D grows as a power of the moved mass is nearly a straight line; a step that leaves the
    bracket more than half as wide as two steps before is followed by a bisection, which keeps
    jumps (tv) from stalling it. ``spent(nu, lo, hi)`` is told the bracket nu lies in.
    """
    target = np.log(total)
    g_lo, g_hi = _log(spent(lo, lo, hi)) - target, _log(spent(hi, lo, hi)) - target
    true_g_hi, last = g_hi, None
    # In logs throughout: prices far apart (1e-300 and 1e10) overflow hi / lo and underflow lo hi.
    widths = [_log_width(lo, hi)] * 2
    while true_g_hi < np.log1p(-TOTAL_TOLERANCE):
        width = _log_width(lo, hi)
        bisect = width > widths[-2] / 2 or not np.isfinite(g_hi)
        middle = np.exp(np.log(lo) + width / 2)
        mid = middle if bisect else np.exp(np.log(lo) + width * (g_lo / (g_lo - g_hi)))
        if not lo < mid < hi:
            mid = middle
            if not lo < mid < hi:
                break
        value = _log(spent(mid, lo, hi)) - target
        if value > 0:  # Illinois: an end kept twice in a row counts half
            lo, g_lo, g_hi = mid, value, g_hi / 2 if last == "lo" else g_hi
            last = "lo"
        else:
            hi, g_hi, true_g_hi = mid, value, value
            g_lo = g_lo / 2 if last == "hi" else g_lo
            last = "hi"
        widths.append(_log_width(lo, hi))
    return lo, hi


def _log_width(lo: float, hi: float) -> float:
    """The width of the price bracket [lo, hi] in logs (hi / lo may overflow)."""
    return np.log(hi) - np.log(lo)


def _log(spent: float) -> float:
    """log spent, -inf where nothing is spent."""
    return np.log(spent) if spent > 0 else -np.inf


class _ReducedRows:
    """Rows stored end to end (row i is P[starts[i]:][:sizes[i]], likewise Q), reduced to the
    tokens ``bounds`` (a_more, a_less, b_less, b_more per row, kept) leave undecided; ``less`` is the
    solution at the end of lesser budget (fields as ``core.mentor.FIELDS``, divergence_value
    that of the original rows; ``core.reduce``). ``gaps`` are what the reduced rows' D lacks of
    the original rows' D; ``extremes`` the original rows' least and greatest ratios (found here
    when not given: the input rows are the original ones).
    """

    def __init__(self, P, Q, starts, sizes, bounds, less, entry: Divergence, extremes=None):
        rows, self.bounds = starts.size, bounds
        counts, found = np.empty(rows, np.int64), np.empty((rows, 2))
        count_undecided(P, Q, starts, sizes, bounds, counts, found)
        self.extremes = found if extremes is None else extremes
        self.starts = np.concatenate([[0], np.cumsum(counts + MERGED)[:-1]])
        self.P, self.Q = (np.empty(int(np.sum(counts + MERGED))) for _ in range(2))
        self.sizes, self.own_extremes = np.empty(rows, np.int64), np.empty((rows, 2))
        reduce_rows(P, Q, starts, sizes, bounds, self.starts, self.P, self.Q, self.sizes, self.own_extremes)
        self.R, self.entry = np.empty_like(self.P), entry
        values = np.empty(rows)
        entry.kernels.clipped_divergences(self.P, self.Q, self.starts, self.sizes, less[:, A], less[:, B],
                                          less[:, MOVED], entry.kind, entry.param, self.R, values)
        self.gaps = less[:, EPS] - values

    def narrowed(self, more, less) -> "_ReducedRows":
        """These rows reduced again, between two solutions of them."""
        return _ReducedRows(self.P, self.Q, self.starts, self.sizes, _bounds(more, less), less, self.entry,
                            self.extremes)

    def at_price(self, prices: np.ndarray) -> np.ndarray:
        """The fields of every row at its price, as those of the original row.

        A threshold beyond every ratio of its side (every token of that side released) is
        reported at the side's last ratio, which merging may have moved: it becomes the
        original row's.
        """
        fields = np.empty((self.sizes.size, len(FIELDS)))
        work = _workspace(SELECT, self.sizes.size, int(self.sizes.max(initial=1)))  # md.mentor's, reused
        self.entry.kernels.price_reduced(self.P, self.Q, self.starts, self.sizes, prices, self.entry.kind,
                                         self.entry.param, self.R, fields, work)
        fields[:, EPS] += self.gaps
        released = fields[:, A] <= self.own_extremes[:, 0]
        fields[released, A] = self.extremes[released, 0]
        released = (fields[:, B] >= self.own_extremes[:, 1]) & (fields[:, B] < np.inf)
        fields[released, B] = self.extremes[released, 1]
        return fields
