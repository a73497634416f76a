"""The core kernels are callable from other numba code, with parallel on and off, and balance
their reference counts."""

import gc
import warnings

import numpy as np
import pytest
from numba import njit, prange
from numba.core.runtime import _nrt_python, rtsys

import mdverify as md
from mdverify.core.mentor import FIELDS, mentor_row, mentor_row_select
from mdverify.core import jit
from mdverify.workloads import llm_rows


def _caller(parallel):
    @njit(parallel=parallel)
    def run(P, Q, eps, kind, alpha):
        R = np.empty_like(P)
        out = np.empty((P.shape[0], len(FIELDS)))
        for i in prange(P.shape[0]):
            mentor_row(P[i], Q[i], eps, kind, alpha, R[i], out[i])
        return R, out

    return run


@pytest.mark.parametrize("parallel", [False, True])
def test_mentor_row_from_njit(parallel):
    p, q = llm_rows(500, 4, seed=9)
    entry = md.divergence("jensen_shannon")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        R, out = _caller(parallel)(p, q, 0.05, entry.kind, entry.param)
    res = md.mentor(p, q, 0.05, entry)
    np.testing.assert_array_equal(R, res.r)
    np.testing.assert_array_equal(out[:, FIELDS.index("acceptance")], res.acceptance)


def test_mentor_row_select_from_njit_with_a_workspace():
    @njit
    def run(P, Q, eps, kind, alpha):
        R = np.empty_like(P)
        out = np.empty((P.shape[0], len(FIELDS)))
        work = np.empty((4, P.shape[1]))  # allocated once, reused for every row
        for i in range(P.shape[0]):
            mentor_row_select(P[i], Q[i], eps, kind, alpha, R[i], out[i], work)
        return R, out

    p, q = llm_rows(700, 3, seed=10, truncate="top_p")
    entry = md.alpha(2.5)
    R, out = run(p, q, 0.02, entry.kind, entry.param)
    res = md.mentor(p, q, 0.02, entry, method="select")
    np.testing.assert_array_equal(R, res.r)
    np.testing.assert_array_equal(out[:, FIELDS.index("lam")], res.lam)


def test_caches_of_changed_kernel_sources_are_dropped(tmp_path, monkeypatch):
    """numba keys a cache on its kernel's own file; a change to any kernel source drops them all."""
    from mdverify.core import jit

    package = tmp_path / "pkg"
    (package / "__pycache__").mkdir(parents=True)
    (package / "a.py").write_text("@kernel\ndef f(x):\n    return x\n")
    cached = package / "__pycache__" / "a.f-1.py311.nbi"
    monkeypatch.setattr(jit, "PACKAGE", package)
    monkeypatch.setattr(jit, "STAMP", package / "__pycache__" / "stamp")
    jit.drop_stale_caches()
    cached.write_bytes(b"compiled against the sources as they are")
    jit.drop_stale_caches()
    assert cached.exists()  # nothing changed: kept
    (package / "a.py").write_text("@kernel\ndef f(x):\n    return x + 1\n")
    jit.drop_stale_caches()
    assert not cached.exists()
    # core.rebind decides what a user generator's cached stack calls: it counts as a kernel source
    (package / "rebind.py").write_text("swap = 1\n")
    jit.drop_stale_caches()
    cached.write_bytes(b"compiled against the sources as they are")
    (package / "rebind.py").write_text("swap = 2\n")
    jit.drop_stale_caches()
    assert not cached.exists()


def _every_path():
    """md.mentor over rows that take every path of both solvers: short rows (no sample), rows
    with a sample, truncated rows on either side, a padded vocabulary, float32, budgets that
    bind and those where r = q, prices, and md.RatioIndex."""
    rows = [llm_rows(n, 2, seed=n, truncate=truncate) for n in (300, 5000) for truncate in (None, "top_p", "both")]
    p, q = llm_rows(4000, 2, seed=1)
    rows.append((np.pad(p, ((0, 0), (0, 96))), np.pad(q, ((0, 0), (0, 96)))))  # padding: p = q = 0
    rows.append(llm_rows(5000, 2, seed=2, dtype=np.float32))
    for p, q in rows:
        for divergence in ("tv", "kl", "jensen_shannon"):
            for method in ("select", "sorted"):
                for eps in (1e-3, 0.1, 10.0):
                    md.mentor(p, q, eps, divergence, method=method)
                md.mentor(p, q, divergence=divergence, method=method, price=2.0)
        md.RatioIndex(p[0], q[0]).query("kl", 0.05)


def test_borrowed_kernels_leave_reference_counts_balanced():
    """Kernels compiled without reference counting (``borrow=True``) must neither keep an array
    a callee returns them (a leak) nor hand back one they were given (freed twice): over every
    path, each allocation of the kernels is freed once the results are gone."""
    assert sum(chosen.get("_nrt") is False for _, chosen in jit.KERNELS) >= 15 or not jit.BORROWING
    _every_path()  # compiled, and whatever compiling allocates, beforehand
    gc.collect()
    _nrt_python.memsys_enable_stats()  # numba's own switch (NUMBA_NRT_STATS) at run time
    try:
        before = rtsys.get_allocation_stats()
        _every_path()
        gc.collect()
        after = rtsys.get_allocation_stats()
    finally:
        _nrt_python.memsys_disable_stats()
    allocated = after.alloc - before.alloc
    assert allocated > 1000  # the kernels allocate (workspaces, samples, results): counted
    assert after.free - before.free == allocated
    assert after.mi_free - before.mi_free == after.mi_alloc - before.mi_alloc
