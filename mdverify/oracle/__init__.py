"""Independent references for the core: brute force (numpy + sympy), and later cvxpy.

Imported only for verification; nothing in the core depends on this package.
"""
