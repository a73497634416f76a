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
