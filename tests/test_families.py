"""The benchmark's row families (``bench.families``) are solved exactly by every method: the
sort-free solver against the sorted walk, at the benchmark's budgets, where r = q is first
reached and just below it, and fuzzed over seeds."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import mdverify as md
from mdverify.bench.families import BUDGETS, DIVERGENCES, FAMILIES, NEAR_DRAFTER

N = 4096


def rows(family: str, seed: int):
    try:
        return FAMILIES[family](N, np.random.default_rng(seed))
    except ImportError:  # the neural pair needs the torch extra
        pytest.skip("the neural pair needs PyTorch")


def agree(p, q, eps, divergence):
    select = md.mentor(p, q, eps, divergence, method="select")
    walk = md.mentor(p, q, eps, divergence, method="sorted")
    np.testing.assert_allclose(select.acceptance, walk.acceptance, rtol=0, atol=1e-12)
    np.testing.assert_allclose(select.r, walk.r, rtol=0, atol=1e-12)
    assert select.divergence_value <= eps * (1 + 1e-12)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_select_equals_the_sorted_walk_on_every_family(family):
    p, q = rows(family, seed=7)
    for divergence in DIVERGENCES:
        at_q = float(md.divergence(divergence).value(q, p))  # where r = q is first reached
        near = tuple(share * at_q for share in NEAR_DRAFTER + (1.0,)) if np.isfinite(at_q) else ()
        for eps in BUDGETS + near:
            agree(p, q, eps, divergence)


@given(st.sampled_from(list(FAMILIES)), st.integers(0, 2**31), st.sampled_from(DIVERGENCES),
       st.floats(1e-5, 20.0))
def test_fuzz_the_families(family, seed, divergence, eps):
    p, q = rows(family, seed)
    agree(p, q, eps, divergence)
