"""Screening a long row: most of its tokens settled by two cheap passes.

At the optimum of an LLM row the thresholds a and b sit among few of its tokens: most are
clipped (ratio below a on the low side, above b on the high side) or released (between a
and b), about 95% clipped and 3% released on a 131072-token row at eps = 0.05 under KL.
Given bounds a_lo <= a <= a_hi < 1 < b_lo <= b <= b_hi, estimated on a sample of the row,
the screen pass settles every token outside them: it keeps the p-mass of each clipped group,
together with the row's totals (lossless acceptance, capacities, drafter mass on p = 0), and
flags the tokens. It stores one byte per token and otherwise only sums, so the compiler
vectorises it (the sums are reassociated, which changes their rounding and nothing else).
The gather pass then copies the undecided tokens, the only ones the search needs one by one,
into the split layout of ``index.split_sides``, and the released ones after them, to be
summed there (their moved mass by ``released_sums`` and their p f~(rho), over those tokens
alone, not in the screen's pass over all of them); where few tokens are flagged, it visits
only those, skipping eight unflagged tokens at a time. Where most of the row is released,
``sum_released`` sums their terms where they lie instead, in a vectorised pass, and the
gather copies only the undecided tokens. A screen of the row after an earlier one may take
over the sums of the tokens that one released (``screen``'s ``summed``): it then lays out
and sums only the tokens released since and those it reopens (released then, undecided now).
Where the caller holds every token's term p f~(q/p) (``select`` keeps them from the pass that
tried r = q), ``sum_released_terms`` reads the released tokens' sums off them, evaluating no f~.

The bounds are an estimate, so the solve on the screened row must confirm its answer: the
search sums every group exactly, so its last segment is a true segment of the row's
walk, and when the budget crosses inside it (or the segment ends at m_max, within the
budget) that point is the row's optimum, D being non-decreasing in the moved mass. An
answer that only ends where the settled groups let the walk go is not confirmed, and the
caller widens the bounds (``select.select_walk``).
"""

import sys

import numpy as np
from numba.cpython.unsafe.numbers import trailing_zeros

from mdverify.core._fgen import weighted_f_tilde_terms
from mdverify.core.checks import (NO_NEGATIVE, NO_POSITIVE, entry_bits, least_positive_below, sum_tolerance,
                                 sums_valid)
from mdverify.core.jit import MASK_REGISTERS, kernel
from mdverify.core.terms import CHUNK, weighted_f_tilde

_LITTLE_ENDIAN = sys.byteorder == "little"

#: Flag values of the screen pass: settled as clipped (or neither low nor high, or released and
#: summed before: ``screen``'s ``summed``), undecided, settled as released, and undecided after
#: it was released and summed before. The low side's flags are the odd ones (``_place`` tests
#: the bit).
SETTLED, KEPT_LOW, KEPT_HIGH, RELEASED_LOW, RELEASED_HIGH, REOPENED_LOW, REOPENED_HIGH = range(7)

#: The screen's rows: every p_i = 0 or p_i >= SCREEN_P_MIN (probabilities down to 1e-300
#: included), and, as in any distribution, every q_i <= 1 (up to 2^10 would do). Then q/p
#: cannot overflow, and the screen's products cannot lose precision where a comparison
#: depends on it. ``mark_sample`` tells whether a row qualifies.
SCREEN_P_MIN = 2.0 ** -1010
#: Relative margin of the screen's bounds: a token whose ratio lies within it of a bound is
#: left undecided, so that comparing products decides as comparing the rounded ratio would.
SLACK = 8.0 * 2.0 ** -53


