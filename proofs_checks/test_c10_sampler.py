"""C10, the sampler is exact.

Over a chain of k drafted positions, md.verify keeps x_j with probability min(1, r_j(x_j) /
q_j(x_j)), at the first rejection draws from norm((r_j - q_j)_+) and stops, and after k
acceptances draws a bonus token from the target p_{k+1}. Then each emitted token is
distributed as r_j (or p_{k+1}), the acceptance at j is A(r_j), and the expected number of
emitted tokens is sum_{j=0..k} prod_{i<=j} A(r_i) (the empty product for j = 0 is 1).

Checked at a fixed seed with 10^6 draws: a chi-square test of the first emitted token against
r (and, with eps = 0, against p: lossless), the acceptance rate within 4 standard deviations
of A(r), and, for k = 1..5, the mean number of emitted tokens within 4 standard deviations
of the formula. The same counts tested against p instead of r must fail, so the test has power.
"""

import numpy as np
from scipy.stats import chisquare

import mdverify as md
from mdverify.workloads.instances import report

DRAWS = 1_000_000
P = np.array([0.30, 0.25, 0.20, 0.12, 0.08, 0.05])
Q = np.array([0.10, 0.15, 0.30, 0.05, 0.25, 0.15])


def _first_tokens(eps, divergence, draws=DRAWS, seed=1010):
    rng = np.random.default_rng(seed)
    target = np.broadcast_to(np.stack([P, P[::-1]]), (draws, 2, P.size))
    draft = np.broadcast_to(Q, (draws, 1, Q.size))
    tokens = rng.choice(Q.size, size=(draws, 1), p=Q)
    out, accepted = md.verify(target, draft, tokens, eps, divergence, seed=seed + 1)
    return out[:, 0], accepted


def test_first_token_follows_r_and_acceptance_is_a():
    worst_sigma = 0.0
    p_values = {}
    for divergence, eps in (("kl", 0.05), ("tv", 0.1), ("hellinger", 0.02), ("reverse_kl", 0.3)):
        r = md.mentor(P, Q, eps, divergence)
        first, accepted = _first_tokens(eps, divergence)
        counts = np.bincount(first, minlength=P.size)
        p_values[divergence] = chisquare(counts, DRAWS * r.r).pvalue
        rate = accepted.mean()
        sigma = np.sqrt(r.acceptance * (1 - r.acceptance) / DRAWS)
        worst_sigma = max(worst_sigma, abs(rate - r.acceptance) / sigma)
        # Power: the same counts are far from the target's own distribution.
        assert chisquare(counts, DRAWS * P).pvalue < 1e-12, divergence
    report("C10 first token", draws=DRAWS, min_chi2_pvalue=min(p_values.values()), acceptance_sigmas=worst_sigma)
    assert min(p_values.values()) > 1e-4
    assert worst_sigma < 4


def test_lossless_at_eps_zero():
    first, accepted = _first_tokens(0.0, "kl", seed=2020)
    counts = np.bincount(first, minlength=P.size)
    pvalue = chisquare(counts, DRAWS * P).pvalue
    sigma = np.sqrt(np.minimum(P, Q).sum() * (1 - np.minimum(P, Q).sum()) / DRAWS)
    report("C10 lossless", draws=DRAWS, chi2_pvalue=pvalue, acceptance_sigmas=abs(accepted.mean() - np.minimum(P, Q).sum()) / sigma)
    assert pvalue > 1e-4
    assert abs(accepted.mean() - np.minimum(P, Q).sum()) < 4 * sigma


def test_expected_tokens_per_call():
    rng = np.random.default_rng(3030)
    draws = 200_000
    worst = 0.0
    for k in range(1, 6):
        targets = rng.dirichlet(np.full(8, 0.7), size=k + 1)
        drafts = 0.6 * targets[:k] + 0.4 * rng.dirichlet(np.full(8, 0.7), size=k)
        eps = 0.03
        acceptance = [float(md.mentor(targets[j], drafts[j], eps, "jensen_shannon").acceptance) for j in range(k)]
        expected = sum(np.prod(acceptance[:j]) for j in range(k + 1))
        tokens = np.stack([rng.choice(8, size=draws, p=drafts[j]) for j in range(k)], axis=1)
        out, accepted = md.verify(np.broadcast_to(targets, (draws, k + 1, 8)), np.broadcast_to(drafts, (draws, k, 8)),
                                  tokens, eps, "jensen_shannon", seed=k)
        emitted = accepted + 1
        assert ((out >= 0).sum(-1) == emitted).all()
        worst = max(worst, abs(emitted.mean() - expected) / (emitted.std() / np.sqrt(draws)))
    report("C10 tokens per call", draws=draws, k="1..5", worst_sigmas=worst)
    assert worst < 4
