"""User-defined generators: ``md.divergence("(t-1)*log(t)")`` and the kernels behind it.

An expression is admitted by ``mdverify.symbolic.user.admit`` (which names the test a refused
f fails), its kernels are generated into a module of their own under the cache directory
(``MDVERIFY_CACHE_DIR``, else ``$XDG_CACHE_HOME/mdverify``, else ``~/.cache/mdverify``),
imported from there, and the kernel stack is compiled against them on first use
(``mdverify.core.rebind``). Everything is kept per expression for the life of the process;
the generated files stay, named by a hash of the text they were generated from, so that
they can be read.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
from functools import lru_cache
from pathlib import Path

from mdverify.divergences.registry import Divergence


def cache_dir() -> Path:
    root = os.environ.get("MDVERIFY_CACHE_DIR") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mdverify"
    path = Path(root) / "generators"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        path = Path(tempfile.gettempdir()) / f"mdverify-generators-{os.getuid()}"
        path.mkdir(exist_ok=True)
    return path


@lru_cache(maxsize=None)
def user_divergence(text: str) -> Divergence:
    """The admitted divergence of generator text ``text`` (ValueError if refused)."""
    import sympy as sp

    from mdverify.symbolic.codegen import generator_source
    from mdverify.symbolic.user import admit, refusal

    derived = admit(text)
    expression = sp.sstr(derived.f)
    try:
        source = generator_source(expression)
    except ValueError as err:
        raise refusal(text, "stable kernels", str(err)) from None
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    path = cache_dir() / f"mdverify_generator_{digest}.py"
    if not path.exists() or path.read_text() != source:
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(source)
        os.replace(partial, path)  # atomic: concurrent processes never import half a file
    entry = Divergence(name=text.strip(), expression=expression, formula=f"user-defined, f(t) = {expression}",
                       kind=0, generated=str(path))
    entry._symbolic["derived"] = derived
    return entry


@lru_cache(maxsize=None)
def kernels(path: str):
    """The kernel stack for the generated module at ``path`` (compiled lazily, per signature)."""
    from mdverify.core.rebind import rebind

    name = Path(path).stem
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return rebind(module)
