"""A divergence's generator in ball arithmetic (arb, from python-flint), printed from sympy.

The same sympy expressions that the numba kernels are generated from are printed here to
Python code over ``flint.arb``: integers and rationals become exact balls, floats the exact
ball of their double, and log, exp, sqrt, Abs, sign and LambertW the ball library's
functions, whose results are rigorous enclosures. So f(t) and f'(t) evaluated on a ball
enclose the exact values of the generator for the problem as the float arrays define it.
An alpha member keeps ``a`` symbolic and receives the exact ball of its double parameter.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

#: Working precision in bits: sums of 10^6 terms keep radii far below 1e-20.
PRECISION = 128


def flint():
    """python-flint, or a ValueError that says how to install it."""
    try:
        import flint
    except ImportError:
        raise ValueError("rigorous certificates need python-flint (ball arithmetic): pip install 'mdverify[verify]' "
                         "or pip install python-flint") from None
    return flint


@contextmanager
def precision(bits: int = PRECISION):
    """Run the block at ``bits`` of working precision, restoring the caller's afterwards."""
    ctx = flint().ctx
    saved = ctx.prec
    ctx.prec = bits
    try:
        yield
    finally:
        ctx.prec = saved


def _sign(x):
    """sign of a ball: exact where its sign is certain, the ball [-1, 1] otherwise."""
    arb = flint().arb
    if x > 0:
        return arb(1)
    if x < 0:
        return arb(-1)
    if x == 0:
        return arb(0)
    return arb(0, 1)


def _namespace() -> dict:
    arb = flint().arb
    return {"arb": arb, "log": lambda x: arb(x).log(), "exp": lambda x: arb(x).exp(),
            "sqrt": lambda x: arb(x).sqrt(), "Abs": lambda x: abs(arb(x)), "sign": _sign,
            "LambertW": lambda x: arb(x).lambertw()}


def _printer():
    from sympy.printing.pycode import PythonCodePrinter

    class BallPrinter(PythonCodePrinter):
        """Python code over flint.arb: every number an exact ball, every function the ball library's."""

        def _print_Integer(self, expr):
            return f"arb({int(expr)})"

        def _print_Rational(self, expr):
            return f"(arb({int(expr.p)}) / arb({int(expr.q)}))"

        def _print_Float(self, expr):
            return f"arb({float(expr)!r})"

        def _print_Half(self, expr):
            return "(arb(1) / arb(2))"

        def _print_Exp1(self, expr):
            return "arb(1).exp()"

        def _print_Pow(self, expr, rational=False):
            import sympy as sp

            base = self._print(expr.base)
            if expr.exp == sp.S.Half:
                return f"sqrt({base})"
            return f"(({base}) ** ({self._print(expr.exp)}))"

        def _print_Function(self, expr):
            name = type(expr).__name__
            if name not in ("log", "exp", "Abs", "sign", "LambertW"):
                raise ValueError(f"the ball library has no function {name!r}")
            return f"{name}({', '.join(self._print(arg) for arg in expr.args)})"

        _print_log = _print_exp = _print_Abs = _print_sign = _print_LambertW = _print_Function

    return BallPrinter()


def to_ball_function(expr, variables) -> Callable:
    """A Python function of balls computing ``expr`` (a sympy expression in ``variables``)."""
    import re

    source = _printer().doprint(expr)
    foreign = re.search(r"\b(?:math|mpmath|numpy|scipy)\.(\w+)", source)
    if foreign:  # printed by sympy's own table of known functions, not by the ball printer
        raise ValueError(f"the ball library has no function {foreign.group(1)!r}")
    names = ", ".join(str(v) for v in variables)
    namespace = _namespace()
    exec(f"def _ball({names}):\n    return {source}\n", namespace)  # noqa: S102 - printed from sympy, not user text
    return namespace["_ball"]


@dataclass(frozen=True)
class BallGenerator:
    """f and f' of one divergence over balls, and its limits as balls (or None where infinite)."""

    f: Callable  # ball t > 0 -> ball enclosing f(t)
    f_prime: Callable  # ball t > 0 -> ball enclosing f'(t) (a subgradient's range at a kink)
    f_at_zero: object  # ball or None (= +inf)
    f_prime_at_inf: object  # ball or None (= +inf)
    f_prime_numeric: Callable  # numpy version of f', for guesses only


@lru_cache(maxsize=64)
def _generator(expression: str, family: bool):
    import sympy as sp

    from mdverify.symbolic.derive import a, derive, parse_generator, t

    derived = derive(parse_generator(expression))
    variables = (t, a) if family else (t,)
    f = to_ball_function(derived.f, variables)
    f_prime = to_ball_function(derived.f_prime, variables)
    numeric = sp.lambdify(variables, derived.f_prime, "numpy")
    return f, f_prime, derived.f_at_zero, derived.f_prime_at_inf, numeric, variables


def ball_generator(entry) -> BallGenerator:
    """The ball view of a registry entry, alpha member or user-defined divergence."""
    import sympy as sp

    from mdverify.divergences.alpha_family import KIND as ALPHA_KIND
    from mdverify.generators import ALPHA

    arb = flint().arb
    family = entry.kind == ALPHA_KIND
    f, f_prime, at_zero, at_inf, numeric, variables = _generator(ALPHA if family else entry.expression, family)
    if family:
        param = arb(float(entry.param))
        a_symbol = variables[1]
        limits = [v.subs(a_symbol, sp.Rational(float(entry.param))) if v.has(a_symbol) else v for v in (at_zero, at_inf)]
        # The family's limits depend on a only through its sign and region; evaluate at the exact double.
        at_zero, at_inf = limits
        return BallGenerator(f=lambda x: f(x, param), f_prime=lambda x: f_prime(x, param),
                             f_at_zero=_limit_ball(at_zero), f_prime_at_inf=_limit_ball(at_inf),
                             f_prime_numeric=lambda x: numeric(x, float(entry.param)))
    return BallGenerator(f=f, f_prime=f_prime, f_at_zero=_limit_ball(at_zero), f_prime_at_inf=_limit_ball(at_inf),
                         f_prime_numeric=numeric)


def _limit_ball(value):
    """A sympy limit as a ball, None for +oo; -oo is refused (f(0) and f'(inf) are never -inf)."""
    import sympy as sp

    if value == sp.oo:
        return None
    if value == -sp.oo or not value.is_finite:
        raise ValueError(f"unexpected limit {value} of a generator")
    return to_ball_function(sp.sympify(value), ())()


def upper(x) -> float:
    """The smallest double >= every point of the ball (rounded outward)."""
    import math

    value = float(x.upper())
    return value if flint().arb(value) >= x.upper() else math.nextafter(value, math.inf)


def lower(x) -> float:
    """The largest double <= every point of the ball (rounded outward)."""
    import math

    value = float(x.lower())
    return value if flint().arb(value) <= x.lower() else math.nextafter(value, -math.inf)
