"""User-defined generators: ``md.divergence("(t-1)*log(t)")`` and the kernels behind it.

Text from users is untrusted, and sympy can take hours on some of it, so:

- the text is parsed here (``mdverify.symbolic.user.parse_user``: nothing is evaluated, and
  size, depth and numbers are bounded), then admitted and its kernels generated in a child
  process that is stopped after ``DEADLINE`` seconds (``python -m mdverify.symbolic.user``);
- the generated modules (numba kernels, and torch functions for ``mdverify.torch_backend``)
  are written, for people to read, into a private cache folder
  (``MDVERIFY_CACHE_DIR``, else ``$XDG_CACHE_HOME/mdverify``, else ``~/.cache/mdverify``; a
  folder that another user owns or can write is refused), named by a hash of its text;
- the module is run from that text only after the file's hash matches its name, and its own
  functions are never cached on disk, so nothing planted beside it (a bytecode or numba cache
  file) is ever loaded (``mdverify.core.generated``);
- every generated function is compiled and called once before the divergence is admitted.

The kernel stack is then compiled against the module on first use (``mdverify.core.rebind``),
and cached where numba caches the package's own kernels, under names that carry the module's
hash: a minute or two of compiling once, a fraction of a second in later processes.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tempfile
from functools import lru_cache
from pathlib import Path

from mdverify.core.generated import PREFIX, TORCH_PREFIX, digest, load, smoke_test
from mdverify.divergences.registry import Divergence

#: Seconds that admitting one generator and generating its kernels may take.
DEADLINE = 120.0


def cache_dir() -> Path:
    """The folder of generated modules, created private, refused unless private."""
    root = os.environ.get("MDVERIFY_CACHE_DIR") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mdverify"
    path = Path(root) / "generators"
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:
        path = Path(tempfile.gettempdir()) / f"mdverify-generators-{os.getuid()}"
        path.mkdir(mode=0o700, exist_ok=True)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise PermissionError(f"the generator cache {path} must be a folder of this user that no one else can write "
                              f"(it has owner uid {info.st_uid} and mode {stat.filemode(info.st_mode)}); "
                              "set MDVERIFY_CACHE_DIR to such a folder")
    return path


def _admit_in_child(text: str) -> tuple[str, str, str]:
    """(expression, numba module source, torch module source) of an admitted generator, computed
    within DEADLINE seconds."""
    from mdverify.symbolic.user import refusal

    package_root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")])))
    try:
        done = subprocess.run([sys.executable, "-m", "mdverify.symbolic.user"], input=text, capture_output=True,
                              text=True, timeout=DEADLINE, env=env)
    except subprocess.TimeoutExpired:
        raise refusal(text, "time", f"admission and code generation took longer than {DEADLINE:g} s") from None
    try:
        answer = json.loads(done.stdout)
    except json.JSONDecodeError:
        detail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise refusal(text, "admission", f"the admission process failed ({detail})") from None
    if "refused" in answer:
        raise ValueError(answer["refused"])
    return answer["expression"], answer["source"], answer["torch_source"]


@lru_cache(maxsize=None)
def user_divergence(text: str) -> Divergence:
    """The admitted divergence of generator text ``text`` (ValueError if refused)."""
    from mdverify.symbolic.user import parse_user, refusal

    parse_user(text)  # the quick refusals, without a process
    expression, source, torch_source = _admit_in_child(text)
    path = _write(PREFIX, source)
    torch_path = _write(TORCH_PREFIX, torch_source)
    try:
        smoke_test(load(str(path)))
    except Exception as err:  # a generated function numba cannot compile or run: refuse, never crash later
        raise refusal(text, "compile", f"{type(err).__name__}: {str(err).splitlines()[0][:200]}") from None
    return Divergence(name=text.strip(), expression=expression, formula=f"user-defined, f(t) = {expression}",
                      kind=0, generated=str(path), torch_generated=str(torch_path))


def _write(prefix: str, source: str) -> Path:
    """The cache file of a generated module, named by its prefix and the hash of its text."""
    path = cache_dir() / f"{prefix}{digest(source)}.py"
    if not path.exists() or path.read_text() != source:
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(source)
        os.replace(partial, path)  # atomic: concurrent processes never read half a file
    return path
