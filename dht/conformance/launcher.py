"""Starts real node processes for the tests: one launcher for spec and chaos tests.

The node command is a template, so the same spec tests can check another implementation
of the API: set DHT_NODE_COMMAND to a command line with the placeholders {port},
{data_dir}, {cluster} (comma-separated URLs) and {self} (this node's URL in the cluster
list), for example

    DHT_NODE_COMMAND='java -jar my.jar --port {port} --dir {data_dir} --topology {cluster}'

Ports are chosen free at run time on 127.0.0.1; every process is stopped at teardown.
"""

from __future__ import annotations

import http.client
import json
import os
import shlex
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from prometheus_client.parser import text_string_to_metric_families

from dht.config import NodeConfig
from dht.model.record import Record, decode
from dht.model.ring import ring_identity
from dht.replication.messages import (
    PROTOCOL_VERSION,
    Answer,
    Challenge,
    Failed,
    GetRecord,
    Hello,
    Proof,
    PutRecord,
    RecordAbsent,
    RecordFound,
    Refused,
    Request,
    Stored,
)
from dht.replication.proof import Side, new_nonce, proof, request_proof
from dht.replication.protocol import Frame, ReplicaCodec, Role
from dht.replication.wire import FRAME_LENGTH, PROOF_HEADER, RECORDS_PATH
from dht.testbed.certificates import LocalCA
from dht.testbed.namespaces import die_with_parent
from dht.testbed.node_template import node_argv
from dht.testbed.toxiproxy import free_ports

T = TypeVar("T")

HOST = "127.0.0.1"
# How long a node may take to answer /v0/status after its start (the conformance kit's
# --start-timeout); rule 1.1's own one second is checked by its test.
READY_DEADLINE = float(os.environ.get("DHT_START_TIMEOUT", "15"))
STOP_DEADLINE = 10.0
# The folder a node command runs in: the kit sets it to where the user started the kit,
# so a relative path in the command means what it meant there.
NODE_CWD_ENV = "DHT_NODE_CWD"
# "1": every Cluster's nodes talk TLS to each other, with certificates from a throwaway CA
# in the cluster's folder (the suite runs over TLS; dht's own flags).
TLS_ENV = "DHT_TLS"
# The smallest non-empty key: a range from it takes every key (a start must not be empty).
LOWEST_KEY = "\x00"
DEFAULT_COMMAND = (
    f"{shlex.quote(sys.executable)} -m dht node --port {{port}} --data-dir {{data_dir}} "
    "--cluster {cluster} --self {self}"
)


def node_command_template() -> str:
    return os.environ.get("DHT_NODE_COMMAND", DEFAULT_COMMAND)


def testing_dht_itself() -> bool:
    """True unless DHT_NODE_COMMAND points the tests at another implementation."""
    return node_command_template() == DEFAULT_COMMAND


def dht_tuning(*flags: str) -> list[str]:
    """Flags a test passes to dht's nodes only: to make it steadier (a longer --timeout,
    patient breakers) or to bring a limit within its reach (a lower --max-in-flight).
    Another implementation, which has flags of its own, is started without them; a
    rule never depends on them."""
    return list(flags) if testing_dht_itself() else []


def free_port() -> int:
    return free_ports(1)[0]


def excerpt(data: bytes, limit: int = 60) -> str:
    """Bytes as a report shows them: their start, and their size when cut."""
    shown = repr(data[:limit])
    return shown if len(data) <= limit else f"{shown}... ({len(data)} bytes)"


@dataclass
class Response:
    status: int
    body: bytes
    headers: dict[str, str]
    seconds: float = 0.0  # from sending the request to the end of the answer

    def __repr__(self) -> str:
        return f"<{self.status} {excerpt(self.body)} after {self.seconds * 1000:.0f} ms>"

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def header(self, name: str) -> str | None:
        """A header by its case-insensitive name."""
        return next((v for k, v in self.headers.items() if k.lower() == name.lower()), None)


