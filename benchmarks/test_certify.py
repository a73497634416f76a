"""pytest-benchmark of rigorous certificates (``md.certify``) beside the solve they certify.

``pytest benchmarks/test_certify.py``: one LLM-like row of n = 16384, kl and hellinger at
eps = 0.05: the solve, the certificate (ball arithmetic, python-flint), and the certified solve
(solve, pull-back where needed, certificate).
"""

import pytest

import mdverify as md
from mdverify.workloads import llm_rows

pytest.importorskip("flint")


@pytest.fixture(scope="module")
def row():
    return llm_rows(16384, 1, seed=7)


@pytest.mark.parametrize("divergence", ["kl", "hellinger"])
@pytest.mark.parametrize("how", ["solve", "certify", "certified solve"])
def test_certificate_cost(benchmark, row, how, divergence):
    p, q = row
    res = md.mentor(p, q, 0.05, divergence)
    benchmark.group = f"one row, n = 16384, {divergence}"
    calls = {"solve": lambda: md.mentor(p, q, 0.05, divergence),
             "certify": lambda: md.certify(p, q, res, 0.05, divergence),
             "certified solve": lambda: md.mentor(p, q, 0.05, divergence, certified=True)}
    benchmark.pedantic(calls[how], rounds=3, iterations=1)
