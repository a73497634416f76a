"""Dependencies run one way: generator data -> symbolic -> (core) -> divergences -> api -> the rest.

Every import is counted, also those inside functions, which would otherwise hide a circle.
"""

import ast
from pathlib import Path

import pytest

import mdverify

PACKAGE = Path(mdverify.__file__).parent

#: module prefix -> the mdverify modules it may import (by prefix).
ALLOWED = {
    "mdverify.generators": (),
    "mdverify.validate": (),
    "mdverify.symbolic": ("mdverify.generators", "mdverify.symbolic", "mdverify.validate"),
    "mdverify.core": ("mdverify.core",),
    "mdverify.divergences": ("mdverify.generators", "mdverify.symbolic", "mdverify.core", "mdverify.validate",
                             "mdverify.divergences"),
}
#: module prefix -> mdverify modules it must never import.
FORBIDDEN = {
    "mdverify.bench": ("mdverify.report",),
    "mdverify.api": ("mdverify.verification", "mdverify.hf", "mdverify.bench", "mdverify.report"),
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module != "mdverify":  # "from mdverify import x" imports mdverify.x
                names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in names if name == "mdverify" or name.startswith("mdverify.")}


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path


@pytest.mark.parametrize("module, path", list(_modules()), ids=lambda x: str(x) if isinstance(x, str) else "")
def test_imports_follow_the_layers(module, path):
    imported = _imports(path)
    for prefix, allowed in ALLOWED.items():
        if module == prefix or module.startswith(prefix + "."):
            stray = {name for name in imported if not any(name == a or name.startswith(a + ".") for a in allowed)}
            assert not stray, f"{module} imports {sorted(stray)}, above its layer"
    for prefix, forbidden in FORBIDDEN.items():
        if module == prefix or module.startswith(prefix + "."):
            assert not {n for n in imported if any(n == f or n.startswith(f + ".") for f in forbidden)}, module
