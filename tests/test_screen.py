"""Screening long rows (core.screen): the passes, the sample, and the confirmation of bounds."""

import os
import subprocess
import sys

import numpy as np
import pytest
from numba.core.codegen import get_host_cpu_features

import mdverify as md
from mdverify.core import screen, select
from mdverify.core.jit import MASK_REGISTERS
from mdverify.core.index import split_sides
from mdverify.core.terms import CHUNK, sum_weighted_f_tilde
from mdverify.core.walk import M
from mdverify.workloads import edge_rows, families, llm_rows, truncate_top_k, truncate_top_p

KL = md.divergence("kl")
#: No row of terms for ``select._screened`` (as kept by a pass that tried r = q).
NO_TERMS = np.empty(0)


def _rows():
    yield from ((label, P[0], Q[0]) for label, P, Q in families(3000, 1, seed=31))
    yield from edge_rows()
    for dtype in (np.float64, np.float32):
        P, Q = llm_rows(40000, 1, seed=4, truncate="both", dtype=dtype)
        yield f"llm-{np.dtype(dtype).name}", P[0], Q[0]


def _ratios(p, q):
    p, q = p.astype(np.float64), q.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = q / p
    return rho, q < p, (q > p) & (rho < np.inf)


def _check_flags(flags, p, q, bounds):
    """The screen's classification against the rounded ratios q/p: every settled token is on
    the side of its bound that the ratio puts it, and every token farther than 1e-14
    (relative) from the bounds is settled; low tokens are flagged as low, high as high."""
    a_lo, a_hi, b_lo, b_hi = bounds
    rho, low, high = _ratios(p, q)
    flags = flags[: p.size]
    on_low = np.isin(flags, (screen.KEPT_LOW, screen.RELEASED_LOW))
    on_high = np.isin(flags, (screen.KEPT_HIGH, screen.RELEASED_HIGH))
    settled = flags == screen.SETTLED
    assert not (on_low & ~low).any() and not (on_high & ~high).any()
    clipped_low, clipped_high = low & settled, high & settled
    assert (rho[clipped_low] < a_lo).all() and (rho[clipped_high] > b_hi).all()
    assert (rho[flags == screen.RELEASED_LOW] > a_hi).all() and (rho[flags == screen.RELEASED_HIGH] < b_lo).all()
    band = 1e-14
    assert clipped_low[low & (rho < a_lo * (1 - band))].all()
    assert clipped_high[high & (rho > b_hi * (1 + band))].all()
    assert (flags[low & (rho > a_hi * (1 + band))] == screen.RELEASED_LOW).all()
    assert (flags[high & (rho < b_lo * (1 - band))] == screen.RELEASED_HIGH).all()
    return rho, low, high


@pytest.mark.parametrize("bounds", [(0.0, 1.0, 1.0, np.inf), (0.3, 0.8, 1.5, 4.0), (0.9, 0.9, 1.1, 1.1)])
def test_screen_flags_and_sums(bounds):
    for label, p, q in _rows():
        work = np.zeros((4, p.size))
        flags = screen.flag_view(work[3], p.size)
        got = screen.screen(p, q, bounds, None, flags)
        rho, low, high = _check_flags(flags, p, q, bounds)
        # The totals are split_sides' (summed in another order).
        totals = split_sides(p, q, np.empty(p.size), np.empty(p.size))
        np.testing.assert_allclose(got[:4], [totals[3], totals[4], totals[5], totals[2]], rtol=1e-13, atol=1e-300,
                                   err_msg=label)
        p64 = p.astype(np.float64)
        settled = flags[: p.size] == screen.SETTLED
        np.testing.assert_allclose(got[4:6], [p64[low & settled].sum(), p64[high & settled].sum()], rtol=1e-13,
                                   atol=1e-300, err_msg=label)
        counts = [(low & ~settled).sum(), (high & ~settled).sum(), (flags[: p.size] == screen.RELEASED_LOW).sum(),
                  (flags[: p.size] == screen.RELEASED_HIGH).sum()]
        assert got[6:] == tuple(counts) + (0, 0), label


@pytest.mark.parametrize("bounds, summed", [((0.3, 0.8, 1.5, 4.0), (0.9, 1.2)), ((0.3, 0.8, 1.5, 4.0), (0.8, 1.5)),
                                            ((0.3, 0.8, 1.5, 4.0), (0.5, 2.5)), ((0.3, 0.8, 1.5, 4.0), (0.9, 2.5)),
                                            ((0.0, 0.5, 2.0, np.inf), (0.7, 1.3)), ((0.9, 0.9, 1.1, 1.1), (1.0, 1.0))])
