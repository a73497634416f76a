"""Workloads: synthetic LLM-like rows, named instance families and edge rows."""

from mdverify.workloads.instances import divergence_suite, edge_rows, families
from mdverify.workloads.synthetic import llm_rows, truncate_top_k, truncate_top_p

__all__ = ["divergence_suite", "edge_rows", "families", "llm_rows", "truncate_top_k", "truncate_top_p"]
