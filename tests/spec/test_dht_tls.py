"""SPEC.md rule 11.7: TLS between nodes, both ends checked against the cluster's CA; a
peer without a valid certificate is refused, counted, and shown in /v0/status and
/metrics; clients keep plain HTTP, and may use HTTPS."""

from __future__ import annotations

import socket
import ssl
from pathlib import Path

import pytest

from dht.conformance.http_client import HOST, expect, request, wait_for
from dht.conformance.launcher import Cluster, Node
from dht.conformance.peer_tools import internal_request, peer_hello, records_url
from dht.conformance.rules import rule
from dht.testbed.certificates import LocalCA
from dht.testbed.toxiproxy import free_ports
from dht.transport.messages import Refused
from dht.transport.protocol import ReplicaCodec, Role
from tests.launcher import run_module

pytestmark = pytest.mark.dht


def tls_cluster(root: Path, size: int) -> Cluster:
    authority = LocalCA(root / "tls")
    cluster = Cluster(root, size, ["--secret", "tls-secret"])
    for i, node in enumerate(cluster.nodes):
        node.extra_args += authority.issue(f"node-{i}").flags()
    return cluster.start()


def first_answer_to_hello(node: Node, sock: socket.socket) -> object:
    codec = ReplicaCodec(Role.CLIENT, 1 << 20)
    sock.sendall(b"".join(part for frame in codec.send(peer_hello(node)) for part in frame))
    while (event := codec.next_event()) is None:
        data = sock.recv(65536)
        if not data:
            return None
        codec.receive_data(data)
    return event


@rule("11.7")
def test_nodes_replicate_over_tls_and_clients_keep_plain_http_or_use_https(
    tmp_path: Path,
) -> None:
    cluster = tls_cluster(tmp_path, 3)
    try:
        expect(cluster[0].put("k", b"over tls", "3/3"), 201)
        for node in cluster:
            expect(node.get("k", "3/3"), 200, b"over tls")
            assert node.status()["tls"] == {"enabled": True, "refused": {}, "last_refused": None}
        assert all("k" in node.local_records() for node in cluster)  # as a peer, over TLS
        client = ssl.create_default_context(cafile=str(tmp_path / "tls" / "ca.pem"))
        https = request("GET", f"https://{HOST}:{cluster[1].port}/v0/entity?id=k", tls=client)
        assert (https.status, https.body) == (200, b"over tls")
    finally:
        cluster.stop()


@rule("11.7")
def test_a_peer_without_a_valid_certificate_is_refused_and_counted(tmp_path: Path) -> None:
    cluster = tls_cluster(tmp_path, 1)
    node = cluster[0]
    try:
        # A plain replica channel: refused at its HELLO.
        with socket.create_connection((HOST, node.port), timeout=10) as sock:
            answer = first_answer_to_hello(node, sock)
        assert isinstance(answer, Refused) and "TLS only" in answer.reason, answer
        # TLS, but no certificate of its own: refused at its HELLO too.
        anonymous = ssl.create_default_context(cafile=str(tmp_path / "tls" / "ca.pem"))
        with anonymous.wrap_socket(
            socket.create_connection((HOST, node.port), timeout=10), server_hostname=HOST
        ) as sock:
            answer = first_answer_to_hello(node, sock)
        assert isinstance(answer, Refused) and "certificate" in answer.reason, answer
        # A certificate from another CA: the TLS handshake fails.
        stranger = LocalCA(tmp_path / "other-ca").issue("stranger")
        forged = ssl.create_default_context(cafile=str(tmp_path / "tls" / "ca.pem"))
        forged.load_cert_chain(stranger.cert, stranger.key)
        try:
            with forged.wrap_socket(
                socket.create_connection((HOST, node.port), timeout=10), server_hostname=HOST
            ) as sock:  # TLS 1.3: the server's verdict may come after the client's end
                verdict = first_answer_to_hello(node, sock)
        except (ssl.SSLError, OSError) as exc:
            verdict = exc
        assert verdict is None or isinstance(verdict, ssl.SSLError | OSError), verdict
        # The local range over plain HTTP (with the secret's proof) or without a certificate.
        url = records_url(node.url, "a")
        plain = Node(
            node.port, node.data_dir, node.cluster_url, node.topology, ["--secret", "tls-secret"]
        )
        assert internal_request(plain, "GET", url).status == 403
        https_url = "https" + url.removeprefix("http")
        assert request("GET", https_url, tls=anonymous).status == 403
        assert internal_request(node, "GET", url).status == 200  # a peer's certificate

        status = wait_for(
            lambda: node.status()["tls"], lambda tls: sum(tls["refused"].values()) >= 5
        )
        assert status["enabled"] is True
        assert status["refused"].get("no certificate") == 4, status
        assert status["refused"].get("bad certificate") == 1, status
        assert status["last_refused"]
        metrics = node.metrics()
        assert metrics.value("dht_tls_refused_total", reason="no certificate") == 4
        assert metrics.value("dht_tls_refused_total", reason="bad certificate") == 1
        # Through all of it, the node served.
        expect(node.put("after", b"v"), 201)
    finally:
        cluster.stop()


@rule("11.7")
def test_tls_flags_come_in_threes_and_a_bad_file_stops_the_node_with_one_line(
    tmp_path: Path,
) -> None:
    authority = LocalCA(tmp_path / "tls")
    files = authority.issue("node")
    base = [
        "node",
        "--port",
        "1",
        "--data-dir",
        str(tmp_path / "d"),
        "--cluster",
        "http://127.0.0.1:1",
        "--secret",
        "tls-secret",
    ]
    half = run_module("dht", *base, "--tls-cert", str(files.cert), timeout=10)
    assert half.returncode == 2 and "all three" in half.stderr, half.stderr
    missing = run_module(
        "dht",
        *base,
        "--tls-cert",
        str(tmp_path / "missing.pem"),
        "--tls-key",
        str(files.key),
        "--tls-ca",
        str(files.ca),
        timeout=10,
    )
    assert missing.returncode == 1, missing.stderr
    assert "Traceback" not in missing.stderr and "--tls-cert" in missing.stderr, missing.stderr


@rule("11.7")
def test_tls_without_a_cluster_secret_stops_the_node_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TLS closes the replica channel and the internal routes to machines without a
    certificate, but a membership step (PUT /v0/admin/topology) is guarded by the
    secret's proof alone: without a secret, three plain PUTs would walk the node off its
    own ring. So TLS without a secret is a usage error, as `cluster --tls` never makes."""
    monkeypatch.delenv("DHT_SECRET", raising=False)
    files = LocalCA(tmp_path / "tls").issue("node")
    port = str(free_ports(1)[0])
    node = [
        "node",
        "--port",
        port,
        "--data-dir",
        str(tmp_path / "d"),
        "--cluster",
        f"http://{HOST}:{port}",
        *files.flags(),
    ]
    refused = run_module("dht", *node, timeout=20)
    assert refused.returncode == 2, refused.stderr
    errors = [line for line in refused.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and "--secret" in errors[0], refused.stderr
    assert "Traceback" not in refused.stderr
    assert not (tmp_path / "d").exists()
