"""Derive, with sympy, every quantity the core needs from a generator f(t).

The core works with the *normalised* generator

.. math:: \\tilde f(t) = f(t) - f'(1) (t - 1),

which gives the same divergence on the simplex (the added term sums to zero) but is
non-negative, so sums of per-token terms never cancel. Limits are taken on both ends of
(0, inf); the alpha family's limits depend on the sign regime of its parameter and are
returned as a ``Piecewise`` in ``a``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import sympy as sp

#: The generator variable, positive as every ratio r/p with p > 0 is.
t = sp.Symbol("t", positive=True)
#: The alpha family parameter.
a = sp.Symbol("a", real=True)
#: The value of f', the variable of its inverse.
y = sp.Symbol("y", real=True)
#: The reciprocal ratio 1/t, the variable of the conjugate generator (used for t > 1).
u = sp.Symbol("u", positive=True)
#: The per-segment equation of SPEC C5: the mass ``delta`` moved inside a segment, the budget
#: ``e`` left for the clipped tokens, their masses, and the clip levels at the segment start
#: as distances from 1, a0 = 1 - da and b0 = 1 + db (exact in float64, and free of the
#: cancellation the levels themselves would bring into a closed form).
delta = sp.Symbol("delta", real=True)
e, p_low, p_high = sp.symbols("e p_low p_high", positive=True)
da, db = sp.symbols("da db", nonnegative=True)


def parse_generator(text: str) -> sp.Expr:
    """Parse generator text in ``t`` (and the family parameter ``a``) into sympy."""
    return sp.sympify(text, locals={"t": t, "a": a})


@dataclass(frozen=True)
class Derivation:
    """Everything derived from one generator, as sympy expressions."""

    f: sp.Expr
    f_prime: sp.Expr
    f_prime_at_one: sp.Expr  # f'(1); the subgradient 0 for tv, whose f is not differentiable there
    f_tilde: sp.Expr  # f - f'(1)(t - 1)
    f_tilde_prime: sp.Expr
    f_tilde_at_zero: sp.Expr  # lim_{t -> 0+} f~(t), may be oo
    f_tilde_prime_at_zero: sp.Expr  # lim_{t -> 0+} f~'(t), may be -oo
    f_tilde_prime_at_inf: sp.Expr  # lim_{t -> oo} f~(t)/t, may be oo
    f_second_at_one: sp.Expr | None  # f''(1), None where f is not twice differentiable at 1
    f_conjugate: sp.Expr  # t f(1/t), the generator of the reversed divergence D_f(p || r)
    f_tilde_star: sp.Expr  # u f~(1/u): f~(t) = t f~*(1/t), evaluated for t > 1 without overflow
    f_tilde_prime_star: sp.Expr  # f~'(t) = f~*(u) - u f~*'(u) at u = 1/t
    segment: sp.Expr  # p_low f~(1 - da - delta/p_low) + p_high f~(1 + db + delta/p_high): D less the unclipped terms
    segment_slope: sp.Expr  # dD/d delta = f~'(b) - f~'(a)
    segment_curvature: sp.Expr  # d2D/d delta2 = f~''(a)/p_low + f~''(b)/p_high
    segment_roots: tuple | None  # closed-form solutions of segment = e, where sympy finds them

    @cached_property
    def f_prime_inverse(self) -> sp.Expr | None:
        """(f')^{-1}(y) in the symbol ``y``, where sympy solves f'(t) = y; None otherwise (tv).

        Of several solutions the one that returns t at t = 1/2 and t = 2 is kept (the others
        are the negative roots of a square, say), checked at a = 3/10 and 5/2 for the family.
        """
        if self.f.has(sp.Abs):
            return None
        try:
            solutions = sp.solve(sp.Eq(self.f_prime, y), t)
        except NotImplementedError:
            return None
        params = (sp.Rational(3, 10), sp.Rational(5, 2)) if self.f.has(a) else (0,)

        def inverts(solution, x, value) -> bool:
            back = solution.subs({a: value, y: self.f_prime.subs({a: value, t: x})})
            return abs(complex(sp.N(back)) - float(x)) < 1e-12

        for solution in solutions:
            if all(inverts(solution, x, value) for x in (sp.Rational(1, 2), sp.Integer(2)) for value in params):
                return solution
        return None

    @property
    def f_at_zero(self) -> sp.Expr:
        return sp.simplify(self.f_tilde_at_zero - self.f_prime_at_one)

    @property
    def f_prime_at_inf(self) -> sp.Expr:
        return sp.simplify(self.f_tilde_prime_at_inf + self.f_prime_at_one)


def _limits(f_tilde: sp.Expr, f_tilde_prime: sp.Expr) -> tuple[sp.Expr, sp.Expr, sp.Expr]:
    return (
        sp.limit(f_tilde, t, 0, "+"),
        sp.limit(f_tilde_prime, t, 0, "+"),
        sp.limit(f_tilde / t, t, sp.oo),
    )


# The alpha family's limits change with the regime of a; each regime is written with a
# positive helper s so that sympy can decide the signs of t**a at 0 and at oo.
_s = sp.Symbol("s", positive=True)
_ALPHA_REGIMES = (
    (a < 0, -_s, -a),
    (a < 1, 1 / (1 + _s), 1 / a - 1),
    (True, 1 + _s, a - 1),
)


def _family_limits(f_tilde: sp.Expr, f_tilde_prime: sp.Expr) -> tuple[sp.Expr, sp.Expr, sp.Expr]:
    pieces: list[list[tuple[sp.Expr, object]]] = [[], [], []]
    for condition, a_of_s, s_of_a in _ALPHA_REGIMES:
        values = _limits(f_tilde.subs(a, a_of_s), f_tilde_prime.subs(a, a_of_s))
        for piece, value in zip(pieces, values):
            piece.append((sp.simplify(value.subs(_s, s_of_a)), condition))
    return tuple(sp.Piecewise(*piece) for piece in pieces)


def _tidy(expr: sp.Expr, var: sp.Symbol) -> sp.Expr:
    """Cancel rational functions; keep sympy's own form otherwise (simplify is erratic on logs)."""
    return sp.cancel(expr) if expr.is_rational_function(var) else expr


def _segment(f_tilde: sp.Expr) -> tuple[sp.Expr, sp.Expr, sp.Expr, tuple | None]:
    """The segment equation of SPEC C5 with a < 1 < b, its derivatives, and its closed form.

    A closed form is kept where the equation is a polynomial of degree 1 or 2 in delta (tv,
    pearson): every real root is kept, and the solver uses the largest, the only one where
    the increasing D crosses the budget from below.
    """
    below, above = sp.refine(f_tilde, sp.Q.lt(t, 1)), sp.refine(f_tilde, sp.Q.gt(t, 1))
    value = p_low * below.subs(t, 1 - da - delta / p_low) + p_high * above.subs(t, 1 + db + delta / p_high)
    slope = sp.diff(value, delta)
    roots = None
    equation = sp.expand(value - e)
    if equation.is_polynomial(delta) and 1 <= sp.degree(equation, delta) <= 2:
        roots = tuple(sp.factor(root) for root in sp.solve(equation, delta))
    return value, slope, sp.diff(slope, delta), roots


def derive(f: sp.Expr) -> Derivation:
    """Derive the quantities of SPEC section 2 from the generator ``f``."""
    f_prime = sp.diff(f, t)
    f_prime_at_one = f_prime.subs(t, 1)
    if f_prime_at_one.has(sp.nan, sp.zoo):
        f_prime_at_one = sp.limit(f_prime, t, 1)
    f_prime_at_one = sp.simplify(f_prime_at_one)
    f_tilde = f - f_prime_at_one * (t - 1) if f_prime_at_one != 0 else f
    f_tilde_prime = _tidy(sp.diff(f_tilde, t), t)
    limits = _family_limits if f.has(a) else _limits
    at_zero, prime_at_zero, prime_at_inf = limits(f_tilde, f_tilde_prime)
    second = sp.diff(f, t, 2)
    if second.has(sp.DiracDelta, sp.sign, sp.Abs) or f.has(sp.Abs):
        second_at_one = None
    else:
        second_at_one = sp.simplify(second.subs(t, 1))
    f_tilde_star = _tidy(u * f_tilde.subs(t, 1 / u), u)
    segment, segment_slope, segment_curvature, segment_roots = _segment(f_tilde)
    return Derivation(
        f=f,
        f_prime=f_prime,
        f_prime_at_one=f_prime_at_one,
        f_tilde=f_tilde,
        f_tilde_prime=f_tilde_prime,
        f_tilde_at_zero=at_zero,
        f_tilde_prime_at_zero=prime_at_zero,
        f_tilde_prime_at_inf=prime_at_inf,
        f_second_at_one=second_at_one,
        f_conjugate=_tidy(t * f.subs(t, 1 / t), t),
        f_tilde_star=f_tilde_star,
        f_tilde_prime_star=_tidy(f_tilde_star - u * sp.diff(f_tilde_star, u), u),
        segment=segment,
        segment_slope=segment_slope,
        segment_curvature=segment_curvature,
        segment_roots=segment_roots,
    )
