"""The replica channel: one long-lived connection per peer that carries many record calls
at once, answers matched by call id (the asyncio half of `dht.replication.protocol`).

Client end (`ReplicaChannel`): connects on first use and sends HELLO (protocol version,
ring identity, cluster secret) with the first calls right behind it; then every
`get`/`put` is a frame out and a frame back, no HTTP. Frames produced in one loop
iteration leave in one write. A connection that closes, resets or answers garbage fails
all of its pending calls at once with `PeerError`; one that stays silent through a
call's whole deadline is aborted, which fails the rest at once too. The next call dials
again.

Server end (`ServerConnection`): answers calls synchronously from storage (a LevelDB
point operation each), so a batch of requests that arrived together is answered in one
write, with no task per call. When the client stops reading, the server stops reading
from it too. Until its HELLO is admitted a connection is a stranger's: it may send one
small HELLO and nothing else, within a deadline (`dht.replication.handshakes`).

Large messages are cut into fragments (`FRAGMENT_BYTES`); complete small frames are
always written before the next fragment, and fragments enter the transport only while
it is below its high-water mark, so a 16 MiB value never holds small calls behind it.
A large record the server answers with is weighed against the node's byte budget until
its last fragment is written out; past the budget the call is declined instead. A large
write the client gave up on (its deadline passed) is dropped if none of it has left;
if some has, the replica needs the rest to finish the message, so it goes on, and the
budget counts the value it pins until the last fragment is out.

`ProtocolSniffer` lets one port serve HTTP and the channel: a connection whose first
byte is 0x00 (never the start of an HTTP request) is a replica channel, any other is
handed to aiohttp.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, cast
from urllib.parse import urlsplit

from dht.model.log_limits import RateLimitedLog
from dht.model.record import Record
from dht.replication.handshakes import Handshakes
from dht.replication.protocol import (
    HANDSHAKE_CALL,
    PREFACE,
    Answer,
    Budget,
    Failed,
    Frame,
    GetRecord,
    Hello,
    ProtocolError,
    PutRecord,
    RecordAbsent,
    RecordFound,
    Refused,
    ReplicaCodec,
    Request,
    Role,
    Stored,
    Unadmitted,
    Welcome,
    Why,
)

log = logging.getLogger(__name__)

# Bytes a connection lets pile up in its transport before it stops feeding it fragments.
_WRITE_HIGH_WATER = 256 * 1024
_LAST_CALL_ID = (1 << 32) - 1
_OVER_BUDGET = "over its byte budget (--max-in-flight-bytes): try later"


class PeerError(Exception):
    """A replica call to a peer failed (time-out, refused, reset, bad answer)."""


class ReplicaRefusal(Exception):
    """A replica declines one call: `why`, and the message as the reason, go back in
    FAILED."""

    def __init__(self, why: Why, reason: str) -> None:
        super().__init__(reason)
        self.why = why


class ReplicaFull(PeerError):
    """The replica declined a write: its volume is below its free-space reserve."""


@dataclass(slots=True, eq=False)
class _Outgoing:
    """A large message on its way out, fragment by fragment. Its value stays in memory
    (the fragments are views of it) until the last fragment is written; `charged` says
    the byte budget counts its `size` until then."""

    call_id: int
    fragments: deque[Frame]
    size: int
    started: bool = False  # a fragment of it has been written
    charged: bool = False


class _Connection(asyncio.Protocol):
    """What both ends share: a codec, and writes batched per loop iteration with large
    messages fed in fragments behind the small ones."""

    def __init__(self, codec: ReplicaCodec, budget: Budget | None = None) -> None:
        self.codec = codec
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.last_received = 0.0
        self._budget = budget
        self._urgent: list[bytes | memoryview] = []
        self._bulk: deque[_Outgoing] = deque()
        self._sending: dict[int, _Outgoing] = {}  # the bulk by call id
        self._flush_scheduled = False
        self._paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but have its methods.
        self.transport = transport = cast(asyncio.Transport, transport)
        transport.set_write_buffer_limits(high=_WRITE_HIGH_WATER)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._urgent.clear()
        unsent, self._bulk = self._bulk, deque()
        self._sending.clear()
        for message in unsent:
            self._let_go(message)

    def send(
        self, event: Hello | Request | Answer | Welcome | Refused, weighed: bool = False
    ) -> bool:
        """Queues `event`; it leaves with everything else queued in this loop iteration.
        `weighed`: a large message is admitted against the byte budget first, and holds
        its bytes until written out; False (nothing queued) when the budget refuses."""
        frames = self.codec.send(event)
        if len(frames) == 1:
            self._urgent.extend(frames[0])
        else:
            call_id = (
                HANDSHAKE_CALL if isinstance(event, Hello | Welcome | Refused) else event.call_id
            )
            size = sum(len(part) for frame in frames for part in frame)
            message = _Outgoing(call_id, deque(frames), size)
            if weighed and self._budget is not None:
                if not self._budget.acquire(size):
                    return False
                message.charged = True
            self._bulk.append(message)
            self._sending[call_id] = message
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)
        return True

    def flush(self) -> None:
        self._flush_scheduled = False
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if self._urgent:
            transport.writelines(self._urgent)
            self._urgent = []
        bulk = self._bulk
        while bulk and not self._paused:
            message = bulk[0]
            transport.writelines(message.fragments.popleft())
            message.started = True
            if message.fragments:
                bulk.rotate(-1)  # round robin between large messages
            else:
                self._let_go(bulk.popleft())

    def abandon(self, call_id: int) -> None:
        """No one waits for call `call_id` any more: its large message, if one is still
        queued, is dropped when none of it has left; else the rest must follow (the
        peer needs the whole message), and the budget counts it until it has."""
        message = self._sending.get(call_id)
        if message is None:
            return
        if not message.started:
            self._bulk.remove(message)
            self._let_go(message)
        elif not message.charged and self._budget is not None:
            self._budget.hold(message.size)
            message.charged = True

    def _let_go(self, message: _Outgoing) -> None:
        """`message` is written out, or never will be: the budget has its bytes back."""
        if self._sending.get(message.call_id) is message:
            del self._sending[message.call_id]
        if message.charged and self._budget is not None:
            message.charged = False
            self._budget.release(message.size)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self.flush()

    def abort(self) -> None:
        self.closed = True  # no new calls on it, even before connection_lost
        if self.transport is not None:
            self.transport.abort()


# -- the client end --------------------------------------------------------------------


# Called once with a call's answer, or with the PeerError that ended it unanswered.
OnAnswer = Callable[["Answer | PeerError"], None]


class ClientConnection(_Connection):
    """Calls may be sent right behind HELLO, before WELCOME comes back: a refused HELLO
    fails them all, and the server reads nothing after it. Opening a channel thus costs
    no round trip of its own."""

    def __init__(
        self,
        peer: str,
        max_message_bytes: int,
        on_handshake: Callable[[str | None], None],
        budget: Budget | None = None,
    ) -> None:
        """`budget`, when given, counts the large writes given up on midway until they
        have left (`abandon`)."""
        super().__init__(ReplicaCodec(Role.CLIENT, max_message_bytes), budget)
        self.peer = peer
        self._on_handshake = on_handshake
        self._calls: dict[int, OnAnswer] = {}
        self._next_call = 0

    def call(self, request_for: Callable[[int], Request], on_answer: OnAnswer) -> int:
        """Sends one request; `on_answer` gets its answer. Returns the call id."""
        self._next_call = self._next_call % _LAST_CALL_ID + 1
        call_id = self._next_call
        self._calls[call_id] = on_answer
        self.send(request_for(call_id))
        return call_id

    def forget(self, call_id: int) -> None:
        """The caller no longer wants this call's answer (its deadline passed)."""
        self._calls.pop(call_id, None)
        self.abandon(call_id)

    def data_received(self, data: bytes) -> None:
        self.last_received = asyncio.get_running_loop().time()
        self.codec.receive_data(data)
        try:
            while (event := self.codec.next_event()) is not None:
                if isinstance(event, Welcome):
                    self._on_handshake(None)
                elif isinstance(event, Refused):
                    reason = f"{self.peer} refused the replica channel: {event.reason}"
                    self._on_handshake(reason)
                    self.fail(PeerError(reason))
                    self.abort()
                elif isinstance(event, RecordFound | RecordAbsent | Stored | Failed):
                    on_answer = self._calls.pop(event.call_id, None)
                    if on_answer is not None:
                        on_answer(event)
        except ProtocolError as exc:
            log.warning("replica channel to %s sent garbage (%s): closing it", self.peer, exc)
            self.fail(PeerError(f"{self.peer}: protocol error: {exc}"))
            self.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.fail(PeerError(f"{self.peer}: replica channel closed ({exc!r})"))

    def fail(self, error: PeerError) -> None:
        """Ends every pending call with `error`, at once."""
        calls, self._calls = self._calls, {}
        for on_answer in calls.values():
            on_answer(error)


