"""SPEC.md section 5 on real node processes: oversized heads, bodies on GET and DELETE,
slow clients, idle connections, a burst far over capacity and bad percent-encoding.

Black-box: only the v0 API, nodes started through the fixtures, so the same tests grade
another implementation (DHT_NODE_COMMAND). Every abuse runs inside `unharmed(node)`,
which writes a handful of values before it and checks after it that /v0/status answers
200 and every one of them reads back unchanged (rule 5.8). Requests are spoken by hand
over bare sockets (dht/conformance/fuzz/exchange.py reads the answers): http.client would refuse
to send most of them and would hide how the node ended the exchange.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from dht.conformance.fixtures import ClusterFactory
from dht.conformance.fuzz.exchange import (
    HANG_SECONDS,
    Answer,
    BrokenResponse,
    End,
    Exchange,
    dechunk,
    parse_answer,
)
from dht.conformance.http_client import HOST, Response, entity_url, request
from dht.conformance.launcher import Node, dht_tuning
from dht.conformance.rules import rule

pytestmark = pytest.mark.robustness

KiB = 1024
MiB = 1024 * KiB
# A request a node serves normally must come back within this, abuse or not.
PROMPT_SECONDS = 2.0
# Values written before an abuse and read back after it (rule 5.8).
WITNESSES = 6


def unique(label: str) -> str:
    """A key no other test, run or fuzzer writes."""
    return f"{label}-{uuid.uuid4().hex}"


# -- rule 5.8 around every abuse -------------------------------------------------------------


@contextlib.contextmanager
def unharmed(node: Node) -> Iterator[dict[str, bytes]]:
    """Rule 5.8 around an abuse: writes WITNESSES values first (each must be acknowledged,
    the node being idle), then, once the abuse is over, checks that the node still runs,
    that /v0/status answers 200 and that every witness reads back byte for byte. Yields
    the witnesses, key -> value."""
    rng = random.Random(0x5_8)
    sizes = [0, 1, 100, 1 * KiB, 4 * KiB, 64 * KiB][:WITNESSES]
    witnesses = {unique(f"witness-{i}"): rng.randbytes(size) for i, size in enumerate(sizes)}
    for key, value in witnesses.items():
        status = node.put(key, value).status
        assert status == 201, f"PUT of witness {key} on an idle node answered {status}"
    yield witnesses
    assert node.running, f"{node.url} exited:\n{node.log_tail()}"
    status = request("GET", node.url + "/v0/status", timeout=HANG_SECONDS).status
    assert status == 200, f"/v0/status answered {status} after the abuse"
    for key, value in witnesses.items():
        response = node.get(key)
        assert (response.status, response.body) == (200, value), (
            f"witness {key} ({len(value)} bytes) acknowledged before the abuse: now "
            f"{response.status} with {len(response.body)} bytes"
        )


# -- requests spoken by hand -------------------------------------------------------------------


def head(method: str, target: str, port: int, *lines: str, body: bytes = b"") -> str:
    """An HTTP/1.1 request: `lines` are extra header lines; a body gets its length."""
    headers = [f"Host: {HOST}:{port}", *lines]
    if body or method == "PUT":
        headers.append(f"Content-Length: {len(body)}")
    return f"{method} {target} HTTP/1.1\r\n" + "".join(f"{h}\r\n" for h in headers) + "\r\n"


def wire(method: str, target: str, port: int, *lines: str, body: bytes = b"") -> bytes:
    return head(method, target, port, *lines, body=body).encode("latin-1") + body


def answer_length(data: bytes, head_method: bool = False) -> int:
    """How many bytes of `data` the first complete response takes (parse_answer has
    found one there): its head, any interim 1xx heads before it, and its framed body."""
    position = 0
    while True:
        head_end = data.index(b"\r\n\r\n", position) + 4
        status_line, *lines = data[position : head_end - 4].decode("latin-1").split("\r\n")
        status = int(status_line.split()[1])
        if 100 <= status < 200 and status != 101:
            position = head_end
            continue
        fields = {
            name.strip().lower(): value.strip()
            for name, _, value in (line.partition(":") for line in lines)
        }
        if head_method or status in (101, 204, 304):
            return head_end
        if fields.get("transfer-encoding", "").lower() == "chunked":
            dechunked = dechunk(data[head_end:])
            assert dechunked is not None
            return head_end + dechunked[1]
        if "content-length" in fields:
            return head_end + int(fields["content-length"])
        return len(data)  # delimited by the close


class RawConnection:
    """One client connection spoken by hand: bytes sent as they are, answers read one at
    a time (several may come on one keep-alive connection), each against a deadline."""

    def __init__(self, port: int, deadline: float = HANG_SECONDS) -> None:
        self.sock = socket.create_connection((HOST, port), timeout=deadline)
        self.buffer = bytearray()
        self.eof = False
        self.reset = False

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def send(self, data: bytes, deadline: float = HANG_SECONDS) -> str | None:
        """Sends every byte; returns None, or how the node stopped reading them."""
        self.sock.settimeout(deadline)
        try:
            self.sock.sendall(data)
        except TimeoutError:
            return f"the node stopped reading for {deadline} s without closing"
        except (BrokenPipeError, ConnectionResetError) as error:
            return f"the node closed while we sent ({type(error).__name__})"
        return None

    def answer(self, deadline: float = HANG_SECONDS, head_method: bool = False) -> Exchange:
        """The next complete answer, or how the exchange ended without one: a close, a
        reset, bytes that are not HTTP, or nothing at all within `deadline` (a hang)."""
        started = time.monotonic()

        def ended(end: End, answer: Answer | None = None) -> Exchange:
            return Exchange(end, answer, bytes(self.buffer), time.monotonic() - started)

        while True:
            try:
                answer = parse_answer(bytes(self.buffer), head_method, at_eof=self.eof)
            except BrokenResponse:
                return ended(End.GARBLED)
            if answer is not None:
                result = ended(End.ANSWERED, answer)
                del self.buffer[: answer_length(bytes(self.buffer), head_method)]
                return result
            if self.reset:
                return ended(End.RESET)
            if self.eof:
                return ended(End.CLOSED)
            remaining = deadline - (time.monotonic() - started)
            if remaining <= 0:
                return ended(End.HUNG)
            self.receive(remaining)

    def rest(self, deadline: float = HANG_SECONDS) -> bytes:
        """Every byte the node sends from here until it closes (or resets) the connection."""
        started = time.monotonic()
        while not (self.eof or self.reset):
            remaining = deadline - (time.monotonic() - started)
            assert remaining > 0, f"the connection is still open after {deadline} s"
            self.receive(remaining)
        return bytes(self.buffer)

    def receive(self, within: float) -> None:
        """One read of what the node sent, waiting at most `within` seconds: adds it to
        the buffer, or notes the close or the reset."""
        self.sock.settimeout(within)
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            return
        except ConnectionResetError:
            self.reset = True
            return
        self.eof = not data
        self.buffer += data


def send_raw(port: int, data: bytes, deadline: float = HANG_SECONDS) -> tuple[Exchange, str | None]:
    """`data` on a fresh connection and the exchange it got, with how the node stopped
    reading the bytes, if it did."""
    with RawConnection(port, deadline) as connection:
        stopped = connection.send(data, deadline)
        return connection.answer(deadline), stopped


def described(result: Exchange) -> str:
    status = "" if result.answer is None else f" {result.answer.status}"
    return (
        f"{result.end.value}{status} after {result.seconds:.2f} s, "
        f"received {result.received[:300]!r}"
    )


def status_of(result: Exchange) -> int | None:
    return None if result.answer is None else result.answer.status


def prompt(method: str, url: str, body: bytes | None = None) -> Response:
    """A request that must be answered within PROMPT_SECONDS, whatever else the node is
    being put through."""
    started = time.monotonic()
    try:
        response = request(method, url, body, timeout=PROMPT_SECONDS)
    except OSError as error:
        pytest.fail(f"{method} {url[:120]}: {error!r} after {time.monotonic() - started:.2f} s")
    seconds = time.monotonic() - started
    assert seconds < PROMPT_SECONDS, f"{method} {url[:120]} took {seconds:.2f} s"
    return response


# -- 5.3 oversized request lines and header blocks -------------------------------------------


def absent_target(length: int) -> str:
    """A GET target of exactly `length` characters naming a key that was never written:
    a node that reads it whole answers 404, which is the 4xx rule 5.3 allows."""
    prefix = f"/v0/entity?id={unique('absent')}-"
    return prefix + "k" * (length - len(prefix))


def assert_refused_or_closed(result: Exchange, what: str) -> None:
    """Rule 5.3: a 4xx, a close or a reset, soon; never a 5xx, a hang or garbage."""
    ok_answer = result.end is End.ANSWERED and 400 <= (status_of(result) or 0) < 500
    assert ok_answer or result.end in (End.CLOSED, End.RESET), f"{what}: {described(result)}"


@rule("5.3", "5.8")
@pytest.mark.parametrize("size", [64 * KiB, 1 * MiB], ids=["64KiB", "1MiB"])
def test_an_oversized_request_line_gets_a_4xx_or_a_close(node: Node, size: int) -> None:
    with unharmed(node):
        target = absent_target(size - len(" HTTP/1.1") - len("GET "))
        data = wire("GET", target, node.port)
        assert data.index(b"\r\n") == size
        result, _ = send_raw(node.port, data)
        assert_refused_or_closed(result, f"a request line of {size} bytes")


HEADER_BLOCKS = {
    "one-64KiB-header": [f"X-Padding: {'a' * 64 * KiB}"],
    "1000-headers": [f"X-Header-{i}: {i}" for i in range(1_000)],
}


@rule("5.3", "5.8")
@pytest.mark.parametrize("block", list(HEADER_BLOCKS))
def test_an_oversized_header_block_gets_a_4xx_or_a_close(node: Node, block: str) -> None:
    with unharmed(node):
        data = wire("GET", absent_target(80), node.port, *HEADER_BLOCKS[block])
        result, _ = send_raw(node.port, data)
        assert_refused_or_closed(result, f"a header block of {block}")


# -- 5.4 a body on a GET or a DELETE ------------------------------------------------------------


@rule("5.4", "5.8")
@pytest.mark.parametrize("pipelined", [False, True], ids=["in-turn", "pipelined"])
@pytest.mark.parametrize("method", ["GET", "DELETE"])
def test_a_body_on_a_get_or_delete_is_ignored_and_the_next_request_answered_as_itself(
    node: Node, method: str, pipelined: bool
) -> None:
    """The body is itself a request for a third key: a node that did not read it as a
    body would answer it in place of the next request (request smuggling)."""
    keys = {name: unique(name) for name in ("target", "next", "decoy")}
    values = {name: f"value of the {name} key".encode() for name in keys}
    with unharmed(node):
        for name, key in keys.items():
            assert node.put(key, values[name]).status == 201
        decoy = wire("GET", f"/v0/entity?id={keys['decoy']}", node.port)
        first = wire(method, f"/v0/entity?id={keys['target']}", node.port, body=decoy)
        second = wire("GET", f"/v0/entity?id={keys['next']}", node.port, "Connection: close")
        normal = {"GET": (200, values["target"]), "DELETE": (202, None)}[method]
        with RawConnection(node.port) as connection:
            assert connection.send(first + second if pipelined else first) is None
            one = connection.answer()
            assert one.answer is not None, f"{method} with a body: {described(one)}"
            refused = 400 <= one.answer.status < 500
            if normal[1] is None:
                assert refused or one.answer.status == normal[0], described(one)
            else:
                assert refused or (one.answer.status, one.answer.body) == normal, described(one)
            if not pipelined:
                stopped = connection.send(second)
                assert refused or stopped is None, f"the request after it: {stopped}"
            two = connection.answer()
            if refused and two.end in (End.CLOSED, End.RESET):
                pass  # refused, and the connection closed with it: the next goes elsewhere
            else:
                assert two.answer is not None, f"the request after it: {described(two)}"
                assert (two.answer.status, two.answer.body) == (200, values["next"]), (
                    f"the request after a {method} with a body was answered as another: "
                    f"{described(two)}"
                )
                extra = connection.rest()
                assert extra == b"", f"an answer to no request (the body run?): {extra[:300]!r}"
        deleted = method == "DELETE" and one.answer.status == 202
        target = node.get(keys["target"])
        expected = (404, b"") if deleted else (200, values["target"])
        assert (target.status, target.body if target.status == 200 else b"") == expected
        decoy_now = node.get(keys["decoy"])
        assert (decoy_now.status, decoy_now.body) == (200, values["decoy"])


# -- 5.5 a slow client --------------------------------------------------------------------------

TRICKLE_GAP = 0.1  # seconds between two bytes of a slow client
TRICKLED_BYTES = 30  # so each slow client takes about 3 s
FAST_REQUESTS = 20


class SlowPut:
    """A PUT sent from a thread, part of it one byte every TRICKLE_GAP: its head's first
    TRICKLED_BYTES then the rest at once ("head"), or its head at once then a body of
    TRICKLED_BYTES byte by byte ("body")."""

    def __init__(self, port: int, slow_part: str) -> None:
        self.port = port
        self.slow_part = slow_part
        self.key = unique(f"slow-{slow_part}")
        self.value = os.urandom(TRICKLED_BYTES // 2).hex().encode()
        self.result: Exchange | None = None
        self.stopped: str | None = None  # how the node stopped reading, if it did
        self.error: BaseException | None = None
        self.abort = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"slow {slow_part}")

    def _run(self) -> None:
        try:
            data = wire("PUT", f"/v0/entity?id={self.key}", self.port, body=self.value)
            if self.slow_part == "head":
                fast_before, slow, fast_after = b"", data[:TRICKLED_BYTES], data[TRICKLED_BYTES:]
            else:
                body_at = len(data) - len(self.value)
                fast_before, slow, fast_after = data[:body_at], data[body_at:], b""
            with RawConnection(self.port) as connection:
                self.stopped = connection.send(fast_before)
                for byte in slow:
                    if self.stopped or self.abort.wait(TRICKLE_GAP):
                        break
                    self.stopped = connection.send(bytes([byte]))
                if not self.stopped and fast_after:
                    self.stopped = connection.send(fast_after)
                self.result = connection.answer()
        except BaseException as error:
            self.error = error


@rule("5.5", "5.8")
def test_a_slow_client_holds_only_its_own_request(node: Node) -> None:
    slow_clients = [SlowPut(node.port, "head"), SlowPut(node.port, "body")]
    with unharmed(node):
        for slow in slow_clients:
            slow.thread.start()
        try:
            served_meanwhile = 0
            prefix = unique("fast")
            for i in range(FAST_REQUESTS):
                key, value = f"{prefix}-{i // 2}", f"fast value {i // 2}".encode()
                url = entity_url(node.url, key)
                if i % 2 == 0:
                    assert prompt("PUT", url, value).status == 201, f"request {i}"
                else:
                    response = prompt("GET", url)
                    assert (response.status, response.body) == (200, value), f"request {i}"
                if all(slow.thread.is_alive() for slow in slow_clients):
                    served_meanwhile += 1
                time.sleep(TRICKLE_GAP)  # pacing, so the requests span the slow ones' time
            assert served_meanwhile > 0, "the slow clients were done before any other request"
        except BaseException:
            for slow in slow_clients:
                slow.abort.set()
            raise
        finally:
            deadline = time.monotonic() + TRICKLED_BYTES * TRICKLE_GAP + 2 * HANG_SECONDS
            for slow in slow_clients:
                slow.thread.join(max(0.0, deadline - time.monotonic()))
        for slow in slow_clients:
            assert not slow.thread.is_alive(), f"the slow {slow.slow_part} client never ended"
            assert slow.error is None, f"slow {slow.slow_part} client: {slow.error!r}"
            assert slow.result is not None
            status = status_of(slow.result)
            cut_off = slow.result.end in (End.CLOSED, End.RESET) or (
                status is not None and (400 <= status < 500 or status == 503)
            )
            assert status == 201 or cut_off, (
                f"slow {slow.slow_part} PUT (node stopped reading: {slow.stopped}): "
                f"{described(slow.result)}"
            )
            if status == 201:
                response = node.get(slow.key)
                assert (response.status, response.body) == (200, slow.value)


# -- 5.6 idle connections ---------------------------------------------------------------------

IDLE_CONNECTIONS = 300


@rule("5.6", "5.8")
def test_hundreds_of_idle_connections_do_not_stop_new_ones_being_served(node: Node) -> None:
    """Idle in four ways: nothing sent, part of a request line, part of a head, a whole
    head with only part of its body."""
    partials = [
        b"",
        b"GET /v0/ent",
        f"PUT /v0/entity?id={unique('idle')} HTTP/1.1\r\nHost: {HOST}\r\n".encode(),
        wire("PUT", f"/v0/entity?id={unique('idle')}", node.port, body=b"0123456789")[:-5],
    ]
    idle: list[socket.socket] = []
    with unharmed(node):
        try:
            for i in range(IDLE_CONNECTIONS):
                try:
                    sock = socket.create_connection((HOST, node.port), timeout=HANG_SECONDS)
                    idle.append(sock)
                    sock.sendall(partials[i % len(partials)])
                except OSError as error:
                    pytest.fail(f"idle connection {i} of {IDLE_CONNECTIONS}: {error!r}")
            for i in range(FAST_REQUESTS):
                key, value = unique(f"fresh-{i}"), f"fresh value {i}".encode()
                assert prompt("PUT", entity_url(node.url, key), value).status == 201
                got = prompt("GET", entity_url(node.url, key))
                assert (got.status, got.body) == (200, value)
                assert prompt("GET", node.url + "/v0/status").status == 200
        finally:
            for sock in idle:
                sock.close()


# -- 5.7 a burst far over capacity ----------------------------------------------------------------

BURST = 400
BURST_SECONDS = 30.0
PRESENT_KEYS = 20


@dataclass(frozen=True)
class BurstRequest:
    method: str
    key: str
    value: bytes | None  # the body of a PUT; for a GET the stored value (None: absent)


async def burst_exchange(port: int, data: bytes, until: float) -> Exchange:
    """Connects, sends `data` and reads one answer, all before the loop time `until`."""
    loop = asyncio.get_running_loop()
    received = bytearray()
    began = loop.time()

    def ended(end: End, answer: Answer | None = None) -> Exchange:
        return Exchange(end, answer, bytes(received), loop.time() - began)

    try:
        async with asyncio.timeout_at(until):
            reader, writer = await asyncio.open_connection(HOST, port)
            try:
                writer.write(data)
                await writer.drain()
                while True:
                    chunk = await reader.read(65536)
                    received.extend(chunk)
                    try:
                        answer = parse_answer(bytes(received), False, at_eof=not chunk)
                    except BrokenResponse:
                        return ended(End.GARBLED)
                    if answer is not None:
                        return ended(End.ANSWERED, answer)
                    if not chunk:
                        return ended(End.CLOSED)
            finally:
                writer.close()
    except TimeoutError:
        return ended(End.HUNG)
    except OSError:  # reset, broken pipe, or refused
        return ended(End.RESET)


async def burst(port: int, requests: list[BurstRequest]) -> list[Exchange]:
    """Every request on its own connection, all started at once (each connects and
    sends as soon as it can, not waiting for the others: a node may accept slowly);
    their exchanges in order."""
    until = asyncio.get_running_loop().time() + BURST_SECONDS
    tasks = []
    for r in requests:
        body = r.value if r.method == "PUT" and r.value is not None else b""
        data = wire(r.method, entity_url("", r.key), port, "Connection: close", body=body)
        tasks.append(asyncio.create_task(burst_exchange(port, data, until)))
    return await asyncio.gather(*tasks)


@rule("5.7", "5.8")
@pytest.mark.parametrize("size", [1, 3], ids=["1-node", "3-nodes"])
def test_a_burst_far_over_capacity_gets_every_request_its_own_answer_or_a_503(
    start_cluster: ClusterFactory, size: int
) -> None:
    """On three nodes every request is coordinated, so each holds its slot longer; and
    dht's nodes there admit only 64 client requests at once (dht's default, 512, is
    more than the burst), so that the burst really is over their capacity."""
    node = start_cluster(size, dht_tuning("--max-in-flight", "64") if size > 1 else None)[0]
    rng = random.Random(0x5_7)
    present = {
        unique(f"present-{i}"): rng.randbytes(rng.randint(KiB, 4 * KiB))
        for i in range(PRESENT_KEYS)
    }
    requests: list[BurstRequest] = []
    for i in range(BURST):
        kind = i % 4
        if kind in (0, 2):
            requests.append(
                BurstRequest("PUT", unique(f"burst-{i}"), rng.randbytes(rng.randint(KiB, 4 * KiB)))
            )
        elif kind == 1:
            key = rng.choice(list(present))
            requests.append(BurstRequest("GET", key, present[key]))
        else:
            requests.append(BurstRequest("GET", unique(f"absent-{i}"), None))
    with unharmed(node):
        for key, value in present.items():
            assert node.put(key, value).status == 201
        started = time.monotonic()
        results = asyncio.run(burst(node.port, requests))
        seconds = time.monotonic() - started
        problems = []
        for r, result in zip(requests, results, strict=True):
            answer = result.answer
            if answer is None:
                problems.append(f"{r.method} {r.key}: no answer, {described(result)}")
            elif answer.status == 503:
                continue
            elif r.method == "PUT" and answer.status != 201:
                problems.append(f"PUT {r.key}: {described(result)}")
            elif r.method == "GET" and r.value is None and answer.status != 404:
                problems.append(f"GET of absent {r.key}: {described(result)}")
            elif (
                r.method == "GET"
                and r.value is not None
                and (answer.status, answer.body) != (200, r.value)
            ):
                problems.append(f"GET {r.key}: not its own value, {described(result)}")
        assert not problems, f"{len(problems)} of {BURST} in {seconds:.1f} s:\n" + "\n".join(
            problems[:20]
        )
        for r, result in zip(requests, results, strict=True):
            if r.method == "PUT" and status_of(result) == 201:
                response = node.get(r.key)
                assert (response.status, response.body) == (200, r.value), f"acknowledged {r.key}"


# -- 5.2 bad percent-encoding ---------------------------------------------------------------------

BAD_ESCAPES = [
    "%",  # a lone percent
    "%G1",  # not hex
    "%F",  # truncated
    "%%",
    "key%",  # a percent at the end
    "%FF%FE",  # bytes that are never UTF-8
    "%80",  # a lone continuation byte
    "%C3",  # a truncated two-byte sequence
    "%C0%AF",  # overlong "/"
    "%E0%80%AF",  # overlong "/" in three bytes
    "%ED%A0%80",  # a UTF-16 surrogate (U+D800)
    "%F4%90%80%80",  # past U+10FFFF
    "%F8%88%80%80%80",  # a five-byte form
    "%00",  # NUL
]


def bad_encoding_requests(escape: str) -> list[tuple[str, str, bytes]]:
    """(method, target, body) with `escape` in id, start, end and replicas. A PUT comes
    before its GET, so an acknowledged one can be read back."""
    good = unique("good")
    value = f"value for {escape}".encode()
    return [
        ("GET", f"/v0/entity?id={escape}", b""),
        ("PUT", f"/v0/entity?id={escape}", value),
        ("GET", f"/v0/entity?id={escape}", b""),
        ("DELETE", f"/v0/entity?id={escape}", b""),
        ("GET", f"/v0/entities?start={escape}", b""),
        ("GET", f"/v0/entities?start=a&end={escape}", b""),
        ("GET", f"/v0/entities?start={escape}&end={escape}z", b""),
        ("PUT", f"/v0/entity?id={good}&replicas={escape}", value),
        ("GET", f"/v0/entity?id={good}&replicas={escape}", b""),
        ("DELETE", f"/v0/entity?id={good}&replicas={escape}", b""),
        ("GET", f"/v0/entity?id={good}&replicas=1/{escape}", b""),
    ]


@rule("5.2", "5.8")
@pytest.mark.parametrize("size", [1, 3], ids=["1-node", "3-nodes"])
def test_bad_percent_encoding_gets_a_2xx_404_or_4xx_never_a_5xx(
    start_cluster: ClusterFactory, size: int
) -> None:
    node = start_cluster(size)[0]
    with unharmed(node):
        for escape in BAD_ESCAPES:
            stored: bytes | None = None
            for method, target, body in bad_encoding_requests(escape):
                result, _ = send_raw(
                    node.port, wire(method, target, node.port, "Connection: close", body=body)
                )
                status = status_of(result)
                what = f"{method} {target}"
                assert status is not None, f"{what}: no answer, {described(result)}"
                assert 200 <= status < 300 or 400 <= status < 500, f"{what}: {described(result)}"
                if method == "PUT" and "replicas" not in target:
                    stored = body if status == 201 else None
                elif method == "GET" and "replicas" not in target and stored is not None:
                    assert result.answer is not None
                    assert (status, result.answer.body) == (200, stored), (
                        f"{what} after its PUT answered 201: {described(result)}"
                    )
                    stored = None
