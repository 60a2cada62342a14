"""A node's Prometheus metrics: `GET /metrics` in the text format, by prometheus_client.

Numbers come in two ways, each chosen for what it costs the request path:
- per request (client requests, replica calls): counters and latency histograms updated
  as each one ends. Their labelled children are bound once and kept, so a request pays a
  dict look-up, a counter increment and a histogram observation (about 2 µs);
- state the node keeps anyway (breakers, hints, in-flight requests and bytes, overload
  refusals, read repairs, anti-entropy, tombstones, disk): read from `Node.status()` at
  scrape time. It costs nothing between scrapes, and `/metrics` and `/v0/status` can
  never disagree, since they read the same numbers.

Each node has a registry of its own (not prometheus_client's global one), with the
process collector (CPU, resident memory, open files, start time) added to it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest

from dht.breaker import State

__all__ = ["CONTENT_TYPE", "LATENCY_BUCKETS", "Metrics"]

# The text format every Prometheus reads (version 1.0.0 only adds UTF-8 names, which no
# dht metric has, and Prometheus before 3.0 does not take it).
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4

# Seconds: from a fast local read (~0.3 ms) to a client's patience; 1 s is the default
# replica deadline, so a time-out lands in its own bucket.
LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)

# The client operations, by the names `dht.http_api` gives its routes.
OPERATIONS = ("get", "put", "delete", "range")

# How a replica call ended (dht.peers): answered, failed (connection lost, refused, a bad
# answer), out of time, not sent (circuit open), or abandoned by its caller.
CALL_OUTCOMES = ("ok", "error", "timeout", "circuit_open", "cancelled")

Status = Callable[[], dict[str, Any]]


class Metrics:
    def __init__(self, status: Status, data_dir: Path) -> None:
        # No `*_created` series: a timestamp per label set doubles the page for nothing
        # Prometheus needs (a process-wide switch of prometheus_client; a node is one).
        disable_created_metrics()
        self.registry = CollectorRegistry(auto_describe=False)
        self._requests = Counter(
            "dht_client_requests",
            "Client requests answered, by operation and HTTP status (a 503 for overload included)",
            ["operation", "status"],
            registry=self.registry,
        )
        self._request_seconds = Histogram(
            "dht_client_request_duration_seconds",
            "Time from a client request's dispatch to its answer (for a range, to its last byte)",
            ["operation"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._calls = Counter(
            "dht_replica_calls",
            "Calls to other nodes (records, ranges, anti-entropy), by peer and outcome",
            ["peer", "outcome"],
            registry=self.registry,
        )
        self._call_seconds = Histogram(
            "dht_replica_call_duration_seconds",
            "Time from sending a call to another node to its answer (answered calls only)",
            ["peer"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        ProcessCollector(registry=self.registry)
        self.registry.register(_StateCollector(status, data_dir))
        self._request_children: dict[tuple[str, int], Any] = {}
        # Every operation's histogram from the start, so that a rate over it has a zero
        # to start from; a status appears with its first answer.
        self._request_seconds_children: dict[str, Any] = {
            operation: self._request_seconds.labels(operation) for operation in OPERATIONS
        }
        self._call_children: dict[tuple[str, str], Any] = {}
        self._call_seconds_children: dict[str, Any] = {}

    def client_request(self, operation: str, status: int, seconds: float) -> None:
        counter = self._request_children.get((operation, status))
        if counter is None:
            counter = self._requests.labels(operation, str(status))
            self._request_children[operation, status] = counter
        counter.inc()
        histogram = self._request_seconds_children.get(operation)
        if histogram is None:
            histogram = self._request_seconds.labels(operation)
            self._request_seconds_children[operation] = histogram
        histogram.observe(seconds)

    def replica_call(self, peer: str, outcome: str, seconds: float | None) -> None:
        """One call to `peer` ended with `outcome` (CALL_OUTCOMES); `seconds` is its
        latency when an answer came back, else None."""
        counter = self._call_children.get((peer, outcome))
        if counter is None:
            counter = self._calls.labels(peer, outcome)
            self._call_children[peer, outcome] = counter
        counter.inc()
        if seconds is not None:
            histogram = self._call_seconds_children.get(peer)
            if histogram is None:
                histogram = self._call_seconds.labels(peer)
                self._call_seconds_children[peer] = histogram
            histogram.observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)


def folder_bytes(path: Path) -> int:
    """Bytes of the files under `path` (LevelDB's folder: tables, log, manifest). Files
    that vanish while it is read (a compaction removing a table) count as 0."""
    total = 0
    for directory, _, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(directory, name)).st_size
            except FileNotFoundError:
                pass
    return total


class _StateCollector:
    """The node's own counters and gauges, read from its status at each scrape."""

    def __init__(self, status: Status, data_dir: Path) -> None:
        self._status = status
        self._data_dir = data_dir

    def collect(self) -> Iterator[Metric]:
        status = self._status()
        yield from _totals(status)
        yield from _gauges(status)
        yield _gauge("dht_storage_bytes", "Bytes of the data folder", folder_bytes(self._data_dir))
        yield from _peers(status)


def _counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, documentation, value=value)


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def _totals(status: dict[str, Any]) -> Iterator[Metric]:
    refusals = CounterMetricFamily(
        "dht_overload_refusals",
        "Client requests refused with 503 for overload, by the limit they met",
        labels=["limit"],
    )
    refusals.add_metric(["requests"], status["overload_refusals"])
    refusals.add_metric(["bytes"], status["byte_budget_refusals"])
    yield refusals
    yield _counter("dht_internal_errors", "Requests answered 500 (bugs)", status["internal_errors"])
    yield _counter(
        "dht_read_repairs", "Stale replicas sent a newer record by a read", status["read_repairs"]
    )
    yield _counter(
        "dht_background_failures",
        "Late replica writes and read repairs that failed after the client's answer",
        status["background_failures"],
    )
    yield _counter("dht_hints_delivered", "Hints delivered", status["hints_delivered"])
    yield _counter(
        "dht_hints_dropped", "Hints not kept (over the size or age limit)", status["hints_dropped"]
    )
    yield _counter(
        "dht_versions_refused",
        "Records refused for a version further ahead than --max-clock-drift",
        status["versions_refused"],
    )
    yield _counter(
        "dht_disk_writes_refused",
        "Writes refused (507) because the disk was below its reserve",
        status["disk"]["writes_refused"],
    )
    yield _counter(
        "dht_tombstones_collected",
        "Tombstones and expired records removed for good",
        status["tombstones"]["collected"],
    )


