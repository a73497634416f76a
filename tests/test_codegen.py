"""The generated kernel module never drifts from its sympy derivation."""

import shutil

import numpy as np
import pytest

import mdverify as md
from mdverify.divergences import names, registry
from mdverify.symbolic import codegen


def test_generated_module_matches_derivation():
    assert codegen.main(["--check"]) == 0  # regenerates and compares the text


@pytest.mark.parametrize("option, target, function", [("--target", codegen.TARGET, "math.log(t)"),
                                                      ("--torch-target", codegen.TORCH_TARGET, "torch.log(t)")])
def test_drift_check_fails_on_hand_edit(tmp_path, option, target, function):
    copy = tmp_path / target.name
    shutil.copy(target, copy)
    copy.write_text(copy.read_text().replace(function, function.replace("(t)", "(t + 1e-16)"), 1))
    assert codegen.main(["--check", option, str(copy)]) == 1


def test_kinds_follow_the_registry():
    from mdverify.core import _fgen

    assert _fgen.KINDS == tuple(registry._FAMILIES)
    assert set(names()) < set(_fgen.KINDS)


def test_core_does_not_import_sympy():
    import subprocess
    import sys

    code = "import sys, mdverify as md; md.mentor([0.5, 0.5], [0.2, 0.8], 0.1); print('sympy' in sys.modules, 'cvxpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.parametrize("name", ["kl", "hellinger", "jensen_shannon"])
def test_limits_match_sympy(name):
    entry = md.divergence(name)
    d = entry.derived
    assert entry.f_at_zero == pytest.approx(float(d.f_at_zero))
    assert entry.f_prime_at_inf == pytest.approx(float(d.f_prime_at_inf))


#: t from 1e-12 to 1e12, plus both sides of 1 down to 1e-15 and the series interval's edges.
_PRECISION_GRID = np.unique(np.concatenate([
    np.logspace(-12, 12, 481),
    1 + np.geomspace(1e-15, 0.5, 120), 1 - np.geomspace(1e-15, 0.5, 120),
    [1 - codegen.NEAR_ONE, 1 + codegen.NEAR_ONE, np.nextafter(1 - codegen.NEAR_ONE, 0), np.nextafter(1 + codegen.NEAR_ONE, 2)],
]))
#: alpha members: the edges of what md.alpha admits (alpha_family.A_RANGE, A_GAP), and inside.
_ALPHAS = (-8.0, -4.0, -1.5, -0.12, 0.12, 0.3, 0.5, 0.9, 1.1, 2.5, 5.0, 20.0)  # with the edges of md.alpha


def _precision_cases():
    cases = [(name, None) for name in names()]
    return cases + [("alpha", a) for a in _ALPHAS]


@pytest.mark.parametrize("name, a", _precision_cases(), ids=lambda x: str(x))
def test_generated_functions_match_mpmath_at_50_digits(name, a):
    """f~ and f~' from the kernels within 1e-12 relative of sympy's expression at 50 digits.

    Over t in [1e-12, 1e12] and down to 1e-15 from t = 1 on both sides. The alpha family is
    checked against its symbolic-parameter derivation with a set to the exact binary value of
    the float the kernel receives (a member's own expression carries 15-digit Floats).
    """
    import mpmath
    import sympy as sp

    from mdverify.core import _fgen
    from mdverify.divergences import alpha_family
    from mdverify.symbolic.derive import a as a_symbol
    from mdverify.symbolic.derive import derive, parse_generator, t

    if a is None:
        entry = md.divergence(name)
        derived = entry.derived
    else:
        entry = md.alpha(a)
        derived = derive(parse_generator(alpha_family.EXPRESSION))
    worst = {}
    for label, expr, fn in (("f~", derived.f_tilde, _fgen.f_tilde), ("f~'", derived.f_tilde_prime, _fgen.f_tilde_prime)):
        exact = sp.lambdify(t, expr.subs(a_symbol, sp.Rational(entry.param)), modules="mpmath")
        errors = []
        with mpmath.workdps(50):
            for x in _PRECISION_GRID:
                truth = exact(mpmath.mpf(float(x)))
                got = fn(entry.kind, entry.param, float(x))
                scale = abs(truth) if abs(truth) > 1e-40 else 1.0  # f~(1) = f~'(1) = 0
                errors.append(float(abs(got - truth) / scale))
        worst[label] = (max(errors), float(_PRECISION_GRID[int(np.argmax(errors))]))
    print(entry.name, {k: f"{v[0]:.1e} at t = {v[1]:.6g}" for k, v in worst.items()})
    for label, (error, at) in worst.items():
        assert error <= 1e-12, (entry.name, label, error, at)


