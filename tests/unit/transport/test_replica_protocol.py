"""The replica channel's codec (dht.transport.protocol): plain bytes in and out, no sockets."""

from __future__ import annotations

import dataclasses
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dht.limits import FRAGMENT_BYTES, HANDSHAKE_BYTES
from dht.model.record import Record, encode_header
from dht.transport.messages import (
    PROTOCOL_VERSION,
    Challenge,
    ChannelMisuse,
    Event,
    Failed,
    GetRecord,
    Hello,
    Proof,
    ProtocolError,
    PutRecord,
    RecordAbsent,
    RecordFound,
    Refused,
    Stored,
    Unadmitted,
    Welcome,
    Why,
)
from dht.transport.protocol import PREFACE, Frame, ReplicaCodec, Role

LIMIT = 1 << 20
HELLO = Hello(PROTOCOL_VERSION, "http://127.0.0.1:8080", "0123456789abcdef", b"n" * 16)
CHALLENGE = Challenge(b"m" * 16, b"p" * 32)


def pair() -> tuple[ReplicaCodec, ReplicaCodec]:
    """A client and a server codec, past the handshake."""
    client, server = ReplicaCodec(Role.CLIENT, LIMIT), ReplicaCodec(Role.SERVER, LIMIT)
    shake(client, server)
    assert deliver(server.send(Welcome()), client) == [Welcome()]
    return client, server


def shake(client: ReplicaCodec, server: ReplicaCodec) -> None:
    """HELLO, CHALLENGE and PROOF between `client` and `server`: calls may follow."""
    assert deliver(client.send(HELLO), server) == [HELLO]
    assert deliver(ReplicaCodec(Role.SERVER, LIMIT).send(CHALLENGE), client) == [CHALLENGE]
    assert deliver(client.send(Proof(b"q" * 32)), server) == [Proof(b"q" * 32)]


def deliver(
    frames: list[Frame] | list[bytes], to: ReplicaCodec, piece: int | None = None
) -> list[Event]:
    """Feeds the frames' bytes to `to` (all at once, or `piece` bytes at a time)."""
    data = b"".join(b"".join(frame) if isinstance(frame, tuple) else frame for frame in frames)
    events: list[Event] = []
    step = piece or len(data) or 1
    for start in range(0, len(data), step):
        to.receive_data(data[start : start + step])
        while (event := to.next_event()) is not None:
            events.append(event)
    return events


records = st.builds(
    Record,
    version=st.integers(min_value=0, max_value=(1 << 64) - 1),
    tombstone=st.just(False),
    value=st.binary(max_size=300),
) | st.builds(Record.deleted, st.integers(min_value=0, max_value=(1 << 64) - 1))
call_ids = st.integers(min_value=1, max_value=(1 << 32) - 1)
keys = st.binary(min_size=1, max_size=100)
requests = st.one_of(
    st.builds(GetRecord, call_ids, keys), st.builds(PutRecord, call_ids, keys, records)
)
answers = st.one_of(
    st.builds(RecordFound, call_ids, records),
    st.builds(RecordAbsent, call_ids),
    st.builds(Stored, call_ids, st.booleans()),
    st.builds(Failed, call_ids, st.sampled_from(Why), st.text(max_size=100)),
)


@given(st.lists(requests, max_size=20), st.integers(min_value=1, max_value=64))
def test_requests_round_trip_in_order_however_the_bytes_are_cut(
    sent: list[GetRecord | PutRecord], piece: int
) -> None:
    client, server = pair()
    frames = [frame for request in sent for frame in client.send(request)]
    assert deliver(frames, server, piece) == sent


@given(st.lists(answers, max_size=20), st.integers(min_value=1, max_value=64))
def test_answers_round_trip_in_order_however_the_bytes_are_cut(
    sent: list[RecordFound | RecordAbsent | Stored | Failed], piece: int
) -> None:
    client, server = pair()
    frames = [frame for answer in sent for frame in server.send(answer)]
    assert deliver(frames, client, piece) == sent


def test_a_large_value_travels_in_fragments_and_small_calls_can_pass_between_them() -> None:
    client, server = pair()
    big = PutRecord(1, b"big", Record.live(7, bytes(range(256)) * 1024))  # 256 KiB
    fragments = client.send(big)
    assert len(fragments) == 5
    assert all(sum(len(part) for part in frame) <= FRAGMENT_BYTES + 9 for frame in fragments)
    assert fragments[1][1].obj is big.record.value  # the value is sent, never copied
    small = client.send(GetRecord(2, b"small"))
    interleaved = [fragments[0], *small, *fragments[1:]]
    assert deliver(interleaved, server) == [GetRecord(2, b"small"), big]


