"""The client API v0 (SPEC.md sections 1, 2 and 7): parse, call the coordinator, respond.

All status-code decisions for coordinator outcomes live here; `dht.web.server` routes
requests and maps malformed input. Errors carry a short plain-text reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
from collections.abc import Callable
from typing import Any

from aiohttp import web

from dht.config import NodeConfig
from dht.coordination.cluster_range import NotEnoughSources, RangeIncomplete
from dht.coordination.coordinator import Coordinator
from dht.coordination.outcome import Outcome, Status
from dht.limits import MAX_TTL_SECONDS
from dht.model.replicas import BadReplicas, ReplicaCount, parse_replicas
from dht.web.admission import BodyPace, ByteBudget
from dht.web.server import (
    NO_BODY,
    BadRequest,
    Body,
    Params,
    PayloadTooLarge,
    Refused,
    Reply,
    Route,
    plain,
    start_stream,
    text,
)

log = logging.getLogger(__name__)

STATUS_CODES = {
    Status.FOUND: 200,
    Status.NOT_FOUND: 404,
    Status.STORED: 201,
    Status.DELETED: 202,
    Status.NOT_ENOUGH_REPLICAS: 504,
    Status.INSUFFICIENT_STORAGE: 507,
    Status.UNAVAILABLE: 503,
}
_REASONS = {
    Status.NOT_FOUND: "Not Found",
    Status.STORED: "Created",
    Status.DELETED: "Accepted",
    Status.NOT_ENOUGH_REPLICAS: "Not Enough Replicas",
    Status.INSUFFICIENT_STORAGE: "Insufficient Storage: a replica's disk is below its "
    "free-space reserve; reads go on, writes resume once space is freed",
    Status.UNAVAILABLE: "Unavailable: not enough replicas with a closed circuit",
}


# The answers that never change, built once.
_FIXED_REPLIES = {
    status: plain(STATUS_CODES[status], reason)
    for status, reason in _REASONS.items()
    if status is not Status.UNAVAILABLE
}


def respond(outcome: Outcome) -> Reply:
    if outcome.status is Status.FOUND:
        return Reply(200, outcome.value, "application/octet-stream")
    if outcome.status is Status.UNAVAILABLE:
        retry_after = str(max(1, math.ceil(outcome.retry_after)))
        return plain(503, _REASONS[Status.UNAVAILABLE], {"Retry-After": retry_after})
    return _FIXED_REPLIES[outcome.status]


def required(params: Params, name: str) -> bytes:
    value = params.get(name)
    if not value:
        raise BadRequest(f"missing or empty parameter {name!r}")
    return value


class ClientApi:
    def __init__(
        self,
        coordinator: Coordinator,
        config: NodeConfig,
        budget: ByteBudget,
        pace: BodyPace,
        status: Callable[[], dict[str, Any]],
    ) -> None:
        self._coordinator = coordinator
        self._max_value_bytes = config.max_value_bytes
        self._max_key_bytes = config.max_key_bytes
        self._budget = budget
        self._pace = pace
        self._status = status

    def routes(self) -> dict[str, Route]:
        return {
            "/v0/status": Route({"GET": self.status}, counted=False),
            "/v0/entity": Route(
                {"GET": self.get_entity, "DELETE": self.delete_entity},
                operations={"GET": "get", "PUT": "put", "DELETE": "delete"},
                whole_body={
                    "GET": self.get_value,
                    "PUT": self.put_value,
                    "DELETE": self.delete_value,
                },
                read_body={"PUT": self.read_put},
            ),
            "/v0/entities": Route({"GET": self.entities}, operations={"GET": "range"}),
        }

    async def status(self, request: web.BaseRequest, params: Params) -> web.Response:
        return web.Response(text=json.dumps(self._status()), content_type="application/json")

    async def get_entity(self, request: web.BaseRequest, params: Params) -> Reply:
        return await self.get_value(params, NO_BODY)

    async def get_value(self, params: Params, body: Body) -> Reply:
        """A GET (its body, if any, is not read)."""
        key, replicas = self._entity_params(params)
        return respond(await self._coordinator.get(key, replicas))

    async def put_value(self, params: Params, body: Body) -> Reply:
        """A PUT whose body has come whole: weighed against the byte budget now if the lean
        path read it, or admitted already (`read_put`)."""
        key, replicas = self._entity_params(params)
        ttl_ms = ttl_param(params)
        value = body.data
        held = body.take()
        if not held:
            if len(value) > self._max_value_bytes:
                raise PayloadTooLarge(f"values are limited to {self._max_value_bytes} bytes")
            if not self._budget.acquire(len(value)):
                return self._over_budget()
            held = len(value)
        return await self._store(key, replicas, ttl_ms, value, held)

    async def read_put(self, request: web.BaseRequest, params: Params) -> Body:
        """The body of a PUT aiohttp took, read whole before the request counts in
        flight: one of announced length is admitted by that length before a byte of it is
        read (413 past the value limit, 503 past the byte budget: the body is then never
        read; chunk by chunk if reservations hold their half of the budget), a chunked
        one chunk by chunk; either is cut (408) if it falls behind the minimum rate."""
        self._entity_params(params)  # a 400 before the body is read
        ttl_param(params)
        length = request.content_length
        if length is None:
            return await self._read_chunked(request)
        if length > self._max_value_bytes:
            raise PayloadTooLarge(f"values are limited to {self._max_value_bytes} bytes")
        # Reserved by its length; or, the half kept for bodies still to come being full,
        # taken chunk by chunk as it arrives (as a chunked one), so that silent bodies
        # holding that half refuse no body that comes.
        reserved = self._budget.reserve(length)
        if not reserved and not self._budget.fits(length):
            self._budget.refused += 1
            raise Refused(self._over_budget())
        received = 0
        try:
            parts: list[bytes] = []
            head_came = asyncio.get_running_loop().time()
            while received < length:
                chunk = await self._paced(request, head_came, received)
                if not chunk:
                    raise ConnectionResetError("the client stopped before its body's end")
                if reserved:
                    self._budget.arrived(len(chunk))
                elif not self._budget.acquire(len(chunk), held=received):
                    raise Refused(self._over_budget())
                received += len(chunk)
                parts.append(chunk)
        except BaseException:
            if reserved:
                self._budget.arrived(length - received)
                self._budget.release(length)
            else:
                self._budget.release(received)
            raise
        return Body(b"".join(parts), length, self._budget.release)

    async def _paced(self, request: web.BaseRequest, head_came: float, received: int) -> bytes:
        """The next bytes of a body of which `received` came since `head_came` (b"" at its
        end), or BodyTooSlow once it falls behind the minimum rate."""
        content = request.content
        if content.at_eof():
            return b""
        if chunk := content.read_nowait():  # what has come already: no timer needed
            return chunk
        try:
            async with asyncio.timeout_at(self._pace.due(head_came, received)):
                return await content.readany()
        except TimeoutError:
            raise self._pace.too_slow() from None

    async def _store(
        self, key: bytes, replicas: ReplicaCount | None, ttl_ms: int, value: bytes, held: int
    ) -> Reply:
        """Writes `value`, whose `held` bytes of the budget are released once no replica
        call holds it."""
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self._budget.release(held)

        try:
            return respond(await self._coordinator.put(key, value, replicas, release, ttl_ms))
        except BaseException:
            release()
            raise

    async def _read_chunked(self, request: web.BaseRequest) -> Body:
        """A body of unannounced length, admitted against the budget as it streams (503,
        and nothing held, if the budget runs out first) and held for its whole size."""
        parts: list[bytes] = []
        size = 0
        head_came = asyncio.get_running_loop().time()
        try:
            while chunk := await self._paced(request, head_came, size):
                if size + len(chunk) > self._max_value_bytes:
                    raise PayloadTooLarge(f"values are limited to {self._max_value_bytes} bytes")
                if not self._budget.acquire(len(chunk), held=size):
                    raise Refused(self._over_budget())
                size += len(chunk)
                parts.append(chunk)
        except BaseException:
            self._budget.release(size)
            raise
        return Body(b"".join(parts), size, self._budget.release)

    def _over_budget(self) -> Reply:
        return plain(
            503,
            f"Overloaded: {self._budget.in_flight} bytes of values in flight, the limit is "
            f"{self._budget.limit}",
            {"Retry-After": "1"},
        )

    async def delete_entity(self, request: web.BaseRequest, params: Params) -> Reply:
        return await self.delete_value(params, NO_BODY)

    async def delete_value(self, params: Params, body: Body) -> Reply:
        """A DELETE (its body, if any, is not read)."""
        key, replicas = self._entity_params(params)
        return respond(await self._coordinator.delete(key, replicas))

    async def entities(self, request: web.BaseRequest, params: Params) -> web.StreamResponse:
        start = required(params, "start")
        end = params.get("end") or None
        try:
            records = await self._coordinator.scan(start, end)
        except NotEnoughSources as exc:
            log.info("range refused: %s", exc)
            return text(504, "Not Enough Replicas")
        response = await start_stream(request, "application/octet-stream")
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
        except ConnectionError:
            log.info("range: the client went away mid-stream")
            return response
        except Exception:
            # Too late for a 500: cut the stream, so the client cannot take what it got
            # for the whole range.
            log.exception("range failed mid-stream")
            if request.transport is not None:
                request.transport.abort()
            return response
        await response.write_eof()
        return response

    def _entity_params(self, params: Params) -> tuple[bytes, ReplicaCount | None]:
        """The key, and the replicas asked for (None: the membership's default)."""
        key = required(params, "id")
        if len(key) > self._max_key_bytes:
            raise BadRequest(f"id is longer than {self._max_key_bytes} bytes")
        replicas = params.get("replicas")
        if replicas is None:
            return key, None
        try:
            text = replicas.decode("ascii", "replace")
            return key, parse_replicas(text, self._coordinator.cluster_size)
        except BadReplicas as exc:
            raise BadRequest(str(exc)) from exc


def ttl_param(params: Params) -> int:
    """`ttl=SECONDS` of a PUT in milliseconds, 0 without one: a whole number of seconds
    from 1 to a year; anything else is a 400."""
    text = params.get("ttl")
    if text is None:
        return 0
    if not text.isdigit() or not 1 <= int(text) <= MAX_TTL_SECONDS:
        raise BadRequest(f"ttl must be a whole number of seconds from 1 to {MAX_TTL_SECONDS}")
    return int(text) * 1000
