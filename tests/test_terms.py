"""``core.terms``: D_f's sums, vectorised, against term-by-term references."""

import math

import numpy as np
import pytest

import mdverify as md
from mdverify.core import select
from mdverify.core.terms import (CHUNK, _divergence_in_one_pass, divergence_of_terms, divergence_row,
                                 divergence_terms, sum_weighted_f_tilde, weighted_f_tilde)
from mdverify.bench.families import FAMILIES


def _sum(kind, alpha, key, weight, s, start, end, initial, limit, scratch=CHUNK):
    return sum_weighted_f_tilde(kind, alpha, key, weight, s, start, end, initial, limit, np.empty(scratch))


def _reference(kind, alpha, key, weight, s):
    return math.fsum(weighted_f_tilde(kind, alpha, float(w), s * float(k)) for k, w in zip(key, weight))


def test_sum_of_terms_is_their_exact_sum(entry):
    """Within 1e-14 of the exactly rounded sum of ``weighted_f_tilde``, on both sides' key signs,
    wide ratios, and lengths that are not whole chunks."""
    rng = np.random.default_rng(7)
    ratios = np.exp(rng.normal(0.0, 4.0, 5000))
    weight = rng.dirichlet(np.ones(5000))
    for s, key in ((1.0, ratios), (-1.0, -ratios)):
        for start, end in ((0, 5000), (3, 1029), (17, 17)):
            got = _sum(entry.kind, entry.param, key, weight, s, start, end, 0.0, np.inf)
            want = _reference(entry.kind, entry.param, key[start:end], weight[start:end], s)
            assert got == pytest.approx(want, rel=1e-14, abs=1e-300), (entry.name, s, start, end)


def test_a_sum_is_the_same_in_any_scratch_that_holds_its_chunks(entry):
    """The search sums in its scratch row, as long as the row it searches: wherever that holds
    min(CHUNK, end - start) terms, the chunks and so the sum are those of a CHUNK-long scratch,
    to the last bit (equal rows, equal sums, whichever caller sums them)."""
    rng = np.random.default_rng(8)
    key, weight = np.exp(rng.normal(0.0, 3.0, 3000)), rng.dirichlet(np.ones(3000))
    for start, end in ((0, 3000), (5, 300), (100, 612)):
        want = _sum(entry.kind, entry.param, key, weight, 1.0, start, end, 0.0, np.inf)
        for scratch in (min(CHUNK, end - start), end - start, 3000, 2 * CHUNK + 1):
            got = _sum(entry.kind, entry.param, key, weight, 1.0, start, end, 0.0, np.inf, scratch)
            assert got == want, (entry.name, start, end, scratch)


def test_a_sum_stops_once_it_exceeds_its_limit(entry):
    """With a limit, the sum of a first part of the terms once that exceeds it (the rest can only
    add to it): then over the limit, and never over the whole sum; the whole sum otherwise."""
    rng = np.random.default_rng(5)
    key, weight = np.exp(rng.normal(0.0, 2.0, 20000)), rng.dirichlet(np.ones(20000))
    whole = _sum(entry.kind, entry.param, key, weight, 1.0, 0, key.size, 0.0, np.inf)
    for limit in (0.0, whole / 3, whole * (1 - 1e-9), whole, 2 * whole):
        got = _sum(entry.kind, entry.param, key, weight, 1.0, 0, key.size, 0.0, limit)
        assert got == whole if limit >= whole else limit < got <= whole, (entry.name, limit)


def test_terms_whose_f_overflows_are_summed_term_by_term():
    """KL's f~(t) overflows from t = 2.5e305 while p f~(t) does not (p = 1e-306): the sum falls
    back to ``weighted_f_tilde``, which is finite there; an infinite term (reverse_kl at t = 0)
    makes the sum infinite."""
    kl, reverse_kl = md.divergence("kl"), md.divergence("reverse_kl")
    key = np.array([0.5, 1e306 / 2, 2.0])
    weight = np.array([0.2, 1e-306, 0.3])
    got = _sum(kl.kind, kl.param, key, weight, 1.0, 0, 3, 0.0, np.inf)
    assert np.isfinite(got) and got == pytest.approx(_reference(kl.kind, kl.param, key, weight, 1.0), rel=1e-14)
    key[0] = 0.0
    assert _sum(reverse_kl.kind, reverse_kl.param, key, weight, 1.0, 0, 3, 0.0, np.inf) == np.inf


