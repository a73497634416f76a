"""The n-gram target/drafter pair on CPython's own text."""

import numpy as np

import mdverify as md
from mdverify.workloads.ngrams import BOUNDARY, split, target_and_drafter, tokenize


def test_split_is_fixed_and_disjoint():
    training, held_out = split()
    assert len(training) > 5 * len(held_out) > 0
    assert sum(map(len, held_out)) > 5000
    assert split() == (training, held_out)
    assert tokenize("The `value` of x, (twice)!") == ["the", "value", "of", "x", ",", "(", "twice", ")", "!"]


def test_models_give_distributions_and_the_target_fits_better():
    vocab, target, drafter, held_out = target_and_drafter()
    rng = np.random.default_rng(0)
    for doc in held_out[:5]:
        ids = vocab.ids(doc)
        for pos in rng.integers(0, len(ids), size=5):
            for model in (target, drafter):
                d = model.distribution(ids[:pos])
                assert abs(d.sum() - 1) < 1e-12
                assert d[vocab.index[BOUNDARY]] == 0 and (np.delete(d, vocab.index[BOUNDARY]) > 0).all()
    sample = held_out[:15]
    assert target.cross_entropy(sample) < drafter.cross_entropy(sample)


def test_mentor_runs_on_model_rows():
    vocab, target, drafter, held_out = target_and_drafter()
    ids = vocab.ids(held_out[0])
    p = np.stack([target.distribution(ids[:k]) for k in range(1, 6)])
    q = np.stack([drafter.distribution(ids[:k]) for k in range(1, 6)])
    res = md.mentor(p, q, 0.05, "kl")
    assert (res.acceptance >= np.minimum(p, q).sum(-1) - 1e-12).all()


def test_the_corpus_does_not_depend_on_what_the_process_imported():
    import subprocess
    import sys

    # PyTorch replaces inspect.getfile when imported; the corpus is read from source files.
    code = ("import hashlib\n{}\nfrom mdverify.workloads.ngrams import documents\n"
            "print(hashlib.sha256(repr(documents()).encode()).hexdigest())")
    digests = {subprocess.run([sys.executable, "-c", code.format(first)], capture_output=True, text=True,
                              check=True).stdout for first in ("import torch", "pass")}
    assert len(digests) == 1
