"""Workloads: synthetic LLM-like rows (and, later, n-gram models on CPython's own text)."""

from mdverify.workloads.synthetic import llm_rows, truncate_top_k, truncate_top_p

__all__ = ["llm_rows", "truncate_top_k", "truncate_top_p"]
