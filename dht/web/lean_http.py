"""The client's hot path: simple requests of routes with `whole_body` handlers (GET, PUT
and DELETE of /v0/entity) served straight off the socket; anything else handed to aiohttp.

aiohttp's request handler costs a node ~25 µs of CPU a request (a request object, a
URL, header multidicts, a response object, a task switch), as much as all of a node's
own work on a GET. A `LeanConnection` takes every HTTP connection first. While its
requests are simple (HTTP/1.1, one of the routes' methods, a request target of URL
characters, plain `name: value` headers, a body of at most `MAX_BODY` bytes announced by
Content-Length, no Transfer-Encoding, Expect, Upgrade or Content-Encoding), it parses
them itself and writes each answer with one call, its header block built once per kind
of answer. The first request it does not take hands the connection, with every byte
not yet answered, to aiohttp for the rest of the connection's life: anything unusual
meets aiohttp's own strict parser (llhttp) and is answered exactly as before. What the
lean parser (`dht.web.lean_parse`) takes is a subset of what llhttp takes
(tests/fuzz/test_lean_http.py compares the two).

Requests on one connection are answered one at a time, in order (pipelined ones wait
in the buffer); reading pauses while more than `READ_LIMIT` bytes wait, and answering
pauses while the socket's send buffer is full.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import sys
import time
from collections.abc import Callable, Coroutine
from email.utils import formatdate
from http import HTTPStatus
from typing import Any, cast

import aiohttp
from aiohttp.tcp_helpers import tcp_keepalive
from aiohttp.web_protocol import RequestHandler

from dht.web.lean_parse import MAX_BODY, MAX_HEADER_BYTES, HandOff, LeanParser
from dht.web.server import Answer, PendingBody, Reply

log = logging.getLogger(__name__)

# A body at least this large is written in a call of its own rather than copied once more.
_JOIN_BELOW = 16 * 1024
READ_LIMIT = 2 * (MAX_BODY + MAX_HEADER_BYTES)
# An idle keep-alive connection is closed after this long (nginx's and Node's default;
# aiohttp's handler, which takes the connections handed to it, keeps them 3630 s).
KEEPALIVE_TIMEOUT = 75.0
SERVER = f"Python/{sys.version_info[0]}.{sys.version_info[1]} aiohttp/{aiohttp.__version__}"

Serve = Callable[[str, str, str, bytes | PendingBody], Coroutine[Any, Any, Answer]]


class LeanHttp:
    """What every lean connection of a node shares: which requests it takes, the handler,
    aiohttp's protocol to hand over to, the answers' header blocks, and the connections
    (closed on shutdown, and after `KEEPALIVE_TIMEOUT` idle)."""

    def __init__(
        self,
        routes: dict[str, set[str]],
        serve: Serve,
        fallback: Callable[[], RequestHandler],
        max_line: int,
    ) -> None:
        """`routes`: path -> the methods taken lean; `serve(method, path, query, body)`
        answers one; `fallback` makes aiohttp's protocol; `max_line`: aiohttp's limit
        of a request target (a request line as long goes to aiohttp)."""
        self.parser = LeanParser(routes, max_line)
        self.serve = serve
        self.fallback = fallback
        self.connections: set[LeanConnection] = set()
        self.handed_off = 0
        self._heads: dict[tuple[int, str, tuple[tuple[str, str], ...], bool], bytes] = {}
        self._date_second = 0
        self._date = b""
        self._sweeper: asyncio.TimerHandle | None = None
        self._all_closed: asyncio.Event | None = None  # set once shut down

    def __call__(self) -> LeanConnection:
        return LeanConnection(self)

    # -- answers -------------------------------------------------------------------------

    def write(self, transport: asyncio.Transport, reply: Reply, keep_alive: bool) -> None:
        """Sends the answer as aiohttp would (its status line and headers), in one call."""
        key = (reply.status, reply.content_type, reply.headers, keep_alive)
        head = self._heads.get(key)
        if head is None:
            head = self._head(*key)
            if len(self._heads) < 256:  # the kinds of answer; Retry-After values vary
                self._heads[key] = head
        now = int(time.time())
        if now != self._date_second:
            self._date_second = now
            self._date = formatdate(now, usegmt=True).encode()
        body = reply.body
        if len(body) < _JOIN_BELOW:
            transport.write(
                b"%sContent-Length: %d\r\nDate: %s\r\n\r\n%s" % (head, len(body), self._date, body)
            )
        else:
            tail = b"Content-Length: %d\r\nDate: %s\r\n\r\n" % (len(body), self._date)
            transport.writelines((head, tail, body))

    @staticmethod
    def _head(
        status: int, content_type: str, headers: tuple[tuple[str, str], ...], keep_alive: bool
    ) -> bytes:
        lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}", f"Content-Type: {content_type}"]
        lines += [f"{name}: {value}" for name, value in headers]
        lines.append(f"Server: {SERVER}")
        if not keep_alive:
            lines.append("Connection: close")
        return ("\r\n".join(lines) + "\r\n").encode()

    # -- the connections -------------------------------------------------------------------

    def start(self) -> None:
        self._sweeper = asyncio.get_running_loop().call_later(KEEPALIVE_TIMEOUT / 5, self._sweep)

    def _sweep(self) -> None:
        """Closes the connections that received no byte for KEEPALIVE_TIMEOUT while
        idle or sending a body (one under way is answered first)."""
        loop = asyncio.get_running_loop()
        idle_since = loop.time() - KEEPALIVE_TIMEOUT
        for connection in list(self.connections):
            if connection.last_active < idle_since and connection.waits_for_client:
                connection.close()
        self._sweeper = loop.call_later(KEEPALIVE_TIMEOUT / 5, self._sweep)

    def begin_shutdown(self) -> None:
        """Closes the idle connections at once, and the others after their answer."""
        if self._sweeper is not None:
            self._sweeper.cancel()
        self._all_closed = asyncio.Event()
        for connection in list(self.connections):
            connection.close_when_done()
        if not self.connections:
            self._all_closed.set()

    async def closed(self, deadline: float) -> None:
        """Waits until every connection is closed (shutting down first, if that has not
        begun), and aborts those still open at `deadline` (the loop's time). The node gives
        it the deadline aiohttp's connections had, so both wait at once."""
        if self._all_closed is None:
            self.begin_shutdown()
        assert self._all_closed is not None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout_at(deadline):
                await self._all_closed.wait()
        for connection in list(self.connections):
            connection.abort()

    def forget(self, connection: LeanConnection) -> None:
        """`connection` was closed, or handed to aiohttp."""
        self.connections.discard(connection)
        if not self.connections and self._all_closed is not None:
            self._all_closed.set()


class LeanConnection(asyncio.Protocol):
    def __init__(self, lean: LeanHttp) -> None:
        self._lean = lean
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._buffer = b""
        self.busy = False  # a request is being answered
        self._body: PendingBody | None = None  # the body of that request, on its way
        self._skip = 0  # bytes still to come of a body answered before it came whole
        self._write_paused = False
        self._read_paused = False
        self._closing = False  # close once the request under way is answered
        self._eof = False  # the client sends no more: close once its requests are answered
        self.last_active = self._loop.time()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        tcp_keepalive(self._transport)  # as aiohttp does
        self._lean.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._lean.forget(self)
        self._transport = None
        self._buffer = b""
        if self._body is not None:
            self._body.value.cancel()  # its handler stops, and lets go of what it held
            self._body = None

    @property
    def waits_for_client(self) -> bool:
        """Idle, or waiting for the rest of a body."""
        return not self.busy or self._body is not None  # (skipping a body is not busy)

    def data_received(self, data: bytes) -> None:
        self._buffer = self._buffer + data if self._buffer else data
        self.last_active = self._loop.time()
        self._next()

    def eof_received(self) -> bool:
        self._eof = True
        self._next()
        # Open for the answers still to write; TLS closes at the peer's close_notify
        # anyway, and warns of a True.
        transport = self._transport
        return transport is not None and transport.get_extra_info("sslcontext") is None

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._next()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    def close_when_done(self) -> None:
        self._closing = True
        if not self.busy:
            self.close()

    def _next(self) -> None:
        """Answers the request at the buffer's start, if it is whole and nothing is
        under way; hands the connection to aiohttp at the first one the lean path does
        not take."""
        transport = self._transport
        if transport is None:
            return
        if self._skip:
            skipped = min(self._skip, len(self._buffer))
            self._skip -= skipped
            self._buffer = self._buffer[skipped:]
            if self._skip:
                if self._eof:
                    self.close()
                return
            if self._closing:  # answered with Connection: close once the body was read
                self.close()
                return
        if self._body is not None:
            self._take_body(self._body)
            if self._body is not None and self._eof:  # it will never come whole
                # Its bytes are not a request (found by review: a refused PUT's body,
                # cut short, was parsed as the next request and its DELETE run).
                self._body.value.cancel()
                self._body = None
                self._buffer = b""
                self._closing = True
        if self.busy or self._write_paused:
            self._flow(transport)
            return
        try:
            request = self._lean.parser.parse(self._buffer) if self._buffer else None
        except HandOff:
            self._hand_off(transport)
            return
        if request is None:
            if self._eof:
                self.close()  # what it sent is answered; an unfinished request is dropped
            self._flow(transport)
            return
        size = request.head_size + request.length
        body: bytes | PendingBody
        if len(self._buffer) >= size:
            body = self._buffer[request.head_size : size]
            self._buffer = self._buffer[size:]
        else:  # its handler admits it by its length, then waits for it
            body = self._body = PendingBody(request.length, self._loop.create_future())
            self._buffer = self._buffer[request.head_size :]
        self._flow(transport)
        self.busy = True
        answer = self._loop.create_task(
            self._lean.serve(request.method, request.path, request.query, body)
        )
        answer.add_done_callback(functools.partial(self._answered, request.keep_alive))

    def _take_body(self, body: PendingBody) -> None:
        if len(self._buffer) >= body.length:
            self._body = None
            if not body.value.done():
                body.value.set_result(self._buffer[: body.length])
            self._buffer = self._buffer[body.length :]

    def _flow(self, transport: asyncio.Transport | None) -> None:
        """Reading pauses while more than READ_LIMIT bytes wait behind a request under
        way or a full send buffer. Otherwise it goes on: a head is bounded by `parse`'s
        limits, which hand it to aiohttp past them (found by review: a long request
        line paused reading before its end came, and waited for ever)."""
        if transport is None:
            return
        waiting = len(self._buffer) if self.busy or self._write_paused else 0
        if not self._read_paused and waiting > READ_LIMIT:
            self._read_paused = True
            transport.pause_reading()
        elif self._read_paused and waiting <= READ_LIMIT:
            self._read_paused = False
            transport.resume_reading()

    def _answered(self, keep_alive: bool, answer: asyncio.Task[Answer]) -> None:
        self.busy = False
        self.last_active = self._loop.time()
        transport = self._transport
        if transport is None:
            return  # the client went away; the request was carried out all the same
        if answer.cancelled():  # its body never came: the client stopped sending
            transport.close()
            return
        reply = None if answer.exception() else answer.result()
        if not isinstance(reply, Reply):
            # `serve` turns every error into an answer, and whole-body handlers reply:
            # this is a bug, and the connection cannot go on.
            log.error("no answer to a lean request: %r", reply or answer)
            transport.abort()
            return
        if self._body is not None:
            # Answered before its body came whole (refused): the rest is read and
            # dropped as it comes, so the client, still sending, gets its answer
            # rather than a reset (RFC 9112 9.6); its length is known, so the
            # connection goes on after it.
            self._skip = self._body.length
            self._body.value.cancel()
            self._body = None
        keep_alive = keep_alive and not self._closing
        self._lean.write(transport, reply, keep_alive)
        if not keep_alive:
            if not self._skip:
                transport.close()
                return
            self._closing = True  # once the rest of the body is read (`_next`)
        self._next()

    def _hand_off(self, transport: asyncio.Transport) -> None:
        """aiohttp's protocol takes the connection, and the bytes not yet answered."""
        self._lean.forget(self)
        self._lean.handed_off += 1
        protocol = self._lean.fallback()
        if self._read_paused:
            transport.resume_reading()
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        data, self._buffer, self._transport = self._buffer, b"", None
        protocol.data_received(data)
        if self._eof:  # the client sends no more: aiohttp closes once it has answered
            if b"\r\n\r\n" in data:
                protocol.close()
            else:  # no whole head to answer, as aiohttp alone would close at EOF
                transport.close()
