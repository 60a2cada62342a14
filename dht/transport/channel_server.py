"""The replica channel's server end: this node answering its peers' record calls
(`dht.transport.channel` is the client end).

`ServerConnection` answers reads synchronously from storage (a LevelDB point operation
each), so a batch of requests that arrived together is answered in one write, with no
task per call; a write is answered once storage has it on the disk (group commit), and a
peer that half-closes still gets every answer. When the client stops reading, the server
stops reading from it too.
Until its handshake is done a connection is a stranger's: it may send one small HELLO,
then one PROOF of the cluster secret (`dht.transport.proof`) and nothing else, within a
deadline (`dht.transport.handshakes`).

`ProtocolSniffer` lets one port serve HTTP and the channel: a connection whose first
byte is 0x00 (never the start of an HTTP request) is a replica channel, any other is
handed to aiohttp. With TLS between nodes (`dht.transport.tls`), a connection whose
first byte is 0x16 (a TLS ClientHello) is TLS, and inside it the first byte decides
again; a channel then needs the peer's certificate, checked against the cluster's CA.
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import functools
import logging
from collections.abc import Callable
from typing import Any, Protocol, cast

import uvloop
import uvloop.loop

from dht.limits import HANDSHAKE_DEADLINE
from dht.model.log_limits import RateLimitedLog
from dht.model.record import Record
from dht.transport.connection import Connection
from dht.transport.handshakes import Handshakes
from dht.transport.messages import (
    Challenge,
    Failed,
    GetRecord,
    Hello,
    Proof,
    ProtocolError,
    PutRecord,
    RecordAbsent,
    RecordFound,
    Refused,
    Stored,
    TransportError,
    Unadmitted,
    Welcome,
    Why,
)
from dht.transport.proof import NONCE_BYTES, Side, proves
from dht.transport.protocol import PREFACE, Budget, ReplicaCodec, Role
from dht.transport.tls import (
    NO_CERTIFICATE,
    TLS_HANDSHAKE,
    TLS_ONLY,
    TlsContexts,
    TlsRefusals,
    handshake_reason,
)

log = logging.getLogger(__name__)

_OVER_BUDGET = "over its byte budget (--max-in-flight-bytes): try later"
WRONG_SECRET = (
    "its proof of the cluster secret is wrong: the nodes were started with different "
    "--secret values, or one without"
)


class ReplicaRefusal(TransportError):
    """A replica declines one call: `why`, and the message as the reason, go back in
    FAILED (what the edge answers the peer; the peer did nothing wrong, nor did this
    node: it is neither a local nor a remote error)."""

    def __init__(self, why: Why, reason: str) -> None:
        super().__init__(reason)
        self.why = why


class ReplicaService(Protocol):
    """What the server end calls: this node's side of the replica protocol."""

    def admit(self, hello: Hello) -> str | None:
        """None to go on with the handshake, or the reason it is refused."""

    def nonce(self) -> bytes:
        """A fresh nonce for the CHALLENGE of a handshake."""

    def proof(self, side: Side, hello: Hello, server_nonce: bytes) -> bytes:
        """The proof of this node's secret that `side` owes in the handshake `hello`
        opened, with the server's nonce `server_nonce`."""

    def rpc_get(self, key: bytes) -> Record | None: ...

    def rpc_put(self, key: bytes, record: Record, sender: str) -> bool | asyncio.Future[bool]:
        """Whether it was stored (a future when the write takes a while); raises
        ReplicaRefusal, or fails the future with it, to decline. `sender`: the URL the
        peer's HELLO gave (a node removed since is refused, SPEC 13.3)."""


