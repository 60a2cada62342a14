"""Review of the lean HTTP path (dht/web/lean_http.py, commits e5e5673..af127cd): faults
found by reading it, each reproduced on real nodes over raw sockets and, where the answer
should match, compared with a node started with `--no-lean-http`.

Every read has a deadline: a node that does not answer fails the test, it never hangs.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dht.conformance.http_client import HOST
from dht.conformance.launcher import Cluster, Node
from dht.conformance.rules import rule
from dht.testbed.certificates import LocalCA
from dht.testbed.toxiproxy import free_ports

pytestmark = pytest.mark.dht

DEADLINE = 5.0
MAX_KEY = 64 * 1024  # --max-key-bytes' default


# -- a raw client -----------------------------------------------------------------------


def connect(node: Node) -> socket.socket:
    sock = socket.create_connection((HOST, node.port), timeout=DEADLINE)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def read_until_eof(sock: socket.socket, within: float = DEADLINE) -> bytes:
    """Everything up to EOF (or a reset), which must come within `within` seconds."""
    until = time.monotonic() + within
    data = b""
    while True:
        left = until - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no EOF within {within} s; had {data[:200]!r}")
        sock.settimeout(left)
        try:
            chunk = sock.recv(1 << 20)
        except ConnectionResetError:
            return data
        except TimeoutError as exc:
            raise TimeoutError(f"no EOF within {within} s; had {data[:200]!r}") from exc
        if not chunk:
            return data
        data += chunk


def first_answer(sock: socket.socket, within: float = DEADLINE) -> bytes:
    """The first answer's status line, or what came instead ('EOF', 'reset', 'nothing')."""
    until = time.monotonic() + within
    data = b""
    while b"\r\n" not in data:
        left = until - time.monotonic()
        if left <= 0:
            return b"nothing within %.0f s" % within
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return b"reset"
        except TimeoutError:
            return b"nothing within %.0f s" % within
        if not chunk:
            return b"EOF" if not data else data
        data += chunk
    return data.split(b"\r\n", 1)[0]


def request(method: str, target: str, body: bytes | None = None, *extra: str) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", "Host: dht", *extra]
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")


def put(node: Node, key: str, value: bytes) -> None:
    with connect(node) as sock:
        sock.sendall(request("PUT", f"/v0/entity?id={key}", value, "Connection: close"))
        assert first_answer(sock) == b"HTTP/1.1 201 Created"


def get(node: Node, key: str) -> bytes:
    """The status line and body of a GET."""
    with connect(node) as sock:
        sock.sendall(request("GET", f"/v0/entity?id={key}", None, "Connection: close"))
        answer = read_until_eof(sock)
    head, _, body = answer.partition(b"\r\n\r\n")
    return head.split(b"\r\n", 1)[0] + b" | " + body


# -- nodes ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Node, Node]]:
    """A lean node and a --no-lean-http one, single-node clusters."""
    root = tmp_path_factory.mktemp("lean-review")
    lean_port, plain_port = free_ports(2)
    clusters = [
        Cluster(root / "lean", 1, [], [lean_port]),
        Cluster(root / "plain", 1, ["--no-lean-http"], [plain_port]),
    ]
    try:
        for cluster in clusters:
            cluster[0].start(wait=False)
        for cluster in clusters:
            cluster[0].wait_ready()
        yield clusters[0][0], clusters[1][0]
    finally:
        for cluster in clusters:
            cluster.stop()


# -- 1. a PUT's body run as a request -----------------------------------------------------


