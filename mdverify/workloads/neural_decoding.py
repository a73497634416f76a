"""Measurements of mentored decoding on the neural pair (``workloads.neural``), for the report.

Three kinds, all on the committed held-out tokens, so that no figure depends on the Python
version of the machine that runs them:

- **decoding** (``decode``): ``mdverify.hf.generate`` from held-out prompts, with tokens per
  target call, acceptance per draft position, wall-clock tokens per second, the divergence
  each sequence spent and the continuations' log-likelihood under the finished target;
  ``plain_sampling`` is the baseline, transformers' own ``generate`` of the target alone;
- **teacher-forced quality** (``teacher_forced_rows``, ``quality``): at held-out positions
  with their true contexts, the cross-entropy of r against that of p and q; by C7 the
  difference CE(r) - CE(p) is minus the mean of h = log(r / p) at the observed tokens;
- **rules on drafted chains** (``drafted_chains``, ``chain_expectations``): the drafter
  proposes k tokens, the target scores the k + 1 positions, and each verification rule's
  expected tokens per call and expected divergence per call are computed exactly from its
  acceptance probabilities at the drafted tokens (no uniforms are drawn).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

import mdverify as md


def _torch():
    from mdverify.torch_adapter import require_torch

    return require_torch()


def prompts(tokens: np.ndarray, count: int, length: int, seed: int = 0):
    """``count`` windows of ``length`` held-out tokens at seeded offsets, as a LongTensor (count, length)."""
    torch = _torch()
    starts = np.random.default_rng(seed).integers(0, len(tokens) - length, count)
    return torch.from_numpy(np.stack([tokens[s:s + length] for s in starts]))


def _softmax_rows(logits, temperature: float = 1.0) -> np.ndarray:
    """float64 probabilities from logits (..., n), computed in float64."""
    torch = _torch()
    return torch.softmax(logits.double() / temperature, -1).numpy()


@dataclass(frozen=True)
class DecodeResult:
    tokens_per_call: float
    acceptance: np.ndarray  # (k,) share of chains whose draft at position j was accepted
    tokens_per_second: float  # new tokens over the wall time of the decoding (accounting excluded)
    spent_per_sequence: float  # mean over sequences of the summed D_f(r_t || p_t) along its path
    log_likelihood: float  # mean log p_final(token) per new token, p_final the finished target at T = 1
    new_tokens: int


def log_likelihood(model, sequences, prompt_length: int) -> float:
    """Mean log-probability per token of the continuations (columns after the prompt) under ``model``."""
    torch = _torch()
    with torch.inference_mode():
        logits = model(sequences, attention_mask=torch.ones_like(sequences)).logits[:, prompt_length - 1:-1]
        logp = torch.log_softmax(logits.double(), -1)
        picked = logp.gather(-1, sequences[:, prompt_length:, None])[..., 0]
    return float(picked.mean())


def decode(target, drafter, scorer, input_ids, k: int, eps: float, divergence, temperature: float,
           max_new_tokens: int, seed: int = 0) -> DecodeResult:
    """One ``hf.generate`` run from ``input_ids`` (no end token, so every sequence runs to the end)."""
    from mdverify.hf import generate

    start = time.perf_counter()
    out = generate(target, drafter, input_ids, k=k, eps=eps, divergence=divergence, temperature=temperature,
                   max_new_tokens=max_new_tokens, seed=seed, track_divergence=True)
    seconds = time.perf_counter() - start - out.stats.accounting_seconds
    new = int(out.num_new_tokens.sum())
    return DecodeResult(
        tokens_per_call=out.stats.tokens_per_call, acceptance=out.stats.acceptance, tokens_per_second=new / seconds,
        spent_per_sequence=float(out.stats.divergence_spent.mean()),
        log_likelihood=log_likelihood(scorer, out.sequences, input_ids.shape[1]), new_tokens=new)


def plain_sampling(target, scorer, input_ids, temperature: float, max_new_tokens: int, seed: int = 0) -> DecodeResult:
    """The target alone, sampled by transformers' ``generate`` (no top-k, no end token)."""
    torch = _torch()
    from transformers import GenerationConfig

    config = GenerationConfig(do_sample=True, temperature=temperature, top_k=0, top_p=1.0, max_new_tokens=max_new_tokens,
                              min_new_tokens=max_new_tokens, pad_token_id=target.config.pad_token_id)
    torch.manual_seed(seed)
    start = time.perf_counter()
    with torch.inference_mode():
        sequences = target.generate(input_ids, attention_mask=torch.ones_like(input_ids), generation_config=config)
    seconds = time.perf_counter() - start
    new = int(sequences[:, input_ids.shape[1]:].numel())
    return DecodeResult(tokens_per_call=1.0, acceptance=np.zeros(0), tokens_per_second=new / seconds,
                        spent_per_sequence=0.0, log_likelihood=log_likelihood(scorer, sequences, input_ids.shape[1]),
                        new_tokens=new)


