"""The lean HTTP path (dht/web/lean_http.py) on real nodes, spoken to over raw sockets:
pipelining, requests cut anywhere, `Connection: close`, half-closed clients, the hand-off
to aiohttp of what the lean path does not take (answered exactly as by a node started
with `--no-lean-http`), clients that go away, the in-flight bound, a graceful stop, and
a client that reads none of its answers.

Every read has a deadline: a node that does not answer fails the test, it never hangs.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from dht.conformance.fixtures import ClusterFactory
from dht.conformance.http_client import HOST, wait_for
from dht.conformance.launcher import Cluster, Node
from dht.conformance.rules import rule
from dht.testbed.toxiproxy import free_ports

pytestmark = pytest.mark.dht

DEADLINE = 10.0  # seconds a whole answer may take
MAX_VALUE = 1024  # --max-value-bytes of the `small` pair
MAX_KEY = 100  # --max-key-bytes of the `small` pair
LEAN_MAX_BODY = 64 * 1024  # dht.limits.LEAN_MAX_BODY: a larger PUT goes to aiohttp
PROBE_KEY = "lean-probe"  # never written: a GET of it answers 404
PROBE = f"GET /v0/entity?id={PROBE_KEY} HTTP/1.1\r\nHost: dht\r\n\r\n".encode()


# -- a raw HTTP/1.x client --------------------------------------------------------------


@dataclass(frozen=True)
class RawAnswer:
    status_line: str
    headers: tuple[tuple[str, str], ...]  # (lower-cased name, value), as received
    body: bytes

    @property
    def status(self) -> int:
        return int(self.status_line.split()[1])

    def header(self, name: str) -> str | None:
        return next((value for key, value in self.headers if key == name.lower()), None)

    def comparable(self) -> tuple[str, tuple[tuple[str, str], ...], bytes | str]:
        """All of it but the Date header and the headers' order (a long body as its
        length and digest, to keep a report short)."""
        body: bytes | str = self.body
        if len(self.body) > 200:
            body = f"{len(self.body)} bytes, sha256 {hashlib.sha256(self.body).hexdigest()}"
        return (
            self.status_line,
            tuple(sorted(header for header in self.headers if header[0] != "date")),
            body,
        )

    def __repr__(self) -> str:
        body = self.body if len(self.body) <= 80 else self.body[:80] + b"..."
        return f"<{self.status_line!r} {dict(self.headers)} {body!r} ({len(self.body)} bytes)>"


class Wire:
    """One raw connection to a node; every read has a deadline (TimeoutError past it)."""

    def __init__(self, port: int, deadline: float = DEADLINE) -> None:
        self.sock = socket.create_connection((HOST, port), timeout=deadline)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.deadline = deadline
        self.buffer = bytearray()

    def __enter__(self) -> Wire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _receive(self, until: float) -> bool:
        """Appends what comes next to the buffer; False at EOF or a reset."""
        left = until - time.monotonic()
        if left <= 0:
            raise TimeoutError(
                f"nothing more within the deadline; have {bytes(self.buffer)[:200]!r}"
            )
        self.sock.settimeout(left)
        try:
            data = self.sock.recv(1 << 20)
        except ConnectionResetError:
            return False
        except TimeoutError as exc:
            raise TimeoutError(
                f"nothing more within the deadline; have {bytes(self.buffer)[:200]!r}"
            ) from exc
        self.buffer += data
        return bool(data)

    def _take(self, size: int, until: float) -> bytes:
        while len(self.buffer) < size:
            if not self._receive(until):
                raise EOFError(f"closed {size - len(self.buffer)} bytes short of an answer")
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        return data

    def _line(self, until: float) -> bytes:
        while (end := self.buffer.find(b"\r\n")) < 0:
            if not self._receive(until):
                raise EOFError("closed inside a chunked body")
        return self._take(end + 2, until)[:-2]

    def answer(self, head: bool = False) -> RawAnswer:
        """The next whole answer (`head`: to a HEAD request, so without a body)."""
        until = time.monotonic() + self.deadline
        while (end := self.buffer.find(b"\r\n\r\n")) < 0:
            if not self._receive(until):
                raise EOFError(f"closed before a whole answer; had {bytes(self.buffer)[:200]!r}")
        status_line, *lines = self._take(end + 4, until)[:-4].decode("latin-1").split("\r\n")
        headers = tuple(
            (name.strip().lower(), value.strip())
            for name, _, value in (line.partition(":") for line in lines)
        )
        answer = RawAnswer(status_line, headers, b"")
        if head or answer.status < 200 or answer.status in (204, 304):
            return answer
        if (length := answer.header("content-length")) is not None:
            return replace(answer, body=self._take(int(length), until))
        if (answer.header("transfer-encoding") or "").lower() == "chunked":
            chunks = []
            while size := int(self._line(until).split(b";")[0], 16):
                chunks.append(self._take(size + 2, until)[:-2])
            while self._line(until):  # trailers, then the empty line
                pass
            return replace(answer, body=b"".join(chunks))
        return replace(answer, body=self.rest(until - time.monotonic()))

    def rest(self, within: float) -> bytes:
        """Everything up to EOF, which must come within `within` seconds."""
        until = time.monotonic() + within
        while self._receive(until):
            pass
        data = bytes(self.buffer)
        self.buffer.clear()
        return data

    def quiet_for(self, seconds: float) -> bool:
        """True if nothing (not even EOF) comes within `seconds`."""
        try:
            self._receive(time.monotonic() + seconds)
        except TimeoutError:
            return True
        return False

    def still_serves(self) -> bool:
        """Whether the connection takes one more request (a probe GET answered 404), or
        the node closed it."""
        try:
            self.send(PROBE)
            probe = self.answer()
        except (EOFError, ConnectionError):
            return False
        assert probe.status == 404, f"the probe got {probe!r}"
        return True


def http(method: str, target: str, body: bytes | None = None, *extra: str) -> bytes:
    """One HTTP/1.1 request with a Host, a Content-Length if it has a body, and `extra`
    header lines."""
    lines = [f"{method} {target} HTTP/1.1", "Host: dht", *extra]
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")


def exchange(node: Node, data: bytes, answers: int = 1, head: bool = False) -> list[Any]:
    """Sends `data` on a new connection: its answers, comparable, and whether the node
    then kept the connection open."""
    with Wire(node.port) as wire:
        wire.send(data)
        got: list[Any] = [wire.answer(head).comparable() for _ in range(answers)]
        got.append(("open" if wire.still_serves() else "closed",))
    return got


def status(node: Node) -> dict[str, Any]:
    """`/v0/status` on a new connection (the lean path hands it to aiohttp: one more
    `handed_off`, counted in the document itself)."""
    with Wire(node.port) as wire:
        wire.send(http("GET", "/v0/status"))
        answer = wire.answer()
    assert answer.status == 200, answer
    document: dict[str, Any] = json.loads(answer.body)
    return document


def lean_counters(node: Node) -> dict[str, int]:
    counters = status(node)["lean_http"]
    assert isinstance(counters, dict), counters
    return counters


def no_lean_connections_left(node: Node) -> None:
    wait_for(lambda: lean_counters(node)["connections"], lambda count: count == 0)


def put(node: Node, key: str, value: bytes) -> None:
    with Wire(node.port) as wire:
        wire.send(http("PUT", f"/v0/entity?id={key}", value))
        answer = wire.answer()
    assert answer.status == 201, answer


def get(node: Node, key: str) -> RawAnswer:
    with Wire(node.port) as wire:
        wire.send(http("GET", f"/v0/entity?id={key}"))
        return wire.answer()


def rss_mib(node: Node) -> float:
    assert node.process is not None
    for line in Path(f"/proc/{node.process.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


# -- nodes ------------------------------------------------------------------------------


def start_single_nodes(root: Path, arg_lists: list[list[str]]) -> list[Cluster]:
    """Single-node clusters, started together, on ports drawn at once."""
    ports = free_ports(len(arg_lists))
    clusters = [
        Cluster(root / f"node-{index}", 1, args, [port])
        for index, (args, port) in enumerate(zip(arg_lists, ports, strict=True))
    ]
    try:
        for cluster in clusters:
            cluster[0].start(wait=False)
        for cluster in clusters:
            cluster[0].wait_ready()
    except BaseException:
        for cluster in clusters:
            cluster.stop()
        raise
    return clusters


@dataclass
class Pair:
    lean: Node
    plain: Node  # --no-lean-http

    def __iter__(self) -> Iterator[Node]:
        return iter((self.lean, self.plain))


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Pair]]:
    """`default`: a lean node and a --no-lean-http one; `small`: the same with a small
    --max-value-bytes and --max-key-bytes."""
    small = ["--max-value-bytes", str(MAX_VALUE), "--max-key-bytes", str(MAX_KEY)]
    clusters = start_single_nodes(
        tmp_path_factory.mktemp("lean-http"),
        [[], ["--no-lean-http"], small, [*small, "--no-lean-http"]],
    )
    yield {
        "default": Pair(clusters[0][0], clusters[1][0]),
        "small": Pair(clusters[2][0], clusters[3][0]),
    }
    for cluster in clusters:
        cluster.stop()


@pytest.fixture
def lean_node(pairs: dict[str, Pair]) -> Node:
    """The default pair's lean node."""
    return pairs["default"].lean