@rule("5.1", "5.8")
def test_the_body_of_a_refused_put_whose_client_left_is_never_run_as_a_request(
    nodes: tuple[Node, Node],
) -> None:
    """A PUT refused before its body came whole (here bad `replicas`: 400), whose client
    then closes its side (EOF) with only part of the body sent. The EOF cancels the
    pending body but leaves its bytes in the buffer; the refusal is then answered with
    keep-alive and the lean parser reads those body bytes as the next request. A body
    holding a DELETE deletes an acknowledged value nobody asked to delete.

    The node is paused while the bytes and the EOF are sent, so it reads both in one go
    (as it would from any fast client that gives up); the test tries a few times."""
    lean, plain = nodes
    outcomes = {}
    for target in (lean, plain):
        for attempt in range(5):
            victim = f"victim-{attempt}"
            put(target, victim, b"acknowledged")
            smuggled = request("DELETE", f"/v0/entity?id={victim}")
            with connect(target) as sock:
                target.pause()
                try:
                    sock.sendall(
                        request(
                            "PUT",
                            "/v0/entity?id=refused&replicas=0/1",
                            None,
                            "Content-Length: 1000",
                        )
                        + smuggled
                    )
                    sock.shutdown(socket.SHUT_WR)
                finally:
                    target.resume()
                answers = read_until_eof(sock).count(b"HTTP/1.1 ")
            after = get(target, victim)
            if after != b"HTTP/1.1 200 OK | acknowledged" or answers > 1:
                break
        outcomes["lean" if target is lean else "plain"] = (answers, after)
    assert outcomes["plain"][1] == b"HTTP/1.1 200 OK | acknowledged", outcomes
    lean_answers, lean_after = outcomes["lean"]
    assert lean_answers <= 1 and lean_after == b"HTTP/1.1 200 OK | acknowledged", (
        f"the body was run as a request (answers, then the victim's GET): {outcomes}"
    )


# -- 2. a long request line stalls for ever ----------------------------------------------


def get_sent_in_pieces(node: Node, target: str, piece: int = 16 * 1024) -> bytes:
    data = request("GET", target, None, "Connection: close")
    with connect(node) as sock:
        for start in range(0, len(data), piece):
            sock.sendall(data[start : start + piece])
            time.sleep(0.02)  # each piece is read on its own, as over a network
        return first_answer(sock, within=DEADLINE)


@rule("1.6", "16.2", "7.4", "5.3")
def test_a_request_line_past_the_read_limit_arriving_in_pieces_is_answered(
    nodes: tuple[Node, Node],
) -> None:
    """A key of exactly --max-key-bytes whose bytes are all percent-encoded makes a
    request line of 196 KB: within aiohttp's limit (3 x max-key-bytes + 1 KiB), but over
    the lean path's LEAN_READ_LIMIT (147 KB). While the line is not whole the lean connection
    pauses reading at LEAN_READ_LIMIT, and nothing ever resumes it: the request is neither
    answered nor handed off until the idle sweep closes the connection (75-90 s)."""
    target = "/v0/entity?id=" + "%FF" * MAX_KEY
    got = {
        name: get_sent_in_pieces(node, target)
        for name, node in zip(("lean", "plain"), nodes, strict=True)
    }
    assert got["plain"] == b"HTTP/1.1 404 Not Found", got
    assert got["lean"] == got["plain"], got


# -- 3. an unfinished head with a byte llhttp refuses -----------------------------------


@rule("5.1")
def test_an_unfinished_head_with_a_byte_llhttp_refuses_is_refused_at_once(
    nodes: tuple[Node, Node],
) -> None:
    """aiohttp answers 400 (and closes) at the first byte llhttp refuses; the lean parser
    only checks a head once its blank line has come (bare LFs aside), so a client that
    sent a malformed head and waits for the answer gets nothing for 75-90 s."""
    cases = {
        "a header line without a colon": b"GET /v0/entity?id=a HTTP/1.1\r\nBad Header\r\n",
        "a space before the colon": b"GET /v0/entity?id=a HTTP/1.1\r\nHost : x\r\n",
        "a control byte in a value": b"GET /v0/entity?id=a HTTP/1.1\r\nHost: x\r\nX: \x01\r\n",
        "a folded header line": b"GET /v0/entity?id=a HTTP/1.1\r\nHost: x\r\n folded\r\n",
        "a control byte in the target": b"GET /v0/entity?id=\x01",
        "HTTP/1.2": b"GET /v0/entity?id=a HTTP/1.2",
    }
    differences = []
    for name, data in cases.items():
        got = []
        for node in nodes:
            with connect(node) as sock:
                sock.sendall(data)
                got.append(first_answer(sock, within=2.0))
        if got[0] != got[1]:
            differences.append(f"{name}: lean {got[0]!r}, plain {got[1]!r}")
    assert not differences, "\n".join(differences)


