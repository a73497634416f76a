"""The committed neural pair (``workloads.neural``) and the measurements made on it.

Nothing here trains a model: the tests load the committed files, check their sums, and
generate a few tokens.
"""

import shutil

import numpy as np
import pytest

import mdverify as md

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from mdverify.hf import generate  # noqa: E402
from mdverify.workloads import neural  # noqa: E402
from mdverify.workloads import neural_decoding as nd  # noqa: E402


@pytest.fixture(scope="module")
def pair():
    return neural.load_pair("final")


@pytest.fixture(scope="module")
def tokens():
    return neural.held_out_tokens()


def test_pair_loads_checked_and_generates(pair, tokens):
    tokenizer, target, drafter = pair
    vocab = tokenizer.get_vocab_size()
    count = lambda model: sum(p.numel() for p in model.parameters())  # noqa: E731
    assert 2e6 < count(target) < 6e6 and 6 < count(target) / count(drafter) < 14
    assert target.config.vocab_size == drafter.config.vocab_size == vocab
    assert tokens.dtype == np.int64 and tokens.size > 10_000 and 0 <= tokens.min() and tokens.max() < vocab
    prompt = torch.from_numpy(tokens[None, 100:140])
    out = generate(target, drafter, prompt, k=3, eps=0.1, max_new_tokens=8, seed=0)
    assert int(out.num_new_tokens[0]) == 8
    assert torch.equal(out.sequences[0, :40], prompt[0])
    assert isinstance(tokenizer.decode(out.sequences[0, 40:].tolist()), str)


def test_early_checkpoint_differs_and_is_worse(pair, tokens):
    _, early, _ = neural.load_pair("early")
    windows = tokens[: 4 * 128].reshape(4, 128)
    assert neural.held_out_loss(early, windows) > neural.held_out_loss(pair[1], windows) + 0.1


def test_a_file_that_fails_its_sum_is_refused(tmp_path):
    folder = tmp_path / "pair"
    shutil.copytree(neural.PAIR_DIR, folder)
    data = bytearray((folder / "drafter.safetensors").read_bytes())
    data[-1] ^= 1
    (folder / "drafter.safetensors").write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"drafter\.safetensors fails its sha256 sum.*python -m mdverify\.workloads\.neural"):
        neural.load_pair("final", folder)
    (folder / neural.SUMS).unlink()
    with pytest.raises(ValueError, match="the neural pair is missing"):
        neural.held_out_tokens(folder)


def test_unknown_checkpoint_is_refused():
    with pytest.raises(ValueError, match="'final' or 'early'"):
        neural.load_pair("middle")


def test_chain_expectations_by_hand():
    chains = nd.Chains(np.zeros((1, 3, 2)), np.zeros((1, 2, 2)), np.zeros((1, 2), np.int64))
    tokens, spent = nd.chain_expectations(chains, np.array([[0.5, 0.4]]), np.array([[0.1, 0.2]]))
    assert tokens == pytest.approx(1 + 0.5 + 0.5 * 0.4) and spent == pytest.approx(0.1 + 0.5 * 0.2)


@pytest.fixture(scope="module")
def chains(pair, tokens):
    _, target, drafter = pair
    return nd.drafted_chains(target, drafter, nd.prompts(tokens, 16, 32, seed=3), k=3, seed=3)


def test_lossless_settings_of_every_rule_agree(chains):
    lossless = [nd.rule_on_chains(chains, rule, value)
                for rule, value in (("mentored", 0.0), ("lenience", 0.0), ("static_ensemble", 1.0))]
    for tokens_per_call, spent in lossless:
        assert tokens_per_call == pytest.approx(lossless[0][0], abs=1e-12) and spent == pytest.approx(0.0, abs=1e-12)
    exact = 1 + np.cumprod(np.minimum(1, chains.targets[:, :-1] / chains.drafts)[
        np.arange(16)[:, None], np.arange(3), chains.proposed], axis=1).sum(1).mean()
    assert lossless[0][0] == pytest.approx(exact, rel=1e-12)


def test_mentored_rules_spend_more_for_more_tokens(chains):
    sweeps = [[nd.rule_on_chains(chains, rule, v) for v in values]
              for rule, values in (("mentored", (0.01, 0.1, 1.0)), ("chain_price", (100.0, 10.0, 1.0)))]
    for sweep in sweeps:
        tokens_per_call, spent = np.array(sweep).T
        assert np.all(np.diff(tokens_per_call) > 0) and np.all(np.diff(spent) > 0)
    with pytest.raises(ValueError, match="unknown rule"):
        nd.rule_on_chains(chains, "greedy", 0.1)


def test_teacher_forced_quality(pair, tokens):
    _, target, drafter = pair
    (P, Q), truth = nd.teacher_forced_rows([target, drafter], tokens, 300)
    assert P.shape == Q.shape == (300, target.config.vocab_size) and truth.shape == (300,)
    assert np.allclose(P.sum(-1), 1, atol=1e-12)
    assert np.array_equal(truth, tokens[: 3 * 128].reshape(3, 128)[:, 1:].reshape(-1)[:300])
    lossless = nd.quality(P, Q, truth, 0.0, "kl")
    assert lossless.ce_r == pytest.approx(lossless.ce_p, abs=1e-12) and lossless.mean_h == pytest.approx(0, abs=1e-12)
    moved = nd.quality(P, Q, truth, 0.5, md.divergence("hellinger"))
    assert moved.divergence == "hellinger"
    assert moved.ce_p - moved.ce_r == pytest.approx(moved.mean_h, abs=1e-10)  # C7 at the observed tokens
