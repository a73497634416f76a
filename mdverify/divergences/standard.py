"""The parameter-free divergences of SPEC section 2, registered in kind order."""

from mdverify.divergences.registry import register
from mdverify.generators import STANDARD

for _name, (_expression, _formula) in STANDARD.items():
    register(_name, _expression, _formula)
