"""User-defined generators: a safe parser and the tests an f must pass to be admitted.

The text is parsed with Python's ``ast`` and built into sympy node by node; nothing is ever
evaluated as code. Only the variable ``t``, the constants ``pi`` and ``E`` (or ``e``),
numbers, + - * / ** and the functions in ``FUNCTIONS`` are
allowed.

A parsed f is admitted when it passes, in order (each refusal names its test):

1. ``f(1) = 0``: exactly by sympy, else to 1e-40 at 50 digits;
2. ``real and finite``: f is real and finite at every point of the grid below;
3. ``convex``: f'' >= 0 where sympy can decide it for every positive t; otherwise the
   second divided differences of f are >= 0 on a dense log grid of (1e-12, 1e12) plus a
   fine linear grid around 1, at 50 digits (a kink anywhere is convex from both sides);
4. ``limits``: f(0) and f'(inf) exist in [-inf, inf] (sympy's limits);
5. ``stable kernels``: code generation finds a form of each derived function that is
   accurate in float64 (see ``codegen.stable_form``).
"""

from __future__ import annotations

import ast
import json
import math
import sys

import sympy as sp

from mdverify.symbolic.derive import Derivation, derive, t
from mdverify.validate import quoted

FUNCTIONS = {
    "log": sp.log, "ln": sp.log, "exp": sp.exp, "sqrt": sp.sqrt, "Abs": sp.Abs, "abs": sp.Abs,
    "sin": sp.sin, "cos": sp.cos, "tan": sp.tan, "sinh": sp.sinh, "cosh": sp.cosh, "tanh": sp.tanh,
    "atan": sp.atan, "asinh": sp.asinh,
}
CONSTANTS = {"t": t, "pi": sp.pi, "E": sp.E, "e": sp.E}
MAX_LENGTH = 500
MAX_EXPONENT = 64
#: Deepest nesting of operations and calls: exp(exp(exp(...))) costs sympy time exponential in it.
MAX_DEPTH = 12
#: Numbers in the text must lie within this range (or be 0): beyond it the derived quantities
#: leave float64 (1e308 (t-1)**2 has f''(1) = 2e308).
NUMBER_RANGE = (1e-100, 1e100)

_BINARY = {
    ast.Add: lambda x, y: x + y,
    ast.Sub: lambda x, y: x - y,
    ast.Mult: lambda x, y: x * y,
    ast.Div: lambda x, y: x / y,
    ast.Pow: lambda x, y: x**y,
}
#: Convexity grid: log-spaced over (1e-12, 1e12) and linear within 0.1 of t = 1.
_GRID = sorted(set([10.0 ** (k / 50) for k in range(-600, 601)] + [1 + k / 1000 for k in range(-100, 101)]))


def refusal(text: str, test: str, detail: str) -> ValueError:
    return ValueError(f"divergence {quoted(text)} refused by the test '{test}': {detail}")


