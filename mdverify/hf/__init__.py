"""Mentored verification inside Hugging Face transformers (SPEC section 11).

Two entry points, both exact (every emitted token is distributed as its position's mentored
r, SPEC C10):

- :func:`mentored_sampling`, a context manager inside which ``model.generate(...,
  assistant_model=drafter, do_sample=True)`` verifies each drafted chain with the mentored
  distributions, computed from the very logits transformers verifies with;
- :func:`generate`, a batched speculative loop of its own, with KV caches, per-sequence
  budgets and stopping.

Needs the ``torch`` extra: ``pip install "mdverify[torch]"``.
"""

from mdverify.hf.generate import GenerateOutput, GenerationStats, generate
from mdverify.hf.sampling import mentored_sampling

__all__ = ["GenerateOutput", "GenerationStats", "generate", "mentored_sampling"]
