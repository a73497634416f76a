"""The sort-free exact solver (SPEC section 8): expected O(n), by pivoting on ratios.

The optimum is r = clip(q, a p, b p) where the moved mass m* is the largest m <= m_max with
D(m) <= eps, and D is convex and non-decreasing in m (C2). Each side's moved mass is a
monotone function of its threshold that needs only sums of p over the tokens on either side
of it; so, as in the fast simplex projections, a ratio of the side with more undecided tokens
is taken as pivot, the undecided tokens are partitioned around it while those sums are
accumulated, the other side is located at the pivot's m by the same partitioning, and the
sign of D(m) - eps decides which tokens of both sides are settled (clipped or released)
for good. The undecided sets shrink geometrically, so the expected work is O(n).

D(m) needs sum p f~(rho) over released tokens, the one costly part. It is first bracketed
from sums the partitions already have: Jensen's inequality gives P f~(mean ratio) from below,
and the chord of f~ between the threshold and 1 (f~(1) = 0) gives f~(thr) M / |thr - 1| from
above, where P and M are the group's p-mass and moved mass. Only when eps falls inside the
bracket are the released tokens summed exactly (``terms.sum_weighted_f_tilde``, vectorised),
and those already settled are summed once. The last segment, where both clipped sets are
fixed, is solved by the walk's own ``solve_segment``.

Long rows (SAMPLE_FROM tokens and more) are screened first (``core.screen``): a sample of the
row bounds both thresholds, two passes settle every token outside the bounds as clipped or
released, and the search runs on the few tokens between them, with the settled groups as
its starting sums (the released ones laid out after them and summed at once, as the last
segment needs; or, where most of the row is released, summed where they lie by a vectorised
pass over it). An answer that is not the budget's crossing inside its last segment (or the
end at m_max) is not confirmed: the bounds are widened the way they held the walk back and
the row screened again, taking over the sums of the tokens that the refused bounds released
(less those of the ones it leaves undecided); or, where the new bounds clip nothing that
the refused ones left, only the tokens those laid out are settled anew
(``_screen_by_levels``), their released ones summed only when a decision needs it: where
bounds alone show that the settled groups hold the walk back (``_held_back``), never.
The pass that tries r = q keeps each token's term p f~(q/p); where r = q fails, the screens
after it read their released tokens' sums off those terms (``screen.sum_released_terms``),
evaluating f~ on none of them again.

A long row on which few tokens carry both p and q (a truncated target or drafter) is not
screened: one pass flags those tokens and sums the p-mass where q = 0 and the q-mass where
p = 0, and the search runs on the flagged tokens with each of those two groups as one token
of its ratio (0 or inf), which stands for the group exactly (``_compacted_search``).

Tokens are held per side as (key, p) with key = rho on the low side and key = -rho on the
high side, so that on both sides a token is released at threshold t iff key >= t and its
moved mass is p (s - key), with s = +1 (low) or -1 (high).
"""

import numpy as np

from mdverify.core._fgen import f_tilde, f_tilde_prime, f_tilde_prime_at_inf, weighted_f_tilde_terms
from mdverify.core.checks import row_valid, sum_tolerance
from mdverify.core.index import _prefix_sums, _sort_pairs, add_compensated, split_sides
from mdverify.core.jit import kernel
from mdverify.core.terms import (CHUNK, divergence_of_terms, divergence_row, divergence_terms, needs_f_tilde,
                                 sum_of_terms, sum_weighted_f_tilde, weighted_f_tilde)
from mdverify.core.screen import (SLACK, flag_view, flagged, gather, inclusion, mark_both, mark_sample,
                                  released_sums, screen, sum_released, sum_released_terms, withdraws)
from mdverify.core.walk import (A, B, D, FILL, JUMP_STEPS, K_HIGH, K_LOW, M, STATE_SIZE, segment_point, solve_segment,
                                solve_slope, walk_or_jump, walk_row)

# Per-side bookkeeping. Arrays are laid out [clipped | undecided | released, not summed |
# released, summed]: positions LO, HI, END; sums over those regions in a float64 vector.
LO, HI, END = range(3)
P_CLIP, M_REL, P_UNC, M_UNC, F_EXACT, CLIP_MAX, REL_MIN = range(7)

#: Keys whose median is taken as pivot (9 below 64 times as many undecided tokens, 3 below 128).
PIVOT_SAMPLES = 31
#: Rows at least this long are screened (``core.screen``) with bounds estimated on a sample of
#: about 2 to 3 times size = min(SAMPLE_SIZE, n / SAMPLE_SHARE) tokens; first the bounds beyond
#: which the sample stands for SAMPLE_REACH[0] n / size row tokens, then, as long as they are
#: not confirmed, the next ones, widened only the way the refusal points (``_onward``). A level
#: costs its two passes over the row and a search whose cost grows with the tokens left between
#: its bounds: the first bounds are narrow, and a level refused in one direction is followed by
#: one a little wider that way (most of those are confirmed), then by wider ones. On rows
#: shorter than SAMPLE_SIZE * SAMPLE_SHARE the sample's own sort and walk weigh against the
#: search it saves: n / 32 took 0.91-0.95x the time of n / 16 (median over six to ten
#: families, n = 2500 to 8192), n / 64 no less than n / 32. On long rows a larger sample
#: narrows the first bounds but misses more often: SAMPLE_SIZE 1024 took 0.97-1.04x the time
#: of 512 at n = 131072 (per-family medians, eight families), from 0.48x to 2.3x per case.
SAMPLE_FROM = 2048
SAMPLE_SIZE = 512
SAMPLE_SHARE = 32
SAMPLE_REACH = (8.0, 24.0, 64.0, np.inf)
#: The sample's optimum is walked to (``walk.advance``, on the sample sorted for its bounds)
#: through at most 1/SAMPLE_WALK_SHARE of its tokens' breakpoints, and found by bisection
#: beyond (``walk.jump``, whose pass of f~ over every token costs about what that many steps
#: do): small budgets, crossed within a few breakpoints, cost a few steps.
SAMPLE_WALK_SHARE = 4
#: A long row on whose sample at most 1/SPARSE_SHARE of the tokens carry both p and q (a
#: truncated target or drafter) is searched as its compacted form (``_compacted_search``): the
#: search then costs about 20 ns a token it keeps, below the screen's passes up to this share.
SPARSE_SHARE = 16
#: A screened row of which at least this share is released has its released tokens summed by
#: one vectorised pass of f~ over the row (``screen.sum_released``), not gathered one by one to
#: be summed later. At n = 131072 (flags at random) the pass costs 0.5-0.9x the gather and
#: sum from this share on (jensen_shannon, the costliest f~ registered, 1.06x at it); it also
#: keeps a refused level from settling the laid-out tokens anew (``_rescreened``). Not after
#: r = q was tried and failed (budgets just below D(q || p)): there it cost 3-8% more.
SUM_RELEASED_SHARE = 0.6
#: A screen after a refused one takes over the sums of the tokens that one released, less those
#: of the tokens it reopens (``_screened``), where at least this share of each sum is left: the
#: difference then keeps its relative precision within 64 times theirs.
KEPT_SHARE = 1.0 / 64.0
#: A sample on which the budget does not bind where it binds on the row misjudged its
#: thresholds too: the screen then starts from this level of SAMPLE_REACH.
MISJUDGED_LEVEL = 2
#: ... and where the sample's search was calibrated to the row's D(q || p) after r = q failed,
#: from this level: the calibrated budget's thresholds err either way (on the reference row at
#: 0.95-0.99 D(q || p), the first level's bounds held the row's on 12 of 15 budgets, the
#: second's on 15; median 0.99x over 360 budgets at 0.90-0.99 D(q || p) against the first).
CALIBRATED_LEVEL = 1
#: ... but from the first level where the sample put D(q || p) over the budget by more than
#: this share of it (``_drafter_on_sample``): the calibrated search's tightest bounds then
#: hold. At 0.95, 0.97 and 0.99 D(q || p) over the families benchmark's rows (129 budgets,
#: n = 131072) a call took a median 0.71x, 0.84x and 0.91x the time of the take-over it
#: replaced (commit 962f557); started at CALIBRATED_LEVEL, 0.87x at 0.95 and 0.90x at 0.99. At a
#: budget of D(q || p) itself, where r = q is within, the sample's estimate was at most 2.2%
#: over it on those rows (129 with D finite, three seeds).
OVER_SHARE = 0.025
#: r = q is tried before any search where D(q || p) over the sample is at most this share over
#: the budget (``_drafter_on_sample``): at a budget of D(q || p) itself the sample's estimate
#: falls on either side of it, and a search that ends at r = q costs a screen of the row more
#: than trying r = q (1.4-4.6x the call on 29 such budgets of 1074 families benchmark cases at
#: n = 131072, without the margin), which costs one pass of f~ where it fails.
WITHIN_MARGIN = 0.1
#: Largest difference of the two sides' capacities at which r = q is taken as the optimum
#: (``_drafter_state``); r then differs from the optimum by at most that much mass.
DRAFTER_BALANCE = 1e-14
#: Relative margin by which a bound must clear eps to settle a decision without summing.
_MARGIN = 1e-12
#: Relative distance within which two moved masses summed in different orders are equal.
_ENDS = 1e-14
#: The least positive float: a bound just above a ratio of 0 (``_unbalanced_levels``).
_SMALLEST_SUBNORMAL = 5e-324
_LEAST_NORMAL = 2.0 ** -1022
#: Relative distance within which sample keys count as tied (``_reach``): ratios equal on the
#: row come out of the sample's weights a few ulps apart; four times the screen's SLACK.
_TIED = 4.0 * SLACK


@kernel
def _settled(p_clipped, clip_max, p_released, moved_released, rel_min, f_released):
    """Sums of one side with tokens settled before the search: a clipped group of p-mass
    ``p_clipped`` whose keys lie below ``clip_max``, and a released group of p-mass
    ``p_released`` and moved mass ``moved_released`` whose keys lie above ``rel_min``, and
    whose sum of p f~ is ``f_released``; nan where it is not yet summed (the group then laid
    out after the undecided tokens)."""
    laid_out = np.isnan(f_released)
    sums = np.zeros(7, np.float64)
    sums[P_CLIP] = p_clipped
    sums[CLIP_MAX] = clip_max
    sums[M_REL] = moved_released
    sums[P_UNC] = p_released if laid_out else 0.0
    sums[M_UNC] = moved_released if laid_out else 0.0
    sums[F_EXACT] = 0.0 if laid_out else f_released
    sums[REL_MIN] = rel_min
    return sums


@kernel
def _nothing_settled():
    """Both sides' sums before any token is settled: the thresholds start at ratio 1."""
    return _settled(0.0, -np.inf, 0.0, 0.0, 1.0, np.nan), _settled(0.0, -np.inf, 0.0, 0.0, -1.0, np.nan)