# -- 1. pipelining ----------------------------------------------------------------------


@rule("1.2", "1.3", "1.4", "1.5", "5.4")
def test_pipelined_requests_are_answered_in_order_across_the_hand_off(lean_node: Node) -> None:
    """Six requests in one write: four lean ones, a /v0/status (handed to aiohttp with
    the bytes after it), and an entity GET that aiohttp then answers."""
    put(lean_node, "pipe-other", b"other value")
    before = lean_counters(lean_node)["handed_off"]
    with Wire(lean_node.port) as wire:
        wire.send(
            http("PUT", "/v0/entity?id=pipe", b"pipelined value")
            + http("GET", "/v0/entity?id=pipe")
            + http("DELETE", "/v0/entity?id=pipe")
            + http("GET", "/v0/entity?id=pipe")
            + http("GET", "/v0/status")
            + http("GET", "/v0/entity?id=pipe-other")
        )
        answers = [wire.answer() for _ in range(6)]
        assert wire.quiet_for(0.2), "more than six answers"
        assert wire.still_serves()
    got = [(answer.status, answer.body) for answer in answers]
    assert got[:4] == [
        (201, b"Created\n"),
        (200, b"pipelined value"),
        (202, b"Accepted\n"),
        (404, b"Not Found\n"),
    ], answers
    assert answers[1].header("content-type") == "application/octet-stream"
    assert answers[4].status == 200, answers[4]
    assert answers[4].header("content-type") == "application/json; charset=utf-8"
    document = json.loads(answers[4].body)
    assert document["lean_http"]["handed_off"] == before + 1, document["lean_http"]
    assert got[5] == (200, b"other value"), answers[5]
    # The pipelined /v0/status, and the one that reads the counter now.
    assert lean_counters(lean_node)["handed_off"] == before + 2