def test_screen_settles_or_reopens_the_tokens_an_earlier_screen_released(bounds, summed):
    """Given the (a_hi, b_lo) of an earlier screen whose released groups are summed, the screen
    finds exactly the tokens that screen released, to the last one: it settles those it
    releases too, flags those it leaves undecided as reopened, and flags, counts and sums
    every other token as it does without them; the row's totals it returns as that screen's."""
    a_lo, _, _, b_hi = bounds
    found = np.zeros(2, np.int64)  # settled and reopened, over the rows
    for label, p, q in _rows():
        work = np.zeros((4, p.size))
        flags = screen.flag_view(work[3], p.size)
        totals = screen.screen(p, q, (a_lo, summed[0], summed[1], b_hi), None, flags)[:4]
        before = np.isin(flags[: p.size], (screen.RELEASED_LOW, screen.RELEASED_HIGH))
        alone = screen.screen(p, q, bounds, None, flags)
        alone_flags = flags[: p.size].copy()
        got = screen.screen(p, q, bounds, summed + totals, flags)
        expected = np.select([before & (alone_flags >= screen.RELEASED_LOW), before & (alone_flags == screen.KEPT_LOW),
                              before & (alone_flags == screen.KEPT_HIGH)],
                             np.array([screen.SETTLED, screen.REOPENED_LOW, screen.REOPENED_HIGH], np.uint8),
                             alone_flags)
        np.testing.assert_array_equal(flags[: p.size], expected, err_msg=label)
        assert got[:4] == totals, label
        np.testing.assert_allclose(got[4:6], alone[4:6], rtol=1e-13, atol=1e-300, err_msg=label)
        settled = [(before & (alone_flags == flag)).sum() for flag in (screen.RELEASED_LOW, screen.RELEASED_HIGH)]
        reopened = [(expected == flag).sum() for flag in (screen.REOPENED_LOW, screen.REOPENED_HIGH)]
        assert got[6:] == (alone[6] - settled[0], alone[7] - settled[1], alone[8] - settled[0],
                           alone[9] - settled[1], reopened[0], reopened[1]), label
        found += (sum(settled), sum(reopened))
    releases_more = summed[0] < bounds[1] or summed[1] > bounds[2]
    assert (found > 0).tolist() == [summed != (1.0, 1.0), releases_more]


@pytest.mark.skipif(not MASK_REGISTERS, reason="compiled without AVX-512 here: the tests above count in int64")
def test_screen_flags_and_sums_compiled_without_avx512():
    """The screen counts in float64 where numba compiles for AVX-512 and in int64 elsewhere
    (``screen._count``): the two tests above again, with and without an earlier screen's
    released groups, in a process compiled for this CPU less AVX-512."""
    features = ",".join("-" + f[1:] if f.startswith("+avx512") else f for f in get_host_cpu_features().split(","))
    names = ("test_screen_flags_and_sums", "test_screen_settles_or_reopens_the_tokens_an_earlier_screen_released")
    tests = [__file__ + "::" + name for name in names]
    code = ("import sys, pytest; from mdverify.core.jit import MASK_REGISTERS; assert not MASK_REGISTERS; "
            f"sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', *{tests!r}]))")
    run = subprocess.run([sys.executable, "-c", code], env=os.environ | {"NUMBA_CPU_FEATURES": features},
                         capture_output=True, text=True)
    assert run.returncode == 0 and "9 passed" in run.stdout, run.stdout + run.stderr


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_screen_decides_ratios_next_to_the_bounds_as_their_rounding(dtype):
    """Ratios one ulp either side of each bound, and on it: the screen's products settle a
    token only on the side its rounded ratio q/p is, or leave it undecided."""
    rng = np.random.default_rng(3)
    bounds = (0.3, 0.7, 1.3, 2.9)
    p = rng.uniform(0.5, 2.0, 4000).astype(dtype)
    q = (p.astype(np.float64) * np.repeat(bounds, 1000)).astype(dtype)
    step = np.arange(4000) % 3
    q = np.where(step == 0, np.nextafter(q, dtype(0)), np.where(step == 1, q, np.nextafter(q, dtype(9))))
    work = np.zeros((4, p.size))
    flags = screen.flag_view(work[3], p.size)
    screen.screen(p, q, bounds, None, flags)
    _check_flags(flags, p, q, bounds)


@pytest.mark.parametrize("summed", [None, (0.6, 1.1), (0.95, 2.0)])
@pytest.mark.parametrize("dense", [False, True])
def test_gather_lays_out_each_side_undecided_first_then_released(dense, summed, monkeypatch):
    """Both of gather's ways (visiting the flagged tokens, or every token) give split_sides'
    layout with each side's undecided tokens first (the reopened ones before the others), its
    released ones after, in row order."""
    for share in ("DENSE", "DENSE_UNCACHED"):  # run as Python, gather reads them each call
        monkeypatch.setattr(screen, share, 0.0 if dense else 2.0)
    gather = screen.gather.py_func
    bounds = (0.4, 0.9, 1.2, 3.0)
    for label, p, q in _rows():
        n = p.size
        work = np.full((4, n), np.nan)
        flags = screen.flag_view(work[3], n)
        earlier = None if summed is None else summed + screen.screen(p, q, bounds, None, flags)[:4]  # + row totals
        counts = screen.screen(p, q, bounds, earlier, flags)[6:]
        n_low, n_high, n_released_low, n_released_high, n_reopened_low, n_reopened_high = counts
        gather(p, q, flags, work[0], work[1], *counts[:4], None if summed is None else counts[4:])
        expected = flags[:n].copy()
        rho = _ratios(p, q)[0]
        groups = {flag: np.flatnonzero(expected == flag) for flag in range(1, 7)}
        assert (n_released_low, n_released_high, n_reopened_low, n_reopened_high) == (
            groups[screen.RELEASED_LOW].size, groups[screen.RELEASED_HIGH].size, groups[screen.REOPENED_LOW].size,
            groups[screen.REOPENED_HIGH].size), label
        low = np.concatenate([groups[screen.REOPENED_LOW], groups[screen.KEPT_LOW], groups[screen.RELEASED_LOW]])
        high = np.concatenate([groups[screen.REOPENED_HIGH], groups[screen.KEPT_HIGH], groups[screen.RELEASED_HIGH]])
        assert (n_low, n_high) == (low.size, high.size), label
        np.testing.assert_array_equal(work[0, :n_low], rho[low], err_msg=label)
        np.testing.assert_array_equal(work[1, :n_low], p[low].astype(np.float64), err_msg=label)
        np.testing.assert_array_equal(work[0, n - n_high:], -rho[high], err_msg=label)
        np.testing.assert_array_equal(work[1, n - n_high:], p[high].astype(np.float64), err_msg=label)


