"""A node: builds storage, clock, ring, peers, coordinator and the HTTP apps, runs them
until SIGTERM or Ctrl-C, then stops them in order."""

from __future__ import annotations

import asyncio
import functools
import logging
import signal
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from dht.config import NodeConfig
from dht.coordination.clock import HybridClock, wall_clock_ms
from dht.coordination.coordinator import Coordinator
from dht.coordination.ring import Ring
from dht.metrics import CONTENT_TYPE, Metrics
from dht.replication.anti_entropy import AntiEntropy
from dht.replication.collector import Collector
from dht.replication.hints import HintDelivery, HintStore
from dht.replication.merkle import MerkleTrees
from dht.replication.peers import Peers
from dht.replication.protocol import MESSAGE_OVERHEAD
from dht.storage.store import Storage
from dht.web.admission import ByteBudget, keep_large_buffers_out_of_the_heap
from dht.web.client_api import ClientApi
from dht.web.internal_api import InternalApi
from dht.web.listener import SharedPortSite
from dht.web.log_limits import QuietMalformedHttp
from dht.web.server import HttpServer, Params, Route

log = logging.getLogger(__name__)

# Headroom over the largest value for a body read; client values are checked against the
# exact limit in the handler, which answers 413 with the project's reason.
_BODY_OVERHEAD = 64
# Method, path, other parameters and the HTTP version around the key in a request line.
_REQUEST_LINE_OVERHEAD = 1024
# How long SIGTERM waits for in-flight requests before it closes their connections.
SHUTDOWN_GRACE = 3.0


