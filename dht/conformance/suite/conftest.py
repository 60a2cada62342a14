"""The conformance suite, SPEC.md part one: each test has one tier and names the
rules it checks (dht/conformance/fixtures.py, `refuse_unmarked`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dht.conformance.fixtures import refuse_unmarked


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    refuse_unmarked(items, Path(__file__).parent)
