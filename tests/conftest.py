import numpy as np
import pytest
from hypothesis import HealthCheck, settings

import mdverify as md

# Numba compiles on first call; hypothesis must not count that against a deadline.
settings.register_profile("mdverify", deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("mdverify")

#: Every registered divergence plus alpha-family members on both sides of 0 and 1.
ALL_DIVERGENCES = [md.divergence(name) for name in md.names()] + [md.alpha(0.3), md.alpha(-1.0), md.alpha(2.5)]


@pytest.fixture(params=ALL_DIVERGENCES, ids=lambda d: d.name)
def entry(request):
    return request.param


def edge_rows() -> list[tuple[str, np.ndarray, np.ndarray]]:
    """The edge rows of SPEC section 4, as (label, p, q)."""
    rows = [
        ("zeros_in_q", [0.5, 0.3, 0.2, 0.0], [0.0, 0.0, 0.6, 0.4]),
        ("zeros_in_p", [0.6, 0.4, 0.0, 0.0], [0.2, 0.3, 0.3, 0.2]),
        ("zeros_both", [0.5, 0.0, 0.5, 0.0, 0.0], [0.0, 0.5, 0.25, 0.25, 0.0]),
        ("ties", [0.2, 0.2, 0.2, 0.2, 0.2], [0.1, 0.1, 0.3, 0.3, 0.2]),
        ("p_equals_q", [0.25, 0.25, 0.5], [0.25, 0.25, 0.5]),
        ("n_is_1", [1.0], [1.0]),
        ("tiny_tail", [1 - 2e-300, 1e-300, 1e-300], [0.5, 0.25, 0.25]),
        ("tiny_draft", [0.5, 0.25, 0.25], [1 - 2e-300, 1e-300, 1e-300]),
        ("one_hot_pair", [1.0, 0.0], [0.0, 1.0]),
    ]
    return [(label, np.array(p), np.array(q)) for label, p, q in rows]
