"""pytest plugin for memledger (registered through the ``pytest11`` entry point).

Minimal placeholder; the marker, fixture and options are added by issue 5.
"""
from __future__ import annotations


def pytest_configure(config):  # pragma: no cover - trivial
    config.addinivalue_line(
        "markers",
        "memledger(peak=None, **categories): fail the test when its memory peak exceeds the budget",
    )
