"""Before pytest-xdist starts its workers, the package's kernels are compiled once, in
parallel (``mdverify.precompile``); otherwise every worker compiles the same kernels itself,
minutes each on a fresh checkout. A run in one process compiles as it goes."""

import os

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    workers = getattr(session.config.option, "numprocesses", None) or 0
    if workers > 1 and "PYTEST_XDIST_WORKER" not in os.environ:
        from mdverify.precompile import compile_kernels

        compile_kernels(workers)