def parse_user(text: str) -> sp.Expr:
    """The sympy expression of generator text in ``t``; ValueError names what is not allowed."""
    if len(text) > MAX_LENGTH:
        raise refusal(text, "parse", f"longer than {MAX_LENGTH} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as err:
        raise refusal(text, "parse", f"not an expression ({err.msg})") from None
    depth = _depth(tree.body)
    if depth > MAX_DEPTH:
        raise refusal(text, "parse", f"nested {depth} deep; at most {MAX_DEPTH} levels of operations and calls")
    expr = _build(tree.body, text)
    if not expr.has(t):
        raise refusal(text, "parse", "the expression does not depend on t")
    return expr


def _depth(node: ast.AST) -> int:
    children = [child for child in ast.iter_child_nodes(node) if isinstance(child, ast.expr)]
    return 1 + max((_depth(child) for child in children), default=0)


def _build(node: ast.AST, text: str) -> sp.Expr:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        low, high = NUMBER_RANGE
        if node.value != 0 and not low <= abs(node.value) <= high:  # also inf, which 1e999 parses to
            raise refusal(text, "parse", f"the number {node.value!r} is outside [{low:g}, {high:g}] (or 0)")
        return sp.Integer(node.value) if isinstance(node.value, int) else sp.Rational(repr(node.value))
    if isinstance(node, ast.Name):
        if node.id not in CONSTANTS:
            raise refusal(text, "parse", f"unknown name {node.id!r}; allowed: t, pi, E and the functions {', '.join(FUNCTIONS)}")
        return CONSTANTS[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = _build(node.operand, text)
        return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _build(node.left, text), _build(node.right, text)
        if isinstance(node.op, ast.Pow) and right.is_number and abs(float(right)) > MAX_EXPONENT:
            raise refusal(text, "parse", f"exponent {right} is beyond +-{MAX_EXPONENT}")
        return _BINARY[type(node.op)](left, right)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitXor):
        raise refusal(text, "parse", "'^' is not a power here (it binds looser than + and -); write **")
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        if node.func.id not in FUNCTIONS:
            raise refusal(text, "parse", f"unknown function {node.func.id!r}; allowed: {', '.join(FUNCTIONS)}")
        args = [_build(arg, text) for arg in node.args]
        try:
            return FUNCTIONS[node.func.id](*args)
        except (TypeError, ValueError):
            raise refusal(text, "parse", f"{node.func.id} cannot take {len(args)} argument(s)") from None
    raise refusal(text, "parse", f"{ast.unparse(node)!r} is not allowed (numbers, t, + - * / ** and functions only)")


def _values(f: sp.Expr, points) -> list:
    import mpmath

    fn = sp.lambdify(t, f, modules="mpmath")
    with mpmath.workdps(50):
        return [fn(mpmath.mpf(x)) for x in points]


def admit(text: str) -> Derivation:
    """Parse ``text`` and return its derivation, or raise the ValueError of the first failed test."""
    import mpmath

    f = parse_user(text)
    at_one = sp.simplify(f.subs(t, 1))
    if at_one != 0:
        with mpmath.workdps(50):
            value = complex(sp.N(at_one, 50))
        if not abs(value) < 1e-40:
            raise refusal(text, "f(1) = 0", f"f(1) = {sp.sstr(at_one)}; subtract it to make one")
    values = _values(f, _GRID)
    for x, y in zip(_GRID, values):
        if not (isinstance(y, mpmath.mpf) and mpmath.isfinite(y)):
            raise refusal(text, "real and finite", f"f({x:.6g}) = {y}")
    if not sp.diff(f, t, 2).is_nonnegative:
        with mpmath.workdps(50):
            xs = [mpmath.mpf(x) for x in _GRID]
            for i in range(1, len(xs) - 1):
                left = (values[i] - values[i - 1]) / (xs[i] - xs[i - 1])
                right = (values[i + 1] - values[i]) / (xs[i + 1] - xs[i])
                if right - left < -mpmath.mpf(10) ** -30 * (1 + abs(left) + abs(right)):
                    raise refusal(text, "convex", f"f'' < 0 near t = {_GRID[i]:.6g}: the slope of f falls "
                                                    f"from {float(left):.9g} to {float(right):.9g} there")
    try:
        derived = derive(f)
    except (NotImplementedError, ValueError, TypeError) as err:
        raise refusal(text, "limits", f"sympy could not derive the limits ({err})") from None
    for label, value in (("f(0)", derived.f_at_zero), ("f'(inf)", derived.f_prime_at_inf), ("f'(1)", derived.f_prime_at_one)):
        number = _extended_real(value)
        if number is None or (label == "f'(1)" and not math.isfinite(number)):
            raise refusal(text, "limits", f"{label} = {sp.sstr(value)} is not a number in [-inf, inf]")
    return derived


def _extended_real(value: sp.Expr) -> float | None:
    if value in (sp.oo, -sp.oo):
        return float(value)
    if not value.is_number or value.has(sp.AccumBounds, sp.nan, sp.zoo):
        return None
    number = complex(sp.N(value))
    return number.real if number.imag == 0 and math.isfinite(number.real) else None


def _main() -> int:
    """Admit the generator text read from stdin; print its expression and generated modules
    (numba and torch), or its refusal, as one JSON object (``mdverify.divergences.custom`` runs this in a child
    process, which it stops after a deadline)."""
    from mdverify.symbolic.codegen import generator_sources

    text = sys.stdin.read()
    try:
        expression = sp.sstr(admit(text).f)
        try:
            source, torch_source = generator_sources(expression)
        except Exception as err:  # any failure to find accurate float64 forms refuses f
            raise refusal(text, "stable kernels", str(err)[:300]) from None
        answer = {"expression": expression, "source": source, "torch_source": torch_source}
    except ValueError as err:
        answer = {"refused": str(err)}
    except Exception as err:  # sympy's own failures on odd input
        answer = {"refused": str(refusal(text, "admission", f"{type(err).__name__}: {str(err)[:200]}"))}
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
