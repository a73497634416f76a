"""User-defined generators: admission, refusals, and agreement with the registered entries."""

import re
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mdverify as md
from mdverify.oracle.bruteforce import solve as reference_solve
from mdverify.symbolic.derive import t
from mdverify.symbolic.user import parse_user
from mdverify.workloads import llm_rows

BUDGETS = np.array([0.0, 1e-6, 1e-3, 0.05, 0.4, 5.0])


def _rows():
    p, q = llm_rows(600, 6, seed=21)
    pt, qt = llm_rows(600, 6, seed=22, truncate="both")
    return np.concatenate([p, pt]), np.concatenate([q, qt])


def test_expression_matches_registered_jeffreys_everywhere():
    """'t*log(t) - log(t)' is jeffreys written differently: same optimum, frontier, value, sampler."""
    user, jeffreys = md.divergence("t*log(t) - log(t)"), md.divergence("jeffreys")
    assert user.name == "t*log(t) - log(t)" and user.generated is not None
    p, q = _rows()
    eps = np.resize(BUDGETS, len(p))
    for method in ("sorted", "select"):
        ours, theirs = md.mentor(p, q, eps, user, method=method), md.mentor(p, q, eps, jeffreys, method=method)
        np.testing.assert_allclose(ours.acceptance, theirs.acceptance, rtol=0, atol=1e-10)
        np.testing.assert_allclose(ours.r, theirs.r, rtol=0, atol=1e-10)
        np.testing.assert_allclose(ours.lam, theirs.lam, rtol=1e-8)
    np.testing.assert_allclose(user.value(q, p), jeffreys.value(q, p), rtol=1e-12)
    ours, theirs = md.frontier(p[0], q[0], user), md.frontier(p[0], q[0], jeffreys)
    np.testing.assert_allclose(ours.eps, theirs.eps, rtol=1e-12)
    np.testing.assert_allclose(ours.acceptance, theirs.acceptance, rtol=0, atol=1e-12)
    target, draft = p[:4].reshape(2, 2, -1), q[:2].reshape(2, 1, -1)
    tokens = np.array([[int(np.argmax(draft[0, 0]))], [int(np.argmax(draft[1, 0]))]])
    a = md.verify(target, draft, tokens, 0.05, user, seed=3)
    b = md.verify(target, draft, tokens, 0.05, jeffreys, seed=3)
    np.testing.assert_array_equal(a[0], b[0])


def _in_fresh_process(code: str) -> list[str]:
    """The lines that a fresh interpreter prints running ``code``."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()


def test_user_kernels_first_do_not_displace_registered_ones():
    """In a fresh process, compile "(t-1)*log(t)" before jeffreys; both must give jeffreys' optimum.

    Guards the rebinding: a rebound kernel that kept the original's symbol name would be
    linked in place of the original (numba links by symbol), and jeffreys would then be
    evaluated with the user module's functions.
    """
    p, q = llm_rows(2000, 4, seed=23, truncate="both")
    expected = md.mentor(p, q, 0.05, "jeffreys").acceptance
    code = (
        "import sys, numpy as np, mdverify as md\n"
        "from mdverify.workloads import llm_rows\n"
        "p, q = llm_rows(2000, 4, seed=23, truncate='both')\n"
        "for name in ['(t-1)*log(t)', 'jeffreys']:\n"
        "    for method in ['select', 'sorted']:\n"
        "        print(repr(md.mentor(p, q, 0.05, name, method=method).acceptance.tolist()))\n"
    )
    for line in _in_fresh_process(code):
        np.testing.assert_allclose(eval(line), expected, rtol=0, atol=1e-10)  # our own repr of floats


def test_a_user_stack_is_compiled_once_and_loaded_by_later_processes():
    """The kernel stack compiled against a generator here is loaded from numba's cache, not
    compiled, by a fresh process, and gives the same optimum."""
    p, q = llm_rows(500, 3, seed=31, truncate="both")
    here = md.mentor(p, q, 0.05, "(t-1)*log(t)").acceptance
    code = (
        "import numpy as np, mdverify as md\n"
        "from mdverify.workloads import llm_rows\n"
        "p, q = llm_rows(500, 3, seed=31, truncate='both')\n"
        "print(repr(md.mentor(p, q, 0.05, '(t-1)*log(t)').acceptance.tolist()))\n"
        "stats = md.divergence('(t-1)*log(t)').kernels.mentor_rows.stats\n"
        "print(sum(stats.cache_hits.values()), sum(stats.cache_misses.values()))\n"
    )
    acceptance, counts = _in_fresh_process(code)
    assert counts == "1 0"  # one signature loaded, none compiled
    np.testing.assert_array_equal(eval(acceptance), here)  # our own repr of floats


def test_user_alpha_matches_brute_force():
    """The alpha(0.3) generator typed by hand agrees with md.alpha(0.3) and with nested bisection."""
    text = "(t**(3/10) - 3*t/10 - 7/10)/((3/10)*(3/10 - 1))"
    p, q = llm_rows(300, 3, seed=24, truncate="both")
    for eps in (1e-3, 0.1):
        ours = md.mentor(p, q, eps, text)
        family = md.mentor(p, q, eps, md.alpha(0.3))
        np.testing.assert_allclose(ours.acceptance, family.acceptance, rtol=0, atol=1e-10)
        for i in range(len(p)):
            ref = reference_solve(p[i], q[i], eps, md.divergence(text))
            assert abs(ref.acceptance - ours.acceptance[i]) <= 1e-8, (eps, i, ref.acceptance, ours.acceptance[i])


@pytest.mark.parametrize("text, test", [
    ("sin(t-1)", "convex"),
    ("log(t)**2", "convex"),
    ("t**2", "f(1) = 0"),
    ("sqrt(t)", "f(1) = 0"),
    ("log(t-2)", "f(1) = 0"),
    ("sqrt(t-1/2) - sqrt(1/2)", "real and finite"),
    ("x**2", "parse"),
    ("__import__('os').system('true')", "parse"),
    ("t.real", "parse"),
    ("t^2 - 2*t + 1", "parse"),
    ("7", "parse"),
    ("9**9**9", "parse"),
    ("1e308*(t-1)**2", "parse"),  # f''(1) = 2e308 leaves float64
    ("1e999*(t-1)**2", "parse"),  # 1e999 reads as inf
    ("exp(" * 50 + "t" + ")" * 50, "parse"),  # nested beyond MAX_DEPTH: sympy's simplify would take minutes
])
def test_refusals_name_the_failed_test(text, test):
    with pytest.raises(ValueError, match=re.escape(f"refused by the test '{test}'")):
        md.divergence(text)


def test_text_that_would_take_sympy_minutes_is_refused_at_the_deadline(monkeypatch):
    from mdverify.divergences import custom

    monkeypatch.setattr(custom, "DEADLINE", 5.0)
    for text in ("t**t - 1", "exp(exp(exp(t))) - exp(exp(E))"):  # minutes in the series, in the limits
        with pytest.raises(ValueError, match=r"refused by the test 'time': .* longer than 5 s"):
            md.divergence(text)


def test_long_text_is_quoted_not_echoed():
    for text in ("x" * 100_000, "t" + "+t" * 50_000):
        with pytest.raises(ValueError) as info:
            md.divergence(text)
        assert len(str(info.value)) < 500 and "characters)" in str(info.value)


def test_constants_beyond_int64_compile():
    """sympy's exact rationals (1e-20 is 1/10**20) are printed as floats, which numba types."""
    p, q = llm_rows(300, 2, seed=25)
    scaled = md.mentor(p, q, 0.1, "1e-20*(t-1)**2")
    np.testing.assert_allclose(scaled.acceptance, md.mentor(p, q, 0.1 * 1e20, "pearson").acceptance, rtol=0, atol=1e-10)
    big = md.mentor(p, q, 0.1, "(t-1)**2*10**19")
    np.testing.assert_allclose(big.acceptance, md.mentor(p, q, 0.1 / 1e19, "pearson").acceptance, rtol=0, atol=1e-10)


