"""The Amari alpha family, one kind shared by every member."""

from __future__ import annotations

import math
import re

from mdverify.divergences.registry import Divergence, register_family

#: The generator with the family parameter ``a`` left symbolic (used by code generation).
EXPRESSION = "(t**a - a*t - (1 - a))/(a*(a - 1))"
KIND = register_family("alpha")


def alpha(a: float) -> Divergence:
    """The Amari alpha-divergence with generator :math:`(t^a - a t - (1 - a)) / (a (a - 1))`.

    ``alpha(2)`` is half of pearson, ``alpha(-1)`` half of neyman and ``alpha(0.5)``
    twice hellinger; the excluded ``a = 1`` and ``a = 0`` are the limits kl and reverse_kl.

    Examples
    --------
    >>> import mdverify as md
    >>> md.alpha(0.3).name
    'alpha(0.3)'
    """
    a = float(a)
    if not math.isfinite(a) or a in (0.0, 1.0):
        raise ValueError(f"alpha(a) needs a finite a not in {{0, 1}}, got {a!r} (use 'kl' or 'reverse_kl' for the limits)")
    return Divergence(
        name=f"alpha({a:g})",
        expression=re.sub(r"\ba\b", f"({a!r})", EXPRESSION),
        formula=f"Amari alpha-divergence, a = {a:g}",
        kind=KIND,
        param=a,
    )
