"""Shared pieces of the executable checks: every check is marked ``verify``."""

import pytest

import mdverify as md

#: Every registered divergence plus alpha-family members on both sides of 0 and 1.
DIVERGENCES = [md.divergence(name) for name in md.names()] + [md.alpha(0.3), md.alpha(-1.0), md.alpha(2.5)]


def pytest_collection_modifyitems(items):
    for item in items:
        if "proofs_checks" in str(item.fspath):
            item.add_marker(pytest.mark.verify)


def report(claim: str, **measured) -> None:
    """Print a check's measured worst case (shown with ``pytest -s`` or in -rA summaries)."""
    values = ", ".join(f"{key} = {value:.3g}" if isinstance(value, float) else f"{key} = {value}" for key, value in measured.items())
    print(f"[{claim}] {values}")
