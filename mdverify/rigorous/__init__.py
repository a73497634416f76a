"""Rigorous certificates: feasibility and optimality proved in ball arithmetic (python-flint)."""
