"""SPEC.md rule 8.5, `GET /v0/entities` on real clusters: the range spans every
node's shard, merges copies by key keeping the newest version, drops tombstones, and
needs N - quorum(N) + 1 nodes to answer (of each node list, during a membership change).

Each chunk of the stream is one record, `key` `\\n` `value` (keys hold no newline), so
the answer is read chunk by chunk (`Node.range_chunks`).
"""

from __future__ import annotations

import json

import pytest

from dht.conformance.fixtures import ClusterFactory
from dht.conformance.http_client import expect, request
from dht.conformance.launcher import Cluster, Node
from dht.conformance.rules import rule
from dht.model.record import Record
from dht.transport.messages import Stored

pytestmark = pytest.mark.dht

PATIENT_BREAKERS = ["--breaker-threshold", "100"]
# Keys whose byte order differs from a case-insensitive or numeric order, and a key
# beyond ASCII (UTF-8 0xC3 0xA9 sorts after every ASCII byte).
KEYS = [f"{prefix}{i}" for i in range(20) for prefix in ("A", "a", "B", "key-", "é")]


def entries(node: Node, start: str, end: str | None = None) -> list[tuple[str, bytes]]:
    response = node.range_chunks(start, end)
    assert response.status == 200, (node.url, response.status, response.body)
    pairs = [chunk.partition(b"\n") for chunk in response.chunks]
    return [(key.decode(), value) for key, _, value in pairs]


def expected(
    items: dict[str, bytes], start: str, end: str | None = None
) -> list[tuple[str, bytes]]:
    low, high = start.encode(), None if end is None else end.encode()
    keys = [k for k in items if k.encode() >= low and (high is None or k.encode() < high)]
    return [(key, items[key]) for key in sorted(keys, key=str.encode)]


def write_then_delete_some(cluster: Cluster, replicas: str | None) -> dict[str, bytes]:
    """Writes KEYS through every node in turn, deletes every seventh through another node,
    and returns the live keys with their values."""
    live: dict[str, bytes] = {}
    for i, key in enumerate(KEYS):
        value = f"value of {key}".encode()
        assert cluster[i % len(cluster)].put(key, value, replicas).status == 201, key
        live[key] = value
    for i, key in enumerate(KEYS[::7]):
        assert cluster[(i + 1) % len(cluster)].delete(key, replicas).status == 202, key
        del live[key]
    return live


@rule("8.5")
def test_range_from_every_node_spans_the_cluster_in_byte_order(
    start_cluster: ClusterFactory,
) -> None:
    cluster = start_cluster(3)
    live = write_then_delete_some(cluster, None)
    for node in cluster:
        assert entries(node, "0") == expected(live, "0"), node.url
        assert entries(node, "B", "key-2") == expected(live, "B", "key-2"), node.url


@rule("8.5", "11.3")
def test_range_merges_the_shards_of_every_node(start_cluster: ClusterFactory) -> None:
    """With one copy of each key, the range must read every node to see every key."""
    cluster = start_cluster(3)
    live = write_then_delete_some(cluster, "1/1")
    shards = [set(node.local_records()) for node in cluster]
    assert all(shards), "a node holds no key: the test shows nothing"
    for node in cluster:
        assert entries(node, "0") == expected(live, "0"), node.url


@rule("8.5")
def test_range_keeps_the_newest_version_of_each_key_and_drops_tombstones(
    start_cluster: ClusterFactory,
) -> None:
    """Copies that disagree, planted through the internal API (never forwarded)."""
    cluster = start_cluster(3)
    planted: dict[str, list[Record | None]] = {
        "deleted-after": [Record.live(100, b"old"), Record.deleted(200), None],
        "deleted-before": [Record.deleted(100), None, Record.live(200, b"recreated")],
        "overwritten": [
            Record.live(100, b"old"),
            Record.live(300, b"new"),
            Record.live(200, b"mid"),
        ],
        "one-copy": [None, None, Record.live(100, b"alone")],
        "all-deleted": [Record.deleted(100), Record.deleted(100), Record.deleted(100)],
    }
    for key, copies in planted.items():
        for node, record in zip(cluster, copies, strict=True):
            if record is not None:
                assert node.put_local(key, record) == Stored(1, True), (key, node.url)
    want = [("deleted-before", b"recreated"), ("one-copy", b"alone"), ("overwritten", b"new")]
    for node in cluster:
        assert entries(node, "a") == want, node.url