def request(
    method: str,
    url: str,
    body: bytes | None = None,
    timeout: float = 10.0,
    headers: dict[str, str] | None = None,
    tls: ssl.SSLContext | None = None,
) -> Response:
    """One HTTP request on a fresh connection (HTTPS with `tls`); raises OSError if
    nothing answers."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or HOST
    connection = (
        http.client.HTTPSConnection(host, parts.port, timeout=timeout, context=tls)
        if tls is not None
        else http.client.HTTPConnection(host, parts.port, timeout=timeout)
    )
    started = time.monotonic()
    try:
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        connection.request(method, target, body=body, headers=headers or {})
        response = connection.getresponse()
        body = response.read()
        elapsed = time.monotonic() - started
        return Response(response.status, body, dict(response.getheaders()), elapsed)
    finally:
        connection.close()


def expect(
    response: Response | RawResponse, status: int, body: bytes | None = None, context: str = ""
) -> None:
    """Asserts an answer's status (and body), failing with what was expected and what
    came back, as the conformance report shows it: `expected 200 b'v', got <404 ...>`."""
    if response.status == status and (body is None or response.body == body):
        return
    wanted = f"{status}" if body is None else f"{status} {excerpt(body)}"
    raise AssertionError(f"{context + ': ' if context else ''}expected {wanted}, got {response!r}")


def wait_for(probe: Callable[[], T], done: Callable[[T], bool], deadline: float = 5.0) -> T:
    """Calls `probe` until `done` holds for its result and returns that result; raises
    TimeoutError naming the last result when `deadline` seconds pass first."""
    started = time.monotonic()
    while True:
        result = probe()
        if done(result):
            return result
        if time.monotonic() - started > deadline:
            raise TimeoutError(f"still {result!r} after {deadline}s")
        time.sleep(0.02)


def status_code(base: str, timeout: float = 1.0) -> int | None:
    """What `GET /v0/status` of the node at `base` answers, or None when nothing does."""
    try:
        return request("GET", base + "/v0/status", timeout=timeout).status
    except OSError:
        return None


def entity_url(base: str, key: str, replicas: str | None = None) -> str:
    query = {"id": key}
    if replicas is not None:
        query["replicas"] = replicas
    return f"{base}/v0/entity?{urllib.parse.urlencode(query, quote_via=urllib.parse.quote)}"


def entities_url(base: str, start: str, end: str | None = None) -> str:
    query = {"start": start} | ({} if end is None else {"end": end})
    return f"{base}/v0/entities?{urllib.parse.urlencode(query, quote_via=urllib.parse.quote)}"


@dataclass
class RawResponse:
    """A response as it came off the socket: `body` keeps its transfer framing, which
    http.client would strip, so a test can see how a stream was cut into chunks."""

    status: int
    headers: dict[str, str]  # names lower-cased
    body: bytes

    @property
    def chunks(self) -> list[bytes]:
        """The chunks of a `Transfer-Encoding: chunked` body, in order, without the final
        empty one; raises ValueError if the framing is broken or the body is cut short."""
        chunks: list[bytes] = []
        position = 0
        while True:
            line_end = self.body.find(b"\r\n", position)
            if line_end < 0:
                raise ValueError(f"no chunk-size line at byte {position}")
            size = int(self.body[position:line_end].split(b";")[0], 16)
            start, end = line_end + 2, line_end + 2 + size
            if size == 0:
                if self.body[start:] != b"\r\n":
                    raise ValueError(f"bytes after the last chunk: {self.body[start:]!r}")
                return chunks
            if len(self.body) < end + 2 or self.body[end : end + 2] != b"\r\n":
                raise ValueError(f"chunk at byte {position} is cut short or not terminated")
            chunks.append(self.body[start:end])
            position = end + 2


def raw_get(url: str, timeout: float = 10.0) -> RawResponse:
    """GET over a bare socket (HTTP/1.1, Connection: close), read to EOF and unparsed."""
    parts = urllib.parse.urlsplit(url)
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    head = f"GET {target} HTTP/1.1\r\nHost: {parts.netloc}\r\nConnection: close\r\n\r\n"
    with socket.create_connection((parts.hostname, parts.port), timeout=timeout) as sock:
        sock.sendall(head.encode("ascii"))
        raw = b"".join(iter(lambda: sock.recv(65536), b""))
    head_bytes, _, body = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head_bytes.decode("latin-1").split("\r\n")
    headers = {
        name.strip().lower(): value.strip()
        for name, _, value in (line.partition(":") for line in header_lines)
    }
    return RawResponse(int(status_line.split()[1]), headers, body)


@dataclass
class Node:
    """One node process. `url` is where clients reach it; `cluster_url` is how it appears
    in the topology (a Toxiproxy address when the node runs behind one)."""

    port: int
    data_dir: Path
    cluster_url: str
    topology: list[str]
    extra_args: list[str] = field(default_factory=list)
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    # What runs the command elsewhere: a network namespace's `nsenter ...` (NetnsTestbed).
    prefix: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def __repr__(self) -> str:
        return f"Node({self.url})"

    def command(self) -> list[str]:
        argv = node_argv(
            node_command_template(), self.port, self.data_dir, self.topology, self.cluster_url
        )
        return [*self.prefix, *argv, *self.extra_args]

    def start(self, wait: bool = True) -> None:
        assert self.process is None or self.process.poll() is not None, "already running"
        self.log_path = self.data_dir.with_suffix(".log")
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=os.environ.get(NODE_CWD_ENV),
                # A node in a namespace would keep it alive past a harness that crashed.
                preexec_fn=die_with_parent() if self.prefix else None,
            )
        if wait:
            self.wait_ready()

    def wait_ready(self, deadline: float = READY_DEADLINE) -> float:
        """Polls /v0/status until 200; returns the seconds it took."""
        started = time.monotonic()
        while time.monotonic() - started < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"node {self.url} exited with code {self.process.returncode} before "
                    f"/v0/status answered 200; {self.last_log_line()}\n{self.log_tail()}"
                )
            if status_code(self.url) == 200:
                return time.monotonic() - started
            time.sleep(0.02)
        raise RuntimeError(
            f"node {self.url}: /v0/status did not answer 200 within {deadline} s of the "
            f"start; {self.last_log_line()}\n{self.log_tail()}"
        )

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL past the deadline; returns the exit code."""
        return self._signal(signal.SIGTERM)

    def kill(self) -> int | None:
        return self._signal(signal.SIGKILL)

    def stop_timed(self, signum: signal.Signals, within: float) -> tuple[int | None, float]:
        """Sends `signum` and waits up to `within` seconds for the exit; returns the exit
        code (None if still running) and the seconds it took."""
        assert self.process is not None
        started = time.monotonic()
        self.process.send_signal(signum)
        try:
            code: int | None = self.process.wait(timeout=within)
        except subprocess.TimeoutExpired:
            code = None
        return code, time.monotonic() - started

    def restart(self) -> None:
        self.stop()
        self.start()

    def pause(self) -> None:
        """SIGSTOP: the process freezes as in a long GC pause; its sockets stay open and
        the kernel keeps accepting connections for it, but nothing answers."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT: a paused node runs on from where it stopped."""
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def _signal(self, signum: int) -> int | None:
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signum)
            self.process.send_signal(signal.SIGCONT)  # a paused node cannot act on SIGTERM
            try:
                self.process.wait(timeout=STOP_DEADLINE)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def last_log_line(self) -> str:
        """The node's last words (an error, usually), for a one-line failure."""
        lines = [line for line in self.log_tail().splitlines() if line.strip()]
        return f"its last log line: {lines[-1].strip()}" if lines else "it logged nothing"

    def log_tail(self, lines: int = 20) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    # -- client helpers ----------------------------------------------------------------

    def get(self, key: str, replicas: str | None = None) -> Response:
        return request("GET", entity_url(self.url, key, replicas))

    def put(self, key: str, value: bytes, replicas: str | None = None) -> Response:
        return request("PUT", entity_url(self.url, key, replicas), body=value)

    def delete(self, key: str, replicas: str | None = None) -> Response:
        return request("DELETE", entity_url(self.url, key, replicas))

    def range(self, start: str, end: str | None = None) -> Response:
        return request("GET", entities_url(self.url, start, end))

    def range_chunks(self, start: str, end: str | None = None) -> RawResponse:
        """The range with its chunked framing kept (see RawResponse.chunks)."""
        return raw_get(entities_url(self.url, start, end))

    # -- this node's own records (dht's internal API, not v0; for cluster and chaos tests)

    def local_records(self, start: str = LOWEST_KEY, end: str | None = None) -> dict[str, Record]:
        """The records this node itself stores in [start, end), tombstones included, read
        from `GET /internal/v0/records`, which is never coordinated: how many nodes hold a
        key, and which version each one holds. The default start takes every key."""
        response = internal_request(self, "GET", records_url(self.url, start, end))
        if response.status != 200:
            raise RuntimeError(f"{self.url} local records: {response.status} {response.text}")
        return decode_frames(response.body)

    def put_local(self, key: str | bytes, record: Record) -> Answer | Refused:
        """A replica write to this node only, on the replica channel, as a peer sends it:
        Stored, Failed (the node declined), or Refused (the channel was not opened)."""
        key = key.encode() if isinstance(key, str) else key
        return replica_call(self, lambda call_id: PutRecord(call_id, key, record))

    def get_local(self, key: str | bytes) -> Answer | Refused:
        """A replica read of this node only: RecordFound or RecordAbsent."""
        key = key.encode() if isinstance(key, str) else key
        return replica_call(self, lambda call_id: GetRecord(call_id, key))

    def status(self) -> dict[str, Any]:
        """The node's `/v0/status` document; raises RuntimeError on another answer."""
        response = request("GET", self.url + "/v0/status", timeout=5.0)
        if response.status != 200:
            raise RuntimeError(f"{self.url} status: {response.status} {response.text}")
        answer: dict[str, Any] = json.loads(response.body)
        return answer

    def metrics(self) -> Metrics:
        """The node's `GET /metrics`, parsed; raises RuntimeError on another answer."""
        response = request("GET", self.url + "/metrics", timeout=5.0)
        if response.status != 200:
            raise RuntimeError(f"{self.url} metrics: {response.status} {response.text}")
        return Metrics.parse(response.body.decode())

    @property
    def peer_tls(self) -> ssl.SSLContext | None:
        """With TLS between nodes (`--tls-ca`), the context a tool that speaks to this
        node as a peer does (it presents the node's own certificate); else None."""
        ca, cert, key = self.flag("--tls-ca"), self.flag("--tls-cert"), self.flag("--tls-key")
        if ca is None or cert is None or key is None:
            return None
        context = ssl.create_default_context(cafile=ca)
        context.load_cert_chain(cert, key)
        return context

    def flag(self, name: str) -> str | None:
        """The value of `--name` among the node's extra arguments, if given."""
        for index, arg in enumerate(self.extra_args):
            if arg == name and index + 1 < len(self.extra_args):
                return self.extra_args[index + 1]
            if arg.startswith(name + "="):
                return arg.partition("=")[2]
        return None


