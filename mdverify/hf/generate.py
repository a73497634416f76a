"""``generate``: a batched speculative decoding loop for two causal language models of transformers.

One step, for all B sequences at once:

1. the drafter proposes k tokens, each sampled from its processed distribution q_j;
2. the target scores the k + 1 positions in one forward, giving p_1..p_{k+1};
3. ``md.verify`` keeps each sequence's drafts up to its first rejection and emits one more
   token (the residual draw or the bonus), every token distributed as its position's r (C10);
4. both KV caches are cropped after the longest accepted run.

Sequences accept different numbers of drafts, so they are kept in one (B, T) buffer with an
attention mask: a sequence's rejected drafts stay as masked columns (they cost attention but
are never attended to), and position ids count only unmasked columns. Every step appends the
same number of columns to every sequence, so the caches stay rectangular; with B = 1 there are
no masked columns at all. Prompts come left-padded, as transformers batches them.
"""

from __future__ import annotations

import inspect
import time
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from mdverify.api import _solver
from mdverify.divergences import Divergence
from mdverify.divergences import divergence as lookup
from mdverify.hf.logits import probabilities, shared_vocabulary
from mdverify.torch_adapter import backend_for, require_torch
from mdverify.validate import as_budgets, as_prices
from mdverify.verification import verify


@dataclass(frozen=True)
class GenerationStats:
    """What one ``generate`` call did.

    Attributes
    ----------
    target_calls : int
        Target forwards, one per step for the whole batch.
    sequence_steps : int
        (sequence, step) pairs verified while the sequence was still generating.
    drafted, accepted : ndarray of int64, shape (k,)
        Drafted and accepted tokens at each draft position, over those pairs.
    emitted : int
        Tokens emitted over those pairs: the accepted drafts plus one per pair.
    target_seconds, drafter_seconds, verify_seconds : float
        Wall time in the target's forwards, in the drafter's forwards and sampling, and in
        verification (probabilities and ``md.verify``).
    divergence_spent : ndarray of float64, shape (B,), or None
        With ``track_divergence``: per sequence, the sum of D_f(r_t || p_t) over the positions
        whose token it emitted (a bonus token is p's, and spends nothing). For kl its mean
        estimates the sequence-level KL(R || P) by the chain rule.
    accounting_seconds : float
        Wall time spent on ``divergence_spent`` (0 without it); not part of the decoding.
    """

    target_calls: int
    sequence_steps: int
    drafted: np.ndarray
    accepted: np.ndarray
    emitted: int
    target_seconds: float
    drafter_seconds: float
    verify_seconds: float
    divergence_spent: np.ndarray | None = None
    accounting_seconds: float = 0.0

    @property
    def acceptance(self) -> np.ndarray:
        """Share of chains whose draft at position j was accepted, shape (k,)."""
        return self.accepted / np.maximum(self.drafted, 1)

    @property
    def tokens_per_call(self) -> float:
        """Mean tokens emitted per sequence and target call."""
        return self.emitted / max(self.sequence_steps, 1)


@dataclass(frozen=True)
class GenerateOutput:
    """``sequences`` (B, L + the longest continuation): each prompt as given, its new tokens, then
    ``pad_token_id``; ``num_new_tokens`` (B,): how many new tokens each sequence has; ``stats``."""

    sequences: "torch.Tensor"  # noqa: F821
    num_new_tokens: "torch.Tensor"  # noqa: F821
    stats: GenerationStats