@kernel
def _mix(x):
    """splitmix64: a well-spread 64-bit hash, for pivot positions that do not depend on token order."""
    x = (x + np.uint64(0x9E3779B97F4A7C15)) & np.uint64(0xFFFFFFFFFFFFFFFF)
    x = ((x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & np.uint64(0xFFFFFFFFFFFFFFFF)
    x = ((x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & np.uint64(0xFFFFFFFFFFFFFFFF)
    return x ^ (x >> np.uint64(31))


@kernel(borrow=True)
def _pivot(key, lo, hi, scratch):
    """Median of PIVOT_SAMPLES (or 9, or 3) undecided keys at positions drawn by hashing (lo, hi).

    Token order often follows the ratios (vocabularies sorted by frequency), so fixed
    positions would give poor pivots; the hash makes the choice deterministic yet unrelated
    to that order, and the median of several keeps the split near the middle. The picks are
    sorted by insertion in scratch[0] (``_partition``'s scratch), not in an array of their
    own: short rows take many pivots, and an allocation costs more than the sort.
    """
    width = np.uint64(hi - lo)
    seed = np.uint64(lo) * np.uint64(0x100000001B3) + np.uint64(hi)
    if hi - lo < 128:  # median of three, without an array
        x = key[lo + np.int64(_mix(seed) % width)]
        y = key[lo + np.int64(_mix(seed + np.uint64(1)) % width)]
        z = key[lo + np.int64(_mix(seed + np.uint64(2)) % width)]
        return max(min(x, y), min(max(x, y), z))
    count = PIVOT_SAMPLES if hi - lo >= 64 * PIVOT_SAMPLES else 9
    for j in range(count):
        x = key[lo + np.int64(_mix(seed + np.uint64(j)) % width)]
        i = j
        while i > 0 and scratch[0, i - 1] > x:
            scratch[0, i] = scratch[0, i - 1]
            i -= 1
        scratch[0, i] = x
    return scratch[0, count // 2]


@kernel(borrow=True)
def _partition(key, p, lo, hi, v, s, strict, scratch):
    """Partition [lo, hi) into [lo, i) with key <= v (key < v when ``strict``) and [i, hi).

    Returns (i, p_left, p_right, moved_right), the sums of p and of the moved mass
    p (s - key) on each side, each accumulated directly (never as a difference, which would
    lose tiny masses). Branch-free and out of place: each token is written to the next free
    slot at both ends of ``scratch`` (shape (2, >= hi - lo)) and kept at the end its key
    selects; the result is copied back. No store feeds a later load, unlike an in-place swap.
    """
    left = 0
    right = hi - lo - 1
    p_left = p_right = moved_right = 0.0
    bound = np.nextafter(v, -np.inf) if strict else v  # x < v  <=>  x <= the float below v
    for j in range(lo, hi):
        x = key[j]
        y = p[j]
        scratch[0, left] = x
        scratch[1, left] = y
        scratch[0, right] = x
        scratch[1, right] = y
        # 0/1 arithmetic rather than conditionals keeps the loop free of branches.
        goes_left = np.int64(x <= bound)
        to_left = np.float64(goes_left)
        p_left += to_left * y
        p_right += (1.0 - to_left) * y
        moved_right += (1.0 - to_left) * (y * (s - x))
        left += goes_left
        right -= 1 - goes_left
    for j in range(hi - lo):  # not a copy of slices: each slice is a view, counted by reference
        key[np.uint64(lo + j)] = scratch[0, np.uint64(j)]
        p[np.uint64(lo + j)] = scratch[1, np.uint64(j)]
    return lo + left, p_left, p_right, moved_right


@kernel(borrow=True)
def _locate(key, p, position, sums, s, m, scratch):
    """Partition the undecided tokens into [LO, k) clipped and [k, HI) released at moved mass m.

    Returns (k, t, p_clipped, p_released, moved_released, clip_max, rel_min): the split, the
    threshold key at m, the sums of the undecided tokens on each side of it, and bounds
    clip_max <= t <= rel_min with every clipped key <= clip_max and every released key >=
    rel_min.
    """
    lo = position[LO]
    hi = position[HI]
    p_clipped = p_released = moved_released = 0.0
    clip_max = sums[CLIP_MAX]
    rel_min = sums[REL_MIN]
    while lo < hi:
        v = _pivot(key, lo, hi, scratch)
        i, p_left, p_right, moved_right = _partition(key, p, lo, hi, v, s, False, scratch)
        m_v = sums[M_REL] + moved_released + moved_right + (s - v) * (sums[P_CLIP] + p_clipped + p_left)
        if m_v <= m:  # the threshold is at or below v: keys >= v are released
            if i == hi:  # nothing lies above v: release the keys equal to v
                i, _, p_right, moved_right = _partition(key, p, lo, hi, v, s, True, scratch)
            p_released += p_right
            moved_released += moved_right
            rel_min = v
            hi = i
        else:  # keys <= v are clipped
            p_clipped += p_left
            clip_max = v
            lo = i
    p_clip = sums[P_CLIP] + p_clipped
    t = rel_min
    if p_clip > 0.0:
        t = min(max(s - (m - sums[M_REL] - moved_released) / p_clip, clip_max), rel_min)
    return lo, t, p_clipped, p_released, moved_released, clip_max, rel_min


@kernel
def _cost_bounds(kind, alpha, s, t, p_clip, f_exact, p_unsummed, moved_unsummed):
    """(lower, upper) bounds on one side's D at threshold key t (see the module docstring)."""
    ratio = s * t
    exact = f_exact
    if p_clip > 0.0:
        exact += weighted_f_tilde(kind, alpha, p_clip, ratio)
    lower = exact
    upper = exact
    if p_unsummed > 0.0 and moved_unsummed > 0.0:
        # Jensen: the unsummed tokens' mass at their mean ratio, weighted as the exact terms are
        # (where f~ overflows at a high side's ratio, p f~ may not); f~ >= 0, so 0 where that
        # is not finite is a bound too.
        chord = weighted_f_tilde(kind, alpha, p_unsummed, 1.0 - s * moved_unsummed / p_unsummed)
        lower += chord if chord < np.inf else 0.0
        gap = abs(ratio - 1.0)
        upper += weighted_f_tilde(kind, alpha, moved_unsummed / gap, ratio) if gap > 0.0 else np.inf
    return lower, upper


@kernel(borrow=True)
def _settle(position, sums, released, split, p_moved, moved, threshold, summed, f_summed):
    """Settle the undecided tokens on one side of ``split`` (see ``select_walk``).

    ``released``: [split, HI) joins the released tokens, whose sum of p f~ is ``f_summed``
    when ``summed`` (the not-yet-summed ones included); otherwise [LO, split) is clipped.
    """
    if released:
        sums[P_UNC] += p_moved
        sums[M_UNC] += moved
        sums[M_REL] += moved
        sums[REL_MIN] = min(sums[REL_MIN], threshold)
        position[HI] = split
    else:
        sums[P_CLIP] += p_moved
        sums[CLIP_MAX] = max(sums[CLIP_MAX], threshold)
        position[LO] = split
    if summed:
        # f_summed covers [start, END) where start = split if released else HI (before the move).
        sums[F_EXACT] += f_summed
        sums[P_UNC] = 0.0
        sums[M_UNC] = 0.0
        position[END] = position[HI]


@kernel(borrow=True)
def _side_cost(key, p, position, sums, s, t, split, p_clip_extra, kind, alpha, terms):
    """(D, f_released, f_unsummed): one side's D at threshold t with the undecided tokens split
    at ``split``, summed exactly (in ``terms``: see ``sum_weighted_f_tilde``), and its sums over
    the tokens released at t and over those released before and not yet summed."""
    f_released = sum_weighted_f_tilde(kind, alpha, key, p, s, split, position[HI], 0.0, np.inf, terms)
    f_unsummed = sum_weighted_f_tilde(kind, alpha, key, p, s, position[HI], position[END], 0.0, np.inf, terms)
    value = sums[F_EXACT] + f_released + f_unsummed
    p_clip = sums[P_CLIP] + p_clip_extra
    if p_clip > 0.0:
        value += weighted_f_tilde(kind, alpha, p_clip, s * t)
    return value, f_released, f_unsummed


@kernel
def select_walk(p, q, eps, kind, alpha, work, check):
    """The final walk state of the optimum, found without sorting.

    ``work`` is a float64 workspace of shape (4, >= n), overwritten. Returns (valid, state,
    binding, q0, base) with the state layout of ``core.walk``. With ``check`` the row is first
    checked as ``checks.row_valid`` checks it (a long row in the pass that samples it, which
    then costs nothing more); ``valid`` is False where it fails, and nothing else is
    meaningful. Long rows are first
    screened with bounds from a sample, at each level of SAMPLE_REACH in turn until a result
    is confirmed, each widening only the way the refusal before it points (``_onward``); where the
    budget does not bind on the sample (r = q is within it there, which needs no search of
    the sample, or its search ends short of the budget), r = q is tried first
    (``_drafter_state``), and where a search ends at m_max an ulp over the budget, after it
    (``_drafter_at_end``). A long row on which few tokens carry both p and q is searched
    compacted to those tokens instead (``_compacted_search``). The full
    row is split and searched when nothing is confirmed or the row has tokens outside the
    screen's range (``screen.SCREEN_P_MIN``).
    """
    return _screened_search(p, q, eps, kind, alpha, work, np.inf, check)


@kernel
def select_price_walk(p, q, price, kind, alpha, work, check):
    """The final walk state of the maximiser of A(r) - price D_f(r || p), found without sorting.

    The same search as ``select_walk``, each pivot decided by the slope dD/dm = f~'(b) - f~'(a)
    against 1 / price instead of D against eps (the slope is non-decreasing in m, D being
    convex), and the last segment solved by ``solve_slope``. Long rows are screened alike: the
    slope at a point depends on its two thresholds alone, so a crossing inside the last
    segment is the row's whatever the bounds. Returns (valid, state, inside, q0, base):
    ``inside`` when the price stopped the moved mass before m_max; ``valid`` as there.
    """
    return _screened_search(p, q, np.inf, kind, alpha, work, 1.0 / price, check)


@kernel
def _screened_search(p, q, eps, kind, alpha, work, slope_limit, check):
    """``select_walk`` (``slope_limit`` inf) or ``select_price_walk`` (``eps`` inf)."""
    if p.size >= SAMPLE_FROM:
        valid, in_range, tokens, ps, qs = _sample(p, q, work, check)
        if not valid:
            return False, np.zeros(STATE_SIZE, np.float64), False, 0.0, 0.0
        if in_range and _sparse(tokens, ps, qs, p.size):  # a truncated target or drafter: few tokens to search
            found, state, binding, q0, base = _compacted_search(p, q, eps, kind, alpha, work, slope_limit)
            if found:
                return True, state, binding, q0, base
        # Where r = q is within the budget on the sample, its search would not bind (it moves no
        # more than that): r = q is tried first (so too a little over it), and the sample
        # searched only if it fails. The pass sums D(q || p) to the end, keeping each token's
        # term: where r = q fails, the sample's search is calibrated to it, and the screens
        # read their released tokens' sums off the terms (below).
        levels = np.empty((0, 4), np.float64)
        reaches_drafter = over = False
        if slope_limit == np.inf:
            reaches_drafter, over = _drafter_on_sample(ps, qs, eps, kind, alpha)
        if not reaches_drafter:
            levels, reaches_drafter = _sample_bounds(p.size, tokens, ps, qs, eps, kind, alpha, slope_limit)
        terms = np.empty(0, np.float64)
        found = beyond = False
        if reaches_drafter:  # most often r = q, every token released
            terms = np.empty(p.size, np.float64)
            found, beyond, state, q0, base, excess, kept = _drafter_state(p, q, eps, kind, alpha, slope_limit, work,
                                                                          True, terms)
            if not kept:
                terms = np.empty(0, np.float64)
            binding = False
        # Else the budget binds, or the row's end m_max falls short of r = q (drafter mass where
        # p = 0, float32 sums), or the sample misjudged: the screen's bounds hold the thresholds.
        if not found and in_range:
            # A budget a little below D(q || p) clips the few tokens of least ratio, which the
            # sample holds too few of to place the threshold at its own budget: the sample's
            # search is then run at the budget that bears the same ratio to its D(q || p) as
            # eps does to the row's, which the failed pass summed.
            calibrated = beyond and slope_limit == np.inf and state[D] < np.inf  # beyond: r = q was tried
            sample_eps = eps * divergence_row(qs, ps, kind, alpha, np.inf) / state[D] if calibrated else eps
            calibrated = calibrated and sample_eps < np.inf  # (not nan: the sample's D is finite here)
            if calibrated:
                levels, _ = _sample_bounds(p.size, tokens, ps, qs, sample_eps, kind, alpha, slope_limit)
            elif levels.shape[0] == 0:
                levels, _ = _sample_bounds(p.size, tokens, ps, qs, eps, kind, alpha, slope_limit)
            first = 0 if not beyond or over else (CALIBRATED_LEVEL if calibrated else MISJUDGED_LEVEL)
            if reaches_drafter and not beyond:  # r = q within the budget, the sides unbalanced
                found, state = _unbalanced_end(p, q, kind, alpha, state, excess, ps, qs, work)
                if found:
                    return True, state, False, q0, base
                # ``_unbalanced_end`` declines drafter mass where p = 0, which the first reach
                # still brackets; elsewhere it failed as the tokens within that reach held too little.
                reach = SAMPLE_REACH[0] if state[FILL] > 0.0 else SAMPLE_REACH[1]
                levels = _unbalanced_levels(levels, state[A], state[B], excess, ps, qs, reach)
            found, state, binding, q0, base = _screen_by_levels(p, q, eps, kind, alpha, work, levels[first:],
                                                                slope_limit, reaches_drafter, terms)
        if found:
            return True, state, binding, q0, base
    elif check and not row_valid(p, q, sum_tolerance(p)):
        return False, np.zeros(STATE_SIZE, np.float64), False, 0.0, 0.0
    return (True,) + _search_all(p, q, eps, kind, alpha, work, slope_limit, work, p, q, True)


@kernel
def _unbalanced_levels(levels, least, greatest, excess, ps, qs, reach):
    """Bounds for a row on which r = q is within the budget but the sides' capacities differ by
    ``excess`` (low minus high; float32 rows, whose p and q sum to totals apart by their
    rounding): the walk ends at m_max with the side of the lesser capacity wholly released,
    its threshold at its extreme ratio (``least`` or ``greatest``, the row's), and the other's
    threshold where its tokens beyond it hold |excess| unmoved. A first level brackets the one
    tightly and the other from the sample, where its tokens hold ``reach`` |excess|
    (``_beyond_holding``); the sample's levels ``levels`` follow, their outer bounds widened
    past the extremes."""
    below, above = least * (1.0 - 4.0 * SLACK), greatest * (1.0 + 4.0 * SLACK)
    out = np.empty((levels.shape[0] + 1, 4), np.float64)
    target = abs(excess) * reach
    if excess < 0.0:  # the low side wholly released, at its least ratio; the high one stops short
        out[0] = (below, max(least * (1.0 + 4.0 * SLACK), _SMALLEST_SUBNORMAL), _beyond_holding(ps, qs, target, -1.0),
                  above)
    else:  # the high side wholly released, at its greatest ratio; the low one stops short
        out[0] = (below, _beyond_holding(ps, qs, target, 1.0), greatest * (1.0 - 4.0 * SLACK), above)
    for level in range(levels.shape[0]):
        a_lo, a_hi, b_lo, b_hi = levels[level]
        out[level + 1] = (min(a_lo, below), a_hi, b_lo, max(b_hi, above))
    return out


@kernel
def _unbalanced_end(p, q, kind, alpha, drafter, excess, ps, qs, work):
    """(found, state): the walk's end on a row where r = q is within the budget but the sides'
    capacities differ by ``excess`` (``_unbalanced_levels``), from r = q's state ``drafter``.
    The side of the greater capacity stops at the threshold x where its tokens beyond x hold
    |excess| unmoved: sum (x p - q) over t < x (low, excess > 0) or sum (q - x p) over t > x
    (high); only they differ from r = q, clipped at x, and D loses p (f~(t) - f~(x)) on each.
    They lie beyond the sample's bound of ``_beyond_holding``: gathered in one pass, sorted,
    and accumulated from the extreme until x is found. ``found`` is False where they hold too
    little (the sample misjudged), or where the drafter has mass on tokens with p = 0."""
    state = drafter.copy()
    if drafter[FILL] > 0.0 or excess == 0.0:
        return False, state
    s = 1.0 if excess > 0.0 else -1.0  # the side that stops short: low (1) or high (-1)
    target = abs(excess)
    bound = _beyond_holding(ps, qs, target * SAMPLE_REACH[0], s)
    keys, weights, masses = work[0], work[1], work[2]
    # The side's tokens beyond the bound, tested without a division (a few there are taken
    # that lie just inside it: every token left out lies inside it).
    scaled = bound * (1.0 + s * 4.0 * SLACK)
    count = 0
    for i in range(p.size):
        pi, qi = np.float64(p[i]), np.float64(q[i])
        if s * qi < s * scaled * pi:  # p = q = 0 is not (and no token has p = 0 < q)
            keys[count] = s * (qi / pi)
            weights[count] = pi
            masses[count] = qi
            count += 1
    order = _ascending(keys[:count])  # the extreme first
    p_beyond = q_beyond = 0.0
    for j in order:
        t = s * keys[j]
        if p_beyond > 0.0 and s * (t * p_beyond - q_beyond) >= target:
            break  # x lies before this token
        p_beyond += weights[j]
        q_beyond += masses[j]
    else:
        if not s * (bound * p_beyond - q_beyond) >= target:
            return False, state  # the tokens beyond the bound hold too little
    x = (q_beyond + s * target) / p_beyond
    loss = 0.0
    for j in order:
        t = s * keys[j]
        if not s * t < s * x:
            break
        loss += weighted_f_tilde(kind, alpha, weights[j], t) - weighted_f_tilde(kind, alpha, weights[j], x)
    state[D] = drafter[D] - loss
    if s > 0.0:
        state[A] = x
        state[K_LOW] = 1.0
    else:
        state[B] = x
        state[K_HIGH] = 1.0
    return True, state


@kernel
def _beyond_holding(ps, qs, target, s):
    """The sample's ratio c nearest 1 on one side (s = 1: low, c < 1; s = -1: high, c > 1)
    beyond which its tokens hold at least ``target`` unmoved at threshold c, sum (c p - q)_+
    below it or sum (q - c p)_+ above it; 1 where none does."""
    m = ps.size
    keys = np.empty(m, np.float64)
    for j in range(m):
        keys[j] = s * (qs[j] / ps[j]) if ps[j] > 0.0 else s * np.inf
    order = _ascending(keys)  # the side's extreme first
    p_beyond = q_beyond = 0.0
    for j in order:
        c = s * keys[j]
        if not s * c < s * 1.0:  # past 1: the other side
            break
        if c < np.inf and s * (c * p_beyond - q_beyond) >= target:
            return c
        p_beyond += ps[j]
        q_beyond += qs[j]
    return 1.0


@kernel
def _ascending(keys):
    """The order of float64 keys (no nan) ascending, ties by position: by ``index._sort_pairs``
    (a radix sort from RADIX_FROM keys on), where numba's np.argsort, a scalar quicksort, took
    7x the time on a few thousand keys (3775 at random: 248 against 37 us)."""
    _, positions = _sort_pairs(keys + 0.0, np.arange(keys.size).astype(np.float64))  # + 0.0: -0 as 0
    return positions.astype(np.int64)


@kernel
def _search_all(p, q, eps, kind, alpha, work, slope_limit, sides, tokens_p, tokens_q, drafter_finite):
    """(state, binding, q0, base): the search, from nothing settled, of the tokens (``tokens_p``,
    ``tokens_q``: the row, or its compacted form) laid out by ``split_sides`` in the workspace
    ``sides`` (``work`` itself, or the compacted row's); then r = q where it ends at m_max an
    ulp over the budget (``_drafter_at_end``, on the row itself, in ``work``), unless
    ``drafter_finite`` is False: D(q || p) is then known to be infinite. A state over the
    budget by the rounding of its sums (the search's last decisions, summed in another order,
    put it within) is searched again for a budget lower by those ulps, as the screen does
    (``_screen_by_levels``), and lower again where that ends over too: the optimum moves
    that little less mass."""
    state, binding, q0, base = _search_laid_out(sides, tokens_p, tokens_q, eps, kind, alpha, slope_limit)
    if drafter_finite:
        found, drafter, drafter_q0, drafter_base = _drafter_at_end(p, q, eps, kind, alpha, slope_limit, work, state,
                                                                   binding)
        if found:
            return drafter, False, drafter_q0, drafter_base
    margin = _rounding_margin(state[D], eps)
    for _ in range(3):  # sums in other orders differ by more on some rows: ten times lower each time
        if not eps < state[D] <= eps * (1.0 + _MARGIN):
            break
        state, binding, q0, base = _search_laid_out(sides, tokens_p, tokens_q, eps - margin, kind, alpha,
                                                    slope_limit)
        margin *= 10.0
    return state, binding, q0, base


@kernel
def _rounding_margin(value, eps):
    """How much lower a budget must be for a search whose end was ``value``, ulps over ``eps``
    by the order of its sums, to end within it: four such overshoots, and at least _ENDS eps."""
    return max(4.0 * (value - eps), _ENDS * eps)


@kernel
def _search_laid_out(sides, tokens_p, tokens_q, eps, kind, alpha, slope_limit):
    """(state, binding, q0, base) of the search, from nothing settled, of tokens laid out in
    ``sides`` by ``split_sides``."""
    split = split_sides(tokens_p, tokens_q, sides[0], sides[1])
    low, high = _nothing_settled()
    state, binding, q0, base, _ = _search(sides, split, (0, 0, 0, 0), low, high, eps, kind, alpha, slope_limit)
    return state, binding, q0, base


@kernel
def _sparse(tokens, ps, qs, n):
    """Whether at most n / SPARSE_SHARE of a row's n tokens carry both p and q, as estimated on
    its ``_sample``."""
    both = 0.0
    for j in range(tokens.size):
        both += tokens[j] if ps[j] > 0.0 and qs[j] > 0.0 else 0.0
    return both * SPARSE_SHARE <= n


@kernel
def _compacted_search(p, q, eps, kind, alpha, work, slope_limit):
    """(found, state, binding, q0, base) of a row in the screen's range searched in its compacted
    form: the tokens that carry both p and q, in row order, then one token of the p-mass where
    q = 0 and one of the drafter mass where p = 0. Tokens of equal ratio are clipped and
    released together, so each merged token stands for its group exactly. ``found`` is False,
    and nothing else meaningful, where more than a quarter of the tokens carry both (the
    sample misjudged the row: the screen is then the faster way)."""
    flags = flag_view(work[3], p.size)
    count, zero, spilled = mark_both(p, q, flags)
    if count > p.size // 4:
        return False, np.zeros(STATE_SIZE, np.float64), False, 0.0, 0.0
    kept = work[2].view(np.int64)
    flagged(flags, p.size, kept)
    # Apart from the workspace, which r = q (``_drafter_at_end``) may need after the search.
    compacted = np.empty((2, count + 2), np.float64)
    for j in range(count):
        compacted[0, j] = p[kept[j]]
        compacted[1, j] = q[kept[j]]
    m = count
    for p_merged, q_merged in ((zero, 0.0), (0.0, spilled)):
        if p_merged + q_merged > 0.0:
            compacted[0, m] = p_merged
            compacted[1, m] = q_merged
            m += 1
    sides = np.empty((4, m), np.float64)
    drafter_finite = zero == 0.0 or f_tilde(kind, alpha, 0.0) < np.inf  # else p f~(0) = inf where q = 0 < p
    state, binding, q0, base = _search_all(p, q, eps, kind, alpha, work, slope_limit, sides, compacted[0, :m],
                                           compacted[1, :m], drafter_finite)
    if not state[D] <= eps:
        # A degenerate end over the budget (see ``mentor.mentor_row_select``): the sorted walk of
        # the compacted tokens (microseconds), not of the row (1.1 ms at n = 131072, AMD EPYC).
        state, binding, q0, base = walk_row(compacted[0, :m], compacted[1, :m], eps, kind, alpha)
    return True, state, binding, q0, base


@kernel
def _drafter_at_end(p, q, eps, kind, alpha, slope_limit, work, state, binding):
    """(found, state, q0, base) of r = q (``_drafter_state``) where a search ended at its end m_max
    over the budget: by the rounding of its own sums where eps is D(q || p) as md.divergence sums
    it, which r = q, if that is the end, summed that way is within."""
    if binding or state[D] <= eps:
        return False, state, 0.0, 0.0
    found, _, drafter, q0, base, _, _ = _drafter_state(p, q, eps, kind, alpha, slope_limit, work)
    return found, drafter, q0, base


@kernel
def _screen_by_levels(p, q, eps, kind, alpha, work, levels, slope_limit, drafter_tried, terms):
    """(found, state, binding, q0, base): ``screened_walk`` with the bounds of each level in
    turn until a result is confirmed, each after a refusal widened only the way that its
    bounds held the walk back (``_onward``). Bounds that clip nothing the refused ones left
    (those that held the walk back beyond the optimum's moved mass) settle the tokens those
    left laid out in ``work`` (``_rescreened``), without passing over the row again, where they
    laid out every token they did not clip (their released ones were not summed by the screen,
    which it does not do where ``drafter_tried``: see SUM_RELEASED_SHARE). Other bounds screen
    the row again, but take over the sums of the tokens that a refused screen released
    (``_screened``'s ``summed``): those released again are neither laid out nor summed.
    ``drafter_tried``: r = q was tried before the levels (``_drafter_state``) and failed, and
    is not tried again. ``terms``: the row's terms p f~(q/p), kept by that pass (``_screened``),
    or empty."""
    summing = not drafter_tried
    bounds = (levels[0, 0], levels[0, 1], levels[0, 2], levels[0, 3])
    summed = _none_released()
    split, layout, low, high, laid_out, released = _screened(p, q, work, bounds, kind, alpha, summing, summed, terms)
    for level in range(levels.shape[0]):
        clipped = (low[P_CLIP], high[P_CLIP])
        confirmed, hits, state, binding, q0, base = _walk_between(work, split, layout, low, high, bounds, eps, kind,
                                                                  alpha, slope_limit)
        if confirmed:
            return True, state, binding, q0, base
        if not hits.any():  # no bound held it back: the end, maybe an ulp over the budget
            if not drafter_tried:  # else it failed before, and would again
                found, drafter, drafter_q0, drafter_base = _drafter_at_end(p, q, eps, kind, alpha, slope_limit, work,
                                                                           state, binding)
                if found:
                    return True, drafter, False, drafter_q0, drafter_base
                laid_out = False  # its pass over the row may have overwritten the tokens laid out
            if eps < state[D] <= eps * (1.0 + _MARGIN):
                # Wider bounds would end there too: the last pivot found its point within the
                # budget and the end, summed in another order, is ulps over. A budget lower by
                # more than such ulps (relative _ENDS, or four overshoots) ends inside a proper
                # last segment, where the walk is exact; the optimum moves that little less
                # mass. (Screened anew: the search updated the sums; the tokens stay the same.)
                split, layout, low, high, laid_out, released = _screened(p, q, work, bounds, kind, alpha, summing,
                                                                         summed, terms)
                lower = eps - _rounding_margin(state[D], eps)
                confirmed, _, lower_state, lower_binding, lower_q0, lower_base = _walk_between(
                    work, split, layout, low, high, bounds, lower, kind, alpha, slope_limit)
                if confirmed:
                    return True, lower_state, lower_binding, lower_q0, lower_base
        if level + 1 == levels.shape[0]:
            break
        within = bounds
        bounds = _onward(bounds, hits, levels[level + 1])
        if laid_out and bounds[0] >= within[0] and bounds[3] <= within[3]:
            split, layout, low, high, laid_out, released = _rescreened(work, split, clipped, bounds)
        else:  # the sums of the tokens that the refused bounds released, where these clip none of them
            summed = _none_released() if withdraws(bounds, (within[1], within[2])) else released
            split, layout, low, high, laid_out, released = _screened(p, q, work, bounds, kind, alpha, summing, summed,
                                                                     terms)
    return False, state, binding, q0, base


@kernel
def _onward(bounds, hits, wider):
    """The bounds of the level after one refused with ``hits`` (see ``screened_walk``): where
    every bound that held the walk back held it on the same side of the optimum, the
    thresholds presumably lie that way, so only the bounds ahead are widened (to ``wider``'s)
    and those behind stay, a bound that held the walk back becoming the one behind it:
    a_lo or b_hi held it back short of the optimum's moved mass (a lies lower, b higher),
    a_hi or b_lo beyond it (a lies higher, b lower). Otherwise ``wider`` itself."""
    a_lo, a_hi, b_lo, b_hi = bounds
    more = hits[0] or hits[3]
    less = hits[1] or hits[2]
    if more and not less:
        return wider[0], a_lo if hits[0] else a_hi, b_hi if hits[3] else b_lo, wider[3]
    if less and not more:
        return a_hi if hits[1] else a_lo, wider[1], wider[2], b_lo if hits[2] else b_hi
    return wider[0], wider[1], wider[2], wider[3]


@kernel
def screened_walk(p, q, eps, kind, alpha, work, bounds, slope_limit):
    """``select_walk`` (``select_price_walk`` with a finite ``slope_limit``) on the tokens
    ``core.screen`` leaves undecided between ``bounds`` = (a_lo, a_hi, b_lo, b_hi); returns
    (confirmed, hits, state, binding, q0, base).

    The result is the optimum when ``confirmed``: the state is the budget's (or the slope
    limit's) crossing inside the last segment, or the end at m_max, and within the budget.
    Both are facts about the segment alone, whose sums are exact whatever the bounds: D and
    its slope are non-decreasing in the moved mass, so that crossing (or end) is the row's.
    Otherwise ``hits`` tells which bounds the thresholds reached (a <= a_lo, a >= a_hi,
    b <= b_lo, b >= b_hi, counting only those that settled a group): with one, the optimum
    presumably lies past it.
    """
    split, layout, low, high, _, _ = _screened(p, q, work, bounds, kind, alpha, True, _none_released(),
                                               np.empty(0, np.float64))
    return _walk_between(work, split, layout, low, high, bounds, eps, kind, alpha, slope_limit)


@kernel
def _none_released():
    """A screen's released groups, as ``_screened`` returns them and takes them as ``summed``:
    the bounds (a_hi, b_lo) that released them, then each side's (low, high) count, moved
    mass and sum of p f~, then the row's totals (base, capacity_low, capacity_high, q0) that
    the screen found; here none, as bounds (1, 1) release."""
    return np.array([1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])


@kernel
def _screened(p, q, work, bounds, kind, alpha, summing, summed, terms):
    """(split, layout, low_sums, high_sums, laid_out, released) for ``_search``: the row screened
    between ``bounds`` (``screen.screen``), its tokens not clipped gathered into ``work``, each
    side's released ones after its undecided ones, and their sums of p f~ taken at once (the
    search's last segment needs them, and a later screen may take them over: see ``summed``);
    where ``summing`` and at least SUM_RELEASED_SHARE of the row is released, its released
    tokens summed where they lie (``screen.sum_released``) and only the undecided ones
    gathered; so too, whatever ``summing``, where ``terms`` holds the row's terms p f~(q/p)
    (kept by the pass that tried r = q, ``_drafter_state``; else it is empty), their sums then
    read off those (``screen.sum_released_terms``). ``laid_out``: every token not clipped is in
    ``work``, as ``_rescreened`` needs. ``released``: the released groups (``_none_released``),
    for a later screen.

    ``summed``: the ``released`` of an earlier screen of the row, from bounds that released
    no token these clip (``screen.withdraws``). Those released here too are settled with the
    sums given, neither laid out nor summed again; those undecided here (reopened) are laid
    out, and their sums taken out of the given ones. Where that leaves less than KEPT_SHARE of
    a side's sums (the difference would lose their precision), the row is screened as without
    ``summed``. ``_none_released()`` for none.
    """
    if summed[2] + summed[5] > 0.0:
        taken, result = _screen_and_sum(p, q, work, bounds, kind, alpha, summing, summed, terms)
        if taken:
            return result
    return _screen_and_sum(p, q, work, bounds, kind, alpha, summing, None, terms)[1]


@kernel
def _screen_and_sum(p, q, work, bounds, kind, alpha, summing, summed, terms):
    """(taken, result): ``_screened``'s result, given ``summed`` or None for none; ``taken`` False
    where it does not take ``summed`` (the result is then meaningless)."""
    flags = flag_view(work[3], p.size)
    if summed is None:  # compiled apart: the passes without what ``summed`` needs
        counts = screen(p, q, bounds, None, flags)
        before = _none_released()
        reopened = None
    else:
        counts = screen(p, q, bounds, (summed[0], summed[1], summed[8], summed[9], summed[10], summed[11]), flags)
        before = summed
        reopened = (counts[10], counts[11])
    (base, capacity_low, capacity_high, q0, p_clipped_low, p_clipped_high, n_low, n_high, n_released_low,
     n_released_high, n_reopened_low, n_reopened_high) = counts
    known = terms.size == p.size  # the terms of the released tokens: no f~ to evaluate
    laid_out = not known and (not summing or n_released_low + n_released_high < SUM_RELEASED_SHARE * p.size)
    size = work.shape[1]
    if laid_out:  # the released groups' sums from their tokens, laid out after each side's undecided ones
        gather(p, q, flags, work[0], work[1], n_low, n_high, n_released_low, n_released_high, reopened)
        low = _laid_out_sums(kind, alpha, work, n_low - n_released_low, n_low, 1.0)
        high = _laid_out_sums(kind, alpha, work, size - n_released_high, size, -1.0)
        moved, f_released = (low[0], high[0]), (low[1], high[1])
        layout = (0, 0, n_released_low, n_released_high)
    else:  # summed where they lie (work[:3] is free until the gather), and left out of it
        if known:
            _, moved, f_released = sum_released_terms(p, q, flags, terms)
        else:
            _, moved, f_released = sum_released(kind, alpha, p, q, flags, work)
        n_low -= n_released_low
        n_high -= n_released_high
        gather(p, q, flags, work[0], work[1], n_low, n_high, 0, 0, reopened)
        layout = (0, 0, 0, 0)
    # The reopened tokens, laid out first on each side: their sums come out of the given ones.
    low_kept, low_taken = _kept_sums(kind, alpha, work, 0, n_reopened_low, 1.0, before[2:5])
    high_kept, high_taken = _kept_sums(kind, alpha, work, size - n_high, size - n_high + n_reopened_high, -1.0,
                                       before[5:8])
    released = np.array([bounds[1], bounds[2], low_kept[0] + n_released_low, low_kept[1] + moved[0],
                         low_kept[2] + f_released[0], high_kept[0] + n_released_high, high_kept[1] + moved[1],
                         high_kept[2] + f_released[1], base, capacity_low, capacity_high, q0])
    low, high = _between(bounds, (p_clipped_low, p_clipped_high), (released[2] > 0.0, released[5] > 0.0),
                         (np.nan, np.nan), (released[3], released[6]), (released[4], released[7]))
    return low_taken and high_taken, ((n_low, n_high, q0, base, capacity_low, capacity_high), layout, low, high,
                                      laid_out and before[2] + before[5] == 0.0, released)


@kernel
def _kept_sums(kind, alpha, work, start, end, s, summed):
    """((count, moved mass, sum of p f~) of one side's ``summed`` released tokens less those
    reopened and laid out in work[:2, start:end], taken): where none is left, 0 exactly; else
    whether what is left keeps at least KEPT_SHARE of both sums (and they are finite)."""
    count = summed[0] - (end - start)
    if count == 0.0:
        return (0.0, 0.0, 0.0), True
    out_moved, out_f = _laid_out_sums(kind, alpha, work, start, end, s)
    moved = summed[1] - out_moved
    f_kept = summed[2] - out_f
    taken = moved >= KEPT_SHARE * summed[1] and f_kept >= KEPT_SHARE * summed[2] and summed[2] < np.inf
    return (count, moved, f_kept), taken


@kernel
def _laid_out_sums(kind, alpha, work, start, end, s):
    """(moved mass, sum of p f~) of the tokens laid out in work[:2, start:end] (keys rho, s = 1,
    or -rho, s = -1), summed in work[2]."""
    moved = released_sums(work[0, start:end], work[1, start:end], s)[1]
    return moved, sum_weighted_f_tilde(kind, alpha, work[0], work[1], s, start, end, 0.0, np.inf, work[2])


@kernel
def _rescreened(work, split, clipped, bounds):
    """``_screened``'s result for ``bounds`` that clip nothing that the bounds of the search
    that left ``work`` did not (a_lo and b_hi no wider): the tokens it laid out there, and the
    p-mass ``clipped`` of each side's clipped group, settled anew (``_rescreen_side``); the
    released ones laid out and not summed (none for a later screen to take)."""
    a_lo, a_hi, b_lo, b_hi = bounds
    n_low, n_high = split[0], split[1]
    size = work.shape[1]
    scratch = work[2:]
    n_low, n_released_low, p_clipped_low, p_released_low, moved_released_low = _rescreen_side(
        work[0, :n_low], work[1, :n_low], 1.0, a_lo, a_hi, clipped[0], scratch, False)
    n_high, n_released_high, p_clipped_high, p_released_high, moved_released_high = _rescreen_side(
        work[0, size - n_high:], work[1, size - n_high:], -1.0, -b_hi, -b_lo, clipped[1], scratch, True)
    low, high = _between(bounds, (p_clipped_low, p_clipped_high), (n_released_low > 0, n_released_high > 0),
                         (p_released_low, p_released_high), (moved_released_low, moved_released_high),
                         (np.nan, np.nan))
    return (n_low, n_high) + split[2:], (n_released_low, n_released_high, 0, 0), low, high, True, _none_released()


@kernel
def _between(bounds, clipped, any_released, released, moved, f_released):
    """(low_sums, high_sums) for ``_search`` of a row settled between ``bounds``: from the p-mass
    of each side's clipped group, whether it has a released group, and that group's p-mass,
    moved mass and sum of p f~ (nan where it is laid out and not summed; the p-mass matters
    only then)."""
    a_lo, a_hi, b_lo, b_hi = bounds
    # Keys: rho on the low side, -rho on the high side (clipped below a_lo and -b_hi, released
    # above a_hi and -b_lo).
    low = _settled(clipped[0], a_lo if clipped[0] > 0.0 else -np.inf, released[0], moved[0],
                   a_hi if any_released[0] else 1.0, f_released[0])
    high = _settled(clipped[1], -b_hi if clipped[1] > 0.0 else -np.inf, released[1], moved[1],
                    -b_lo if any_released[1] else -1.0, f_released[1])
    return low, high


@kernel(borrow=True)
def _rescreen_side(key, weight, s, clip_below, release_above, p_clipped, scratch, at_end):
    """Settle one side's tokens anew: keys below ``clip_below`` join its clipped group (of p-mass
    ``p_clipped``), keys above ``release_above`` are released, the rest undecided; the latter
    two laid out [undecided | released] from the start of ``key`` and ``weight`` (to their end
    where ``at_end``), through ``scratch`` as in ``_partition``. Returns (count, released,
    p_clipped, p_released, moved_released): the tokens laid out, the released among them, and
    the sums of the groups, the moved mass p (s - key)."""
    n = key.size
    kept = 0
    top = n - 1
    p_released = moved_released = 0.0
    for j in range(n):
        x = key[j]
        y = weight[j]
        scratch[0, kept] = x
        scratch[1, kept] = y
        scratch[0, top] = x
        scratch[1, top] = y
        clip = x < clip_below
        release = x > release_above
        p_clipped += y if clip else 0.0
        p_released += y if release else 0.0
        moved_released += y * (s - x) if release else 0.0
        kept += ~clip & ~release
        top -= release
    released = n - 1 - top
    count = kept + released
    start = n - count if at_end else 0
    for j in range(kept):  # not a copy of slices: each slice is a view, counted by reference
        key[np.uint64(start + j)] = scratch[0, np.uint64(j)]
        weight[np.uint64(start + j)] = scratch[1, np.uint64(j)]
    for j in range(released):
        key[np.uint64(start + kept + j)] = scratch[0, np.uint64(top + 1 + j)]
        weight[np.uint64(start + kept + j)] = scratch[1, np.uint64(top + 1 + j)]
    return count, released, p_clipped, p_released, moved_released


@kernel
def _walk_between(work, split, layout, low, high, bounds, eps, kind, alpha, slope_limit):
    """``screened_walk``'s result from the search of a screened row (``_screened``)."""
    a_lo, a_hi, b_lo, b_hi = bounds
    settled = (low[P_CLIP] > 0.0, low[M_REL] > 0.0, high[M_REL] > 0.0, high[P_CLIP] > 0.0)
    state, binding, q0, base, stopped = _search(work, split, layout, low, high, eps, kind, alpha, slope_limit)
    a, b = state[A], state[B]
    # A threshold within the screen's slack of a bound reached it: the tokens there are left
    # undecided, and one of them, its ratio an ulp past the bound's, may be where the walk stops.
    near = 2.0 * SLACK
    hits = np.array([settled[0] and a <= a_lo * (1.0 + near), settled[1] and a >= a_hi * (1.0 - near),
                     settled[2] and b <= b_lo * (1.0 + near), settled[3] and b >= b_hi * (1.0 - near)])
    # A price's search ends at the start of the last segment, slope already over the limit,
    # where the crossing lies before it: cut off by a bound, unless the slope jumps there.
    within_price = slope_limit == np.inf or _slope_before(state, kind, alpha) <= slope_limit
    return not stopped and state[D] <= eps and within_price, hits, state, binding, q0, base


@kernel
def _slope_before(state, kind, alpha):
    """dD/dm just before a state of ``_search``: f~'(b) - f~'(a), with f~'(inf) for b while
    tokens with p = 0 fill (at a state that has only reached them, b is still the last ratio)."""
    high = f_tilde_prime_at_inf(kind, alpha) if state[FILL] > 0.0 else f_tilde_prime(kind, alpha, state[B])
    return high - f_tilde_prime(kind, alpha, state[A])


@kernel
def _sample(p, q, work, check):
    """(valid, in_range, tokens, ps, qs): the sample ``screen.mark_sample`` takes of the row,
    each token weighted by the number of row tokens it stands for, the inverse of its
    inclusion probability (``tokens``), and its p and q so weighted, calibrated to the row's
    capacities (``_calibrated``); and whether the row is in the screen's range. Where ``check``
    asks and the row fails ``checks.row_valid``, which the sample's pass tests, ``valid`` is
    False and nothing else meaningful."""
    flags = flag_view(work[3], p.size)
    size = _sample_size(p.size)
    in_range, valid, capacity_low, capacity_high = mark_sample(p, q, size, flags, check)
    taken = work[2].view(np.int64)
    m = flagged(flags, p.size, taken) if valid else 0
    tokens = np.empty(m, np.float64)
    ps = np.empty(m, np.float64)
    qs = np.empty(m, np.float64)
    for j in range(m):
        tokens[j] = 1.0 / inclusion(p, q, taken[j], size)
        ps[j] = np.float64(p[taken[j]]) * tokens[j]
        qs[j] = np.float64(q[taken[j]]) * tokens[j]
    _calibrated(ps, qs, capacity_low, capacity_high)
    return valid, in_range, tokens, ps, qs


@kernel
def _calibrated(ps, qs, capacity_low, capacity_high):
    """Scale each side's weighted p and q so that its capacity on the sample, sum (p - q)_+ or
    sum (q - p)_+, is the row's (a ratio estimator). A budget near the end m_max sets a
    threshold by the little mass left unmoved, m_max - m, which the sample's own m_max,
    a few percent off, would swamp; the ratios, and so the bounds' keys, stay."""
    low = high = 0.0
    for j in range(ps.size):
        low += max(ps[j] - qs[j], 0.0)
        high += max(qs[j] - ps[j], 0.0)
    scale_low = capacity_low / low if low > 0.0 and capacity_low > 0.0 else 1.0
    scale_high = capacity_high / high if high > 0.0 and capacity_high > 0.0 else 1.0
    for j in range(ps.size):
        scale = scale_low if qs[j] < ps[j] else (scale_high if qs[j] > ps[j] else 1.0)
        ps[j] *= scale
        qs[j] *= scale


@kernel
def _sample_size(n):
    """The ``size`` of ``screen.mark_sample``'s sample of a row of n tokens."""
    return min(SAMPLE_SIZE, n // SAMPLE_SHARE)


@kernel
def _drafter_on_sample(ps, qs, eps, kind, alpha):
    """(within, over): whether D_f(q || p) over the sample, its terms weighted as the row's, is
    finite and within eps (as r = q must be on the row: ``_drafter_state``) or over it by at
    most WITHIN_MARGIN eps; and whether it is over by more than OVER_SHARE eps."""
    limit = eps * (1.0 + WITHIN_MARGIN)
    value = divergence_row(qs, ps, kind, alpha, limit)
    within = value <= limit and value < np.inf
    return within, within and value > eps * (1.0 + OVER_SHARE)


@kernel
def _sample_bounds(n, tokens, ps, qs, eps, kind, alpha, slope_limit):
    """(levels, reaches_drafter): bounds (a_lo, a_hi, b_lo, b_hi) on the thresholds of the
    optimum, estimated on the ``_sample`` of a row of n tokens, one row of bounds per entry of
    SAMPLE_REACH; and whether the sample suggests that the optimum is r = q (the budget does
    not bind on it, and it has no drafter mass where p = 0 that the divergence cannot move).

    Each bound is the sample's ratio beyond which, counted from the sample's optimal
    threshold on its side, the sample stands for the level's reach of row tokens (the idea
    of Floyd and Rivest's selection); or the trivial bound (0, 1, 1, inf) where it stands for
    fewer. A poor estimate costs speed, never exactness (see ``screened_walk``).
    """
    keys = qs / ps
    # One sort for both sides: low keys (< 1) come first, then ratio 1, then the finite high
    # keys, then inf (p = 0) and nan (p = q = 0).
    order = _ratio_order(keys)
    sorted_keys = keys[order]
    sorted_tokens = tokens[order]
    n_low = np.searchsorted(sorted_keys, 1.0)
    start_high = np.searchsorted(sorted_keys, 1.0, side="right")
    end_high = np.searchsorted(sorted_keys, np.inf)
    state, binding = _sample_optimum(ps, qs, order, sorted_keys, n_low, start_high, end_high, eps, kind, alpha,
                                     slope_limit)
    levels = np.empty((len(SAMPLE_REACH), 4), np.float64)
    for level in range(len(SAMPLE_REACH)):
        reach = SAMPLE_REACH[level] * n / _sample_size(n)
        levels[level, :2] = _reach(sorted_keys[:n_low], sorted_tokens[:n_low], state[A], 0.0, 1.0, reach)
        levels[level, 2:] = _reach(sorted_keys[start_high:end_high], sorted_tokens[start_high:end_high], state[B],
                                   1.0, np.inf, reach)
    # Drafter mass where p = 0, which the walk never moves when f~'(inf) = inf: r = q is out of reach.
    stuck = f_tilde_prime_at_inf(kind, alpha) == np.inf and end_high < keys.size and sorted_keys[end_high] == np.inf
    return levels, not binding and not stuck


@kernel
def _ratio_order(keys):
    """The order that sorts ratios (>= 0, or nan, which comes last) ascending, ties by position.
    Sorted as integers, without argsort's indirection: each key's bits without the sign
    (-0 is 0; nan's sign varies), which order such floats as their values, with its position
    in place of the lowest bits; a run of keys equal but for those bits is then put in order
    by a stable sort of its own (ratios equal on the row come out of the sample's weights
    an ulp apart, so such a run can hold most of the sample)."""
    width = 1
    while (1 << width) < keys.size:
        width += 1
    low = np.uint64((1 << width) - 1)
    unsigned = ~(np.uint64(1) << np.uint64(63))
    bits = keys.view(np.uint64)
    packed = np.empty(keys.size, np.uint64)
    for j in range(keys.size):
        packed[j] = (bits[j] & unsigned & ~low) | np.uint64(j)
    packed.sort()
    order = np.empty(keys.size, np.int64)
    for k in range(keys.size):
        order[k] = np.int64(packed[k] & low)
    start = 0
    for k in range(1, keys.size + 1):
        if k < keys.size and (packed[k] ^ packed[start]) <= low:
            continue
        if k - start > 1:  # positions ascending within the run: a stable sort keeps ties so
            run = order[start:k].copy()
            order[start:k] = run[np.argsort(keys[run], kind="mergesort")]
        start = k
    return order


@kernel
def _sample_optimum(ps, qs, order, sorted_keys, n_low, start_high, end_high, eps, kind, alpha, slope_limit):
    """(state, binding): the optimum of the sample's (weighted) p and q, given sorted by ratio
    (``order``, ``sorted_keys``: the low side [0, n_low), the high side [start_high,
    end_high), p = 0 beyond). The walk over that order finds it where it lies within the
    first 1/SAMPLE_WALK_SHARE of the breakpoints, the walk from the bisection's state
    (``walk.jump``) beyond."""
    low_p = ps[order[:n_low]]
    high_p = ps[order[start_high:end_high]][::-1].copy()  # the walk's high side: rho descending
    high_rho = sorted_keys[start_high:end_high][::-1].copy()
    q0 = qs[order[end_high:]].sum()  # p = 0 (nan keys, p = q = 0, add nothing)
    low_rho = sorted_keys[:n_low]
    low_cum = _prefix_sums(low_p)
    high_cum = _prefix_sums(high_p)
    found, state, binding = walk_or_jump(low_p, low_rho, low_cum, high_p, high_rho, high_cum, q0, kind, alpha, eps,
                                         slope_limit, ps.size // SAMPLE_WALK_SHARE, JUMP_STEPS)
    if not found:
        state, binding, _, _ = _search_laid_out(np.empty((4, ps.size), np.float64), ps, qs, eps, kind, alpha,
                                                slope_limit)
    return state, binding


@kernel(borrow=True)
def _extreme_ratios(ratios):
    """(min(1, least ratio), max(1, greatest ratio)) of ratios >= 0, none of them nan: compared
    as their bits, which order such floats as their values, so that the loop vectorises."""
    bits = ratios.view(np.int64)
    one = np.float64(1.0).view(np.int64)
    least = greatest = one
    for j in range(bits.size):
        least = min(least, bits[j])
        greatest = max(greatest, bits[j])
    return np.int64(least).view(np.float64), np.int64(greatest).view(np.float64)


@kernel(reassociate=True, borrow=True)
def _chunk_sums(ps, qs, ratios):
    """(complete, least, greatest, base, low, high) of a chunk, in one pass that writes its
    ratios q/p as float64 to ``ratios``: whether every token has q > 0 and a finite ratio; min(1,
    least ratio) and max(1, greatest ratio), meaningful where complete (compared as bits, which
    order such floats as their values); and sum min(p, q), sum (p - q)_+ and sum (q - p)_+,
    added in an order the compiler chooses (vectorised). One pass, not one per result: the
    chunk is read once, and its division overlaps the sums."""
    missing = 0
    one = np.float64(1.0).view(np.int64)
    least = greatest = one
    base = low = high = 0.0
    for j in range(ps.size):
        pj, qj = np.float64(ps[j]), np.float64(qs[j])
        t = qj / pj
        ratios[j] = t
        missing += not needs_f_tilde(t, qj)
        bits = np.float64(t).view(np.int64)
        least = min(least, bits)
        greatest = max(greatest, bits)
        base += min(pj, qj)
        low += max(pj - qj, 0.0)
        high += max(qj - pj, 0.0)
    return missing == 0, np.int64(least).view(np.float64), np.int64(greatest).view(np.float64), base, low, high


@kernel(borrow=True)
def _add_overlap(sums, base, low, high):
    """Add a chunk's sums of ``_chunk_sums`` to sums = (base, capacity_low, capacity_high) with
    their compensations in sums[3:]. Compensated across chunks: base + m is the acceptance, to
    be equal to the sorted walk's to the last bits (and not over 1); and the capacities,
    summed plainly over 131072 terms, drift past DRAFTER_BALANCE."""
    for k, chunk in enumerate((base, low, high)):
        sums[k], sums[3 + k] = add_compensated(sums[k], sums[3 + k], chunk)


@kernel
def _overlap_totals(sums):
    """(base, capacity_low, capacity_high) of the sums ``_add_overlap`` keeps."""
    return sums[0] + sums[3], sums[1] + sums[4], sums[2] + sums[5]


@kernel
def _drafter_state(p, q, eps, kind, alpha, slope_limit, work, to_end=False, terms=None):
    """(found, beyond, state, q0, base, excess, kept) for r = q, which accepts every drafted
    token and so is optimal when D_f(q || p) <= eps and the frontier's last slope is at most
    ``slope_limit`` (a price buys all of it); ``beyond`` when it is not (r = q lies past the
    budget or the price); and the walk's final state for it (every token released, a and b at
    the extreme ratios, the budget not binding).

    ``found`` also requires the sides' capacities to balance (up to DRAFTER_BALANCE): when q
    and p sum to different totals (float32 rows), the optimum stops short of r = q on one side,
    and ``excess`` (the low capacity less the high one and q0) says which and by how much.
    The sums are those of ``_compacted_sums``; on a row where every token has q > 0 and a
    finite ratio (or that ends in padding), ``_complete_sums`` gives the same, bit for bit, in
    one pass. D is summed to the end where ``to_end`` asks; else it stops where it exceeds eps.
    ``terms``: None, or a row of n that such a pass summed to the end fills with each token's
    term p f~(q/p) (see ``_complete_sums``), and then ``kept`` is True.
    """
    limit = np.inf if to_end else eps
    complete, value, a, b, base, capacity_low, capacity_high = _complete_sums(p, q, limit, kind, alpha, work, terms)
    kept = complete and to_end and terms is not None
    q0 = 0.0
    if not complete:
        value, a, b, q0, base, capacity_low, capacity_high = _compacted_sums(p, q, eps, kind, alpha, slope_limit,
                                                                               work, limit)
    state = np.zeros(STATE_SIZE, np.float64)
    state[D] = value if _last_slope(kind, alpha, a, b, q0) <= slope_limit else np.inf
    if not (state[D] <= eps and state[D] < np.inf):
        return False, True, state, 0.0, 0.0, 0.0, kept
    state[M] = min(capacity_low, capacity_high + q0)
    state[A] = a
    state[B] = b
    state[FILL] = q0
    excess = capacity_low - capacity_high - q0
    return abs(excess) <= DRAFTER_BALANCE, False, state, q0, base, excess, kept


@kernel
def _last_slope(kind, alpha, a, b, q0):
    """The slope dD/dm at r = q: f~'(b) - f~'(a), with f~'(inf) for b where drafter mass q0 lies
    on tokens with p = 0."""
    return (f_tilde_prime_at_inf(kind, alpha) if q0 > 0.0 else f_tilde_prime(kind, alpha, b)) - f_tilde_prime(
        kind, alpha, a)


@kernel
def _compacted_sums(p, q, eps, kind, alpha, slope_limit, work, limit=None):
    """(D, a, b, q0, base, capacity_low, capacity_high) of r = q: D_f(q || p) as md.divergence
    sums it (bit for bit), stopped where it exceeds ``limit`` (eps where None; where it exceeds
    eps nothing else is meaningful), or inf where the last slope exceeds ``slope_limit``; the
    extreme ratios; the drafter's mass where p = 0; sum min(p, q); and the two sides' capacities.

    D's terms are laid out in work[:3] (``terms.divergence_terms``); the last slope, from the
    extreme ratios, is tested first, then D, and the rest only where both pass, from those
    terms: on a truncated row, a pass over the tokens that carry both p and q.
    """
    count, zero, q0 = divergence_terms(q, p, work)
    ratios, ps, qs = work[0, :count], work[1, :count], work[2, :count]
    # Where q = 0 < p the ratio is 0; where it is infinite, the drafter's mass there is q0.
    a, b = _extreme_ratios(ratios)
    a = 0.0 if zero > 0.0 else a
    if _last_slope(kind, alpha, a, b, q0) > slope_limit:
        return np.inf, a, b, q0, 0.0, 0.0, 0.0
    # An infinite D means mass on p = 0 tokens, where the walk never moves it (f'(inf) = inf).
    value = divergence_of_terms(kind, alpha, work, count, zero, q0, eps if limit is None else limit)
    if not (value <= eps and value < np.inf):
        return value, a, b, q0, 0.0, 0.0, 0.0
    # The rest: where q = 0 < p only the low capacity grows, by p; where the ratio is infinite
    # only the drafter's mass there, q0 (p, if not 0, is below 1e-308).
    sums = np.array([0.0, zero, 0.0, 0.0, 0.0, 0.0])
    for first in range(0, count, CHUNK):  # ratios rewritten as they are, for sums equal to _complete_sums'
        chunk = _chunk_sums(ps[first:first + CHUNK], qs[first:first + CHUNK], ratios[first:first + CHUNK])
        _add_overlap(sums, chunk[3], chunk[4], chunk[5])
    return (value, a, b, q0) + _overlap_totals(sums)


@kernel
def _complete_sums(p, q, eps, kind, alpha, work, row_terms=None):
    """(complete, D, a, b, base, capacity_low, capacity_high) of r = q as ``_compacted_sums``
    gives them, in one pass over the row: chunk by chunk, each chunk's ratios written to
    work[0] and summed with its p and q while in cache. Where every token has q > 0 and a
    finite ratio, no term is left out, the compacted layout is the row itself and every sum
    the same, bit for bit. It is so too where the tokens without them all come last and have
    p = q = 0 (a vocabulary's padding: they add nothing, and the layout ends where they
    start). ``complete`` is False, and nothing else meaningful, where other tokens lack them
    or a term overflows (``_compacted_sums`` then sums it term by term). D stops where it
    exceeds eps.

    ``row_terms``: None, or a row of n that the pass fills with each token's term p f~(q/p)
    where it writes them (in place of a chunk's worth, reused: the row costs it 2% under
    jensen_shannon at n = 131072); a padded row's padding has terms 0."""
    ratios = work[0, :min(CHUNK, p.size)]
    store = np.empty(CHUNK, np.float64)
    keep = False
    if row_terms is not None:  # (pruned where None)
        if row_terms.size == p.size:
            store, keep = row_terms, True
    value = 0.0
    a = b = 1.0
    sums = np.zeros(6, np.float64)
    for first in range(0, p.size, CHUNK):
        count = min(CHUNK, p.size - first)
        chunk = _chunk_sums(p[first:first + count], q[first:first + count], ratios)
        padded = not chunk[0]
        if padded:
            count = _padded_from(p, q, first)
            if count < 0:
                return False, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
            chunk = _chunk_sums(p[first:first + count], q[first:first + count], ratios)
        terms = store[first:first + count] if keep else store[:count]
        weighted_f_tilde_terms(kind, alpha, ratios, p[first:first + count], 1.0, 0, count, terms)
        value += sum_of_terms(terms, count)
        if not value < np.inf:
            return False, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
        if value > eps:
            return True, value, a, b, 0.0, 0.0, 0.0
        a = min(a, chunk[1])
        b = max(b, chunk[2])
        _add_overlap(sums, chunk[3], chunk[4], chunk[5])
        if padded:  # the rest of the row adds nothing
            if keep:
                store[first + count:] = 0.0
            break
    return (True, value, a, b) + _overlap_totals(sums)


@kernel(borrow=True)
def _padded_from(p, q, first):
    """The number of tokens from ``first`` on that have q > 0 and a finite ratio, where every
    token after them has p = q = 0 (the row ends in padding); else -1."""
    end = p.size
    while end > first and p[end - 1] == 0.0 and q[end - 1] == 0.0:
        end -= 1
    for i in range(first, end):
        qi = np.float64(q[i])
        if not needs_f_tilde(qi / np.float64(p[i]), qi):
            return -1
    return end - first


@kernel(borrow=True)
def _reach(keys, tokens, t, floor, ceiling, reach):
    """The keys nearest below and above ``t`` beyond which the sample tokens (sorted by key)
    stand for ``reach`` row tokens on that side of t; ``floor`` and ``ceiling`` where they
    stand for fewer. A bound that falls on a run of tied keys (``_tie_end``) is moved to just
    beyond the run's end nearest t, so that the screen settles the whole run rather than leave it
    to the search (smoothed models give most of a row one ratio): a wider reach still gives a
    bound no nearer t."""
    split = np.searchsorted(keys, t)  # keys[:split] < t <= keys[split:]
    below = floor
    count = 0.0
    for j in range(split - 1, -1, -1):
        count += tokens[j]
        if count >= reach:
            # Ratio 0 (q = 0: truncated drafters) lies below any threshold t > 0 but below no
            # bound 0: the least normal float is a bound that the screen can settle them by.
            below = keys[j] if keys[j] > 0.0 or t <= _LEAST_NORMAL else _LEAST_NORMAL
            end = _tie_end(keys, j, 1, split)
            if keys[j] > 0.0 and end >= 0 and keys[end] * (1.0 + _TIED) < t:
                below = keys[end] * (1.0 + _TIED)
            break
    above = ceiling
    count = 0.0
    for j in range(split, keys.size):
        count += tokens[j] if keys[j] > t else 0.0
        if count >= reach:
            above = keys[j]
            start = _tie_end(keys, j, -1, split)
            if start >= 0 and keys[start] * (1.0 - _TIED) > t:
                above = keys[start] * (1.0 - _TIED)
            break
    return below, above


@kernel(borrow=True)
def _tie_end(keys, j, step, split):
    """The last index, from j in direction ``step`` (+1 towards t from below, -1 towards t from
    above; not past ``split``), of the run of sorted keys tied with keys[j], each within
    relative _TIED of the next; -1 where no other key is tied with keys[j]."""
    end = j
    while (end + step < split if step > 0 else end + step >= split) and _tied(keys[end], keys[end + step]):
        end += step
    tied = end != j or (0 <= j - step < keys.size and _tied(keys[j], keys[j - step]))
    return end if tied else -1


@kernel
def _tied(x, y):
    """Whether two sample keys are equal up to the rounding of the sample's weights."""
    return abs(x - y) <= _TIED * max(x, y)


@kernel(borrow=True)
def _ratio_at(sums, s, m, tolerance):
    """One side's threshold ratio at moved mass m in the last segment, where its clipped group
    (p-mass P_CLIP) moves between keys REL_MIN and CLIP_MAX: exactly those from the group's
    start and end on (the end as ``_reached`` tells it)."""
    p_clip = sums[P_CLIP]
    key = sums[REL_MIN]
    if p_clip > 0.0:
        start = sums[M_REL] + (s - sums[REL_MIN]) * p_clip
        end = sums[M_REL] + (s - sums[CLIP_MAX]) * p_clip
        if _reached(m, start, end, tolerance):
            key = sums[CLIP_MAX]
        elif m > start:
            key = min(max(s - (m - sums[M_REL]) / p_clip, sums[CLIP_MAX]), sums[REL_MIN])
    return s * key


@kernel
def _reached(m, start, end, tolerance):
    """Whether moved mass m is at the end of a group that moves from ``start`` to ``end``: within
    ``tolerance`` of it (moved masses summed in different orders), and nearer it than the start
    (a group may move less mass in all than that tolerance: p-mass 1e-32 beside a side of mass 1)."""
    return m >= end - tolerance and end - m <= m - start


@kernel(borrow=True)
def _thresholds_at(low_sums, high_sums, m, tolerance, fill_open):
    """(a, b, fill) at moved mass m in the last segment (see ``_ratio_at``); ``fill`` the mass
    moved onto tokens with p = 0 where the high side has no clipped group and they can take it."""
    fill = 0.0
    if high_sums[P_CLIP] <= 0.0 and fill_open:
        fill = max(m - high_sums[M_REL], 0.0)
    return _ratio_at(low_sums, 1.0, m, tolerance), _ratio_at(high_sums, -1.0, m, tolerance), fill


@kernel
def _held_back(low_sums, high_sums, m_end, tolerance, fill_open, eps, kind, alpha, slope_limit):
    """(held, state): whether the settled groups hold the walk back at the end m_end < m_max of
    the last segment, within the budget (or the price) there, as decided from bounds alone
    (the chord bounds of the search) so that the released tokens need not be summed; and
    then the state at m_end, its D an upper bound. Such a state is not the optimum (a search
    with nothing settled beforehand never ends there): only the thresholds matter."""
    a, b, fill = _thresholds_at(low_sums, high_sums, m_end, tolerance, fill_open)
    fpinf = f_tilde_prime_at_inf(kind, alpha)
    upper = fill * fpinf if fill > 0.0 else 0.0
    for side_sums, s, t in ((low_sums, 1.0, a), (high_sums, -1.0, -b)):
        upper += _cost_bounds(kind, alpha, s, t, side_sums[P_CLIP], side_sums[F_EXACT], side_sums[P_UNC],
                              side_sums[M_UNC])[1]
    slope = (fpinf if fill > 0.0 else f_tilde_prime(kind, alpha, b)) - f_tilde_prime(kind, alpha, a)
    held = ((eps == np.inf or upper < eps * (1.0 - _MARGIN))
            and (slope_limit == np.inf or slope < slope_limit * (1.0 - _MARGIN)))
    state = np.zeros(STATE_SIZE, np.float64)
    state[K_LOW] = 1.0 if low_sums[P_CLIP] > 0.0 else 0.0
    state[K_HIGH] = 1.0 if high_sums[P_CLIP] > 0.0 else 0.0
    state[D] = upper
    state[M] = m_end
    state[A] = a
    state[B] = b
    state[FILL] = fill
    return held, state


@kernel(borrow=True)
def _narrow(keys, ps, positions, sums, scratch, capacity_high, fill_open, m_max, eps, kind, alpha, slope_limit):
    """The search proper of ``_search``: settle every undecided token of both sides (``keys``,
    ``ps``, ``positions`` and ``sums`` each a (low, high) pair), pivot by pivot, updating the
    positions and sums in place. Without reference counting: it picks a side's arrays from
    the pairs at every pivot, which would otherwise count a reference to each."""
    low_position, high_position = positions
    signs = (1.0, -1.0)
    fpinf = f_tilde_prime_at_inf(kind, alpha)
    while True:
        undecided_low = low_position[HI] - low_position[LO]
        undecided_high = high_position[HI] - high_position[LO]
        if undecided_low == 0 and undecided_high == 0:
            break
        side = 0 if undecided_low >= undecided_high else 1
        other = 1 - side
        key, pp, position, side_sums, s = keys[side], ps[side], positions[side], sums[side], signs[side]
        okey, op, oposition, osums, os = keys[other], ps[other], positions[other], sums[other], signs[other]
        v = _pivot(key, position[LO], position[HI], scratch)
        # Keys <= v count as clipped at v, the others as released (the same D and m).
        i, p_left, p_right, moved_right = _partition(key, pp, position[LO], position[HI], v, s, False, scratch)
        m_v = side_sums[M_REL] + moved_right + (s - v) * (side_sums[P_CLIP] + p_left)
        if m_v > m_max:
            _settle(position, side_sums, False, i, p_left, 0.0, v, False, 0.0)
            continue
        split, t, op_clipped, op_released, omoved_released, oclip_max, orel_min = _locate(
            okey, op, oposition, osums, os, m_v, scratch)
        fill = 0.0
        if other == 1 and fill_open and osums[P_CLIP] + op_clipped == 0.0:
            fill = max(m_v - capacity_high, 0.0)
        feasible = False
        summed = False
        f_side = f_side_unsummed = f_other = f_other_unsummed = 0.0
        if slope_limit < np.inf:  # a price: decide by the slope at m_v, from the two thresholds alone
            a_v, b_v = (v, -t) if side == 0 else (t, -v)
            high_slope = fpinf if fill > 0.0 else f_tilde_prime(kind, alpha, b_v)
            feasible = high_slope - f_tilde_prime(kind, alpha, a_v) <= slope_limit
        for exact in (False, True):
            if slope_limit < np.inf:
                break
            if exact:
                lower, f_side, f_side_unsummed = _side_cost(key, pp, position, side_sums, s, v, i, p_left, kind, alpha,
                                                            scratch[0])
                o_lower, f_other, f_other_unsummed = _side_cost(okey, op, oposition, osums, os, t, split, op_clipped,
                                                                kind, alpha, scratch[0])
                upper, o_upper = lower, o_lower
            else:  # from sums alone, passed as numbers: a call counts a reference to each array it is passed
                lower, upper = _cost_bounds(kind, alpha, s, v, side_sums[P_CLIP] + p_left, side_sums[F_EXACT],
                                            side_sums[P_UNC] + p_right, side_sums[M_UNC] + moved_right)
                o_lower, o_upper = _cost_bounds(kind, alpha, os, t, osums[P_CLIP] + op_clipped, osums[F_EXACT],
                                                osums[P_UNC] + op_released, osums[M_UNC] + omoved_released)
            if fill > 0.0:
                lower += fill * fpinf
                upper += fill * fpinf
            lower += o_lower
            upper += o_upper
            if exact:
                feasible = lower <= eps
                summed = True
            elif lower > eps * (1.0 + _MARGIN):
                feasible = False
            elif upper < eps * (1.0 - _MARGIN):
                feasible = True
            else:
                continue
            break
        if feasible:
            if i == position[HI]:  # nothing lies above v: release the keys equal to v
                i, _, p_right, moved_right = _partition(key, pp, position[LO], position[HI], v, s, True, scratch)
                f_side = weighted_f_tilde(kind, alpha, p_right, s * v)
            _settle(position, side_sums, True, i, p_right, moved_right, v, summed, f_side + f_side_unsummed)
            _settle(oposition, osums, True, split, op_released, omoved_released, orel_min,
                    summed, f_other + f_other_unsummed)
        else:
            _settle(position, side_sums, False, i, p_left, 0.0, v, summed, f_side_unsummed)
            _settle(oposition, osums, False, split, op_clipped, 0.0, oclip_max,
                    summed, f_other_unsummed)


@kernel
def _search(work, split, layout, low_sums, high_sums, eps, kind, alpha, slope_limit):
    """``select_walk`` on rows already split into ``work``: ``split`` is what ``split_sides``
    returns, and ``layout`` = (unsummed_low, unsummed_high, summed_low, summed_high) the
    tokens at the end of each side (low, high) released before the search, the summed ones
    last (their sums of p f~ are in the sums below); ``low_sums`` and ``high_sums`` the sides'
    sums over the tokens settled before the search (``_settled``), which the search updates.

    With a finite ``slope_limit`` (1 / price) the search finds the largest m whose slope
    dD/dm = f~'(b) - f~'(a) is at most it, instead of the largest with D(m) <= eps; no sums
    of f~ are needed to decide, only the two thresholds at each pivot.

    Returns (state, binding, q0, base, stopped): ``stopped`` when the state is not a crossing
    of the budget inside the last segment nor the end at m_max, but where that segment ends
    (or an empty one: its ends crossed), within the budget. The search's decisions make that
    the optimum, but with tokens settled beforehand it may be only the end of their reach.
    """
    size = work.shape[1]
    n_low, n_high, q0, base, capacity_low, capacity_high = split
    scratch = work[2:]
    low_key = work[0, :n_low]
    low_p = work[1, :n_low]
    high_key = work[0, size - n_high:]
    high_p = work[1, size - n_high:]
    keys = (low_key, high_key)
    ps = (low_p, high_p)
    signs = (1.0, -1.0)
    low_position = np.array([0, n_low - layout[0] - layout[2], n_low - layout[2]], np.int64)
    high_position = np.array([0, n_high - layout[1] - layout[3], n_high - layout[3]], np.int64)
    positions = (low_position, high_position)
    sums = (low_sums, high_sums)
    fpinf = f_tilde_prime_at_inf(kind, alpha)
    fill_open = q0 > 0.0 and fpinf < np.inf
    m_max = min(capacity_low, capacity_high + (q0 if fill_open else 0.0))
    _narrow(keys, ps, positions, sums, scratch, capacity_high, fill_open, m_max, eps, kind, alpha, slope_limit)
    # Both sides settled: the last segment.
    p_low = low_sums[P_CLIP]
    p_high = high_sums[P_CLIP]
    a_top = low_sums[REL_MIN]
    a_min = max(low_sums[CLIP_MAX], 0.0)
    b_bottom = -high_sums[REL_MIN]
    b_max = -high_sums[CLIP_MAX]
    # A side with no clipped group has released every token: its moved mass is its capacity,
    # the very number m_max is taken from (its released masses, summed in another order over
    # up to n terms, can differ from that by more than the tolerance below).
    low_moved = low_sums[M_REL] if p_low > 0.0 else capacity_low
    high_moved = high_sums[M_REL] if p_high > 0.0 else capacity_high
    m_low_start = low_moved + (1.0 - a_top) * p_low
    m_low_end = low_moved + (1.0 - a_min) * p_low
    m_high_start = high_moved + (b_bottom - 1.0) * p_high
    if p_high > 0.0:
        m_high_end = high_moved + (b_max - 1.0) * p_high
    else:
        b_max = b_bottom
        m_high_end = high_moved + (q0 if fill_open else 0.0)
    m_start = max(m_low_start, m_high_start, 0.0)
    m_end = min(m_low_end, m_high_end, m_max)
    # m_max and the segment ends are sums in different orders: equal within rounding.
    tolerance = _ENDS * m_max
    stopped = m_end < m_start - tolerance
    if m_end < m_start:
        m_end = m_start
    if not stopped and m_end < m_max - tolerance:
        held, state = _held_back(low_sums, high_sums, m_end, tolerance, fill_open, eps, kind, alpha, slope_limit)
        if held:
            return state, True, q0, base, True
    # Sum the remaining released tokens and solve the segment.
    for side in range(2):
        position, side_sums = positions[side], sums[side]
        side_sums[F_EXACT] += sum_weighted_f_tilde(kind, alpha, keys[side], ps[side], signs[side], position[HI],
                                                   position[END], 0.0, np.inf, scratch[0])
    a0, b0, fill0 = _thresholds_at(low_sums, high_sums, m_start, tolerance, fill_open)
    f_low = low_sums[F_EXACT]
    f_high = high_sums[F_EXACT]
    d0 = f_low + f_high
    if p_low > 0.0:
        d0 += p_low * f_tilde(kind, alpha, a0)
    if p_high > 0.0:
        d0 += weighted_f_tilde(kind, alpha, p_high, b0)
    elif fill0 > 0.0:
        d0 += fpinf * fill0
    state = np.zeros(STATE_SIZE, np.float64)
    state[K_LOW] = 1.0 if p_low > 0.0 else 0.0
    state[K_HIGH] = 1.0 if p_high > 0.0 else 0.0
    length = m_end - m_start
    delta = 0.0
    binding = False
    value = d0
    a, b, fill = a0, b0, fill0
    if length > 0.0 and p_low > 0.0:
        value, end_slope, a, b, fill = segment_point(length, kind, alpha, f_low, p_low, a0, a_min, f_high, p_high,
                                                     b0, b_max, fpinf, fill0)
        if value <= eps and end_slope <= slope_limit:
            # The whole segment: end exactly on the breakpoint(s) that close it.
            delta = length
            binding = m_end < m_max - tolerance
            stopped = stopped or binding
            # Land exactly on the closing breakpoint(s) where that keeps D within the budget.
            a_end = a_min if _reached(m_end, m_low_start, m_low_end, tolerance) else a
            b_end = b_max if p_high > 0.0 and _reached(m_end, m_high_start, m_high_end, tolerance) else b
            end_value = f_low + p_low * f_tilde(kind, alpha, a_end) + f_high
            if p_high > 0.0:
                end_value += weighted_f_tilde(kind, alpha, p_high, b_end)
            elif fill > 0.0:
                end_value += fpinf * fill
            if end_value <= eps and (end_value < np.inf or value == np.inf):
                a, b, value = a_end, b_end, end_value
        else:
            binding = True
            if slope_limit < np.inf:
                delta = solve_slope(slope_limit, length, kind, alpha, f_low, p_low, a0, a_min, f_high, p_high,
                                    b0, b_max, fpinf, fill0)
            else:
                delta = solve_segment(eps, length, d0, kind, alpha, f_low, p_low, a0, a_min, f_high, p_high,
                                      b0, b_max, fpinf, fill0)
            value, _, a, b, fill = segment_point(delta, kind, alpha, f_low, p_low, a0, a_min, f_high, p_high,
                                                 b0, b_max, fpinf, fill0)
            if delta == 0.0:
                value = d0
    state[D] = value
    state[M] = m_start + delta
    state[A] = a
    state[B] = b
    state[FILL] = fill
    if length <= 0.0 or p_low <= 0.0:
        stopped = stopped or m_start < m_max - tolerance
    return state, binding, q0, base, stopped
