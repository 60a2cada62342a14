"""SPEC.md section 2, tier `range`: `GET /v0/entities` on one node: the span, the order
and the chunks, with the course's keys (rule 1.6). Non-ASCII keys and bounds are the
`strict` tier's (test_strict.py).

Records are read with their chunked framing kept (`Node.range_chunks`): each chunk must
be exactly one record, `key` `\\n` `value`, so the chunks are compared as a whole.
"""

from __future__ import annotations

import random

import pytest

from dht.conformance.http_client import expect, request
from dht.conformance.launcher import Node
from dht.conformance.rules import rule

pytestmark = pytest.mark.range


def record(key: str, value: bytes) -> bytes:
    return key.encode() + b"\n" + value


def put_all(node: Node, items: dict[str, bytes]) -> None:
    for key, value in items.items():
        expect(node.put(key, value), 201, context=f"PUT {key[:20]!r}")


def chunks(node: Node, start: str, end: str | None = None) -> list[bytes]:
    response = node.range_chunks(start, end)
    expect(response, 200)
    return response.chunks


ABC = {"a": b"1", "b": b"2", "c": b"3"}


@rule("2.1")
def test_range_of_an_empty_store_answers_200_with_an_empty_body(node: Node) -> None:
    response = node.range("a")
    assert (response.status, response.body) == (200, b"")


@rule("2.1")
def test_range_with_no_key_in_the_span_is_empty(node: Node) -> None:
    put_all(node, ABC)
    assert chunks(node, "d") == []
    assert chunks(node, "a0", "a1") == []


@rule("2.1")
def test_range_with_end_equal_to_start_is_empty(node: Node) -> None:
    put_all(node, ABC)
    assert chunks(node, "b", "b") == []


@rule("2.1")
def test_range_with_end_before_start_is_empty(node: Node) -> None:
    put_all(node, ABC)
    assert chunks(node, "c", "a") == []


@rule("2.1")
def test_range_start_is_inclusive(node: Node) -> None:
    put_all(node, ABC)
    assert chunks(node, "b") == [record("b", b"2"), record("c", b"3")]


@rule("2.1")
def test_range_end_is_exclusive(node: Node) -> None:
    put_all(node, ABC)
    assert chunks(node, "a", "c") == [record("a", b"1"), record("b", b"2")]


@rule("2.1")
def test_range_bounds_need_not_be_keys(node: Node) -> None:
    put_all(node, ABC)
    assert chunks(node, "a0", "b0") == [record("b", b"2")]


@rule("2.1")
def test_range_without_end_runs_to_the_last_key(node: Node) -> None:
    items = {"a": b"1", "y": b"2", "z": b"3", "zzzz": b"4"}
    put_all(node, items)
    assert chunks(node, "b") == [record(key, items[key]) for key in ("y", "z", "zzzz")]


@rule("2.5")
def test_range_hides_deleted_keys(node: Node) -> None:
    put_all(node, ABC)
    expect(node.delete("b"), 202)
    assert chunks(node, "a") == [record("a", b"1"), record("c", b"3")]


@rule("2.5")
def test_range_shows_the_newest_value_of_an_overwritten_key(node: Node) -> None:
    put_all(node, ABC)
    expect(node.put("b", b"newer"), 201)
    assert chunks(node, "a") == [record("a", b"1"), record("b", b"newer"), record("c", b"3")]


@rule("2.4")
def test_range_shows_an_empty_value_as_the_key_and_a_newline(node: Node) -> None:
    expect(node.put("empty", b""), 201)
    assert chunks(node, "a") == [b"empty\n"]


@rule("2.3")
def test_range_is_in_ascending_order_of_the_ascii_keys(node: Node) -> None:
    keys = ["a", "aa", "ab", "b", "B", "Z", "a-b", "a1", "abz", "z", "0", "9-", "f3a9c0d17e2b4f6"]
    random.Random(7).shuffle(keys)
    put_all(node, {key: key.encode() for key in keys})
    assert chunks(node, "-") == [record(key, key.encode()) for key in sorted(keys)]


@rule("2.4")
def test_range_sends_each_record_as_exactly_one_chunk(node: Node) -> None:
    items = {
        "binary": bytes(range(256)),
        "empty": b"",
        "lines": b"first\nsecond\n",
        "plain": b"value",
    }
    put_all(node, items)
    response = node.range_chunks("a")
    expect(response, 200)
    assert response.headers.get("transfer-encoding", "").lower() == "chunked", response.headers
    assert "content-length" not in response.headers
    assert response.chunks == [record(key, value) for key, value in sorted(items.items())]


@rule("2.6")
def test_range_returns_every_live_key_of_a_large_span(node: Node) -> None:
    items = {f"key-{i:04d}": f"value-{i}".encode() for i in range(500)}
    put_all(node, items)
    assert chunks(node, "key-") == [record(key, value) for key, value in sorted(items.items())]


@rule("2.2")
@pytest.mark.parametrize("query", ["", "?start=", "?end=z", "?start=&end=z"])
def test_missing_or_empty_start_answers_400(node: Node, query: str) -> None:
    expect(request("GET", node.url + "/v0/entities" + query), 400, context=f"?{query}")
