"""Quantities of the claims on beating the target and boosting (SPEC C7, C8)."""

from mdverify.theory.boosting import (
    beats_target,
    edge,
    first_order_indicator,
    kl,
    segment_threshold,
    weak_hypothesis,
)

__all__ = ["beats_target", "edge", "first_order_indicator", "kl", "segment_threshold", "weak_hypothesis"]
