"""pytest-benchmark of the solvers across row families (``mdverify.bench.families``), beside the sort.

``pytest benchmarks/test_families.py --benchmark-group-by=param:family``; ``mdverify bench``
runs the full grid of families, divergences and budgets and reports the median and the worst.
"""

import numpy as np
import pytest

from mdverify.bench.families import FAMILIES
from mdverify.bench.run import REFERENCE_N, _Solver
from mdverify.core import mentor as kernels


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request):
    k = list(FAMILIES).index(request.param)
    p, q = FAMILIES[request.param](REFERENCE_N, np.random.default_rng(1000 + k))
    return request.param, np.ascontiguousarray(p), np.ascontiguousarray(q)


@pytest.mark.parametrize("eps", [1e-3, 0.1, 10.0])
@pytest.mark.parametrize("method", ["select", "sorted", "numpy sort"])
def test_family(benchmark, family, method, eps):
    name, p, q = family
    benchmark.group = f"{name}, kl, eps = {eps}"
    solver = _Solver(p[None], q[None], eps, "kl")

    def sort():
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.sort(q / p)

    calls = {"select": lambda: solver(kernels.SELECT), "sorted": lambda: solver(kernels.SORTED), "numpy sort": sort}
    benchmark(calls[method])
