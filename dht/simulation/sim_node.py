"""One node of the simulated cluster: dht's own parts, built as `dht/node.py` builds
them, over the simulator's disk and network.

Real: `Storage` (put-if-newer, the digest index, the group commit, collection), the
`HybridClock` and its ceiling, `Membership`, `Peers`/`Peer` with their breakers and
deadlines (`PendingCall`), the replica channel's both ends (`ReplicaChannel`,
`ServerConnection`, the codec, the handshake and proof), `LocalReplica`, the
`Coordinator` with its tally and read repair, `HintStore`/`HintDelivery`,
`AntiEntropy` with its Merkle trees and `Collector` (in `RepairLoops`), `FenceWatch`,
and for membership changes `StepApplier`, `Rebalance` and `MembershipApi`.

Simulated: the bytes under the channel (`dht.simulation.network`), the database and
the writer thread under `Storage` (`dht.simulation.disk`), and the node's two internal
HTTP requests, each answered by the code behind its route (`SimPeer`): the
anti-entropy exchange (`AntiEntropy.answer`) and the membership step with the clock
header (what `MembershipApi.show` answers); and the operator's requests a change's
driver sends (`admin`: `MembershipApi`'s GET and PUT of the step, the membership part
of `/v0/status`). A client's request runs the node's HTTP edge
(`dht.simulation.http_client`): its lean HTTP path, `HttpServer` (the in-flight bound,
the fence) and `ClientApi`, as bytes over the simulated network; only a request the
lean path hands to aiohttp would not run, and the simulator's clients send none.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from pathlib import Path
from typing import Any, cast

from aiohttp.web_protocol import RequestHandler

from dht.config import NodeConfig, request_line_limit
from dht.limits import MESSAGE_OVERHEAD
from dht.membership.api import MembershipApi
from dht.model.clock import HybridClock, version_ms
from dht.model.log_limits import RateLimitedLog
from dht.model.machine import Machine
from dht.model.topology import STABLE, TopologyState
from dht.node import ReplicaParts
from dht.replication.fence import FenceWatch
from dht.replication.repair_loops import ExchangeAnswers
from dht.simulation.disk import SimDisk
from dht.simulation.loop import EPOCH, Incarnation, VirtualClocks, VirtualLoop
from dht.simulation.network import Network
from dht.storage.digest_changes import DigestChanges
from dht.storage.disk import DiskSpace
from dht.storage.membership import Membership, joining_state
from dht.storage.store import Storage
from dht.transport.channel import PeerError
from dht.transport.channel_server import ServerConnection
from dht.transport.handshakes import Handshakes
from dht.transport.peers import Peer, Peers
from dht.transport.wire import CLOCK_HEADER, EXCHANGE_PATH, TOPOLOGY_PATH
from dht.web.admission import BodyPace, ByteBudget
from dht.web.client_api import ClientApi
from dht.web.lean_http import LeanConnection, LeanHttp
from dht.web.server import HttpServer

_log = logging.getLogger(__name__)


STATUS_PATH = "/v0/status"

# Free bytes the simulated volume always has: the disk-full fault is not simulated.
_FREE_BYTES = 1 << 40


class SimPeer(Peer):
    """A `Peer` whose channel dials through the simulated network (the loop's
    `create_connection`) and whose internal HTTP requests cross it too."""

    def __init__(self, network: Network, src: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._network = network
        self._src = src
        self._port = int(self.url.rsplit(":", 1)[1])

    async def get_json(self, path: str) -> tuple[Any, dict[str, str]]:
        async def show(node: SimNode) -> tuple[Any, dict[str, str]]:
            if path != TOPOLOGY_PATH:
                raise PeerError(f"{self.url}: {path} answered 404")
            return node.membership.state.to_json(), {CLOCK_HEADER: str(node.clock.wall_ms())}

        try:
            async with asyncio.timeout(self.timeout):
                return await self._network.request(self._src, self._port, show)
        except TimeoutError as exc:
            raise PeerError(f"{self.url}: no answer within {self.timeout}s") from exc
        except OSError as exc:
            raise PeerError(f"{self.url}: {exc!r}") from exc

    async def post_json(self, path: str, message: dict[str, Any]) -> dict[str, Any]:
        body = json.dumps(message)

        async def exchange(node: SimNode) -> dict[str, Any]:
            answerer = node.exchanges.answerer
            if path != EXCHANGE_PATH or answerer is None:
                raise PeerError(f"{self.url}: {path} answered 503")
            try:
                answer: dict[str, Any] = json.loads(json.dumps(answerer(json.loads(body))))
            except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
                raise PeerError(f"{self.url}: {path} answered 400") from exc
            return answer

        async def request() -> dict[str, Any]:
            return await self._network.request(self._src, self._port, exchange)

        return await self._guarded(request)


class _Request:
    """What `MembershipApi` reads of a request: its body (the guard's part)."""

    def __init__(self, body: bytes) -> None:
        self.body = body


async def _body_of(request: Any) -> bytes:
    """The guard of the step route with no cluster secret set: the body as it came."""
    body: bytes = request.body
    return body


class SimPeers(Peers):
    def __init__(
        self, network: Network, config: NodeConfig, nodes: Any, identity: str, machine: Machine
    ) -> None:
        self._network = network
        super().__init__(config, nodes, identity, machine=machine)

    def ensure(self, nodes: Any, ring_identity: str) -> list[Peer]:
        added: list[Peer] = []
        for url in nodes:
            if url != self._config.self_url and url not in self.by_url:
                peer = SimPeer(
                    self._network,
                    self._config.self_url,
                    url,
                    self._config,
                    ring_identity,
                    machine=self._machine,
                )
                self.by_url[url] = peer
                added.append(peer)
        for known in self.by_url.values():
            known.set_identity(ring_identity)
        return added


def node_config(url: str, cluster: tuple[str, ...], data_dir: Path) -> NodeConfig:
    """The settings of a simulated node: the defaults, with the background loops' periods
    short enough that a run of minutes sees many of their rounds."""
    return NodeConfig(
        port=int(url.rsplit(":", 1)[1]),
        data_dir=data_dir,
        cluster=cluster,
        self_url=url,
        vnodes=64,
        timeout=1.0,
        hint_interval=0.5,
        anti_entropy_interval=5.0,
        tombstone_grace=10.0,
        hint_max_age=5.0,
        max_clock_drift=2.0,
    )


class SimNode:
    """One node's process: `start` builds and starts its parts in a new incarnation,
    `crash` abandons them (and the disk loses what it had not synced)."""

    def __init__(
        self,
        name: str,
        config: NodeConfig,
        network: Network,
        loop: VirtualLoop,
        rng: random.Random,
        clocks: VirtualClocks,
    ) -> None:
        """`clocks`: each of its runs is given `clocks.machine` of that run."""
        self.name = name
        self.clocks = clocks
        self.config = config
        self.network = network
        self.loop = loop
        self.disk = SimDisk(rng)
        self.incarnations = 0
        self.incarnation: Incarnation | None = None
        self.clock_offset = 0.0
        self.exchanges = ExchangeAnswers()  # no process yet: no one answers
        self.last_version = 0  # the newest version it issued, in any incarnation
        # How far the versions it issued were from true time, in seconds (the least and
        # the most, over every incarnation): what the history checker allows for.
        self.version_error: tuple[float, float] | None = None
        self.violations: list[str] = []  # invariants its code broke, as the run saw
        config.data_dir.mkdir(parents=True, exist_ok=True)

    @property
    def up(self) -> bool:
        return self.incarnation is not None and not self.incarnation.dead

    def start(self) -> asyncio.Task[None]:
        """A new process on this node's disk; returns the task that starts it."""
        self.incarnations += 1
        incarnation = Incarnation(self.name, self.incarnations, self.clock_offset)
        self.incarnation = incarnation
        context = incarnation.context()
        context.run(self._build)
        return self.loop.create_task(self._serve(), context=context)

    def _build(self) -> None:
        config = self.config
        disk = self.disk
        assert self.incarnation is not None
        machine = self.clocks.machine(self.incarnation)
        digest_changes = DigestChanges()
        self.storage = Storage(
            config.data_dir,
            0,
            "group",
            machine.wall_ms,
            db=disk.db,
            writer=disk.writer(),
            disk=DiskSpace(config.data_dir, 0, measure=lambda _: _FREE_BYTES),
            changes=digest_changes,
        )
        self.clock = HybridClock(
            machine.wall_ms,
            config.max_clock_drift_ms,
            floor=self.clock_floor(),
            save_ceiling=disk.save_ceiling,
            wall_us=machine.wall_us,
        )
        self._watch_versions(self.clock)
        seed = (
            joining_state(config.cluster, config.self_url)
            if config.join
            else TopologyState(0, STABLE, config.cluster)
        )
        self.membership = Membership(config.data_dir, seed, config.vnodes)
        self.peers = SimPeers(
            self.network, config, self.membership.state.members, self.membership.identity, machine
        )
        self.exchanges = ExchangeAnswers()  # a new process answers no exchange yet
        parts = ReplicaParts.build(
            config,
            self.storage,
            digest_changes,
            self.membership,
            self.peers,
            self.clock,
            self.exchanges,
            machine,
        )
        self.hints, self.hint_delivery = parts.hints, parts.hint_delivery
        self.coordinator, self.local_replica = parts.coordinator, parts.local_replica
        self.rebalance, self.repair_loops, self.steps = (
            parts.rebalance,
            parts.repair_loops,
            parts.steps,
        )
        self.admin_api = MembershipApi(self.membership, self.steps, _body_of, self.clock.wall_ms)
        pace = BodyPace(config.min_body_rate)
        budget = ByteBudget(config.max_in_flight_bytes)
        client = ClientApi(self.coordinator, config, budget, pace, _no_status)
        self.http = HttpServer(client.routes(), config.max_in_flight, None, machine)
        self.lean = LeanHttp(
            self.http.whole_body_routes(),
            self.http.serve_whole_body,
            _no_fallback,
            request_line_limit(config.max_key_bytes),
            pace,
            config.max_value_bytes,
            machine,
        )
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
        self._handshakes = Handshakes(RateLimitedLog(_log))
        self._channels: set[ServerConnection] = set()
        self._max_message = config.max_value_bytes + config.max_key_bytes + MESSAGE_OVERHEAD

    def _watch_versions(self, clock: HybridClock) -> None:
        """SPEC 8.7, the clock never goes back: every version this node issues, in any
        of its incarnations, is newer than every one it issued before. A version that is
        not goes into `violations` (the run fails)."""
        issue = clock.now

        def now() -> int:
            version = issue()
            if version <= self.last_version:
                self.violations.append(
                    f"{self.name}'s clock went back: it issued version {version} "
                    f"after {self.last_version} (incarnation {self.incarnations})"
                )
            self.last_version = max(self.last_version, version)
            error = version_ms(version) / 1000 - (EPOCH + self.loop.time())
            least, most = self.version_error or (error, error)
            self.version_error = (min(least, error), max(most, error))
            return version

        clock.now = now  # type: ignore[method-assign]

    def clock_floor(self) -> int:
        """The clock's saved ceiling (`Storage.clock_ceiling`, from the simulated disk's
        ceiling file): where a restarted clock goes on from."""
        if self.disk.ceiling is not None:
            return self.disk.ceiling
        return self.storage.clock_ceiling()

    async def admin(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        """One of the operator's HTTP requests that the driver of a membership change
        sends, answered by the code behind its route: `MembershipApi` for the step
        (GET and PUT), and the part of `/v0/status` the driver reads (`dht.status`)."""
        if path == TOPOLOGY_PATH and method in ("GET", "PUT"):
            answer = self.admin_api.show if method == "GET" else self.admin_api.step
            response = await answer(cast(Any, _Request(body)), {})
            assert isinstance(response.body, bytes)
            return response.status, response.body
        if path == STATUS_PATH and method == "GET":
            membership = self.membership.state.to_json() | {"handoff": self.rebalance.status()}
            status = {"vnodes": self.config.vnodes, "membership": membership}
            return 200, json.dumps(status).encode()
        return 404, b"Not Found"

    async def _serve(self) -> None:
        """What `Node.run` does before it serves: the fence's first look, then the
        listener and the background loops."""
        assert self.incarnation is not None
        if self.fence.fenced is None:
            await self.fence.first_check()
        self.network.listen(self.config.port, self.name, self.incarnation, self)
        self.lean.start()
        self.hint_delivery.start()
        self.repair_loops.start()
        self.rebalance.start()
        if self.fence.fenced is None:
            self.fence.start()

    def http_protocol(self) -> LeanConnection:
        """The server end of a client's HTTP connection (what `SharedPortSite` gives a
        connection whose first byte is not 0x00)."""
        return self.lean()

    def channel_protocol(self) -> ServerConnection:
        """The server end of a replica channel connection (what `SharedPortSite` gives a
        connection whose first byte is 0x00)."""
        return ServerConnection(
            self.local_replica,
            self._max_message,
            self._channels,
            RateLimitedLog(_log),
            None,
            self._handshakes,
        )

    def crash(self) -> None:
        """kill -9: no code of this incarnation runs again; the disk keeps what it
        synced."""
        incarnation = self.incarnation
        if incarnation is None or incarnation.dead:
            return
        self.loop.bury(incarnation)
        self.network.crashed(incarnation)
        self.disk.crash()


def _no_status() -> dict[str, Any]:
    """/v0/status, which no simulated client asks for (the driver's part of it is
    `SimNode.admin`'s)."""
    return {}


def _no_fallback() -> RequestHandler:
    """aiohttp's protocol, for a request the lean path does not take: the simulator's
    clients send none, so this is a bug of the simulator's or the lean path's."""
    raise AssertionError("a simulated client's request was handed to aiohttp")
