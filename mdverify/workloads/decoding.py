"""A speculative-decoding loop over the n-gram target and drafter, with md.verify as verifier.

Two measurements per (divergence, eps):

- tokens per target call: starting from held-out prefixes, the drafter proposes k tokens, the
  target scores the k + 1 positions in one call, and ``md.verify`` emits the accepted tokens
  plus one; the mean count of emitted tokens per call;
- held-out cross-entropy: at every held-out position (true context), p and q come from the
  models, r from ``md.mentor``, and the mean -log r(true next word) is set beside that of p.
  By C7 their difference is minus the mean of h = log(r / p) at the observed words.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import mdverify as md
from mdverify.workloads.ngrams import target_and_drafter


@dataclass(frozen=True)
class DecodingResult:
    divergence: str
    eps: float
    tokens_per_call: float
    cross_entropy_r: float  # nats per held-out token
    cross_entropy_p: float


def held_out_rows(limit: int = 2000):
    """(P, Q, truth) at the first ``limit`` held-out positions, with their true contexts."""
    vocab, target, drafter, held_out = target_and_drafter()
    P, Q, truth = [], [], []
    for doc in held_out:
        ids = vocab.ids(doc)
        for pos in range(len(ids)):
            if len(truth) == limit:
                return np.array(P), np.array(Q), np.array(truth)
            P.append(target.distribution(ids[:pos]))
            Q.append(drafter.distribution(ids[:pos]))
            truth.append(ids[pos])
    return np.array(P), np.array(Q), np.array(truth)


def tokens_per_call(eps: float, divergence, k: int = 4, calls: int = 200, seed: int = 0) -> float:
    """Mean tokens emitted per target call of drafter-proposes-k, ``md.verify``-checks loops."""
    vocab, target, drafter, held_out = target_and_drafter()
    rng = np.random.default_rng(seed)
    emitted = 0
    for call in range(calls):
        doc = vocab.ids(held_out[call % len(held_out)])
        context = list(doc[: rng.integers(0, max(len(doc), 1))])
        drafts, proposed = [], []
        for _ in range(k):
            q = drafter.distribution(context + proposed)
            drafts.append(q)
            proposed.append(int(rng.choice(q.size, p=q)))
        targets = [target.distribution(context + proposed[:j]) for j in range(k + 1)]
        out, accepted = md.verify(np.array(targets)[None], np.array(drafts)[None], np.array(proposed)[None],
                                  eps, divergence, seed=int(rng.integers(1 << 31)))
        emitted += int(accepted[0]) + 1
    return emitted / calls


def evaluate(eps: float, divergence, rows=None, k: int = 4, calls: int = 200) -> DecodingResult:
    """Both measurements for one (divergence, eps); ``rows`` from ``held_out_rows`` can be shared."""
    P, Q, truth = held_out_rows() if rows is None else rows
    r = md.mentor(P, Q, eps, divergence).r
    picked = np.arange(truth.size)
    name = divergence if isinstance(divergence, str) else divergence.name
    with np.errstate(divide="ignore"):
        return DecodingResult(
            divergence=name,
            eps=float(eps),
            tokens_per_call=tokens_per_call(eps, divergence, k=k, calls=calls),
            cross_entropy_r=float(-np.mean(np.log(r[picked, truth]))),
            cross_entropy_p=float(-np.mean(np.log(P[picked, truth]))),
        )
