"""The one decorator every numba kernel of mdverify uses.

Kernels are cached on disk, use numpy's error model (division by zero gives inf, never an
exception) and never raise: checking happens in the thin Python wrappers around them.
fastmath stays off because the kernels rely on inf and on exact comparisons; a kernel whose
loop is only sums may ask for reassociation alone (``reassociate=True``), which lets the
compiler vectorise the sums and changes nothing but their rounding.

Every kernel is recorded in ``KERNELS``, in definition order, so that ``core.rebind`` can
compile the stack again against the generated functions of a user-defined generator.
"""

import hashlib
from pathlib import Path

from numba import njit
from numba.core import config
from numba.core.codegen import get_host_cpu_features
from numba.core.cpu import CPUTargetOptions

#: (dispatcher, options) of every kernel, in the order they were defined.
KERNELS: list = []
#: Whether this numba compiles a kernel without reference counting (its ``_nrt`` option).
BORROWING = hasattr(CPUTargetOptions, "_nrt")
#: Whether the kernels are compiled for AVX-512, as numba chooses its target (NUMBA_CPU_FEATURES,
#: else the host's): its comparisons set mask registers, not vectors of all-ones lanes.
MASK_REGISTERS = "+avx512f" in (config.CPU_FEATURES or get_host_cpu_features()).split(",")
#: The package whose kernels are cached beside their sources, and the stamp of those sources.
PACKAGE = Path(__file__).resolve().parents[1]
STAMP = PACKAGE / "__pycache__" / "numba-kernel-sources.sha256"


def drop_stale_caches() -> None:
    """Remove numba's on-disk caches of the package's kernels unless every kernel's source is
    as it was when they were written.

    numba keys a cached kernel on its own file alone, so a kernel whose callee (in another
    file) changed would load machine code compiled against the old callee: wrong results, or
    a crash, after an upgrade or an edit. One digest over every file that defines kernels
    closes that gap (``core.rebind``, which decides what a user generator's cached kernel
    stack calls, counts as such a file); a read-only install, where numba caches elsewhere,
    is left as it is.
    """
    sources = sorted(path for path in PACKAGE.rglob("*.py")
                     if "@kernel" in path.read_text() or path.name == "rebind.py")
    digest = hashlib.sha256(b"".join(path.read_bytes() for path in sources)).hexdigest()
    try:
        if STAMP.exists() and STAMP.read_text() == digest:
            return
        for cached in PACKAGE.rglob("__pycache__/*.nb[ic]"):
            cached.unlink(missing_ok=True)
        STAMP.parent.mkdir(exist_ok=True)
        STAMP.write_text(digest)
    except OSError:
        pass


drop_stale_caches()


def options(parallel: bool = False, cache: bool = True, reassociate: bool = False, inline: bool = False,
            borrow: bool = False) -> dict:
    fastmath = {"reassoc"} if reassociate else False
    chosen = dict(cache=cache, error_model="numpy", nogil=True, parallel=parallel, fastmath=fastmath,
                  inline="always" if inline else "never")
    if borrow and BORROWING:
        chosen["_nrt"] = False
    return chosen


def kernel(fn=None, *, parallel: bool = False, reassociate: bool = False, cache: bool = True, inline: bool = False,
           borrow: bool = False):
    """``@kernel``, ``@kernel(parallel=True)`` or ``@kernel(reassociate=True)``: njit with the
    project's options; ``cache=False`` for code generated at run time, never cached on disk;
    ``inline=True`` for a function inlined into its callers before compiling (which then
    compile it with their own options), where the compiler would not inline it but a loop must
    have it inline to vectorise.

    ``borrow=True`` for a kernel that only borrows the arrays it is passed: compiled without
    numba's reference counting, which otherwise costs each call two atomic operations per
    array (on the short rows of a decoder, where the search partitions a few tokens at a
    time, a quarter of its time). numba refuses to compile such a kernel, or anything it
    calls, where it allocates or returns an array it was not passed; ``tests/test_kernels.py``
    checks that every path leaves the reference counts balanced."""

    def compile_(f):
        chosen = options(parallel, cache=cache, reassociate=reassociate, inline=inline, borrow=borrow)
        dispatcher = njit(**chosen)(f)
        KERNELS.append((dispatcher, chosen))
        return dispatcher

    return compile_ if fn is None else compile_(fn)
