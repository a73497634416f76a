"""md.verify: shapes, padding, reproducibility, clear errors, and the kernel from numba code."""

import numpy as np
import pytest
from numba import njit

import mdverify as md
from mdverify.workloads import llm_rows


def _batch(rows=4, k=3, n=50, seed=0):
    P, Q = llm_rows(n, rows * (k + 1), seed=seed)
    target = P.reshape(rows, k + 1, n)
    draft = Q[: rows * k].reshape(rows, k, n)
    rng = np.random.default_rng(seed)
    tokens = np.array([[rng.choice(n, p=draft[b, j]) for j in range(k)] for b in range(rows)])
    return target, draft, tokens


def test_shapes_padding_and_reproducibility():
    target, draft, tokens = _batch()
    out, accepted = md.verify(target, draft, tokens, 0.05, "hellinger", seed=3)
    assert out.shape == (4, 4) and accepted.shape == (4,)
    for b in range(4):
        a = accepted[b]
        np.testing.assert_array_equal(out[b, :a], tokens[b, :a])
        assert out[b, a] >= 0 and (out[b, a + 1:] == -1).all()
    again, _ = md.verify(target, draft, tokens, 0.05, "hellinger", seed=3)
    np.testing.assert_array_equal(out, again)
    for method in ("sorted", "select"):
        other, _ = md.verify(target, draft, tokens, 0.05, "hellinger", seed=3, method=method)
        np.testing.assert_array_equal(out, other)


def test_short_drafts_end_with_minus_one():
    target, draft, tokens = _batch(rows=2)
    tokens[0, 1:] = -1
    u = np.zeros((2, 4, 2))  # u = 0 accepts every drafted token
    out, accepted = md.verify(target, draft, tokens, 0.0, uniforms=u)
    assert accepted[0] == 1 and out[0, 2:].tolist() == [-1, -1] and out[0, 1] >= 0
    assert accepted[1] == 3


def test_eps_zero_accepts_by_the_lossless_rule():
    target, draft, tokens = _batch(rows=1, k=1)
    x = tokens[0, 0]
    ratio = target[0, 0, x] / draft[0, 0, x]
    just_below = np.array([[[min(ratio, 1.0) * 0.999, 0.5], [0.5, 0.5]]])
    out, accepted = md.verify(target, draft, tokens, 0.0, uniforms=just_below)
    assert accepted[0] == 1 and out[0, 0] == x


@pytest.mark.parametrize("change, message", [
    (lambda t, d, i: (t, d, np.where(i == i[0, 0], 50, i)), r"outside \[0, 50\)"),
    (lambda t, d, i: (t[:, :2], d, i), r"shape \(B, k \+ 1, n\)"),
    (lambda t, d, i: (t * 1.1, d, i), "target_probs row .* sums to"),
    (lambda t, d, i: (t, d, i[:, :2]), r"draft_token_ids must have shape"),
    (lambda t, d, i: (t, d, np.where(np.arange(3) == 0, -1, i)), "after -1 padding"),
    (lambda t, d, i: (t, d, i.astype(float) + 0.5), "not an integer"),
    (lambda t, d, i: (t, d, i.astype(bool)), "must hold integers"),
])
def test_bad_input_raises(change, message):
    target, draft, tokens = _batch()
    t, d, i = change(target, draft, tokens)
    with pytest.raises(ValueError, match=message):
        md.verify(t, d, i, 0.1)


def test_zero_probability_draft_token_and_bad_uniforms():
    target, draft, tokens = _batch(rows=1, k=1)
    draft = draft.copy()
    draft[0, 0, tokens[0, 0]] = 0.0
    draft[0, 0] /= draft[0, 0].sum()
    with pytest.raises(ValueError, match="probability 0"):
        md.verify(target, draft, tokens, 0.1)
    target, draft, tokens = _batch(rows=1, k=1)
    with pytest.raises(ValueError, match=r"uniforms must lie in \[0, 1\)"):
        md.verify(target, draft, tokens, 0.1, uniforms=np.ones((1, 2, 2)))


def test_verify_rows_from_njit():
    from mdverify.core.mentor import SORTED
    from mdverify.core.verify import verify_rows

    target, draft, tokens = _batch()
    u = np.random.default_rng(1).random((4, 4, 2))
    kl = md.divergence("kl")

    @njit
    def run(target, draft, tokens, u, kind, alpha):
        out = np.empty((target.shape[0], target.shape[1]), np.int64)
        accepted = np.empty(target.shape[0], np.int64)
        verify_rows(target, draft, tokens, np.full(tokens.shape, 0.05), kind, alpha, SORTED, u, out,
                    accepted, np.empty((1, 4, target.shape[2])))
        return out, accepted

    out, accepted = run(target, draft, tokens, u, kl.kind, kl.param)
    expected = md.verify(target, draft, tokens, 0.05, "kl", uniforms=u, method="sorted")
    np.testing.assert_array_equal(out, expected[0])
    np.testing.assert_array_equal(accepted, expected[1])


def test_budgets_per_position_and_prices():
    """eps of shape (B, k) budgets each position; price= verifies with md.plan_chain's budgets."""
    from mdverify.workloads import llm_rows

    p, q = llm_rows(200, 12, seed=31)
    target, draft = p[:9].reshape(3, 3, -1), q[:6].reshape(3, 2, -1)
    tokens = draft.argmax(-1)
    per_row = md.verify(target, draft, tokens, [0.01, 0.1, 1.0], seed=4)
    per_position = md.verify(target, draft, tokens, np.repeat([[0.01], [0.1], [1.0]], 2, axis=1), seed=4)
    np.testing.assert_array_equal(per_row[0], per_position[0])
    plan = md.plan_chain(target, draft, 2.0, "hellinger")
    by_price = md.verify(target, draft, tokens, divergence="hellinger", price=2.0, seed=4)
    by_plan = md.verify(target, draft, tokens, plan.eps, "hellinger", seed=4)
    np.testing.assert_array_equal(by_price[0], by_plan[0])
    with pytest.raises(ValueError, match="exactly one"):
        md.verify(target, draft, tokens, 0.1, price=2.0, seed=4)