def _gauges(status: dict[str, Any]) -> Iterator[Metric]:
    yield _gauge("dht_in_flight_requests", "Client requests being served", status["in_flight"])
    yield _gauge(
        "dht_max_in_flight_requests", "--max-in-flight: the limit", status["max_in_flight"]
    )
    yield _gauge(
        "dht_in_flight_bytes", "Bytes of client values held in memory", status["bytes_in_flight"]
    )
    yield _gauge(
        "dht_disk_free_bytes", "Free bytes on the data volume", status["disk"]["free_bytes"]
    )
    yield _gauge(
        "dht_disk_refusing_writes",
        "1 while the disk is below its reserve and writes are refused",
        int(status["disk"]["refusing_writes"]),
    )
    yield _gauge(
        "dht_anti_entropy_trees_ready",
        "1 once the anti-entropy trees are loaded",
        int(status["anti_entropy"]["trees_ready"]),
    )
    share = GaugeMetricFamily(
        "dht_ring_share", "Share of the keys whose first replica is each node", labels=["node"]
    )
    for node, fraction in status["ring_share"].items():
        share.add_metric([node], fraction)
    yield share


def _peers(status: dict[str, Any]) -> Iterator[Metric]:
    peers: dict[str, dict[str, Any]] = status["peers"]
    breaker = GaugeMetricFamily(
        "dht_peer_breaker_state",
        "1 for the circuit breaker's state towards each peer, 0 for the others",
        labels=["peer", "state"],
    )
    hints = GaugeMetricFamily("dht_hints_pending", "Hints waiting for each peer", labels=["peer"])
    exchanges = CounterMetricFamily(
        "dht_anti_entropy_exchanges", "Anti-entropy exchanges completed", labels=["peer"]
    )
    sent = CounterMetricFamily(
        "dht_anti_entropy_records_sent", "Records anti-entropy sent to a peer", labels=["peer"]
    )
    received = CounterMetricFamily(
        "dht_anti_entropy_records_received",
        "Records anti-entropy took from a peer",
        labels=["peer"],
    )
    differing = GaugeMetricFamily(
        "dht_anti_entropy_leaves_differing",
        "Tree leaves that differed in the last exchange",
        labels=["peer"],
    )
    for url, peer in peers.items():
        for state in State:
            breaker.add_metric([url, state.value], int(peer["breaker"] == state.value))
        hints.add_metric([url], peer["pending_hints"])
        exchange = peer["anti_entropy"]
        exchanges.add_metric([url], exchange["exchanges"])
        sent.add_metric([url], exchange["records_sent"])
        received.add_metric([url], exchange["records_received"])
        differing.add_metric([url], exchange["leaves_differing"])
    yield from (breaker, hints, exchanges, sent, received, differing)
