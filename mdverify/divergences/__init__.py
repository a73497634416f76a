"""Divergence registry: ``divergence(name)`` is the single front door."""

from mdverify.divergences import standard  # noqa: F401  (registers the fixed entries)
from mdverify.divergences.alpha_family import alpha
from mdverify.divergences.registry import Divergence, lookup, names


def divergence(spec) -> Divergence:
    """Return the registry entry for a name, or pass a :class:`Divergence` through.

    Raises
    ------
    ValueError
        For an unknown name; the message lists the valid ones.
    """
    if isinstance(spec, Divergence):
        return spec
    if not isinstance(spec, str):
        raise ValueError(f"divergence must be a name or md.alpha(a), got {type(spec).__name__}")
    return lookup(spec)


__all__ = ["Divergence", "alpha", "divergence", "names"]
