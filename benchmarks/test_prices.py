"""pytest-benchmark of budgets by price (SPEC section 10) beside the budget solves they replace.

``pytest benchmarks/test_prices.py``: a price solve against an eps solve of the same rows (LLM-like
rows, and rows of every family of ``mdverify.bench.families`` but the neural pair's), the
chain-aware ``md.verify(price=...)`` against ``md.verify(eps=...)`` (B = 64, k = 4, n = 32768),
``md.plan_chain`` of those chains against k ``md.mentor`` price solves of their positions,
and ``md.allocate`` of 64 rows of n = 131072 against solving them at fixed budgets and against the
same price search on every row's whole frontier (its fallback).
"""

from functools import lru_cache

import numpy as np
import pytest

import mdverify as md
from mdverify import prices
from mdverify.bench.families import FAMILIES
from mdverify.workloads import llm_rows


@pytest.fixture(scope="module")
def rows():
    return llm_rows(131072, 64, seed=5)


@pytest.mark.parametrize("how", ["eps, auto", "eps, sorted", "price"])
def test_row_solve(benchmark, rows, how):
    P, Q = rows
    benchmark.group = "64 rows, n = 131072, kl"
    calls = {"eps, auto": lambda: md.mentor(P, Q, 0.05), "eps, sorted": lambda: md.mentor(P, Q, 0.05, method="sorted"),
             "price": lambda: md.mentor(P, Q, price=5.0)}
    benchmark(calls[how])


@lru_cache(maxsize=None)
def _family_rows(family: str):
    """16 rows of a family of ``mdverify.bench.families`` (n = 131072, or the models' vocabulary)."""
    rng = np.random.default_rng(list(FAMILIES).index(family))
    pairs = [FAMILIES[family](131072, rng) for _ in range(16)]
    return tuple(np.ascontiguousarray([pair[k] for pair in pairs]) for k in (0, 1))


@pytest.mark.parametrize("how", ["eps", "price"])
@pytest.mark.parametrize("family", [name for name in FAMILIES if not name.startswith("neural")])
def test_row_solve_across_families(benchmark, family, how):
    """A price solve against the eps solve of the budget it buys, on rows of every family."""
    P, Q = _family_rows(family)
    eps = md.mentor(P, Q, price=3.0, divergence="jensen_shannon").divergence_value
    benchmark.group = f"{family}: 16 rows, jensen_shannon, price 3 or the budget it buys"
    calls = {"eps": lambda: md.mentor(P, Q, eps, "jensen_shannon"),
             "price": lambda: md.mentor(P, Q, price=3.0, divergence="jensen_shannon")}
    benchmark(calls[how])


@lru_cache(maxsize=1)
def _chains():
    p, q = llm_rows(32768, 64 * 5, seed=6)  # position j of chain b is the pair (p, q)[5 b + j]
    return p.reshape(64, 5, -1), np.ascontiguousarray(q.reshape(64, 5, -1)[:, :4])


@pytest.mark.parametrize("how", ["eps", "price"])
def test_verify(benchmark, how):
    target, draft = _chains()
    tokens = draft.argmax(-1)
    benchmark.group = "md.verify, B = 64, k = 4, n = 32768"
    calls = {"eps": lambda: md.verify(target, draft, tokens, 0.05, seed=0),
             "price": lambda: md.verify(target, draft, tokens, price=5.0, seed=0)}
    benchmark(calls[how])


@pytest.mark.parametrize("how", ["plan_chain", "md.mentor per position"])
def test_plan_chain(benchmark, how):
    """The chain plan (k price solves, one after another) against k plain price solves."""
    target, draft = _chains()
    benchmark.group = "md.plan_chain, B = 64, k = 4, n = 32768, price 5"
    calls = {"plan_chain": lambda: md.plan_chain(target, draft, 5.0),
             "md.mentor per position": lambda: [md.mentor(target[:, j], draft[:, j], price=5.0) for j in range(4)]}
    benchmark(calls[how])


@pytest.mark.parametrize("how", ["fixed budgets", "allocate", "allocate on whole frontiers"])
def test_allocate(benchmark, rows, how):
    P, Q = rows
    benchmark.group = "64 rows, n = 131072, total 64 * 0.05"
    calls = {"fixed budgets": lambda: md.mentor(P, Q, 0.05), "allocate": lambda: md.allocate(P, Q, 64 * 0.05),
             "allocate on whole frontiers": lambda: prices._allocate_by_frontiers(
                 P, Q, np.ones(64), 64 * 0.05, md.divergence("kl"))}
    benchmark.pedantic(calls[how], rounds=3, iterations=1, warmup_rounds=1)