def test_planted_cache_files_are_never_loaded(tmp_path):
    """A pickle planted where numba keeps its cache index, and bytecode beside the generated
    module, are not read: the module runs from its own hashed text, its functions uncached."""
    import pickle

    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    # An expression other tests use too, so that its kernel stack is compiled once per run.
    code = ("import mdverify as md\n"
            "md.mentor([0.7, 0.2, 0.1], [0.2, 0.5, 0.3], 0.1, '(t-1)*log(t)')\n")
    env = dict(__import__("os").environ, MDVERIFY_CACHE_DIR=str(tmp_path / "cache"))
    subprocess.run([sys.executable, "-c", code], check=True, env=env, capture_output=True)
    folder = tmp_path / "cache" / "generators"
    (module,) = folder.glob("mdverify_generator_*.py")
    cache = folder / "__pycache__"
    cache.mkdir(exist_ok=True)
    for name in ("f_prime_at_one", "f_tilde", "segment_root"):
        for index in range(30):
            (cache / f"{module.stem}.{name}-{index}.py311.nbi").write_bytes(pickle.dumps(Payload()))
    (cache / f"{module.stem}.cpython-311.pyc").write_bytes(b"planted")
    subprocess.run([sys.executable, "-c", code], check=True, env=env, capture_output=True)
    assert not marker.exists()


def test_a_cache_folder_others_can_write_is_refused(tmp_path, monkeypatch):
    from mdverify.divergences.custom import cache_dir

    shared = tmp_path / "shared"
    (shared / "generators").mkdir(parents=True)
    (shared / "generators").chmod(0o777)
    monkeypatch.setenv("MDVERIFY_CACHE_DIR", str(shared))
    with pytest.raises(PermissionError, match="no one else can write"):
        cache_dir()
    (shared / "generators").chmod(0o700)
    assert cache_dir() == shared / "generators"


def test_refusal_reaches_mentor():
    with pytest.raises(ValueError, match="'convex'"):
        md.mentor([0.5, 0.5], [0.2, 0.8], 0.1, "sin(t-1)")


def test_unknown_name_still_lists_the_registry():
    with pytest.raises(ValueError, match="valid names are: tv, kl"):
        md.divergence("kullback")


def test_admitted_limits_come_from_sympy():
    entry = md.divergence("(t-1)**2/t + t*log(t)")
    assert entry.f_at_zero == np.inf and entry.f_prime_at_inf == np.inf
    assert md.divergence("Abs(t-1)").f_prime_at_inf == pytest.approx(1.0)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="t()+-*/.^ 0123456789elogsqrtxpi_,'[]", max_size=30))
def test_parser_never_runs_code_and_only_raises_value_errors(text):
    try:
        expr = parse_user(text)
    except ValueError as err:
        assert "refused by the test 'parse'" in str(err)
    else:
        assert expr.free_symbols == {t}
