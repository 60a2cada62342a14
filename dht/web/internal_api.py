"""This node's side of node-to-node traffic over HTTP (SPEC.md section 11): the local
range stream and the anti-entropy exchange under /internal/, and the guard every
internal HTTP request passes (the cluster secret's proof, the ring, TLS, the body's
size). What a replica does on the channel is `dht.transport.local_replica`.

These never coordinate or forward anything: they touch this node's storage only.
"""

from __future__ import annotations

import json
import logging

from aiohttp import web

from dht.limits import MAX_INTERNAL_BODY
from dht.model.log_limits import RateLimitedLog
from dht.model.machine import SYSTEM, Machine
from dht.replication.repair_loops import ExchangeAnswers
from dht.storage.disk import DiskFull
from dht.storage.membership import Membership
from dht.storage.store import Storage
from dht.transport.proof import SeenNonces, check_request, unfit_proof
from dht.transport.tls import NO_CERTIFICATE, TLS_ONLY, TlsRefusals
from dht.transport.wire import (
    EXCHANGE_PATH,
    PROOF_HEADER,
    RECORD_CONTENT_TYPE,
    RECORDS_PATH,
    RING_HEADER,
    encode_frame,
)
from dht.web.client_api import required
from dht.web.server import Params, Route, start_stream, text

log = logging.getLogger(__name__)

_STREAM_BUFFER = 64 * 1024


class InternalApi:
    def __init__(
        self,
        self_url: str,
        storage: Storage,
        secret: str | None,
        membership: Membership,
        exchanges: ExchangeAnswers,
        tls_refusals: TlsRefusals | None = None,
        machine: Machine = SYSTEM,
    ) -> None:
        """`exchanges`: who answers a peer's anti-entropy exchange (the repair loops
        say). `tls_refusals`, given when nodes talk TLS: a peer's request (range,
        exchange) must then come over TLS with a certificate, and those without are
        counted. `machine`: its wall clock tells a request proof's age."""
        self._self_url = self_url
        self._wall = machine.wall
        self._storage = storage
        self._tls_refusals = tls_refusals
        self._secret = secret
        self._membership = membership
        self._refusals = RateLimitedLog(log)
        # The nonces of the internal requests taken lately, on disk too (a restart
        # forgets none, SPEC.md rule 11.4); read only when there is a secret to prove.
        self._seen = (
            SeenNonces(store=storage, kept=storage.kept_nonces())
            if secret is not None
            else SeenNonces()
        )
        self._exchanges = exchanges

    # -- HTTP ----------------------------------------------------------------------------

    def routes(self) -> dict[str, Route]:
        return {
            RECORDS_PATH: Route({"GET": self.records}, counted=False),
            EXCHANGE_PATH: Route({"POST": self.exchange}, counted=False),
        }

    async def exchange(self, request: web.BaseRequest, params: Params) -> web.Response:
        """A peer's anti-entropy request: hashes of the tree it shares with this node,
        or digests of some of its leaves."""
        body = await self.guarded_body(request)
        if isinstance(body, web.Response):
            return body
        if request.headers.get(RING_HEADER, self._membership.identity) != self._membership.identity:
            return text(409, "Conflict: anti-entropy runs only between nodes on the same ring")
        answerer = self._exchanges.answerer
        if answerer is None:
            return text(503, "Unavailable: anti-entropy is not running on this node")
        try:
            message = json.loads(body)
            answer = answerer(message)
        except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
            return text(400, f"Bad Request: {exc!r}")
        return web.Response(text=json.dumps(answer), content_type="application/json")

    async def guarded_body(
        self, request: web.BaseRequest, peers_only: bool = True
    ) -> bytes | web.Response:
        """The body of an internal HTTP request, or the refusal to answer instead. It
        must prove the cluster secret (when one is set) for this very request, body
        included, and the sender must share a ring with this node (when it says its
        rings). With TLS between nodes, a request `peers_only` (it reads records) must
        come over TLS with a certificate. What the headers alone can refuse is refused
        before the body is read, and a body over MAX_INTERNAL_BODY is not read at all
        (found by review: a stranger made the node buffer 16 MiB per connection)."""
        refusals = self._tls_refusals
        if peers_only and refusals is not None:
            transport = request.transport
            if transport is None or not transport.get_extra_info("peercert"):
                refusals.refused(NO_CERTIFICATE, str(request.remote), f"{request.path} {TLS_ONLY}")
                return text(403, f"Forbidden: {request.path} is for peers: {TLS_ONLY}")
        header = request.headers.get(PROOF_HEADER, "")
        if self._secret is not None:
            if (unfit := unfit_proof(header, int(self._wall() * 1000))) is not None:
                return self._refused(request, unfit)
        ring = request.headers.get(RING_HEADER)
        if ring is not None and not self._membership.shares_ring(ring):
            return text(
                409,
                f"Conflict: ring identity {ring!a} shares no ring with this node's "
                f"{self._membership.identity}",
            )
        if request.content_length is None and request.body_exists:
            return text(411, "Length Required: an internal request says its body's length")
        if (request.content_length or 0) > MAX_INTERNAL_BODY:
            return text(413, f"Payload Too Large: internal requests take {MAX_INTERNAL_BODY} bytes")
        body = await request.read()
        if self._secret is not None:
            try:
                why = check_request(
                    self._secret,
                    self._self_url,
                    header,
                    request.method,
                    request.raw_path,
                    body,
                    int(self._wall() * 1000),
                    self._seen,
                )
                await self._storage.nonce_kept()  # queued by the group commit: synced
            except DiskFull as exc:  # its nonce could not be kept: taking it could replay
                return text(503, f"Unavailable: cannot keep the request's nonce: {exc}")
            if why is not None:
                return self._refused(request, why)
        return body

    def _refused(self, request: web.BaseRequest, why: str) -> web.Response:
        self._refusals.warning(
            "request-proof", "refused an internal request from %s: %s", request.remote, why
        )
        return text(403, f"Forbidden: internal request with {why}")

    async def records(self, request: web.BaseRequest, params: Params) -> web.StreamResponse:
        """This node's local range, tombstones and versions included, in framed batches."""
        if isinstance(refused := await self.guarded_body(request), web.Response):
            return refused
        start = required(params, "start")
        end = params.get("end") or None
        response = await start_stream(request, RECORD_CONTENT_TYPE)
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