@pytest.mark.parametrize("name, a", _precision_cases(), ids=lambda x: str(x))
def test_generated_functions_hold_up_to_the_float_maximum(name, a):
    """Ratios q/p reach the float maximum where p is near the smallest floats: up to there, f~
    and f~' stay finite wherever their value is (below 1e307), and within 1e-9 of it."""
    import mpmath
    import sympy as sp

    from mdverify.core import _fgen
    from mdverify.divergences import alpha_family
    from mdverify.symbolic.derive import a as a_symbol
    from mdverify.symbolic.derive import derive, parse_generator, t

    entry = md.divergence(name) if a is None else md.alpha(a)
    derived = entry.derived if a is None else derive(parse_generator(alpha_family.EXPRESSION))
    grid = np.concatenate([np.logspace(12, 308, 297), [np.finfo(np.float64).max]])
    checked = 0
    for label, expr, fn in (("f~", derived.f_tilde, _fgen.f_tilde), ("f~'", derived.f_tilde_prime, _fgen.f_tilde_prime)):
        exact = sp.lambdify(t, expr.subs(a_symbol, sp.Rational(entry.param)), modules="mpmath")
        with mpmath.workdps(50):
            for x in grid:
                truth = exact(mpmath.mpf(float(x)))
                if abs(truth) > 1e307:
                    continue
                got = fn(entry.kind, entry.param, float(x))
                assert np.isfinite(got) and abs(got - truth) <= 1e-9 * abs(truth) + 1e-300, (entry.name, label, x, got)
                checked += 1
    assert checked > 0


@pytest.mark.parametrize("name", names())
def test_generated_constants_are_sympys(name):
    """f'(1), f''(1) and the three limits in the kernels are sympy's values, to the last bit."""
    from mdverify.core import _fgen

    entry = md.divergence(name)
    d = entry.derived
    expected = {
        "f_prime_at_one": d.f_prime_at_one, "f_tilde_at_zero": d.f_tilde_at_zero,
        "f_tilde_prime_at_zero": d.f_tilde_prime_at_zero, "f_tilde_prime_at_inf": d.f_tilde_prime_at_inf,
        "f_second_at_one": d.f_second_at_one,
    }
    for fn, value in expected.items():
        got = getattr(_fgen, fn)(entry.kind, entry.param)
        if value is None:
            assert np.isnan(got), (name, fn)
        else:
            assert got == float(value), (name, fn, got, value)