def _logits_processors(temperature: float, top_k: int | None, top_p: float | None):
    """transformers' own warpers, in the order its generate applies them."""
    from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    if not (np.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be a positive number, got {temperature!r}")
    processors = LogitsProcessorList()
    if temperature != 1.0:
        processors.append(TemperatureLogitsWarper(float(temperature)))
    if top_k is not None:
        processors.append(TopKLogitsWarper(_positive_int(top_k, "top_k")))
    if top_p is not None:
        if not (isinstance(top_p, (int, float)) and 0 < top_p <= 1):
            raise ValueError(f"top_p must lie in (0, 1] or be None, got {top_p!r}")
        if top_p < 1:
            processors.append(TopPLogitsWarper(float(top_p)))
    return processors


def _prompt(input_ids, attention_mask):
    """(ids, mask) as int64 tensors of shape (B, L), the mask of left-padded rows only."""
    torch = require_torch()
    if not isinstance(input_ids, torch.Tensor) or input_ids.ndim != 2 or input_ids.dtype.is_floating_point \
            or input_ids.dtype.is_complex or input_ids.dtype == torch.bool:
        shape = tuple(input_ids.shape) if hasattr(input_ids, "shape") else type(input_ids).__name__
        raise ValueError(f"input_ids must be a 2-d integer tensor (B, L), got {shape}"
                         + (f" of {input_ids.dtype}" if isinstance(input_ids, torch.Tensor) else ""))
    if input_ids.shape[0] == 0 or input_ids.shape[1] == 0:
        raise ValueError(f"input_ids must hold at least one token per sequence, got shape {tuple(input_ids.shape)}")
    if attention_mask is None:
        mask = torch.ones_like(input_ids, dtype=torch.long)
    else:
        if not isinstance(attention_mask, torch.Tensor) or attention_mask.shape != input_ids.shape:
            raise ValueError(f"attention_mask must be a tensor of input_ids' shape {tuple(input_ids.shape)}")
        if not bool(((attention_mask == 0) | (attention_mask == 1)).all()):
            raise ValueError("attention_mask must hold only 0 and 1")
        mask = attention_mask.to(device=input_ids.device, dtype=torch.long)
        steps = mask[:, 1:] - mask[:, :-1]
        if bool((steps < 0).any()) or bool((mask[:, -1] == 0).any()):
            row = int(((steps < 0).any(-1) | (mask[:, -1] == 0)).nonzero()[0, 0])
            raise ValueError(f"attention_mask row {row} is not left-padded: pad on the left "
                             "(tokenizer.padding_side = 'left'), as for transformers' generate")
    return input_ids.long(), mask


def _positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


def _output_rows(model) -> int:
    """The width of the model's logits."""
    head = model.get_output_embeddings()
    return int(head.weight.shape[0]) if head is not None else int(model.config.vocab_size)


def _cache_argument(model) -> str:
    """The name ``model``'s forward takes its KV cache by: transformers renamed ``past_key_values`` ``cache`` in 5.2x."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _forward(model, ids, mask, cache: dict, start: int, keep: int):
    """Logits of the last ``keep`` columns, feeding columns [start, T) on top of the cache.

    ``cache`` is {argument name: the model's cache} (``_cache_argument``).
    """
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=ids[:, start:], attention_mask=mask, position_ids=positions[:, start:],
                use_cache=True, logits_to_keep=keep, **cache)
    return out.logits[:, -keep:]


def _crop(cache, length: int) -> None:
    """Drop the cache's columns from ``length`` on (a negative count works across transformers versions)."""
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)


def _spent(p, q, budgets, prices, entry, method) -> np.ndarray:
    """D_f(r_j || p_j) of every drafted position, shape (B, k), at the budgets verify used."""
    from mdverify.api import mentor
    from mdverify.prices import plan_chain

    rows, k, n = q.shape
    eps = plan_chain(p, q, prices, entry).eps if prices is not None else np.repeat(budgets[:, None], k, 1)
    res = mentor(p[:, :k].reshape(-1, n), q.reshape(-1, n), eps.reshape(-1), entry, method=method)
    return res.divergence_value.reshape(rows, k)


@contextmanager
def _timed(seconds: dict, name: str, device):
    """Add the wall time of the block to ``seconds[name]``; device work is synchronised first."""
    torch = require_torch()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    yield
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds[name] += time.perf_counter() - start


def generate(target, drafter, input_ids, *, k: int, eps=None, price=None, divergence: str | Divergence = "kl",
             max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
             attention_mask=None, eos_token_id=None, seed: int | None = None, method: str = "auto",
             pad_token_id: int | None = None, track_divergence: bool = False, backend: str = "auto") -> GenerateOutput:
    """Speculative sampling with mentored verification, batched, for two causal language models.

    Parameters
    ----------
    target, drafter : transformers causal language models
        Sharing a tokenizer; output layers that differ only by padding rows are reconciled
        (the extra ids get probability 0).
    input_ids : LongTensor, shape (B, L)
        Prompts, left-padded when their lengths differ (with ``attention_mask``).
    k : int
        Drafted tokens per step.
    eps : float or array_like of shape (B,)
        Budget per sequence, :math:`D_f(r_t \\| p_t) \\le \\varepsilon` at every position;
        0 is lossless speculative sampling.
    price : float or array_like of shape (B,)
        Instead of ``eps``: one price per sequence; every step's chain takes the budgets of
        ``md.plan_chain`` at that price (SPEC section 10).
    divergence : str or Divergence
    max_new_tokens : int
    temperature, top_k, top_p
        Applied to both models' logits by transformers' own warpers, before p and q are formed.
    attention_mask : LongTensor, shape (B, L), optional
    eos_token_id : int or list of int, optional
        A sequence stops after emitting one of these.
    seed : int, optional
        Seeds the drafter's sampling and the verification's uniforms.
    method : {"auto", "sorted", "select"}
        The solver of each position's mentored distribution.
    pad_token_id : int, optional
        Fills ``sequences`` after each sequence's end (default: the first EOS id, else 0).
    track_divergence : bool
        Also solve every verified position's r with ``md.mentor`` and add up the divergence
        each sequence spends (``stats.divergence_spent``); timed apart from the decoding.
    backend : {"auto", "numba", "torch"}
        Where verification runs (``mdverify.torch_adapter``): "auto" verifies models on the
        CPU with the numba kernels and models on other devices with ``mdverify.torch_backend``,
        on their device; with ``price`` verification always runs on the numba kernels.

    Returns
    -------
    GenerateOutput
    """
    torch = require_torch()
    from transformers import DynamicCache

    from mdverify.torch_backend import verify as torch_verify

    ids, mask = _prompt(input_ids, attention_mask)
    rows = ids.shape[0]
    k = _positive_int(k, "k")
    max_new_tokens = _positive_int(max_new_tokens, "max_new_tokens")
    if (eps is None) == (price is None):
        raise ValueError("give exactly one of eps (a budget per sequence) and price (a price per sequence)")
    if isinstance(eps, torch.Tensor):
        eps = eps.detach().cpu().numpy()
    if isinstance(price, torch.Tensor):
        price = price.detach().cpu().numpy()
    budgets = None if eps is None else as_budgets(eps, (rows,))
    prices = None if price is None else as_prices(price, (rows,))
    entry = lookup(divergence)
    _solver(method, 1)
    on_device = backend_for(backend, ids) == "torch"
    if on_device and prices is not None:
        if backend == "torch":
            raise ValueError("price= is verified by the numba kernels; use backend='auto' or 'numba'")
        on_device = False
    processors = _logits_processors(temperature, top_k, top_p)
    stops = set() if eos_token_id is None else {int(t) for t in np.atleast_1d(eos_token_id)}
    pad = pad_token_id if pad_token_id is not None else (min(stops) if stops else 0)
    n = shared_vocabulary(_output_rows(target), _output_rows(drafter))
    device = ids.device
    if drafter.device != target.device or target.device != device:
        raise ValueError(f"target ({target.device}), drafter ({drafter.device}) and input_ids ({device}) "
                         "must be on one device")

    generator = torch.Generator(device=device)
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(int(seed))
    rng = np.random.default_rng(seed)

    def distribution(logits):  # (..., V) -> float64 (..., n), after the warpers
        flat = logits.reshape(-1, logits.shape[-1]).float()
        return probabilities(processors(ids[:, :0], flat), n).reshape(*logits.shape[:-1], n)

    target_cache, draft_cache = DynamicCache(), DynamicCache()
    target_kv, draft_kv = {_cache_argument(target): target_cache}, {_cache_argument(drafter): draft_cache}
    target_len = draft_len = 0
    new_tokens: list[list[int]] = [[] for _ in range(rows)]
    active = np.ones(rows, bool)
    drafted = np.zeros(k, np.int64)
    accepted_at = np.zeros(k, np.int64)
    steps = emitted = calls = 0
    seconds = {"target": 0.0, "drafter": 0.0, "verify": 0.0, "accounting": 0.0}
    spent = np.zeros(rows)
    ones = torch.ones((rows, k + 1), dtype=torch.long, device=device)

    with torch.inference_mode():
        while active.any():
            width = ids.shape[1]
            drafts = torch.empty((rows, k), dtype=torch.long, device=device)
            draft_probs = []
            with _timed(seconds, "drafter", device):
                for j in range(k):
                    grown_ids = torch.cat((ids, drafts[:, :j]), dim=1)
                    grown_mask = torch.cat((mask, ones[:, :j]), dim=1)
                    logits = _forward(drafter, grown_ids, grown_mask, draft_kv, draft_len, 1)
                    draft_len = grown_ids.shape[1]
                    q = distribution(logits[:, -1])
                    drafts[:, j] = torch.multinomial(q, 1, generator=generator)[:, 0]
                    draft_probs.append(q)
            with _timed(seconds, "target", device):
                logits = _forward(target, torch.cat((ids, drafts), 1), torch.cat((mask, ones[:, :k]), 1),
                                  target_kv, target_len, k + 1)
                target_len = width + k
                calls += 1
            with _timed(seconds, "verify", device):
                p, q = distribution(logits), torch.stack(draft_probs, dim=1)
                uniforms = rng.random((rows, k + 1, 2))
                if on_device:
                    out, accepted = (x.cpu().numpy() for x in torch_verify(p, q, drafts, budgets, entry,
                                                                          uniforms=uniforms))
                else:
                    p, q = p.cpu().numpy(), q.cpu().numpy()
                    out, accepted = verify(p, q, drafts.cpu().numpy(), budgets, entry, uniforms=uniforms,
                                           method=method, price=prices)
            if track_divergence:
                with _timed(seconds, "accounting", device):
                    position_divergence = _spent(*(x.cpu().numpy() if on_device else x for x in (p, q)), budgets,
                                                 prices, entry, method)

            for b in np.flatnonzero(active):
                steps += 1
                emitted += int(accepted[b]) + 1
                drafted += 1
                accepted_at[: accepted[b]] += 1
                for j, token in enumerate(out[b, : accepted[b] + 1].tolist()):
                    new_tokens[b].append(token)
                    if track_divergence and j < k:
                        spent[b] += position_divergence[b, j]
                    if token in stops or len(new_tokens[b]) == max_new_tokens:
                        active[b] = False
                        break

            # Keep the longest accepted run of a live sequence; shorter runs are masked columns.
            longest = int(accepted[active].max()) if active.any() else 0
            kept = torch.arange(longest, device=device)[None, :] < torch.as_tensor(accepted, device=device)[:, None]
            last = torch.as_tensor(out[np.arange(rows), accepted], device=device)[:, None]
            ids = torch.cat((ids, drafts[:, :longest], last), dim=1)
            mask = torch.cat((mask, kept.long(), ones[:, :1]), dim=1)
            target_len = min(target_len, width + longest)
            draft_len = min(draft_len, width + longest)
            _crop(target_cache, target_len)
            _crop(draft_cache, draft_len)

    prompt = input_ids.shape[1]
    longest = max(len(tokens) for tokens in new_tokens)
    sequences = torch.full((rows, prompt + longest), pad, dtype=torch.long, device=device)
    sequences[:, :prompt] = input_ids
    for b, tokens in enumerate(new_tokens):
        sequences[b, prompt: prompt + len(tokens)] = torch.as_tensor(tokens, dtype=torch.long)
    stats = GenerationStats(
        target_calls=calls, sequence_steps=steps, drafted=drafted, accepted=accepted_at, emitted=emitted,
        target_seconds=seconds["target"], drafter_seconds=seconds["drafter"],
        verify_seconds=seconds["verify"], divergence_spent=spent if track_divergence else None,
        accounting_seconds=seconds["accounting"],
    )
    num_new = torch.as_tensor([len(tokens) for tokens in new_tokens], dtype=torch.long, device=device)
    return GenerateOutput(sequences=sequences, num_new_tokens=num_new, stats=stats)
