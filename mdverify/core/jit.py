"""The one decorator every numba kernel of mdverify uses.

Kernels are cached on disk, use numpy's error model (division by zero gives inf, never an
exception) and never raise: checking happens in the thin Python wrappers around them.
fastmath stays off because the kernels rely on inf and on exact comparisons.

Every kernel is recorded in ``KERNELS``, in definition order, so that ``core.rebind`` can
compile the stack again against the generated functions of a user-defined generator.
"""

from numba import njit

#: (dispatcher, parallel) of every kernel, in the order they were defined.
KERNELS: list = []


def options(parallel: bool = False, cache: bool = True) -> dict:
    return dict(cache=cache, error_model="numpy", nogil=True, parallel=parallel)


def kernel(fn=None, *, parallel: bool = False):
    """``@kernel`` or ``@kernel(parallel=True)``: njit with the project's options."""

    def compile_(f):
        dispatcher = njit(**options(parallel))(f)
        KERNELS.append((dispatcher, parallel))
        return dispatcher

    return compile_ if fn is None else compile_(fn)