class Node:
    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.started_at = time.monotonic()
        self.storage = Storage(config.data_dir, config.disk_reserve, config.sync_writes)
        self.clock = HybridClock(skewed_wall_clock(config.clock_skew), config.max_clock_drift_ms)
        self.ring = Ring(config.cluster, config.vnodes)
        self.peers = Peers(config, self.ring.identity)
        self.hints = HintStore(
            self.storage.hints,
            self.storage.disk,
            config.hint_max_bytes,
            config.hint_max_age,
            wall_clock_ms,
        )
        self.hint_delivery = HintDelivery(self.hints, self.peers, config.hint_interval)
        self.coordinator = Coordinator(
            config, self.storage, self.ring, self.peers, self.clock, self.hints
        )
        self.internal = InternalApi(self.storage, self.clock, config.secret, self.ring.identity)
        self.trees = MerkleTrees(self.ring, config.self_url)
        self.anti_entropy = AntiEntropy(
            config.self_url,
            self.storage,
            self.trees,
            self.peers,
            self.clock,
            config.anti_entropy_interval,
            config.anti_entropy_rate,
            config.tombstone_grace,
        )
        self.storage.on_change = self.trees.change  # after the snapshot the trees load
        self.internal.exchange_answerer = self.anti_entropy.answer
        self.collector = Collector(
            self.storage,
            self.trees,
            self.anti_entropy.exchanged_since,
            self.clock.wall_ms,
            config.tombstone_grace,
        )
        keep_large_buffers_out_of_the_heap()
        self.budget = ByteBudget(config.max_in_flight_bytes)
        self.ring_share = self.ring.shares()
        client = ClientApi(self.coordinator, config, self.budget, self.status)
        routes = client.routes() | self.internal.routes()
        self.metrics: Metrics | None = None
        if config.metrics:
            self.metrics = Metrics(self.status, config.data_dir)
            for url, peer in self.peers.by_url.items():
                peer.observe_call = functools.partial(self.metrics.replica_call, url)
            routes["/metrics"] = Route({"GET": self.scrape}, counted=False)
        observe = self.metrics.client_request if self.metrics else None
        self.http = HttpServer(routes, config.max_in_flight, observe)

    async def scrape(self, request: web.BaseRequest, params: Params) -> web.Response:
        assert self.metrics is not None
        return web.Response(body=self.metrics.render(), headers={"Content-Type": CONTENT_TYPE})

    def status(self) -> dict[str, Any]:
        return {
            "node": self.config.self_url,
            "cluster": list(self.ring.nodes),
            "ring_identity": self.ring.identity,
            "ring_share": self.ring_share,
            "uptime": round(time.monotonic() - self.started_at, 3),
            "in_flight": self.http.in_flight,
            "max_in_flight": self.http.max_in_flight,
            "overload_refusals": self.http.refused,
            "bytes_in_flight": self.budget.in_flight,
            "max_in_flight_bytes": self.budget.limit,
            "byte_budget_refusals": self.budget.refused,
            "internal_errors": self.http.errors,
            "read_repairs": self.coordinator.counters.read_repairs,
            "background_failures": self.coordinator.counters.background_failures,
            "hints_delivered": self.hint_delivery.delivered,
            "hints_dropped": self.hints.dropped,
            "versions_refused": self.clock.refused,
            "disk": self.storage.disk.status(),
            "anti_entropy": {
                "interval": self.config.anti_entropy_interval,
                "trees_ready": self.anti_entropy.ready,
            },
            "tombstones": {
                "grace": self.config.tombstone_grace,
                "collected": self.collector.collected,
                "passes": self.collector.passes,
            },
            "peers": {
                url: peer.status()
                | {
                    "pending_hints": self.hints.pending[url],
                    "anti_entropy": self.anti_entropy.status(url),
                }
                for url, peer in self.peers.by_url.items()
            },
        }

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        client_max_size = self.config.max_value_bytes + _BODY_OVERHEAD

        def make_request(
            message: Any, payload: Any, protocol: Any, writer: Any, task: Any
        ) -> web.BaseRequest:
            return web.BaseRequest(
                message, payload, protocol, writer, task, loop, client_max_size=client_max_size
            )

        server = web.Server(
            self.http.handle,
            request_factory=make_request,
            access_log=None,
            # A key travels percent-encoded in the request line: up to 3 bytes per byte.
            max_line_size=3 * self.config.max_key_bytes + _REQUEST_LINE_OVERHEAD,
        )
        runner = web.ServerRunner(server, handle_signals=False, shutdown_timeout=SHUTDOWN_GRACE)
        quiet = QuietMalformedHttp()
        logging.getLogger("aiohttp.server").addFilter(quiet)
        await runner.setup()
        stop = asyncio.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        try:
            site = SharedPortSite(
                runner,
                self.config.host,
                self.config.port,
                self.internal,
                self.config.max_value_bytes + self.config.max_key_bytes + MESSAGE_OVERHEAD,
                self.budget,
            )
            await site.start()
            self.hint_delivery.start()
            self.anti_entropy.start()
            self.collector.start()
            log.info(
                "node %s serving on %s:%d (cluster of %d, data in %s)",
                self.config.self_url,
                self.config.host,
                self.config.port,
                len(self.ring),
                self.config.data_dir,
            )
            await stop.wait()
            log.info("stopping: no new connections, finishing in-flight requests")
        finally:
            await runner.cleanup()
            await self.hint_delivery.close()
            await self.collector.close()
            await self.anti_entropy.close()
            await self.peers.close()
            self.storage.close()
            logging.getLogger("aiohttp.server").removeFilter(quiet)
            log.info("stopped")


def skewed_wall_clock(skew_seconds: float) -> Callable[[], int]:
    """The wall clock, shifted by `--clock-skew` (the test bed's skewed-clock fault)."""
    if not skew_seconds:
        return wall_clock_ms
    skew_ms = round(skew_seconds * 1000)
    return lambda: wall_clock_ms() + skew_ms


def run_node(config: NodeConfig) -> None:
    import uvloop

    async def main() -> None:
        await Node(config).run()  # built inside the loop: sessions bind to it

    uvloop.run(main())