@pytest.mark.parametrize("name", ["kl", "reverse_kl", "tv", "hellinger", "jensen_shannon", "pearson"])
def test_released_tokens_summed_in_place_are_the_sums_of_their_terms(name):
    """``sum_released`` gives each side's sums of p f~(q/p), of p and of the moved mass over its
    released tokens, as summing the tokens ``gather`` lays out gives them (inf where a term is:
    q = 0 under reverse_kl), and flags exactly those tokens settled; ``released_sums`` gives the
    latter two from the laid-out tokens, as numpy sums them from the row."""
    entry = md.divergence(name)
    for bounds in ((0.3, 0.8, 1.5, 4.0), (1e-9, 1e-6, 1.0 + 1e-9, 1e6)):
        for label, p, q in _rows():
            n = p.size
            work = np.zeros((4, n))
            flags = screen.flag_view(work[3], n)
            n_low, n_high, n_released_low, n_released_high = screen.screen(p, q, bounds, None, flags)[6:10]
            before = flags[:n].copy()
            p_mass, moved, f = screen.sum_released(entry.kind, entry.param, p, q, flags, work)
            released = before >= screen.RELEASED_LOW
            np.testing.assert_array_equal(flags[:n], np.where(released, screen.SETTLED, before), err_msg=label)
            flags[:n] = before
            screen.gather(p, q, flags, work[0], work[1], n_low, n_high, n_released_low, n_released_high, None)
            p64, rho = p.astype(np.float64), _ratios(p, q)[0]
            for side, s, start, end, flag in ((0, 1.0, n_low - n_released_low, n_low, screen.RELEASED_LOW),
                                              (1, -1.0, n - n_released_high, n, screen.RELEASED_HIGH)):
                terms = sum_weighted_f_tilde(entry.kind, entry.param, work[0], work[1], s, start, end, 0.0, np.inf,
                                             np.empty(CHUNK))
                laid_out = screen.released_sums(work[0, start:end], work[1, start:end], s)
                group = before == flag
                expected = [p64[group].sum(), (p64[group] * s * (1.0 - rho[group])).sum()]
                np.testing.assert_allclose(f[side], terms, rtol=1e-13, atol=0, err_msg=label)
                np.testing.assert_allclose([p_mass[side], moved[side]], expected, rtol=1e-13, atol=1e-300,
                                           err_msg=label)
                np.testing.assert_allclose(laid_out, expected, rtol=1e-13, atol=1e-300, err_msg=label)


def _family_levels(family, seed, divergence, eps, dtype=np.float64, n=16384):
    """A row of a benchmark family and the levels of bounds its sample gives: (p, q, entry,
    levels, work), ``work`` a workspace for it."""
    from mdverify.bench.families import FAMILIES

    p, q = (x.astype(dtype) for x in FAMILIES[family](n, np.random.default_rng(seed)))
    entry = md.divergence(divergence)
    work = np.empty((4, p.size))
    _, _, tokens, ps, qs = select._sample(p, q, work, False)
    levels, _ = select._sample_bounds(p.size, tokens, ps, qs, eps, entry.kind, entry.param, np.inf)
    return p, q, entry, levels, work


