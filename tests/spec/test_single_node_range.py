"""SPEC.md section 2, `GET /v0/entities` on one node: the span, the order and the chunks.

Records are read with their chunked framing kept (`Node.range_chunks`): each chunk must
be exactly one record, `key` `\\n` `value`, so the chunks are compared as a whole.
"""

from __future__ import annotations

import random

from tests.launcher import Node


def record(key: str, value: bytes) -> bytes:
    return key.encode() + b"\n" + value


def put_all(node: Node, items: dict[str, bytes]) -> None:
    for key, value in items.items():
        assert node.put(key, value).status == 201, key


def chunks(node: Node, start: str, end: str | None = None) -> list[bytes]:
    response = node.range_chunks(start, end)
    assert response.status == 200, response.body
    return response.chunks


ABC = {"a": b"1", "b": b"2", "c": b"3"}


def test_range_of_an_empty_store_answers_200_with_an_empty_body(node: Node) -> None:
    response = node.range("a")
    assert (response.status, response.body) == (200, b"")


def test_range_with_no_key_in_the_span_is_empty(node: Node) -> None:
    put_all(node, ABC)
    assert chunks(node, "d") == []
    assert chunks(node, "a0", "a1") == []


def test_range_with_end_equal_to_start_is_empty(node: Node) -> None:
    put_all(node, ABC)
    assert chunks(node, "b", "b") == []


def test_range_with_end_before_start_is_empty(node: Node) -> None:
    put_all(node, ABC)
    assert chunks(node, "c", "a") == []


def test_range_start_is_inclusive(node: Node) -> None:
    put_all(node, ABC)
    assert chunks(node, "b") == [record("b", b"2"), record("c", b"3")]


def test_range_end_is_exclusive(node: Node) -> None:
    put_all(node, ABC)
    assert chunks(node, "a", "c") == [record("a", b"1"), record("b", b"2")]


def test_range_bounds_need_not_be_keys(node: Node) -> None:
    put_all(node, ABC)
    assert chunks(node, "a0", "b0") == [record("b", b"2")]


def test_range_without_end_runs_to_the_last_key(node: Node) -> None:
    items = {"a": b"1", "z": b"2", "zzzz": b"3", "🔑": b"4"}
    put_all(node, items)
    assert chunks(node, "b") == [record(key, items[key]) for key in ("z", "zzzz", "🔑")]


def test_range_hides_deleted_keys(node: Node) -> None:
    put_all(node, ABC)
    assert node.delete("b").status == 202
    assert chunks(node, "a") == [record("a", b"1"), record("c", b"3")]


def test_range_shows_the_newest_value_of_an_overwritten_key(node: Node) -> None:
    put_all(node, ABC)
    assert node.put("b", b"newer").status == 201
    assert chunks(node, "a") == [record("a", b"1"), record("b", b"newer"), record("c", b"3")]


def test_range_shows_an_empty_value_as_the_key_and_a_newline(node: Node) -> None:
    assert node.put("empty", b"").status == 201
    assert chunks(node, "a") == [b"empty\n"]


def test_range_is_in_ascending_byte_order_of_the_utf8_keys(node: Node) -> None:
    keys = ["a", "aa", "ab", "b", "B", "Z", "a b", "a~", "abé", "abz", "z", "é", "ё"]
    keys += ["ключ", "ключ-2", "鍵", "🔑", "~"]
    random.Random(7).shuffle(keys)
    put_all(node, {key: key.encode() for key in keys})
    ordered = sorted(keys, key=lambda key: key.encode())
    assert chunks(node, "!") == [record(key, key.encode()) for key in ordered]


def test_range_sends_each_record_as_exactly_one_chunk(node: Node) -> None:
    items = {
        "binary": bytes(range(256)),
        "empty": b"",
        "lines": b"first\nsecond\n",
        "plain": b"value",
    }
    put_all(node, items)
    response = node.range_chunks("a")
    assert response.status == 200
    assert response.headers.get("transfer-encoding", "").lower() == "chunked", response.headers
    assert "content-length" not in response.headers
    assert response.chunks == [record(key, value) for key, value in sorted(items.items())]


def test_range_returns_every_live_key_of_a_large_span(node: Node) -> None:
    items = {f"key-{i:04d}": f"value-{i}".encode() for i in range(500)}
    put_all(node, items)
    assert chunks(node, "key-") == [record(key, value) for key, value in sorted(items.items())]
