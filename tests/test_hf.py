"""mdverify.hf: mentored verification inside transformers, on tiny GPT-2 models with random weights.

Distribution tests are chi-square tests at fixed seeds against exact distributions computed
from the models' own forwards and ``md.mentor``; each also fails against a wrong
distribution, so it has power.
"""

import inspect

import numpy as np
import pytest
from scipy.stats import chisquare

import mdverify as md

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402
from transformers.generation import utils as generation_utils  # noqa: E402

from mdverify.hf import generate, mentored_sampling  # noqa: E402
from mdverify.hf.sampling import mentored_speculative_sampling  # noqa: E402

VOCAB = 12
PROMPT = [3, 4, 5]


def tiny_model(layers: int, width: int, seed: int, vocab: int = VOCAB, scale: float = 5.0):
    """A GPT-2 built from a config, weights scaled up so that its distributions are far from uniform."""
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=vocab, n_positions=64, n_embd=width, n_layer=layers, n_head=2,
                        bos_token_id=0, eos_token_id=1, pad_token_id=0)
    model = GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        for weight in model.parameters():
            weight.mul_(scale)
    return model


@pytest.fixture(scope="module")
def pair():
    return tiny_model(2, 32, seed=0), tiny_model(1, 16, seed=1)


def next_distribution(model, context, temperature=1.0, top_k=None):
    """The processed next-token distribution after ``context`` (a list of ids), float64, no cache."""
    with torch.no_grad():
        logits = model(torch.tensor([context])).logits[0, -1, :VOCAB].double() / temperature
    if top_k is not None:
        logits[logits < torch.topk(logits, top_k).values[-1]] = -torch.inf
    return logits.softmax(-1).numpy()


def pvalue(counts, probs):
    """Chi-square p-value of ``counts`` against ``probs``, cells expected below 5 pooled into one."""
    counts, expected = np.ravel(counts).astype(float), np.ravel(probs) * np.sum(counts)
    small = expected < 5
    if small.any():
        counts = np.append(counts[~small], counts[small].sum())
        expected = np.append(expected[~small], expected[small].sum())
    keep = expected > 0
    assert counts[~keep].sum() == 0, "a draw fell where the distribution is 0"
    return chisquare(counts[keep], expected[keep]).pvalue


def mentored_chain(target, drafter, context, eps, divergence, steps, **processing):
    """Exact joint distribution of the next ``steps`` emitted tokens: prod_t r_t(x_t | x_<t) (C10)."""
    first = md.mentor(next_distribution(target, context, **processing),
                      next_distribution(drafter, context, **processing), eps, divergence).r
    if steps == 1:
        return first
    joint = np.zeros((VOCAB, VOCAB))
    for x in range(VOCAB):
        if first[x] > 0:
            r = md.mentor(next_distribution(target, context + [x], **processing),
                          next_distribution(drafter, context + [x], **processing), eps, divergence).r
            joint[x] = first[x] * r
    return joint


# ---- the replacement of transformers' _speculative_sampling, on fixed logits -------------------


def fixed_logits(k=3, seed=7):
    generator = torch.Generator().manual_seed(seed)
    draft = 2.5 * torch.randn((1, k, VOCAB), generator=generator)
    target = 2.5 * torch.randn((1, k + 1, VOCAB), generator=generator)
    return draft, target


def run_verifier(function, draws, k=3, seed=11):
    """First emitted token and n_matches over ``draws`` calls, drafts drawn from q each call."""
    draft_logits, target_logits = fixed_logits(k)
    q = draft_logits.softmax(-1)[0]
    torch.manual_seed(seed)
    firsts, matches = np.empty(draws, np.int64), np.empty(draws, np.int64)
    prompt = torch.tensor([[2, 3]])
    for i in range(draws):
        drafted = torch.multinomial(q, 1).T
        valid, n = function(torch.cat((prompt, drafted), 1), draft_logits, k, target_logits)
        assert valid.shape == (1, int(n) + 1) and n.ndim == 0
        assert torch.equal(valid[0, :n], drafted[0, :n])
        firsts[i], matches[i] = valid[0, 0], n
    return firsts, matches


def exact_lossless(k=3, r=None):
    """First-token law and P(n_matches = j) for chains verified against rows ``r`` (default: p)."""
    draft_logits, target_logits = fixed_logits(k)
    q = draft_logits.softmax(-1)[0].double().numpy()
    p = target_logits.softmax(-1)[0].double().numpy()
    r = p[:k] if r is None else r
    acceptance = np.minimum(r, q).sum(-1)
    reach = np.concatenate(([1.0], np.cumprod(acceptance)))
    matches = reach[:-1] * (1 - acceptance)
    return r[0], np.append(matches, reach[-1])


