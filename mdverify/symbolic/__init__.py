"""Symbolic layer: sympy derivations of every per-divergence formula, and code generation.

Imported only for verification and code generation; the numba core never needs sympy.
"""
