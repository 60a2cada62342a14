"""SPEC.md section 7 on one node: dht's own limits and how it answers errors (405,
error reasons, 413, the key length, exact-byte keys, the in-flight bound, quiet logs)."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator

import pytest

from dht.conformance.fixtures import ClusterFactory
from dht.conformance.http_client import HOST, Response, raw_get, request, wait_for
from dht.conformance.launcher import Cluster, Node
from dht.conformance.rules import rule

pytestmark = pytest.mark.dht

MAX_VALUE = 1024
ERROR_BODY_LIMIT = 200


def assert_plain_text_reason(response: Response) -> None:
    """Errors carry a short plain-text reason in the body (rule 7.2)."""
    content_type = response.header("Content-Type") or ""
    assert content_type.startswith("text/plain"), content_type
    assert 0 < len(response.body) < ERROR_BODY_LIMIT, response.body
    assert response.text.strip(), response.body


@pytest.fixture(scope="module")
def refusing_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    """One node shared by the tests of requests it must refuse, which store nothing."""
    cluster = Cluster(tmp_path_factory.mktemp("refusals"), 1).start()
    yield cluster[0]
    cluster.stop()


@rule("7.1")
@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v0/entity?id=k"),
        ("PATCH", "/v0/entity?id=k"),
        ("PUT", "/v0/status"),
        ("DELETE", "/v0/status"),
        ("DELETE", "/v0/entities?start=a"),
        ("POST", "/v0/entities?start=a"),
        ("PUT", "/v0/entities?start=a"),
    ],
)
def test_method_a_known_path_does_not_take_answers_405(
    refusing_node: Node, method: str, path: str
) -> None:
    response = request(method, refusing_node.url + path, body=b"v")
    assert response.status == 405, response.text


@rule("7.2")
def test_errors_carry_a_short_plain_text_reason(refusing_node: Node) -> None:
    cases = [
        ("GET", "/v0/entity?id=never-written"),  # 404
        ("GET", "/v0/entity?id="),  # 400 empty id
        ("GET", "/v0/entities"),  # 400 missing start
        ("GET", "/v0/entity?id=k&replicas=2/1"),  # 400 malformed replicas
        ("GET", "/v0/foo"),  # 400 unknown path
        ("POST", "/v0/entity?id=k"),  # 405
    ]
    for method, path in cases:
        response = request(method, refusing_node.url + path)
        assert response.status >= 400, (method, path, response.status)
        assert_plain_text_reason(response)


@rule("7.3")
@pytest.mark.parametrize("size", [MAX_VALUE + 1, 2 * MAX_VALUE], ids=["max+1", "2*max"])
def test_value_above_the_max_answers_413(start_cluster: ClusterFactory, size: int) -> None:
    node = start_cluster(1, ["--max-value-bytes", str(MAX_VALUE)])[0]
    response = node.put("too-big", os.urandom(size))
    assert response.status == 413, f"{size}-byte value, {MAX_VALUE}-byte max: {response.text}"
    assert_plain_text_reason(response)
    assert node.get("too-big").status == 404


@rule("7.3")
def test_node_serves_after_refusing_a_value_above_the_max(
    start_cluster: ClusterFactory,
) -> None:
    node = start_cluster(1, ["--max-value-bytes", str(MAX_VALUE)])[0]
    assert node.put("too-big", os.urandom(4 * MAX_VALUE)).status == 413
    assert request("GET", node.url + "/v0/status").status == 200
    assert node.put("small", b"v").status == 201
    assert node.get("small").body == b"v"


@rule("7.3")
def test_value_of_exactly_the_max_is_accepted(start_cluster: ClusterFactory) -> None:
    node = start_cluster(1, ["--max-value-bytes", str(MAX_VALUE)])[0]
    value = os.urandom(MAX_VALUE)
    assert node.put("exact", value).status == 201
    response = node.get("exact")
    assert (response.status, response.body) == (200, value)


@rule("7.4", "7.2")
def test_key_longer_than_the_max_answers_400_and_shorter_ones_pass(
    start_cluster: ClusterFactory,
) -> None:
    node = start_cluster(1, ["--max-key-bytes", "100"])[0]
    assert node.put("é" * 50, b"v").status == 201  # exactly 100 UTF-8 bytes
    refused = node.put("é" * 50 + "x", b"v")
    assert refused.status == 400
    assert_plain_text_reason(refused)
    assert "longer than 100 bytes" in refused.text


@rule("7.5")
def test_keys_are_exact_bytes_so_invalid_utf8_ids_never_share_a_record(node: Node) -> None:
    """`%FF`, `%FE` and `%EF%BF%BD` (U+FFFD, what a lossy text decoding would make of the
    other two) are three keys; the range returns them in byte order, as sent."""
    ids = {"%FF": b"ff", "%FE": b"fe", "%EF%BF%BD": b"replacement"}
    for encoded, value in ids.items():
        assert request("PUT", f"{node.url}/v0/entity?id={encoded}", body=value).status == 201
    for encoded, value in ids.items():
        answer = request("GET", f"{node.url}/v0/entity?id={encoded}")
        assert (answer.status, answer.body) == (200, value), encoded
    stream = raw_get(f"{node.url}/v0/entities?start=%EF")
    assert stream.chunks == [
        b"\xef\xbf\xbd\nreplacement",
        b"\xfe\nfe",
        b"\xff\nff",
    ]
    assert request("DELETE", f"{node.url}/v0/entity?id=%FE").status == 202
    assert request("GET", f"{node.url}/v0/entity?id=%FF").body == b"ff"


@rule("7.6")
def test_node_past_its_in_flight_bound_answers_503_at_once(start_cluster: ClusterFactory) -> None:
    node, paused = start_cluster(
        2, ["--max-in-flight", "1", "--timeout", "3", "--breaker-threshold", "100"]
    )
    assert node.put("held", b"xy").status == 201
    paused.pause()
    try:
        with socket.create_connection((HOST, node.port), timeout=10.0) as holder:
            # A 2/2 GET waits for the paused replica: it holds the only slot until
            # --timeout. (A body on its way holds none: rule 7.10.)
            holder.sendall(
                b"GET /v0/entity?id=held&replicas=2/2 HTTP/1.1\r\nHost: dht\r\n"
                b"Connection: close\r\n\r\n"
            )

            def timed_get() -> tuple[float, Response]:
                started = time.monotonic()
                response = node.get("other")
                return time.monotonic() - started, response

            elapsed, refused = wait_for(timed_get, lambda answer: answer[1].status == 503)
            assert refused.header("Retry-After"), refused.headers
            assert elapsed < 0.5, f"503 took {elapsed:.3f}s"
            reply = b"".join(iter(lambda: holder.recv(65536), b""))
    finally:
        paused.resume()
    assert reply.startswith(b"HTTP/1.1 504"), reply
    assert node.get("held").body == b"xy"


MALFORMED = {
    "bad content-length": b"GET /v0/status HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
    "bad chunk size": b"PUT /v0/entity?id=a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\n",
    "9 KB header": b"GET /v0/status HTTP/1.1\r\nX: " + b"a" * 9000 + b"\r\n\r\n",
    "TLS hello": b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 50,
    "channel garbage": b"\x00dht-replica\r\n" + b"\xff" * 20,
}


@rule("7.9")
def test_malformed_requests_cost_a_few_short_log_lines_not_a_traceback_each(node: Node) -> None:
    """400 malformed requests used to add 3,100 log lines, each an ERROR with a traceback."""
    before = len(node.log_tail(100_000).splitlines())
    for _ in range(80):
        for raw in MALFORMED.values():
            with socket.create_connection((HOST, node.port), timeout=5) as sock:
                sock.sendall(raw)
                answer = sock.recv(200)
            assert answer in (b"",) or answer.startswith(b"HTTP/1.0 400"), answer[:60]
    lines = node.log_tail(100_000).splitlines()[before:]
    assert len(lines) <= 2 * len(MALFORMED), "\n".join(lines)
    assert not [line for line in lines if "Traceback" in line or " ERROR " in line], lines
    assert node.get("anything").status == 404
