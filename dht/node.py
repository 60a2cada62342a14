"""A node: builds storage, clock, ring, peers, coordinator and the HTTP apps, runs them
until SIGTERM or Ctrl-C, then stops them in order."""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
import signal
import time
from collections.abc import Callable, Iterable
from typing import Any

from aiohttp import web

from dht.config import NodeConfig, request_line_limit
from dht.coordination.coordinator import Coordinator
from dht.limits import BODY_OVERHEAD, MESSAGE_OVERHEAD, SHUTDOWN_GRACE
from dht.membership.api import MembershipApi
from dht.membership.rebalance import Rebalance
from dht.metrics import CONTENT_TYPE, Metrics
from dht.model.clock import HybridClock, version_ms, wall_clock_ms, wall_clock_us
from dht.model.log_limits import QuietMalformedHttp
from dht.model.merkle import MerkleTrees, holders
from dht.model.record import Record
from dht.model.topology import STABLE, TopologyState
from dht.replication.anti_entropy import AntiEntropy
from dht.replication.collector import Collector
from dht.replication.fence import FenceWatch
from dht.replication.hints import HintDelivery, HintStore
from dht.storage.membership import Membership, joining_state
from dht.storage.store import Storage
from dht.transport.local_replica import LocalReplica
from dht.transport.peers import Peer, Peers
from dht.transport.tls import load_contexts
from dht.web.admission import BodyPace, ByteBudget, keep_large_buffers_out_of_the_heap
from dht.web.client_api import ClientApi
from dht.web.internal_api import InternalApi
from dht.web.lean_http import LeanHttp
from dht.web.listener import SharedPortSite
from dht.web.server import HttpServer, Params, Route

log = logging.getLogger(__name__)


