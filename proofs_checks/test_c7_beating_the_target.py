"""C7, beating the target: the exact condition.

With h = log(r / p) (at the optimum h_i = clip(log rho_i, log a, log b)), sum_i p_i e^{h_i} = 1
and, for every truth pi with supp(pi) within supp(p),

    KL(pi || r) = KL(pi || p) - E_pi[h],

so r beats p iff E_pi[h] > 0, i.e. iff the edge E_pi[h] - E_p[h] exceeds KL(p || r). Corollaries:
for pi = q, E_q[h] >= KL(r || p) >= 0 (r never loses when the drafter is right); for
pi = p + s (q - p), r beats p iff s > s* = KL(p||r) / (KL(p||r) + E_q[h]).

Checked on every divergence, budget and row family, with truths drawn near p: the identity
to 1e-12, the normalisation, the pi = q corollary, and the threshold s* (truths just above
it win, just below lose; a wrong s* would fail one side). Truths charging a token p excludes
give +inf on both sides, never nan.
"""

import numpy as np

import mdverify as md
from mdverify.theory import beats_target, edge, kl, segment_threshold, weak_hypothesis
from mdverify.workloads import divergence_suite, families
from mdverify.workloads.instances import report


def _rows():
    for label, P, Q in families(300, 2, seed=707):
        for i in range(P.shape[0]):
            p, q = P[i].astype(np.float64), Q[i].astype(np.float64)
            yield label, p / p.sum(), q / q.sum()


def test_identity_and_corollaries():
    rng = np.random.default_rng(77)
    worst_identity = worst_norm = worst_q = 0.0
    segment_cases = 0
    for entry in divergence_suite():
        for label, p, q in _rows():
            for eps in (1e-3, 0.05, 0.5):
                r = md.mentor(p, q, eps, entry).r.astype(np.float64)
                h = weak_hypothesis(p, r)
                support = p > 0
                worst_norm = max(worst_norm, abs(np.sum(p[support] * np.exp(h[support])) - r[support].sum()))
                for _ in range(3):
                    pi = np.where(support, p * rng.lognormal(0.0, 0.5, p.size), 0.0)
                    pi /= pi.sum()
                    gain = np.sum(pi[pi > 0] * h[pi > 0])
                    if np.isinf(kl(pi, r)):  # r = 0 where pi > 0: both sides are +inf
                        assert gain == -np.inf
                    else:
                        worst_identity = max(worst_identity, abs(kl(pi, r) - (kl(pi, p) - gain)))
                    assert beats_target(pi, p, r) == (kl(pi, r) < kl(pi, p)) or abs(kl(pi, r) - kl(pi, p)) < 1e-14
                if q[~support].sum() == 0:  # pi = q within supp(p)
                    worst_q = max(worst_q, kl(r, p) - np.sum(q[q > 0] * h[q > 0]))
                s_star = float(segment_threshold(p, q, r))
                if 0 < s_star < 0.99 and q[~support].sum() == 0:
                    above = p + (s_star + 0.01) * (q - p)
                    below = p + max(s_star - 0.01, 0.0) * (q - p)
                    assert beats_target(above, p, r) and not beats_target(below, p, r), (entry.name, label, eps)
                    segment_cases += 1
    report("C7", identity=worst_identity, normalisation=worst_norm, q_corollary_violation=worst_q,
           segment_cases=segment_cases)
    assert worst_identity <= 1e-12 and worst_norm <= 1e-12
    assert worst_q <= 1e-12
    assert segment_cases >= 100


def test_truths_outside_the_support_are_infinite_not_nan():
    p = np.array([0.5, 0.5, 0.0])
    q = np.array([0.2, 0.3, 0.5])
    r = md.mentor(p, q, 0.1, "tv").r  # tv moves mass onto the token p excludes
    pi = np.array([0.3, 0.3, 0.4])
    assert kl(pi, p) == np.inf and kl(pi, r) < np.inf
    assert not beats_target(pi, p, r)  # KL(pi || p) = +inf: C7 is stated within supp(p)
    assert np.isfinite(edge(p, p, r)) or edge(p, p, r) == -np.inf
    assert not np.isnan([kl(pi, p), kl(pi, r), edge(pi, p, r), float(segment_threshold(p, q, r))]).any()