@kernel
def flag_view(workspace_row, n):
    """The first n bytes of a float64 workspace row as flags, padded to whole 8-byte words."""
    return workspace_row.view(np.uint8)[: 8 * ((n + 7) // 8)]


@kernel(borrow=True)
def inclusion(p, q, i, size):
    """Probability min(1, (max(p_i, q_i) + 1 / n) size) with which ``mark_sample`` takes token i."""
    return min(1.0, _inclusion_share(np.float64(p[i]), np.float64(q[i]), 1.0 / p.size, size))


@kernel
def _inclusion_share(pi, qi, spread, size):
    """``inclusion`` before it is capped at 1, with spread = 1 / n."""
    return (max(pi, qi) + spread) * size


#: 2^64 / golden ratio, odd: i times it, modulo 2^64, is frac(i / golden ratio) in 64 bits.
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_ONE_BITS = np.uint64(0x3FF0000000000000)


@kernel
def _weyl_uniform(weyl):
    """The uniform in [0, 1) of the top 52 bits of a 64-bit Weyl term: those bits as the
    mantissa of a float in [1, 2), less 1 (exact). Unlike a conversion of the integer, which
    has no vector instruction below AVX-512, this vectorises on any x86-64; and the term is
    kept as a running sum rather than a product, for the same reason."""
    return np.uint64((weyl >> np.uint64(12)) | _ONE_BITS).view(np.float64) - 1.0


@kernel(reassociate=True, borrow=True)
def mark_sample(p, q, size, flags, check):
    """flags[i] = 1 for a sample that takes token i with probability ``inclusion``, else 0.

    Half the sample goes in proportion to the mass max(p_i, q_i), so that sums of p or q over a
    set of tokens, weighted by 1 / inclusion, vary little even where a few tokens carry most
    of the mass; half uniformly, so that the sample also has ratios wherever the row has many
    tokens. The uniforms are the Weyl sequence frac(i / golden ratio) (``_weyl_uniform``): the
    sample is deterministic and evenly spread over positions; its expected size is
    sum_i inclusion_i <= 3 ``size``.

    Returns (in_range, valid, capacity_low, capacity_high): whether the row is in the screen's
    range (SCREEN_P_MIN); with ``check``, ``checks.row_valid``'s verdict from the same pass
    (else True); and the row's capacities sum (p - q)_+ and sum (q - p)_+, which calibrate the
    sample (``select._sample``). Its sums are reassociated, so that the loop vectorises; that
    changes their rounding alone.
    """
    # The entry tests are minima of integers (``checks.entry_bits``), which vectorise; a uniform is
    # below 1, so it falls below ``inclusion`` exactly where it falls below that probability uncapped.
    lowest, least_p = NO_NEGATIVE, NO_POSITIVE
    sum_p = sum_q = moved = 0.0
    weyl = np.uint64(0)
    spread = 1.0 / p.size
    if check:
        for i in range(p.size):
            pi = np.float64(p[i])
            qi = np.float64(q[i])
            flags[i] = _weyl_uniform(weyl) < _inclusion_share(pi, qi, spread, size)
            weyl += _GOLDEN
            bits_p = entry_bits(pi)
            lowest = min(lowest, min(bits_p, entry_bits(qi)))
            least_p = min(least_p, np.uint64(bits_p))
            sum_p += pi
            sum_q += qi
            moved += abs(pi - qi)
        return (not least_positive_below(least_p, SCREEN_P_MIN),
                sums_valid(sum_p, sum_q, lowest, least_p, sum_tolerance(p))) + _capacities(moved, sum_p - sum_q)
    excess = 0.0
    for i in range(p.size):  # the same loop without the check's sums
        pi = np.float64(p[i])
        qi = np.float64(q[i])
        flags[i] = _weyl_uniform(weyl) < _inclusion_share(pi, qi, spread, size)
        weyl += _GOLDEN
        least_p = min(least_p, np.uint64(entry_bits(pi)))
        moved += abs(pi - qi)
        excess += pi - qi
    return (not least_positive_below(least_p, SCREEN_P_MIN), True) + _capacities(moved, excess)


@kernel
def _capacities(moved, excess):
    """(sum (p - q)_+, sum (q - p)_+) from sum |p - q| and sum (p - q): one sum fewer in the pass."""
    return 0.5 * (moved + excess), 0.5 * (moved - excess)


@kernel(reassociate=True, borrow=True)
def mark_both(p, q, flags):
    """flags[i] = 1 where token i carries both p and q, else 0; returns (count, zero, spilled):
    the number of such tokens, the p-mass where q = 0 and the q-mass where p = 0. For a row in
    the screen's range, where a ratio of two positive entries is finite; its sums are
    reassociated, so that the loop vectorises."""
    count = 0
    zero = spilled = 0.0
    for i in range(p.size):
        pi = np.float64(p[i])
        qi = np.float64(q[i])
        both = (pi > 0.0) & (qi > 0.0)
        flags[i] = both
        count += both
        zero += pi if qi == 0.0 else 0.0
        spilled += qi if pi == 0.0 else 0.0
    return count, zero, spilled


#: Words of flags that ``flagged`` tests together, skipping all eight where none is set: on a
#: row's sample (0.5% of the row flagged) the pass took 4 us instead of 14 at n = 131072.
BLOCK = 8


@kernel(borrow=True)
def flagged(flags, n, positions):
    """Write the positions i < n with a non-zero flag to ``positions`` (int64), in order;
    return their count. The flags are read eight at a time, as one word, a block of BLOCK
    words skipped where all are zero, and only the non-zero bytes of a word are visited
    (``_flag_word``, ``_pop_lowest``)."""
    count = 0
    if not _LITTLE_ENDIAN:  # byte j of a word is not its j-th least significant
        for i in range(n):
            if flags[i] != 0:
                positions[count] = i
                count += 1
        return count
    words = flags.view(np.uint64)
    whole = n // (8 * BLOCK) * BLOCK  # the words of whole blocks, every flag of them below n
    for block in range(0, whole, BLOCK):
        if not _none_set(words, block):
            for w in range(block, block + BLOCK):
                count = _positions_in(words[w], w, positions, count)
    for w in range(whole, words.size):
        count = _positions_in(_flag_word(words, w, n), w, positions, count)
    return count


@kernel(inline=True)
def _none_set(words, block):
    """Whether the BLOCK words from ``block`` on are all zero (one test of their bitwise or)."""
    bits = np.uint64(0)
    for w in range(block, block + BLOCK):
        bits |= words[w]
    return bits == 0


@kernel(inline=True)
def _positions_in(word, w, positions, count):
    """Write the positions of flag word w's non-zero bytes after ``count`` of them; return the new count."""
    while word != 0:
        byte, word = _pop_lowest(word)
        positions[count] = 8 * w + byte
        count += 1
    return count


@kernel(inline=True)
def _flag_word(words, w, n):
    """Flag word w, the bytes past flag n - 1 cleared (the padding of the last word may hold
    anything)."""
    word = words[w]
    if 8 * w + 8 > n:
        word &= (np.uint64(1) << np.uint64(8 * (n - 8 * w))) - np.uint64(1)
    return word


@kernel(inline=True)
def _pop_lowest(word):
    """(byte, rest): the lowest non-zero byte of a non-zero little-endian flag word (its
    trailing zero bits / 8, one instruction), and the word with that byte cleared."""
    byte = np.int64(trailing_zeros(word)) >> 3
    return byte, word & ~(np.uint64(0xFF) << np.uint64(8 * byte))


@kernel(inline=True)
def _count_as_float(condition):
    return 1.0 if condition else 0.0


@kernel(inline=True)
def _count_as_int(condition):
    return np.int64(condition)


#: How a vectorised pass counts the tokens that meet a condition: with AVX-512 as a float64 sum
#: (exact below 2^53), one masked add, where an int64 count widens the comparison's mask to a
#: vector first; otherwise in int64, one subtraction of the all-ones lanes, where a float64 one
#: costs more. ``screen``'s four counts at n = 131072, an AMD EPYC (Zen 4), int64 against
#: float64: 103 against 88 us with AVX-512, 137 against 201 us compiled for AVX2.
_count, NO_COUNT = (_count_as_float, 0.0) if MASK_REGISTERS else (_count_as_int, 0)


@kernel
def screen_factors(bounds):
    """(1 / a_lo', 1 / a_hi', b_lo', b_hi'): the factors ``screen`` compares q and p with, for
    bounds a_lo' = a_lo (1 - s), a_hi' = a_hi (1 + s), b_lo' = b_lo (1 - s), b_hi' = b_hi (1 + s)
    moved outwards by s = SLACK (where they settle nothing more than the exact bounds)."""
    a_lo, a_hi, b_lo, b_hi = bounds
    return (1.0 / (a_lo * (1.0 - SLACK)), 1.0 / (a_hi * (1.0 + SLACK)), b_lo * (1.0 - SLACK),
            b_hi * (1.0 + SLACK))


@kernel(reassociate=True, borrow=True)
def screen(p, q, bounds, summed, flags):
    """Flag every token for the search; return (base, capacity_low, capacity_high, q0,
    p_clipped_low, p_clipped_high, n_low, n_high, n_released_low, n_released_high,
    n_reopened_low, n_reopened_high).

    ``bounds`` = (a_lo, a_hi, b_lo, b_hi) with a_lo <= a_hi < 1 < b_lo <= b_hi. A low token
    (q < p) with ratio rho = q/p below a_lo, and a high one (q > p > 0) with rho above b_hi,
    are settled as clipped; a low token with rho above a_hi, and a high one below b_lo, as
    released (RELEASED_LOW, RELEASED_HIGH); the others are undecided (KEPT_LOW, KEPT_HIGH),
    and so are those within a few ulps of a bound. The totals are those of
    ``index.split_sides``; then come the p-mass of each clipped group and the counts of the
    tokens ``gather`` lays out: of each side not clipped, of each side released, and of each
    side reopened (below). The released groups' sums are left to the passes that visit those
    tokens anyway (``gather`` and ``released_sums``, or ``sum_released``): here each sum costs
    every token of the row (four of them took a sixth of this pass: 124 -> 102 us at n =
    131072, AMD EPYC Zen 4).

    No ratio is computed: the bounds are compared as products (``screen_factors``), for a
    division per token would cost this pass three times the rest. The counts are added as
    ``_count`` chooses for the target. Requires the row to be in the screen's range
    (SCREEN_P_MIN).

    ``summed`` = (a_hi', b_lo', base, capacity_low, capacity_high, q0): an earlier screen of the
    row whose released groups the caller has summed, its a_hi and b_lo (bounds that released
    no token these clip: a_lo <= a_hi' and b_lo' <= b_hi) and the row's totals it returned;
    None for none. Then the pass is ``_screen_after``'s.
    """
    if summed is not None:
        return _screen_after(p, q, bounds, summed, flags)
    factors = screen_factors(bounds)
    base = capacity_low = capacity_high = q0 = p_clipped_low = p_clipped_high = 0.0
    n_low = n_high = n_released_low = n_released_high = NO_COUNT
    for i in range(p.size):
        pi = np.float64(p[i])
        qi = np.float64(q[i])
        low, high, clipped_low, released_low, clipped_high, released_high = _classify(pi, qi, factors)
        kept_low = low & ~clipped_low
        kept_high = high & ~clipped_high
        base += min(pi, qi)
        capacity_low += pi - qi if low else 0.0
        capacity_high += qi - pi if high else 0.0
        q0 += qi if pi == 0.0 else 0.0
        p_clipped_low += pi if clipped_low else 0.0
        p_clipped_high += pi if clipped_high else 0.0
        n_low += _count(kept_low)
        n_high += _count(kept_high)
        n_released_low += _count(released_low)
        n_released_high += _count(released_high)
        flags[i] = (kept_low * KEPT_LOW + kept_high * KEPT_HIGH
                    + released_low * (RELEASED_LOW - KEPT_LOW) + released_high * (RELEASED_HIGH - KEPT_HIGH))
    return (base, capacity_low, capacity_high, q0, p_clipped_low, p_clipped_high, int(n_low), int(n_high),
            int(n_released_low), int(n_released_high), 0, 0)


@kernel
def withdraws(bounds, earlier):
    """Whether ``bounds`` may clip a token that a screen with ``earlier`` = (a_hi', b_lo')
    released (a_lo > a_hi' or b_hi < b_lo'): ``screen`` cannot then take that screen's sums
    (its ``summed``)."""
    return bounds[0] > earlier[0] or bounds[3] < earlier[1]


@kernel(reassociate=True, borrow=True)
def _screen_after(p, q, bounds, summed, flags):
    """``screen`` after an earlier screen whose released groups the caller has summed (its
    ``summed``). Compared as that screen compared them, its released tokens are found to the
    last one: those released here too are settled, their sums being the caller's, and those
    undecided here flagged REOPENED_LOW or REOPENED_HIGH, counted among the undecided and
    apart, for the caller to take their sums out; neither kind is counted as released. The
    row's totals are those given, not summed again: summing them too, this pass took 1.7x the
    time of ``screen``'s own (259 against 153 us at n = 131072, an Intel Xeon), and takes 1.3x
    (205 us). Its loop is apart from ``screen``'s: one loop for both, the totals' sums under a
    branch on ``summed``, took 690 us here."""
    factors = screen_factors(bounds)
    _, over_a_before, b_before, _ = screen_factors((1.0, summed[0], summed[1], 1.0))
    p_clipped_low = p_clipped_high = 0.0
    n_low = n_high = n_released_low = n_released_high = n_reopened_low = n_reopened_high = NO_COUNT
    for i in range(p.size):
        pi = np.float64(p[i])
        qi = np.float64(q[i])
        low, high, clipped_low, released_low, clipped_high, released_high = _classify(pi, qi, factors)
        before_low = low & (qi * over_a_before > pi)
        before_high = high & (qi < b_before * pi)
        kept_low = low & ~clipped_low & ~released_low & ~before_low
        kept_high = high & ~clipped_high & ~released_high & ~before_high
        reopened_low = before_low & ~released_low
        reopened_high = before_high & ~released_high
        released_low &= ~before_low
        released_high &= ~before_high
        p_clipped_low += pi if clipped_low else 0.0
        p_clipped_high += pi if clipped_high else 0.0
        n_low += _count(kept_low)
        n_high += _count(kept_high)
        n_released_low += _count(released_low)
        n_released_high += _count(released_high)
        n_reopened_low += _count(reopened_low)
        n_reopened_high += _count(reopened_high)
        flags[i] = (kept_low * KEPT_LOW + kept_high * KEPT_HIGH + released_low * RELEASED_LOW
                    + released_high * RELEASED_HIGH + reopened_low * REOPENED_LOW + reopened_high * REOPENED_HIGH)
    base, capacity_low, capacity_high, q0 = summed[2:]
    n_low += n_released_low + n_reopened_low  # every token gather lays out on the side
    n_high += n_released_high + n_reopened_high
    return (base, capacity_low, capacity_high, q0, p_clipped_low, p_clipped_high, int(n_low), int(n_high),
            int(n_released_low), int(n_released_high), int(n_reopened_low), int(n_reopened_high))


@kernel(inline=True)
def _classify(pi, qi, factors):
    """(low, high, clipped_low, released_low, clipped_high, released_high): where token (p_i, q_i)
    lies against bounds whose ``screen_factors`` are ``factors``."""
    over_a_lo, over_a_hi, b_lo, b_hi = factors
    low = qi < pi
    high = (qi > pi) & (pi > 0.0)
    return (low, high, low & (qi * over_a_lo < pi), low & (qi * over_a_hi > pi), high & (qi > b_hi * pi),
            high & (qi < b_lo * pi))


@kernel(reassociate=True, borrow=True)
def released_sums(key, weight, s):
    """(p-mass, moved mass) of tokens laid out as keys (rho, s = 1, or -rho, s = -1) and weights
    p: the sums of p and of p (s - key), added in an order the compiler chooses (vectorised)."""
    p_sum = moved = 0.0
    for j in range(key.size):
        p_sum += weight[j]
        moved += weight[j] * (s - key[j])
    return p_sum, moved


@kernel(borrow=True)
def sum_released(kind, alpha, p, q, flags, scratch):
    """(p_mass, moved, f), each a (low, high) pair: the sums of p, of the moved mass p |1 - q/p|
    and of p f~(q/p) over the tokens ``screen`` flagged RELEASED_LOW, and over those it flagged
    RELEASED_HIGH. Those tokens are then flagged SETTLED, so that ``gather`` leaves them out.

    Chunk by chunk and without a branch, so that the generated loop of f~
    (``weighted_f_tilde_terms``) vectorises over the row: every token's ratio is computed and
    every other token's weight set to 0 (f~ is then spent on terms that are dropped, which
    costs less than packing the released ones: a pass of ``gather``). Where a chunk's sum is
    not finite, its released terms are summed one by one, as ``terms.sum_weighted_f_tilde``
    sums. ``scratch``: float64, shape (>= 3, >= CHUNK).
    """
    ratio, weight, terms = scratch[0], scratch[1], scratch[2]
    f_low = f_high = p_low = p_high = moved_low = moved_high = 0.0
    for first in range(0, p.size, CHUNK):
        count = min(CHUNK, p.size - first)
        chunk = flags[first:first + count]
        _released_terms(p[first:first + count], q[first:first + count], chunk, ratio, weight)
        weighted_f_tilde_terms(kind, alpha, ratio, weight, 1.0, 0, count, terms)
        low, high, chunk_p_low, chunk_p_high, chunk_moved_low, chunk_moved_high = _sums_by_side(terms, ratio,
                                                                                                weight, chunk)
        if not low + high < np.inf:
            low = high = 0.0
            for j in range(count):
                term = weighted_f_tilde(kind, alpha, weight[j], ratio[j]) if weight[j] > 0.0 else 0.0
                low += term if chunk[j] == RELEASED_LOW else 0.0
                high += term if chunk[j] == RELEASED_HIGH else 0.0
        f_low += low
        f_high += high
        p_low += chunk_p_low
        p_high += chunk_p_high
        moved_low += chunk_moved_low
        moved_high += chunk_moved_high
        for j in range(count):
            chunk[j] = SETTLED if _released(chunk[j]) else chunk[j]
    return (p_low, p_high), (moved_low, moved_high), (f_low, f_high)


@kernel(reassociate=True, borrow=True)
def sum_released_terms(p, q, flags, terms):
    """``sum_released`` where each token's term p f~(q/p) is known (``terms``, the row's, as
    the pass that tried r = q summed them): the released tokens' sums read off in one
    vectorised pass, their moved mass as |p - q|, no f~ evaluated. They are then flagged
    SETTLED, as there."""
    f_low = f_high = p_low = p_high = moved_low = moved_high = 0.0
    for i in range(p.size):
        pi = np.float64(p[i])
        qi = np.float64(q[i])
        flag = flags[i]
        is_low = flag == RELEASED_LOW
        is_high = flag == RELEASED_HIGH
        f_low += terms[i] if is_low else 0.0
        f_high += terms[i] if is_high else 0.0
        p_low += pi if is_low else 0.0
        p_high += pi if is_high else 0.0
        moved_low += pi - qi if is_low else 0.0
        moved_high += qi - pi if is_high else 0.0
        flags[i] = SETTLED if is_low | is_high else flag
    return (p_low, p_high), (moved_low, moved_high), (f_low, f_high)


@kernel(inline=True)
def _released(flag):
    """Whether a flag is RELEASED_LOW or RELEASED_HIGH."""
    return (flag == RELEASED_LOW) | (flag == RELEASED_HIGH)


@kernel(borrow=True)
def _released_terms(p, q, flags, ratio, weight):
    """(ratio, weight)[j] = (q_j / p_j, p_j) for a released token, (1, 0) for any other (whose
    q/p, maybe inf or nan, is selected away)."""
    for j in range(p.size):
        pj = np.float64(p[j])
        released = _released(flags[j])
        ratio[j] = np.float64(q[j]) / pj if released else 1.0
        weight[j] = pj if released else 0.0


@kernel(reassociate=True, borrow=True)
def _sums_by_side(terms, ratio, weight, flags):
    """(f_low, f_high, p_low, p_high, moved_low, moved_high): the sums of the terms, of the
    weights and of the moved masses weight |1 - ratio| over the tokens flagged RELEASED_LOW and
    over those flagged RELEASED_HIGH, added in an order the compiler chooses (vectorised)."""
    f_low = f_high = p_low = p_high = moved_low = moved_high = 0.0
    for j in range(flags.size):
        is_low = flags[j] == RELEASED_LOW
        is_high = flags[j] == RELEASED_HIGH
        moved = weight[j] * (1.0 - ratio[j])
        f_low += terms[j] if is_low else 0.0
        f_high += terms[j] if is_high else 0.0
        p_low += weight[j] if is_low else 0.0
        p_high += weight[j] if is_high else 0.0
        moved_low += moved if is_low else 0.0
        moved_high -= moved if is_high else 0.0
    return f_low, f_high, p_low, p_high, moved_low, moved_high


#: ``gather`` visits every token, not only the flagged ones, where at least this share is
#: flagged, or DENSE_UNCACHED on rows longer than CACHED_TOKENS: at or a little below where the
#: two ways cost the same, measured with flags at random (an AMD EPYC, Zen 4: about 0.7 of the
#: row on 4096 tokens, 0.53 on 131072; within 12% of each other from 0.6 and 0.5 on). Visiting
#: every token costs about 1.5 ns a token there; visiting the flagged ones costs more per
#: flagged token once p and q no longer fit in the core's cache.
DENSE = 0.6
DENSE_UNCACHED = 0.5
CACHED_TOKENS = 32768


@kernel
def gather(p, q, flags, key, weight, n_low, n_high, n_released_low, n_released_high, reopened):
    """Copy every token flagged by ``screen`` into ``key`` and ``weight`` as ``index.split_sides``
    lays a row out, low keys rho in key[:n_low] and high keys -rho in key[size - n_high:], each
    side's undecided tokens first (the reopened ones before the others) and its released ones
    after them, each group in row order (the counts are ``screen``'s; ``reopened`` its
    (n_reopened_low, n_reopened_high), or None after a screen without ``summed``).

    Without branches on the flag: each token goes to the next slot of its group, the cursor
    that its flag indexes. Where few tokens are flagged, only those are visited, found as
    ``flagged`` finds them (their positions are not stored); otherwise every token is, a
    settled one written to a slot between the sides that stays free, its cursor never moved.
    """
    # One cursor per flag (see SETTLED), where its group starts.
    # Compiled apart without reopened tokens, with a cursor for each of the five flags such a
    # screen sets: seven took this pass 162 us where five take 144 (n = 131072, an Intel Xeon).
    if reopened is None:
        cursors = np.array([n_low, 0, key.size - n_high, n_low - n_released_low, key.size - n_released_high])
    else:
        n_reopened_low, n_reopened_high = reopened
        cursors = np.array([n_low, n_reopened_low, key.size - n_high + n_reopened_high, n_low - n_released_low,
                            key.size - n_released_high, 0, key.size - n_high])
    n = p.size
    # The flagged way reads a word's bytes as little-endian; elsewhere every token is visited.
    if _LITTLE_ENDIAN and n_low + n_high < (DENSE if n <= CACHED_TOKENS else DENSE_UNCACHED) * n:
        words = flags.view(np.uint64)
        for w in range(words.size):
            word = _flag_word(words, w, n)
            while word != 0:
                byte, word = _pop_lowest(word)
                _place(p, q, flags, 8 * w + byte, key, weight, cursors)
    else:
        for i in range(n):
            _place(p, q, flags, i, key, weight, cursors)


@kernel(inline=True)
def _place(p, q, flags, i, key, weight, cursors):
    """Token i to the slot its flag's cursor holds, that cursor moved on (the settled one's
    never). The cursors are indexed in memory, not selected among registers: the CPU forwards
    each store to the next load of the same cursor; selected, the dense pass took 1.6x the time
    (an AMD EPYC, Zen 4)."""
    flag = flags[i]
    slot = cursors[flag]
    cursors[flag] = slot + (flag != SETTLED)
    pi = np.float64(p[i])
    ratio = np.float64(q[i]) / pi
    key[slot] = ratio if flag & 1 else -ratio  # the key: rho on the low side (odd flags), -rho on the high
    weight[slot] = pi
