"""SPEC.md section 3, tier `replication`, on clusters of 2 and 3 nodes: `replicas=A/F`,
quorums that overlap, and what a client sees while a node is down or after it comes
back, judged only through the public API and by stopping and starting nodes.

On dht, tests that stop a node pass a high `--breaker-threshold`, so that the failures
they cause on purpose never open a circuit (which would turn a 504 into a 503, rule
9.4); another implementation is started with its own flags only (`dht_tuning`).
"""

from __future__ import annotations

import pytest

from dht.conformance.fixtures import ClusterFactory
from dht.conformance.http_client import Response, expect
from dht.conformance.launcher import Node, dht_tuning
from dht.conformance.rules import rule

pytestmark = pytest.mark.replication

KEYS = [f"key-{i:03d}" for i in range(10)]

PATIENT_BREAKERS = dht_tuning("--breaker-threshold", "100")


def assert_value(response: Response, value: bytes, context: str = "") -> None:
    expect(response, 200, value, context=context)


def assert_not_enough_replicas(response: Response, context: str = "") -> None:
    expect(response, 504, context=context)


def every_method(node: Node, key: str, replicas: str) -> list[tuple[str, Response]]:
    return [
        ("GET", node.get(key, replicas)),
        ("PUT", node.put(key, b"value", replicas)),
        ("DELETE", node.delete(key, replicas)),
    ]


# -- the replicas parameter ------------------------------------------------------------


@rule("3.3")
def test_replicas_with_no_ack_or_more_acks_than_replicas_answer_400(
    start_cluster: ClusterFactory,
) -> None:
    """The course's tooSmallRF and tooBigRF (malformed values and `F` beyond the
    cluster are the `strict` tier's, rule 16.3)."""
    cluster = start_cluster(3)
    for replicas in ["0/3", "4/3"]:
        for method, response in every_method(cluster[0], "k", replicas):
            expect(response, 400, context=f"{method} replicas={replicas}")
    for node in cluster:
        expect(node.get("k"), 404, context=f"{node.url} after refused PUTs")


