"""pytest-benchmark of the torch backend on the CPU beside the numba core, the sort and the peer.

``pytest benchmarks/test_torch_backend.py``: 8 rows of n = 131072 float32 (kl, eps 0.05), as
``mdverify.bench.torch_backend`` times them; on a GPU run that module with ``--device cuda``.
"""

import numpy as np
import pytest

import mdverify as md
from mdverify.bench.torch_backend import EPS, N, peer
from mdverify.workloads import llm_rows

torch = pytest.importorskip("torch")
from mdverify import torch_backend  # noqa: E402


@pytest.fixture(scope="module")
def rows():
    p, q = llm_rows(N, 8, seed=0, dtype=np.float32)
    return p, q, torch.from_numpy(p), torch.from_numpy(q)


@pytest.mark.parametrize("how", ["torch backend", "numba", "torch.sort", "peer"])
def test_cpu(benchmark, rows, how):
    p, q, P, Q = rows
    benchmark.group = "8 rows, n = 131072, float32, kl"
    calls = {"torch backend": lambda: torch_backend.mentor(P, Q, EPS), "numba": lambda: md.mentor(p, q, EPS),
             "torch.sort": lambda: torch.sort(Q / P, -1), "peer": lambda: peer(P, Q, EPS)}
    benchmark.pedantic(calls[how], rounds=3, iterations=1, warmup_rounds=1)
