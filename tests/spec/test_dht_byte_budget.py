"""SPEC.md rule 7.7: a node bounds the bytes of values it holds; past the bound a PUT
gets 503 with Retry-After at once, before its body is read, and the node serves on."""

from __future__ import annotations

import json
import socket

import pytest

from dht.conformance.fixtures import ClusterFactory
from dht.conformance.http_client import HOST, request, wait_for
from dht.conformance.launcher import Node
from dht.conformance.peer_tools import open_channel, send_frames
from dht.conformance.rules import rule
from dht.model.clock import version_at, wall_clock_ms
from dht.model.record import Record
from dht.transport.messages import Failed, GetRecord, PutRecord, RecordFound, Stored, Welcome, Why
from dht.transport.protocol import ReplicaCodec

pytestmark = pytest.mark.dht

BUDGET = 100_000
MiB = 1024 * 1024


def start_put(node: Node, key: str, length: int, chunked: bool = False) -> socket.socket:
    """A PUT whose head is sent and whose body is not (yet)."""
    sock = socket.create_connection((HOST, node.port), timeout=5)
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {length}"
    sock.sendall(f"PUT /v0/entity?id={key} HTTP/1.1\r\nHost: x\r\n{framing}\r\n\r\n".encode())
    return sock


def answer(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        more = sock.recv(4096)
        if not more:
            break
        data += more
    return data


def in_flight(node: Node) -> int:
    return int(json.loads(request("GET", node.url + "/v0/status").body)["bytes_in_flight"])


@rule("7.7")
def test_a_put_past_the_byte_budget_gets_503_before_its_body_is_sent(
    start_cluster: ClusterFactory,
) -> None:
    node = start_cluster(1, ["--max-in-flight-bytes", str(BUDGET)])[0]
    first = start_put(node, "first", 80_000)
    first.sendall(b"x" * 1000)  # admitted and being read: its 80,000 bytes are held
    assert wait_for(lambda: in_flight(node), lambda held: held > 0) == 80_000

    # The head only, no body at all; over the lean path's 64 KiB, so weighed by its head.
    second = start_put(node, "second", 70_000)
    refused = answer(second)
    assert refused.startswith(b"HTTP/1.1 503"), refused[:80]
    assert b"Retry-After: 1" in refused and b"Overloaded" in refused
    second.close()

    first.sendall(b"x" * 79_000)
    assert answer(first).startswith(b"HTTP/1.1 201")
    first.close()
    assert in_flight(node) == 0
    assert node.put("third", b"x" * 80_000).status == 201  # the budget is back
    status = json.loads(request("GET", node.url + "/v0/status").body)
    assert status["byte_budget_refusals"] == 1


@rule("7.7")
def test_a_chunked_put_is_admitted_chunk_by_chunk_and_refused_once_past_the_budget(
    start_cluster: ClusterFactory,
) -> None:
    node = start_cluster(1, ["--max-in-flight-bytes", str(BUDGET)])[0]
    held = start_put(node, "held", 80_000)
    held.sendall(b"x" * 10)
    chunked = start_put(node, "chunked", 0, chunked=True)
    chunked.sendall(b"%x\r\n%s\r\n" % (30_000, b"y" * 30_000))
    refused = answer(chunked)
    assert refused.startswith(b"HTTP/1.1 503"), refused[:80]
    chunked.close()
    held.close()
    assert node.get("chunked").status == 404
    assert node.put("after", b"v").status == 201


def next_answer(sock: socket.socket, codec: ReplicaCodec) -> object:
    while True:
        event = codec.next_event()
        if event is not None and not isinstance(event, Welcome):
            return event
        if event is None:
            codec.receive_data(sock.recv(65536))


@rule("7.7")
def test_a_replica_write_past_the_byte_budget_is_declined_unread_on_the_channel(
    start_cluster: ClusterFactory,
) -> None:
    """Replica writes (and so hints and repairs) are admitted fragment by fragment: the
    bytes of a message that no longer fits are dropped as they come, not buffered."""
    node = start_cluster(1, ["--max-in-flight-bytes", str(MiB)])[0]
    value = bytes(range(256)) * (2 * MiB // 256)
    first, first_codec = open_channel(node)
    frames = first_codec.send(
        PutRecord(1, b"first", Record.live(version_at(wall_clock_ms()), value))
    )
    half = len(frames) // 2
    send_frames(first, frames[:half])  # half of it held, ~1 MiB
    wait_for(lambda: in_flight(node), lambda held: held >= MiB - 64 * 1024)

    second, second_codec = open_channel(node)
    late = Record.live(version_at(wall_clock_ms()), value)
    send_frames(second, second_codec.send(PutRecord(1, b"second", late)))
    refused = next_answer(second, second_codec)
    assert isinstance(refused, Failed) and refused.why is Why.OVERLOADED, refused
    assert in_flight(node) < MiB + 64 * 1024, "the refused write was buffered"

    send_frames(first, frames[half:])
    assert next_answer(first, first_codec) == Stored(1, True)
    assert wait_for(lambda: in_flight(node), lambda held: held == 0) == 0
    assert node.get("first").body == value
    assert node.get("second").status == 404
    first.close()
    second.close()


@rule("7.7")
def test_large_records_a_replica_sends_are_weighed_against_its_byte_budget(
    start_cluster: ClusterFactory,
) -> None:
    """Many replica reads of a large record at once, from a reader that reads nothing
    yet: the node holds the answers it has not written out within its budget, and
    declines the rest (FAILED, over the byte budget) instead of holding them all."""
    budget, reads = 4 * MiB, 32
    node = start_cluster(1, ["--max-in-flight-bytes", str(budget)])[0]
    value = bytes(range(256)) * (2 * MiB // 256)
    assert node.put("large", value).status == 201
    sock, codec = open_channel(node)
    send_frames(
        sock, [frame for i in range(reads) for frame in codec.send(GetRecord(i + 1, b"large"))]
    )
    status = wait_for(node.status, lambda status: status["byte_budget_refusals"] > 0)
    assert status["bytes_in_flight"] <= budget, status  # the rest went out, or never came

    answers = [next_answer(sock, codec) for _ in range(reads)]
    found = [answer for answer in answers if isinstance(answer, RecordFound)]
    declined = [answer for answer in answers if isinstance(answer, Failed)]
    assert found and declined and len(found) + len(declined) == reads, answers
    assert all(answer.record.value == value for answer in found)
    assert all(answer.why is Why.OVERLOADED for answer in declined), declined
    assert wait_for(lambda: in_flight(node), lambda held: held == 0) == 0
    sock.close()
    assert node.get("large").body == value  # the node serves on
    assert node.put("after", value).status == 201
