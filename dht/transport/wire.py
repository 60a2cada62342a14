"""Internal HTTP (shared by both ends): the paths, the headers, the proof of the
cluster secret every request carries, and the range stream's framing. Single-record
calls travel on the replica channel (`dht.transport.protocol`).

The range stream is a sequence of frames: key length (4 bytes big-endian), key, record
length (4 bytes big-endian), encoded record (`dht.model.record`, version included).
"""

from __future__ import annotations

import struct
from collections.abc import Awaitable, Callable

from aiohttp import ClientRequest, ClientResponse

from dht.model.machine import Machine
from dht.model.record import Record, encode
from dht.transport.proof import new_nonce, request_proof

RECORDS_PATH = "/internal/v0/records"
# Anti-entropy's tree and digest requests (dht/replication/anti_entropy.py), JSON both ways.
EXCHANGE_PATH = "/internal/v0/anti-entropy"
# A node's membership step (dht/membership/api.py serves it); the fence watch asks it.
TOPOLOGY_PATH = "/v0/admin/topology"
# The proof of the cluster secret (`dht.transport.proof.request_proof`): the secret
# itself is never sent.
PROOF_HEADER = "X-Dht-Proof"
# On that answer: the node's wall clock in milliseconds since the epoch, read as it
# answers, from which the asking node bounds its clock's offset (SPEC.md rule 9.13).
CLOCK_HEADER = "X-Dht-Clock"
RING_HEADER = "X-Dht-Ring"
RECORD_CONTENT_TYPE = "application/x-dht-records"

FRAME_LENGTH = struct.Struct(">I")


def encode_frame(key: bytes, record: Record) -> bytes:
    data = encode(record)
    return FRAME_LENGTH.pack(len(key)) + key + FRAME_LENGTH.pack(len(data)) + data


Handler = Callable[[ClientRequest], Awaitable[ClientResponse]]


def proving(
    secret: str, machine: Machine, receiver: str | None = None
) -> Callable[[ClientRequest, Handler], Awaitable[ClientResponse]]:
    """An aiohttp client middleware that adds to every request its proof of `secret`,
    made for `receiver` (a node's --cluster URL), or else for the node the request goes
    to (`http://host:port`, whatever its scheme), at the time and with a nonce of
    `machine`."""

    async def prove(request: ClientRequest, handler: Handler) -> ClientResponse:
        body = request.body if isinstance(request.body, bytes) else await request.body.as_bytes()
        made_ms = int(machine.wall() * 1000)
        to = receiver or f"http://{request.url.host}:{request.url.port}"
        nonce = new_nonce(machine.random_bytes)
        request.headers[PROOF_HEADER] = request_proof(
            secret, to, request.method, request.url.raw_path_qs, made_ms, nonce, body
        )
        return await handler(request)

    return prove