@pytest.mark.parametrize("family, divergence, eps", [
    ("unrelated drafter", "hellinger", 1.0), ("unrelated drafter", "reverse_kl", 1.0),
    ("Zipf, weak drafter noise", "kl", 0.01), ("LLM-like, T = 1.5", "jensen_shannon", 0.1)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_rows_mostly_released_are_summed_by_the_screen_and_match_sorted(family, divergence, eps, dtype):
    """Where the first bounds release most of the row, the screen sums the released tokens
    instead of laying them out (the search then confirms them, or refuses them and the row is
    screened anew), and the solver finds the sorted walk's optimum."""
    p, q, entry, levels, work = _family_levels(family, 0, divergence, eps, dtype)
    split, layout, low, high, laid_out, _ = select._screened(p, q, work, tuple(levels[0]), entry.kind, entry.param,
                                                             True, select._none_released(), NO_TERMS)
    assert not laid_out and layout == (0, 0, 0, 0)
    assert low[select.F_EXACT] > 0.0 and high[select.F_EXACT] > 0.0
    _assert_select_matches_sorted(p, q, entry, family, (eps,))


def test_the_calibrated_sample_brackets_budgets_near_the_end_at_its_first_level():
    """Near the end m_max a threshold is set by the little mass left unmoved, m_max - m, which
    the sample's own capacities, a few percent off the row's, would swamp: calibrated to the
    row's (``select._calibrated``), its first level's bounds hold the optimum of total
    variation (D = m) at 0.9, 0.98 and 0.995 m_max on 49 of 54 rows of nine families (28 of
    54 uncalibrated, when written)."""
    from mdverify.bench.families import FAMILIES

    n = 32768
    size = select._sample_size(n)
    entry = md.divergence("tv")
    confirmed = {False: 0, True: 0}
    families = [name for name in FAMILIES if "n-gram" not in name and "neural" not in name]
    for seed in range(2):
        for k, family in enumerate(families):
            p, q = FAMILIES[family](n, np.random.default_rng(7000 + 10 * seed + k))
            work = np.empty((4, n))
            flags = screen.flag_view(work[3], n)
            _, _, low, high = screen.mark_sample(p, q, size, flags, False)
            taken = np.flatnonzero(flags[:n])
            tokens = 1.0 / np.minimum(1.0, (np.maximum(p[taken], q[taken]) + 1.0 / n) * size)
            raw = (p[taken] * tokens, q[taken] * tokens)
            calibrated = (raw[0].copy(), raw[1].copy())
            select._calibrated(*calibrated, low, high)
            assert np.maximum(calibrated[0] - calibrated[1], 0.0).sum() == pytest.approx(low, rel=1e-12), family
            assert np.maximum(calibrated[1] - calibrated[0], 0.0).sum() == pytest.approx(high, rel=1e-12), family
            with np.errstate(divide="ignore", invalid="ignore"):  # the ratios stay (inf where p = 0)
                np.testing.assert_allclose(calibrated[1] / calibrated[0], raw[1] / raw[0], rtol=1e-15)
            np.testing.assert_array_equal(select._sample(p, q, work, False)[3], calibrated[0])
            for share in (0.9, 0.98, 0.995):
                eps = share * min(low, high)
                for way, (ps, qs) in ((False, raw), (True, calibrated)):
                    levels, _ = select._sample_bounds(n, tokens, ps, qs, eps, entry.kind, entry.param, np.inf)
                    bounds = tuple(levels[0])
                    confirmed[way] += select.screened_walk(p, q, eps, entry.kind, entry.param, work, bounds, np.inf)[0]
    assert confirmed[True] >= 45 and confirmed[True] >= confirmed[False] + 10, confirmed


def test_sample_takes_tokens_by_mass_and_is_deterministic():
    p, q = (x[0] for x in llm_rows(131072, 1, seed=3))
    work = np.zeros((4, p.size))
    flags = screen.flag_view(work[3], p.size)
    screen.mark_sample(p, q, select.SAMPLE_SIZE, flags, False)
    taken = flags[: p.size].astype(bool).copy()
    screen.mark_sample(p, q, select.SAMPLE_SIZE, flags, False)
    np.testing.assert_array_equal(flags[: p.size].astype(bool), taken)
    inclusion = np.minimum(1.0, (np.maximum(p, q) + 1 / p.size) * select.SAMPLE_SIZE)
    assert taken[inclusion == 1.0].all()
    # The size is about its expectation (within four standard deviations of independent draws).
    assert abs(taken.sum() - inclusion.sum()) < 4 * np.sqrt(inclusion.sum())
    positions = np.empty(p.size, np.int64)
    count = screen.flagged(flags, p.size, positions)
    np.testing.assert_array_equal(positions[:count], np.flatnonzero(taken))
    # Its uniforms are the Weyl sequence frac(i / golden ratio), to 52 bits, whichever way the
    # kernel computes them; and the pass with the row's check takes the same sample.
    weyl = (np.arange(p.size, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(12)
    np.testing.assert_array_equal(taken, weyl.astype(np.float64) * 2.0 ** -52 < inclusion)
    screen.mark_sample(p, q, select.SAMPLE_SIZE, flags, True)
    np.testing.assert_array_equal(flags[: p.size].astype(bool), taken)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("budget", [("eps", 1e-4), ("eps", 0.05), ("eps", 0.5), ("price", 0.5), ("price", 20.0)])
def test_bounds_are_confirmed_or_refused(budget, dtype):
    """Bounds around the optimum give it, confirmed; bounds that cut it off are never confirmed
    (a confirmed result is the optimum whatever the bounds), for a budget and for a price."""
    rng = np.random.default_rng(5)
    P, Q = llm_rows(40000, 4, seed=9, truncate="top_p", dtype=dtype)
    how, value = budget
    eps, slope_limit = (value, np.inf) if how == "eps" else (np.inf, 1.0 / value)
    refused = 0
    for p, q in zip(P, Q):
        ref = md.mentor(p, q, method="sorted", divergence=KL, **{how: value})
        a, b = float(ref.a), float(ref.b)
        work = np.zeros((4, p.size))
        confirmed, _, state, _, _, base = select.screened_walk(
            p, q, eps, KL.kind, KL.param, work, (0.8 * a, min(1.0, a + 0.5 * (1 - a)), 1 + 0.5 * (b - 1), 1.5 * b),
            slope_limit)
        assert confirmed
        np.testing.assert_allclose(base + state[M], ref.acceptance, atol=1e-12)
        for _ in range(12):
            bounds = np.sort(rng.uniform(0, 1, 2)).tolist() + np.sort(1 + rng.exponential(b - 1 + 1e-3, 2)).tolist()
            confirmed, _, state, _, _, base = select.screened_walk(p, q, eps, KL.kind, KL.param, work, tuple(bounds),
                                                                   slope_limit)
            if confirmed:
                np.testing.assert_allclose(base + state[M], ref.acceptance, atol=1e-12, err_msg=str(bounds))
            cut_off = a < bounds[0] or a > bounds[1] or b < bounds[2] or b > bounds[3]
            refused += cut_off and not confirmed
    assert refused > 0


def test_after_a_refusal_only_the_bounds_ahead_widen():
    """Bounds that held the walk back short of the optimum's moved mass (a_lo, b_hi) or beyond
    it (a_hi, b_lo) are followed by bounds widened only that way, a bound that held it back
    becoming the one behind; bounds that held it back both ways by the wider level's."""
    bounds, wider = (0.2, 0.4, 2.0, 3.0), (0.1, 0.6, 1.5, 5.0)
    for hits, expected in [((1, 0, 0, 0), (0.1, 0.2, 2.0, 5.0)), ((0, 0, 0, 1), (0.1, 0.4, 3.0, 5.0)),
                           ((1, 0, 0, 1), (0.1, 0.2, 3.0, 5.0)), ((0, 1, 0, 0), (0.4, 0.6, 1.5, 3.0)),
                           ((0, 0, 1, 0), (0.2, 0.6, 1.5, 2.0)), ((0, 1, 1, 0), (0.4, 0.6, 1.5, 2.0)),
                           ((1, 1, 0, 0), wider), ((0, 0, 1, 1), wider), ((0, 0, 0, 0), wider)]:
        assert select._onward(bounds, np.array(hits, bool), np.array(wider)) == expected, hits


@pytest.mark.parametrize("family, seed, divergence, eps, hit", [
    ("LLM-like, T = 1.5", 12, "hellinger", 0.1, 0), ("LLM-like, T = 1.5", 15, "hellinger", 0.1, 1),
    ("unrelated drafter", 0, "tv", 0.01, 2), ("unrelated drafter", 3, "tv", 0.01, 3),
    ("Zipf, strong drafter noise", 79, "kl", 3.0, 0)])
def test_rows_whose_first_bounds_are_refused_match_sorted(family, seed, divergence, eps, hit):
    """Rows of the benchmark's families whose first bounds one bound refuses (each of the four
    here; the last row's next bounds are refused too): the bounds that follow give the optimum."""
    p, q, entry, levels, work = _family_levels(family, seed, divergence, eps)
    confirmed, hits, *_ = select.screened_walk(p, q, eps, entry.kind, entry.param, work, tuple(levels[0]), np.inf)
    assert not confirmed and np.flatnonzero(hits).tolist() == [hit]
    ours = md.mentor(p, q, eps, entry, method="select")
    ref = md.mentor(p, q, eps, entry, method="sorted")
    np.testing.assert_allclose(ours.acceptance, ref.acceptance, rtol=0, atol=1e-12)
    np.testing.assert_allclose(ours.r, ref.r, rtol=0, atol=1e-12)


def _groups(work, count, released, side):
    """{(key, p): undecided or released} of one side's tokens laid out in ``work``."""
    size = work.shape[1]
    where = slice(0, count) if side == 0 else slice(size - count, size)
    keys, weights = work[0, where], work[1, where]
    return {(k, w): j >= count - released for j, (k, w) in enumerate(zip(keys.tolist(), weights.tolist()))}


@pytest.mark.parametrize("family, seed, divergence, eps", [
    ("unrelated drafter", 2, "tv", 0.01), ("unrelated drafter", 0, "tv", 0.01),
    ("unrelated drafter", 0, "hellinger", 0.001)])
def test_bounds_within_refused_ones_settle_what_those_left(family, seed, divergence, eps):
    """After bounds refused beyond the optimum's moved mass (a_hi or b_lo), the next bounds
    clip nothing new that the refused ones left: settling the tokens these laid out gives the
    groups that screening the row gives, but for tokens within the screen's slack of a bound
    (compared there as products), and the search on them the optimum."""
    p, q, entry, levels, work = _family_levels(family, seed, divergence, eps)
    fresh = np.empty_like(work)
    split, layout, low, high, laid_out, _ = select._screened(p, q, work, tuple(levels[0]), entry.kind, entry.param,
                                                             True, select._none_released(), NO_TERMS)
    assert laid_out  # else the next level screens the row anew
    clipped = (low[select.P_CLIP], high[select.P_CLIP])
    _, hits, *_ = select._walk_between(work, split, layout, low, high, tuple(levels[0]), eps, entry.kind,
                                       entry.param, np.inf)
    assert hits[1] or hits[2]
    bounds = select._onward(tuple(levels[0]), hits, levels[1])
    again = select._rescreened(work, split, clipped, bounds)
    screened = select._screened(p, q, fresh, bounds, entry.kind, entry.param, True, select._none_released(),
                                NO_TERMS)
    assert again[4] and screened[4]
    # The same groups: the sums of the clipped and of the released (the latter laid out, and
    # summed by the screen alone), and the bounds on their keys.
    fields = [select.P_CLIP, select.M_REL, select.CLIP_MAX, select.REL_MIN]
    for side, edges in ((0, bounds[:2]), (1, (-bounds[3], -bounds[2]))):
        groups = [_groups(w, split_[side], layout_[side] + layout_[2 + side], side)
                  for w, (split_, layout_) in ((work, again[:2]), (fresh, screened[:2]))]
        differ = set(groups[0].items()) ^ set(groups[1].items())
        near = [min(abs(key - edge) for edge in edges) <= 1e-13 * abs(key) for (key, _), _ in differ]
        assert all(near) and len(differ) <= 8
        mass = sum(weight * (1.0 + abs(key)) for (key, weight), _ in differ)  # p and moved mass
        np.testing.assert_allclose(again[2 + side][fields], screened[2 + side][fields], rtol=1e-12,
                                   atol=mass + 1e-15)
    confirmed, _, state, _, _, base = select._walk_between(work, *again[:4], bounds, eps, entry.kind, entry.param,
                                                           np.inf)
    ref = md.mentor(p, q, eps, entry, method="sorted")
    assert confirmed
    np.testing.assert_allclose(base + state[M], ref.acceptance, rtol=0, atol=1e-12)


def _first_level(family, seed, divergence, eps, summing):
    """A row of a benchmark family (``_family_levels``), its screen by the first bounds of its
    sample, and the search on that: (p, q, entry, levels, work, released, hits)."""
    p, q, entry, levels, work = _family_levels(family, seed, divergence, eps)
    split, layout, low, high, _, released = select._screened(p, q, work, tuple(levels[0]), entry.kind, entry.param,
                                                             summing, select._none_released(), NO_TERMS)
    _, hits, *_ = select._walk_between(work, split, layout, low, high, tuple(levels[0]), eps, entry.kind,
                                       entry.param, np.inf)
    return p, q, entry, levels, work, released, hits


@pytest.mark.parametrize("summing", [True, False])
@pytest.mark.parametrize("family, seed, divergence, eps, more, refused_again", [
    ("LLM-like, T = 1.5", 12, "hellinger", 0.1, True, False), ("unrelated drafter", 3, "tv", 0.01, True, False),
    ("Zipf, strong drafter noise", 79, "kl", 3.0, True, True),
    ("LLM-like, T = 1.5", 15, "hellinger", 0.1, False, False),
    ("Zipf, weak drafter noise", 21, "reverse_kl", 0.01, False, False),
    ("LLM-like, T = 0.7", 79, "kl", 0.3, False, True)])
def test_bounds_after_refused_ones_take_their_released_sums(family, seed, divergence, eps, more, refused_again,
                                                            summing):
    """After bounds refused short of the optimum's moved mass (a_lo or b_hi: ``more``) or
    beyond it (a_hi or b_lo), the row screened by the next bounds with the refused screen's
    released groups taken as summed gives the groups and sums that screening it afresh gives,
    laying out and summing only the tokens released since and those reopened, and the search
    on it the same decisions (``refused_again``: those bounds are refused too)."""
    p, q, entry, levels, work, released, hits = _first_level(family, seed, divergence, eps, summing)
    first = tuple(levels[0])
    assert released[2] + released[5] > 0
    assert hits.any() and (hits[0] or hits[3]) == more and (hits[1] or hits[2]) != more
    bounds = select._onward(first, hits, levels[1])
    fresh_work = np.empty_like(work)
    taken, carried = select._screen_and_sum(p, q, work, bounds, entry.kind, entry.param, summing, released,
                                            NO_TERMS)
    fresh = select._screened(p, q, fresh_work, bounds, entry.kind, entry.param, summing, select._none_released(),
                             NO_TERMS)
    assert taken and not carried[4]  # its released tokens are not all in work: never settled from there
    flags = screen.flag_view(fresh_work[3], p.size)
    anew = screen.screen(p, q, bounds, None, flags)[8:10]
    np.testing.assert_allclose(carried[0][2:], fresh[0][2:], rtol=1e-13)
    fields = [select.P_CLIP, select.M_REL, select.F_EXACT, select.P_UNC, select.M_UNC, select.CLIP_MAX,
              select.REL_MIN]
    reopened = screen.screen(p, q, bounds, tuple(released[[0, 1, 8, 9, 10, 11]]), flags)[10:]
    for side in range(2):
        np.testing.assert_allclose(carried[2 + side][fields], fresh[2 + side][fields], rtol=1e-12, atol=1e-300)
        undecided = [split_[side] - layout_[side] - layout_[2 + side] for split_, layout_ in (carried[:2], fresh[:2])]
        assert undecided[0] == undecided[1]
        # The released groups as a screen afresh counts them; those released before laid out
        # only where the refused bounds left them undecided (reopened, a side's or none).
        assert carried[5][2 + 3 * side] == anew[side]
        assert carried[1][2 + side] == (anew[side] - released[2 + 3 * side] if more else 0)
        assert carried[1][side] == 0 and (reopened[side] == 0 or not more)
    assert more or sum(reopened) > 0
    # The search then decides as on the row screened afresh, and what it confirms is the optimum.
    searches = [select._walk_between(w, *screened[:4], bounds, eps, entry.kind, entry.param, np.inf)
                for w, screened in ((work, carried), (fresh_work, fresh))]
    (confirmed, hits, state, _, _, base), again = searches
    assert confirmed == again[0] and (hits == again[1]).all()
    np.testing.assert_allclose(base + state[M], again[5] + again[2][M], rtol=0, atol=1e-12)
    if confirmed:
        ref = md.mentor(p, q, eps, entry, method="sorted")
        np.testing.assert_allclose(base + state[M], ref.acceptance, rtol=0, atol=1e-12)
    assert confirmed != refused_again


def test_sums_mostly_reopened_are_not_taken():
    """Where the tokens a screen reopens carry all but a sliver (under KEPT_SHARE) of the
    earlier screen's sums, the difference would lose their precision: the row is screened as
    without them."""
    p, q, entry, levels, work, released, _ = _first_level("LLM-like, T = 1.5", 1, "kl", 0.1, True)
    first = tuple(levels[0])
    rho = _ratios(p, q)[0]
    a_hi = np.sort(rho[rho < 1.0])[-3] * (1.0 - 1e-9)  # releasing the few low tokens nearest 1
    bounds = (first[0], a_hi, first[2], first[3])
    taken, carried = select._screen_and_sum(p, q, work, bounds, entry.kind, entry.param, True, released, NO_TERMS)
    assert not taken and 0 < carried[5][2] <= 3  # a sliver left, not nothing
    fresh_work = np.empty_like(work)
    got = select._screened(p, q, work, bounds, entry.kind, entry.param, True, released, NO_TERMS)
    fresh = select._screened(p, q, fresh_work, bounds, entry.kind, entry.param, True, select._none_released(),
                             NO_TERMS)
    assert got[:2] == fresh[:2] and got[4] == fresh[4]
    for a, b in zip(got[2:4] + got[5:], fresh[2:4] + fresh[5:]):
        np.testing.assert_array_equal(a, b)


def test_long_rows_of_every_family_match_sorted(entry):
    """Screening on the regimes of families(), ties included, at a length where it is used, for
    budgets and for prices."""
    for label, P, Q in families(select.SAMPLE_FROM + 1000, 1, seed=12):
        _assert_select_matches_sorted(P, Q, entry, label, (1e-5, 0.05, 2.0))


def _tied_row(where, n=6000):
    """A row most of whose tokens share one ratio, as a smoothed model's do: the target mixes a
    sparse model with the drafter, so every token off the sparse model's 50 has q/p = 1 / 0.4
    (the tie tops the high side); the same with the roles swapped (it is the low side's
    bottom); or the drafter a multiple 0.7 of the target, up to normalisation, on 80% of the
    tokens (the tie lies among the others' ratios). Ratios in a tie differ by rounding only."""
    rng = np.random.default_rng(17)
    unigram = 1.0 / np.arange(1, n + 1) ** 1.1
    unigram /= unigram.sum()
    sparse = np.zeros(n)
    sparse[rng.choice(n, 50, replace=False)] = rng.dirichlet(np.ones(50))
    if where == "middle":
        scale = np.where(rng.random(n) < 0.8, 0.7, rng.uniform(0.1, 3.0, n))
        return unigram, unigram * scale / np.sum(unigram * scale)
    mixed = 0.6 * sparse + 0.4 * unigram
    return (mixed, unigram) if where == "high" else (unigram, mixed)


@pytest.mark.parametrize("where", ["high", "low", "middle"])
def test_rows_of_tied_ratios_are_settled_by_the_screen_and_match_sorted(entry, where):
    """Where a tie of most of the row's tokens lies beyond the sample's estimated threshold,
    the first bounds settle it (``select._reach``), leaving the search the few other tokens;
    every level's bounds still lie within the next one's; and the solver gives the sorted
    walk's optimum, the tie on either side of a threshold."""
    p, q = _tied_row(where)
    work = np.empty((4, p.size))
    _, _, tokens, ps, qs = select._sample(p, q, work, False)
    for eps in (1e-3, 0.05):
        levels, _ = select._sample_bounds(p.size, tokens, ps, qs, eps, entry.kind, entry.param, np.inf)
        kept = screen.screen(p, q, tuple(levels[0]), None, screen.flag_view(work[3], p.size))[6:8]
        if where != "middle":
            assert sum(kept) < p.size / 10, (eps, kept)
        # Each level's bounds lie within the next one's.
        assert (levels[1:, [0, 2]] <= levels[:-1, [0, 2]]).all() and (levels[1:, [1, 3]] >= levels[:-1, [1, 3]]).all()
    _assert_select_matches_sorted(p, q, entry, where, (1e-4, 1e-3, 0.05, 1.0))


def _assert_select_matches_sorted(p, q, entry, label, budgets, prices=(0.3, 10.0, 1e4)):
    """The sort-free solver gives the sorted walk's optimum (acceptance and r to 1e-12, and for
    prices the same multiplier) at each budget and price."""
    for eps in budgets:
        ours = md.mentor(p, q, eps, entry, method="select")
        ref = md.mentor(p, q, eps, entry, method="sorted")
        where = f"{entry.name}, {label}, eps={eps}"
        np.testing.assert_allclose(ours.acceptance, ref.acceptance, rtol=0, atol=1e-12, err_msg=where)
        np.testing.assert_allclose(ours.r, ref.r, rtol=0, atol=1e-12, err_msg=where)
    for price in prices:
        ours = md.mentor(p, q, price=price, divergence=entry, method="select")
        ref = md.mentor(p, q, price=price, divergence=entry, method="sorted")
        where = f"{entry.name}, {label}, price={price}"
        np.testing.assert_allclose(ours.acceptance, ref.acceptance, rtol=0, atol=1e-12, err_msg=where)
        np.testing.assert_allclose(ours.r, ref.r, rtol=0, atol=1e-12, err_msg=where)
        np.testing.assert_array_equal(ours.lam, ref.lam, err_msg=where)


def _truncated_rows(n=16384):
    """Rows where few tokens carry both p and q: truncated targets, drafters, both, disjoint
    supports, and one in float32."""
    P, Q = llm_rows(n, 1, seed=8)
    p, q = P[0], Q[0]
    yield "top-p target", truncate_top_p(p, 0.8), q
    yield "top-k drafter", p, truncate_top_k(q, 50)
    yield "both truncated", truncate_top_p(p, 0.8), truncate_top_k(q, 300)
    yield "disjoint supports", truncate_top_k(p, 40), truncate_top_k(np.where(truncate_top_k(p, 40) > 0, 0.0, q), 60)
    yield "top-p target, float32", truncate_top_p(p, 0.8).astype(np.float32), q.astype(np.float32)


def test_rows_that_few_tokens_carry_are_searched_compacted(entry):
    """A long row on which few tokens carry both p and q is searched as its compacted form (the
    sample says so, and the compacted search answers), with the optimum of the sorted walk, for
    budgets, r = q's own budget, and prices."""
    for label, p, q in _truncated_rows():
        work = np.empty((4, p.size))
        _, in_range, tokens, ps, qs = select._sample(p, q, work, False)
        assert in_range and select._sparse(tokens, ps, qs, p.size), label
        assert select._compacted_search(p, q, 0.05, entry.kind, entry.param, work, np.inf)[0], label
        drafter = float(entry.value(q, p))  # r = q's own budget, where finite
        budgets = (0.0, 1e-4, 0.05, 2.0) + ((drafter,) if np.isfinite(drafter) else ())
        _assert_select_matches_sorted(p, q, entry, label, budgets)


def test_marking_the_tokens_that_carry_both_counts_and_sums_the_rest():
    for label, p, q in _truncated_rows():
        flags = screen.flag_view(np.empty(p.size), p.size)
        count, zero, spilled = screen.mark_both(p, q, flags)
        p64, q64 = p.astype(np.float64), q.astype(np.float64)
        both = (p64 > 0) & (q64 > 0)
        np.testing.assert_array_equal(flags[:p.size], both, err_msg=label)
        assert count == both.sum(), label
        np.testing.assert_allclose(zero, p64[q64 == 0].sum(), rtol=1e-14, atol=0, err_msg=label)
        np.testing.assert_allclose(spilled, q64[p64 == 0].sum(), rtol=1e-14, atol=0, err_msg=label)


def test_a_row_that_many_tokens_carry_is_left_to_the_screen():
    """Where the sample misjudged, and more than a quarter of the tokens carry both p and q, the
    compacted search declines, leaving the row to the screen."""
    P, Q = llm_rows(16384, 1, seed=8)
    p, q = truncate_top_p(P[0], 0.9), Q[0].copy()
    p[: p.size // 2] += 1e-9  # every token of the first half carries both
    p /= p.sum()
    work = np.empty((4, p.size))
    assert not select._compacted_search(p, q, 0.05, KL.kind, KL.param, work, np.inf)[0]


def test_a_compacted_search_that_ends_over_the_budget_walks_the_compacted_tokens():
    """A top-k drafter's row under KL(p || r) (f~(0) infinite) at budgets past its end m_max,
    where the sides' capacities agree to the last bits: the search's sums can put the low
    threshold at 0, D infinite, on about half such rows. The compacted tokens are then walked
    (sorted) to an end within the budget, as the row's own walk would, not handed over to it."""
    from mdverify.bench.families import FAMILIES

    entry = md.divergence("reverse_kl")
    for seed in range(12):
        p, q = FAMILIES["top-k drafter (k = 50)"](4096, np.random.default_rng(seed))
        for eps in (10.0, 1e3):
            found, state = select._compacted_search(p, q, eps, entry.kind, entry.param, np.empty((4, p.size)),
                                                    np.inf)[:2]
            assert found and state[select.D] <= eps, (seed, eps)
            _assert_select_matches_sorted(p, q, entry, f"seed {seed}", (eps,), prices=())


@pytest.mark.parametrize("n", [1, 7, 8, 9, 100, 4099])
def test_flagged_reads_words_and_ignores_the_padding(n):
    rng = np.random.default_rng(n)
    buffer = rng.integers(0, 256, size=8 * ((n + 7) // 8) + 8, dtype=np.uint8)  # garbage everywhere
    flags = buffer[: 8 * ((n + 7) // 8)]
    flags[:n] = rng.choice([0, 0, 0, 1, 2, 3, 4, 255], size=n)
    positions = np.full(n, -1, np.int64)
    count = screen.flagged(flags, n, positions)
    np.testing.assert_array_equal(positions[:count], np.flatnonzero(flags[:n]))


def test_the_sample_pass_checks_the_row_as_row_valid_does():
    """``mark_sample``'s verdict, from the pass that samples the row, is ``checks.row_valid``'s;
    -0 is a valid entry on either side, a negative one of any size is not, and the row is in
    the screen's range exactly when no positive p lies below SCREEN_P_MIN."""
    from mdverify.core.checks import row_valid

    rng = np.random.default_rng(5)
    p, q = rng.dirichlet(np.ones(4096)), rng.dirichlet(np.ones(4096))
    flags = screen.flag_view(np.zeros(4096), 4096)

    def moved_to_next(x, i, value):  # x[i] = value, the sum kept by x[i + 1]
        x[i + 1] += x[i] - value
        x[i] = value

    below_range = np.nextafter(screen.SCREEN_P_MIN, 0.0)
    broken = {"nan": lambda p, q: p.__setitem__(7, np.nan),
              "-nan in q": lambda p, q: q.__setitem__(8, -np.nan),
              "inf in q": lambda p, q: q.__setitem__(9, np.inf), "negative q": lambda p, q: q.__setitem__(3, -1e-9),
              "sum": lambda p, q: p.__setitem__(0, p[0] + 1e-5),
              "subnormal p": lambda p, q: moved_to_next(p, 5, 1e-310),
              "tiny negative p": lambda p, q: moved_to_next(p, 16, -1e-300),
              "least negative q": lambda p, q: moved_to_next(q, 17, -5e-324)}
    valid = {"valid": lambda p, q: None, "-0 in p": lambda p, q: moved_to_next(p, 10, -0.0), "-0 in q": lambda p, q: moved_to_next(q, 11, -0.0),
             "p at the screen's least": lambda p, q: moved_to_next(p, 12, screen.SCREEN_P_MIN),
             "p below the screen's least": lambda p, q: moved_to_next(p, 14, below_range)}
    for name, breaking in {**broken, **valid}.items():
        for dtype, tolerance in ((np.float64, 1e-6), (np.float32, 1e-4)):
            pb, qb = p.astype(dtype), q.astype(dtype)
            breaking(pb, qb)
            in_range, verdict, low, high = screen.mark_sample(pb, qb, 256, flags, True)
            assert verdict == row_valid(pb, qb, tolerance), (name, dtype)
            vanishes = dtype == np.float32 and name in ("sum", "subnormal p", "tiny negative p", "least negative q")
            assert verdict == (name not in broken or vanishes), (name, dtype)  # too small for float32: 0
            below = name in ("subnormal p", "p below the screen's least") and dtype == np.float64
            assert in_range == (not below), (name, dtype)
            assert screen.mark_sample(pb, qb, 256, flags, False)[0] == in_range, (name, dtype)
            if name in valid:  # and the row's capacities, which calibrate the sample
                difference = pb.astype(np.float64) - qb.astype(np.float64)
                assert low == pytest.approx(np.maximum(difference, 0.0).sum(), rel=1e-12, abs=1e-15), (name, dtype)
                assert high == pytest.approx(np.maximum(-difference, 0.0).sum(), rel=1e-12, abs=1e-15), (name, dtype)
