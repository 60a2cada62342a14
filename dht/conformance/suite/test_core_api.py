"""SPEC.md section 1, tier `core`: one node's client API, as the course's own tests ask
it (status codes, the 400 rules, 1 KiB values and the course's keys round-tripping).
What dht keeps beyond that, large values, any key, malformed `replicas`, is the
`strict` tier's (test_strict.py)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dht.conformance.http_client import entity_url, expect, request
from dht.conformance.launcher import Cluster, Node
from dht.conformance.rules import rule
from dht.conformance.running_cluster import RunningCluster

pytestmark = pytest.mark.core

READY_WITHIN = 1.0  # rule 1.1


@pytest.fixture(scope="module")
def refusing_node(
    tmp_path_factory: pytest.TempPathFactory, given_cluster: RunningCluster | None
) -> Iterator[Node]:
    """One node shared by the tests of requests it must refuse, which store nothing:
    starting a node per case would triple the time of this file. On a running cluster
    (--nodes), its first node."""
    if given_cluster is not None:
        yield given_cluster[0]
        return
    cluster = Cluster(tmp_path_factory.mktemp("refusals"), 1).start()
    yield cluster[0]
    cluster.stop()


@pytest.fixture
def unstarted_node(tmp_path: Path) -> Iterator[Node]:
    """A single-node cluster's node whose process is not started yet."""
    node = Cluster(tmp_path / "unstarted", 1)[0]
    yield node
    node.stop()


# -- status codes ----------------------------------------------------------------------


@rule("1.1")
def test_status_answers_200(node: Node) -> None:
    expect(request("GET", node.url + "/v0/status"), 200)


@rule("1.1")
@pytest.mark.alone  # a second of wall clock: on a machine busy with other tests, a start is slower
def test_status_answers_200_within_one_second_of_process_start(unstarted_node: Node) -> None:
    started = time.monotonic()
    unstarted_node.start(wait=False)
    unstarted_node.wait_ready()
    elapsed = time.monotonic() - started
    assert elapsed < READY_WITHIN, f"first 200 after {elapsed:.3f}s"


@rule("1.1")
def test_nothing_answers_before_start(unstarted_node: Node) -> None:
    with pytest.raises(ConnectionRefusedError):
        request("GET", unstarted_node.url + "/v0/status", timeout=2.0)


@rule("1.2")
def test_put_answers_201(node: Node) -> None:
    expect(node.put("k", b"v"), 201)


@rule("1.3")
def test_get_answers_200_with_exactly_the_stored_value(node: Node) -> None:
    expect(node.put("k", b"v"), 201)
    expect(node.get("k"), 200, b"v")


@rule("1.4")
def test_get_of_absent_key_answers_404(node: Node) -> None:
    expect(node.get("never-written"), 404)


@rule("1.5")
def test_delete_answers_202(node: Node) -> None:
    expect(node.put("k", b"v"), 201)
    expect(node.delete("k"), 202)


@rule("1.5")
def test_delete_of_absent_key_answers_202(node: Node) -> None:
    expect(node.delete("never-written"), 202)


@rule("1.4", "1.5")
def test_get_after_delete_answers_404(node: Node) -> None:
    expect(node.put("k", b"v"), 201)
    expect(node.delete("k"), 202)
    expect(node.get("k"), 404)


@rule("1.5")
def test_put_after_delete_stores_the_key_again(node: Node) -> None:
    expect(node.put("k", b"old"), 201)
    expect(node.delete("k"), 202)
    expect(node.put("k", b"new"), 201)
    expect(node.get("k"), 200, b"new")


@rule("1.3")
def test_second_put_overwrites_the_value(node: Node) -> None:
    expect(node.put("k", b"first"), 201)
    expect(node.put("k", b"second"), 201)
    expect(node.get("k"), 200, b"second")


@rule("1.7")
@pytest.mark.parametrize("query", ["", "?id=", "?replicas=1/1", "?ID=k"])
def test_missing_or_empty_id_answers_400(refusing_node: Node, query: str) -> None:
    for method in ("GET", "PUT", "DELETE"):
        body = b"v" if method == "PUT" else None
        response = request(method, refusing_node.url + "/v0/entity" + query, body=body)
        expect(response, 400, context=f"{method} /v0/entity{query}")


@rule("1.8")
@pytest.mark.parametrize("replicas", ["0/1", "2/1"])
def test_replicas_with_no_ack_or_more_acks_than_replicas_answer_400(
    refusing_node: Node, replicas: str
) -> None:
    key = "refused-" + replicas.replace("/", "-of-")
    for method in ("GET", "PUT", "DELETE"):
        body = b"v" if method == "PUT" else None
        url = entity_url(refusing_node.url, refusing_node.key(key), replicas)
        response = request(method, url, body=body)
        expect(response, 400, context=f"{method} with replicas={replicas}")
    expect(refusing_node.get(key), 404, context="after a refused PUT")


@rule("1.8")
def test_valid_replicas_on_one_node_are_accepted(node: Node) -> None:
    expect(node.put("k", b"v", replicas="1/1"), 201)
    expect(node.get("k", replicas="1/1"), 200, b"v")
    expect(node.delete("k", replicas="1/1"), 202)


@rule("1.9")
@pytest.mark.parametrize(
    "path", ["/", "/v0/foo", "/v1/entity", "/v0/entity/", "/v0/status/x", "/v0"]
)
def test_unknown_path_answers_400(refusing_node: Node, path: str) -> None:
    expect(request("GET", refusing_node.url + path), 400, context=f"GET {path}")


# -- values ----------------------------------------------------------------------------


@rule("1.3")
def test_empty_value_is_stored_and_returned_empty(node: Node) -> None:
    expect(node.put("empty", b""), 201)
    expect(node.get("empty"), 200, b"")


@rule("1.3")
def test_one_kibibyte_binary_value_round_trips(node: Node) -> None:
    """The course's value: 1,024 random bytes."""
    value = os.urandom(1024)
    expect(node.put("binary", value), 201)
    expect(node.get("binary"), 200, value)


# -- keys ------------------------------------------------------------------------------

# The course's keys: Long.toHexString of a random long (1 to 16 hexadecimal
# characters), and words such as `absent`.
KEYS = {
    "sixteen-hex": "8f3a9c0d17e2b4f6",
    "short-hex": "3e7",
    "word": "absent",
    "letters-digits-dash": "Key-42-x",
}


@rule("1.6")
@pytest.mark.parametrize("key", KEYS.values(), ids=KEYS.keys())
def test_key_round_trips_through_put_get_and_delete(node: Node, key: str) -> None:
    value = key.encode() + b"-value"
    expect(node.put(key, value), 201, context=f"key {key!r}")
    expect(node.get(key), 200, value, context=f"key {key!r}")
    expect(node.delete(key), 202, context=f"key {key!r}")
    expect(node.get(key), 404, context=f"key {key!r}")
