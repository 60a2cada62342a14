"""The client's hot path: simple requests of routes with `whole_body` handlers (GET, PUT
and DELETE of /v0/entity) served straight off the socket; anything else handed to aiohttp.

aiohttp's request handler costs a node ~25 µs of CPU a request (a request object, a
URL, header multidicts, a response object, a task switch), as much as all of a node's
own work on a GET. A `LeanConnection` takes every HTTP connection first. While its
requests are simple (HTTP/1.1, one of the routes' methods, a request target of URL
characters, plain `name: value` headers, a body of at most `LEAN_MAX_BODY` bytes announced by
Content-Length, no Transfer-Encoding, Expect, Upgrade or Content-Encoding), it parses
them itself and writes each answer with one call, its header block built once per kind
of answer. The first request it does not take hands the connection, with every byte
not yet answered, to aiohttp for the rest of the connection's life: anything unusual
meets aiohttp's own strict parser (llhttp) and is answered exactly as before. What the
lean parser (`dht.web.lean_parse`) takes is a subset of what llhttp takes
(tests/fuzz/test_lean_http.py compares the two).

Requests on one connection are answered one at a time, in order (pipelined ones wait
in the buffer); reading pauses while more than `LEAN_READ_LIMIT` bytes wait, and answering
pauses while the socket's send buffer is full. A request is served once its body has
come whole, and that body must keep the minimum rate (`BodyPace`) or the connection is
answered 408 and closed; until then it holds no place in flight and none of the byte
budget (SPEC.md rule 7.10). Each read costs work in proportion to what it brought
(rule 7.11): the buffer grows in place, and the parser goes on where it stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import sys
from collections.abc import Callable, Coroutine
from email.utils import formatdate
from http import HTTPStatus
from typing import Any, cast

import aiohttp
from aiohttp.tcp_helpers import tcp_keepalive
from aiohttp.web_protocol import RequestHandler

from dht.limits import KEEPALIVE_TIMEOUT, LEAN_MAX_BODY, LEAN_READ_LIMIT
from dht.model.machine import SYSTEM, Machine
from dht.web.admission import BodyPace
from dht.web.lean_parse import (
    HeadScan,
    LeanParser,
    LeanRequest,
    NotLean,
)
from dht.web.server import Answer, Reply, too_slow

log = logging.getLogger(__name__)

# A body at least this large is written in a call of its own rather than copied once more.
_JOIN_BELOW = 16 * 1024
SERVER = f"Python/{sys.version_info[0]}.{sys.version_info[1]} aiohttp/{aiohttp.__version__}"

Serve = Callable[[str, str, str, bytes], Coroutine[Any, Any, Answer]]


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
        pace: BodyPace,
        max_body: int = LEAN_MAX_BODY,
        machine: Machine = SYSTEM,
    ) -> None:
        """`routes`: path -> the methods taken lean; `serve(method, path, query, body)`
        answers one; `fallback` makes aiohttp's protocol; `max_line`: aiohttp's limit
        of a request target (a request line as long goes to aiohttp); `pace`: how fast a
        body must come; `max_body`: the largest value (a larger PUT goes to aiohttp,
        which refuses it before its body comes); `machine`: its wall clock dates the
        answers."""
        self.parser = LeanParser(routes, max_line, max_body)
        self._wall = machine.wall
        self.pace = pace
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
        now = int(self._wall())
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
        self._buffer = bytearray()
        self._scan = HeadScan()  # how far the head at the buffer's start was checked
        self.busy = False  # a request is being answered
        self._awaited: LeanRequest | None = None  # its head came whole, its body not yet
        self._head_came = 0.0  # when it did
        self._pace_check: asyncio.TimerHandle | None = None  # while its body is awaited
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
        self._buffer = bytearray()
        self._stop_pace_check()

    @property
    def waits_for_client(self) -> bool:
        """Idle, or waiting for the rest of a body."""
        return not self.busy

    def data_received(self, data: bytes) -> None:
        self._buffer += data
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
        if self.busy or self._write_paused:
            self._flow(transport)
            return
        request = self._awaited
        if request is None:
            try:
                request = (
                    self._lean.parser.parse(self._buffer, self._scan) if self._buffer else None
                )
            except NotLean:
                self._pass_to_aiohttp(transport)
                return
            if request is None:
                if self._eof:
                    self.close()  # what it sent is answered; an unfinished request is dropped
                self._flow(transport)
                return
        size = request.head_size + request.length
        if len(self._buffer) < size:
            if self._eof:
                self.close()  # its body will never come whole: it is not run
            elif self._awaited is None:
                self._awaited = request
                self._head_came = self.last_active
                self._check_pace()
            return
        self._awaited = None
        self._stop_pace_check()
        with memoryview(self._buffer) as view:  # one copy, not two
            body = bytes(view[request.head_size : size])
        del self._buffer[:size]  # O(1): a bytearray moves its start, not what follows
        self._flow(transport)
        self.busy = True
        answer = self._loop.create_task(
            self._lean.serve(request.method, request.path, request.query, body)
        )
        answer.add_done_callback(functools.partial(self._answered, request.keep_alive))

    def _check_pace(self) -> None:
        """Cuts the awaited body with 408 once it falls behind the minimum rate, or looks
        again when it would, given what has come of it by then."""
        self._pace_check = None
        request, transport = self._awaited, self._transport
        if request is None or transport is None:
            return
        received = len(self._buffer) - request.head_size
        due = self._lean.pace.due(self._head_came, received)
        if due > self._loop.time():
            self._pace_check = self._loop.call_at(due, self._check_pace)
            return
        self._awaited = None
        self._buffer = bytearray()
        self._lean.write(transport, too_slow(self._lean.pace.too_slow()), keep_alive=False)
        transport.close()

    def _stop_pace_check(self) -> None:
        if self._pace_check is not None:
            self._pace_check.cancel()
            self._pace_check = None

    def _flow(self, transport: asyncio.Transport | None) -> None:
        """Reading pauses while more than LEAN_READ_LIMIT bytes wait behind a request under
        way or a full send buffer. Otherwise it goes on: a head is bounded by `parse`'s
        limits, which hand it to aiohttp past them (found by review: a long request
        line paused reading before its end came, and waited for ever)."""
        if transport is None:
            return
        waiting = len(self._buffer) if self.busy or self._write_paused else 0
        if not self._read_paused and waiting > LEAN_READ_LIMIT:
            self._read_paused = True
            transport.pause_reading()
        elif self._read_paused and waiting <= LEAN_READ_LIMIT:
            self._read_paused = False
            transport.resume_reading()

    def _answered(self, keep_alive: bool, answer: asyncio.Task[Answer]) -> None:
        self.busy = False
        self.last_active = self._loop.time()
        transport = self._transport
        if transport is None:
            return  # the client went away; the request was carried out all the same
        if answer.cancelled():
            transport.close()
            return
        reply = None if answer.exception() else answer.result()
        if not isinstance(reply, Reply):
            # `serve` turns every error into an answer, and whole-body handlers reply:
            # this is a bug, and the connection cannot go on.
            log.error("no answer to a lean request: %r", reply or answer)
            transport.abort()
            return
        keep_alive = keep_alive and not self._closing and not reply.close
        self._lean.write(transport, reply, keep_alive)
        if not keep_alive:
            transport.close()
            return
        self._next()

    def _pass_to_aiohttp(self, transport: asyncio.Transport) -> None:
        """aiohttp's protocol takes the connection, and the bytes not yet answered."""
        self._lean.forget(self)
        self._lean.handed_off += 1
        protocol = self._lean.fallback()
        if self._read_paused:
            transport.resume_reading()
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        data, self._buffer, self._transport = bytes(self._buffer), bytearray(), None
        protocol.data_received(data)
        if self._eof:  # the client sends no more: aiohttp closes once it has answered
            if b"\r\n\r\n" in data:
                protocol.close()
            else:  # no whole head to answer, as aiohttp alone would close at EOF
                transport.close()
