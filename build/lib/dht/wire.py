"""The internal protocol's paths, header names and range framing (shared by both ends).

A record travels as its storage encoding (`dht.record`), which carries the version. The
range stream is a sequence of frames: key length (4 bytes big-endian), key, record length
(4 bytes big-endian), encoded record.
"""

from __future__ import annotations

import struct

from dht.record import Record, encode

RECORD_PATH = "/internal/v0/record"
RECORDS_PATH = "/internal/v0/records"
SECRET_HEADER = "X-Dht-Secret"
RECORD_CONTENT_TYPE = "application/x-dht-record"

FRAME_LENGTH = struct.Struct(">I")


def encode_frame(key: bytes, record: Record) -> bytes:
    data = encode(record)
    return FRAME_LENGTH.pack(len(key)) + key + FRAME_LENGTH.pack(len(data)) + data
