"""The node-to-node replica protocol (SPEC.md section 6), served under /internal/.

These requests are never coordinated or forwarded again: a replica read or write touches
this node's storage only.
"""

from __future__ import annotations

import hmac
import logging

from aiohttp import web

from dht.clock import HybridClock
from dht.http_api import Handler, as_key, required_param, text
from dht.record import CorruptRecord, decode, encode
from dht.storage import Storage
from dht.wire import RECORD_CONTENT_TYPE, RECORD_PATH, RECORDS_PATH, SECRET_HEADER, encode_frame

log = logging.getLogger(__name__)

INTERNAL_PREFIX = "/internal/"
_STREAM_BUFFER = 64 * 1024


class InternalApi:
    def __init__(self, storage: Storage, clock: HybridClock, secret: str | None) -> None:
        self._storage = storage
        self._clock = clock
        self._secret = secret

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get(RECORD_PATH, self.get_record, allow_head=False),
            web.put(RECORD_PATH, self.put_record),
            web.get(RECORDS_PATH, self.records, allow_head=False),
        ]

    @web.middleware
    async def authenticate(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """With a cluster secret set, an internal request must carry it: a client cannot
        forge a version or a replica write."""
        if self._secret is not None and request.path.startswith(INTERNAL_PREFIX):
            offered = request.headers.get(SECRET_HEADER, "")
            if not hmac.compare_digest(offered.encode(), self._secret.encode()):
                return text(403, "Forbidden: internal request without the cluster secret")
        return await handler(request)

    async def get_record(self, request: web.Request) -> web.Response:
        key = as_key(required_param(request, "id"), "id")
        record = self._storage.get(key)
        if record is None:
            return text(404, "Not Found")
        return web.Response(body=encode(record), content_type=RECORD_CONTENT_TYPE)

    async def put_record(self, request: web.Request) -> web.Response:
        key = as_key(required_param(request, "id"), "id")
        try:
            record = decode(await request.read())
        except CorruptRecord as exc:
            return text(400, f"Bad Request: {exc}")
        self._clock.observe(record.version)
        stored = self._storage.put_if_newer(key, record)
        return text(201 if stored else 200, "Created" if stored else "Kept newer")

    async def records(self, request: web.Request) -> web.StreamResponse:
        """This node's local range, tombstones and versions included, in framed batches."""
        start = as_key(required_param(request, "start"), "start")
        end_text = request.query.get("end")
        end = as_key(end_text, "end") if end_text else None
        response = web.StreamResponse(headers={"Content-Type": RECORD_CONTENT_TYPE})
        response.enable_chunked_encoding()
        await response.prepare(request)
        batch = bytearray()
        for key, record in self._storage.scan(start, end):
            batch += encode_frame(key, record)
            if len(batch) >= _STREAM_BUFFER:
                await response.write(bytes(batch))
                batch.clear()
        if batch:
            await response.write(bytes(batch))
        await response.write_eof()
        return response