class ReplicaChannel:
    """The channel to one peer, dialled on demand. Calls carry no deadline of their own:
    the caller (`dht.replication.peers.Peer`) keeps one for each, and reports a missed one with
    `deadline_missed` so a silent connection is torn down."""

    def __init__(
        self,
        peer: str,
        dial_url: str,
        hello: Hello,
        max_message_bytes: int,
        timeout: float,
        budget: Budget | None = None,
    ) -> None:
        """`budget`: the node's byte budget, which counts the large writes given up on
        midway until they have left."""
        self.peer = peer
        parts = urlsplit(dial_url)
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or 80
        self.hello = hello  # presented by the next connection
        self._max_message = max_message_bytes
        self._timeout = timeout
        self._budget = budget
        self._connection: ClientConnection | None = None
        self._dialling: asyncio.Task[None] | None = None
        self._waiting: list[tuple[Callable[[int], Request], OnAnswer]] = []
        self.refusal: str | None = None

    def call(self, request_for: Callable[[int], Request], on_answer: OnAnswer) -> int | None:
        """Sends a request (once connected: the first call dials); `on_answer` gets the
        answer or the PeerError that ended the call. Returns the call id once sent."""
        connection = self._connection
        if connection is not None and not connection.closed:
            return connection.call(request_for, on_answer)
        self._waiting.append((request_for, on_answer))
        if self._dialling is None:
            self._dialling = asyncio.ensure_future(self._dial())
        return None

    def forget(self, call_id: int | None) -> None:
        if call_id is not None and self._connection is not None:
            self._connection.forget(call_id)

    def deadline_missed(self, since: float) -> None:
        """A call sent at `since` (loop time) got no answer in time: if nothing at all
        arrived on its connection since then, the connection is stalled, and every call
        on it fails now."""
        connection = self._connection
        if connection is not None and not connection.closed and connection.last_received < since:
            log.info("replica channel to %s is silent: closing it", self.peer)
            connection.abort()
            connection.fail(PeerError(f"{self.peer}: replica channel silent, closed"))

    async def close(self) -> None:
        """Closes the channel; every pending call fails now, not in a later iteration."""
        if self._dialling is not None:
            self._dialling.cancel()
            await asyncio.gather(self._dialling, return_exceptions=True)
        waiting, self._waiting = self._waiting, []
        for _, on_answer in waiting:
            on_answer(PeerError(f"{self.peer}: node stopping"))
        connection = self._connection
        if connection is not None:
            connection.abort()
            connection.fail(PeerError(f"{self.peer}: node stopping"))

    async def _dial(self) -> None:
        """Connects, then sends HELLO and every call that waited for the connection."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._timeout):
                _, connection = await loop.create_connection(
                    lambda: ClientConnection(
                        self.peer, self._max_message, self._handshake, self._budget
                    ),
                    self._host,
                    self._port,
                )
        except (OSError, TimeoutError) as exc:
            error = PeerError(f"{self.peer}: cannot open the replica channel: {exc!r}")
            waiting, self._waiting = self._waiting, []
            for _, on_answer in waiting:
                on_answer(error)
            return
        finally:
            self._dialling = None
        self._connection = connection
        connection.send(self.hello)
        waiting, self._waiting = self._waiting, []
        for request_for, on_answer in waiting:
            connection.call(request_for, on_answer)

    def _handshake(self, refusal: str | None) -> None:
        """The peer's answer to HELLO: None for WELCOME, else why it refused."""
        if refusal is None and self.refusal is not None:
            log.info("replica channel to %s is open again", self.peer)
        elif refusal is not None and refusal != self.refusal:
            log.warning("%s", refusal)  # once per distinct reason, not once per call
        self.refusal = refusal


