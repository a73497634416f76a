"""mdverify: mentored decoding, the provably optimal form of lossy speculative decoding.

>>> import mdverify as md
>>> res = md.mentor([0.7, 0.2, 0.1], [0.2, 0.5, 0.3], eps=0.05, divergence="kl")
>>> bool(res.acceptance > 0.5)
True
"""

from importlib import import_module

__version__ = "0.1.0"

# Attributes load on first use, so that importing a light submodule (the registry, the
# code generator) never compiles or loads the numba core.
_EXPORTS = {
    "Divergence": "mdverify.divergences",
    "alpha": "mdverify.divergences",
    "divergence": "mdverify.divergences",
    "names": "mdverify.divergences",
    "Frontier": "mdverify.api",
    "MentorResult": "mdverify.api",
    "RatioIndex": "mdverify.api",
    "frontier": "mdverify.api",
    "mentor": "mdverify.api",
    "verify": "mdverify.verification",
    "Allocation": "mdverify.prices",
    "ChainPlan": "mdverify.prices",
    "allocate": "mdverify.prices",
    "plan_chain": "mdverify.prices",
    "Certificate": "mdverify.rigorous.certify",
    "certify": "mdverify.rigorous.certify",
}

#: Subpackages reachable as attributes (``md.rules``, ``md.theory``) without an import.
_SUBPACKAGES = ("rules", "theory")

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    if name in _SUBPACKAGES:
        return import_module(f"mdverify.{name}")
    raise AttributeError(f"module 'mdverify' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_EXPORTS) + list(_SUBPACKAGES))
