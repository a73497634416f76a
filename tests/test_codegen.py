"""The generated kernel module never drifts from its sympy derivation."""

import shutil

import pytest

from mdverify.divergences import names, registry
from mdverify.symbolic import codegen


def test_generated_module_matches_derivation():
    assert codegen.TARGET.read_text() == codegen.generate_source()
    assert codegen.main(["--check"]) == 0


def test_drift_check_fails_on_hand_edit(tmp_path):
    copy = tmp_path / "_fgen.py"
    shutil.copy(codegen.TARGET, copy)
    copy.write_text(copy.read_text().replace("math.log(t)", "math.log(t + 1e-16)", 1))
    assert codegen.main(["--check", "--target", str(copy)]) == 1


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
    import mdverify as md

    entry = md.divergence(name)
    d = entry.derived
    assert entry.f_at_zero == pytest.approx(float(d.f_at_zero))
    assert entry.f_prime_at_inf == pytest.approx(float(d.f_prime_at_inf))
