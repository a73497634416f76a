"""Benchmarks of SPEC section 8: the solvers against the floor, numpy's sort, the peer and cvxpy."""