# -- the server end --------------------------------------------------------------------


class ReplicaService(Protocol):
    """What the server end calls: this node's side of the replica protocol."""

    def admit(self, hello: Hello) -> str | None:
        """None to open the channel, or the reason it is refused."""

    def rpc_get(self, key: bytes) -> Record | None: ...

    def rpc_put(self, key: bytes, record: Record) -> bool | asyncio.Future[bool]:
        """Whether it was stored (a future when the write takes a while); raises
        ReplicaRefusal, or fails the future with it, to decline."""


class ServerConnection(_Connection):
    def __init__(
        self,
        service: ReplicaService,
        max_message_bytes: int,
        live: set[ServerConnection],
        garbage: RateLimitedLog,
        budget: Budget | None = None,
        handshakes: Handshakes | None = None,
    ) -> None:
        """`handshakes`, when given, bounds how long and how many connections may wait
        for their HELLO."""
        super().__init__(ReplicaCodec(Role.SERVER, max_message_bytes, budget), budget)
        self._service = service
        self._live = live
        self._garbage = garbage
        self._handshakes = handshakes
        self._refused = False
        self.peer = "?"

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._live.add(self)
        peername = transport.get_extra_info("peername")
        if peername:
            self.peer = f"{peername[0]}:{peername[1]}"
        if self._handshakes is not None:
            self._handshakes.begin(self)

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self._live.discard(self)
        if self._handshakes is not None:
            self._handshakes.end(self)
        self.codec.release_partials()

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        self.codec.receive_data(data)
        try:
            # Nothing after a refused HELLO is read, not even calls sent right behind it.
            while not self._refused and (event := self.codec.next_event()) is not None:
                self._answer(event, self.codec.held)
        except ProtocolError as exc:
            self._garbage.warning(
                "garbage", "replica channel from %s sent garbage (%s): closing it", self.peer, exc
            )
            self.abort()
            return
        self.flush()

    def _answer(self, event: object, held: int) -> None:
        """Answers one event; `held` bytes of the budget go back once its message is
        done with (for a large write, when it has landed)."""
        answered_later = isinstance(event, PutRecord) and self._put(event, held)
        if held and not answered_later and self._budget is not None:
            self._budget.release(held)
        if isinstance(event, Unadmitted):
            self.send(Failed(event.call_id, Why.OVERLOADED, _OVER_BUDGET))
        elif isinstance(event, GetRecord):
            record = self._service.rpc_get(event.key)
            if record is None:
                self.send(RecordAbsent(event.call_id))
            elif not self.send(RecordFound(event.call_id, record), weighed=True):
                self.send(Failed(event.call_id, Why.OVERLOADED, _OVER_BUDGET))
        elif isinstance(event, Hello):
            if self._handshakes is not None:
                self._handshakes.end(self)  # welcomed, or closed after its refusal
            reason = self._service.admit(event)
            if reason is None:
                self.send(Welcome())
                return
            self._garbage.warning(  # anyone can send a HELLO: a flood logs a few lines
                "refused",
                "refused a replica channel from %s (%s): %s",
                event.sender,
                self.peer,
                reason,
            )
            self._refused = True
            self.send(Refused(reason))
            self.flush()
            if self.transport is not None:
                self.transport.close()  # after the REFUSED frame is written

    def _put(self, event: PutRecord, held: int) -> bool:
        """Answers a write; True when it will be answered later (a large value, written
        in storage's thread, is answered when it lands)."""
        try:
            stored = self._service.rpc_put(event.key, event.record)
        except ReplicaRefusal as refusal:
            self.send(Failed(event.call_id, refusal.why, str(refusal)))
            return False
        if isinstance(stored, bool):
            self.send(Stored(event.call_id, stored))
            return False
        stored.add_done_callback(functools.partial(self._stored_later, event.call_id, held))
        return True

    def _stored_later(self, call_id: int, held: int, stored: asyncio.Future[bool]) -> None:
        if held and self._budget is not None:
            self._budget.release(held)
        if self.closed or stored.cancelled():
            return
        error = stored.exception()
        if error is None:
            self.send(Stored(call_id, stored.result()))
        elif isinstance(error, ReplicaRefusal):
            self.send(Failed(call_id, error.why, str(error)))
        else:
            log.error("a replica write failed", exc_info=error)
            self.send(Failed(call_id, Why.DECLINED, f"internal error: {type(error).__name__}"))

    def pause_writing(self) -> None:
        super().pause_writing()
        if self.transport is not None:
            self.transport.pause_reading()  # a client that does not read gets no answers

    def resume_writing(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()
        super().resume_writing()


class ProtocolSniffer(asyncio.Protocol):
    """The first protocol of every accepted connection: on the first byte it hands the
    connection to the replica channel (0x00) or to the HTTP server (anything else)."""

    def __init__(
        self,
        http: Callable[[], asyncio.Protocol],
        channel: Callable[[], asyncio.Protocol],
    ) -> None:
        self._http = http
        self._channel = channel
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        assert self._transport is not None
        protocol = self._channel() if data[:1] == PREFACE[:1] else self._http()
        self._transport.set_protocol(protocol)
        protocol.connection_made(self._transport)
        protocol.data_received(data)
