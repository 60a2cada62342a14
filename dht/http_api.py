"""The client API v0 (SPEC.md section 2): parse, call the coordinator, respond.

All status-code decisions live here: the coordinator returns outcomes, this module maps
them. Errors carry a short plain-text reason.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from dht.config import NodeConfig
from dht.coordinator import Coordinator, NotEnoughSources, Outcome, RangeIncomplete, Status
from dht.replicas import BadReplicas, ReplicaCount, parse_replicas

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_STATUS_CODES = {
    Status.FOUND: 200,
    Status.NOT_FOUND: 404,
    Status.STORED: 201,
    Status.DELETED: 202,
    Status.NOT_ENOUGH_REPLICAS: 504,
    Status.UNAVAILABLE: 503,
}
_REASONS = {
    Status.NOT_FOUND: "Not Found",
    Status.STORED: "Created",
    Status.DELETED: "Accepted",
    Status.NOT_ENOUGH_REPLICAS: "Not Enough Replicas",
    Status.UNAVAILABLE: "Unavailable: not enough replicas with a closed circuit",
}


def text(status: int, reason: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(status=status, text=reason + "\n", headers=headers)


def respond(outcome: Outcome) -> web.Response:
    status = _STATUS_CODES[outcome.status]
    if outcome.status is Status.FOUND:
        return web.Response(
            status=status, body=outcome.value, content_type="application/octet-stream"
        )
    headers = None
    if outcome.status is Status.UNAVAILABLE:
        headers = {"Retry-After": str(max(1, math.ceil(outcome.retry_after)))}
    return text(status, _REASONS[outcome.status], headers)


class BadRequest(Exception):
    """The request is malformed; the message is the reason sent back."""


def required_param(request: web.Request, name: str) -> str:
    value = request.query.get(name)
    if not value:
        raise BadRequest(f"missing or empty parameter {name!r}")
    return value


def as_key(value: str, name: str) -> bytes:
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise BadRequest(f"parameter {name!r} is not valid UTF-8") from exc


class ClientApi:
    def __init__(
        self,
        coordinator: Coordinator,
        config: NodeConfig,
        status: Callable[[], dict[str, Any]],
    ) -> None:
        self._coordinator = coordinator
        self._cluster_size = len(config.cluster)
        self._max_value_bytes = config.max_value_bytes
        self._max_key_bytes = config.max_key_bytes
        self._status = status

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/v0/status", self.status),
            web.get("/v0/entity", self.get_entity, allow_head=False),
            web.put("/v0/entity", self.put_entity),
            web.delete("/v0/entity", self.delete_entity),
            web.get("/v0/entities", self.entities, allow_head=False),
        ]

    async def status(self, request: web.Request) -> web.Response:
        return web.json_response(self._status())

    async def get_entity(self, request: web.Request) -> web.Response:
        key, replicas = self._entity_params(request)
        return respond(await self._coordinator.get(key, replicas))

    async def put_entity(self, request: web.Request) -> web.Response:
        key, replicas = self._entity_params(request)
        value = await request.read()
        if len(value) > self._max_value_bytes:
            raise web.HTTPRequestEntityTooLarge(
                max_size=self._max_value_bytes, actual_size=len(value)
            )
        return respond(await self._coordinator.put(key, value, replicas))

    async def delete_entity(self, request: web.Request) -> web.Response:
        key, replicas = self._entity_params(request)
        return respond(await self._coordinator.delete(key, replicas))

    async def entities(self, request: web.Request) -> web.StreamResponse:
        start = as_key(required_param(request, "start"), "start")
        end_text = request.query.get("end")
        end = as_key(end_text, "end") if end_text else None
        try:
            records = await self._coordinator.scan(start, end)
        except NotEnoughSources as exc:
            log.info("range refused: %s", exc)
            return text(504, "Not Enough Replicas")
        response = web.StreamResponse(
            status=200, headers={"Content-Type": "application/octet-stream"}
        )
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            async with contextlib.aclosing(records):  # closes peer streams on disconnect
                async for key, value in records:
                    await response.write(key + b"\n" + value)  # one record, one chunk
        except RangeIncomplete as exc:
            # The status line is gone already: cut the stream so the client sees an
            # incomplete body rather than a short one that looks whole.
            log.warning("range aborted mid-stream: %s", exc)
            if request.transport is not None:
                request.transport.abort()
            return response
        await response.write_eof()
        return response

    def _entity_params(self, request: web.Request) -> tuple[bytes, ReplicaCount]:
        key = as_key(required_param(request, "id"), "id")
        if len(key) > self._max_key_bytes:
            raise BadRequest(f"id is longer than {self._max_key_bytes} bytes")
        try:
            replicas = parse_replicas(request.query.get("replicas"), self._cluster_size)
        except BadReplicas as exc:
            raise BadRequest(str(exc)) from exc
        return key, replicas


def plain_errors(max_value_bytes: int) -> Callable[..., Awaitable[web.StreamResponse]]:
    """Maps bad input to the codes of SPEC.md section 2, each with a plain-text reason."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except BadRequest as exc:
            return text(400, f"Bad Request: {exc}")
        except web.HTTPNotFound:
            return text(400, f"Bad Request: no such path {request.path}")
        except web.HTTPMethodNotAllowed as exc:
            allow = ", ".join(sorted(exc.allowed_methods))
            return text(405, f"Method Not Allowed: {request.method}", {"Allow": allow})
        except web.HTTPRequestEntityTooLarge:
            return text(413, f"Payload Too Large: values are limited to {max_value_bytes} bytes")

    return middleware


class InFlightLimit:
    """Bounds the client requests a node works on at once; past the bound it answers 503
    at once instead of queueing. Internal replica traffic and /v0/status are not counted,
    so client load cannot starve replication or hide the node's health."""

    def __init__(self, limit: int, exempt_prefixes: tuple[str, ...]) -> None:
        self.limit = limit
        self.in_flight = 0
        self.refused = 0
        self._exempt = exempt_prefixes

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path.startswith(self._exempt):
            return await handler(request)
        if self.in_flight >= self.limit:
            self.refused += 1
            return text(503, "Overloaded", {"Retry-After": "1"})
        self.in_flight += 1
        try:
            return await handler(request)
        finally:
            self.in_flight -= 1
