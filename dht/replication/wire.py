"""The internal range stream over HTTP (shared by both ends): its path, headers and
framing. Single-record calls travel on the replica channel (`dht.replication.protocol`).

The range stream is a sequence of frames: key length (4 bytes big-endian), key, record
length (4 bytes big-endian), encoded record (`dht.model.record`, version included).
"""

from __future__ import annotations

import struct

from dht.model.record import Record, encode

RECORDS_PATH = "/internal/v0/records"
# Anti-entropy's tree and digest requests (dht/replication/anti_entropy.py), JSON both ways.
EXCHANGE_PATH = "/internal/v0/anti-entropy"
# A node's membership step (dht/web/membership_api.py serves it); the fence watch asks it.
TOPOLOGY_PATH = "/v0/admin/topology"
# On that answer: the node's wall clock in milliseconds since the epoch, read as it
# answers, from which the asking node bounds its clock's offset (SPEC.md rule 9.13).
CLOCK_HEADER = "X-Dht-Clock"
SECRET_HEADER = "X-Dht-Secret"
RING_HEADER = "X-Dht-Ring"
RECORD_CONTENT_TYPE = "application/x-dht-records"

FRAME_LENGTH = struct.Struct(">I")


def encode_frame(key: bytes, record: Record) -> bytes:
    data = encode(record)
    return FRAME_LENGTH.pack(len(key)) + key + FRAME_LENGTH.pack(len(data)) + data