# -- 4. Connection: close with a body left unread ----------------------------------------


def refused_then_body(node: Node, *extra: str) -> str:
    """A PUT refused (bad replicas) before its body comes; the client then sends the
    body in 8 KiB writes, and reads the answer."""
    length = 60_000
    with connect(node) as sock:
        sock.sendall(
            request(
                "PUT",
                "/v0/entity?id=refused&replicas=0/1",
                None,
                *extra,
                f"Content-Length: {length}",
            )
        )
        time.sleep(0.2)  # the 400 is written meanwhile
        try:
            for _ in range(0, length, 8192):
                sock.sendall(bytes(8192))
                time.sleep(0.02)
        except OSError as exc:
            return f"sending the body failed: {type(exc).__name__}"
        return first_answer(sock).decode("latin-1")


@rule("5.1", "7.2")
def test_a_put_with_connection_close_refused_before_its_body_lets_the_client_send_it(
    nodes: tuple[Node, Node],
) -> None:
    """af127cd reads and drops the rest of a refused body so that a client still sending
    gets its answer, but only when the connection goes on: with `Connection: close` the
    lean path still closes at once with the body unread, and the client's writes fail
    (RFC 9112 9.6); aiohttp reads the body out (lingering) before it closes."""
    got = {
        name: refused_then_body(node, "Connection: close")
        for name, node in zip(("lean", "plain"), nodes, strict=True)
    }
    assert got["plain"] == "HTTP/1.1 400 Bad Request", got
    assert got["lean"] == got["plain"], got


# -- 5. a handed-off unfinished request after EOF ----------------------------------------


@rule("5.1")
def test_an_unfinished_request_handed_off_after_eof_is_closed_at_once(
    nodes: tuple[Node, Node],
) -> None:
    """A lean GET, then the start of a HEAD, then the client's EOF, all read in one go
    while the GET is answered. af127cd passes the EOF to aiohttp as `close()`, which only
    stops after a request it answers: with no whole request handed over, aiohttp waits
    for one for its 3630 s keep-alive. aiohttp alone closes at the EOF."""
    got = {}
    for name, node in zip(("lean", "plain"), nodes, strict=True):
        with connect(node) as sock:
            node.pause()
            try:
                sock.sendall(
                    request("GET", "/v0/entity?id=a")
                    + b"HEAD /v0/entity?id=a HTTP/1.1\r\nHost: dht\r\n"
                )
                sock.shutdown(socket.SHUT_WR)
            finally:
                node.resume()
            try:
                read_until_eof(sock, within=3.0)
                got[name] = "closed"
            except TimeoutError:
                got[name] = "still open after 3 s"
    assert got["plain"] == "closed", got
    assert got["lean"] == got["plain"], got


# -- 6. HTTPS clients ---------------------------------------------------------------------


@rule("11.7", "7.9")
def test_https_clients_that_close_with_close_notify_cost_no_warning(tmp_path: Path) -> None:
    """LeanConnection.eof_received returns True (keep the transport open for answers);
    under TLS that has no effect, and asyncio/uvloop log a WARNING for it: one line per
    HTTPS connection a client closes politely (close_notify), which aiohttp's protocol
    never caused."""
    authority = LocalCA(tmp_path / "tls")
    cluster = Cluster(tmp_path, 1, ["--secret", "lean-tls-secret"])
    cluster[0].extra_args += authority.issue("node-0").flags()
    cluster.start()
    node = cluster[0]
    try:
        client = ssl.create_default_context(cafile=str(tmp_path / "tls" / "ca.pem"))
        for _ in range(3):
            raw = socket.create_connection((HOST, node.port), timeout=DEADLINE)
            with client.wrap_socket(raw, server_hostname=HOST) as tls:
                tls.sendall(request("GET", "/v0/entity?id=a"))
                assert first_answer(tls) == b"HTTP/1.1 404 Not Found"
                tls.unwrap()  # close_notify
        time.sleep(0.5)
        assert node.log_path is not None
        log = node.log_path.read_text()
    finally:
        cluster.stop()
    warnings = [line for line in log.splitlines() if "eof_received" in line]
    assert not warnings, "\n".join(warnings)