class Node:
    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.started_at = time.monotonic()
        wall_ms = skewed_wall_clock(config.clock_skew)
        self.storage = Storage(config.data_dir, config.disk_reserve, config.durability, wall_ms)
        self.clock = HybridClock(
            wall_ms,
            config.max_clock_drift_ms,
            floor=self.storage.clock_ceiling(),
            save_ceiling=self.storage.save_clock_ceiling,
            wall_us=skewed_wall_clock_us(config.clock_skew),
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
        )
        self.hints = HintStore(
            self.storage.hints,
            self.storage.disk,
            config.hint_max_bytes,
            hint_max_age(config),
            wall_clock_ms,
        )
        self.hint_delivery = HintDelivery(self.hints, self.peers, config.hint_interval)
        self.coordinator = Coordinator(
            config, self.storage, self.membership, self.peers, self.clock, self.hints
        )
        self.internal = InternalApi(
            config.self_url,
            self.storage,
            config.secret,
            self.membership,
            self.tls.refusals if self.tls is not None else None,
        )
        self.local_replica = LocalReplica(self.storage, self.clock, config.secret, self.membership)
        self.rebalance = Rebalance(
            config.self_url,
            config.data_dir,
            self.storage,
            self.membership,
            self.peers,
            config.handoff_rate,
        )
        self.local_replica.on_stored = self._hand_off_if_not_owned
        self.anti_entropy, self.collector = self._repair_loops()
        self.ring_share = self.membership.topology.current.shares()
        self.body_pace = BodyPace(config.min_body_rate)
        client = ClientApi(self.coordinator, config, self.budget, self.body_pace, self.status)
        admin = MembershipApi(
            self.membership, self.apply_step, self._guard_step, self.clock.wall_ms
        )
        routes = client.routes() | self.internal.routes() | admin.routes()
        self.metrics: Metrics | None = None
        if config.metrics:
            self.metrics = Metrics(self.status, config.data_dir)
            self._observe_calls(self.peers.by_url.values())
            routes["/metrics"] = Route({"GET": self.scrape}, counted=False)
        observe = self.metrics.client_request if self.metrics else None
        self.http = HttpServer(routes, config.max_in_flight, observe)
        self.lean: LeanHttp | None = None  # made when the node starts serving
        self.fence = FenceWatch(
            config.self_url,
            config.data_dir,
            self.membership,
            self.peers,
            self._fenced,
            self.clock.wall_ms,
            config.max_clock_drift_ms,
            config.timeout,
        )
        self.http.fenced = self.fence.refusal

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

    def _fenced(self, reason: str | None) -> None:
        self.http.fenced = reason

    def _hand_off_if_not_owned(self, key: bytes, record: Record) -> None:
        """A replica write to a node that does not own the key under its stable
        membership: a node a step behind sent it (or a hint came late) after the handoff
        had passed. The handoff looks again, so the record ends on its owners only."""
        if self.membership.state.epoch == 0 or self.membership.phase != STABLE:
            return  # never changed: every write comes to an owner; mid-change: handoff runs
        if self.config.self_url not in holders(
            self.membership.topology.current, key, record.copies
        ):
            self.rebalance.wake()

    def _repair_loops(self) -> tuple[AntiEntropy, Collector]:
        """Anti-entropy and tombstone collection over the current ring, with Merkle trees
        loaded from a snapshot taken now. They run only while the membership is stable:
        between two rings a tree shared with a peer has no meaning, and a tombstone
        collected then could let a handed-off value come back."""
        trees = MerkleTrees(self.membership.topology.current, self.config.self_url)
        anti_entropy = AntiEntropy(
            self.config.self_url,
            self.storage,
            trees,
            self.peers,
            self.clock,
            self.config.anti_entropy_interval,
            self.config.anti_entropy_rate,
            self.config.tombstone_grace,
            self.config.max_clock_drift,
        )
        collector = Collector(
            self.storage,
            trees,
            anti_entropy.exchanged_since,
            self.clock.wall_ms,
            self.config.tombstone_grace,
        )
        if self.membership.phase == STABLE:  # else they stay unhooked (and unstarted)
            self.storage.on_change = trees.change  # after the snapshot the trees load
            self.internal.exchange_answerer = anti_entropy.answer
        return anti_entropy, collector

    def _start_repair_loops(self) -> None:
        if self.membership.phase == STABLE:
            self.anti_entropy.start()
            self.collector.start()

    async def _stop_repair_loops(self) -> None:
        self.storage.on_change = None
        self.internal.exchange_answerer = None
        await self.collector.close()
        await self.anti_entropy.close()

    def _observe_calls(self, peers: Iterable[Peer]) -> None:
        if self.metrics is not None:
            for peer in peers:
                peer.observe_call = functools.partial(self.metrics.replica_call, peer.url)

    async def apply_step(self, proposed: TopologyState) -> bool:
        """Takes a step of a membership change (raises BadTransition if it is not the
        next one), then waits for the client operations placed by the step before; says
        whether they all ended within the deadline (the driver asks again if not)."""
        if self.membership.apply(proposed):
            added = self.peers.ensure(proposed.members, self.membership.identity)
            self._observe_calls(added)
            self.ring_share = self.membership.topology.current.shares()
            await self._stop_repair_loops()
            if proposed.phase == STABLE:  # on the new ring, from fresh trees
                await self.peers.retire(proposed.members)
                self.anti_entropy, self.collector = self._repair_loops()
                self._start_repair_loops()
            self.rebalance.wake()
        return await self.coordinator.drain(proposed.epoch, 2 * self.config.timeout + 1.0)

    async def scrape(self, request: web.BaseRequest, params: Params) -> web.Response:
        assert self.metrics is not None
        return web.Response(body=self.metrics.render(), headers={"Content-Type": CONTENT_TYPE})

    def status(self) -> dict[str, Any]:
        return {
            "node": self.config.self_url,
            "cluster": list(self.membership.topology.current.nodes),
            "ring_identity": self.membership.identity,
            "vnodes": self.config.vnodes,
            "fenced": self.fence.fenced,
            "clock_fence": self.fence.status(),
            "tls": {"enabled": self.tls is not None}
            | (self.tls.refusals.status() if self.tls is not None else {}),
            "membership": self.membership.state.to_json() | {"handoff": self.rebalance.status()},
            "ring_share": self.ring_share,
            "uptime": round(time.monotonic() - self.started_at, 3),
            "in_flight": self.http.in_flight,
            "max_in_flight": self.http.max_in_flight,
            "overload_refusals": self.http.refused,
            "bytes_in_flight": self.budget.in_flight,
            "max_in_flight_bytes": self.budget.limit,
            "byte_budget_refusals": self.budget.refused,
            "slow_bodies_cut": self.body_pace.cut,
            "internal_errors": self.http.errors,
            # Connections the lean HTTP protocol holds, and those it handed to aiohttp.
            "lean_http": None
            if self.lean is None
            else {"connections": len(self.lean.connections), "handed_off": self.lean.handed_off},
            "read_repairs": self.coordinator.counters.read_repairs,
            "restamped_writes": self.coordinator.counters.restamped_writes,
            "background_failures": self.coordinator.counters.background_failures,
            "hints_delivered": self.hint_delivery.delivered,
            "hints_dropped": self.hints.dropped,
            "versions_refused": self.clock.refused,
            "disk": self.storage.disk.status(),
            "storage": self.storage.status(),
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
        quiet = QuietMalformedHttp()
        logging.getLogger("aiohttp.server").addFilter(quiet)
        await runner.setup()
        stop = asyncio.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        try:
            if self.config.lean_http:
                self.lean = LeanHttp(
                    self.http.whole_body_routes(),
                    self.http.serve_whole_body,
                    server,
                    max_line_size,
                    self.body_pace,
                    self.config.max_value_bytes,
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
            self._start_repair_loops()
            self.rebalance.start()
            if self.fence.fenced is None:
                self.fence.start()
            # What start-up built (modules, the anti-entropy trees of every record held)
            # lives as long as the node: the garbage collector's full passes, which stop
            # the loop, no longer walk it (3 nodes at 3,750 PUT/s, 20 s: passes over 2 ms
            # 9 -> 4, their total 199 -> 15 ms, the longest 45 -> 7 ms).
            gc.freeze()
            log.info(
                "node %s serving on %s:%d (cluster of %d, data in %s)",
                self.config.self_url,
                self.config.host,
                self.config.port,
                len(self.membership.topology.current),
                self.config.data_dir,
            )
            await stop.wait()
            log.info("stopping: no new connections, finishing in-flight requests")
        finally:
            # aiohttp's connections and the lean ones close within one grace.
            deadline = loop.time() + SHUTDOWN_GRACE
            await runner.cleanup()
            if self.lean is not None:
                await self.lean.closed(deadline)
            await self.hint_delivery.close()
            await self.rebalance.close()
            await self.fence.close()
            await self._stop_repair_loops()
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


def hint_max_age(config: NodeConfig) -> float:
    """`--hint-max-age`, at most half of `--tombstone-grace`: a hint delivered after every
    node collected the tombstone that replaced its record would bring the record back
    (the other half covers clocks that disagree). A replica whose hint is dropped is
    repaired by anti-entropy instead."""
    limit = config.tombstone_grace / 2
    if config.hint_max_age <= limit:
        return config.hint_max_age
    log.info(
        "hints are kept at most %g s, half of --tombstone-grace, not --hint-max-age %g s: "
        "an older hint could bring back a record whose tombstone is collected",
        limit,
        config.hint_max_age,
    )
    return limit


def skewed_wall_clock(skew_seconds: float) -> Callable[[], int]:
    """The wall clock, shifted by `--clock-skew` (the test bed's skewed-clock fault)."""
    if not skew_seconds:
        return wall_clock_ms
    skew_ms = round(skew_seconds * 1000)
    return lambda: wall_clock_ms() + skew_ms


def skewed_wall_clock_us(skew_seconds: float) -> Callable[[], int]:
    """`skewed_wall_clock` in microseconds."""
    if not skew_seconds:
        return wall_clock_us
    skew_us = round(skew_seconds * 1_000_000)
    return lambda: wall_clock_us() + skew_us


def run_node(config: NodeConfig) -> None:
    import uvloop

    async def main() -> None:
        await Node(config).run()  # built inside the loop: sessions bind to it

    uvloop.run(main())
