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


def held_out_rows(limit: int = 2000, target_backoff: float = 1.0):
    """(P, Q, truth) at the first ``limit`` held-out positions, with their true contexts
    (``target_backoff`` < 1: the under-smoothed target of ``ngrams.NGramModel``)."""
    vocab, target, drafter, held_out = target_and_drafter(target_backoff=target_backoff)
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
    return run_policy(drafted_calls(k, calls, seed), "eps", eps, divergence, seed=seed + 1).tokens_per_call


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


@dataclass(frozen=True)
class DraftedCall:
    """One target call of the loop: the k + 1 target rows, the k drafter rows and the k drafts."""

    targets: np.ndarray  # (k + 1, n)
    drafts: np.ndarray  # (k, n)
    proposed: np.ndarray  # (k,)


def drafted_calls(k: int = 4, calls: int = 200, seed: int = 0) -> list[DraftedCall]:
    """``calls`` target calls from held-out contexts, drafts sampled from the drafter, drawn once so
    that every verification policy can be run on the same ones."""
    vocab, target, drafter, held_out = target_and_drafter()
    rng = np.random.default_rng(seed)
    out = []
    for call in range(calls):
        doc = vocab.ids(held_out[call % len(held_out)])
        context = list(doc[: rng.integers(0, max(len(doc), 1))])
        drafts, proposed = [], []
        for _ in range(k):
            q = drafter.distribution(context + proposed)
            drafts.append(q)
            proposed.append(int(rng.choice(q.size, p=q)))
        targets = [target.distribution(context + proposed[:j]) for j in range(k + 1)]
        out.append(DraftedCall(np.array(targets), np.array(drafts), np.array(proposed)))
    return out


@dataclass(frozen=True)
class PolicyResult:
    policy: str  # "eps", "flat price" (every position at nu) or "chain price" (md.plan_chain)
    value: float  # the eps or the price
    tokens_per_call: float
    spent_per_token: float  # sum of D_f(r_t || p_t) over the emitted tokens, per emitted token
    log_ratio_per_call: float  # mean of sum_t log(r_t(x_t) / p_t(x_t)) over the emitted tokens
    log_ratio_stderr: float
    planned_per_call: float  # mean of sum_t D_f(r_t || p_t) over the positions that emitted


def run_policy(calls: list[DraftedCall], policy: str, value: float, divergence="kl", seed: int = 1) -> PolicyResult:
    """Verify every call with one budget policy (SPEC section 10) and measure what it spends.

    Each emitted token is distributed as its position's r (C10), so the mean of the summed
    log(r/p) along the paths estimates the sequence-level KL(R || P) for kl (the chain rule),
    whose expectation is the summed budgets of the emitted positions.
    """
    rng = np.random.default_rng(seed)
    emitted, spent = 0, 0.0
    log_ratios = []
    for call in calls:
        targets, drafts = call.targets[None], call.drafts[None]
        if policy == "chain price":
            budgets = md.plan_chain(targets, drafts, value, divergence).eps[0]
        elif policy == "flat price":
            budgets = md.mentor(call.targets[:-1], call.drafts, price=value, divergence=divergence).divergence_value
        elif policy == "eps":
            budgets = np.full(len(call.proposed), value)
        else:
            raise ValueError(f"unknown policy {policy!r}; valid: 'eps', 'flat price', 'chain price'")
        res = md.mentor(call.targets[:-1], call.drafts, budgets, divergence)
        out, accepted = md.verify(targets, drafts, call.proposed[None], budgets[None], divergence,
                                  seed=int(rng.integers(1 << 31)))
        reached = min(int(accepted[0]) + 1, len(call.proposed))  # positions whose r emitted (the bonus is p's)
        tokens = out[0, :reached]
        emitted += int(accepted[0]) + 1
        spent += float(res.divergence_value[:reached].sum())
        with np.errstate(divide="ignore"):
            log_ratios.append(float(np.sum(np.log(res.r[np.arange(reached), tokens])
                                           - np.log(call.targets[np.arange(reached), tokens]))))
    log_ratios = np.array(log_ratios)
    return PolicyResult(policy, float(value), emitted / len(calls), spent / emitted, float(log_ratios.mean()),
                        float(log_ratios.std(ddof=1) / np.sqrt(len(calls))), spent / len(calls))
