"""The boosting quantities of mdverify.theory on extended reals: never nan."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from mdverify.theory import beats_target, edge, first_order_indicator, kl, segment_threshold, weak_hypothesis

ATOMS = st.sampled_from([0.0, 0.0, 1e-300, 1e-12, 0.1, 0.5, 1.0, 3.0])


@given(hnp.arrays(np.float64, (4, 6), elements=ATOMS))
def test_no_nan_anywhere(weights):
    weights[:, 0] += weights.sum(-1) == 0
    pi, p, q, r = weights / weights.sum(-1, keepdims=True)
    values = [kl(pi, p), kl(pi, r), edge(pi, p, r), segment_threshold(p, q, r)]
    assert not np.isnan(values).any()
    assert not np.isnan(weak_hypothesis(p, r)).any()
    assert beats_target(pi, p, r) in (True, False) and first_order_indicator(pi, p, r) in (True, False)


def test_known_values():
    p = np.array([0.5, 0.5])
    r = np.array([0.25, 0.75])
    np.testing.assert_allclose(weak_hypothesis(p, r), np.log([0.5, 1.5]))
    assert kl(p, p) == 0 and kl([1.0, 0.0], [0.0, 1.0]) == np.inf
    pi = np.array([0.1, 0.9])
    assert beats_target(pi, p, r) and first_order_indicator(pi, p, r)
    assert not beats_target(np.array([0.9, 0.1]), p, r)
    np.testing.assert_allclose(edge(pi, p, r), np.sum(pi * np.log(r / p)) - np.sum(p * np.log(r / p)))
