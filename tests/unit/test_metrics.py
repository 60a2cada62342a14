"""The per-request counts behind GET /metrics (dht/metrics.py), read back through
prometheus_client's own parser of the page."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from dht.conformance.http_client import Metrics as Page
from dht.metrics import LATENCY_BUCKETS, Latencies, Metrics, TrafficCollector


def traffic_page(metrics: Metrics) -> Page:
    """The per-request families alone (the node's status is not needed for them)."""
    registry = CollectorRegistry()
    registry.register(TrafficCollector(metrics))
    return Page.parse(generate_latest(registry).decode())


def test_a_bucket_counts_observations_at_most_its_bound() -> None:
    latencies = Latencies()
    for seconds in (0.0005, 0.00051, 0.001, 20.0):
        latencies.observe(seconds)
    buckets = dict(latencies.cumulative())
    assert buckets["0.0005"] == 1
    assert buckets["0.001"] == 3
    assert buckets[repr(LATENCY_BUCKETS[-1])] == 3
    assert buckets["+Inf"] == 4
    assert latencies.total == 0.0005 + 0.00051 + 0.001 + 20.0


def test_requests_and_calls_appear_on_the_page_by_their_labels(tmp_path: Path) -> None:
    metrics = Metrics(lambda: {}, tmp_path)
    for _ in range(3):
        metrics.client_request("put", 201, 0.002)
    metrics.client_request("get", 404, 0.0001)
    metrics.replica_call("http://b:1", "ok", 0.003)
    metrics.replica_call("http://b:1", "timeout", None)
    value = traffic_page(metrics).value
    assert value("dht_client_requests_total", operation="put", status="201") == 3
    assert value("dht_client_requests_total", operation="get", status="404") == 1
    assert value("dht_client_request_duration_seconds_count", operation="put") == 3
    assert value("dht_client_request_duration_seconds_bucket", operation="put", le="0.001") == 0
    assert value("dht_client_request_duration_seconds_bucket", operation="put", le="0.0025") == 3
    assert value("dht_client_request_duration_seconds_count", operation="delete") == 0
    assert value("dht_replica_calls_total", peer="http://b:1", outcome="ok") == 1
    assert value("dht_replica_calls_total", peer="http://b:1", outcome="timeout") == 1
    assert value("dht_replica_call_duration_seconds_count", peer="http://b:1") == 1