def teacher_forced_rows(models, tokens: np.ndarray, positions: int, context: int = 128):
    """Per model, the float64 next-token distributions at the first ``positions`` held-out positions
    (windows of ``context`` tokens, each position predicted from its true prefix in the window),
    and the true next tokens. Returns (list of arrays (positions, n), truth (positions,))."""
    torch = _torch()
    windows = -(-positions // (context - 1))
    x = torch.from_numpy(tokens[: windows * context].reshape(windows, context))
    rows = []
    with torch.inference_mode():
        for model in models:
            logits = model(x, attention_mask=torch.ones_like(x)).logits[:, :-1]
            rows.append(_softmax_rows(logits.reshape(-1, logits.shape[-1])[:positions]))
    return rows, x[:, 1:].reshape(-1)[:positions].numpy()


@dataclass(frozen=True)
class Quality:
    divergence: str
    eps: float
    ce_r: float  # nats per token
    ce_p: float
    ce_q: float
    won: float  # share of positions with r(x) > p(x) at the true token
    mean_h: float  # mean of h = log(r / p) at the true tokens: CE(p) - CE(r) by C7
    stderr: float  # standard error of that mean over positions


def quality(P: np.ndarray, Q: np.ndarray, truth: np.ndarray, eps: float, divergence) -> Quality:
    """Teacher-forced held-out quality of the mentored r at one budget."""
    r = md.mentor(P, Q, eps, divergence).r
    at = np.arange(truth.size)
    with np.errstate(divide="ignore"):
        log_r, log_p, log_q = np.log(r[at, truth]), np.log(P[at, truth]), np.log(Q[at, truth])
    h = log_r - log_p
    name = divergence if isinstance(divergence, str) else divergence.name
    return Quality(name, float(eps), float(-log_r.mean()), float(-log_p.mean()), float(-log_q.mean()),
                   float(np.mean(h > 0)), float(h.mean()), float(h.std(ddof=1) / np.sqrt(h.size)))


@dataclass(frozen=True)
class Chains:
    targets: np.ndarray  # (B, k + 1, n)
    drafts: np.ndarray  # (B, k, n)
    proposed: np.ndarray  # (B, k)


def drafted_chains(target, drafter, input_ids, k: int, temperature: float = 1.0, seed: int = 0) -> Chains:
    """The drafter proposes k tokens after each prompt (sampled at ``temperature``); the target scores
    the k + 1 positions. Distributions are float64 softmaxes at the same temperature."""
    torch = _torch()
    generator = torch.Generator().manual_seed(seed)
    ids = input_ids
    drafts, proposed = [], []
    with torch.inference_mode():
        for _ in range(k):
            q = _softmax_rows(drafter(ids, attention_mask=torch.ones_like(ids)).logits[:, -1], temperature)
            token = torch.multinomial(torch.from_numpy(q), 1, generator=generator)
            drafts.append(q)
            proposed.append(token[:, 0].numpy())
            ids = torch.cat((ids, token), 1)
        logits = target(ids, attention_mask=torch.ones_like(ids)).logits[:, -(k + 1):]
    return Chains(_softmax_rows(logits, temperature), np.stack(drafts, 1), np.stack(proposed, 1))


def chain_expectations(chains: Chains, accept: np.ndarray, divergence: np.ndarray) -> tuple[float, float]:
    """(expected tokens per call, expected divergence per call) of a rule on the drafted chains.

    ``accept`` (B, k): the probability of keeping each drafted token; ``divergence`` (B, k): the
    divergence of the distribution each position emits from. Position j is reached when every
    earlier draft was kept, and the call emits the kept drafts plus one token.
    """
    kept = np.cumprod(accept, axis=1)
    reached = np.concatenate((np.ones((accept.shape[0], 1)), kept[:, :-1]), axis=1)
    return float(np.mean(1.0 + kept.sum(1))), float(np.mean((reached * divergence).sum(1)))


def _kl_rows(r: np.ndarray, p: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(r > 0, r * np.log(r / p), 0.0).sum(-1)


def rule_on_chains(chains: Chains, rule: str, value: float) -> tuple[float, float]:
    """(tokens per call, KL per call) of one rule on the chains.

    ``"mentored"``: the kl optimum at budget ``value`` at every position; ``"flat_price"``: the kl
    optimum at price ``value`` at every position, ignoring the chain; ``"chain_price"``: the
    kl optimum at the budgets ``md.plan_chain`` sets for price ``value`` (SPEC section 10);
    ``"lenience"``: accept iff p / ((1 - value) q) >= u, residual (p - q)_+;
    ``"static_ensemble"``: speculative sampling towards value * p + (1 - value) q (transformers'
    ``assistant_ensemble_weight``).
    """
    p, q = chains.targets[:, :-1], chains.drafts
    rows, k, n = q.shape
    at = (np.arange(rows)[:, None], np.arange(k)[None, :], chains.proposed)
    if rule in ("mentored", "flat_price", "chain_price"):
        if rule == "flat_price":
            res = md.mentor(p.reshape(-1, n), q.reshape(-1, n), price=value, divergence="kl")
        else:
            budgets = md.plan_chain(chains.targets, q, value, "kl").eps if rule == "chain_price" else np.full((rows, k), value)
            res = md.mentor(p.reshape(-1, n), q.reshape(-1, n), budgets.reshape(-1), "kl")
        r, spent = res.r.reshape(p.shape), res.divergence_value.reshape(rows, k)
        return chain_expectations(chains, np.minimum(1.0, r[at] / q[at]), spent)
    if rule == "lenience":
        lenience = 1.0 - value
        emitted = np.array([[md.rules.lenience(p[b, j], q[b, j], lenience).r for j in range(k)] for b in range(rows)])
        return chain_expectations(chains, np.minimum(1.0, p[at] / (lenience * q[at])), _kl_rows(emitted, p))
    if rule == "static_ensemble":
        mixture = value * p + (1.0 - value) * q
        return chain_expectations(chains, np.minimum(1.0, mixture[at] / q[at]), _kl_rows(mixture, p))
    raise ValueError(f"unknown rule {rule!r}; valid: 'mentored', 'flat_price', 'chain_price', 'lenience', "
                     "'static_ensemble'")
