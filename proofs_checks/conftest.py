"""Shared pieces of the executable checks: every check is marked ``verify``."""

import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        if "proofs_checks" in str(item.fspath):
            item.add_marker(pytest.mark.verify)
