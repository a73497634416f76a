"""The stable sort behind the ratio index, against numpy's stable argsort.

The radix sort orders keys by the 30 highest bits of their offsets from the least key, then
the runs those bits leave tied by their whole keys; the keys below are built to reach every
way a run is ordered.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mdverify.core.index import INSERTION_MAX, RADIX_FROM, _radix_sort, _sort_pairs


def _clusters(rng, n, count, spread):
    """n keys in ``count`` clusters of relative width ``spread`` around centres spread over decades."""
    centres = 10.0 ** rng.uniform(-8, 3, count) * rng.choice([-1.0, 1.0], count)
    return centres[rng.integers(0, count, n)] * (1.0 + spread * rng.standard_normal(n))


def _key_sets():
    rng = np.random.default_rng(7)
    n = 3 * RADIX_FROM
    yield "spread", rng.standard_normal(n) * 10.0 ** rng.uniform(-5, 5, n)
    yield "exact ties", rng.choice([0.0, 0.25, 1.0, -3.0], n)
    yield "short runs", _clusters(rng, n, n // (INSERTION_MAX // 2), 1e-13)
    yield "medium runs", _clusters(rng, n, 12, 1e-13)
    yield "long runs", _clusters(rng, n, 2, 1e-12)
    yield "one tight cluster", _clusters(rng, n, 1, 1e-14)
    yield "few distinct low bits", 1.0 + rng.integers(0, 3, n) * 2.0 ** -52
    yield "cluster and outlier", np.append(np.full(n - 1, 0.5) + rng.integers(0, 9, n - 1) * 1e-16, -1e300)


@pytest.mark.parametrize("name,key", list(_key_sets()))
def test_the_radix_sort_is_the_stable_sort(name, key):
    weight = np.arange(key.size, dtype=np.float64)
    order = np.argsort(key, kind="stable")
    sorted_key, sorted_weight = _radix_sort(key, weight)
    np.testing.assert_array_equal(sorted_key, key[order], err_msg=name)
    np.testing.assert_array_equal(sorted_weight, weight[order], err_msg=name)  # ties in their order


finite = st.floats(-1e300, 1e300).map(lambda x: x if x != 0.0 else 0.0)  # no -0.0


@settings(max_examples=60, deadline=None)
@given(st.lists(finite, min_size=1, max_size=40), st.integers(1, 3 * RADIX_FROM), st.integers(0, 2 ** 32))
def test_any_finite_keys_sort_stably(values, n, seed):
    key = np.random.default_rng(seed).choice(np.array(values), n)  # few distinct values, many ties
    key = key * (1.0 + 1e-15 * np.random.default_rng(seed).integers(-2, 3, n))
    key[key == 0.0] = 0.0  # -0.0 sorts before 0.0 by bits; the index never holds it
    weight = np.random.default_rng(seed + 1).random(n)
    order = np.argsort(key, kind="stable")
    sorted_key, sorted_weight = _sort_pairs(key, weight)
    np.testing.assert_array_equal(sorted_key, key[order])
    np.testing.assert_array_equal(sorted_weight, weight[order])
