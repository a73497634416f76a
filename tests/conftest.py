import pytest
from hypothesis import HealthCheck, settings

from mdverify.workloads import divergence_suite

# Numba compiles on first call; hypothesis must not count that against a deadline.
settings.register_profile("mdverify", deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("mdverify")


@pytest.fixture(params=divergence_suite(), ids=lambda d: d.name)
def entry(request):
    return request.param
