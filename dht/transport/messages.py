"""The replica channel's messages: the events a `ReplicaCodec` (`dht.transport.protocol`)
hands out and takes, each op's body, and the errors of both (sans-I/O).

Every event is one message of one op; call id 0 is the handshake, in which each end
proves it knows the cluster secret without sending it (`dht.transport.proof`). A
body's layout:

| op | from | body |
| --- | --- | --- |
| HELLO | client, first | version (u16); sender URL, ring identity, nonce (u16 length each) |
| CHALLENGE | server, answers HELLO | nonce (u16 length + bytes), the server's proof (the rest) |
| PROOF | client, answers CHALLENGE | the client's proof |
| WELCOME | server, answers PROOF | empty: the channel is open |
| REFUSED | server, for HELLO or PROOF | reason (UTF-8); the server closes the connection then |
| GET | client | key |
| PUT | client | key length (u32), key, record (`dht.model.record` encoding, version inside) |
| RECORD | server, answers GET | record |
| ABSENT | server, answers GET | empty: no record for that key |
| STORED | server, answers PUT | 1 byte: 1 stored, 0 kept (the replica held a newer record) |
| FAILED | server, answers GET or PUT | why (u8, `Why`), then a reason (UTF-8) |
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dht.model.record import Record, decode, encode_header

PROTOCOL_VERSION = 2  # 2: the secret is proven, not sent
HANDSHAKE_CALL = 0

_VERSION = struct.Struct(">H")
_FIELD_LENGTH = struct.Struct(">H")
_KEY_LENGTH = struct.Struct(">I")


class Op(enum.IntEnum):
    HELLO = 1
    WELCOME = 2
    REFUSED = 3
    GET = 4
    PUT = 5
    RECORD = 6
    ABSENT = 7
    STORED = 8
    FAILED = 9
    CHALLENGE = 10
    PROOF = 11


class Why(enum.IntEnum):
    """Why a replica declined a call (the first byte of FAILED)."""

    DECLINED = 0  # anything else: the reason says
    VERSION_AHEAD = 1  # the record's version is too far ahead of the replica's clock
    NO_SPACE = 2  # the replica's volume is below its free-space reserve
    OVERLOADED = 3  # the replica holds as many bytes of values as it takes (its budget)


# -- the errors of talking to peers: one root, split by whose fault (h11's ProtocolError,
# LocalProtocolError and RemoteProtocolError). Each class says what the edge does.


class TransportError(Exception):
    """Root of every error of talking to other nodes: the replica channel, the internal
    HTTP requests, TLS between nodes. Nothing catches the root itself: each place
    catches the one it can answer."""


class RemoteTransportError(TransportError):
    """The peer, or the link to it, failed or broke the protocol: a call to it fails
    (the coordinator counts that replica as failed), or a connection from it is closed."""


class LocalTransportError(TransportError):
    """This node's own side is wrong: a bug or a setup it cannot run with, never the
    peer's doing."""


class ProtocolError(RemoteTransportError):
    """The peer sent bytes that are not this protocol: the connection must be closed."""


class ChannelMisuse(LocalTransportError):
    """This side tried to send something its role may not send (a bug, not the peer)."""


# Events are made once per frame on the hot path: plain slotted dataclasses, since a
# frozen one's __init__ costs three times as much. Nothing mutates an event once made.


@dataclass(slots=True)
class Hello:
    version: int
    sender: str
    ring: str
    nonce: bytes


@dataclass(slots=True)
class Challenge:
    nonce: bytes
    proof: bytes


@dataclass(slots=True)
class Proof:
    proof: bytes


@dataclass(slots=True)
class Unadmitted:
    """A call whose message was over the receiver's byte budget: its fragments past that
    point were dropped unread, and the call must be answered with a refusal."""

    call_id: int


@dataclass(slots=True)
class Welcome:
    pass


@dataclass(slots=True)
class Refused:
    reason: str


@dataclass(slots=True)
class GetRecord:
    call_id: int
    key: bytes


@dataclass(slots=True)
class PutRecord:
    call_id: int
    key: bytes
    record: Record


@dataclass(slots=True)
class RecordFound:
    call_id: int
    record: Record


@dataclass(slots=True)
class RecordAbsent:
    call_id: int


@dataclass(slots=True)
class Stored:
    call_id: int
    stored: bool


@dataclass(slots=True)
class Failed:
    call_id: int
    why: Why
    reason: str


Handshake = Hello | Challenge | Proof | Welcome | Refused
Request = GetRecord | PutRecord | Unadmitted
Answer = RecordFound | RecordAbsent | Stored | Failed
Event = Handshake | Request | Answer


# -- bodies ----------------------------------------------------------------------------


