"""C3 with proved gaps: feasibility and optimality in ball arithmetic (``md.certify``).

For the problem exactly as the float arrays define it, ``md.certify`` encloses sum r,
A(r) and D_f(r || p) rigorously (python-flint's arb at 128 bits, the generator printed from
sympy) and bounds the optimum from above by weak duality at the result's multipliers, each
coordinate's sup bracketed by proved slope signs. So ``gap_upper`` is a proved bound on how
far A(r) is from the optimal acceptance.

Checked, on the families of the claim checks (LLM-like, peaked, top-k, top-p, draft
truncated, both truncated, tied, float32) and the edge rows, every divergence, budgets 0 to
10, n = 2000 per family and one LLM-like row of n = 10^6:

- ``md.mentor(certified=True)`` returns rows whose certificate says feasible, for every row;
- float64 rows: the proved gap is at most 1e-12 (absolute, in acceptance);
- float32 rows: the proved gap is what float32 rounding of r costs, stated and bounded by 1e-4;
- negative controls: a row moved 1% outside the budget (D about 1.01 eps) is refused, and
  multipliers moved 1% give a gap visibly larger than at the result's own.
"""

import pytest

import mdverify as md
from mdverify.workloads import divergence_suite, edge_rows, families, llm_rows
from mdverify.workloads.instances import report

pytest.importorskip("flint")

DIVERGENCES = divergence_suite()
BUDGETS = (0.0, 1e-3, 0.1, 1.0, 10.0)
FLOAT64_GAP, FLOAT32_GAP = 1e-12, 1e-4


@pytest.mark.parametrize("entry", DIVERGENCES, ids=lambda d: d.name)
def test_certified_rows_are_proved_feasible_and_optimal(entry):
    worst64 = worst32 = 0.0
    rows = 0
    for label, P, Q in families(2000, 1, seed=907):
        for eps in BUDGETS:
            res = md.mentor(P, Q, eps, entry, certified=True)
            cert = res.certificate
            assert cert.feasible.all(), (label, eps, cert.notes)
            gap = float(cert.gap_upper.max())
            if label == "float32":
                worst32 = max(worst32, gap)
            else:
                worst64 = max(worst64, gap)
            rows += P.shape[0]
    for label, p, q in edge_rows():
        for eps in BUDGETS:
            cert = md.mentor(p, q, eps, entry, certified=True).certificate
            assert cert.feasible, (label, eps, cert.notes)
            worst64 = max(worst64, float(cert.gap_upper))
            rows += 1
    report("C3 proved", divergence=entry.name, rows=rows, float64_gap=worst64, float32_gap=worst32)
    assert worst64 <= FLOAT64_GAP
    assert worst32 <= FLOAT32_GAP


@pytest.mark.parametrize("name", ["kl", "hellinger"])
def test_a_million_tokens(name):
    p, q = llm_rows(1_000_000, 1, seed=5)
    res = md.mentor(p, q, 0.05, name, certified=True)
    cert = res.certificate
    report("C3 proved, n = 10^6", divergence=name, gap=float(cert.gap_upper[0]),
           divergence_upper=float(cert.divergence[0, 1]))
    assert cert.feasible[0] and cert.gap_upper[0] <= FLOAT64_GAP


@pytest.mark.parametrize("entry", DIVERGENCES, ids=lambda d: d.name)
def test_negative_controls(entry):
    p, q = llm_rows(1000, 1, seed=11)
    p, q = p[0], q[0]
    eps = min(0.05, 0.3 * float(entry.value(q, p)))  # a budget that binds
    res = md.mentor(p, q, eps, entry)
    # 1% outside the budget: the optimum at 1.01 eps exceeds eps by about 1% of it.
    over = md.mentor(p, q, 1.01 * eps, entry)
    cert = md.certify(p, q, over.r, eps, entry, lam=over.lam, mu=over.mu)
    assert not cert.feasible and cert.divergence[0] > eps
    # Multipliers moved 1%: weak duality still bounds the optimum, but visibly worse.
    own = md.certify(p, q, res, eps, entry)
    assert own.feasible or own.divergence[1] <= eps * (1 + 1e-14)
    if res.lam > 0:
        moved = md.certify(p, q, res.r, eps, entry, lam=res.lam * 1.01, mu=res.mu)
        assert moved.gap_upper > 100 * max(own.gap_upper, 1e-16) and moved.gap_upper > 1e-9