def test_segment_derivation_and_closed_forms():
    """The segment equation's derivatives are C3's marginal cost; tv and pearson solve in closed form.

    Every closed-form root, evaluated by the kernel, satisfies the equation D(delta) = e (through
    the walk's own segment_point) to 2e-15 relative on random segments.
    """
    import sympy as sp

    from mdverify.core._fgen import segment_root
    from mdverify.core.walk import segment_point
    from mdverify.symbolic.derive import da, db, delta, p_high, p_low, t

    solved = []
    for name in names():
        entry = md.divergence(name)
        d = entry.derived
        if name != "tv":  # f~' is the derivative at a point away from the kink
            expected = d.f_tilde_prime.subs(t, 1 + db + delta / p_high) - d.f_tilde_prime.subs(t, 1 - da - delta / p_low)
            point = {da: sp.Rational(1, 7), db: sp.Rational(2, 3), p_low: sp.Rational(1, 3), p_high: sp.Rational(1, 5), delta: sp.Rational(1, 50)}
            assert abs(float((d.segment_slope - expected).subs(point))) < 1e-12, name
        if d.segment_roots is not None:
            solved.append(name)
    assert solved == ["tv", "pearson"]
    rng = np.random.default_rng(5)
    for name in solved:
        kind = md.divergence(name).kind
        worst = 0.0
        for _ in range(500):
            p_lo, p_hi = rng.uniform(1e-3, 1, 2)
            a0, b0 = 1 - rng.uniform(0, 0.9), 1 + rng.uniform(0, 3)
            start = segment_point(0.0, kind, 0.0, 0.0, p_lo, a0, 0.0, 0.0, p_hi, b0, np.inf, np.inf, 0.0)[0]
            e = start + rng.uniform(0, 1)
            x = segment_root(kind, 0.0, e, p_lo, 1 - a0, p_hi, b0 - 1)
            value = segment_point(x, kind, 0.0, 0.0, p_lo, a0, -np.inf, 0.0, p_hi, b0, np.inf, np.inf, 0.0)[0]
            worst = max(worst, abs(value - e) / e)
        print(name, "closed-form residual", worst)
        assert worst <= 2e-15, (name, worst)
    assert np.isnan(segment_root(md.divergence("kl").kind, 0.0, 0.1, 0.5, 0.1, 0.5, 0.1))


def test_inverse_of_f_prime_where_sympy_finds_it():
    """(f')^{-1}(f'(t)) = t at random t for every registered f but tv (a kink), and the family."""
    import sympy as sp

    from mdverify.divergences import alpha_family
    from mdverify.symbolic.derive import a, derive, parse_generator, t, y

    rng = np.random.default_rng(8)
    derivations = [(name, md.divergence(name).derived) for name in names()]
    derivations.append(("alpha", derive(parse_generator(alpha_family.EXPRESSION))))
    for name, d in derivations:
        inverse = d.f_prime_inverse
        if name == "tv":
            assert inverse is None
            continue
        assert inverse is not None, name
        for x in rng.uniform(0.05, 20, 5):
            for value in ((-1.5, 0.3, 2.5) if name == "alpha" else (0.0,)):
                slope = d.f_prime.subs({t: x, a: value})
                back = complex(sp.N(inverse.subs({y: slope, a: value})))
                assert abs(back - x) <= 1e-9 * x, (name, x, value, back)


@pytest.mark.parametrize("name, a", _precision_cases(), ids=lambda x: str(x))
def test_branch_free_f_tilde_is_f_tilde(name, a):
    """The vectorised loop's f~ (every piece computed, one kept; ``fastlog.log``, within 1 ulp of
    the C library's) is ``f_tilde`` within 1e-13 relative, the closed forms' own accuracy
    (above): on every range the solvers reach, 0, the subnormals, around 1 and the series'
    edges, up to the float maximum; inf and nan where it is."""
    from mdverify.core import _fgen

    entry = md.divergence(name) if a is None else md.alpha(a)
    grid = np.unique(np.concatenate([_PRECISION_GRID, np.logspace(-320, 308, 629), [0.0, 5e-324, 1.0],
                                     [np.finfo(np.float64).max]]))
    weight = np.ones_like(grid)
    got = np.empty_like(grid)
    _fgen.weighted_f_tilde_terms(entry.kind, entry.param, grid, weight, 1.0, 0, grid.size, got)
    want = np.array([_fgen.f_tilde(entry.kind, entry.param, float(x)) for x in grid])
    with np.errstate(invalid="ignore"):  # inf - inf where f~ overflows in both
        same = (got == want) | (np.isnan(got) & np.isnan(want)) | (np.abs(got - want) <= 1e-13 * np.abs(want))
    assert same.all(), (entry.name, grid[~same][:5], got[~same][:5], want[~same][:5])


