"""The speculative-decoding loop over the n-gram pair, and C7's held-out identity on real text."""

import numpy as np

import mdverify as md
from mdverify.theory import weak_hypothesis
from mdverify.workloads.decoding import evaluate, held_out_rows


def test_loop_and_held_out_identity():
    rows = held_out_rows(400)
    lossless = evaluate(0.0, "kl", rows=rows, k=3, calls=60)
    assert lossless.cross_entropy_r == lossless.cross_entropy_p
    relaxed = evaluate(0.3, "kl", rows=rows, k=3, calls=60)
    assert 1 <= lossless.tokens_per_call < relaxed.tokens_per_call <= 4
    # C7 on held-out text: CE(r) - CE(p) = -mean of h at the observed words.
    P, Q, truth = rows
    r = md.mentor(P, Q, 0.3, "kl").r
    h = weak_hypothesis(P, r)[np.arange(truth.size), truth]
    assert abs((relaxed.cross_entropy_r - relaxed.cross_entropy_p) + h.mean()) < 1e-12
