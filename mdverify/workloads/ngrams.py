"""Word-level n-gram language models on text that ships with CPython (SPEC section 7).

The corpus is ``pydoc_data.topics`` (the language reference behind ``help()``) plus the
docstrings of a fixed list of standard-library modules, so nothing is downloaded and the
text is the same on every machine with the same Python. Documents are split into training
and held-out sets by a fixed rule (every tenth, in sorted order, is held out).

Models use interpolated Witten-Bell smoothing down to an add-one unigram, so every word of
the vocabulary but the boundary marker <s> (which only conditions) has positive probability,
and the marker has exactly 0 in both models; the target is a higher-order model and the drafter
a lower-order one over the same vocabulary. ``distribution(context)`` returns a float64
vector over the vocabulary that sums to 1.
"""

from __future__ import annotations

import ast
import importlib
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

#: Standard-library modules whose docstrings join the corpus (pure Python, always present).
MODULES = (
    "argparse", "collections", "contextlib", "csv", "dataclasses", "datetime", "decimal", "difflib",
    "email", "fractions", "functools", "heapq", "http.client", "inspect", "json", "logging", "pathlib",
    "pickle", "queue", "random", "shutil", "statistics", "string", "subprocess", "tarfile", "textwrap",
    "threading", "unittest", "urllib.parse", "zipfile",
)
UNKNOWN = "<unk>"
BOUNDARY = "<s>"
_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?|[0-9]+|[.,;:()?!]")


def tokenize(text: str) -> list[str]:
    """Lower-cased words, numbers and sentence punctuation (markup characters are dropped)."""
    return _WORD.findall(text.lower())


def _docstrings(module) -> list[str]:
    """Docstrings of the functions and classes that the module's own source defines, by name.

    Read from the source file rather than from the live module, so that the corpus does not
    depend on what else the process imported (PyTorch, for one, replaces ``inspect.getfile``).
    """
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    defined = [node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    return [doc for node in sorted(defined, key=lambda node: node.name) if (doc := ast.get_docstring(node))]


@lru_cache(maxsize=1)
def documents() -> tuple[tuple[str, ...], ...]:
    """The corpus as token sequences, one per document, in a fixed order."""
    from pydoc_data.topics import topics

    texts = [topics[key] for key in sorted(topics)]
    for name in MODULES:
        module = importlib.import_module(name)
        texts += _docstrings(module)
        if module.__doc__:
            texts.append(module.__doc__)
    return tuple(tuple(tokenize(text)) for text in texts if text)


def split() -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
    """(training, held-out) documents: every tenth document is held out."""
    docs = documents()
    return [d for i, d in enumerate(docs) if i % 10 != 9], [d for i, d in enumerate(docs) if i % 10 == 9]


@dataclass(frozen=True)
class Vocabulary:
    words: tuple[str, ...]
    index: dict

    def ids(self, tokens) -> np.ndarray:
        unknown = self.index[UNKNOWN]
        return np.array([self.index.get(t, unknown) for t in tokens], np.int64)


def vocabulary(training, size: int = 3000) -> Vocabulary:
    """The ``size - 2`` most frequent training words (ties by word), plus <unk> and <s>."""
    counts = Counter(token for doc in training for token in doc)
    common = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[: size - 2]
    words = (BOUNDARY, UNKNOWN) + tuple(word for word, _ in common)
    return Vocabulary(words=words, index={word: i for i, word in enumerate(words)})


class NGramModel:
    """Interpolated Witten-Bell n-gram model over a fixed vocabulary.

    ``backoff`` scales the weight given to the lower orders: 1 is Witten-Bell, and smaller
    values under-smooth (the estimate of a seen context trusts its own counts more).
    """

    def __init__(self, order: int, vocab: Vocabulary, training, backoff: float = 1.0):
        if order < 1:
            raise ValueError(f"an n-gram model needs order >= 1, got {order}")
        if not backoff > 0:
            raise ValueError(f"backoff must be positive, got {backoff}")
        self.order = order
        self.backoff = float(backoff)
        self.vocab = vocab
        size = len(vocab.words)
        # counts[k][context of length k] = Counter of next-word ids
        self.counts = [defaultdict(Counter) for _ in range(order)]
        unigram = np.ones(size)
        for doc in training:
            ids = np.concatenate(([vocab.index[BOUNDARY]] * (order - 1), vocab.ids(doc)))
            for pos in range(order - 1, len(ids)):
                word = int(ids[pos])
                unigram[word] += 1
                for k in range(1, order):
                    self.counts[k][tuple(ids[pos - k:pos].tolist())][word] += 1
        unigram[vocab.index[BOUNDARY]] = 0.0  # <s> only ever conditions, it is never predicted
        self.unigram = unigram / unigram.sum()

    def distribution(self, context) -> np.ndarray:
        """P(next word | the last order - 1 ids of ``context``), a vector over the vocabulary."""
        context = [int(i) for i in context][-(self.order - 1):] if self.order > 1 else []
        context = [self.vocab.index[BOUNDARY]] * (self.order - 1 - len(context)) + context
        probs = self.unigram.copy()
        for k in range(1, self.order):
            seen = self.counts[k].get(tuple(context[len(context) - k:]))
            if not seen:
                continue
            ids = np.fromiter(seen.keys(), np.int64, len(seen))
            counts = np.fromiter(seen.values(), np.float64, len(seen))
            total, types = counts.sum(), self.backoff * len(seen)
            probs = probs * (types / (total + types))
            probs[ids] += counts / (total + types)
        return probs / probs.sum()

    def cross_entropy(self, documents) -> float:
        """Mean negative log-likelihood per token (nats) of the documents."""
        total, count = 0.0, 0
        for doc in documents:
            ids = self.vocab.ids(doc)
            for pos in range(len(ids)):
                total -= np.log(self.distribution(ids[:pos])[ids[pos]])
                count += 1
        return total / count


@lru_cache(maxsize=4)
def target_and_drafter(vocab_size: int = 3000, target_order: int = 3, drafter_order: int = 2,
                       target_backoff: float = 1.0):
    """(vocabulary, target, drafter, held-out documents) trained on the fixed split."""
    training, held_out = split()
    vocab = vocabulary(training, vocab_size)
    target = NGramModel(target_order, vocab, training, target_backoff)
    return vocab, target, NGramModel(drafter_order, vocab, training), held_out
