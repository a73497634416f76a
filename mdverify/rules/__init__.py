"""The relaxed verification rules of SPEC C11, each with its exact output distribution.

Every rule takes one row (1-d p and q) and a parameter and returns a ``RuleOutput``: the
distribution r' of the tokens it emits and the probability that it accepts the draft,
both computed exactly (no sampling). ``RULES`` maps each name to (function, default
parameter, lossless parameter).

Examples
--------
>>> import numpy as np
>>> from mdverify import rules
>>> out = rules.lenience(np.array([0.7, 0.3]), np.array([0.4, 0.6]), 0.5)
>>> round(out.acceptance, 12)
1.0
"""

from mdverify.rules.base import RuleOutput, speculative
from mdverify.rules.cactus import cactus, cactus_quadratic
from mdverify.rules.relaxed import (
    cascade_opt,
    cascade_token,
    fuzzy,
    lenience,
    static_ensemble,
    top_k,
    typical,
)

#: name -> (rule, default parameter, lossless parameter or None where the rule has none).
RULES = {
    "lenience": (lenience, 0.5, 1.0),
    "static_ensemble": (static_ensemble, 0.5, 1.0),
    "cascade_opt": (cascade_opt, 0.0, -1e9),
    "cascade_token": (cascade_token, 0.2, -1.0),
    "fuzzy": (fuzzy, 0.1, 0.0),
    "cactus": (cactus, 0.1, 0.0),
    "typical": (typical, (0.3, 0.09), None),
    "top_k": (top_k, 5, None),
}

__all__ = ["RULES", "RuleOutput", "cactus", "cactus_quadratic", "cascade_opt", "cascade_token", "fuzzy",
           "lenience", "speculative", "static_ensemble", "top_k", "typical"]