def test_divergence_row_counts_every_kind_of_token(entry):
    """Zeros on either side, p = 0 < r (worth r f'(inf)), tiny p, float32 rows: the sum of each
    token's term as the registry defines it."""
    rng = np.random.default_rng(3)
    for dtype in (np.float64, np.float32):
        p, r = rng.dirichlet(np.ones(3000)), rng.dirichlet(np.ones(3000))
        p[:40], r[40:80], p[80:90], r[80:90] = 0.0, 0.0, 0.0, 0.0
        p[90:100] = 1e-300
        p, r = (x.astype(dtype) for x in (p, r))
        terms = []
        fpinf = entry.kernels.f_tilde_prime_at_inf(entry.kind, entry.param)
        for pi, ri in zip(p.astype(float), r.astype(float)):
            if pi > 0.0 and ri / pi < np.inf:
                terms.append(weighted_f_tilde(entry.kind, entry.param, pi, ri / pi))
            elif ri > 0.0:
                terms.append(ri * fpinf)
        want = math.fsum(terms)
        assert divergence_row(r, p, entry.kind, entry.param, np.inf) == pytest.approx(want, rel=1e-14, abs=1e-300)


def test_a_row_summed_in_one_pass_is_summed_as_its_laid_out_terms(entry):
    """Where every token carries a term, ``divergence_row`` sums the row in one pass without
    laying its terms out: the same value, to the last bit, as the laid-out terms give, with or
    without a limit that stops the sum, in float32 and float64, on lengths that are not whole
    chunks; and with one token that carries none (r = 0 or p = 0), the laid-out sum itself."""
    rng = np.random.default_rng(12)
    for dtype in (np.float64, np.float32):
        for n in (1, CHUNK, 3 * CHUNK + 7, 20000):
            p = rng.dirichlet(np.full(n, 0.3)).astype(dtype)
            r = rng.dirichlet(np.full(n, 0.3)).astype(dtype)
            r[r == 0], p[p == 0] = 1e-30, 1e-30  # tokens that all carry a term
            for missing in (None, "r", "p"):
                row_r, row_p = r.copy(), p.copy()
                if missing is not None and n > 1:
                    (row_r if missing == "r" else row_p)[n // 2] = 0.0
                terms = np.empty((3, n))
                laid_out = divergence_terms(row_r, row_p, terms)
                whole = divergence_of_terms(entry.kind, entry.param, terms, *laid_out, np.inf)
                assert divergence_row(row_r, row_p, entry.kind, entry.param, np.inf) == whole, (entry.name, n, missing)
                one_pass = _divergence_in_one_pass(row_r, row_p, entry.kind, entry.param, np.inf, np.empty((2, CHUNK)))
                assert one_pass[0] == (missing is None or n == 1) and (not one_pass[0] or one_pass[1] == whole)
                limit = whole / 2
                stopped = divergence_of_terms(entry.kind, entry.param, terms, *laid_out, limit)
                assert divergence_row(row_r, row_p, entry.kind, entry.param, limit) == stopped, (entry.name, n, missing)


@pytest.mark.parametrize("family", ["unrelated drafter", "top-p target (0.9)", "top-k drafter (k = 50)",
                                    "near-identical pair"])
def test_the_drafter_test_sums_d_as_md_divergence_does(family):
    """At eps = D(q || p) as ``md.divergence`` gives it, r = q is recognised: the drafter test
    sums D exactly as that does, to the last bit (a sum in another order could exceed it)."""
    p, q = FAMILIES[family](131072, np.random.default_rng(11))
    for name in ("kl", "jensen_shannon", "hellinger", "tv"):
        entry = md.divergence(name)
        eps = float(entry.value(q, p))
        if not np.isfinite(eps):
            continue
        found, _, state, *_ = select._drafter_state(p, q, eps, entry.kind, entry.param, np.inf,
                                                    np.empty((4, p.size)))
        assert found and state[select.D] == eps, (family, name)
