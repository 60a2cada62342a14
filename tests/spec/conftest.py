"""dht's own spec tests (tier `dht`): each names the SPEC.md rules it checks
(dht/conformance/fixtures.py, `refuse_unmarked`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dht.conformance.fixtures import refuse_unmarked


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    refuse_unmarked(items, Path(__file__).parent)