# -- 2. requests cut anywhere ------------------------------------------------------------


@rule("5.5")
def test_a_request_sent_one_byte_at_a_time_is_answered_on_the_lean_path(lean_node: Node) -> None:
    before = lean_counters(lean_node)["handed_off"]
    with Wire(lean_node.port) as wire:
        for request in (
            http("PUT", "/v0/entity?id=bytewise", b"one byte at a time"),
            http("GET", "/v0/entity?id=bytewise"),
        ):
            for index in range(len(request)):
                wire.send(request[index : index + 1])
                time.sleep(0.002)
            answer = wire.answer()
            assert answer.status in (200, 201), answer
        assert answer.body == b"one byte at a time"
    # Neither went to aiohttp: only this status request was handed off.
    assert lean_counters(lean_node)["handed_off"] == before + 1


@rule("5.4")
def test_two_pipelined_requests_split_at_any_byte_are_both_answered(lean_node: Node) -> None:
    put(lean_node, "split", b"split value")
    data = http("PUT", "/v0/entity?id=split2", b"0123456789") + http("GET", "/v0/entity?id=split")
    before = lean_counters(lean_node)["handed_off"]
    for cut in range(1, len(data)):
        with Wire(lean_node.port) as wire:
            wire.send(data[:cut])
            time.sleep(0.001)
            wire.send(data[cut:])
            first, second = wire.answer(), wire.answer()
        assert (first.status, second.status, second.body) == (201, 200, b"split value"), cut
    assert lean_counters(lean_node)["handed_off"] == before + 1
    assert get(lean_node, "split2").body == b"0123456789"


# -- 3. Connection: close ---------------------------------------------------------------


@rule("5.1")
def test_connection_close_is_answered_with_connection_close_then_closed(
    pairs: dict[str, Pair],
) -> None:
    """As without the lean path; on the lean path a request pipelined after it is
    never answered either (aiohttp refuses such a head whole, with a 400)."""
    lean, plain = pairs["default"]
    for target in (lean, plain):
        put(target, "closing", b"v")
    request = http("GET", "/v0/entity?id=closing", None, "Connection: close")
    answers = []
    for target in (lean, plain):
        with Wire(target.port) as wire:
            wire.send(request)
            answers.append(answer := wire.answer())
            assert (answer.status, answer.body) == (200, b"v"), answer
            assert answer.header("connection") == "close", answer
            assert wire.rest(within=2.0) == b"", "bytes after the answer"
    assert answers[0].comparable() == answers[1].comparable()
    with Wire(lean.port) as wire:
        wire.send(request + http("PUT", "/v0/entity?id=closing", b"never"))
        assert wire.answer().header("connection") == "close"
        assert wire.rest(within=2.0) == b"", "answered past Connection: close"
    assert get(lean, "closing").body == b"v"
    no_lean_connections_left(lean)


# -- 4. half-close ----------------------------------------------------------------------


@rule("5.1")
def test_requests_before_a_half_close_are_answered_then_the_connection_closes(
    lean_node: Node,
) -> None:
    put(lean_node, "half", b"half-closed")
    with Wire(lean_node.port) as wire:
        wire.send(http("GET", "/v0/entity?id=half") + http("PUT", "/v0/entity?id=half2", b"x"))
        wire.sock.shutdown(socket.SHUT_WR)
        first, second = wire.answer(), wire.answer()
        assert (first.status, first.body) == (200, b"half-closed"), first
        assert second.status == 201, second
        assert wire.rest(within=3.0) == b""
    assert get(lean_node, "half2").body == b"x"
    no_lean_connections_left(lean_node)


