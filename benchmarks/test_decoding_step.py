"""pytest-benchmark of one ``mdverify.hf.generate`` step (k = 4) against one softmax over its logits.

``pytest benchmarks/test_decoding_step.py``; the report's decoders section splits the same step
into target, drafter and verification time (``mdverify.bench.decoders``).
"""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from mdverify.bench.decoders import K, PROMPT, random_pair  # noqa: E402
from mdverify.hf import generate  # noqa: E402


@pytest.fixture(scope="module", params=[32768, 131072], ids=lambda n: f"n={n}")
def pair(request):
    return request.param, random_pair(request.param)


@pytest.mark.parametrize("batch", [1, 8])
@pytest.mark.parametrize("what", ["generate step", "softmax"])
def test_step(benchmark, pair, batch, what):
    vocab, (target, drafter) = pair
    benchmark.group = f"n={vocab}, B={batch}"
    ids = torch.randint(vocab, (batch, PROMPT), generator=torch.Generator().manual_seed(0))
    logits = torch.randn((batch, K + 1, vocab))
    calls = {
        # max_new_tokens = 1: exactly one step (the prompt's prefill included).
        "generate step": lambda: generate(target, drafter, ids, k=K, eps=0.1, max_new_tokens=1, seed=0),
        "softmax": lambda: torch.softmax(logits, dim=-1),
    }
    benchmark(calls[what])