def encode_body(event: Event) -> tuple[Op, int, bytes, bytes]:
    """op, call id, and the body as its head and the value that follows it (empty but for
    PUT and RECORD), so a large value is sent from where it is."""
    match event:
        case GetRecord(call_id, key):
            return Op.GET, call_id, key, b""
        case PutRecord(call_id, key, record):
            head = _KEY_LENGTH.pack(len(key)) + key + encode_header(record)
            return Op.PUT, call_id, head, record.value
        case RecordFound(call_id, record):
            return Op.RECORD, call_id, encode_header(record), record.value
        case RecordAbsent(call_id):
            return Op.ABSENT, call_id, b"", b""
        case Stored(call_id, stored):
            return Op.STORED, call_id, b"\x01" if stored else b"\x00", b""
        case Failed(call_id, why, reason):
            return Op.FAILED, call_id, bytes((why,)) + reason.encode(), b""
        case Hello(version, sender, ring, nonce):
            fields = b"".join(_field(part) for part in (sender.encode(), ring.encode(), nonce))
            return Op.HELLO, HANDSHAKE_CALL, _VERSION.pack(version) + fields, b""
        case Challenge(nonce, proof):
            return Op.CHALLENGE, HANDSHAKE_CALL, _field(nonce) + proof, b""
        case Proof(proof):
            return Op.PROOF, HANDSHAKE_CALL, proof, b""
        case Welcome():
            return Op.WELCOME, HANDSHAKE_CALL, b"", b""
        case Refused(reason):
            return Op.REFUSED, HANDSHAKE_CALL, reason.encode(), b""
    raise ChannelMisuse(f"not an event: {event!r}")


def _field(data: bytes) -> bytes:
    return _FIELD_LENGTH.pack(len(data)) + data


def _fields(body: bytes, count: int, op: str) -> tuple[list[bytes], int]:
    """The first `count` length-prefixed fields of `body`, and where they end."""
    fields: list[bytes] = []
    offset = 0
    for _ in range(count):
        (length,) = _FIELD_LENGTH.unpack_from(body, offset)
        offset += _FIELD_LENGTH.size
        if offset + length > len(body):
            raise ProtocolError(f"{op} is truncated")
        fields.append(body[offset : offset + length])
        offset += length
    return fields, offset


def _decode_hello(call_id: int, body: bytes) -> Hello:
    (version,) = _VERSION.unpack_from(body)
    if version != PROTOCOL_VERSION:
        # Only the version is read: another version may lay out the rest differently.
        return Hello(version, "", "", b"")
    (sender, ring, nonce), end = _fields(body[_VERSION.size :], 3, "HELLO")
    if _VERSION.size + end != len(body):
        raise ProtocolError("HELLO has trailing bytes")
    return Hello(version, sender.decode(), ring.decode(), nonce)


def _decode_challenge(call_id: int, body: bytes) -> Challenge:
    (nonce,), end = _fields(body, 1, "CHALLENGE")
    return Challenge(nonce, body[end:])


def _decode_put(call_id: int, body: bytes | memoryview) -> PutRecord:
    (key_length,) = _KEY_LENGTH.unpack_from(body)
    start = _KEY_LENGTH.size
    if start + key_length > len(body):
        raise ProtocolError("PUT key is truncated")
    key = bytes(body[start : start + key_length])
    return PutRecord(call_id, key, decode(body[start + key_length :]))


def _decode_stored(call_id: int, body: bytes) -> Stored:
    if body not in (b"\x00", b"\x01"):
        raise ProtocolError("STORED carries one byte, 0 or 1")
    return Stored(call_id, body == b"\x01")


def _why(value: int) -> Why:
    try:
        return Why(value)
    except ValueError:
        return Why.DECLINED  # a later version's reason: still a refusal


def _empty(event: Event, op: Op, body: bytes) -> Event:
    if body:
        raise ProtocolError(f"{op.name} has a body")
    return event


def decode_body(op: Op, call_id: int, body: bytes | memoryview) -> Event:
    """The event `body` of `op` carries; raises ProtocolError (or struct.error,
    UnicodeDecodeError or CorruptRecord, which the codec reports as one) when malformed."""
    return _DECODERS[op](call_id, body)


# PUT and RECORD may get a memoryview (a message assembled from fragments); the others
# always get bytes.
_DECODERS: dict[Op, Callable[[int, Any], Event]] = {
    Op.HELLO: _decode_hello,
    Op.CHALLENGE: _decode_challenge,
    Op.PROOF: lambda call_id, body: Proof(body),
    Op.WELCOME: lambda call_id, body: _empty(Welcome(), Op.WELCOME, body),
    Op.REFUSED: lambda call_id, body: Refused(body.decode()),
    Op.GET: lambda call_id, body: GetRecord(call_id, body),
    Op.PUT: _decode_put,
    Op.RECORD: lambda call_id, body: RecordFound(call_id, decode(body)),
    Op.ABSENT: lambda call_id, body: _empty(RecordAbsent(call_id), Op.ABSENT, body),
    Op.STORED: _decode_stored,
    Op.FAILED: lambda call_id, body: Failed(call_id, _why(body[0]), body[1:].decode()),
}
