"""SPEC.md rule 11.4: the cluster secret never travels. Every byte two nodes send each
other (replica channel, anti-entropy, the range stream, the fence's polls) passes through
a recording relay, and the secret is in none of them; a captured channel handshake
cannot be replayed on a new connection."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from dht.conformance.http_client import HOST, expect
from dht.conformance.launcher import Cluster
from dht.conformance.peer_tools import peer_hello
from dht.conformance.rules import rule
from dht.model.clock import version_at, wall_clock_ms
from dht.model.record import Record
from dht.testbed.toxiproxy import free_ports
from dht.transport.messages import Challenge, Proof, PutRecord, Refused, Welcome
from dht.transport.proof import Side, proof
from dht.transport.protocol import Frame, ReplicaCodec, Role

pytestmark = pytest.mark.dht

SECRET = "a-secret-that-must-never-be-seen-on-the-wire"


class RecordingRelay:
    """A TCP relay from a loopback port to `target`, keeping every byte both ways."""

    def __init__(self, target: int) -> None:
        self.port = free_ports(1)[0]
        self._target = target
        self.captured = bytearray()
        self._lock = threading.Lock()
        self._listener = socket.create_server((HOST, self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection((HOST, self._target))
            except OSError:  # the node is not up yet: its peer dials again
                client.close()
                continue
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                with self._lock:
                    self.captured += data
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._listener.close()


@rule("11.4")
def test_the_secret_is_in_no_byte_the_nodes_send_each_other(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 2, ["--secret", SECRET, "--anti-entropy-interval", "0.5"])
    relays = [RecordingRelay(node.port) for node in cluster.nodes]
    try:
        for node, other in ((cluster.nodes[0], 1), (cluster.nodes[1], 0)):
            node.extra_args += [
                "--route",
                f"{cluster.urls[other]}=http://{HOST}:{relays[other].port}",
            ]
        cluster.start()
        for i in range(50):
            expect(cluster[i % 2].put(f"key-{i}", b"value", "2/2"), 201)
            expect(cluster[(i + 1) % 2].get(f"key-{i}", "2/2"), 200, b"value")
        records = cluster[0].local_records()  # the range stream, read as a peer would
        assert len(records) == 50
        time.sleep(6.0)  # fence polls (every 5 s) and anti-entropy rounds (0.5 s)
        captured = b"".join(bytes(relay.captured) for relay in relays)
        assert b"dht-replica" in captured  # channel traffic went through the relays
        assert b"X-Dht-Proof" in captured  # so did internal HTTP requests
        assert SECRET.encode() not in captured
    finally:
        for relay in relays:
            relay.close()
        cluster.stop()


@rule("11.1", "11.4")
def test_a_captured_handshake_replayed_on_a_new_connection_is_refused(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 1, ["--secret", SECRET]).start()
    node = cluster[0]
    hello = peer_hello(node)
    try:
        # A true peer's handshake, as an eavesdropper would capture it: HELLO, PROOF.
        with socket.create_connection((HOST, node.port), timeout=10) as sock:
            codec = ReplicaCodec(Role.CLIENT, 1 << 20)
            sock.sendall(frames(codec.send(hello)))
            (challenge,) = read_events(sock, codec, 1)
            assert isinstance(challenge, Challenge), challenge
            mine = proof(
                SECRET, Side.CLIENT, hello.nonce, challenge.nonce, hello.sender, hello.ring
            )
            sock.sendall(frames(codec.send(Proof(mine))))
            assert read_events(sock, codec, 1) == [Welcome()]
        # The same bytes again, on a new connection: the node's nonce is new, so the
        # captured PROOF proves nothing, and a call behind it is never applied.
        with socket.create_connection((HOST, node.port), timeout=10) as sock:
            codec = ReplicaCodec(Role.CLIENT, 1 << 20)
            sock.sendall(frames(codec.send(hello)))
            (again,) = read_events(sock, codec, 1)
            assert isinstance(again, Challenge) and again.nonce != challenge.nonce
            put = PutRecord(1, b"replayed", Record.live(version_at(wall_clock_ms()), b"x"))
            sock.sendall(frames(codec.send(Proof(mine))) + frames(codec.send(put)))
            (answer,) = read_events(sock, codec, 1)
        assert isinstance(answer, Refused) and "secret" in answer.reason, answer
        assert node.get("replayed").status == 404
    finally:
        cluster.stop()


def frames(sent: list[Frame]) -> bytes:
    return b"".join(part for frame in sent for part in frame)


def read_events(sock: socket.socket, codec: ReplicaCodec, count: int) -> list[object]:
    events: list[object] = []
    while len(events) < count:
        while len(events) < count and (event := codec.next_event()) is not None:
            events.append(event)
        if len(events) < count:
            data = sock.recv(65536)
            if not data:
                break
            codec.receive_data(data)
    return events
