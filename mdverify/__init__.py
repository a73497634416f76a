"""mdverify: mentored decoding, the provably optimal form of lossy speculative decoding.

>>> import mdverify as md
>>> res = md.mentor([0.7, 0.2, 0.1], [0.2, 0.5, 0.3], eps=0.05, divergence="kl")
>>> bool(res.acceptance > 0.5)
True
"""

from mdverify.api import Frontier, MentorResult, RatioIndex, frontier, mentor
from mdverify.divergences import Divergence, alpha, divergence, names

__version__ = "0.1.0"

__all__ = [
    "Divergence",
    "Frontier",
    "MentorResult",
    "RatioIndex",
    "alpha",
    "divergence",
    "frontier",
    "mentor",
    "names",
]