def test_a_client_counts_the_bytes_of_an_answer_while_its_fragments_arrive() -> None:
    """What a call's deadline is measured against: a large record's bytes so far."""
    client, server = pair()
    found = RecordFound(3, Record.live(7, bytes(range(256)) * 1024))  # 256 KiB
    fragments = server.send(found)
    assert client.received(3) == 0
    for count, fragment in enumerate(fragments[:-1], start=1):
        assert deliver([fragment], client) == []
        assert client.received(3) == count * FRAGMENT_BYTES
        assert client.received(4) == 0  # another call's answer has not begun
    assert deliver(fragments[-1:], client) == [found]
    assert client.received(3) == 0  # complete: no longer arriving


def test_a_message_over_the_limit_is_refused_before_it_is_buffered() -> None:
    client = ReplicaCodec(Role.CLIENT, LIMIT)
    server = ReplicaCodec(Role.SERVER, 1000)
    shake(client, server)
    with pytest.raises(ProtocolError, match="over the message limit"):
        deliver(client.send(PutRecord(1, b"k", Record.live(1, b"x" * 2000))), server)
    fragmented = ReplicaCodec(Role.SERVER, 100_000)
    shake(ReplicaCodec(Role.CLIENT, LIMIT), fragmented)
    with pytest.raises(ProtocolError, match="over the 100000-byte limit"):
        deliver(client.send(PutRecord(2, b"k", Record.live(1, b"x" * 200_000))), fragmented)


def test_a_server_expects_the_preface_then_hello_first() -> None:
    server = ReplicaCodec(Role.SERVER, LIMIT)
    with pytest.raises(ProtocolError, match="preface"):
        deliver([b"GET / HTTP/1.1\r\n\r\n"], server)
    server = ReplicaCodec(Role.SERVER, LIMIT)
    client = ReplicaCodec(Role.CLIENT, LIMIT)
    with pytest.raises(ProtocolError, match="GET is not expected"):
        deliver([PREFACE, *client.send(GetRecord(1, b"k"))], server)


def test_a_client_expects_challenge_or_refused_first_then_welcome_or_refused() -> None:
    client = ReplicaCodec(Role.CLIENT, LIMIT)
    server = ReplicaCodec(Role.SERVER, LIMIT)
    with pytest.raises(ProtocolError, match="STORED is not expected"):
        deliver(server.send(Stored(1, True)), client)
    client = ReplicaCodec(Role.CLIENT, LIMIT)
    with pytest.raises(ProtocolError, match="WELCOME is not expected"):
        deliver(server.send(Welcome()), client)
    client = ReplicaCodec(Role.CLIENT, LIMIT)
    assert deliver(server.send(Refused("wrong ring")), client) == [Refused("wrong ring")]
    client = ReplicaCodec(Role.CLIENT, LIMIT)
    assert deliver(server.send(CHALLENGE), client) == [CHALLENGE]
    with pytest.raises(ProtocolError, match="CHALLENGE is not expected"):
        deliver(server.send(CHALLENGE), client)
    client = ReplicaCodec(Role.CLIENT, LIMIT)
    deliver(server.send(CHALLENGE), client)
    assert deliver(server.send(Refused("wrong secret")), client) == [Refused("wrong secret")]


def test_a_server_takes_no_call_between_hello_and_proof() -> None:
    client, server = ReplicaCodec(Role.CLIENT, LIMIT), ReplicaCodec(Role.SERVER, LIMIT)
    deliver(client.send(HELLO), server)
    with pytest.raises(ProtocolError, match="GET is not expected"):
        deliver([struct.pack(">IBI", 1, 4, 1) + b"k"], server)


def test_a_hello_of_another_version_is_read_only_as_far_as_its_version() -> None:
    server = ReplicaCodec(Role.SERVER, LIMIT)
    body = struct.pack(">H", 3) + b"\xff anything a later version may say"
    frame = struct.pack(">IBI", len(body), 1, 0) + body
    assert deliver([PREFACE, frame], server) == [Hello(3, "", "", b"")]