@rule("5.1")
def test_a_half_close_after_a_handed_off_request_still_closes_the_connection(
    lean_node: Node,
) -> None:
    """The hand-off passes aiohttp the bytes not answered yet; the client's EOF, received
    before it, must not be lost, or the connection stays open until aiohttp's keep-alive
    timeout (75 s) though the client will never send again. The EOF surely comes first
    here: the answers to 300 GETs of 60 KiB fill the sockets' buffers, and the lean path
    answers no more (nor hands off) until the client reads them."""
    value = os.urandom(60 * 1024)
    put(lean_node, "half-large", value)
    gets = 300
    with Wire(lean_node.port) as wire:
        wire.send(http("GET", "/v0/entity?id=half-large") * gets + http("GET", "/v0/status"))
        wire.sock.shutdown(socket.SHUT_WR)
        time.sleep(0.2)
        for _ in range(gets):
            assert wire.answer().body == value
        rest = wire.rest(within=3.0)  # the status answer (or none, as aiohttp alone does)
    assert rest == b"" or rest.startswith(b"HTTP/1.1 200 OK"), rest[:100]


# -- 5. what goes to aiohttp is answered as before ---------------------------------------


def expect_continue(node: Node) -> list[Any]:
    """A PUT with `Expect: 100-continue` whose body is sent after a pause (a client
    waits that long for a 100 Continue that does not come): `exchange`'s answers."""
    with Wire(node.port) as wire:
        wire.send(
            http("PUT", "/v0/entity?id=expect", None, "Expect: 100-continue", "Content-Length: 9")
        )
        got: list[Any] = []
        if not wire.quiet_for(0.3):
            got.append(wire.answer().comparable())  # an interim 100 Continue
        wire.send(b"continued")
        got.append(wire.answer().comparable())
        got.append(("open" if wire.still_serves() else "closed",))
    return got


@rule("1.3", "5.1", "7.1")
def test_requests_the_lean_path_hands_off_are_answered_as_without_it(
    pairs: dict[str, Pair],
) -> None:
    """A PUT over 64 KiB, a chunked PUT, a PUT with `Expect: 100-continue`, an HTTP/1.0
    GET and a HEAD: each answer (status line, headers but Date, body) and whether the
    connection then serves on are the same as on a --no-lean-http node."""
    lean, plain = pairs["default"]
    big = os.urandom(LEAN_MAX_BODY + 4096)
    chunks = [os.urandom(1000), os.urandom(70_000), b"end"]
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for chunk in chunks) + b"0\r\n\r\n"
    cases: dict[str, tuple[bytes, bool]] = {
        "PUT over 64 KiB": (http("PUT", "/v0/entity?id=big", big), False),
        "chunked PUT": (
            http("PUT", "/v0/entity?id=chunked", None, "Transfer-Encoding: chunked") + chunked,
            False,
        ),
        "HTTP/1.0 GET": (b"GET /v0/entity?id=big HTTP/1.0\r\n\r\n", False),
        "HTTP/1.0 GET keep-alive": (
            b"GET /v0/entity?id=chunked HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
            False,
        ),
        "HEAD": (http("HEAD", "/v0/entity?id=big"), True),
        "HEAD of a missing key": (http("HEAD", f"/v0/entity?id={PROBE_KEY}"), True),
    }
    before = lean_counters(lean)["handed_off"]
    differences = []
    for name, (request, head) in cases.items():
        lean_got, plain_got = (
            exchange(lean, request, head=head),
            exchange(plain, request, head=head),
        )
        if lean_got != plain_got:
            differences.append(f"{name}:\n  lean  {lean_got}\n  plain {plain_got}")
    lean_got, plain_got = expect_continue(lean), expect_continue(plain)
    if lean_got != plain_got:
        differences.append(f"Expect: 100-continue:\n  lean  {lean_got}\n  plain {plain_got}")
    assert not differences, "\n".join(differences)
    # Each went to aiohttp (and so did this status request).
    assert lean_counters(lean)["handed_off"] == before + len(cases) + 2
    for target in (lean, plain):
        for key, value in (("big", big), ("chunked", b"".join(chunks)), ("expect", b"continued")):
            answer = get(target, key)
            assert (answer.status, answer.body) == (200, value), (target, key, answer)


# -- 6. entity requests, ordinary and malformed, answered as without the lean path -------


def entity(method: str, query: str, body: bytes | None = None, *extra: str) -> bytes:
    return http(method, f"/v0/entity?{query}", body, *extra)


