"""SPEC.md section 2 on one node: status codes, error bodies, values and keys."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator

import pytest

from tests.fixtures import ClusterFactory
from tests.launcher import HOST, Cluster, Node, Response, entity_url, raw_get, request, wait_for

MAX_VALUE = 1024
ERROR_BODY_LIMIT = 200


def assert_plain_text_reason(response: Response) -> None:
    """Errors carry a short plain-text reason in the body (SPEC.md section 2)."""
    content_type = response.header("Content-Type") or ""
    assert content_type.startswith("text/plain"), content_type
    assert 0 < len(response.body) < ERROR_BODY_LIMIT, response.body
    assert response.text.strip(), response.body


def record_chunk(key: str, value: bytes) -> bytes:
    return key.encode() + b"\n" + value


@pytest.fixture(scope="module")
def refusing_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    """One node shared by the tests of requests it must refuse, which store nothing:
    starting a node per case would triple the time of this file."""
    cluster = Cluster(tmp_path_factory.mktemp("refusals"), 1).start()
    yield cluster[0]
    cluster.stop()


# -- status codes ----------------------------------------------------------------------


def test_status_answers_200(node: Node) -> None:
    assert request("GET", node.url + "/v0/status").status == 200


def test_put_answers_201(node: Node) -> None:
    assert node.put("k", b"v").status == 201


def test_get_answers_200_with_exactly_the_stored_value(node: Node) -> None:
    node.put("k", b"v")
    response = node.get("k")
    assert (response.status, response.body) == (200, b"v")


def test_get_of_absent_key_answers_404(node: Node) -> None:
    assert node.get("never-written").status == 404


def test_delete_answers_202(node: Node) -> None:
    node.put("k", b"v")
    assert node.delete("k").status == 202


def test_delete_of_absent_key_answers_202(node: Node) -> None:
    assert node.delete("never-written").status == 202


def test_get_after_delete_answers_404(node: Node) -> None:
    node.put("k", b"v")
    node.delete("k")
    assert node.get("k").status == 404


def test_put_after_delete_stores_the_key_again(node: Node) -> None:
    node.put("k", b"old")
    node.delete("k")
    assert node.put("k", b"new").status == 201
    response = node.get("k")
    assert (response.status, response.body) == (200, b"new")


def test_second_put_overwrites_the_value(node: Node) -> None:
    assert node.put("k", b"first").status == 201
    assert node.put("k", b"second").status == 201
    response = node.get("k")
    assert (response.status, response.body) == (200, b"second")


@pytest.mark.parametrize("query", ["", "?id=", "?replicas=1/1", "?ID=k"])
def test_missing_or_empty_id_answers_400(refusing_node: Node, query: str) -> None:
    for method in ("GET", "PUT", "DELETE"):
        body = b"v" if method == "PUT" else None
        response = request(method, refusing_node.url + "/v0/entity" + query, body=body)
        assert response.status == 400, f"{method}: {response.status} {response.text}"


@pytest.mark.parametrize("query", ["", "?start=", "?end=z", "?start=&end=z"])
def test_missing_or_empty_start_answers_400(refusing_node: Node, query: str) -> None:
    response = request("GET", refusing_node.url + "/v0/entities" + query)
    assert response.status == 400, response.text


@pytest.mark.parametrize("replicas", ["abc", "1/", "/1", "0/1", "2/1", "1/2", "-1/1", "", "1/1/1"])
def test_malformed_or_impossible_replicas_answers_400(refusing_node: Node, replicas: str) -> None:
    key = f"refused {replicas}"
    for method in ("GET", "PUT", "DELETE"):
        body = b"v" if method == "PUT" else None
        response = request(method, entity_url(refusing_node.url, key, replicas), body=body)
        assert response.status == 400, f"{method}: {response.status} {response.text}"
    assert refusing_node.get(key).status == 404, "a refused PUT must not store anything"


def test_valid_replicas_on_one_node_are_accepted(node: Node) -> None:
    assert node.put("k", b"v", replicas="1/1").status == 201
    assert node.get("k", replicas="1/1").status == 200
    assert node.delete("k", replicas="1/1").status == 202


@pytest.mark.parametrize(
    "path", ["/", "/v0/foo", "/v1/entity", "/v0/entity/", "/v0/status/x", "/v0"]
)
def test_unknown_path_answers_400(refusing_node: Node, path: str) -> None:
    response = request("GET", refusing_node.url + path)
    assert response.status == 400, response.text


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


# -- values ----------------------------------------------------------------------------


def test_empty_value_is_stored_and_returned_empty(node: Node) -> None:
    assert node.put("empty", b"").status == 201
    response = node.get("empty")
    assert (response.status, response.body) == (200, b"")


def test_one_mebibyte_binary_value_round_trips(node: Node) -> None:
    value = os.urandom(1024 * 1024)
    assert node.put("big", value).status == 201
    response = node.get("big")
    assert response.status == 200
    assert response.body == value


@pytest.mark.parametrize("size", [MAX_VALUE + 1, 2 * MAX_VALUE], ids=["max+1", "2*max"])
def test_value_above_the_max_answers_413(start_cluster: ClusterFactory, size: int) -> None:
    node = start_cluster(1, ["--max-value-bytes", str(MAX_VALUE)])[0]
    response = node.put("too-big", os.urandom(size))
    assert response.status == 413, f"{size}-byte value, {MAX_VALUE}-byte max: {response.text}"
    assert_plain_text_reason(response)
    assert node.get("too-big").status == 404


def test_node_serves_after_refusing_a_value_above_the_max(
    start_cluster: ClusterFactory,
) -> None:
    node = start_cluster(1, ["--max-value-bytes", str(MAX_VALUE)])[0]
    assert node.put("too-big", os.urandom(4 * MAX_VALUE)).status == 413
    assert request("GET", node.url + "/v0/status").status == 200
    assert node.put("small", b"v").status == 201
    assert node.get("small").body == b"v"


def test_value_of_exactly_the_max_is_accepted(start_cluster: ClusterFactory) -> None:
    node = start_cluster(1, ["--max-value-bytes", str(MAX_VALUE)])[0]
    value = os.urandom(MAX_VALUE)
    assert node.put("exact", value).status == 201
    response = node.get("exact")
    assert (response.status, response.body) == (200, value)


# -- keys ------------------------------------------------------------------------------

KEYS = {
    "non-ascii": "ключ-鍵-🔑",
    "reserved-characters": "a b&c=d/e?f#g+h%",
    "percent-escapes": "%41%2F%%zz",
    "long": "k" * 10_000,
    "long-non-ascii": "🔑" * 10_000,  # 40 000 UTF-8 bytes, 120 000 percent-encoded
}


@pytest.mark.parametrize("key", KEYS.values(), ids=KEYS.keys())
def test_key_round_trips_through_put_get_delete_and_range(node: Node, key: str) -> None:
    value = key.encode() + b"-value"
    stored = node.put(key, value)
    assert stored.status == 201, f"{len(key)}-char key: {stored.status} {stored.text[:120]}"
    response = node.get(key)
    assert (response.status, response.body) == (200, value)
    assert node.range_chunks(key).chunks == [record_chunk(key, value)]
    assert node.delete(key).status == 202
    assert node.get(key).status == 404
    assert node.range_chunks(key).chunks == []


def test_key_longer_than_the_max_answers_400_and_shorter_ones_pass(
    start_cluster: ClusterFactory,
) -> None:
    node = start_cluster(1, ["--max-key-bytes", "100"])[0]
    assert node.put("é" * 50, b"v").status == 201  # exactly 100 UTF-8 bytes
    refused = node.put("é" * 50 + "x", b"v")
    assert refused.status == 400
    assert_plain_text_reason(refused)
    assert "longer than 100 bytes" in refused.text


def test_keys_differing_only_in_encoding_are_distinct(node: Node) -> None:
    """`%41` in the URL is the key `A`; the key `%41` itself arrives as `%2541`."""
    assert request("PUT", node.url + "/v0/entity?id=%41", body=b"decoded").status == 201
    assert node.put("%41", b"literal").status == 201
    assert node.get("A").body == b"decoded"
    assert node.get("%41").body == b"literal"


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


# -- overload (SPEC.md section 4, on one node) -----------------------------------------


def test_node_past_its_in_flight_bound_answers_503_at_once(start_cluster: ClusterFactory) -> None:
    node = start_cluster(1, ["--max-in-flight", "1"])[0]
    with socket.create_connection((HOST, node.port), timeout=10.0) as slow:
        # A PUT whose body is still on its way holds the only slot until it is complete.
        slow.sendall(
            b"PUT /v0/entity?id=slow HTTP/1.1\r\nHost: dht\r\nConnection: close\r\n"
            b"Content-Length: 2\r\n\r\nx"
        )

        def timed_get() -> tuple[float, Response]:
            started = time.monotonic()
            response = node.get("other")
            return time.monotonic() - started, response

        elapsed, refused = wait_for(timed_get, lambda answer: answer[1].status == 503)
        assert refused.header("Retry-After"), refused.headers
        assert elapsed < 0.5, f"503 took {elapsed:.3f}s"
        slow.sendall(b"y")
        reply = b"".join(iter(lambda: slow.recv(65536), b""))
    assert reply.startswith(b"HTTP/1.1 201"), reply
    assert node.get("slow").body == b"xy"


# -- abuse -----------------------------------------------------------------------------

MALFORMED = {
    "bad content-length": b"GET /v0/status HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
    "bad chunk size": b"PUT /v0/entity?id=a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\n",
    "9 KB header": b"GET /v0/status HTTP/1.1\r\nX: " + b"a" * 9000 + b"\r\n\r\n",
    "TLS hello": b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 50,
    "channel garbage": b"\x00dht-replica\r\n" + b"\xff" * 20,
}


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
