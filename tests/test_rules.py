"""md.rules: CACTUS's O(n log n) output against its O(n^2) definition, and clear errors."""

import numpy as np
import pytest

from mdverify.rules import RULES, cactus, cactus_quadratic, lenience, static_ensemble
from mdverify.workloads import edge_rows, families


@pytest.mark.parametrize("delta", [0.0, 1e-3, 0.05, 0.5, 4.0])
def test_cactus_fast_form_matches_the_definition(delta):
    rows = [(label, P[i], Q[i]) for label, P, Q in families(120, 2, seed=31) for i in range(2)]
    rows += [(label, p, q) for label, p, q in edge_rows()]
    for label, p, q in rows:
        p, q = p.astype(np.float64), q.astype(np.float64)
        p, q = p / p.sum(), q / q.sum()
        fast, slow = cactus(p, q, delta), cactus_quadratic(p, q, delta)
        np.testing.assert_allclose(fast.r, slow.r, rtol=0, atol=1e-14, err_msg=label)
        assert fast.acceptance == slow.acceptance
        assert abs(fast.r.sum() - 1) < 1e-12, label


def test_every_rule_has_a_default_and_rejects_bad_input():
    assert len(RULES) >= 8
    p, q = np.array([0.6, 0.4]), np.array([0.3, 0.7])
    for name, (rule, default, _) in RULES.items():
        out = rule(p, q, default)
        assert abs(out.r.sum() - 1) < 1e-12 and 0 <= out.acceptance <= 1, name
        with pytest.raises(ValueError, match="one row"):
            rule(np.ones((2, 2)) / 2, np.ones((2, 2)) / 2, default)
    with pytest.raises(ValueError, match=r"l must lie in \(0, 1\], got 0.0"):
        lenience(p, q, 0.0)
    with pytest.raises(ValueError, match=r"w must lie in \[0, 1\]"):
        static_ensemble(p, q, 1.5)
    with pytest.raises(ValueError, match="delta must lie in"):
        cactus(p, q, -1.0)


@pytest.mark.parametrize("name", sorted(RULES))
def test_rules_validate_rows_and_parameters_as_mentor_does(name):
    rule, default, _ = RULES[name]
    p, q = np.array([0.6, 0.4]), np.array([0.3, 0.7])
    for bad_p, message in (([np.nan, 1.0], "non-finite"), ([2.0, -1.0], "negative"), ([0.5, 0.6], "sums to")):
        with pytest.raises(ValueError, match=message):
            rule(np.array(bad_p), q, default)
    bad_parameter = {"top_k": 0, "typical": (np.nan, 0.1)}.get(name, np.nan)
    with pytest.raises(ValueError, match=name.split("_")[0] if name != "static_ensemble" else "static_ensemble"):
        rule(p, q, bad_parameter)
    if name == "cactus":
        with pytest.raises(ValueError, match="delta must lie in"):
            rule(p, q, np.inf)
