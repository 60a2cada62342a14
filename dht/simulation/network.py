"""An in-memory network with what TCP gives: bytes in order or not at all.

A connection is two `Pipe`s of bytes, one each way. Each write leaves after the link's
seeded delay, never before the write ahead of it (TCP keeps order), and a partitioned
link holds its bytes (TCP retransmits) until it heals or the connection is aborted: a
caller sees a partition as silence, and its deadline (`PendingCall`, `asyncio.timeout`)
as the end of the connection. A crashed node's connections are reset: its peers get
`connection_lost` once the RST crosses the link. A dial to a node that is down is
refused after a round trip; across a partition it goes unanswered (SYN retried) until
the dialler's deadline. There is no loss of a single frame, no duplicate and no reorder
within a connection, since TCP has none; calls on different connections (and the
internal requests, `request`) race freely.

Every byte delivered goes into the trace (`Trace`): two runs that deliver the same bytes
at the same times, in the same order, have the same hash.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import random
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from dht.simulation.loop import OWNER, Incarnation

T = TypeVar("T")

# How long a partitioned link holds bytes before looking again (TCP's retransmission).
RETRANSMIT = 0.2


class Trace:
    """The hash of everything the run did that a schedule decides."""

    def __init__(self) -> None:
        self._hash = hashlib.blake2b(digest_size=16)
        self.events = 0

    def add(self, *parts: object) -> None:
        self.events += 1
        self._hash.update(repr(parts).encode())

    def add_bytes(self, data: bytes) -> None:
        self._hash.update(data)

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


class Link:
    """One direction between two nodes (or a client and a node)."""

    __slots__ = ("base", "cut", "jitter")

    def __init__(self, base: float, jitter: float) -> None:
        self.base = base
        self.jitter = jitter
        self.cut = False


class Network:
    """Links between named endpoints, and the nodes' listeners."""

    def __init__(self, loop: asyncio.AbstractEventLoop, rng: random.Random, trace: Trace) -> None:
        self.loop = loop
        self.rng = rng
        self.trace = trace
        self._links: dict[tuple[str, str], Link] = {}
        # Port -> (node name, the incarnation serving it, the node: its
        # `channel_protocol()` takes a connection, `request` handlers are given it).
        self.listeners: dict[int, tuple[str, Incarnation, Any]] = {}
        # Bytes on the wire belong to no process: a crash does not stop their delivery.
        self.wire = contextvars.Context()
        self.names: dict[int, str] = {}  # port -> node name, listening or not
        self._transports: list[SimTransport] = []
        self.base_delay = 0.0005
        self.jitter = 0.001

    def link(self, src: str, dst: str) -> Link:
        link = self._links.get((src, dst))
        if link is None:
            link = self._links[src, dst] = Link(self.base_delay, self.jitter)
        return link

    def delay(self, src: str, dst: str) -> float:
        link = self.link(src, dst)
        return link.base + self.rng.random() * link.jitter

    def cut(self, src: str, dst: str, cut: bool) -> None:
        self.link(src, dst).cut = cut

    def is_cut(self, src: str, dst: str) -> bool:
        return self.link(src, dst).cut

    def listen(self, port: int, name: str, owner: Incarnation, node: Any) -> None:
        self.names[port] = name
        self.listeners[port] = (name, owner, node)

    def crashed(self, owner: Incarnation) -> None:
        """The process of `owner` is gone: it listens no more, and every connection it
        had is reset (its peers hear it once the RST crosses)."""
        for port, (_, listener, _) in list(self.listeners.items()):
            if listener is owner:
                del self.listeners[port]
        kept = []
        for transport in self._transports:
            if transport.owner is owner:
                transport.reset_by_crash()
            elif not transport.closed:
                kept.append(transport)
        self._transports = [t for t in kept if not t.closed]

    def reset(self, a: str, b: str) -> int:
        """A middlebox resets every connection between `a` and `b`: both ends hear of it
        now. Returns how many connections."""
        count = 0
        for transport in self._transports:
            if {transport.src, transport.dst} == {a, b} and not transport.closed:
                transport.closed = True
                count += 1
                protocol = transport.protocol
                if protocol is not None:
                    self.loop.call_soon(
                        protocol.connection_lost,
                        ConnectionResetError("reset"),
                        context=transport.context,
                    )
        self._transports = [t for t in self._transports if not t.closed]
        return count

    async def connect(
        self,
        src: str,
        port: int,
        factory: Callable[[], asyncio.Protocol],
        accept: Callable[[Any], asyncio.Protocol] | None = None,
    ) -> tuple[SimTransport, asyncio.Protocol]:
        """A TCP connection from the running incarnation `src` to whoever listens on
        `port`: the handshake crosses both ways; refused if no one listens. `accept`
        makes the listener's protocol from its node (by default the replica channel's
        server end; a node's shared port tells them apart by the first byte)."""
        dst = self.names.get(port)
        if dst is None:
            raise ConnectionRefusedError(f"nothing at port {port}")
        while self.is_cut(src, dst) or self.is_cut(dst, src):  # noqa: ASYNC110 (TCP polls)
            await asyncio.sleep(1.0)  # the SYN is retried until the dialler's deadline
        await asyncio.sleep(self.delay(src, dst) + self.delay(dst, src))
        listener = self.listeners.get(port)
        if listener is None:
            raise ConnectionRefusedError(f"{dst} is down")
        _, server_owner, server_node = listener
        client_owner = OWNER.get()
        client = SimTransport(self, src, dst, client_owner)
        server = SimTransport(self, dst, src, server_owner)
        client.peer, server.peer = server, client
        make = accept or (lambda node: node.channel_protocol())
        server_protocol = server_owner.context().run(make, server_node)
        client_protocol = factory()
        client.protocol, server.protocol = client_protocol, server_protocol
        self._transports += [client, server]
        self.trace.add("connect", self.loop.time(), src, dst)
        self.loop.call_soon(server_protocol.connection_made, server, context=server.context)
        client_protocol.connection_made(client)
        return client, client_protocol

    async def request(
        self,
        src: str,
        dst_port: int,
        handler: Callable[[Any], Coroutine[Any, Any, T]],
    ) -> T:
        """One request on a connection of its own (the internal HTTP requests): across
        the link, `handler(node)` run as a task of the node listening on `dst_port`, its
        answer back across the link. Refused when none listens; silent across a cut
        link (the caller's deadline ends it)."""
        dst = self.names.get(dst_port)
        if dst is None:
            raise ConnectionRefusedError(f"nothing at port {dst_port}")
        await self._cross(src, dst)
        listener = self.listeners.get(dst_port)
        if listener is None:
            await self._cross(dst, src)
            raise ConnectionRefusedError(f"{dst} is down")
        _, owner, node = listener
        task: asyncio.Task[T] = self.loop.create_task(handler(node), context=owner.context())
        # An error answer (a 503 while the node's repair loops are stopped) that comes after
        # the caller gave up is an answer no one reads, not an error of the node's.
        task.add_done_callback(_read_error)
        # A caller that gives up leaves the request running on the node, as a client that
        # hangs up does; and it must not wait for a crashed node's task to end.
        answer = await asyncio.shield(task)
        await self._cross(dst, src)
        return answer

    async def _cross(self, src: str, dst: str) -> None:
        while self.is_cut(src, dst):  # noqa: ASYNC110 (retransmission is polling)
            await asyncio.sleep(RETRANSMIT)
        await asyncio.sleep(self.delay(src, dst))


