"""From the models' logits to the distributions that are sampled from and verified."""

from __future__ import annotations

#: How many more rows one model's output layer may have than the other's, for the two to
#: count as one vocabulary padded differently (models pad to multiples of 64 or 128): at most
#: this many, or 1% of the smaller vocabulary when that is more.
PADDING_ROWS = 128


def shared_vocabulary(target_size: int, draft_size: int) -> int:
    """The vocabulary both models score: the smaller size; the larger one's extra ids get probability 0."""
    small, large = sorted((int(target_size), int(draft_size)))
    allowed = max(PADDING_ROWS, small // 100)
    if large - small > allowed:
        raise ValueError(f"the target scores {target_size} tokens and the drafter {draft_size}: more than padding "
                         f"apart (at most {allowed} extra rows), so they cannot share a tokenizer")
    return small


def probabilities(logits, n: int):
    """softmax over the first ``n`` ids of ``logits`` (shape (..., >= n)), as a float64 tensor.

    Ids from ``n`` on are padding rows of the larger model: probability 0. Logits masked to
    -inf (top-k, top-p) give exact zeros.
    """
    return logits[..., :n].double().softmax(dim=-1)