class Metrics:
    """Samples of a Prometheus text page: `metrics["dht_read_repairs_total"]`, or with
    labels `metrics.value("dht_hints_pending", peer=url)`; 0.0 for a sample not there."""

    def __init__(self, samples: dict[tuple[str, frozenset[tuple[str, str]]], float]) -> None:
        self.samples = samples

    @classmethod
    def parse(cls, page: str) -> Metrics:
        samples = {
            (sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(page)
            for sample in family.samples
        }
        return cls(samples)

    def value(self, name: str, **labels: str) -> float:
        """The sum of `name`'s samples whose labels include `labels`."""
        wanted = set(labels.items())
        return sum(
            value
            for (sample, sample_labels), value in self.samples.items()
            if sample == name and wanted <= sample_labels
        )

    def __getitem__(self, name: str) -> float:
        return self.value(name)

    def names(self) -> set[str]:
        return {name for name, _ in self.samples}


class Cluster:
    """N nodes with one topology, on free loopback ports."""

    def __init__(
        self,
        root: Path,
        size: int,
        extra_args: list[str] | None = None,
        ports: list[int] | None = None,
    ) -> None:
        """`ports`: where the nodes listen; by default free ones, chosen now."""
        ports = ports or free_ports(size)
        self.urls = [f"http://{HOST}:{port}" for port in ports]
        self.nodes = [
            Node(
                port,
                root / f"node-{i}",
                self.urls[i],
                self.urls,
                list(extra_args or []),
            )
            for i, port in enumerate(ports)
        ]
        if os.environ.get(TLS_ENV) == "1" and "--tls-ca" not in (extra_args or []):
            authority = LocalCA(root / "tls")
            for i, node in enumerate(self.nodes):
                node.extra_args += authority.issue(f"node-{i}").flags()

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def __getitem__(self, index: int) -> Node:
        return self.nodes[index]

    def __len__(self) -> int:
        return len(self.nodes)

    def start(self) -> Cluster:
        for node in self.nodes:
            node.start(wait=False)
        for node in self.nodes:
            node.wait_ready()
        return self

    def stop(self) -> None:
        for node in self.nodes:
            if node.running:
                assert node.process is not None
                node.process.send_signal(signal.SIGTERM)
        for node in self.nodes:
            node.stop()


# -- reading a node's own records (dht's internal API) -----------------------------------


def records_url(base: str, start: str, end: str | None = None) -> str:
    query = {"start": start} | ({} if end is None else {"end": end})
    return f"{base}{RECORDS_PATH}?{urllib.parse.urlencode(query, quote_via=urllib.parse.quote)}"


def cluster_secret(node: Node) -> str | None:
    """The secret the node was started with (`--secret`, else $DHT_SECRET), if any."""
    return node.flag("--secret") or os.environ.get("DHT_SECRET")


def peer_hello(node: Node) -> Hello:
    """The HELLO a peer of `node` sends: its ring identity, and a fresh nonce."""
    vnodes = int(node.flag("--vnodes") or NodeConfig.vnodes)
    ring = ring_identity(node.topology, vnodes)
    return Hello(PROTOCOL_VERSION, node.cluster_url, ring, new_nonce())


def open_channel(
    node: Node, hello: Hello | None = None, secret: str | None = None, timeout: float = 10.0
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
    node: Node, hello: Hello | None, secret: str | None, timeout: float
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
    node: Node,
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


def internal_request(node: Node, method: str, url: str, body: bytes | None = None) -> Response:
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
    """The internal range stream (dht.replication.wire): frames of key length (4 bytes big-endian),
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