class SimTransport(asyncio.Transport):
    """One end of an in-memory TCP connection."""

    def __init__(self, network: Network, src: str, dst: str, owner: Incarnation | None) -> None:
        super().__init__()
        self.network = network
        self.src = src
        self.dst = dst
        self.owner = owner
        self.context = owner.context() if owner is not None else None
        self.peer: SimTransport | None = None
        self.protocol: asyncio.Protocol | None = None
        self.closed = False  # this end: no more writes, no more deliveries
        self._queue: deque[tuple[float, bytes | None]] = deque()  # None: FIN/RST
        self._last_due = 0.0
        self._timer: asyncio.TimerHandle | None = None

    # -- asyncio.Transport -------------------------------------------------------------

    def write(self, data: Any) -> None:
        if self.closed or not data:
            return
        self._send(bytes(data))

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        """FIN after what is queued; this end is done."""
        self._end()

    def abort(self) -> None:
        self._end()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peername":
            return (self.dst, 0)
        return default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    # -- the pipe ----------------------------------------------------------------------

    def _end(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._send(None)
        protocol = self.protocol
        if protocol is not None:
            self.network.loop.call_soon(protocol.connection_lost, None, context=self.context)

    def reset_by_crash(self) -> None:
        """The process holding this end is gone: the peer gets an RST; nothing more is
        delivered to this end (its callbacks would be dropped anyway)."""
        if not self.closed:
            self.closed = True
            self._send(None)

    def _send(self, data: bytes | None) -> None:
        network = self.network
        loop = network.loop
        due = max(loop.time() + network.delay(self.src, self.dst), self._last_due)
        self._last_due = due
        self._queue.append((due, data))
        if self._timer is None:
            self._timer = loop.call_at(due, self._deliver, context=network.wire)

    def _deliver(self) -> None:
        """Delivers what is due from the head of the queue, in order; across a cut link
        nothing moves until it heals."""
        self._timer = None
        loop = self.network.loop
        now = loop.time()
        if self.network.is_cut(self.src, self.dst):
            self._timer = loop.call_at(now + RETRANSMIT, self._deliver, context=self.network.wire)
            return
        peer = self.peer
        while self._queue and self._queue[0][0] <= now:
            _, data = self._queue.popleft()
            if peer is None or peer.closed or peer.protocol is None:
                continue
            trace = self.network.trace
            trace.add(now, self.src, self.dst, -1 if data is None else len(data))
            if data is None:
                peer.closed = True
                loop.call_soon(
                    peer.protocol.connection_lost,
                    ConnectionResetError("reset by peer"),
                    context=peer.context,
                )
            else:
                trace.add_bytes(data)
                loop.call_soon(peer.protocol.data_received, data, context=peer.context)
        if self._queue:
            due = max(self._queue[0][0], now)
            self._timer = loop.call_at(due, self._deliver, context=self.network.wire)


def _read_error(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()
