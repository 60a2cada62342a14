"""SPEC.md section 12 on real nodes: `GET /metrics` in Prometheus' text format."""

from __future__ import annotations

import concurrent.futures

import pytest

from dht.conformance.fixtures import ClusterFactory
from dht.conformance.http_client import expect, request, wait_for
from dht.conformance.launcher import Node
from dht.conformance.rules import rule
from dht.metrics import CALL_OUTCOMES

pytestmark = pytest.mark.dht


@rule("12.1")
def test_metrics_answer_in_prometheus_text_format(node: Node) -> None:
    expect(node.put("k", b"v"), 201)
    response = request("GET", node.url + "/metrics")
    expect(response, 200)
    assert response.header("Content-Type") == "text/plain; version=0.0.4; charset=utf-8"
    families = node.metrics().names()
    for name in (
        "dht_client_requests_total",
        "dht_client_request_duration_seconds_bucket",
        "dht_in_flight_requests",
        "dht_overload_refusals_total",
        "dht_storage_bytes",
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
    ):
        assert name in families, f"{name} missing from /metrics"


@rule("12.1")
def test_no_metrics_turns_the_path_and_the_counting_off(start_cluster: ClusterFactory) -> None:
    node = start_cluster(1, ["--no-metrics"])[0]
    expect(node.put("k", b"v"), 201)
    expect(request("GET", node.url + "/metrics"), 400)


@rule("12.2")
def test_every_client_answer_is_counted_once_by_operation_and_status(node: Node) -> None:
    for index in range(5):
        expect(node.put(f"k{index}", b"v"), 201)
    for index in range(3):
        expect(node.get(f"k{index}"), 200)
    expect(node.get("absent"), 404)
    expect(node.delete("k0"), 202)
    expect(node.range("k"), 200)
    expect(request("GET", node.url + "/v0/entity?id=k1&replicas=9/1"), 400)
    node.status()  # neither /v0/status nor /metrics is a client request
    metrics = node.metrics()
    counted = {
        ("put", "201"): 5,
        ("get", "200"): 3,
        ("get", "404"): 1,
        ("get", "400"): 1,
        ("delete", "202"): 1,
        ("range", "200"): 1,
    }
    for (operation, status), count in counted.items():
        assert (
            metrics.value("dht_client_requests_total", operation=operation, status=status) == count
        ), (operation, status)
    assert metrics["dht_client_requests_total"] == sum(counted.values())
    for operation, count in (("put", 5), ("get", 5), ("delete", 1), ("range", 1)):
        assert (
            metrics.value("dht_client_request_duration_seconds_count", operation=operation) == count
        )
        assert (
            metrics.value(
                "dht_client_request_duration_seconds_bucket", operation=operation, le="+Inf"
            )
            == count
        )


@rule("12.2")
def test_overload_refusals_are_counted_as_503s(start_cluster: ClusterFactory) -> None:
    """With --max-in-flight 1 and a peer that never answers within the deadline, a burst
    of concurrent writes is mostly refused at once; each refusal is a counted 503."""
    cluster = start_cluster(2, ["--max-in-flight", "1", "--timeout", "1"])
    cluster[1].pause()
    try:
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda i: cluster[0].put(f"k{i}", b"v", "2/2"), range(8)))
    finally:
        cluster[1].resume()
    refused = sum(answer.status == 503 for answer in answers)
    assert refused > 0, answers
    metrics = cluster[0].metrics()
    assert metrics.value("dht_client_requests_total", operation="put", status="503") == refused
    assert metrics.value("dht_overload_refusals_total", limit="requests") == refused
    assert metrics.value("dht_client_requests_total", operation="put") == 8


@rule("12.3", "12.4")
def test_replica_calls_breakers_and_hints_show_a_stopped_peer(
    start_cluster: ClusterFactory,
) -> None:
    """A stopped peer: calls to it fail (refused connections) until its circuit opens,
    then are not sent; writes leave hints for it. Once it is back, the hints are
    delivered and the circuit closes; /metrics and /v0/status agree throughout."""
    cluster = start_cluster(
        3, ["--breaker-threshold", "3", "--breaker-cooldown", "0.5", "--hint-interval", "0.2"]
    )
    coordinator, _, down = cluster
    for index in range(3):
        expect(coordinator.put(f"before{index}", b"v", "3/3"), 201)
    down.stop()
    for index in range(10):
        expect(coordinator.put(f"during{index}", b"v", "2/3"), 201)
    metrics = coordinator.metrics()
    status = coordinator.status()
    peer = down.url
    assert metrics.value("dht_replica_calls_total", peer=peer, outcome="ok") >= 3
    assert metrics.value("dht_replica_calls_total", peer=peer, outcome="error") >= 3
    assert metrics.value("dht_replica_calls_total", peer=peer, outcome="circuit_open") > 0
    assert metrics.value("dht_replica_call_duration_seconds_count", peer=peer) >= 3
    outcomes = {
        dict(labels)["outcome"]
        for name, labels in metrics.samples
        if name == "dht_replica_calls_total"
    }
    assert outcomes <= set(CALL_OUTCOMES), outcomes  # every outcome SPEC.md 12.3 names
    assert metrics.value("dht_peer_breaker_state", peer=peer, state="open") == 1
    assert metrics.value("dht_peer_breaker_state", peer=peer) == 1  # one state at a time
    pending = status["peers"][peer]["pending_hints"]
    assert pending == 10
    assert metrics.value("dht_hints_pending", peer=peer) == pending

    down.start()
    wait_for(coordinator.metrics, lambda m: m.value("dht_hints_pending", peer=peer) == 0, 15)
    metrics = coordinator.metrics()
    status = coordinator.status()
    assert metrics["dht_hints_delivered_total"] == status["hints_delivered"] >= 10
    assert metrics.value("dht_peer_breaker_state", peer=peer, state="closed") == 1
    for name, field in (
        ("dht_read_repairs_total", "read_repairs"),
        ("dht_hints_dropped_total", "hints_dropped"),
        ("dht_versions_refused_total", "versions_refused"),
        ("dht_internal_errors_total", "internal_errors"),
    ):
        assert metrics[name] == status[field], name
    for url, share in status["ring_share"].items():
        assert metrics.value("dht_ring_share", node=url) == pytest.approx(share)
    assert sum(status["ring_share"].values()) == pytest.approx(1.0)
    assert metrics["dht_disk_free_bytes"] > 0
    assert metrics["dht_storage_bytes"] > 0


@rule("12.4")
def test_storage_bytes_follow_the_data_folder(node: Node) -> None:
    before = node.metrics()["dht_storage_bytes"]
    for index in range(20):
        expect(node.put(f"big{index}", bytes(64 * 1024)), 201)
    # LevelDB's log grows with every write: no flush or compaction needs to run first.
    wait_for(
        node.metrics,
        lambda metrics: metrics["dht_storage_bytes"] >= before + 20 * 64 * 1024,
        deadline=5,
    )
