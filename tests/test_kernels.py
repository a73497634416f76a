"""The core kernels are callable from other numba code, with parallel on and off."""

import warnings

import numpy as np
import pytest
from numba import njit, prange

import mdverify as md
from mdverify.core.mentor import FIELDS, mentor_row, mentor_row_select
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
