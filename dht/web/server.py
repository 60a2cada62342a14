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

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web

from dht.model.keys import query_params
from dht.model.machine import SYSTEM, Machine
from dht.web.admission import BodyTooSlow, ClientRequestError

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
    close: bool = False  # the connection closes after it (its request's body was cut)

    def response(self) -> web.Response:
        response = web.Response(
            status=self.status,
            body=self.body,
            headers={"Content-Type": self.content_type, **dict(self.headers)},
        )
        if self.close:
            response.force_close()
        return response


class Body:
    """A request's body, come whole, and the bytes of the byte budget held for it already
    (a body aiohttp read was admitted by its length before it came; one the lean path
    read is weighed by its handler): whoever takes it releases them, once."""

    __slots__ = ("_release", "data", "held")

    def __init__(
        self, data: bytes, held: int = 0, release: Callable[[int], None] | None = None
    ) -> None:
        self.data = data
        self.held = held
        self._release = release

    def take(self) -> int:
        """The bytes held, now the caller's to release."""
        held, self.held = self.held, 0
        return held

    def release(self) -> None:
        if self.held and self._release is not None:
            self._release(self.take())


NO_BODY = Body(b"")
Answer = Reply | web.StreamResponse
Handler = Callable[[web.BaseRequest, Params], Awaitable[Answer]]
# A handler of a request whose body has come whole (GET, PUT and DELETE of an entity, on
# either path), and what reads such a body on aiohttp's.
BodyHandler = Callable[[Params, Body], Awaitable[Reply]]
BodyReader = Callable[[web.BaseRequest, Params], Awaitable[Body]]
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


class BadRequest(ClientRequestError):
    """The request is malformed; the message is the reason sent back with 400."""

    status = 400


class PayloadTooLarge(ClientRequestError):
    """The body is over the node's limit; the message is the reason sent back with 413."""

    status = 413


class Refused(ClientRequestError):
    """The request is answered `reply` before its body is read (over the byte budget)."""

    def __init__(self, reply: Reply) -> None:
        super().__init__(reply.body)
        self.reply = reply
        self.status = reply.status


def too_slow(exc: BodyTooSlow) -> Reply:
    """A body cut for falling behind the minimum rate: 408, and the connection closes."""
    return Reply(exc.status, f"Request Timeout: {exc}\n".encode(), TEXT_PLAIN, close=True)


@dataclass(frozen=True, slots=True)
class Route:
    handlers: dict[str, Handler]  # by method
    # Counted against --max-in-flight: client work is; health checks and replica
    # traffic are not, so client load cannot starve replication or hide the node's health.
    counted: bool = True
    # Method -> the operation's name in the metrics (counted routes only).
    operations: dict[str, str] = field(default_factory=dict)
    # Method -> the handler called once the request's body has come whole: by the lean
    # protocol, and by aiohttp's after `read_body` (methods with a body to read).
    whole_body: dict[str, BodyHandler] = field(default_factory=dict)
    read_body: dict[str, BodyReader] = field(default_factory=dict)

    def allowed(self) -> str:
        return ", ".join(sorted(set(self.handlers) | set(self.read_body)))


_OVERLOADED = plain(503, "Overloaded", {"Retry-After": "1"})