@pytest.mark.parametrize(
    ("name", "frame"),
    [
        ("unknown op", struct.pack(">IBI", 0, 42, 1)),
        (
            "truncated record",
            struct.pack(">IBI", 7, 5, 1) + struct.pack(">I", 1) + b"k" + b"\x01\x00",
        ),
        ("key past the body", struct.pack(">IBI", 5, 5, 1) + struct.pack(">I", 99) + b"k"),
        (
            "fragment of another op",
            struct.pack(">IBI", 1, 0x84, 3) + b"k" + struct.pack(">IBI", 1, 5, 3) + b"k",
        ),
    ],
)
def test_malformed_frames_raise_protocol_error(name: str, frame: bytes) -> None:
    _, server = pair()
    with pytest.raises(ProtocolError):
        deliver([frame], server)


def test_sending_what_the_role_may_not_send_is_misuse() -> None:
    client, server = pair()
    with pytest.raises(ChannelMisuse):
        client.send(Stored(1, True))
    with pytest.raises(ChannelMisuse):
        server.send(GetRecord(1, b"k"))
    with pytest.raises(ChannelMisuse):
        client.send(HELLO)  # the handshake happened already


@settings(max_examples=1000)
@given(st.binary(max_size=200), st.sampled_from([Role.CLIENT, Role.SERVER]))
def test_arbitrary_bytes_give_events_or_protocol_error_and_nothing_else(
    data: bytes, role: Role
) -> None:
    codec = ReplicaCodec(role, LIMIT)
    if role is Role.SERVER:
        data = PREFACE + data
    codec.receive_data(data)
    try:
        while codec.next_event() is not None:
            pass
    except ProtocolError:
        pass


@settings(max_examples=500)
@given(st.lists(requests, min_size=1, max_size=5), st.data())
def test_corrupting_any_byte_of_a_valid_stream_never_raises_anything_but_protocol_error(
    sent: list[GetRecord | PutRecord], data: st.DataObject
) -> None:
    client, server = pair()
    frames = [frame for request in sent for frame in client.send(request)]
    stream = bytearray(b"".join(part for frame in frames for part in frame))
    position = data.draw(st.integers(min_value=0, max_value=len(stream) - 1))
    stream[position] = data.draw(st.integers(min_value=0, max_value=255))
    try:
        deliver([bytes(stream)], server)
    except ProtocolError:
        pass


def test_a_refusal_kind_from_a_later_version_reads_as_a_plain_refusal() -> None:
    client, _ = pair()
    body = bytes((200,)) + b"a reason this version has no name for"
    frame = struct.pack(">IBI", len(body), 9, 7) + body
    assert deliver([frame], client) == [
        Failed(7, Why.DECLINED, "a reason this version has no name for")
    ]


class FakeBudget:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_flight = 0

    def acquire(self, size: int, held: int = 0) -> bool:
        if self.in_flight + size > self.limit and self.in_flight > held:
            return False
        self.in_flight += size
        return True

    def hold(self, size: int) -> None:
        self.in_flight += size

    def release(self, size: int) -> None:
        self.in_flight -= size


def test_a_budget_admits_fragments_and_the_caller_releases_what_the_event_held() -> None:
    budget = FakeBudget(1 << 30)
    client = ReplicaCodec(Role.CLIENT, LIMIT)
    server = ReplicaCodec(Role.SERVER, LIMIT, budget)
    shake(client, server)
    big = PutRecord(1, b"k", Record.live(1, b"v" * 200_000))
    assert deliver(client.send(big), server) == [big]
    assert server.held == budget.in_flight > 200_000
    assert deliver(client.send(GetRecord(2, b"k")), server) == [GetRecord(2, b"k")]
    assert server.held == 0  # small messages are not weighed


def test_a_message_past_the_budget_is_dropped_unread_and_answered_unadmitted() -> None:
    budget = FakeBudget(100_000)
    budget.in_flight = 90_000  # another message holds most of it
    client = ReplicaCodec(Role.CLIENT, LIMIT)
    server = ReplicaCodec(Role.SERVER, LIMIT, budget)
    shake(client, server)
    events = deliver(client.send(PutRecord(7, b"k", Record.live(1, b"v" * 200_000))), server)
    assert events == [Unadmitted(7)]
    assert budget.in_flight == 90_000  # nothing of it is held
    assert deliver(client.send(GetRecord(8, b"k")), server) == [GetRecord(8, b"k")]


