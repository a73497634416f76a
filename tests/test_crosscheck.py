"""``mdverify crosscheck``: select against sorted on random rows, and what it counts as a disagreement."""

import re
from dataclasses import replace

import numpy as np
import pytest

import mdverify as md
from mdverify import crosscheck
from mdverify.cli import main


def test_the_solvers_agree_on_the_first_cases():
    result = crosscheck.run(0, cases=60)
    assert result["checked"] + result["refused"] == 60 and result["checked"] >= 50
    assert result["failures"] == []


def test_a_case_is_its_seed():
    first, again = crosscheck.case(17), crosscheck.case(17)
    np.testing.assert_array_equal(first.p, again.p)
    np.testing.assert_array_equal(first.q, again.q)
    assert first.describe() == again.describe()
    assert crosscheck.case(18).describe() != first.describe()


def test_the_cases_reach_what_they_are_drawn_for():
    """Long rows, float32, prices, budgets at D(q || p), and ratios past 1e100 (p far below q)."""
    cases = [crosscheck.case(seed) for seed in range(300)]
    assert any(c.p.size == 131072 for c in cases) and any(c.p.size < 2048 for c in cases)
    assert any(c.p.dtype == np.float32 for c in cases) and any(c.price is not None for c in cases)
    with np.errstate(divide="ignore", invalid="ignore"):
        assert any(np.nanmax(np.where(c.p > 0, c.q / c.p, 0.0)) > 1e100 for c in cases)
    at_drafter = [c for c in cases if c.eps is not None and c.eps > 10]
    assert at_drafter  # budgets only D(q || p) can set this high


def test_each_kind_of_disagreement_is_reported():
    p, q = np.array([0.7, 0.2, 0.1]), np.array([0.2, 0.5, 0.3])
    ours = md.mentor(p, q, 0.05, "kl", method="select")
    ref = md.mentor(p, q, 0.05, "kl", method="sorted")
    assert crosscheck.disagreements(ours, ref, 0.05, 1e-12) == []
    apart = replace(ours, acceptance=ours.acceptance + 1e-9)
    assert any("acceptance" in problem for problem in crosscheck.disagreements(apart, ref, 0.05, 1e-12))
    over = replace(ref, divergence_value=np.float64(0.06))
    assert any("sorted: D" in problem for problem in crosscheck.disagreements(ours, over, 0.05, 1e-12))
    broken = replace(ours, r=np.array([0.5, np.nan, 0.5]), lam=np.float64(np.nan))
    problems = crosscheck.disagreements(broken, ref, 0.05, 1e-12)
    assert any("non-finite" in problem for problem in problems) and any("lam is nan" in problem for problem in problems)


def test_the_command_reports_and_sets_its_status(capsys):
    assert main(["crosscheck", "--cases", "5", "--seed", "3"]) == 0
    assert re.search(r"\d cases checked from seed 3, 0 failing; \d refused", capsys.readouterr().out)
    assert main(["crosscheck", "--cases", "0"]) == 2


def test_run_needs_a_limit():
    with pytest.raises(ValueError, match="cases, minutes"):
        crosscheck.run(0)


def test_the_frontier_and_verify_are_held_to_the_solvers(monkeypatch):
    """A case whose r has zeros: a frontier that answers another acceptance, and a verify that
    outputs a token where r = 0, are both reported."""
    c = next(c for c in map(crosscheck.case, range(500))
             if c.eps is not None and c.p.dtype == np.float64 and c.p.size <= crosscheck.FRONTIER_MAX_N
             and (md.mentor(c.p, c.q, c.eps, c.divergence, method="sorted").r == 0).any())
    assert crosscheck.check(c) == []
    outside = int(np.flatnonzero(md.mentor(c.p, c.q, c.eps, c.divergence, method="sorted").r == 0)[0])

    class Elsewhere:
        def acceptance_at(self, eps):
            return np.float64(0.5)

    monkeypatch.setattr("mdverify.api.frontier", lambda p, q, divergence: Elsewhere())
    monkeypatch.setattr("mdverify.verification.verify",
                        lambda *args, **kwargs: (np.array([[outside, -1]]), np.array([0])))
    problems = crosscheck.check(c)
    assert any("(frontier)" in problem for problem in problems)
    assert any(f"verify gave token {outside}" in problem for problem in problems)