def test_the_replacement_at_eps_zero_is_transformers_lossless_rule():
    draws = 6000
    ours = run_verifier(mentored_speculative_sampling(0.0, md.divergence("kl"), "auto"), draws)
    theirs = run_verifier(generation_utils._speculative_sampling, draws)
    first, matches = exact_lossless()
    for name, (firsts, n) in {"mdverify": ours, "transformers": theirs}.items():
        assert pvalue(np.bincount(firsts, minlength=VOCAB), first) > 1e-3, name
        assert pvalue(np.bincount(n, minlength=4), matches) > 1e-3, name


@pytest.mark.parametrize("divergence, eps, backend", [("kl", 0.3, "auto"), ("reverse_kl", 0.3, "auto"),
                                                      ("hellinger", 0.05, "auto"), ("kl", 0.3, "torch")])
def test_the_replacement_emits_the_mentored_distribution(divergence, eps, backend):
    draws = 6000
    draft_logits, target_logits = fixed_logits()
    q = draft_logits.softmax(-1)[0].double().numpy()
    p = target_logits.softmax(-1)[0].double().numpy()
    r = md.mentor(p[:3], q, eps, divergence).r
    firsts, n = run_verifier(mentored_speculative_sampling(eps, md.divergence(divergence), "auto", backend), draws)
    first, matches = exact_lossless(r=r)
    assert pvalue(np.bincount(firsts, minlength=VOCAB), first) > 1e-3
    assert pvalue(np.bincount(n, minlength=4), matches) > 1e-3
    assert pvalue(np.bincount(n, minlength=4), exact_lossless()[1]) < 1e-6  # power: not lossless


def test_inside_generate_the_first_token_follows_r(pair):
    target, drafter = pair
    draws, eps = 600, 0.4
    counts = np.zeros(VOCAB, np.int64)
    torch.manual_seed(3)
    with mentored_sampling(eps, "kl"):
        for _ in range(draws):
            out = target.generate(torch.tensor([PROMPT]), assistant_model=drafter, do_sample=True,
                                  max_new_tokens=2, pad_token_id=0)
            counts[out[0, len(PROMPT)]] += 1
    r = mentored_chain(target, drafter, PROMPT, eps, "kl", steps=1)
    assert pvalue(counts, r) > 1e-3
    assert pvalue(counts, next_distribution(target, PROMPT)) < 1e-6  # power: r is not p here


def test_the_original_is_back_after_an_exception(pair):
    original = generation_utils._speculative_sampling
    decoding = generation_utils.GenerationMixin._assisted_decoding
    with pytest.raises(KeyError):
        with mentored_sampling(0.1, "kl"):
            assert generation_utils._speculative_sampling is not original
            raise KeyError("inside")
    assert generation_utils._speculative_sampling is original
    assert generation_utils.GenerationMixin._assisted_decoding is decoding


def test_greedy_generation_inside_the_context_warns(pair):
    target, drafter = pair
    with mentored_sampling(0.1, "kl"), pytest.warns(UserWarning, match="needs sampling"):
        target.generate(torch.tensor([PROMPT]), assistant_model=drafter, do_sample=False, max_new_tokens=3,
                        pad_token_id=0)


def test_an_unknown_transformers_is_refused(monkeypatch):
    monkeypatch.setattr("transformers.__version__", "5.13.0")  # the module as imported now
    with pytest.raises(RuntimeError, match="found 5.13.0"):
        with mentored_sampling(0.1):
            pass
    monkeypatch.setattr("transformers.__version__", "5.99.0")

    def other(candidate_input_ids, candidate_logits, candidate_length, new_logits):
        raise AssertionError("never called")

    monkeypatch.setattr(generation_utils, "_speculative_sampling", other)
    with pytest.raises(RuntimeError, match="5.99.0's _speculative_sampling takes"):
        with mentored_sampling(0.1):
            pass
    monkeypatch.delattr(generation_utils, "_speculative_sampling")
    with pytest.raises(RuntimeError, match="5.99.0 has no"):
        with mentored_sampling(0.1):
            pass


def test_the_ensemble_weight_is_refused_inside_the_context():
    function = mentored_speculative_sampling(0.1, md.divergence("kl"), "auto")
    draft, target = fixed_logits()
    with pytest.raises(ValueError, match="assistant_ensemble_weight"):
        function(torch.tensor([[1, 2, 3, 4]]), draft, 3, target, assistant_ensemble_weight=0.5)
    assert tuple(inspect.signature(function).parameters) == tuple(
        inspect.signature(generation_utils._speculative_sampling).parameters)