@rule("8.5")
def test_range_with_one_of_three_nodes_down_sees_every_quorum_write(
    start_cluster: ClusterFactory,
) -> None:
    cluster = start_cluster(3, PATIENT_BREAKERS)
    live = write_then_delete_some(cluster, "2/3")
    cluster[1].stop()
    for node in (cluster[0], cluster[2]):
        assert entries(node, "0") == expected(live, "0"), node.url


@rule("8.5")
def test_range_with_two_of_three_nodes_down_answers_504(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(3, PATIENT_BREAKERS)
    assert cluster[0].put("k", b"v").status == 201
    cluster[1].stop()
    cluster[2].stop()
    response = cluster[0].range("0")
    assert response.status == 504, (response.status, response.body)
    assert "Not Enough Replicas" in response.text


@rule("8.5")
def test_range_on_two_nodes_answers_with_one_down(start_cluster: ClusterFactory) -> None:
    """N - quorum(N) + 1 is 1 on two nodes: with 2/2 writes either node has every key."""
    cluster = start_cluster(2, PATIENT_BREAKERS)
    live = write_then_delete_some(cluster, "2/2")
    cluster[0].stop()
    assert entries(cluster[1], "0") == expected(live, "0")


@rule("8.5")
def test_range_bounds_that_need_percent_encoding_reach_every_node_intact(
    start_cluster: ClusterFactory,
) -> None:
    """The peers' local ranges were asked from the bound encoded twice (`%3A` became
    `%253A`): a range from `:` returned `&`, which sorts before it."""
    cluster = start_cluster(3)
    for key in ("&", ":", ":a", "b"):
        assert cluster[0].put(key, b"v", "3/3").status == 201
    for node in cluster:
        assert entries(node, ":", "b") == [(":", b"v"), (":a", b"v")], node.url


@rule("8.5", "13.3")
def test_range_during_a_shrink_needs_enough_nodes_of_each_node_list(
    start_cluster: ClusterFactory,
) -> None:
    """5 -> 3 held in the joint step. A write there at 2/3 (a quorum of the new list)
    is acknowledged by 2 of the key's 3 replicas in each list, so with three nodes down
    it may sit on just the two new nodes left. With those two down and the other three
    back, three of the five old nodes answer, which is the old list's N - quorum(N) + 1,
    but only one of the three new ones: the range must not answer as if it were whole."""
    cluster = start_cluster(5, PATIENT_BREAKERS)
    removed, kept = cluster.nodes[:2], cluster.nodes[2:]
    before = {f"before-{i}": f"value {i}".encode() for i in range(10)}
    for key, value in before.items():
        expect(cluster[0].put(key, value), 201, context=key)
    joint = {
        "epoch": 1,
        "phase": "joint",
        "current": sorted(cluster.urls),
        "next": sorted(node.url for node in kept),
    }
    for node in cluster:
        answer = request("PUT", node.url + "/v0/admin/topology", json.dumps(joint).encode())
        expect(answer, 200, context=node.url)

    down = [*removed, kept[0]]
    for node in down:
        node.stop()
    acknowledged = dict(before)
    for i in range(60):  # only keys whose old replicas include both live nodes succeed
        key, value = f"joint-{i}", f"value {i}".encode()
        if kept[1].put(key, value, "2/3").status == 201:
            acknowledged[key] = value
    assert len(acknowledged) > len(before), "no write was acknowledged: the test shows nothing"

    for node in kept[1:]:
        node.stop()
    for node in down:
        node.start()
    response = removed[0].range_chunks("\x00")
    if response.status == 200:
        got = {chunk.partition(b"\n")[0].decode() for chunk in response.chunks}
        missing = sorted(set(acknowledged) - got)
        pytest.fail(
            f"200, whole, without {len(missing)} of the {len(acknowledged)} acknowledged "
            f"keys: {missing[:5]}"
        )
    assert response.status == 504, (response.status, response.body)

    # Two of the three new nodes and four of the five old ones: enough of each. Writes
    # that were refused may show too (they reached the nodes that were up).
    kept[1].start()
    whole = dict(entries(removed[0], "\x00"))
    assert {key: whole.get(key) for key in acknowledged} == acknowledged
