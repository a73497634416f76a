"""The natural logarithm as arithmetic alone, so that loops calling it vectorise.

numba compiles ``math.log`` to a call of the C library's log, one element at a time: a loop
summing p f~(q/p) over a row spends most of its time there, and no other part of it can be
vectorised around the call. ``log`` below has no call and no branch (its special cases are
selected, not branched to), so the compiler vectorises such loops; it is within 1 ulp of the
correctly rounded logarithm (``tests/test_fastlog.py`` measures it against numpy's).

The method is the classic one of the Sun/FreeBSD libm: with x = 2^k m, m in [sqrt(2)/2,
sqrt(2)), f = m - 1 and s = f / (2 + f), log(m) = log(1 + f) = 2 atanh(s) = f - f^2/2 +
s (f^2/2 + R(s^2)), where R is a minimax polynomial of degree 14 (even) in s, accurate to
2^-58.45 on that interval; k log 2 is added in two parts so that its rounding is exact.

``log_excess`` also returns x - 1 - log x, which near x = 1 is the reduction's own
remainder f^2/2 - s (f^2/2 + R(s^2)), accurate where x - 1 - log(x) computed as written
cancels to nothing: the normalised generators of KL and its kin are that excess up to
terms that do not cancel (``symbolic.codegen.near_one_excess``).

``log_normal`` and ``log_excess_normal`` are the same for positive normal finite x, bit for
bit, without the scaling of subnormals and the selection of special values; the generated
loops of f~ take them, and ``log`` again only where ``normal_or_zero`` says a ratio lay outside.
"""

import numpy as np

from mdverify.core.checks import entry_bits, least_positive_below
from mdverify.core.jit import kernel

# log 2 split so that k * LN2_HI is exact for |k| < 2^11.
LN2_HI = 6.93147180369123816490e-01
LN2_LO = 1.90821492927058770002e-10
# Coefficients of R(z) = z (L1 + z (L2 + ...)), z = s^2: the minimax fit of 2 atanh(s)/s - 2
# over |s| <= 0.1716 (fdlibm's e_log.c).
L1 = 6.666666666666735130e-01
L2 = 3.999999999940941908e-01
L3 = 2.857142874366239149e-01
L4 = 2.222219843214978396e-01
L5 = 1.818357216161805012e-01
L6 = 1.531383769920937332e-01
L7 = 1.479819860511658591e-01
#: The bits of sqrt(2)/2: subtracting them from x's bits puts m in [sqrt(2)/2, sqrt(2)).
_SQRT_HALF_BITS = np.int64(0x3FE6A09E667F3BCD)
_MANTISSA = np.int64(0x000FFFFFFFFFFFFF)
_SMALLEST_NORMAL = 2.0 ** -1022
_SUBNORMAL_SCALE = 2.0 ** 54


@kernel
def _log_parts(x):
    """(log(x), k, remainder) with x = 2^k m, m in [sqrt(2)/2, sqrt(2)) and log(x) = k log 2 +
    (m - 1) - remainder: ``_normal_log_parts`` of x, subnormals scaled to normal numbers, and
    the special values selected."""
    subnormal = x < _SMALLEST_NORMAL
    y = x * (_SUBNORMAL_SCALE if subnormal else 1.0)
    value, k, remainder = _normal_log_parts(y, 54.0 if subnormal else 0.0)
    value = -np.inf if x == 0.0 else value
    value = x if x == np.inf else value
    value = np.nan if not x >= 0.0 else value
    return value, k, remainder


@kernel
def _normal_log_parts(x, scale):
    """``_log_parts`` of x 2^-scale for a positive normal finite x; for any other x, finite
    values of no meaning. A kernel of its own, never compiled into a caller with the
    caller's options: its arithmetic carries its rounding and must keep its order."""
    bits = np.float64(x).view(np.int64) - _SQRT_HALF_BITS
    k = np.float64(bits >> np.int64(52)) - scale
    m = np.int64((bits & _MANTISSA) + _SQRT_HALF_BITS).view(np.float64)
    f = m - 1.0
    s = f / (2.0 + f)
    z = s * s
    w = z * z
    r = w * (L2 + w * (L4 + w * L6)) + z * (L1 + w * (L3 + w * (L5 + w * L7)))
    half_f2 = 0.5 * f * f
    value = k * LN2_HI - ((half_f2 - (s * (half_f2 + r) + k * LN2_LO)) - f)
    return value, k, half_f2 - s * (half_f2 + r)


@kernel
def log(x):
    """log(x) for float64 x, within 1 ulp; -inf at 0, inf at inf, nan below 0 or at nan."""
    return _log_parts(x)[0]


@kernel
def log_excess(x):
    """(log(x), x - 1 - log(x)) for float64 x: the excess within a few ulps for x in
    [sqrt(2)/2, sqrt(2)), where it is the reduction's remainder (x = m, f = x - 1 exactly),
    and as written elsewhere (inf at 0 and at inf, nan where log is)."""
    value, k, remainder = _log_parts(x)
    value, excess = _excess(x, value, k, remainder)
    return value, (x if x == np.inf else excess)


@kernel
def log_normal(x):
    """``log`` of a positive normal finite x, bit for bit, without the cost of the others (a
    quarter of its time); finite values of no meaning elsewhere (``normal_or_zero``)."""
    return _normal_log_parts(x, 0.0)[0]


@kernel
def log_excess_normal(x):
    """``log_excess`` of a positive normal finite x, bit for bit; finite values of no meaning
    elsewhere."""
    value, k, remainder = _normal_log_parts(x, 0.0)
    return _excess(x, value, k, remainder)


@kernel
def _excess(x, value, k, remainder):
    """(log x, x - 1 - log x) from ``_log_parts``' results."""
    return value, remainder if k == 0.0 else (x - 1.0) - value


# A loop of ``log_normal`` tracks, with ``domain_bits``, the unsigned least of
# ``checks.entry_bits`` (+0 wraps round to the greatest) and the greatest of the bits, which
# vectorises; ``normal_or_zero`` then says whether every x was a positive normal finite number
# or +0, or the loop must be done again with ``log``.
NO_BITS = (np.uint64(2 ** 64 - 1), np.uint64(0))
_INF_BITS = np.uint64(np.float64(np.inf).view(np.uint64))


@kernel
def domain_bits(bits, x):
    """``bits`` = (least, greatest) updated with x (see NO_BITS)."""
    return min(bits[0], np.uint64(entry_bits(x))), max(bits[1], np.float64(x).view(np.uint64))


@kernel
def normal_or_zero(bits):
    """Whether every x that ``domain_bits`` saw was +0 or a positive normal finite number, where
    ``log_normal`` is ``log`` (-0, with its sign bit, counts as negative)."""
    return not least_positive_below(bits[0], _SMALLEST_NORMAL) and bits[1] < _INF_BITS
