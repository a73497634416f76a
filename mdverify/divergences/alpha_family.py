"""The Amari alpha family, one kind shared by every member."""

from __future__ import annotations

import re

from mdverify.divergences.registry import Divergence, register_family
from mdverify.generators import ALPHA as EXPRESSION  # the generator, with ``a`` symbolic

KIND = register_family("alpha")
#: The members whose kernels are accurate to 1e-12 relative, and finite up to the float
#: maximum wherever their value is (``tests/test_codegen.py``, at these edges): a in A_RANGE,
#: beyond which a t overflows or t^a cancels, and at least A_GAP[c] from each limit c, where
#: the generator's closed form cancels (its error grows as 1e-16 / |a - c|); kl (a -> 1) and
#: reverse_kl (a -> 0) are the members there.
A_RANGE = (-8.0, 20.0)
A_GAP = {0.0: 0.12, 1.0: 0.1}


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
    try:
        a = float(a)
    except (TypeError, ValueError):
        raise ValueError(f"alpha(a) needs a real number a, got {a!r}") from None
    if not A_RANGE[0] <= a <= A_RANGE[1]:
        raise ValueError(f"alpha(a) needs a in [{A_RANGE[0]:g}, {A_RANGE[1]:g}], got {a!r}: beyond it t^a overflows "
                         "or cancels and the kernels lose accuracy")
    for limit, name in ((0.0, "reverse_kl"), (1.0, "kl")):
        if abs(a - limit) < A_GAP[limit] - 1e-12:  # the slack admits the edges as written (1 - 0.9 < 0.1)
            raise ValueError(f"alpha(a) needs |a - {limit:g}| >= {A_GAP[limit]:g}, got {a!r}: there the generator's "
                             f"closed form cancels; use {name!r}, the family's limit at a = {limit:g}")
    return Divergence(
        name=f"alpha({a!r})" if float(f"{a:g}") != a else f"alpha({a:g})",
        expression=re.sub(r"\ba\b", f"({a!r})", EXPRESSION),
        formula=f"Amari alpha-divergence, a = {a:g}",
        kind=KIND,
        param=a,
    )
