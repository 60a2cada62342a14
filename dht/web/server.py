"""The node's one HTTP request handler: route by path and method, bound the client
requests in flight, and turn every error into a status with a one-line reason.

It runs on aiohttp's low-level server (no Application, router or middleware chain): a
request costs one dict look-up to find its handler and one query parse, which is the
whole of what a node adds to aiohttp's own work before the handler runs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web

from dht.model.keys import query_params

log = logging.getLogger(__name__)

Params = dict[str, bytes]
Handler = Callable[[web.BaseRequest, Params], Awaitable[web.StreamResponse]]
# (operation, HTTP status, seconds): one client request answered, for the metrics.
Observer = Callable[[str, int, float], None]


def text(status: int, reason: str, headers: dict[str, str] | None = None) -> web.Response:
    """An answer whose body is one plain-text line."""
    return web.Response(status=status, text=reason + "\n", headers=headers)


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
        path, _, query = request.raw_path.partition("?")
        route = self._routes.get(path)
        if route is None:
            return text(400, f"Bad Request: no such path {path[:200]}")
        handler = route.handlers.get(request.method)
        if handler is None:
            allow = ", ".join(sorted(route.handlers))
            return text(405, f"Method Not Allowed: {request.method}", {"Allow": allow})
        if not route.counted:
            return await self._call(handler, request, query)
        started = time.perf_counter()
        if self.fenced is not None:
            response: web.StreamResponse = text(503, f"Unavailable: {self.fenced}")
        elif self.in_flight >= self.max_in_flight:
            self.refused += 1
            response = text(503, "Overloaded", {"Retry-After": "1"})
        else:
            self.in_flight += 1
            try:
                response = await self._call(handler, request, query)
            finally:
                self.in_flight -= 1
        if self._observe is not None:
            operation = route.operations.get(request.method, request.method.lower())
            self._observe(operation, response.status, time.perf_counter() - started)
        return response

    async def _call(
        self, handler: Handler, request: web.BaseRequest, query: str
    ) -> web.StreamResponse:
        try:
            return await handler(request, query_params(query))
        except BadRequest as exc:
            return text(400, f"Bad Request: {exc}")
        except (PayloadTooLarge, web.HTTPRequestEntityTooLarge) as exc:
            reason = exc if isinstance(exc, PayloadTooLarge) else "body over the size limit"
            return text(413, f"Payload Too Large: {reason}")
        except Exception as exc:
            self.errors += 1
            log.exception("%s %s failed", request.method, request.raw_path[:200])
            return text(500, f"Internal Server Error: {type(exc).__name__}")
