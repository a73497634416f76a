"""The kernel stack compiled again against another generated module (user-defined f).

Registered divergences share ``core._fgen``, whose functions branch on ``kind``. A
user-defined generator gets a module of its own with the same functions (written by
``symbolic.codegen.generator_source``); every kernel that reaches those functions, directly
or through other kernels, is compiled once more from its own code with the names rebound.
Nothing is copied by hand, so the user's f runs exactly the algorithms the registered ones
run.

The rebound kernels are cached on disk beside the originals, as the originals are (the
stack takes a minute or two to compile). numba keys a cache file on the source file and the
qualified name, and an entry on the bytecode, all of which a clone shares with its original;
so each clone's qualified name carries the generated module's name, which is the hash of its
text. The whole package's caches are dropped when any kernel's source or this file changes
(``jit.drop_stale_caches``).
"""

from __future__ import annotations

import sys
import types
from typing import NamedTuple

from numba import njit

from mdverify.core import _fgen, jit
from mdverify.core.mentor import divergence_rows, finish, frontier_trace, mentor_rows, price_rows, trace_slopes
from mdverify.core.reduce import clipped_divergences, price_reduced
from mdverify.core.verify import verify_rows, verify_rows_priced
from mdverify.core.walk import walk, walk_to_price

#: The functions a generated module provides, each taking (kind, a, ...).
GENERATED = (
    "f_prime_at_one", "f_second_at_one", "f_tilde_at_zero", "f_tilde_prime_at_zero",
    "f_tilde_prime_at_inf", "f_tilde", "f_tilde_prime", "f_tilde_star", "segment_root", "weighted_f_tilde_terms",
)


class Kernels(NamedTuple):
    """The entry points the Python API calls, for one generated module."""

    mentor_rows: object
    price_rows: object
    divergence_rows: object
    frontier_trace: object
    trace_slopes: object
    walk: object
    walk_to_price: object
    finish: object
    verify_rows: object
    verify_rows_priced: object
    price_reduced: object
    clipped_divergences: object
    f_tilde_at_zero: object
    f_prime_at_one: object
    f_tilde_prime_at_inf: object
    f_second_at_one: object


def _referenced(dispatcher) -> list[object]:
    fn = dispatcher.py_func
    return [fn.__globals__[name] for name in fn.__code__.co_names if name in fn.__globals__]


def rebind(module) -> Kernels:
    """The API's kernels compiled against ``module``'s generated functions (lazily, per signature)."""
    swap = {id(getattr(_fgen, name)): getattr(module, name) for name in GENERATED}
    stack = [(d, chosen) for d, chosen in jit.KERNELS if "KINDS" not in d.py_func.__globals__]
    # Every kernel that reaches a generated function, through any chain of calls (a kernel may
    # call one defined after it, so iterate to the fixed point before compiling anything).
    affected = set(swap)
    while True:
        more = {id(d) for d, _ in stack if any(id(g) in affected for g in _referenced(d))} - affected
        if not more:
            break
        affected |= more
    scopes: dict[str, types.ModuleType] = {}
    for dispatcher, chosen in stack:
        if id(dispatcher) in affected:
            fn = dispatcher.py_func
            # A module of its own for each module of clones: numba links compiled functions by
            # symbol, and a clone that shared the original's module and qualified name would be
            # called in its place; and a clone loaded from numba's cache finds its globals by
            # importing its module's name.
            name = f"{fn.__module__}.{module.__name__}"
            if name not in scopes:
                scopes[name] = sys.modules[name] = types.ModuleType(name)
                scopes[name].__dict__.update(fn.__globals__, __name__=name)
            clone = types.FunctionType(fn.__code__, scopes[name].__dict__, fn.__name__, fn.__defaults__, fn.__closure__)
            clone.__qualname__ = f"{fn.__qualname__}__{module.__name__}"  # names its file in numba's cache
            swap[id(dispatcher)] = njit(**chosen)(clone)
    for scope in scopes.values():  # numba reads the globals when it first compiles, after this
        for name, value in vars(scope).items():
            if id(value) in swap:
                setattr(scope, name, swap[id(value)])
    return Kernels(*(swap.get(id(k), k) for k in STANDARD))


#: The kernels of the registered divergences (``core._fgen``).
STANDARD = Kernels(
    mentor_rows, price_rows, divergence_rows, frontier_trace, trace_slopes, walk, walk_to_price, finish, verify_rows,
    verify_rows_priced, price_reduced, clipped_divergences,
    _fgen.f_tilde_at_zero, _fgen.f_prime_at_one, _fgen.f_tilde_prime_at_inf, _fgen.f_second_at_one,
)