# ---- mdverify.hf.generate ------------------------------------------------------------------


def first_two(out, prompt_length):
    return out.sequences[:, prompt_length].numpy(), out.sequences[:, prompt_length + 1].numpy()


def test_generate_at_eps_zero_samples_the_target(pair):
    target, drafter = pair
    rows = 3000
    processing = {"temperature": 0.8, "top_k": 8}
    out = generate(target, drafter, torch.tensor([PROMPT] * rows), k=2, eps=0.0, max_new_tokens=2, seed=5,
                   **processing)
    assert (out.num_new_tokens == 2).all()
    x1, x2 = first_two(out, len(PROMPT))
    counts = np.zeros((VOCAB, VOCAB))
    np.add.at(counts, (x1, x2), 1)
    joint = mentored_chain(target, drafter, PROMPT, 0.0, "kl", steps=2, **processing)
    p1 = next_distribution(target, PROMPT, **processing)
    assert np.allclose(joint.sum(1), p1)  # eps = 0: the chain of r is the target's own
    assert pvalue(counts, joint) > 1e-3
    plain = mentored_chain(target, drafter, PROMPT, 0.0, "kl", steps=2)  # power: without the warpers
    assert pvalue(counts, plain) < 1e-6


@pytest.mark.parametrize("divergence, eps, backend", [("kl", 0.3, "auto"), ("reverse_kl", 0.3, "auto"),
                                                      ("hellinger", 0.05, "auto"), ("reverse_kl", 0.3, "torch")])
def test_generate_emits_the_mentored_distribution(pair, divergence, eps, backend):
    target, drafter = pair
    rows = 2000
    out = generate(target, drafter, torch.tensor([PROMPT] * rows), k=3, eps=eps, divergence=divergence,
                   max_new_tokens=1, seed=6, backend=backend)
    x1 = out.sequences[:, len(PROMPT)].numpy()
    r = mentored_chain(target, drafter, PROMPT, eps, divergence, steps=1)
    assert pvalue(np.bincount(x1, minlength=VOCAB), r) > 1e-3
    assert pvalue(np.bincount(x1, minlength=VOCAB), next_distribution(target, PROMPT)) < 1e-6


def test_a_sequence_in_a_batch_behaves_as_alone(pair):
    """Two groups, other prompt lengths (left padding) and other budgets, in one batch.

    Later steps run with masked columns where the groups' chains were rejected at different
    positions; each group's first two tokens must still follow its own chain of r exactly.
    """
    target, drafter = pair
    rows = 2000
    short, long = [7, 2], [3, 4, 5, 9, 10]
    ids = torch.tensor([[0] * 3 + short] * rows + [long] * rows)
    mask = torch.tensor([[0] * 3 + [1] * 2] * rows + [[1] * 5] * rows)
    eps = np.repeat([0.5, 0.02], rows)
    out = generate(target, drafter, ids, attention_mask=mask, k=2, eps=eps, divergence="kl", max_new_tokens=4,
                   seed=8)
    x1, x2 = first_two(out, 5)
    for group, (prompt, budget) in enumerate(((short, 0.5), (long, 0.02))):
        rows_of = slice(group * rows, (group + 1) * rows)
        counts = np.zeros((VOCAB, VOCAB))
        np.add.at(counts, (x1[rows_of], x2[rows_of]), 1)
        assert pvalue(counts, mentored_chain(target, drafter, prompt, budget, "kl", steps=2)) > 1e-3, group
    assert torch.equal(out.sequences[:, :5], ids)
    stats = out.stats
    assert stats.target_calls >= 2 and stats.sequence_steps >= 2 * rows
    assert stats.drafted.shape == (2,) and (stats.accepted <= stats.drafted).all()
    assert stats.tokens_per_call == pytest.approx(stats.emitted / stats.sequence_steps)


def test_the_same_model_as_drafter_accepts_every_draft(pair):
    """p = q at every position: nothing is rejected, whatever the caches hold (a check of the cropping)."""
    target, _ = pair
    ids = torch.tensor([[0, 0, 3, 4], [5, 6, 7, 8]])
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    out = generate(target, target, ids, attention_mask=mask, k=3, eps=0.0, max_new_tokens=12, seed=1)
    assert out.stats.tokens_per_call == pytest.approx(4.0)
    assert (out.stats.accepted == out.stats.drafted).all()