def test_partials_cut_off_by_the_connection_end_give_their_bytes_back() -> None:
    budget = FakeBudget(1 << 30)
    client = ReplicaCodec(Role.CLIENT, LIMIT)
    server = ReplicaCodec(Role.SERVER, LIMIT, budget)
    shake(client, server)
    frames = client.send(PutRecord(1, b"k", Record.live(1, b"v" * 300_000)))
    assert deliver(frames[:2], server) == []
    assert budget.in_flight > 0
    server.release_partials()
    assert budget.in_flight == 0


def test_a_malformed_message_in_fragments_gives_its_bytes_back() -> None:
    """Found by tests/fuzz/test_replica_channel_live.py: a message assembled from
    fragments whose body does not decode raises ProtocolError once `held` is set; no
    event carries its bytes (nor are they partials the connection's end gives back),
    so the codec gives them back itself."""
    budget = FakeBudget(1 << 30)
    client = ReplicaCodec(Role.CLIENT, LIMIT)
    server = ReplicaCodec(Role.SERVER, LIMIT, budget)
    shake(client, server)
    record = Record.live(1, b"v" * 100_000)
    data = b"".join(b"".join(frame) for frame in client.send(PutRecord(1, b"k", record)))
    at = data.index(encode_header(record))  # the record's format byte
    with pytest.raises(ProtocolError, match="unknown record format"):
        deliver([data[:at] + b"\x7f" + data[at + 1 :]], server)
    server.release_partials()  # what the connection's end does
    assert budget.in_flight == 0


# -- before the handshake: one small HELLO, judged from its frame header ----------------


def header(length: int, op: int, call_id: int) -> bytes:
    return struct.pack(">IBI", length, op, call_id)


@pytest.mark.parametrize(
    ("opening", "reason"),
    [
        pytest.param(header(4000, 5, 1), "PUT is not expected", id="a call before HELLO"),
        pytest.param(header(HANDSHAKE_BYTES + 1, 1, 0), "handshake", id="a HELLO too long"),
        pytest.param(header(100, 0x81, 0), "fragment", id="a HELLO in fragments"),
        pytest.param(header(100, 0x81, 7), "fragment", id="HELLO fragments of another call"),
        pytest.param(header(100, 1, 5), "call id 5", id="a HELLO with a call id"),
    ],
)
def test_before_hello_a_server_judges_a_frame_by_its_header_before_buffering_its_body(
    opening: bytes, reason: str
) -> None:
    budget = FakeBudget(1 << 30)
    server = ReplicaCodec(Role.SERVER, LIMIT, budget)
    server.receive_data(PREFACE + opening)  # the header alone: none of the body came
    with pytest.raises(ProtocolError, match=reason):
        server.next_event()
    assert budget.in_flight == 0


def test_a_client_judges_the_answer_to_its_hello_by_its_header_too() -> None:
    client = ReplicaCodec(Role.CLIENT, LIMIT)
    client.receive_data(header(HANDSHAKE_BYTES + 1, 3, 0))  # a REFUSED too long to be one
    with pytest.raises(ProtocolError, match="handshake"):
        client.next_event()


def test_the_largest_hello_a_node_sends_fits_the_handshake_limit() -> None:
    ring = ",".join(["f" * 16] * 16)  # a ring identity per list, more than a change has
    hello = Hello(PROTOCOL_VERSION, "http://" + "h" * 253 + ":65535", ring, b"n" * 16)
    client, server = ReplicaCodec(Role.CLIENT, LIMIT), ReplicaCodec(Role.SERVER, LIMIT)
    assert deliver(client.send(hello), server) == [hello]
    with pytest.raises(ChannelMisuse, match="handshake"):
        ReplicaCodec(Role.CLIENT, LIMIT).send(dataclasses.replace(hello, ring="r" * 4096))


# -- after it: no frame over a fragment ------------------------------------------------


def test_a_frame_over_a_fragment_is_refused_from_its_header() -> None:
    _, server = pair()
    server.receive_data(header(FRAGMENT_BYTES + 1, 5, 1))
    with pytest.raises(ProtocolError, match="fragment"):
        server.next_event()


def test_a_put_with_a_key_longer_than_a_fragment_still_travels_in_fragments() -> None:
    client, server = pair()
    put = PutRecord(1, b"k" * (FRAGMENT_BYTES + 5000), Record.live(3, b"v" * 100_000))
    frames = client.send(put)
    assert all(sum(len(part) for part in frame) <= FRAGMENT_BYTES + 9 for frame in frames)
    assert deliver(frames, server) == [put]
