"""SPEC.md sections 8 and 11 on real clusters: which nodes hold a key, and how many.

Copies are counted on each node's own storage, read through the internal range
(`Node.local_records`), which is never coordinated. Writes beyond the A acknowledged ones
go on in the background, so a count that must grow is polled with a deadline.
"""

from __future__ import annotations

import pytest

from dht.conformance.fixtures import ClusterFactory
from dht.conformance.http_client import wait_for
from dht.conformance.launcher import Cluster
from dht.conformance.rules import rule
from dht.model.record import Record
from dht.transport.messages import RecordAbsent, RecordFound, Stored

pytestmark = pytest.mark.dht

KEYS = [f"key-{i:03d}" for i in range(30)]


def holders(cluster: Cluster, keys: list[str]) -> dict[str, list[int]]:
    """For each key, the indexes of the nodes that store a live record of it."""
    found: dict[str, list[int]] = {key: [] for key in keys}
    for index, node in enumerate(cluster):
        for key, record in node.local_records().items():
            if key in found and not record.tombstone:
                found[key].append(index)
    return found


def copy_counts(cluster: Cluster, keys: list[str]) -> dict[str, int]:
    return {key: len(nodes) for key, nodes in holders(cluster, keys).items()}


def put_through_every_node(cluster: Cluster, keys: list[str], replicas: str) -> None:
    for i, key in enumerate(keys):
        response = cluster[i % len(cluster)].put(key, key.encode(), replicas)
        assert response.status == 201, (key, response.status, response.text)


@rule("8.2")
def test_replicas_1_of_1_keeps_exactly_one_copy(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(3)
    put_through_every_node(cluster, KEYS, "1/1")
    assert copy_counts(cluster, KEYS) == dict.fromkeys(KEYS, 1)


@rule("8.2")
def test_replicas_2_of_2_keeps_exactly_two_copies(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(3)
    put_through_every_node(cluster, KEYS, "2/2")
    assert copy_counts(cluster, KEYS) == dict.fromkeys(KEYS, 2)


@rule("8.2")
def test_replicas_1_of_2_writes_the_second_copy_in_the_background(
    start_cluster: ClusterFactory,
) -> None:
    cluster = start_cluster(3)
    put_through_every_node(cluster, KEYS, "1/2")
    counts = wait_for(lambda: copy_counts(cluster, KEYS), lambda c: set(c.values()) == {2})
    assert counts == dict.fromkeys(KEYS, 2)


@rule("8.2")
def test_replicas_1_of_3_writes_every_copy_in_the_background(
    start_cluster: ClusterFactory,
) -> None:
    cluster = start_cluster(3)
    put_through_every_node(cluster, KEYS, "1/3")
    wait_for(lambda: copy_counts(cluster, KEYS), lambda c: set(c.values()) == {3})


@rule("8.1")
def test_replica_set_is_the_same_whichever_node_coordinates(
    start_cluster: ClusterFactory,
) -> None:
    """The same key written 1/1 through every node in turn lands on one node, which holds
    the last value."""
    cluster = start_cluster(3)
    keys = KEYS[:10]
    for key in keys:
        for index, node in enumerate(cluster):
            assert node.put(key, f"{key} via {index}".encode(), "1/1").status == 201
    placed = holders(cluster, keys)
    assert {key: len(nodes) for key, nodes in placed.items()} == dict.fromkeys(keys, 1)
    for key, (owner,) in placed.items():
        assert cluster[owner].local_records()[key].value == f"{key} via 2".encode()


@rule("8.1")
def test_replica_set_for_fewer_copies_is_a_prefix_of_the_larger_set(
    start_cluster: ClusterFactory,
) -> None:
    cluster = start_cluster(3)
    put_through_every_node(cluster, KEYS, "2/2")
    pairs = holders(cluster, KEYS)
    assert all(len(pair) == 2 for pair in pairs.values()), pairs
    # Overwritten 1/1 through another coordinator, the one copy lands inside the pair.
    for i, key in enumerate(KEYS):
        assert cluster[(i + 1) % 3].put(key, b"newer", "1/1").status == 201
    stored = [node.local_records() for node in cluster]
    for key, pair in pairs.items():
        values = [stored[index][key].value if key in stored[index] else None for index in range(3)]
        assert sorted(i for i, value in enumerate(values) if value == b"newer") in (
            [pair[0]],
            [pair[1]],
        ), (key, pair, values)


@rule("8.1")
def test_keys_spread_evenly_over_the_nodes(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(3)
    keys = [f"spread-{i}" for i in range(300)]
    put_through_every_node(cluster, keys, "1/1")
    per_node = [len(node.local_records()) for node in cluster]
    assert sum(per_node) == 300
    assert min(per_node) >= 50, per_node  # at least half of the fair share of 100


@rule("11.1")
def test_internal_write_is_never_forwarded(start_cluster: ClusterFactory) -> None:
    """A replica write touches the receiving node's storage only."""
    cluster = start_cluster(3)
    keys = KEYS[:10]
    for key in keys:
        assert cluster[0].put_local(key, Record.live(1_000, b"internal")) == Stored(1, True)
    assert holders(cluster, keys) == {key: [0] for key in keys}


@rule("11.1")
def test_internal_read_is_never_forwarded(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(3)
    key = KEYS[0]
    record = Record.live(1_000, b"internal")
    assert cluster[0].put_local(key, record) == Stored(1, True)
    assert cluster[0].get_local(key) == RecordFound(1, record)
    for node in cluster.nodes[1:]:
        assert node.get_local(key) == RecordAbsent(1), node.url
