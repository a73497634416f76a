"""Divergence registry: ``divergence(name)`` is the single front door."""

import re

from mdverify.divergences import standard  # noqa: F401  (registers the fixed entries)
from mdverify.divergences.alpha_family import alpha
from mdverify.divergences.registry import Divergence, lookup, names


_ALPHA_NAME = re.compile(r"\s*alpha\(\s*([^()]*?)\s*\)\s*")


def divergence(spec) -> Divergence:
    """The registry entry for a name, a user-defined generator, or a :class:`Divergence` as is.

    ``"alpha(0.3)"`` names the member ``md.alpha(0.3)``. Any other string that is not a
    registered name is read as a generator f(t) in ``t``, such as
    ``"(t-1)*log(t)"``: it must satisfy f(1) = 0 and be convex on (0, inf) (see
    ``mdverify.symbolic.user``); sympy derives its kernels on first use, once per expression.

    Raises
    ------
    ValueError
        For an unknown name (the message lists the valid ones), or a generator that fails a
        test (the message names the test).

    Examples
    --------
    >>> import mdverify as md
    >>> md.divergence("(t-1)*log(t)").f_prime_at_inf
    inf
    """
    if isinstance(spec, Divergence):
        return spec
    if not isinstance(spec, str):
        raise ValueError(f"divergence must be a name, md.alpha(a) or an expression in t, got {type(spec).__name__}")
    if spec in names() or spec.strip().isidentifier():
        return lookup(spec)
    member = _ALPHA_NAME.fullmatch(spec)
    if member:  # a family member by the name it prints, "alpha(0.3)"
        return alpha(member.group(1))
    from mdverify.divergences.custom import user_divergence

    return user_divergence(spec)


__all__ = ["Divergence", "alpha", "divergence", "names"]
