"""SPEC.md rules 11.4, 11.6 and 11.7: what a stranger can make a node hold or do through
internal HTTP and TLS before it has proven anything: no body read before the proof's
header passes, no proof taken by a node it was not made for, no silent TLS connection
kept."""

from __future__ import annotations

import socket
import ssl
import time
from pathlib import Path

import pytest

from dht.conformance.fixtures import ClusterFactory
from dht.conformance.http_client import HOST, request
from dht.conformance.launcher import Cluster
from dht.conformance.peer_tools import proof_header
from dht.conformance.rules import rule
from dht.limits import HANDSHAKE_DEADLINE
from dht.testbed.certificates import LocalCA

pytestmark = pytest.mark.dht

SECRET = "s3cret"
BODY_BYTES = 8 * 1024 * 1024  # announced, never sent


def answer_to_headers_only(port: int, head: bytes, within: float) -> bytes:
    """What the node answers within `within` seconds to a request whose headers announce
    a large body that never comes (b"" if nothing)."""
    with socket.create_connection((HOST, port), timeout=within) as sock:
        sock.sendall(head)
        try:
            return sock.recv(4096)
        except TimeoutError:
            return b""


@rule("11.4")
@pytest.mark.parametrize(
    "method,path", [("POST", "/internal/v0/anti-entropy"), ("PUT", "/v0/admin/topology")]
)
def test_an_internal_request_without_a_proof_is_refused_before_its_body_is_read(
    start_cluster: ClusterFactory, method: str, path: str
) -> None:
    node = start_cluster(1, ["--secret", SECRET])[0]
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {BODY_BYTES}\r\n\r\n"
    ).encode()
    answer = answer_to_headers_only(node.port, head, within=3.0)
    assert answer.startswith(b"HTTP/1.1 403"), answer[:200]


@rule("11.4")
def test_a_request_proven_for_one_node_is_refused_by_another(
    start_cluster: ClusterFactory,
) -> None:
    cluster = start_cluster(2, ["--secret", SECRET])
    first, second = cluster
    target = "/internal/v0/records?start=a"
    # The header as a peer sends it to `first` (made here with the secret: what a
    # listener on the link between them would capture).
    captured = proof_header(SECRET, "GET", f"{first.url}{target}")
    assert request("GET", f"{first.url}{target}", headers=captured).status == 200
    replayed = request("GET", f"{second.url}{target}", headers=captured)
    assert replayed.status == 403, (replayed.status, replayed.text[:200])


@rule("11.6", "11.7")
def test_a_tls_connection_that_says_nothing_after_its_handshake_is_closed(
    tmp_path: Path,
) -> None:
    authority = LocalCA(tmp_path / "tls")
    cluster = Cluster(tmp_path, 1, ["--secret", SECRET])
    cluster[0].extra_args += authority.issue("node-0").flags()
    cluster.start()
    try:
        node = cluster[0]
        anonymous = ssl.create_default_context(cafile=str(tmp_path / "tls" / "ca.pem"))
        raw = socket.create_connection((HOST, node.port), timeout=10)
        with anonymous.wrap_socket(raw, server_hostname=HOST) as sock:  # handshake done
            sock.settimeout(HANDSHAKE_DEADLINE + 3.0)
            started = time.monotonic()
            try:
                closed = sock.recv(1) == b""
            except TimeoutError:
                closed = False
            except (ssl.SSLError, OSError):
                closed = True
            assert closed, f"still open {time.monotonic() - started:.1f} s after its handshake"
    finally:
        cluster.stop()
