"""SPEC.md section 9 on real clusters: how dht answers when replicas fail."""

from __future__ import annotations

import time

import pytest

from dht.conformance.fixtures import ClusterFactory
from dht.conformance.http_client import expect
from dht.conformance.rules import rule

pytestmark = pytest.mark.dht

PATIENT_BREAKERS = ["--breaker-threshold", "100"]


@rule("9.2")
def test_504_comes_as_soon_as_success_is_impossible(start_cluster: ClusterFactory) -> None:
    """A refused connection to a stopped replica fails at once: no waiting on --timeout."""
    cluster = start_cluster(3, ["--timeout", "5", *PATIENT_BREAKERS])
    cluster[2].stop()
    started = time.monotonic()
    expect(cluster[0].put("k", b"v", "3/3"), 504)
    expect(cluster[1].get("k", "3/3"), 504)
    assert time.monotonic() - started < 2.5
