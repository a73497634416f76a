"""Generated kernel modules of user-defined generators, loaded safely, and their kernel stacks.

A module is named by a hash of its text (``PREFIX`` + ``digest``) and run from that text
only once the file's hash matches its name; its functions are never cached on disk, so nothing
planted beside the file (bytecode, a numba cache index) is ever loaded. The kernel stack
compiled against it (``core.rebind``) is cached with the package's own kernels, and trusted
as they are.
"""

from __future__ import annotations

import hashlib
import sys
import types
from functools import lru_cache
from pathlib import Path

PREFIX = "mdverify_generator_"
#: The prefix of a user generator's torch module (``mdverify.torch_backend``).
TORCH_PREFIX = "mdverify_torch_generator_"


def digest(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:16]


@lru_cache(maxsize=None)
def load(path: str) -> types.ModuleType:
    """The generated module at ``path``, run from its text once that text's hash matches its name."""
    source = Path(path).read_text()
    name = Path(path).stem
    if name not in (PREFIX + digest(source), TORCH_PREFIX + digest(source)):
        raise PermissionError(f"{path} does not hold the text its name was made from; remove it and try again")
    module = types.ModuleType(name)
    module.__file__ = path
    sys.modules[name] = module  # numba resolves a kernel's globals through its module
    exec(compile(source, path, "exec"), module.__dict__)
    return module


def smoke_test(module) -> None:
    """Compile and call every generated function once (a failure raises numba's own error)."""
    for fn, args in (("f_prime_at_one", ()), ("f_second_at_one", ()), ("f_tilde_at_zero", ()),
                     ("f_tilde_prime_at_zero", ()), ("f_tilde_prime_at_inf", ()), ("f_tilde", (0.5,)),
                     ("f_tilde", (2.0,)), ("f_tilde_prime", (0.5,)), ("f_tilde_prime", (2.0,)),
                     ("f_tilde_star", (0.5,)), ("segment_root", (0.1, 0.5, 0.1, 0.5, 0.1))):
        getattr(module, fn)(0, 0.0, *args)


@lru_cache(maxsize=None)
def kernels(path: str):
    """The kernel stack compiled against the generated module at ``path`` (lazily, per signature)."""
    from mdverify.core.rebind import rebind

    return rebind(load(path))
