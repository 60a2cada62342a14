"""`GET /v0/status`: one node's state as a JSON document, read from its parts when asked.
`/metrics` reads the same document (`dht.metrics`), so the two never disagree. The node
is passed in as the parts this reads (`StatusSource`), so nothing here imports it."""

from __future__ import annotations

from typing import Any, Protocol

from dht.config import NodeConfig
from dht.coordination.coordinator import Coordinator
from dht.membership.rebalance import Rebalance
from dht.membership.step import StepApplier
from dht.model.clock import HybridClock
from dht.model.machine import Machine
from dht.replication.fence import FenceWatch
from dht.replication.hints import HintDelivery, HintStore
from dht.replication.repair_loops import RepairLoops
from dht.storage.membership import Membership
from dht.storage.store import Storage
from dht.transport.peers import Peers
from dht.transport.tls import TlsContexts
from dht.web.admission import BodyPace, ByteBudget
from dht.web.lean_http import LeanHttp
from dht.web.server import HttpServer


class StatusSource(Protocol):
    """The parts of a node the status document reads (`dht.node.Node` is one)."""

    config: NodeConfig
    machine: Machine
    started_at: float  # on machine.monotonic
    membership: Membership
    fence: FenceWatch
    tls: TlsContexts | None
    rebalance: Rebalance
    steps: StepApplier
    http: HttpServer
    budget: ByteBudget
    body_pace: BodyPace
    lean: LeanHttp | None
    coordinator: Coordinator
    hint_delivery: HintDelivery
    hints: HintStore
    clock: HybridClock
    storage: Storage
    repair_loops: RepairLoops
    peers: Peers


def node_status(node: StatusSource) -> dict[str, Any]:
    return {
        "node": node.config.self_url,
        "cluster": list(node.membership.topology.current.nodes),
        "ring_identity": node.membership.identity,
        "vnodes": node.config.vnodes,
        "fenced": node.fence.fenced,
        "clock_fence": node.fence.status(),
        "tls": {"enabled": node.tls is not None}
        | (node.tls.refusals.status() if node.tls is not None else {}),
        "membership": node.membership.state.to_json() | {"handoff": node.rebalance.status()},
        "ring_share": node.steps.ring_share,
        "uptime": round(node.machine.monotonic() - node.started_at, 3),
        "in_flight": node.http.in_flight,
        "max_in_flight": node.http.max_in_flight,
        "overload_refusals": node.http.refused,
        "bytes_in_flight": node.budget.in_flight,
        "max_in_flight_bytes": node.budget.limit,
        "byte_budget_refusals": node.budget.refused,
        "slow_bodies_cut": node.body_pace.cut,
        "internal_errors": node.http.errors,
        # Connections the lean HTTP protocol holds, and those it handed to aiohttp.
        "lean_http": None
        if node.lean is None
        else {"connections": len(node.lean.connections), "handed_off": node.lean.handed_off},
        "read_repairs": node.coordinator.counters.read_repairs,
        "restamped_writes": node.coordinator.counters.restamped_writes,
        "background_failures": node.coordinator.counters.background_failures,
        "hints_delivered": node.hint_delivery.delivered,
        "hints_dropped": node.hints.dropped,
        "versions_refused": node.clock.refused,
        "disk": node.storage.disk.status(),
        "storage": node.storage.status(),
        "anti_entropy": {
            "interval": node.config.anti_entropy_interval,
            "trees_ready": node.repair_loops.anti_entropy.ready,
        },
        "tombstones": {
            "grace": node.config.tombstone_grace,
            "collected": node.repair_loops.collector.collected,
            "passes": node.repair_loops.collector.passes,
            # Collection holds until the change that made this ring is closed (SPEC 13.3).
            "waiting_for": node.repair_loops.waiting_for,
        },
        "peers": {
            url: peer.status()
            | {
                "pending_hints": node.hints.pending[url],
                "anti_entropy": node.repair_loops.anti_entropy.status(url),
            }
            for url, peer in node.peers.by_url.items()
        },
    }
