"""The one decorator every numba kernel of mdverify uses.

Kernels are cached on disk, use numpy's error model (division by zero gives inf, never an
exception) and never raise: checking happens in the thin Python wrappers around them.
fastmath stays off because the kernels rely on inf and on exact comparisons; a kernel whose
loop is only sums may ask for reassociation alone (``reassociate=True``), which lets the
compiler vectorise the sums and changes nothing but their rounding.

Every kernel is recorded in ``KERNELS``, in definition order, so that ``core.rebind`` can
compile the stack again against the generated functions of a user-defined generator.
"""

from numba import njit

#: (dispatcher, options) of every kernel, in the order they were defined.
KERNELS: list = []


def options(parallel: bool = False, cache: bool = True, reassociate: bool = False) -> dict:
    fastmath = {"reassoc"} if reassociate else False
    return dict(cache=cache, error_model="numpy", nogil=True, parallel=parallel, fastmath=fastmath)


def kernel(fn=None, *, parallel: bool = False, reassociate: bool = False, cache: bool = True):
    """``@kernel``, ``@kernel(parallel=True)`` or ``@kernel(reassociate=True)``: njit with the
    project's options; ``cache=False`` for code generated at run time, never cached on disk."""

    def compile_(f):
        chosen = options(parallel, cache=cache, reassociate=reassociate)
        dispatcher = njit(**chosen)(f)
        KERNELS.append((dispatcher, chosen))
        return dispatcher

    return compile_ if fn is None else compile_(fn)
