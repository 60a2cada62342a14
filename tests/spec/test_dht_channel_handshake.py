"""SPEC.md rule 11.6: before WELCOME a replica channel connection is a stranger's. It may
send the preface and one small HELLO, nothing else; it holds nothing of the byte budget;
it gets a few seconds to say HELLO; and only so many may wait at once."""

from __future__ import annotations

import json
import select
import socket
import struct

import pytest

from dht.conformance.fixtures import ClusterFactory
from dht.conformance.http_client import HOST, request, wait_for
from dht.conformance.launcher import Node
from dht.conformance.rules import rule
from dht.limits import FRAGMENT_BYTES
from dht.transport.messages import Op, RecordAbsent
from dht.transport.protocol import PREFACE

pytestmark = pytest.mark.dht

MiB = 1024 * 1024
BUDGET = 8 * MiB
SECRET = ["--secret", "s3cret"]
_MORE = 0x80


def in_flight(node: Node) -> int:
    return int(json.loads(request("GET", node.url + "/v0/status").body)["bytes_in_flight"])


def stranger(node: Node, opening: bytes = PREFACE) -> socket.socket:
    """A connection that sent `opening` and no HELLO (yet)."""
    sock = socket.create_connection((HOST, node.port), timeout=10)
    sock.sendall(opening)
    return sock


def closed_by_node(sock: socket.socket) -> bool:
    """Whether the node closed `sock` by now (what it sent before is read and dropped)."""
    while select.select([sock], [], [], 0)[0]:
        try:
            if not sock.recv(65536):
                return True
        except ConnectionResetError:
            return True
    return False


def wait_closed(sock: socket.socket, deadline: float = 15.0) -> None:
    wait_for(lambda: closed_by_node(sock), bool, deadline)


def hello_fragments(node: Node, total: int) -> socket.socket:
    """The preface, then never-finished HELLO fragments of 64 KiB under ever new call
    ids, 200 per id, `total` bytes in all or until the node closes the connection."""
    sock = stranger(node)
    fragment = struct.pack(">IBI", FRAGMENT_BYTES, Op.HELLO | _MORE, 0) + bytes(FRAGMENT_BYTES)
    try:
        for index in range(total // FRAGMENT_BYTES):
            call_id = 1 + index // 200
            sock.sendall(fragment[:5] + struct.pack(">I", call_id) + fragment[9:])
    except OSError:  # closed by the node: what it should do
        pass
    return sock


@rule("11.6", "7.7")
def test_hello_fragments_from_a_stranger_close_its_connection_and_hold_no_budget(
    start_cluster: ClusterFactory,
) -> None:
    node = start_cluster(1, [*SECRET, "--max-in-flight-bytes", str(BUDGET)])[0]
    abusive = hello_fragments(node, 2 * BUDGET)
    # Another stranger stays open meanwhile, its HELLO half sent: it holds a few KiB.
    arriving = stranger(node, PREFACE + struct.pack(">IBI", 2000, Op.HELLO, 0) + bytes(100))
    assert in_flight(node) == 0
    assert node.put("large", b"v" * (BUDGET // 2)).status == 201
    wait_closed(abusive)
    assert "HELLO in fragments" in node.log_tail(50)
    assert in_flight(node) == 0
    abusive.close()
    arriving.close()


@pytest.mark.parametrize(
    ("opening", "logged"),
    [
        pytest.param(
            struct.pack(">IBI", 8 * MiB, Op.HELLO, 0), "over the handshake limit", id="huge HELLO"
        ),
        pytest.param(
            struct.pack(">IBI", FRAGMENT_BYTES, Op.PUT, 1), "PUT is not expected", id="PUT first"
        ),
    ],
)
@rule("11.6", "11.2")
def test_a_stranger_is_judged_by_its_first_frame_header_before_its_body_is_read(
    start_cluster: ClusterFactory, opening: bytes, logged: str
) -> None:
    """Only the header is sent: the node must not wait for the body it announces."""
    node = start_cluster(1, SECRET)[0]
    sock = stranger(node, PREFACE + opening)
    wait_closed(sock)
    assert logged in node.log_tail(50)
    assert in_flight(node) == 0
    sock.close()


@rule("11.6")
def test_a_stranger_that_sends_no_hello_is_closed_after_the_handshake_deadline(
    start_cluster: ClusterFactory,
) -> None:
    node = start_cluster(1, SECRET)[0]
    silent = stranger(node)
    wait_closed(silent)
    assert "sent no HELLO within 5 s" in node.log_tail(50)
    assert node.get_local("k") == RecordAbsent(1)  # a true peer is welcome meanwhile
    silent.close()


@rule("11.6")
def test_one_stranger_more_than_may_await_hello_closes_the_oldest(
    start_cluster: ClusterFactory,
) -> None:
    node = start_cluster(1, SECRET)[0]
    crowd = [stranger(node) for _ in range(65)]
    wait_for(lambda: [sock for sock in crowd if closed_by_node(sock)], bool, 15.0)
    assert "64 replica channel connections await their HELLO" in node.log_tail(50)
    assert node.get_local("k") == RecordAbsent(1)  # a true peer still gets in
    for sock in crowd:
        sock.close()
