"""The conformance suite, SPEC.md part one: each test has one tier and names the
rules it checks (dht/conformance/fixtures.py, `refuse_unmarked`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dht.conformance.fixtures import refuse_unmarked, skip_on_running_cluster


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    refuse_unmarked(items, Path(__file__).parent)
    skip_on_running_cluster(items)


@pytest.fixture(autouse=True)
def each_test_on_a_running_cluster(leaves_the_cluster_as_found: None) -> None:
    """On a running cluster (--nodes): keys of each test's own, nodes restored after it."""