def entity_cases() -> list[tuple[str, bytes]]:
    """In order: later ones read what earlier ones wrote."""
    key_at_max, key_over = "k" * MAX_KEY, "k" * (MAX_KEY + 1)
    cases = [
        ("missing id", http("GET", "/v0/entity")),
        ("no id among the parameters", entity("GET", "key=a")),
        ("empty query", entity("GET", "")),
        ("empty id", entity("GET", "id=")),
        ("empty id, PUT", entity("PUT", "id=", b"v")),
        ("empty id, DELETE", entity("DELETE", "id=&replicas=1/1")),
        ("id of --max-key-bytes, PUT", entity("PUT", f"id={key_at_max}", b"at max")),
        ("id of --max-key-bytes, GET", entity("GET", f"id={key_at_max}")),
        ("id too long", entity("GET", f"id={key_over}")),
        ("id too long, PUT", entity("PUT", f"id={key_over}", b"v")),
        ("id too long, DELETE", entity("DELETE", f"id={key_over}")),
        ("id too long once decoded", entity("GET", "id=" + "%C3%A9" * (MAX_KEY // 2 + 1))),
        ("request line over aiohttp's limit", entity("GET", "id=" + "k" * (5 * MAX_KEY + 1100))),
    ]
    for value in ("abc", "2/1", "0/1", "1/2", "1/9", "1", "1/1/1", "", "-1/1", "1/1x", "%31/1"):
        cases.append((f"replicas={value}", entity("GET", f"id=r&replicas={value}")))
        cases.append((f"replicas={value}, PUT", entity("PUT", f"id=r&replicas={value}", b"r")))
    cases.append(("replicas=1/1, GET", entity("GET", "id=r&replicas=1/1")))
    for index, value in enumerate(("0", "-1", "abc", "1.5", "", "31536001", "9" * 30, "10")):
        cases.append((f"ttl={value}", entity("PUT", f"id=t{index}&ttl={value}", b"t")))
        cases.append((f"ttl={value}, GET", entity("GET", f"id=t{index}")))
    cases += [
        ("GET of a missing key", entity("GET", "id=never-written")),
        ("PUT", entity("PUT", "id=d", b"to delete")),
        ("DELETE", entity("DELETE", "id=d")),
        ("GET after DELETE", entity("GET", "id=d")),
        ("DELETE of a missing key", entity("DELETE", "id=never-written")),
        ("PUT over --max-value-bytes", entity("PUT", "id=over", b"o" * (MAX_VALUE + 1))),
        ("PUT of 64 KiB, over --max-value-bytes", entity("PUT", "id=over", bytes(LEAN_MAX_BODY))),
        ("GET of the refused key", entity("GET", "id=over")),
        ("PUT of --max-value-bytes", entity("PUT", "id=max", b"m" * MAX_VALUE)),
        ("GET of it", entity("GET", "id=max")),
        ("PUT of an empty value", entity("PUT", "id=empty", b"")),
        ("GET of an empty value", entity("GET", "id=empty")),
        ("%00 in a key, PUT", entity("PUT", "id=a%00b", b"nul")),
        ("%00 in a key, GET", entity("GET", "id=a%00b")),
        ("the key before %00", entity("GET", "id=a")),
        ("%00 alone", entity("GET", "id=%00")),
        ("%FF, PUT", entity("PUT", "id=%FF", b"ff")),
        ("%FF, GET", entity("GET", "id=%FF")),
        ("%ff, GET", entity("GET", "id=%ff")),
        ("U+FFFD is another key", entity("GET", "id=%EF%BF%BD")),
        ("%FF, DELETE", entity("DELETE", "id=%FF")),
        ("%FF after DELETE", entity("GET", "id=%FF")),
        ("+ in a key, PUT", entity("PUT", "id=a+b", b"plus")),
        ("+ is a space", entity("GET", "id=a%20b")),
        ("%2B is a plus", entity("GET", "id=a%2Bb")),
        ("%2B, PUT", entity("PUT", "id=a%2Bb", b"real plus")),
        ("%2B, GET", entity("GET", "id=a%2Bb")),
        ("+ in the name", entity("GET", "i+d=a+b")),
        ("bad percent-encoding %G1", entity("GET", "id=%G1")),
        ("bad percent-encoding %", entity("GET", "id=%")),
        ("bad percent-encoding %F", entity("PUT", "id=%F", b"f")),
        ("repeated id: the first wins", entity("GET", "id=a%00b&id=zzz")),
        ("PUT without Content-Length", http("PUT", "/v0/entity?id=nolength")),
        ("GET with a body", entity("GET", "id=a%00b", b"ignored")),
        ("DELETE with a body", entity("DELETE", "id=never-written", b"ignored")),
        ("POST", entity("POST", "id=a", b"v")),
        ("unknown path", http("GET", "/v0/entityx?id=a")),
        ("path with a trailing slash", http("GET", "/v0/entity/?id=a")),
        ("lower-case method", b"get /v0/entity?id=a HTTP/1.1\r\nHost: dht\r\n\r\n"),
        ("absolute-form target", http("GET", "http://dht/v0/entity?id=a%00b")),
        ("fragment", http("GET", "/v0/entity?id=a%00b#fragment")),
        ("a space in the target", http("GET", "/v0/entity?id=a b")),
        ("Connection: close", entity("GET", "id=a%00b", None, "Connection: close")),
        ("Connection: Keep-Alive", entity("GET", "id=a%00b", None, "Connection: Keep-Alive")),
        ("Connection: upgrade", entity("GET", "id=a%00b", None, "Connection: upgrade")),
        ("Content-Length: 0 on a GET", entity("GET", "id=a%00b", None, "Content-Length: 0")),
        ("two Content-Lengths", entity("PUT", "id=cl", b"12", "Content-Length: 2")),
        ("Content-Length: +2", entity("PUT", "id=cl", None, "Content-Length: +2") + b"12"),
        ("Content-Length: abc", entity("PUT", "id=cl", None, "Content-Length: abc")),
        ("a header without a colon", entity("GET", "id=a", None, "NoColon")),
        ("a space before the colon", entity("GET", "id=a", None, "X-Thing : 1")),
        ("an empty header value", entity("GET", "id=a%00b", None, "X-Empty:")),
        ("a tab in a header value", entity("GET", "id=a%00b", None, "X-Tab: a\tb")),
        ("Content-Encoding: gzip", entity("PUT", "id=gz", b"v", "Content-Encoding: gzip")),
    ]
    return cases


# The cases of `entity_cases` the lean path does not take.
HANDED_OFF = {
    "missing id",
    "request line over aiohttp's limit",
    "PUT without Content-Length",
    # Refused before its body comes: aiohttp answers it 413 (the lean path serves a
    # request once its body has come whole).
    "PUT over --max-value-bytes",
    "PUT of 64 KiB, over --max-value-bytes",
    "GET with a body",
    "DELETE with a body",
    "POST",
    "unknown path",
    "path with a trailing slash",
    "lower-case method",
    "absolute-form target",
    "fragment",
    "a space in the target",
    "Connection: upgrade",
    "two Content-Lengths",
    "Content-Length: +2",
    "Content-Length: abc",
    "a header without a colon",
    "a space before the colon",
    "Content-Encoding: gzip",
}


@rule("1.6", "1.7", "1.8", "16.2", "16.3", "5.2", "7.2", "7.3", "7.4", "7.5")
def test_ordinary_and_malformed_entity_requests_are_answered_as_without_the_lean_path(
    pairs: dict[str, Pair],
) -> None:
    """Each answer (status line, headers but Date, body) and whether the connection then
    serves on; the lean path takes all but the cases in HANDED_OFF, which it hands off."""
    lean, plain = pairs["small"]
    differences = []
    handed_off = set()
    for name, request in entity_cases():
        before = lean_counters(lean)["handed_off"]
        lean_got, plain_got = exchange(lean, request), exchange(plain, request)
        if lean_counters(lean)["handed_off"] - before > 1:  # the counting request's own
            handed_off.add(name)
        if lean_got != plain_got:
            differences.append(f"{name}:\n  lean  {lean_got}\n  plain {plain_got}")
    assert not differences, "\n".join(differences)
    assert handed_off == HANDED_OFF, (handed_off - HANDED_OFF, HANDED_OFF - handed_off)


@rule("7.3")
def test_a_put_over_max_value_bytes_is_refused_before_its_body_comes(
    pairs: dict[str, Pair],
) -> None:
    """Its length is announced: the 413 comes at once, as without the lean path."""
    got = []
    for target in pairs["small"]:
        with Wire(target.port, deadline=2.0) as wire:
            wire.send(entity("PUT", "id=early", None, f"Content-Length: {MAX_VALUE + 1}"))
            answer = wire.answer()
        got.append((answer.status_line, answer.header("content-type"), answer.body))
    assert got[0] == got[1], got
    assert got[0][0] == "HTTP/1.1 413 Request Entity Too Large"


def refused_then_body(node: Node) -> str:
    """A client as http.client with a file for a body: the head, then the body in 8 KiB
    writes, then it reads the answer. The node refuses the PUT (bad replicas) before its
    body comes."""
    body = bytes(60_000)
    with Wire(node.port) as wire:
        wire.send(entity("PUT", "id=refused&replicas=0/1", None, f"Content-Length: {len(body)}"))
        time.sleep(0.1)  # the 400 is written meanwhile
        try:
            for start in range(0, len(body), 8192):
                wire.send(body[start : start + 8192])
                time.sleep(0.001)
        except OSError as exc:
            return f"sending the body failed: {exc!r}"
        answer = wire.answer()
        return f"{answer.status_line}: {answer.body!r}"


@rule("5.1", "7.2")
def test_a_put_refused_before_its_body_comes_lets_the_client_send_it_and_read_the_answer(
    pairs: dict[str, Pair],
) -> None:
    """aiohttp reads (and drops) the rest of the body after an early answer, so the client
    gets to read it; closing at once with bytes unread resets the connection under a
    client still sending (RFC 9112 9.6), which then never sees its 400 (or 413, or 503
    Overloaded)."""
    lean, plain = pairs["default"]
    got = {"lean": refused_then_body(lean), "plain": refused_then_body(plain)}
    assert got["plain"].startswith("HTTP/1.1 400 Bad Request"), got
    assert got["lean"] == got["plain"], got


@rule("5.1")
def test_heads_aiohttp_refuses_are_refused_on_the_lean_path_too(pairs: dict[str, Pair]) -> None:
    """What the lean parser takes must be a subset of what aiohttp's takes: an HTTP/1.1
    request without a Host, or with two, is a 400 from aiohttp; `Proxy-Connection:
    close` closes the connection there."""
    lean, plain = pairs["small"]
    put(lean, "hosts", b"v")
    put(plain, "hosts", b"v")
    cases = {
        "no Host": b"GET /v0/entity?id=hosts HTTP/1.1\r\n\r\n",
        "two Hosts": b"GET /v0/entity?id=hosts HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        "Proxy-Connection: close": entity("GET", "id=hosts", None, "Proxy-Connection: close"),
    }
    differences = []
    for name, request in cases.items():
        lean_got, plain_got = exchange(lean, request), exchange(plain, request)
        if lean_got != plain_got:
            differences.append(f"{name}:\n  lean  {lean_got}\n  plain {plain_got}")
    assert not differences, "\n".join(differences)


@rule("5.1")
def test_a_head_with_bare_lf_line_ends_is_refused_at_once_as_without_the_lean_path(
    pairs: dict[str, Pair],
) -> None:
    """aiohttp answers 400 at once; a lean path that waits for a CRLF that never comes
    leaves the client without an answer."""
    lean, plain = pairs["small"]
    cases = {
        "LF after the request line": b"GET /v0/entity?id=a HTTP/1.1\nHost: dht\n\n",
        "LF after a header": b"GET /v0/entity?id=a HTTP/1.1\r\nHost: dht\n\n",
        "LF ending the head": b"GET /v0/entity?id=a HTTP/1.1\r\nHost: dht\r\n\n",
    }
    differences = []
    for name, request in cases.items():
        got = []
        for target in (lean, plain):
            with Wire(target.port, deadline=1.0) as wire:
                wire.send(request)
                try:
                    answer = wire.answer()
                except TimeoutError:
                    got.append("no answer within 1 s")
                    continue
                got.append(f"{answer.comparable()} then {wire.rest(within=2.0)!r}")
        if got[0] != got[1]:
            differences.append(f"{name}:\n  lean  {got[0]}\n  plain {got[1]}")
    assert not differences, "\n".join(differences)


# -- 7. clients that go away -----------------------------------------------------------


@rule("5.1", "5.8")
def test_a_put_whose_client_leaves_before_the_answer_is_stored_and_the_node_serves_on(
    lean_node: Node,
) -> None:
    """Gone with a FIN (close) or a reset (SO_LINGER 0) once the whole PUT is sent: it is
    carried out all the same. Gone mid-head or mid-body: nothing is stored, and the
    bytes its length held in the byte budget are let go."""
    sizes = (1, 5000, 60_000)
    reset = struct.pack("ii", 1, 0)
    values = {}
    for how, linger in (("fin", None), ("rst", reset)):
        for size in sizes:
            key = f"left-{how}-{size}"
            values[key] = value = os.urandom(size)
            sock = socket.create_connection((HOST, lean_node.port), timeout=DEADLINE)
            if linger is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
            sock.sendall(http("PUT", f"/v0/entity?id={key}", value))
            sock.close()
    cut_short = http("PUT", "/v0/entity?id=cut-short", bytes(30_000))
    for cut in (20, len(cut_short) - 30_000, len(cut_short) - 1000):
        for linger in (None, reset):
            sock = socket.create_connection((HOST, lean_node.port), timeout=DEADLINE)
            if linger is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
            sock.sendall(cut_short[:cut])
            sock.close()
    for key, value in values.items():
        answer = wait_for(
            functools.partial(get, lean_node, key), lambda answer: answer.status == 200
        )
        assert answer.body == value, key
    assert get(lean_node, "cut-short").status == 404
    no_lean_connections_left(lean_node)
    wait_for(lambda: status(lean_node)["bytes_in_flight"], lambda held: held == 0)
    put(lean_node, "after-leaving", b"served")
    assert get(lean_node, "after-leaving").body == b"served"


# -- 8. the in-flight bound ---------------------------------------------------------------


@rule("7.6")
def test_the_lean_path_answers_503_overloaded_past_max_in_flight(
    start_cluster: ClusterFactory,
) -> None:
    node, paused = start_cluster(
        2, ["--max-in-flight", "1", "--timeout", "3", "--breaker-threshold", "100"]
    )
    put(node, "held", b"xy")
    paused.pause()
    with Wire(node.port) as holder, Wire(node.port) as wire:
        # A 2/2 GET waits for the paused replica: it holds the only slot until --timeout.
        holder.send(entity("GET", "id=held&replicas=2/2"))

        def refused() -> RawAnswer:
            return get(node, "other")

        wait_for(refused, lambda answer: answer.status == 503)
        before = lean_counters(node)["handed_off"]
        started = time.monotonic()
        wire.send(
            entity("GET", "id=other")
            + entity("PUT", "id=other", b"v")
            + entity("DELETE", "id=other")
        )
        answers = [wire.answer() for _ in range(3)]
        assert time.monotonic() - started < 1.0, "a 503 is answered at once"
        for answer in answers:
            assert answer.status_line == "HTTP/1.1 503 Service Unavailable", answer
            assert answer.header("retry-after") == "1", answer
            assert answer.header("content-type") == "text/plain; charset=utf-8", answer
            assert answer.body == b"Overloaded\n", answer
        assert lean_counters(node)["handed_off"] == before + 1, "refused off the lean path"

        assert holder.answer().status == 504
        paused.resume()
        wire.send(entity("GET", "id=other") + entity("GET", "id=held"))
        assert wire.answer().status == 404  # the refused PUT stored nothing
        assert wire.answer().body == b"xy"


# -- 9. a graceful stop ---------------------------------------------------------------------


@rule("4.2", "6.5")
def test_a_lean_request_in_flight_at_sigterm_is_answered_before_the_node_exits(
    start_cluster: ClusterFactory,
) -> None:
    """A PUT 3/3 waits for --timeout on a paused replica when its node gets SIGTERM: it
    is answered (504, with Connection: close); an idle lean connection is closed at
    once; one whose PUT body stalls half-sent is cut; the node exits 0 within 5 s."""
    cluster = start_cluster(3, ["--timeout", "1.5", "--breaker-threshold", "100"])
    coordinator, _, paused = cluster
    process = coordinator.process
    assert process is not None
    put(coordinator, "before-stop", b"v")
    port = coordinator.port
    with Wire(port) as idle, Wire(port) as busy, Wire(port) as stalled:
        idle.send(entity("GET", "id=before-stop"))
        assert idle.answer().body == b"v"
        stalled.send(entity("PUT", "id=stalled", None, "Content-Length: 100") + b"x" * 10)
        paused.pause()
        try:
            busy.send(entity("PUT", "id=during-stop&replicas=3/3", b"w"))
            assert busy.quiet_for(0.3), "answered before the replica's deadline"
            stopping = time.monotonic()
            process.send_signal(signal.SIGTERM)
            assert idle.rest(within=1.0) == b"", "an idle connection is closed at once"
            answer = busy.answer()
            answered = time.monotonic() - stopping
            assert answer.status == 504, answer
            assert answer.header("connection") == "close", answer
            assert busy.rest(within=2.0) == b""
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=8.0)
            exited = time.monotonic() - stopping
            assert stalled.rest(within=1.0) == b"", "the stalled PUT got an answer"
        finally:
            paused.resume()
    assert process.returncode == 0, coordinator.log_tail()
    assert answered < 3.0, f"answered {answered:.1f} s after SIGTERM"
    assert exited < 5.0, f"exited {exited:.1f} s after SIGTERM"


@rule("4.2", "6.5")
def test_sigterm_stops_a_node_within_5_s_with_requests_stalled_on_both_paths(
    start_cluster: ClusterFactory,
) -> None:
    """A PUT whose body stalls half-sent on the lean path, and a chunked one (aiohttp's
    path) stalled the same way: each path's grace must not be waited out one after the
    other (a --no-lean-http node stops in about 3 s)."""
    node = start_cluster(1)[0]
    process = node.process
    assert process is not None
    with Wire(node.port) as lean, Wire(node.port) as handed_off:
        lean.send(entity("PUT", "id=stalled", None, "Content-Length: 100") + b"x" * 10)
        handed_off.send(
            entity("PUT", "id=stalled-chunked", None, "Transfer-Encoding: chunked")
            + b"4\r\nxxxx\r\n"
        )
        # Bodies on their way are not in flight (rule 7.10): the chunked one has reached
        # aiohttp once it was handed off.
        wait_for(lambda: lean_counters(node)["handed_off"], lambda count: count >= 1)
        stopping = time.monotonic()
        process.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10.0)
        exited = time.monotonic() - stopping
    assert process.returncode == 0, node.log_tail()
    assert exited < 5.0, f"exited {exited:.1f} s after SIGTERM"


# -- 10. a client that reads none of its answers -----------------------------------------


@rule("5.5", "5.7")
def test_a_client_that_reads_no_answers_holds_bounded_memory_and_no_one_else(
    lean_node: Node,
) -> None:
    """2,000 pipelined GETs of a 60 KiB value (120 MiB of answers; with a padding header,
    240 KB of requests, more than the lean path reads ahead), then a /v0/status that is
    handed to aiohttp: while the client reads nothing the node's memory stays flat and
    others are served; then every answer comes, in order."""
    value = os.urandom(60 * 1024)
    requests = 2000
    put(lean_node, "large", value)
    assert get(lean_node, "large").body == value
    baseline = rss_mib(lean_node)
    request = entity("GET", "id=large", None, "X-Padding: " + "p" * 64)
    with Wire(lean_node.port, deadline=30.0) as reader:
        reader.send(request * requests + http("GET", "/v0/status"))
        peak = baseline
        for _ in range(10):  # the answers fill the sockets' buffers, then wait
            time.sleep(0.1)
            peak = max(peak, rss_mib(lean_node))
        assert peak - baseline < 50, f"RSS grew {peak - baseline:.0f} MiB"
        started = time.monotonic()
        assert get(lean_node, "large").body == value
        assert time.monotonic() - started < 1.0, "another client waited"
        for index in range(requests):
            answer = reader.answer()
            assert (answer.status, answer.body) == (200, value), (index, answer)
        assert reader.answer().header("content-type") == "application/json; charset=utf-8"
        assert reader.still_serves()