@pytest.mark.parametrize("name", names())
def test_each_term_is_the_same_whatever_else_its_chunk_holds(name):
    """A chunk of terms is computed with ``fastlog.log_normal`` and again with ``log`` where a
    ratio lies outside its domain (0 and the positive normal numbers): a token's term is then
    the same bit for bit whether its chunk holds such a ratio or not, so that sums of the same
    terms in other chunks agree. Each ratio alone, against the grid of every range at once
    (subnormals, -0, inf and both sides of 1 among them), and the generator's own f~ (taken
    with the C library's log) within 1e-13."""
    from mdverify.core import _fgen

    entry = md.divergence(name)
    grid = np.concatenate([_PRECISION_GRID, np.logspace(-320, 308, 157), [0.0, -0.0, 5e-324, 2.0 ** -1022, np.inf,
                                                                          np.finfo(np.float64).max]])
    weight = np.linspace(0.5, 2.0, grid.size)
    together, alone = np.empty_like(grid), np.empty(1)
    _fgen.weighted_f_tilde_terms(entry.kind, entry.param, grid, weight, 1.0, 0, grid.size, together)
    for j in range(grid.size):
        _fgen.weighted_f_tilde_terms(entry.kind, entry.param, grid, weight, 1.0, j, 1, alone)
        assert alone[0] == together[j] or np.isnan(alone[0]) and np.isnan(together[j]), (name, grid[j])
        with np.errstate(over="ignore", invalid="ignore"):  # inf terms, and inf - inf
            want = weight[j] * _fgen.f_tilde(entry.kind, entry.param, float(grid[j]))
            assert abs(alone[0] - want) <= 1e-13 * abs(want) or alone[0] == want or np.isnan(want), (name, grid[j])


def test_branch_free_f_tilde_takes_each_logarithm_once():
    """A branch-free f~ computes both pieces and keeps one: their logarithms are paired
    (``codegen._shared_logs``), so it takes as many as the piece with the most, not their sum,
    and each piece is printed as before (the one kept computes the same bits)."""
    import re

    from sympy import log as sp_log

    for kind, f in enumerate(codegen.choose_forms(codegen._families())):
        low, (high, _) = f.low["f_tilde"], f.high["f_tilde"]
        source = codegen._branch_free_f_tilde(kind, f)
        calls = len(re.findall(r"\blog(_excess)?\(", source))
        assert calls == max(len(low.atoms(sp_log)), len(high.atoms(sp_log))), (f.name, source)
        slots, low_logs, high_logs = codegen._shared_logs(low, high)
        assert codegen._vector_code(low, low_logs) in source
        plain = codegen._vector_code(low)
        for expr, name in low_logs.items():
            plain = plain.replace(codegen._vector_code(expr), name)
        assert plain == codegen._vector_code(low, low_logs), f.name


def test_excess_forms_replace_the_series_of_the_logarithmic_generators():
    """Near 1 the vectorised f~ of KL, reverse KL and Jeffreys is written in the excess t - 1 -
    log t (``codegen.near_one_excess``), within 1e-15 relative of 50-digit values from
    NEAR_ONE down to 1e-15 of t = 1; the generators with another logarithm or none keep
    their series."""
    import mpmath
    import sympy as sp

    from mdverify.core import _fgen
    from mdverify.symbolic.derive import t

    forms = {f.name: f for f in codegen.choose_forms(codegen._families())}
    assert {name for name, f in forms.items() if f.excess is not None} == {"kl", "reverse_kl", "jeffreys"}
    assert forms["reverse_kl"].excess == codegen.EXCESS
    d = np.concatenate([codegen.NEAR_ONE * (1 - np.geomspace(1e-6, 0.9, 40)), np.geomspace(1e-15, 0.049, 200)])
    grid = np.concatenate([1 - d, 1 + d])
    for name in ("kl", "reverse_kl", "jeffreys"):
        entry = md.divergence(name)
        got = np.empty_like(grid)
        _fgen.weighted_f_tilde_terms(entry.kind, 0.0, grid, np.ones_like(grid), 1.0, 0, grid.size, got)
        exact = sp.lambdify(t, entry.derived.f_tilde, modules="mpmath")
        with mpmath.workdps(50):
            errors = [float(abs((value - exact(mpmath.mpf(float(x)))) / exact(mpmath.mpf(float(x)))))
                      for x, value in zip(grid, got)]
        assert max(errors) <= 1e-15, (name, max(errors), grid[int(np.argmax(errors))])