@rule("3.3")
def test_every_valid_replicas_value_is_accepted(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(3)
    for ack in range(1, 4):
        for from_ in range(ack, 4):
            replicas = f"{ack}/{from_}"
            key = f"k{ack}{from_}"
            expect(
                cluster[0].put(key, replicas.encode(), replicas),
                201,
                context=f"replicas={replicas}",
            )
            # A read quorum that overlaps the write quorum: read ack + write ack > from.
            overlapping = f"{from_ - ack + 1}/{from_}"
            assert_value(
                cluster[1].get(key, overlapping),
                replicas.encode(),
                f"GET {overlapping} after PUT {replicas}",
            )
            expect(cluster[2].delete(key, replicas), 202, context=f"replicas={replicas}")


# -- not enough replicas ---------------------------------------------------------------


@rule("3.4")
@pytest.mark.controls("stop")
def test_all_three_replicas_with_one_down_answer_504(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(3, [*dht_tuning("--timeout", "5"), *PATIENT_BREAKERS])
    expect(cluster[0].put("k", b"before", "3/3"), 201)
    cluster[2].stop()
    for node in cluster.nodes[:2]:
        for method, response in every_method(node, "k", "3/3"):
            assert_not_enough_replicas(response, f"{method} 3/3 through {node.url}, one node down")


@rule("3.4", "3.2")
@pytest.mark.controls("stop")
def test_two_of_two_with_one_node_down_answers_504(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(2, PATIENT_BREAKERS)
    expect(cluster[0].put("k", b"before", "2/2"), 201)
    cluster[1].stop()
    for method, response in every_method(cluster[0], "k", "2/2"):
        assert_not_enough_replicas(response, f"{method} 2/2, one of two nodes down")
    # The default on two nodes is 2/2 as well.
    for method, response in [
        ("GET", cluster[0].get("k")),
        ("PUT", cluster[0].put("k", b"v")),
        ("DELETE", cluster[0].delete("k")),
    ]:
        assert_not_enough_replicas(response, f"{method} without replicas, one of two nodes down")


# -- overlapping quorums, all nodes up -------------------------------------------------


@rule("3.5")
def test_get_2_of_3_sees_a_put_2_of_3(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(3)
    for i in range(10):
        expect(cluster[i % 3].put(f"k{i}", f"v{i}".encode(), "2/3"), 201)
        assert_value(cluster[(i + 1) % 3].get(f"k{i}", "2/3"), f"v{i}".encode(), f"k{i}")


@rule("3.5")
def test_get_3_of_3_sees_a_put_1_of_3(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(3)
    for i in range(10):
        expect(cluster[i % 3].put(f"k{i}", f"v{i}".encode(), "1/3"), 201)
        assert_value(cluster[(i + 1) % 3].get(f"k{i}", "3/3"), f"v{i}".encode(), f"k{i}")


@rule("3.5")
def test_get_2_of_3_sees_a_delete_2_of_3(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(3)
    for i in range(10):
        expect(cluster[i % 3].put(f"k{i}", b"doomed", "3/3"), 201)
        expect(cluster[(i + 1) % 3].delete(f"k{i}", "2/3"), 202)
        expect(cluster[(i + 2) % 3].get(f"k{i}", "2/3"), 404, context=f"k{i}")


@rule("3.5")
def test_get_1_of_2_sees_a_put_2_of_2(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(2)
    for i in range(10):
        writer, reader = cluster[i % 2], cluster[(i + 1) % 2]
        expect(writer.put(f"k{i}", f"v{i}".encode(), "2/2"), 201)
        assert_value(reader.get(f"k{i}", "1/2"), f"v{i}".encode(), f"k{i} through the other node")
        assert_value(writer.get(f"k{i}", "1/2"), f"v{i}".encode(), f"k{i} through the writer")


@rule("3.5")
def test_get_1_of_2_sees_a_delete_2_of_2(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(2)
    for i in range(10):
        writer, reader = cluster[i % 2], cluster[(i + 1) % 2]
        expect(writer.put(f"k{i}", b"doomed", "2/2"), 201)
        expect(reader.delete(f"k{i}", "2/2"), 202)
        expect(writer.get(f"k{i}", "1/2"), 404, context=f"k{i}")
        expect(reader.get(f"k{i}", "1/2"), 404, context=f"k{i}")


# -- overlapping quorums with a node down ------------------------------------------------


@rule("3.5")
@pytest.mark.controls("stop", "start")
def test_get_2_of_3_sees_a_put_2_of_3_with_a_replica_down_at_read_time(
    start_cluster: ClusterFactory,
) -> None:
    """The hardest case: the node down at read time is one that acknowledged the write,
    and the node that coordinates the read missed it."""
    cluster = start_cluster(3, PATIENT_BREAKERS)
    cluster[2].stop()
    expect(cluster[0].put("k", b"written while 2 was down", "2/3"), 201)
    cluster[2].start()
    cluster[1].stop()
    assert_value(cluster[2].get("k", "2/3"), b"written while 2 was down")
    assert_value(cluster[0].get("k", "2/3"), b"written while 2 was down")


@rule("3.5")
@pytest.mark.controls("stop", "start")
def test_get_2_of_3_sees_a_delete_2_of_3_with_a_replica_down_at_read_time(
    start_cluster: ClusterFactory,
) -> None:
    cluster = start_cluster(3, PATIENT_BREAKERS)
    expect(cluster[0].put("k", b"doomed", "3/3"), 201)
    cluster[2].stop()
    expect(cluster[0].delete("k", "2/3"), 202)
    cluster[2].start()
    cluster[1].stop()
    expect(cluster[2].get("k", "2/3"), 404)
    expect(cluster[0].get("k", "2/3"), 404)


@rule("3.2")
@pytest.mark.controls("stop")
def test_default_replicas_on_three_nodes_tolerate_one_node_down(
    start_cluster: ClusterFactory,
) -> None:
    cluster = start_cluster(3, PATIENT_BREAKERS)
    expect(cluster[0].put("before", b"written with all up"), 201)
    cluster[1].stop()
    expect(cluster[0].put("during", b"written with 1 down"), 201)
    assert_value(cluster[2].get("before"), b"written with all up")
    assert_value(cluster[2].get("during"), b"written with 1 down")
    expect(cluster[2].delete("before"), 202)
    expect(cluster[0].get("before"), 404)


# -- a node that was down while the writes happened --------------------------------------


@rule("3.6")
@pytest.mark.controls("stop", "start")
def test_a_node_back_from_downtime_answers_the_newest_state(
    start_cluster: ClusterFactory,
) -> None:
    """Node 2 misses a first write, an overwrite, a delete and a delete-then-recreate;
    once back, it answers each key with the newest state at 2/3 and 3/3."""
    cluster = start_cluster(3, PATIENT_BREAKERS)
    for key in ["overwritten", "deleted", "recreated"]:
        expect(cluster[0].put(key, b"old", "3/3"), 201)
    cluster[2].stop()
    expect(cluster[0].put("written", b"new", "2/3"), 201)
    expect(cluster[1].put("overwritten", b"new", "2/3"), 201)
    expect(cluster[0].delete("deleted", "2/3"), 202)
    # With node 2 down, node 0 had to acknowledge this delete, so its clock has seen the
    # delete's version and the recreation it coordinates next is newer.
    expect(cluster[1].delete("recreated", "2/3"), 202)
    expect(cluster[0].put("recreated", b"new again", "2/3"), 201)
    cluster[2].start()
    newest = {"written": b"new", "overwritten": b"new", "deleted": None, "recreated": b"new again"}
    for replicas in ["2/3", "3/3"]:
        for key, value in newest.items():
            response = cluster[2].get(key, replicas)
            if value is None:
                expect(response, 404, context=f"{key} at {replicas}")
            else:
                assert_value(response, value, f"{key} at {replicas}")


@rule("3.1")
@pytest.mark.parametrize("size", [2, 3])
def test_every_node_sees_a_write_through_another_node(
    start_cluster: ClusterFactory, size: int
) -> None:
    cluster = start_cluster(size)
    for key in KEYS[:10]:
        expect(cluster[0].put(key, b"value of " + key.encode()), 201)
    for index, node in enumerate(cluster):
        for key in KEYS[:10]:
            context = f"GET {key} through node {index}, PUT through node 0"
            expect(node.get(key), 200, b"value of " + key.encode(), context=context)


@rule("3.1")
@pytest.mark.parametrize("size", [2, 3])
def test_every_node_sees_a_delete_through_another_node(
    start_cluster: ClusterFactory, size: int
) -> None:
    cluster = start_cluster(size)
    for key in KEYS[:10]:
        expect(cluster[0].put(key, b"doomed"), 201)
        expect(cluster[1].delete(key), 202)
    for index, node in enumerate(cluster):
        for key in KEYS[:10]:
            context = f"GET {key} through node {index}, DELETE through node 1"
            expect(node.get(key), 404, context=context)
