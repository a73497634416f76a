"""The divergence registry: one front door from a name to an f-divergence.

An entry is a generator f(t), written as sympy text in the variable ``t``, plus the
integer ``kind`` under which the generated numba kernels (``mdverify.core._fgen``)
evaluate it. Families with a parameter (the alpha family) share one kind and carry
their parameter in ``param``. Nothing here imports sympy: the symbolic view of an
entry is built lazily, for verification and code generation only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mdverify.validate import as_pair, check_ratios, quoted

_REGISTRY: dict[str, "Divergence"] = {}
_FAMILIES: list[str] = []


@dataclass(frozen=True)
class Divergence:
    """An f-divergence :math:`D_f(r \\| p) = \\sum_i p_i f(r_i / p_i)`.

    Attributes
    ----------
    name : str
        Registry name (``"kl"``) or family member name (``"alpha(0.3)"``).
    expression : str
        The generator f(t) as sympy text, with the family parameter substituted.
    formula : str
        The divergence written out for people.
    kind : int
        Which generated kernel evaluates f; an implementation detail of the core.
    param : float
        Family parameter (the alpha of the alpha family), else 0.
    generated : str or None
        For a user-defined generator, the path of its generated kernel module.
    torch_generated : str or None
        For a user-defined generator, the path of its generated torch module.
    """

    name: str
    expression: str
    formula: str
    kind: int
    param: float = 0.0
    generated: str | None = None
    torch_generated: str | None = None
    _symbolic: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def f(self):
        """The generator as a sympy expression in the positive symbol ``t``."""
        from mdverify.symbolic.derive import parse_generator

        if "f" not in self._symbolic:
            self._symbolic["f"] = parse_generator(self.expression)
        return self._symbolic["f"]

    @property
    def derived(self):
        """Every quantity sympy derives from f (see ``mdverify.symbolic.derive``)."""
        from mdverify.symbolic.derive import derive

        if "derived" not in self._symbolic:
            self._symbolic["derived"] = derive(self.f)
        return self._symbolic["derived"]

    @property
    def kernels(self):
        """The numba kernels that evaluate this divergence (``mdverify.core.rebind.Kernels``)."""
        if self.generated is None:
            from mdverify.core.rebind import STANDARD

            return STANDARD
        from mdverify.core.generated import kernels

        return kernels(self.generated)

    # Numeric limits, from the generated kernels: no sympy at run time.
    @property
    def f_at_zero(self) -> float:
        """:math:`f(0) = \\lim_{t \\to 0^+} f(t)`, possibly inf."""
        k = self.kernels
        return float(k.f_tilde_at_zero(self.kind, self.param) - k.f_prime_at_one(self.kind, self.param))

    @property
    def f_prime_at_inf(self) -> float:
        """:math:`f'(\\infty) = \\lim_{t \\to \\infty} f(t) / t`, possibly inf."""
        k = self.kernels
        return float(k.f_tilde_prime_at_inf(self.kind, self.param) + k.f_prime_at_one(self.kind, self.param))

    @property
    def f_second_at_one(self) -> float:
        """:math:`f''(1)`; nan where f is not twice differentiable at 1 (tv)."""
        return float(self.kernels.f_second_at_one(self.kind, self.param))

    def value(self, r, p) -> np.ndarray:
        """:math:`D_f(r \\| p)` over the last axis.

        Parameters
        ----------
        r, p : array_like, shape (..., n)
            Distributions (rows summing to 1). Terms with :math:`p_i = 0 < r_i` are worth
            :math:`r_i f'(\\infty)`; terms with :math:`p_i = r_i = 0` are worth 0.

        Returns
        -------
        ndarray, shape (...)
            May be inf; never nan.

        Examples
        --------
        >>> import mdverify as md
        >>> float(md.divergence("tv").value([0.5, 0.5], [0.25, 0.75]))
        0.25
        """
        r, p = as_pair(r, p, labels=("r", "p"))
        check_ratios(p, r, labels=("p", "r"))
        n = p.shape[-1]
        out = np.empty(int(np.prod(p.shape[:-1], dtype=np.int64)), np.float64)
        self.kernels.divergence_rows(np.ascontiguousarray(r.reshape(-1, n)), np.ascontiguousarray(p.reshape(-1, n)),
                                     self.kind, self.param, out)
        return out.reshape(p.shape[:-1])[()]  # a scalar for one row


def register(name: str, expression: str, formula: str) -> Divergence:
    """Register a parameter-free generator under ``name``; kinds follow registration order."""
    if name in _REGISTRY:
        raise ValueError(f"divergence {name!r} is already registered")
    entry = Divergence(name=name, expression=expression, formula=formula, kind=len(_FAMILIES))
    _REGISTRY[name] = entry
    _FAMILIES.append(name)
    return entry


def register_family(name: str) -> int:
    """Reserve a kind for a parametric family; its members are built by the family's module."""
    _FAMILIES.append(name)
    return len(_FAMILIES) - 1


def names() -> tuple[str, ...]:
    """The registered names, in kind order."""
    return tuple(_REGISTRY)


def lookup(name: str) -> Divergence:
    try:
        return _REGISTRY[name]
    except KeyError:
        valid = ", ".join(names())
        raise ValueError(
            f"unknown divergence {quoted(name)}; valid names are: {valid}, md.alpha(a), "
            "or a generator expression in t such as '(t-1)*log(t)'"
        ) from None