def test_stopping_at_eos_and_padding(pair):
    target, drafter = pair
    out = generate(target, drafter, torch.tensor([PROMPT] * 64), k=3, eps=0.2, max_new_tokens=9, seed=4,
                   eos_token_id=[1, 2], pad_token_id=11)
    for row, count in zip(out.sequences, out.num_new_tokens.tolist()):
        new = row[len(PROMPT):].tolist()
        assert 1 <= count <= 9
        assert not set(new[: count - 1]) & {1, 2}  # nothing emitted after a stop token
        assert count == 9 or new[count - 1] in (1, 2)
        assert set(new[count:]) <= {11}


def test_vocabularies_that_differ_by_padding_rows(pair):
    target, _ = pair
    padded = tiny_model(1, 16, seed=1, vocab=VOCAB + 5)
    rows = 2000
    out = generate(target, padded, torch.tensor([PROMPT] * rows), k=2, eps=0.0, max_new_tokens=1, seed=9)
    x1 = out.sequences[:, len(PROMPT)].numpy()
    assert x1.max() < VOCAB
    assert pvalue(np.bincount(x1, minlength=VOCAB), next_distribution(target, PROMPT)) > 1e-3
    unrelated = tiny_model(1, 16, seed=1, vocab=400)
    with pytest.raises(ValueError, match="target scores 12 tokens and the drafter 400"):
        generate(target, unrelated, torch.tensor([PROMPT]), k=2, eps=0.1, max_new_tokens=2)


@pytest.mark.parametrize("change, message", [
    ({"k": 0}, "k must be an integer >= 1"),
    ({"eps": [0.1, 0.2, 0.3]}, "does not broadcast"),
    ({"eps": -1.0}, "budgets must be >= 0"),
    ({"input_ids": torch.tensor(PROMPT)}, "2-d integer tensor"),
    ({"input_ids": torch.tensor([PROMPT], dtype=torch.float32)}, "2-d integer tensor"),
    ({"input_ids": [PROMPT]}, "2-d integer tensor"),
    ({"attention_mask": torch.tensor([[1, 1, 0], [1, 1, 1]])}, "not left-padded"),
    ({"max_new_tokens": 0}, "max_new_tokens must be an integer >= 1"),
    ({"temperature": 0.0}, "temperature must be a positive number"),
    ({"top_p": 1.5}, "top_p must lie in"),
    ({"divergence": "nope"}, "unknown divergence"),
])
def test_generate_refuses_bad_input(pair, change, message):
    target, drafter = pair
    arguments = {"input_ids": torch.tensor([PROMPT, PROMPT]), "k": 2, "eps": 0.1, "max_new_tokens": 2} | change
    with pytest.raises(ValueError, match=message):
        generate(target, drafter, **arguments)


def test_statistics_are_reproducible_from_a_seed(pair):
    target, drafter = pair
    ids = torch.tensor([PROMPT] * 4)
    a = generate(target, drafter, ids, k=2, eps=0.1, max_new_tokens=6, seed=12)
    b = generate(target, drafter, ids, k=2, eps=0.1, max_new_tokens=6, seed=12)
    assert torch.equal(a.sequences, b.sequences)
    assert (a.stats.accepted == b.stats.accepted).all()


def test_generate_by_price(pair):
    target, drafter = pair
    out = generate(target, drafter, torch.tensor([PROMPT] * 8), k=3, price=[0.5, 2.0] * 4, max_new_tokens=6, seed=3)
    assert (out.num_new_tokens == 6).all()
    with pytest.raises(ValueError, match="exactly one"):
        generate(target, drafter, torch.tensor([PROMPT]), k=3, eps=0.1, price=1.0, max_new_tokens=2)


def test_generate_tracks_the_divergence_it_spends(pair):
    target, drafter = pair
    ids = torch.tensor([PROMPT] * 6)
    budgets = np.array([0.0, 0.0, 0.05, 0.05, 0.4, 0.4])
    out = generate(target, drafter, ids, k=3, eps=budgets, max_new_tokens=8, seed=5, track_divergence=True)
    spent = out.stats.divergence_spent
    untracked = generate(target, drafter, ids, k=3, eps=budgets, max_new_tokens=8, seed=5)
    assert torch.equal(out.sequences, untracked.sequences) and untracked.stats.divergence_spent is None
    assert spent.shape == (6,) and (spent[:2] == 0).all() and (spent[2:] > 0).all()
    # At most the budget at each of the 8 emitted positions (a bonus token spends nothing).
    assert (spent <= budgets * 8 * (1 + 1e-9)).all() and out.stats.accounting_seconds > 0
    priced = generate(target, drafter, ids, k=3, price=2.0, max_new_tokens=8, seed=5, track_divergence=True)
    assert (priced.stats.divergence_spent > 0).all()