class HttpServer:
    def __init__(
        self,
        routes: dict[str, Route],
        max_in_flight: int,
        observe: Observer | None = None,
        machine: Machine = SYSTEM,
    ) -> None:
        """`observe`: told of each counted request's outcome and seconds, as
        `machine.monotonic` times them."""
        self._routes = routes
        self._observe = observe
        self._monotonic = machine.monotonic
        self.max_in_flight = max_in_flight
        self.in_flight = 0
        self.refused = 0
        self.errors = 0
        self.fenced: str | None = None  # `fence`

    def fence(self, reason: str | None) -> None:
        """Client work is answered 503 with `reason` from now on (None: served again):
        the node learnt it was removed from the cluster (SPEC.md rule 13.9), or its
        clock is off from the majority's (rule 9.13), so its data may be stale or its
        versions refused. The fence watch (`dht.replication.fence`) is given this."""
        self.fenced = reason

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        """aiohttp's handler of every request."""
        path, _, query = request.raw_path.partition("?")
        route = self._routes.get(path)
        method = request.method
        if route is None:
            answer: Answer = plain(400, f"Bad Request: no such path {path[:200]}")
        elif (read := route.read_body.get(method)) is not None:
            answer = await self.serve(
                route, method, path, route.whole_body[method], query, lambda p: read(request, p)
            )
        elif (handler := route.handlers.get(method)) is None:
            answer = plain(405, f"Method Not Allowed: {method}", {"Allow": route.allowed()})
        else:
            answer = await self.serve(route, method, path, lambda p, _: handler(request, p), query)
        return answer.response() if isinstance(answer, Reply) else answer

    def whole_body_routes(self) -> dict[str, set[str]]:
        """Path -> the methods with a `whole_body` handler: what the lean protocol takes."""
        return {
            path: set(route.whole_body) for path, route in self._routes.items() if route.whole_body
        }

    async def serve_whole_body(self, method: str, path: str, query: str, body: bytes) -> Answer:
        """The lean protocol's handler: `path` has a route with a `whole_body` handler
        for `method`, and `body` came whole."""
        route = self._routes[path]
        return await self.serve(route, method, path, route.whole_body[method], query, body=body)

    async def serve(
        self,
        route: Route,
        method: str,
        path: str,
        call: Callable[[Params, Body], Awaitable[Answer]],
        query: str,
        read: Callable[[Params], Awaitable[Body]] | None = None,
        body: bytes = b"",
    ) -> Answer:
        """One request to `route`, its body `body` or what `read` reads: the in-flight
        bound and the fence for client work, the metrics, and every error as a one-line
        answer. A body on its way is not counted in flight (SPEC.md rule 7.10): clients
        that announce bodies and send them slowly hold no one else's place."""
        started = self._monotonic()
        if not route.counted:
            return await self._call(method, path, query, call, counted=False)
        if self.fenced is not None:
            answer: Answer = plain(503, f"Unavailable: {self.fenced}")
        else:
            answer = await self._call(method, path, query, call, read, body)
        if self._observe is not None:
            operation = route.operations.get(method, method.lower())
            self._observe(operation, answer.status, self._monotonic() - started)
        return answer

    async def _call(
        self,
        method: str,
        path: str,
        query: str,
        call: Callable[[Params, Body], Awaitable[Answer]],
        read: Callable[[Params], Awaitable[Body]] | None = None,
        data: bytes = b"",
        counted: bool = True,
    ) -> Answer:
        """Reads the body (not counted in flight), then counts the request and calls its
        handler; every error becomes its answer."""
        try:
            params = query_params(query)
            body = await read(params) if read is not None else Body(data) if data else NO_BODY
            if not counted:
                return await call(params, body)
            if self.in_flight >= self.max_in_flight:
                body.release()
                self.refused += 1
                return _OVERLOADED
            self.in_flight += 1
            try:
                return await call(params, body)
            finally:
                self.in_flight -= 1
                body.release()  # unless the handler took what it held
        except BadRequest as exc:
            return plain(exc.status, f"Bad Request: {exc}")
        except (PayloadTooLarge, web.HTTPRequestEntityTooLarge) as exc:
            reason = exc if isinstance(exc, PayloadTooLarge) else "body over the size limit"
            return plain(PayloadTooLarge.status, f"Payload Too Large: {reason}")
        except Refused as exc:
            return exc.reply
        except BodyTooSlow as exc:
            return too_slow(exc)
        except Exception as exc:
            self.errors += 1
            target = f"{path}?{query}" if query else path
            log.exception("%s %s failed", method, target[:200])
            return plain(500, f"Internal Server Error: {type(exc).__name__}")
