"""Compiling the kernels before they are needed: ``mdverify compile``.

The first call of each entry point compiles its numba kernels, minutes for the whole package;
numba caches what it compiles on disk, and later processes load it in a fraction of a second.
This calls every entry point of the public API once, on small rows, for each dtype the kernels
take, in parallel processes, so that a decoder, a report or a test run starts with every
kernel compiled (a decoder then never stalls on its first step). A kernel already cached is
loaded, not compiled again, so running it twice costs seconds.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed

import numpy as np

import mdverify as md
from mdverify.core import mentor as kernels
from mdverify.workloads import llm_rows


def _rows(dtype, rows: int = 3, n: int = 40):
    p, q = llm_rows(n, rows, seed=0, truncate="both")
    return p.astype(dtype), q.astype(dtype)


def _mentor(dtype) -> None:
    p, q = _rows(dtype)
    md.mentor(p, q, 0.1)
    # The pull-back of a row that rounding (or certified=True) takes over its budget, which
    # these rows need not meet.
    kernels.toward(p[0], q[0], 0.5, np.empty_like(p[0]))
    kernels.acceptance_and_moved(q[0], p[0], q[0])


def _mentor_by_price(dtype) -> None:
    md.mentor(*_rows(dtype), price=2.0)


def _divergence_value(dtype) -> None:
    p, q = _rows(dtype)
    md.divergence("kl").value(q, p)


def _ratio_index(dtype) -> None:
    p, q = _rows(dtype)
    index = md.RatioIndex(p[0], q[0])
    index.frontier("kl")
    index.query("kl", 0.1)
    index.budget_at_price("kl", 2.0)


def _verify(dtype) -> None:
    p, q = _rows(dtype, rows=4)
    target, draft = p.reshape(2, 2, -1), q[:2].reshape(2, 1, -1)
    tokens = draft.argmax(-1)
    md.verify(target, draft, tokens, 0.1, seed=0)
    md.verify(target, draft, tokens, price=2.0, seed=0)


def _prices(dtype) -> None:
    p, q = _rows(dtype, rows=6)
    md.allocate(p, q, 0.3)
    md.allocate(p, q, 0.3, "tv")
    md.plan_chain(p[:3].reshape(1, 3, -1), q[:2].reshape(1, 2, -1), 2.0)


#: (name, function) of every entry point, each run for float64 and for float32 rows, the
#: longest to compile first (on a fresh checkout: 2 minutes, then 1-1.5, 1, 1, and seconds)
#: so that the processes finish together.
ENTRY_POINTS = (
    ("md.mentor", _mentor), ("md.verify", _verify), ("md.allocate, md.plan_chain", _prices),
    ("md.mentor(price=)", _mentor_by_price), ("md.RatioIndex", _ratio_index), ("Divergence.value", _divergence_value),
)
DTYPES = ("float64", "float32")


def _compile_one(name: str, dtype: str) -> tuple[str, str, float]:
    start = time.perf_counter()
    dict(ENTRY_POINTS)[name](np.dtype(dtype))
    return name, dtype, time.perf_counter() - start


def compile_kernels(jobs: int | None = None) -> list[tuple[str, str, float]]:
    """Compile (or load from numba's cache) the kernels of every entry point, ``jobs`` processes
    at a time (default: every core). Returns (entry point, dtype, seconds) in the order they
    finished."""
    from tqdm import tqdm

    tasks = [(name, dtype) for name, _ in ENTRY_POINTS for dtype in DTYPES]
    jobs = jobs or os.cpu_count() or 1
    done = []
    # spawn: a fresh interpreter per process, never a fork of one whose numba state is live
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(_compile_one, *task) for task in tasks]
        with tqdm(total=len(futures), desc="compiling kernels", unit="entry point") as bar:
            for future in as_completed(futures):
                done.append(future.result())
                bar.set_postfix_str(f"{done[-1][0]} ({done[-1][1]}): {done[-1][2]:.0f} s")
                bar.update()
    return done
