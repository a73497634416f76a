"""The one decorator every numba kernel of mdverify uses.

Kernels are cached on disk, use numpy's error model (division by zero gives inf, never an
exception) and never raise: checking happens in the thin Python wrappers around them.
fastmath stays off because the kernels rely on inf and on exact comparisons.
"""

from numba import njit


def kernel(fn=None, *, parallel: bool = False):
    """``@kernel`` or ``@kernel(parallel=True)``: njit with the project's options."""
    options = dict(cache=True, error_model="numpy", nogil=True, parallel=parallel)
    if fn is None:
        return lambda f: njit(**options)(f)
    return njit(**options)(fn)
