"""The replica channel's wire format: bytes in, typed events out, and back (sans-I/O).

Nothing here touches a socket or an event loop (the model is python-hyper/h11): a
`ReplicaCodec` takes bytes with `receive_data`, hands out events with `next_event` and
turns an event into frames with `send`. Malformed input from the peer raises
`ProtocolError`; a caller sending what its role may not send raises `ChannelMisuse`.

A connection starts with `PREFACE` from the client. Its first byte, 0x00, can never
start an HTTP request, so the node's one port serves both HTTP and this channel.

Every frame: body length (u32), op (u8, high bit `MORE` = more fragments follow), call
id (u32), body. A message whose body is larger than `FRAGMENT_BYTES` travels as several
frames with the same op and call id, so a large value can be interleaved with small
calls instead of holding them behind it; no frame's body is larger. Call id 0 is the
handshake. The messages and each op's body are `dht.transport.messages`.

Before the handshake is done a peer is nobody: its frames must be the handshake's, in
order (HELLO, then PROOF, to a server; CHALLENGE, then WELCOME, to a client, or REFUSED
instead of either), each in one frame of at most `HANDSHAKE_BYTES`. A frame is judged
by its header (op, call id, length) before any of its body is buffered, so a stranger
can make a receiver hold a few KiB at most, and nothing of the byte budget.
"""

from __future__ import annotations

import enum
import struct
from typing import Protocol

from dht.limits import FRAGMENT_BYTES, HANDSHAKE_BYTES
from dht.model.record import CorruptRecord
from dht.transport.messages import (
    HANDSHAKE_CALL,
    Challenge,
    ChannelMisuse,
    Event,
    Failed,
    GetRecord,
    Hello,
    Op,
    Proof,
    ProtocolError,
    PutRecord,
    RecordAbsent,
    RecordFound,
    Refused,
    Stored,
    Unadmitted,
    Welcome,
    decode_body,
    encode_body,
)

PREFACE = b"\x00dht-replica\r\n"

_FRAME = struct.Struct(">IBI")
_MORE = 0x80


_OPS = {op.value: op for op in Op}


class Budget(Protocol):
    """Bytes a node holds at once (`dht.web.admission.ByteBudget`)."""

    def acquire(self, size: int, held: int = 0) -> bool: ...

    def hold(self, size: int) -> None:
        """Counts `size` bytes held already, which cannot be declined."""

    def release(self, size: int) -> None: ...


class Role(enum.Enum):
    CLIENT = "client"
    SERVER = "server"


# What each role receives, in turn: the handshake's messages, then calls (server) or
# answers (client) for as long as the connection lasts.
_RECEIVES: dict[Role, tuple[frozenset[Op], ...]] = {
    Role.SERVER: (frozenset({Op.HELLO}), frozenset({Op.PROOF}), frozenset({Op.GET, Op.PUT})),
    Role.CLIENT: (
        frozenset({Op.CHALLENGE, Op.REFUSED}),
        frozenset({Op.WELCOME, Op.REFUSED}),
        frozenset({Op.RECORD, Op.ABSENT, Op.STORED, Op.FAILED}),
    ),
}
_SENDS = {
    Role.CLIENT: (Hello, Proof, GetRecord, PutRecord),
    Role.SERVER: (Challenge, Welcome, Refused, RecordFound, RecordAbsent, Stored, Failed),
}
_HANDSHAKE = (Hello, Challenge, Proof, Welcome, Refused)


# One frame as the buffers to write in order: a header and, for a fragment of a large
# value, a slice of that value (a memoryview: the value is never copied to be sent).
Frame = tuple[bytes | memoryview, ...]


