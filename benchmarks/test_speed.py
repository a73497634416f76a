"""pytest-benchmark suites of SPEC section 8: ``pytest benchmarks/ --benchmark-group-by=param:n``.

Not part of the test run (speed is never asserted in tests). Each n runs the sort-free and
sorted solvers beside their baselines on the same row, so the groups read as side-by-side
ratios; ``mdverify bench`` runs the fuller scaling study and writes JSON, a plot and a table.
"""

import numpy as np
import pytest

from mdverify.bench.peer import peer_sampler
from mdverify.bench.run import EPS, _Solver, floor_pass
from mdverify.core import mentor as kernels
from mdverify.core.checks import rows_valid
from mdverify.validate import SUM_TOLERANCE
from mdverify.workloads import llm_rows

SIZES = [2**10, 2**14, 2**17, 2**20]


@pytest.fixture(scope="module", params=SIZES, ids=lambda n: f"n={n}")
def row(request):
    P, Q = llm_rows(request.param, 1, seed=1)
    return request.param, P, Q


@pytest.mark.parametrize("method", ["select", "sorted", "numpy sort", "floor", "peer"])
def test_row(benchmark, row, method):
    n, P, Q = row
    benchmark.group = f"n={n}"
    solver = _Solver(P, Q, EPS)
    r = np.empty(n)
    calls = {
        "select": lambda: solver(kernels.SELECT),
        "sorted": lambda: solver(kernels.SORTED),
        "numpy sort": lambda: np.sort(Q[0] / P[0]),
        "floor": lambda: floor_pass(P[0], Q[0], 0.5, 2.0, r),
        "peer": lambda: peer_sampler(P[0], Q[0], EPS),
    }
    benchmark(calls[method])


@pytest.mark.parametrize("batch", [1, 16, 64, 256])
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
def test_batch(benchmark, batch, dtype):
    P, Q = llm_rows(2**17, batch, seed=2, dtype=dtype)
    benchmark.group = f"batch, n=131072, {np.dtype(dtype).name}"
    solver = _Solver(P, Q, EPS)
    benchmark(lambda: solver(kernels.SELECT))


@pytest.mark.parametrize("batch", [1, 64])
@pytest.mark.parametrize("check", ["inside the kernel", "a pass before", "none"])
def test_input_check(benchmark, batch, check):
    """``md.mentor``'s input check of each row, run inside the kernel as the row is solved
    (``core.mentor.CHECKED``), against one pass over the batch before it, and no check."""
    P, Q = llm_rows(2**17, batch, seed=2)
    benchmark.group = f"input check, {batch} rows, n=131072"
    solver = _Solver(P, Q, EPS)
    calls = {"inside the kernel": lambda: solver(kernels.SELECT | kernels.CHECKED),
             "a pass before": lambda: (rows_valid(P, Q, SUM_TOLERANCE[P.dtype]), solver(kernels.SELECT)),
             "none": lambda: solver(kernels.SELECT)}
    benchmark(calls[check])
