"""A node's Prometheus metrics: `GET /metrics` in the text format, by prometheus_client.

Numbers come in two ways, each chosen for what it costs the request path:
- per request (client requests, replica calls): counts and latency histograms kept in
  plain ints and lists, updated as each request ends, and turned into metric families
  only when scraped. prometheus_client's own Counter and Histogram take a lock on every
  update, for threads a node does not have: measured here, 3.9 µs per client request
  with them and 0.45 µs without, at 5,000-10,000 requests a second on one core;
- state the node keeps anyway (breakers, hints, in-flight requests and bytes, overload
  refusals, read repairs, anti-entropy, tombstones, disk, the clock fence): read from
  `Node.status()` at scrape time. It costs nothing between scrapes, and `/metrics` and
  `/v0/status` can never disagree, since they read the same numbers.

prometheus_client does the rest: the exposition format, the registry (one per node, not
its global one), the metric families and the process collector (CPU, resident memory,
open files, start time).
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest

from dht.transport.breaker import State
from dht.web.server import Params

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
_BOUNDS = [*(repr(bound) for bound in LATENCY_BUCKETS), "+Inf"]

# The client operations, by the names `dht.web.client_api` gives its routes.
OPERATIONS = ("get", "put", "delete", "range")

# How a replica call ended (dht.transport.peers): answered, failed (connection lost,
# refused, a bad answer), out of time, not sent (circuit open), or abandoned by its caller.
CALL_OUTCOMES = ("ok", "error", "timeout", "circuit_open", "cancelled")

Status = Callable[[], dict[str, Any]]


class Latencies:
    """One histogram's observations: a count per LATENCY_BUCKETS bucket (the last one
    past them all) and their sum."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS) + 1)
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        # Prometheus' bucket `le` counts observations at most `le`: bisect_left finds it.
        self.counts[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.total += seconds

    def cumulative(self) -> list[tuple[str, float]]:
        """(le, observations at most le) for every bucket, +Inf last."""
        running = 0
        buckets: list[tuple[str, float]] = []
        for bound, count in zip(_BOUNDS, self.counts, strict=True):
            running += count
            buckets.append((bound, running))
        return buckets


class Metrics:
    def __init__(self, status: Status, data_dir: Path) -> None:
        # (operation, status) -> answers; operation -> latencies. Every operation has a
        # histogram from the start, so a rate over it has a zero to start from.
        self.requests: dict[tuple[str, int], int] = {}
        self.request_seconds = {operation: Latencies() for operation in OPERATIONS}
        # (peer, outcome) -> calls; peer -> latencies of the answered ones.
        self.calls: dict[tuple[str, str], int] = {}
        self.call_seconds: dict[str, Latencies] = {}
        self.registry = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self.registry)
        self.registry.register(TrafficCollector(self))
        self.registry.register(_StateCollector(status, data_dir))

    def client_request(self, operation: str, status: int, seconds: float) -> None:
        key = (operation, status)
        self.requests[key] = self.requests.get(key, 0) + 1
        latencies = self.request_seconds.get(operation)
        if latencies is None:
            latencies = self.request_seconds[operation] = Latencies()
        latencies.observe(seconds)

    def replica_call(self, peer: str, outcome: str, seconds: float | None) -> None:
        """One call to `peer` ended with `outcome` (CALL_OUTCOMES); `seconds` is its
        latency when an answer came back, else None."""
        key = (peer, outcome)
        self.calls[key] = self.calls.get(key, 0) + 1
        if seconds is not None:
            latencies = self.call_seconds.get(peer)
            if latencies is None:
                latencies = self.call_seconds[peer] = Latencies()
            latencies.observe(seconds)

    async def scrape(self, request: web.BaseRequest, params: Params) -> web.Response:
        """The handler of `GET /metrics`: the families rendered now."""
        return web.Response(body=self.render(), headers={"Content-Type": CONTENT_TYPE})

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


class TrafficCollector:
    """The per-request counts, as metric families."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        metrics = self._metrics
        requests = CounterMetricFamily(
            "dht_client_requests",
            "Client requests answered, by operation and HTTP status (an overload 503 too)",
            labels=["operation", "status"],
        )
        for (operation, status), count in sorted(metrics.requests.items()):
            requests.add_metric([operation, str(status)], count)
        yield requests
        yield _histogram(
            "dht_client_request_duration_seconds",
            "Time from a client request's dispatch to its answer (a range: to its last byte)",
            "operation",
            metrics.request_seconds,
        )
        calls = CounterMetricFamily(
            "dht_replica_calls",
            "Calls to other nodes (records, ranges, anti-entropy), by peer and outcome",
            labels=["peer", "outcome"],
        )
        for (peer, outcome), count in sorted(metrics.calls.items()):
            calls.add_metric([peer, outcome], count)
        yield calls
        yield _histogram(
            "dht_replica_call_duration_seconds",
            "Time from sending a call to another node to its answer (answered calls only)",
            "peer",
            metrics.call_seconds,
        )


def _histogram(
    name: str, documentation: str, label: str, by_label: dict[str, Latencies]
) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, documentation, labels=[label])
    for value, latencies in sorted(by_label.items()):
        family.add_metric([value], latencies.cumulative(), latencies.total)
    return family


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
        yield from _clock(status["clock_fence"])


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
        "dht_restamped_writes",
        "Client writes sent again with a newer version after a replica kept a newer record",
        status["restamped_writes"],
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
    tls_refused = CounterMetricFamily(
        "dht_tls_refused",
        "Peers refused for want of a valid TLS certificate, by reason",
        labels=["reason"],
    )
    for reason, count in status["tls"].get("refused", {}).items():
        tls_refused.add_metric([reason], count)
    yield tls_refused
    yield _counter(
        "dht_storage_syncs",
        "Syncs of writes to the disk (--durability: a group commit's batches, or single writes)",
        status["storage"]["syncs"],
    )
    yield _counter(
        "dht_storage_synced_writes",
        "Writes those syncs held (records, hints, nonces): divided by the syncs, writes per sync",
        status["storage"]["synced_writes"],
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


def _clock(fence: dict[str, Any]) -> Iterator[Metric]:
    """The clock fence (SPEC.md rule 9.13): whether it holds, and the offsets behind it."""
    yield _gauge(
        "dht_clock_fenced",
        "1 while this node refuses clients because its clock is off from the majority's",
        int(fence["fenced"] is not None),
    )
    offsets = GaugeMetricFamily(
        "dht_peer_clock_offset_seconds",
        "Each peer's clock minus this node's, as last measured (the middle of the interval "
        "the round trip bounds it to); peers not measured are left out",
        labels=["peer"],
    )
    for url, offset in fence["offsets"].items():
        if offset is not None:
            offsets.add_metric([url], offset["estimate"])
    yield offsets


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