class ReplicaCodec:
    """One end of one connection: frames in both directions, and the handshake order.

    `max_message_bytes` bounds one message's body (a value plus `MESSAGE_OVERHEAD`): a
    peer that announces more is refused before its bytes are buffered.
    """

    def __init__(self, role: Role, max_message_bytes: int, budget: Budget | None = None) -> None:
        """`budget`, when given, admits every fragment of a large message before it is
        buffered; the message of each event returned holds `held` bytes of it, which the
        caller releases once done with the event."""
        self.role = role
        self._max_message = max_message_bytes
        self._budget = budget
        self._dropped: set[int] = set()
        self.held = 0
        self._buffer = bytearray()
        self._preface_pending = role is Role.SERVER
        self._stages = _RECEIVES[role]
        self._stage = 0  # the handshake's until the last stage
        self._expected = self._stages[0]
        self._fragments: dict[int, tuple[Op, bytearray]] = {}
        self._hello_sent = False

    # -- receiving ---------------------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        self._buffer += data

    def next_event(self) -> Event | None:
        """The next complete event, or None until more bytes arrive."""
        while True:
            if self._preface_pending:
                if not self._take_preface():
                    return None
            buffer = self._buffer
            if len(buffer) < _FRAME.size:
                return None
            length, op_byte, call_id = _FRAME.unpack_from(buffer)
            op = self._check_header(length, op_byte, call_id)
            more = bool(op_byte & _MORE)
            end = _FRAME.size + length
            if len(buffer) < end:
                return None
            self.held = 0
            if not more and call_id not in self._fragments and call_id not in self._dropped:
                with memoryview(buffer) as view:
                    body: bytes | memoryview = bytes(view[_FRAME.size : end])
                del buffer[:end]
                return self._event(op, call_id, body)
            if call_id not in self._dropped:
                parts = self._fragments_of(op, call_id, length)
            if call_id in self._dropped or not self._admitted(call_id, parts, length):
                del buffer[:end]  # dropped unread, past the budget
                if more:
                    continue
                self._dropped.discard(call_id)
                return Unadmitted(call_id)
            with memoryview(buffer) as view:
                parts += view[_FRAME.size : end]  # straight into the message: one copy
            del buffer[:end]
            if more:
                continue
            del self._fragments[call_id]
            self.held = len(parts) if self._budget is not None else 0
            # A value is decoded in place and copied out once; the rest are small.
            body = memoryview(parts) if op in (Op.PUT, Op.RECORD) else bytes(parts)
            try:
                return self._event(op, call_id, body)
            except ProtocolError:
                # No event carries its bytes: they go back here (found by live fuzzing).
                if self._budget is not None and self.held:
                    self._budget.release(self.held)
                self.held = 0
                raise

    def received(self, call_id: int) -> int:
        """Bytes of call `call_id`'s message received so far, while it arrives in
        fragments (0 before its first fragment, and once it is complete): the progress
        a caller's deadline can be measured against."""
        started = self._fragments.get(call_id)
        return 0 if started is None else len(started[1])

    def _take_preface(self) -> bool:
        seen = bytes(self._buffer[: len(PREFACE)])
        if not PREFACE.startswith(seen):
            raise ProtocolError("connection does not start with the replica channel preface")
        if len(seen) < len(PREFACE):
            return False
        del self._buffer[: len(PREFACE)]
        self._preface_pending = False
        return True

    def _check_header(self, length: int, op_byte: int, call_id: int) -> Op:
        """The frame's op, once its header alone shows it may be read: none of its body
        is buffered before."""
        if length > self._max_message:
            raise ProtocolError(f"frame of {length} bytes is over the message limit")
        op = _OPS.get(op_byte & ~_MORE)  # a dict: Op(value) costs a microsecond per frame
        if op is None:
            raise ProtocolError(f"unknown op {op_byte & ~_MORE}")
        if op not in self._expected:
            raise ProtocolError(f"op {op.name} is not expected here by the {self.role.value}")
        if self._stage == len(self._stages) - 1:
            if length > FRAGMENT_BYTES:
                raise ProtocolError(f"frame of {length} bytes is over a fragment")
            return op
        if op_byte & _MORE:
            raise ProtocolError(f"{op.name} in fragments (call id {call_id})")
        if call_id != HANDSHAKE_CALL:
            raise ProtocolError(f"{op.name} with call id {call_id}")
        if length > HANDSHAKE_BYTES:
            raise ProtocolError(f"{op.name} of {length} bytes is over the handshake limit")
        return op

    def _admitted(self, call_id: int, parts: bytearray, adding: int) -> bool:
        """Whether the budget takes `adding` more bytes of this message; if not, what it
        holds is given back and the message dropped."""
        if self._budget is None or self._budget.acquire(adding, len(parts)):
            return True
        del self._fragments[call_id]
        self._budget.release(len(parts))
        self._dropped.add(call_id)
        return False

    def release_partials(self) -> None:
        """Gives back what messages cut off by the connection's end were holding."""
        partials, self._fragments = self._fragments, {}
        if self._budget is not None:
            for _, parts in partials.values():
                self._budget.release(len(parts))

    def _fragments_of(self, op: Op, call_id: int, adding: int) -> bytearray:
        """The message `call_id`'s fragments so far, checked to take `adding` more."""
        started = self._fragments.get(call_id)
        if started is None:
            started = (op, bytearray())
            self._fragments[call_id] = started
        elif started[0] != op:
            raise ProtocolError(f"call {call_id}: a {op.name} fragment inside a {started[0].name}")
        parts = started[1]
        if len(parts) + adding > self._max_message:
            raise ProtocolError(f"call {call_id}: message over the {self._max_message}-byte limit")
        return parts

    def _event(self, op: Op, call_id: int, body: bytes | memoryview) -> Event:
        try:
            event = decode_body(op, call_id, body)
        except (struct.error, UnicodeDecodeError, CorruptRecord) as exc:
            raise ProtocolError(f"malformed {op.name}: {exc}") from exc
        if self._stage < len(self._stages) - 1:
            self._stage += 1
            self._expected = self._stages[self._stage]
        return event

    # -- sending -----------------------------------------------------------------------

    def send(self, event: Event) -> list[Frame]:
        """The frames that carry `event`: one, or the fragments of a large value."""
        if not isinstance(event, _SENDS[self.role]):
            raise ChannelMisuse(f"a {self.role.value} does not send {type(event).__name__}")
        op, call_id, head, value = encode_body(event)
        if isinstance(event, _HANDSHAKE) and len(head) > HANDSHAKE_BYTES:
            raise ChannelMisuse(f"{op.name} of {len(head)} bytes is over the handshake limit")
        if isinstance(event, Hello):
            if self._hello_sent:
                raise ChannelMisuse("HELLO was sent already")
            self._hello_sent = True
            return [(PREFACE + _FRAME.pack(len(head), op, call_id) + head,)]
        size = len(head) + len(value)
        if size <= FRAGMENT_BYTES:
            return [(_FRAME.pack(size, op, call_id) + head + value,)]
        # The body (head, then value) cut every FRAGMENT_BYTES; a head longer than a
        # fragment (a PUT of the longest key) is cut too.
        view = memoryview(value)
        frames: list[Frame] = []
        for start in range(0, size, FRAGMENT_BYTES):
            end = min(start + FRAGMENT_BYTES, size)
            flags = _MORE if end < size else 0
            header = _FRAME.pack(end - start, op | flags, call_id)
            in_value = view[max(start - len(head), 0) : max(end - len(head), 0)]
            frames.append((header + head[start:end], in_value))
        return frames
