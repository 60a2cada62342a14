"""A node: builds storage, clock, ring, peers, coordinator and the HTTP apps, runs them
until SIGTERM or Ctrl-C, then stops them in order."""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from typing import Any

from aiohttp import web

from dht.clock import HybridClock, wall_clock_ms
from dht.config import NodeConfig
from dht.coordinator import Coordinator
from dht.hints import HintDelivery, HintStore
from dht.http_api import ClientApi, InFlightLimit, plain_errors
from dht.internal_api import INTERNAL_PREFIX, InternalApi
from dht.peers import Peers
from dht.ring import Ring
from dht.storage import Storage

log = logging.getLogger(__name__)

# Headroom over the largest value for a replica write's record header; client values
# are checked against the exact limit in the handler.
_BODY_OVERHEAD = 64
# Method, path, other parameters and the HTTP version around the key in a request line.
_REQUEST_LINE_OVERHEAD = 1024
# How long SIGTERM waits for in-flight requests before it closes their connections.
SHUTDOWN_GRACE = 3.0


class Node:
    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.started_at = time.monotonic()
        self.storage = Storage(config.data_dir, config.sync_writes)
        self.clock = HybridClock()
        self.ring = Ring(config.cluster, config.vnodes)
        self.peers = Peers(config)
        self.hints = HintStore(
            self.storage.hints, config.hint_max_bytes, config.hint_max_age, wall_clock_ms
        )
        self.hint_delivery = HintDelivery(self.hints, self.peers, config.hint_interval)
        self.coordinator = Coordinator(
            config, self.storage, self.ring, self.peers, self.clock, self.hints
        )
        self.limit = InFlightLimit(config.max_in_flight, (INTERNAL_PREFIX, "/v0/status"))
        internal = InternalApi(self.storage, self.clock, config.secret)
        client = ClientApi(self.coordinator, config, self.status)
        self.app = web.Application(
            middlewares=[
                plain_errors(config.max_value_bytes),
                internal.authenticate,
                self.limit.middleware,
            ],
            client_max_size=config.max_value_bytes + _BODY_OVERHEAD,
        )
        self.app.add_routes(client.routes() + internal.routes())

    def status(self) -> dict[str, Any]:
        return {
            "node": self.config.self_url,
            "cluster": list(self.ring.nodes),
            "uptime": round(time.monotonic() - self.started_at, 3),
            "in_flight": self.limit.in_flight,
            "max_in_flight": self.limit.limit,
            "overload_refusals": self.limit.refused,
            "read_repairs": self.coordinator.counters.read_repairs,
            "background_failures": self.coordinator.counters.background_failures,
            "hints_delivered": self.hint_delivery.delivered,
            "hints_dropped": self.hints.dropped,
            "peers": {
                url: peer.status() | {"pending_hints": self.hints.pending[url]}
                for url, peer in self.peers.by_url.items()
            },
        }

    async def run(self) -> None:
        runner = web.AppRunner(
            self.app,
            access_log=None,
            handle_signals=False,
            shutdown_timeout=SHUTDOWN_GRACE,
            # A key travels percent-encoded in the request line: up to 3 bytes per byte.
            max_line_size=3 * self.config.max_key_bytes + _REQUEST_LINE_OVERHEAD,
        )
        await runner.setup()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        try:
            site = web.TCPSite(
                runner, self.config.host, self.config.port, backlog=1024, reuse_address=True
            )
            await site.start()
            self.hint_delivery.start()
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
            await self.coordinator.close()
            await self.peers.close()
            self.storage.close()
            log.info("stopped")


def run_node(config: NodeConfig) -> None:
    import uvloop

    async def main() -> None:
        await Node(config).run()  # built inside the loop: sessions bind to it

    uvloop.run(main())
