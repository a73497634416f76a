"""One step of ``mdverify.hf.generate``, split into target, drafter and verification time.

Random-weight GPT-2 models stand in for a real pair (the time of a forward does not depend on
the weights): a target of 4 layers of width 256 and a drafter of 1 layer of width 128, both
with the full output layer of the vocabulary, which is what makes a 128k vocabulary costly.
Beside the step, one softmax over the same (B, k + 1, n) float32 logits is timed, the least a
sampling decoder does per position; the verification's time per position is set against it.
"""

from __future__ import annotations

from dataclasses import dataclass

from mdverify.bench.run import seconds

K = 4
PROMPT = 32


@dataclass(frozen=True)
class StepTiming:
    vocab: int
    batch: int
    steps: int
    target_ms: float  # per step
    drafter_ms: float
    verify_ms: float
    softmax_us_per_position: float
    verify_us_per_position: float

    @property
    def verify_share(self) -> float:
        return self.verify_ms / (self.target_ms + self.drafter_ms + self.verify_ms)


def random_pair(vocab: int, seed: int = 0):
    """(target, drafter): random-weight GPT-2 models sharing a vocabulary of ``vocab`` ids."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    models = []
    for layers, width in ((4, 256), (1, 128)):
        config = GPT2Config(vocab_size=vocab, n_positions=512, n_embd=width, n_layer=layers, n_head=4,
                            bos_token_id=0, eos_token_id=0)
        models.append(GPT2LMHeadModel(config).eval())
    return tuple(models)


def step_timing(vocab: int, batch: int, eps: float = 0.1, divergence: str = "kl", steps: int = 4,
                seed: int = 0) -> StepTiming:
    """Mean time per step of ``generate`` over at least ``steps`` steps, after a warm-up call."""
    import torch

    from mdverify.hf import generate

    target, drafter = random_pair(vocab, seed)
    ids = torch.randint(vocab, (batch, PROMPT), generator=torch.Generator().manual_seed(seed))
    generate(target, drafter, ids, k=K, eps=eps, divergence=divergence, max_new_tokens=K + 1, seed=seed)
    # A step emits at most K + 1 tokens per sequence, so this runs at least `steps` steps.
    stats = generate(target, drafter, ids, k=K, eps=eps, divergence=divergence, max_new_tokens=steps * (K + 1),
                     seed=seed + 1).stats
    calls = stats.target_calls
    logits = torch.randn((batch, K + 1, vocab))
    softmax = seconds(lambda: torch.softmax(logits, dim=-1))
    positions = calls * batch * (K + 1)
    return StepTiming(
        vocab=vocab, batch=batch, steps=calls,
        target_ms=1e3 * stats.target_seconds / calls, drafter_ms=1e3 * stats.drafter_seconds / calls,
        verify_ms=1e3 * stats.verify_seconds / calls,
        softmax_us_per_position=1e6 * softmax / (batch * (K + 1)),
        verify_us_per_position=1e6 * stats.verify_seconds / positions,
    )


def step_table(quick: bool = False) -> list[StepTiming]:
    """B in {1, 8} and vocabularies of 32k and 128k (quick: 32k only), k = 4."""
    vocabularies = (32768,) if quick else (32768, 131072)
    return [step_timing(vocab, batch) for vocab in vocabularies for batch in (1, 8)]


def markdown(timings: list[StepTiming]) -> str:
    header = ["vocabulary", "B", "steps timed", "target ms/step", "drafter ms/step", "verification ms/step",
              "verification share", "verification us/position", "softmax us/position", "ratio"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for t in timings:
        cells = [f"{t.vocab}", f"{t.batch}", f"{t.steps}", f"{t.target_ms:.1f}", f"{t.drafter_ms:.1f}",
                 f"{t.verify_ms:.1f}", f"{100 * t.verify_share:.0f}%", f"{t.verify_us_per_position:.0f}",
                 f"{t.softmax_us_per_position:.0f}", f"{t.verify_us_per_position / t.softmax_us_per_position:.1f}x"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)

