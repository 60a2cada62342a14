"""A node: builds storage, clock, ring, peers, coordinator and the HTTP apps, runs them
until SIGTERM or Ctrl-C, then stops them in order."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from dht.config import NodeConfig, request_line_limit
from dht.coordination.coordinator import Coordinator
from dht.limits import BODY_OVERHEAD, MESSAGE_OVERHEAD, SHUTDOWN_GRACE
from dht.membership.api import MembershipApi
from dht.membership.rebalance import Rebalance
from dht.membership.step import StepApplier
from dht.metrics import Metrics
from dht.model.clock import (
    HybridClock,
    skewed_wall_clock,
    skewed_wall_clock_us,
    version_ms,
)
from dht.model.log_limits import QuietMalformedHttp
from dht.model.machine import SYSTEM, Machine
from dht.model.topology import STABLE, TopologyState
from dht.replication.fence import FenceWatch
from dht.replication.hints import HintDelivery, HintStore, hint_max_age
from dht.replication.repair_loops import ExchangeAnswers, RepairLoops
from dht.status import node_status
from dht.storage.digest_changes import DigestChanges
from dht.storage.membership import Membership, joining_state
from dht.storage.store import Storage
from dht.transport.local_replica import LocalReplica
from dht.transport.peers import Peers
from dht.transport.tls import load_contexts
from dht.web.admission import BodyPace, ByteBudget, keep_large_buffers_out_of_the_heap
from dht.web.client_api import ClientApi
from dht.web.internal_api import InternalApi
from dht.web.lean_http import LeanHttp
from dht.web.listener import SharedPortSite
from dht.web.server import HttpServer, Route

log = logging.getLogger(__name__)

# The garbage collector's youngest generation runs once this many more objects were
# allocated than freed (Python's default: 700); `Node.run` says why.
YOUNG_GC_THRESHOLD = 10_000


@dataclass(frozen=True, slots=True)
class ReplicaParts:
    """What a node runs over its storage, clock, membership and peers to coordinate
    requests, serve as a replica, repair replicas and take membership steps, wired to each
    other. Built here for `Node` and for the simulator's node (`dht.simulation`), so both
    run the same wiring."""

    hints: HintStore
    hint_delivery: HintDelivery
    coordinator: Coordinator
    local_replica: LocalReplica
    rebalance: Rebalance
    repair_loops: RepairLoops
    steps: StepApplier

    @classmethod
    def build(
        cls,
        config: NodeConfig,
        storage: Storage,
        digest_changes: DigestChanges,
        membership: Membership,
        peers: Peers,
        clock: HybridClock,
        exchanges: ExchangeAnswers,
        machine: Machine,
    ) -> ReplicaParts:
        """`digest_changes` is the sink `storage` was made with, to which the repair loops
        attach their trees; `exchanges`, the one the repair loops tell who answers a peer's
        anti-entropy exchange; `machine`, the clocks and randomness every part
        reads."""
        hints = HintStore(
            storage.hints,
            storage.disk,
            config.hint_max_bytes,
            hint_max_age(config),
            machine.wall_ms,
        )
        hint_delivery = HintDelivery(hints, peers, config.hint_interval)
        coordinator = Coordinator(config, storage, membership, peers, clock, hints)
        rebalance = Rebalance(
            config.self_url,
            config.data_dir,
            storage,
            membership,
            peers,
            config.handoff_rate,
            machine,
        )
        repair_loops = RepairLoops(
            config, storage, digest_changes, membership, peers, clock, exchanges, machine
        )
        steps = StepApplier(
            config.self_url,
            membership,
            peers,
            repair_loops,
            rebalance,
            coordinator,
            config.timeout,
        )
        local_replica = LocalReplica(
            storage, clock, config.secret, membership, steps.hand_off_if_not_owned, machine
        )
        return cls(hints, hint_delivery, coordinator, local_replica, rebalance, repair_loops, steps)


class Node:
    def __init__(self, config: NodeConfig, machine: Machine = SYSTEM) -> None:
        """`machine`: the clocks and randomness its parts read (the system's)."""
        self.config = config
        self.machine = machine
        self.started_at = machine.monotonic()
        wall_ms = skewed_wall_clock(machine, config.clock_skew)
        digest_changes = DigestChanges()  # storage publishes, the repair loops' trees listen
        exchanges = ExchangeAnswers()  # the repair loops say who answers, the HTTP layer asks
        self.storage = Storage(
            config.data_dir,
            config.disk_reserve,
            config.durability,
            wall_ms,
            changes=digest_changes,
            monotonic=machine.monotonic,
            compression=config.compression,
        )
        self.clock = HybridClock(
            wall_ms,
            config.max_clock_drift_ms,
            floor=self.storage.clock_ceiling(),
            save_ceiling=self.storage.save_clock_ceiling,
            wall_us=skewed_wall_clock_us(machine, config.clock_skew),
        )
        self._warn_if_clock_behind()
        seed = (
            joining_state(config.cluster, config.self_url)
            if config.join
            else TopologyState(0, STABLE, config.cluster)
        )
        self.membership = Membership(config.data_dir, seed, config.vnodes)
        keep_large_buffers_out_of_the_heap()
        self.budget = ByteBudget(config.max_in_flight_bytes)
        self.metrics = Metrics(self.status, config.data_dir) if config.metrics else None
        self.tls = (
            load_contexts(config.tls_cert, config.tls_key, config.tls_ca)
            if config.tls_cert and config.tls_key and config.tls_ca
            else None
        )
        self.peers = Peers(
            config,
            self.membership.state.members,
            self.membership.identity,
            self.budget,
            self.tls.client if self.tls is not None else None,
            machine,
            self.metrics.replica_call if self.metrics is not None else None,
        )
        self.internal = InternalApi(
            config.self_url,
            self.storage,
            config.secret,
            self.membership,
            exchanges,
            self.tls.refusals if self.tls is not None else None,
            machine,
        )
        parts = ReplicaParts.build(
            config,
            self.storage,
            digest_changes,
            self.membership,
            self.peers,
            self.clock,
            exchanges,
            machine,
        )
        self.hints, self.hint_delivery = parts.hints, parts.hint_delivery
        self.coordinator, self.local_replica = parts.coordinator, parts.local_replica
        self.rebalance, self.repair_loops, self.steps = (
            parts.rebalance,
            parts.repair_loops,
            parts.steps,
        )
        self.body_pace = BodyPace(config.min_body_rate)
        client = ClientApi(self.coordinator, config, self.budget, self.body_pace, self.status)
        admin = MembershipApi(self.membership, self.steps, self._guard_step, self.clock.wall_ms)
        routes = client.routes() | self.internal.routes() | admin.routes()
        if self.metrics is not None:
            routes["/metrics"] = Route({"GET": self.metrics.scrape}, counted=False)
        observe = self.metrics.client_request if self.metrics else None
        self.http = HttpServer(routes, config.max_in_flight, observe, machine)
        self.lean: LeanHttp | None = None  # made when the node starts serving
        self.fence = FenceWatch(
            config.self_url,
            config.data_dir,
            self.membership,
            self.peers,
            self.http.fence,
            self.clock.wall_ms,
            config.max_clock_drift_ms,
            config.timeout,
            machine=machine,
        )

    def _warn_if_clock_behind(self) -> None:
        behind_ms = version_ms(self.clock.last) - self.clock.wall_ms()
        if behind_ms > 1000:
            log.warning(
                "this node's wall clock is %.1f s behind versions it issued or took before "
                "its restart: its versions go on from there (the clock never goes back), "
                "so they run ahead of its wall clock until it catches up",
                behind_ms / 1000,
            )

    async def _guard_step(self, request: web.BaseRequest) -> bytes | web.Response:
        """A membership step proves the secret; it carries no records, so the operator's
        tool needs no certificate."""
        return await self.internal.guarded_body(request, peers_only=False)

    def status(self) -> dict[str, Any]:
        return node_status(self)

    async def run(self) -> None:
        """Serves until SIGTERM or Ctrl-C, then stops every part in order."""
        loop = asyncio.get_running_loop()
        server, runner = self._http_server()
        quiet = QuietMalformedHttp()
        logging.getLogger("aiohttp.server").addFilter(quiet)
        await runner.setup()
        stop = asyncio.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        try:
            await self._start(server, runner)
            await stop.wait()
            log.info("stopping: no new connections, finishing in-flight requests")
        finally:
            await self._stop(runner, quiet)

    def _http_server(self) -> tuple[web.Server, web.ServerRunner]:
        loop = asyncio.get_running_loop()
        client_max_size = self.config.max_value_bytes + BODY_OVERHEAD

        def make_request(
            message: Any, payload: Any, protocol: Any, writer: Any, task: Any
        ) -> web.BaseRequest:
            return web.BaseRequest(
                message, payload, protocol, writer, task, loop, client_max_size=client_max_size
            )

        max_line_size = request_line_limit(self.config.max_key_bytes)
        server = web.Server(
            self.http.handle,
            request_factory=make_request,
            access_log=None,
            max_line_size=max_line_size,
        )
        runner = web.ServerRunner(server, handle_signals=False, shutdown_timeout=SHUTDOWN_GRACE)
        return server, runner

    async def _start(self, server: web.Server, runner: web.ServerRunner) -> None:
        max_line_size = request_line_limit(self.config.max_key_bytes)
        if self.config.lean_http:
            self.lean = LeanHttp(
                self.http.whole_body_routes(),
                self.http.serve_whole_body,
                server,
                max_line_size,
                self.body_pace,
                self.config.max_value_bytes,
                self.machine,
            )
        site = SharedPortSite(
            runner,
            self.config.host,
            self.config.port,
            self.local_replica,
            self.config.max_value_bytes + self.config.max_key_bytes + MESSAGE_OVERHEAD,
            self.budget,
            self.tls,
            self.lean,
        )
        if self.fence.fenced is None:
            # Never a stale answer once removed, nor a refused write with a clock off.
            await self.fence.first_check()
        await site.start()
        self.hint_delivery.start()
        self.repair_loops.start()
        self.rebalance.start()
        if self.fence.fenced is None:
            self.fence.start()
        # What start-up built (modules, the anti-entropy trees of every record held)
        # lives as long as the node: the garbage collector's full passes, which stop
        # the loop, no longer walk it (3 nodes at 3,750 PUT/s, 20 s: passes over 2 ms
        # 9 -> 4, their total 199 -> 15 ms, the longest 45 -> 7 ms).
        gc.freeze()
        # At Python's default, the objects of 64 requests in flight alone fill the
        # youngest generation: one node under 8 s of PUTs ran 1,340 collections (0.18 s,
        # 1.8 µs of its ~85 µs of CPU a request, the longest pass 4.6 ms), and freed
        # next to nothing (they found no cycles to free: at 10,000 the same load ran
        # none at all). Cyclic garbage, should some come, is still collected.
        gc.set_threshold(YOUNG_GC_THRESHOLD, *gc.get_threshold()[1:])
        log.info(
            "node %s serving on %s:%d (cluster of %d, data in %s)",
            self.config.self_url,
            self.config.host,
            self.config.port,
            len(self.membership.topology.current),
            self.config.data_dir,
        )

    async def _stop(self, runner: web.ServerRunner, quiet: QuietMalformedHttp) -> None:
        loop = asyncio.get_running_loop()
        # aiohttp's connections and the lean ones close within one grace.
        deadline = loop.time() + SHUTDOWN_GRACE
        await runner.cleanup()
        if self.lean is not None:
            await self.lean.closed(deadline)
        await self.hint_delivery.close()
        await self.rebalance.close()
        await self.fence.close()
        await self.repair_loops.stop()
        await self.peers.close()
        # What was queued lands (no connection is left to acknowledge it on).
        await self.storage.drain()
        # The ceiling saved last holds (its file keeps the highest of its slots):
        # the next start begins at most a second of clock time ahead, as after a crash.
        self.storage.close()
        logging.getLogger("aiohttp.server").removeFilter(quiet)
        synced = self.storage.status()
        log.info(
            "stopped; %d writes synced in %d syncs (--durability %s)",
            synced["synced_writes"],
            synced["syncs"],
            synced["durability"],
        )


def run_node(config: NodeConfig) -> None:
    import uvloop

    async def main() -> None:
        await Node(config).run()  # built inside the loop: sessions bind to it

    uvloop.run(main())
