"""The node's one HTTP request handler: route by path and method, bound the client
requests in flight, and turn every error into a status with a one-line reason.

It runs on aiohttp's low-level server (no Application, router or middleware chain): a
request costs one dict look-up to find its handler and one query parse, which is the
whole of what a node adds to aiohttp's own work before the handler runs. The client's
entity requests mostly skip aiohttp altogether (`dht.web.lean_http`); both ways go
through `HttpServer.serve`, so the in-flight bound, the fence, the metrics and the
error answers are the same whichever way a request came.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web

from dht.model.keys import query_params

log = logging.getLogger(__name__)

Params = dict[str, bytes]
TEXT_PLAIN = "text/plain; charset=utf-8"


@dataclass(frozen=True, slots=True)
class Reply:
    """An answer whose whole body is known: aiohttp sends it as a `web.Response`, the
    lean protocol writes it straight to the socket."""

    status: int
    body: bytes = b""
    content_type: str = TEXT_PLAIN
    headers: tuple[tuple[str, str], ...] = ()

    def response(self) -> web.Response:
        return web.Response(
            status=self.status,
            body=self.body,
            headers={"Content-Type": self.content_type, **dict(self.headers)},
        )


class PendingBody:
    """The body of a request whose head came whole before it: its announced length, and
    the future of its bytes (cancelled if the client goes away or the answer comes
    first)."""

    __slots__ = ("length", "value")

    def __init__(self, length: int, value: asyncio.Future[bytes]) -> None:
        self.length = length
        self.value = value


Answer = Reply | web.StreamResponse
Handler = Callable[[web.BaseRequest, Params], Awaitable[Answer]]
# A handler the lean protocol calls with the request's body, in hand or on its way.
BodyHandler = Callable[[Params, bytes | PendingBody], Awaitable[Reply]]
# (operation, HTTP status, seconds): one client request answered, for the metrics.
Observer = Callable[[str, int, float], None]


def plain(status: int, reason: str, headers: dict[str, str] | None = None) -> Reply:
    """An answer whose body is one plain-text line."""
    return Reply(
        status, (reason + "\n").encode(), TEXT_PLAIN, tuple(headers.items()) if headers else ()
    )


def text(status: int, reason: str, headers: dict[str, str] | None = None) -> web.Response:
    """`plain`, as aiohttp's response."""
    return plain(status, reason, headers).response()


async def start_stream(request: web.BaseRequest, content_type: str) -> web.StreamResponse:
    """A 200 whose body is written as it is produced: chunked (each write one chunk) for
    HTTP/1.1, and for HTTP/1.0, which has no chunks, ended by closing the connection."""
    response = web.StreamResponse(status=200, headers={"Content-Type": content_type})
    if request.version >= (1, 1):
        response.enable_chunked_encoding()
    else:
        response.force_close()
    await response.prepare(request)
    return response


class BadRequest(Exception):
    """The request is malformed; the message is the reason sent back with 400."""


class PayloadTooLarge(Exception):
    """The body is over the node's limit; the message is the reason sent back with 413."""


@dataclass(frozen=True, slots=True)
class Route:
    handlers: dict[str, Handler]  # by method
    # Counted against --max-in-flight: client work is; health checks and replica
    # traffic are not, so client load cannot starve replication or hide the node's health.
    counted: bool = True
    # Method -> the operation's name in the metrics (counted routes only).
    operations: dict[str, str] = field(default_factory=dict)
    # Method -> the handler the lean protocol calls instead, when it has the whole body.
    whole_body: dict[str, BodyHandler] = field(default_factory=dict)


class HttpServer:
    def __init__(
        self, routes: dict[str, Route], max_in_flight: int, observe: Observer | None = None
    ) -> None:
        self._routes = routes
        self._observe = observe
        self.max_in_flight = max_in_flight
        self.in_flight = 0
        self.refused = 0
        self.errors = 0
        # Set when this node learns it was removed from the cluster (SPEC.md rule 13.9),
        # or while its clock is off from the majority's (rule 9.13): client work is
        # answered 503 with it, as its data may be stale or its versions refused.
        self.fenced: str | None = None

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        """aiohttp's handler of every request."""
        path, _, query = request.raw_path.partition("?")
        route = self._routes.get(path)
        if route is None:
            answer: Answer = plain(400, f"Bad Request: no such path {path[:200]}")
        elif (handler := route.handlers.get(request.method)) is None:
            allow = ", ".join(sorted(route.handlers))
            answer = plain(405, f"Method Not Allowed: {request.method}", {"Allow": allow})
        else:
            answer = await self.serve(
                route, request.method, path, lambda params: handler(request, params), query
            )
        return answer.response() if isinstance(answer, Reply) else answer

    def whole_body_routes(self) -> dict[str, set[str]]:
        """Path -> the methods with a `whole_body` handler: what the lean protocol takes."""
        return {
            path: set(route.whole_body) for path, route in self._routes.items() if route.whole_body
        }

    async def serve_whole_body(
        self, method: str, path: str, query: str, body: bytes | PendingBody
    ) -> Answer:
        """The lean protocol's handler: `path` has a route with a `whole_body` handler
        for `method`."""
        route = self._routes[path]
        handler = route.whole_body[method]
        return await self.serve(route, method, path, lambda params: handler(params, body), query)

    async def serve(
        self,
        route: Route,
        method: str,
        path: str,
        call: Callable[[Params], Awaitable[Answer]],
        query: str,
    ) -> Answer:
        """One request to `route`: the in-flight bound and the fence for client work,
        the metrics, and every error as a one-line answer."""
        if not route.counted:
            return await self._call(method, path, call, query)
        started = time.perf_counter()
        if self.fenced is not None:
            answer: Answer = plain(503, f"Unavailable: {self.fenced}")
        elif self.in_flight >= self.max_in_flight:
            self.refused += 1
            answer = plain(503, "Overloaded", {"Retry-After": "1"})
        else:
            self.in_flight += 1
            try:
                answer = await self._call(method, path, call, query)
            finally:
                self.in_flight -= 1
        if self._observe is not None:
            operation = route.operations.get(method, method.lower())
            self._observe(operation, answer.status, time.perf_counter() - started)
        return answer

    async def _call(
        self, method: str, path: str, call: Callable[[Params], Awaitable[Answer]], query: str
    ) -> Answer:
        try:
            return await call(query_params(query))
        except BadRequest as exc:
            return plain(400, f"Bad Request: {exc}")
        except (PayloadTooLarge, web.HTTPRequestEntityTooLarge) as exc:
            reason = exc if isinstance(exc, PayloadTooLarge) else "body over the size limit"
            return plain(413, f"Payload Too Large: {reason}")
        except Exception as exc:
            self.errors += 1
            target = f"{path}?{query}" if query else path
            log.exception("%s %s failed", method, target[:200])
            return plain(500, f"Internal Server Error: {type(exc).__name__}")