class ServerConnection(Connection):
    def __init__(
        self,
        service: ReplicaService,
        max_message_bytes: int,
        live: set[ServerConnection],
        garbage: RateLimitedLog,
        budget: Budget | None = None,
        handshakes: Handshakes | None = None,
        tls_refusals: TlsRefusals | None = None,
    ) -> None:
        """`handshakes`, when given, bounds how long and how many connections may wait
        for their HELLO; `tls_refusals`, given when nodes talk TLS, counts the channels
        refused for coming without a certificate the cluster's CA signed."""
        super().__init__(ReplicaCodec(Role.SERVER, max_message_bytes, budget), budget)
        self._service = service
        self._live = live
        self._garbage = garbage
        self._handshakes = handshakes
        self._tls_refusals = tls_refusals
        self._refused = False
        self._hello: Hello | None = None
        self._server_nonce = b""
        self.peer = "?"
        self._writes_landing = 0  # writes answered once storage has synced them
        self._half_closed = False

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

    def eof_received(self) -> bool:
        """A peer that half-closes (its side of TCP done sending) still gets every
        answer: the connection stays open while writes are landing in storage or large
        answers are still queued, and `flush` closes it once none is."""
        self._half_closed = True
        return bool(self._writes_landing or self.has_unsent())

    def flush(self) -> None:
        super().flush()
        self._close_if_answered()

    def _close_if_answered(self) -> None:
        """Closes a half-closed connection once no write is landing and nothing is
        queued."""
        transport = self.transport
        if (
            self._half_closed
            and not self._writes_landing
            and not self.has_unsent()
            and transport is not None
            and not transport.is_closing()
        ):
            transport.close()  # after what the transport holds is written

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        self.codec.receive_data(data)
        try:
            # Nothing after a refused HELLO or PROOF is read, not even calls sent right behind it.
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
            if self._tls_refusals is not None and not self._certified():
                self._tls_refusals.refused(
                    NO_CERTIFICATE, f"{event.sender} ({self.peer})", TLS_ONLY, logged=True
                )
                self._refuse(event.sender, TLS_ONLY)
                return
            reason = self._service.admit(event)
            if reason is None and len(event.nonce) < NONCE_BYTES:
                reason = f"its HELLO's nonce is shorter than {NONCE_BYTES} bytes"
            if reason is not None:
                self._refuse(event.sender, reason)
                return
            self._hello = event
            self._server_nonce = self._service.nonce()
            proof = self._service.proof(Side.SERVER, event, self._server_nonce)
            self.send(Challenge(self._server_nonce, proof))
        elif isinstance(event, Proof):
            assert self._hello is not None  # the codec takes a PROOF only after a HELLO
            if self._handshakes is not None:
                self._handshakes.end(self)  # welcomed, or closed after its refusal
            expected = self._service.proof(Side.CLIENT, self._hello, self._server_nonce)
            if proves(expected, event.proof):
                self.send(Welcome())
            else:
                self._refuse(self._hello.sender, WRONG_SECRET)

    def _certified(self) -> bool:
        """Whether the connection is TLS and the peer presented a certificate (TLS
        checked it against the CA already)."""
        return self.transport is not None and bool(self.transport.get_extra_info("peercert"))

    def _refuse(self, sender: str, reason: str) -> None:
        """Answers REFUSED, reads nothing more, and closes once it is written."""
        if self._handshakes is not None:
            self._handshakes.end(self)
        self._garbage.warning(  # anyone can send a HELLO: a flood logs a few lines
            "refused", "refused a replica channel from %s (%s): %s", sender, self.peer, reason
        )
        self._refused = True
        self.send(Refused(reason))
        self.flush()
        if self.transport is not None:
            self.transport.close()  # after the REFUSED frame is written

    def _put(self, event: PutRecord, held: int) -> bool:
        """Answers a write; True when it will be answered later, once storage has it
        on the disk (group commit), or in its thread (a large value)."""
        try:
            sender = "" if self._hello is None else self._hello.sender
            stored = self._service.rpc_put(event.key, event.record, sender)
        except ReplicaRefusal as refusal:
            self.send(Failed(event.call_id, refusal.why, str(refusal)))
            return False
        if isinstance(stored, bool):
            self.send(Stored(event.call_id, stored))
            return False
        self._writes_landing += 1
        stored.add_done_callback(functools.partial(self._stored_later, event.call_id, held))
        return True

    def _stored_later(self, call_id: int, held: int, stored: asyncio.Future[bool]) -> None:
        self._writes_landing -= 1
        if held and self._budget is not None:
            self._budget.release(held)
        if self.closed:
            return
        if stored.cancelled():  # no answer, so no flush: a half-closed peer is done with
            self._close_if_answered()
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
    connection to the replica channel (0x00), to TLS (0x16, when `tls` is given: inside
    it, another sniffer decides) or to the HTTP server (anything else). A connection
    that starts TLS must say its first byte inside TLS within `tls_deadline` of its
    first byte outside, or it is closed (found by review: one that said nothing after
    its handshake stayed open for ever, outside the limits of rule 11.6)."""

    def __init__(
        self,
        http: Callable[[], asyncio.Protocol],
        channel: Callable[[], asyncio.Protocol],
        tls: TlsContexts | None = None,
        tls_deadline: float = HANDSHAKE_DEADLINE,
    ) -> None:
        self._http = http
        self._channel = channel
        self._tls = tls
        self._tls_deadline = tls_deadline
        self._transport: asyncio.Transport | None = None
        self.spoke = False  # its first byte came

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        assert self._transport is not None
        self.spoke = True
        if self._tls is not None and data[0] == TLS_HANDSHAKE:
            self._start_tls(self._tls, data)
            return
        protocol = self._channel() if data[:1] == PREFACE[:1] else self._http()
        self._transport.set_protocol(protocol)
        protocol.connection_made(self._transport)
        protocol.data_received(data)

    def _start_tls(self, tls: TlsContexts, data: bytes) -> None:
        """Puts TLS between the connection and a sniffer of what it carries, and gives
        it the bytes read already (the ClientHello's first)."""
        assert self._transport is not None
        loop = asyncio.get_running_loop()
        handshake: asyncio.Future[None] = loop.create_future()
        peer = self._transport.get_extra_info("peername")
        handshake.add_done_callback(functools.partial(_tls_handshake_done, tls.refusals, peer))
        inner = ProtocolSniffer(self._http, self._channel)
        secured = _ssl_protocol(loop)(
            loop,
            inner,
            tls.server,
            handshake,
            server_side=True,
            ssl_handshake_timeout=self._tls_deadline,
        )
        self._transport.set_protocol(secured)
        secured.connection_made(self._transport)
        loop.call_later(self._tls_deadline, _close_if_silent, inner, self._transport)
        view = memoryview(data)
        while view:
            buffer = memoryview(secured.get_buffer(len(view)))
            taken = min(len(buffer), len(view))
            buffer[:taken] = view[:taken]
            secured.buffer_updated(taken)
            view = view[taken:]


def _ssl_protocol(loop: asyncio.AbstractEventLoop) -> Any:
    """The loop's own TLS protocol class: uvloop's (in C) under uvloop, asyncio's
    otherwise. Both take a connection midway, which `loop.start_tls` cannot: the bytes
    the sniffer read are fed to it by hand."""
    uvloop_tls = getattr(uvloop.loop, "SSLProtocol", None)
    if uvloop_tls is not None and isinstance(loop, uvloop.Loop):
        return uvloop_tls
    return asyncio.sslproto.SSLProtocol


def _close_if_silent(inner: ProtocolSniffer, transport: asyncio.Transport) -> None:
    """The deadline of a TLS connection's first byte inside TLS has come."""
    if not inner.spoke and not transport.is_closing():
        transport.abort()


def _tls_handshake_done(
    refusals: TlsRefusals, peer: object, handshake: asyncio.Future[None]
) -> None:
    if handshake.cancelled() or (error := handshake.exception()) is None:
        return
    refusals.refused(handshake_reason(error), str(peer), f"TLS handshake failed: {error}")
