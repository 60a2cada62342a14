"""Speaking to a node as its peers do: a replica channel with its handshake, one call
on it, internal HTTP requests with the cluster secret's proof, and the node's own
records read from its internal range stream. What they need of a node is `PeerSide`
(`dht.conformance.launcher.Node` is one)."""

from __future__ import annotations

import os
import socket
import ssl
import time
import urllib.parse
from collections.abc import Callable
from typing import Protocol

from dht.config import NodeConfig
from dht.conformance.http_client import HOST, Response, request
from dht.model.record import Record, decode
from dht.model.ring import ring_identity
from dht.transport.messages import (
    PROTOCOL_VERSION,
    Answer,
    Challenge,
    Failed,
    Hello,
    Proof,
    RecordAbsent,
    RecordFound,
    Refused,
    Request,
    Stored,
)
from dht.transport.proof import Side, new_nonce, proof, request_proof
from dht.transport.protocol import Frame, ReplicaCodec, Role
from dht.transport.wire import FRAME_LENGTH, PROOF_HEADER, RECORDS_PATH


class PeerSide(Protocol):
    """A node as its peers reach it."""

    @property
    def url(self) -> str: ...

    @property
    def port(self) -> int: ...

    @property
    def cluster_url(self) -> str: ...

    @property
    def topology(self) -> list[str]: ...

    @property
    def peer_tls(self) -> ssl.SSLContext | None: ...

    def flag(self, name: str) -> str | None: ...


# -- reading a node's own records (dht's internal API) -----------------------------------


def records_url(base: str, start: str, end: str | None = None) -> str:
    query = {"start": start} | ({} if end is None else {"end": end})
    return f"{base}{RECORDS_PATH}?{urllib.parse.urlencode(query, quote_via=urllib.parse.quote)}"


def cluster_secret(node: PeerSide) -> str | None:
    """The secret the node was started with (`--secret`, else $DHT_SECRET), if any."""
    return node.flag("--secret") or os.environ.get("DHT_SECRET")


def peer_hello(node: PeerSide) -> Hello:
    """The HELLO a peer of `node` sends: its ring identity, and a fresh nonce."""
    vnodes = int(node.flag("--vnodes") or NodeConfig.vnodes)
    ring = ring_identity(node.topology, vnodes)
    return Hello(PROTOCOL_VERSION, node.cluster_url, ring, new_nonce())


def open_channel(
    node: PeerSide, hello: Hello | None = None, secret: str | None = None, timeout: float = 10.0
) -> tuple[socket.socket, ReplicaCodec]:
    """A replica channel to `node` (blocking): a socket whose handshake is done up to
    this end's PROOF (calls may follow), and the client codec to read and write it with.
    `hello` defaults to a true peer's, `secret` to the node's own ("" for none). Raises
    ChannelRefused if the node refuses the HELLO."""
    sock, codec, refused = _handshake(node, hello, secret, timeout)
    if refused is not None:
        sock.close()
        raise ChannelRefused(refused.reason)
    return sock, codec


class ChannelRefused(Exception):
    """The node answered the HELLO with REFUSED."""


def _handshake(
    node: PeerSide, hello: Hello | None, secret: str | None, timeout: float
) -> tuple[socket.socket, ReplicaCodec, Refused | None]:
    """Sends HELLO, reads the CHALLENGE and answers it with this end's PROOF (the
    node's own proof is not checked: a test may offer a wrong secret on purpose)."""
    hello = hello or peer_hello(node)
    codec = ReplicaCodec(Role.CLIENT, 1 << 30)
    sock = socket.create_connection((HOST, node.port), timeout=timeout)
    if (tls := node.peer_tls) is not None:
        sock = tls.wrap_socket(sock, server_hostname=HOST)
    send_frames(sock, codec.send(hello))
    while (event := codec.next_event()) is None:
        data = sock.recv(65536)
        if not data:
            sock.close()
            raise ConnectionError(f"{node.url} closed the replica channel before its CHALLENGE")
        codec.receive_data(data)
    if isinstance(event, Refused):
        return sock, codec, event
    assert isinstance(event, Challenge), event
    key = cluster_secret(node) if secret is None else secret
    ours = proof(key, Side.CLIENT, hello.nonce, event.nonce, hello.sender, hello.ring)
    send_frames(sock, codec.send(Proof(ours)))
    return sock, codec, None


def send_frames(sock: socket.socket, frames: list[Frame]) -> None:
    sock.sendall(b"".join(part for frame in frames for part in frame))


def replica_call(
    node: PeerSide,
    request_for: Callable[[int], Request],
    hello: Hello | None = None,
    secret: str | None = None,
    timeout: float = 10.0,
) -> Answer | Refused:
    """One call on a fresh replica channel to `node` (blocking): the answer, or Refused
    if the node would not open the channel. `hello` defaults to a true peer's, `secret`
    to the node's own ("" for none)."""
    sock, codec, refused = _handshake(node, hello, secret, timeout)
    if refused is not None:
        sock.close()
        return refused
    with sock:
        send_frames(sock, codec.send(request_for(1)))
        while True:
            while (event := codec.next_event()) is not None:
                if isinstance(event, Refused | RecordFound | RecordAbsent | Stored | Failed):
                    return event
            data = sock.recv(65536)
            if not data:
                raise ConnectionError(f"{node.url} closed the replica channel without an answer")
            codec.receive_data(data)


def internal_request(node: PeerSide, method: str, url: str, body: bytes | None = None) -> Response:
    """One HTTP request to an internal path, proving the node's cluster secret if it has
    one."""
    secret = cluster_secret(node)
    headers = {} if secret is None else proof_header(secret, method, url, body, node.cluster_url)
    tls = node.peer_tls
    if tls is not None:
        url = "https" + url.removeprefix("http")
    return request(method, url, body, headers=headers, tls=tls)


def proof_header(
    secret: str, method: str, url: str, body: bytes | None = None, receiver: str | None = None
) -> dict[str, str]:
    """The header that proves `secret` for one internal request to `url`, made for the
    node `receiver` (its --cluster URL; by default the one `url` leads to)."""
    parts = urllib.parse.urlsplit(url)
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    to = receiver or f"http://{parts.hostname}:{parts.port}"
    made_ms = int(time.time() * 1000)
    header = request_proof(secret, to, method, target, made_ms, new_nonce(), body or b"")
    return {PROOF_HEADER: header}


def decode_frames(body: bytes) -> dict[str, Record]:
    """The internal range stream (dht.transport.wire): frames of key length (4 bytes big-endian),
    key, record length, record. Raises ValueError if the stream is cut inside a frame."""
    records: dict[str, Record] = {}
    position = 0

    def take(size: int) -> bytes:
        nonlocal position
        if position + size > len(body):
            raise ValueError(f"range stream cut short at byte {position} of {len(body)}")
        position += size
        return body[position - size : position]

    while position < len(body):
        (key_length,) = FRAME_LENGTH.unpack(take(FRAME_LENGTH.size))
        key = take(key_length)
        (data_length,) = FRAME_LENGTH.unpack(take(FRAME_LENGTH.size))
        records[key.decode()] = decode(take(data_length))
    return records
