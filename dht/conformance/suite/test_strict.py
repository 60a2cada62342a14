"""SPEC.md section 16, tier `strict`: what dht keeps beyond the course's contract, which
the course's own tests never send (1 MiB values, any key, malformed `replicas`, `F`
beyond the cluster, UTF-8 order). A correct course implementation may fail these; the
report keeps them apart from the course's tiers (core, range, replication)."""

from __future__ import annotations

import os
import random

import pytest

from dht.conformance.fixtures import ClusterFactory
from dht.conformance.http_client import entity_url, expect, request
from dht.conformance.launcher import Node
from dht.conformance.rules import rule

pytestmark = pytest.mark.strict


# -- 16.1: large values ----------------------------------------------------------------


@rule("16.1")
def test_one_mebibyte_binary_value_round_trips(node: Node) -> None:
    value = os.urandom(1024 * 1024)
    expect(node.put("big", value), 201)
    expect(node.get("big"), 200, value)


# -- 16.2: any key ---------------------------------------------------------------------

KEYS = {
    "non-ascii": "ключ-鍵-🔑",
    "reserved-characters": "a b&c=d/e?f#g+h%",
    "percent-escapes": "%41%2F%%zz",
    "long": "k" * 10_000,
    "long-non-ascii": "🔑" * 10_000,  # 40 000 UTF-8 bytes, 120 000 percent-encoded
}


@rule("16.2")
@pytest.mark.parametrize("key", KEYS.values(), ids=KEYS.keys())
def test_any_key_round_trips_through_put_get_and_delete(node: Node, key: str) -> None:
    value = key.encode() + b"-value"
    context = f"{len(key)}-character key {key[:20]!r}"
    expect(node.put(key, value), 201, context=context)
    expect(node.get(key), 200, value, context=context)
    expect(node.delete(key), 202, context=context)
    expect(node.get(key), 404, context=context)


@rule("16.2")
def test_keys_differing_only_in_encoding_are_distinct(node: Node) -> None:
    """`%41` in the URL is the key `A`; the key `%41` itself arrives as `%2541`."""
    expect(request("PUT", node.url + "/v0/entity?id=%41", body=b"decoded"), 201)
    expect(node.put("%41", b"literal"), 201)
    expect(node.get("A"), 200, b"decoded")
    expect(node.get("%41"), 200, b"literal")


# -- 16.3: replicas the course never sends ---------------------------------------------

MALFORMED = ["abc", "1/", "/1", "-1/1", "", "1/1/1", "1.0/1", "a/b"]


def refused_everywhere(node: Node, key: str, replicas: str) -> None:
    for method in ("GET", "PUT", "DELETE"):
        body = b"v" if method == "PUT" else None
        response = request(method, entity_url(node.url, key, replicas), body=body)
        expect(response, 400, context=f"{method} with replicas={replicas}")


@rule("16.3")
@pytest.mark.parametrize("replicas", [*MALFORMED, "1/2"])
def test_malformed_replicas_or_more_replicas_than_one_node_answer_400(
    node: Node, replicas: str
) -> None:
    refused_everywhere(node, "refused", replicas)
    expect(node.get("refused"), 404, context="after a refused PUT")


@rule("16.3")
def test_malformed_replicas_or_more_replicas_than_the_cluster_answer_400(
    start_cluster: ClusterFactory,
) -> None:
    two = start_cluster(2)
    for replicas in ["1/3", "3/3"]:
        refused_everywhere(two[1], "k", replicas)
    three = start_cluster(3)
    for replicas in [*MALFORMED, "2/4", "1/3/3"]:
        refused_everywhere(three[0], "k", replicas)
    for node in [*two, *three]:
        expect(node.get("k"), 404, context=f"{node.url} after refused PUTs")


# -- 16.4: ranges over any key ---------------------------------------------------------


def range_records(node: Node, start: str, end: str | None = None) -> list[bytes]:
    response = node.range_chunks(start, end)
    expect(response, 200)
    return response.chunks


def record(key: str, value: bytes) -> bytes:
    return key.encode() + b"\n" + value


@rule("16.4")
def test_range_is_in_ascending_byte_order_of_the_utf8_keys(node: Node) -> None:
    keys = ["a", "aa", "ab", "b", "B", "Z", "a b", "a~", "abé", "abz", "z", "é", "ё"]
    keys += ["ключ", "ключ-2", "鍵", "🔑", "~"]
    random.Random(7).shuffle(keys)
    for key in keys:
        expect(node.put(key, key.encode()), 201, context=f"PUT {key!r}")
    ordered = sorted(keys, key=lambda key: key.encode())
    assert range_records(node, "!") == [record(key, key.encode()) for key in ordered]


@rule("16.4")
@pytest.mark.parametrize("key", [KEYS["non-ascii"], KEYS["reserved-characters"], "k" * 10_000])
def test_range_bounds_are_read_like_any_key(node: Node, key: str) -> None:
    expect(node.put(key, b"value"), 201, context=f"PUT {key[:20]!r}")
    assert range_records(node, key) == [record(key, b"value")]
    assert range_records(node, key, key + "\x00") == [record(key, b"value")]
    expect(node.delete(key), 202)
    assert range_records(node, key) == []
