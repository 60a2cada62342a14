"""SPEC.md sections 2 and 3 on real clusters: `replicas=A/F`, quorums that overlap, and
what a client sees while a node is down or after it comes back.

Tests that stop a node pass a high `--breaker-threshold`, so that the failures they cause
on purpose never open a circuit (which would turn a 504 into a 503, section 4).
"""

from __future__ import annotations

import time

from tests.fixtures import ClusterFactory
from tests.launcher import Node, Response

PATIENT_BREAKERS = ["--breaker-threshold", "100"]


def assert_value(response: Response, value: bytes, context: object = None) -> None:
    assert (response.status, response.body) == (200, value), (context, response.text)


def assert_not_enough_replicas(response: Response, context: object = None) -> None:
    assert response.status == 504, (context, response.status, response.text)
    assert "Not Enough Replicas" in response.text, (context, response.text)


def every_method(node: Node, key: str, replicas: str) -> list[tuple[str, Response]]:
    return [
        ("GET", node.get(key, replicas)),
        ("PUT", node.put(key, b"value", replicas)),
        ("DELETE", node.delete(key, replicas)),
    ]


# -- the replicas parameter ------------------------------------------------------------


def test_impossible_or_malformed_replicas_answer_400(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(3)
    bad = ["0/3", "4/3", "2/4", "0/0", "", "1", "2/", "/3", "a/b", "1/3/3", "-1/3", "1.0/3"]
    for replicas in bad:
        for method, response in every_method(cluster[0], "k", replicas):
            assert response.status == 400, (replicas, method, response.status, response.text)
            assert response.body.strip(), (replicas, method, "400 without a reason")
    for node in cluster:
        assert node.get("k").status == 404, "a refused PUT stored something"


def test_replicas_beyond_a_two_node_cluster_answer_400(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(2)
    for replicas in ["1/3", "3/3"]:
        for method, response in every_method(cluster[1], "k", replicas):
            assert response.status == 400, (replicas, method, response.status, response.text)


def test_every_valid_replicas_value_is_accepted(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(3)
    for ack in range(1, 4):
        for from_ in range(ack, 4):
            replicas = f"{ack}/{from_}"
            key = f"k{ack}{from_}"
            assert cluster[0].put(key, replicas.encode(), replicas).status == 201, replicas
            # A read quorum that overlaps the write quorum: read ack + write ack > from.
            overlapping = f"{from_ - ack + 1}/{from_}"
            assert_value(cluster[1].get(key, overlapping), replicas.encode(), replicas)
            assert cluster[2].delete(key, replicas).status == 202, replicas


# -- not enough replicas ---------------------------------------------------------------


def test_all_three_replicas_with_one_down_answer_504(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(3, ["--timeout", "5", *PATIENT_BREAKERS])
    assert cluster[0].put("k", b"before", "3/3").status == 201
    cluster[2].stop()
    for node in cluster.nodes[:2]:
        for method, response in every_method(node, "k", "3/3"):
            assert_not_enough_replicas(response, (node.url, method))


def test_504_comes_as_soon_as_success_is_impossible(start_cluster: ClusterFactory) -> None:
    """A refused connection to a stopped replica fails at once: no waiting on --timeout."""
    cluster = start_cluster(3, ["--timeout", "5", *PATIENT_BREAKERS])
    cluster[2].stop()
    started = time.monotonic()
    assert_not_enough_replicas(cluster[0].put("k", b"v", "3/3"))
    assert_not_enough_replicas(cluster[1].get("k", "3/3"))
    assert time.monotonic() - started < 2.5


def test_two_of_two_with_one_node_down_answers_504(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(2, PATIENT_BREAKERS)
    assert cluster[0].put("k", b"before", "2/2").status == 201
    cluster[1].stop()
    for method, response in every_method(cluster[0], "k", "2/2"):
        assert_not_enough_replicas(response, method)
    # The default on two nodes is 2/2 as well.
    for method, response in [
        ("GET", cluster[0].get("k")),
        ("PUT", cluster[0].put("k", b"v")),
        ("DELETE", cluster[0].delete("k")),
    ]:
        assert_not_enough_replicas(response, method)


# -- overlapping quorums, all nodes up -------------------------------------------------


def test_get_2_of_3_sees_a_put_2_of_3(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(3)
    for i in range(10):
        assert cluster[i % 3].put(f"k{i}", f"v{i}".encode(), "2/3").status == 201
        assert_value(cluster[(i + 1) % 3].get(f"k{i}", "2/3"), f"v{i}".encode(), i)


def test_get_3_of_3_sees_a_put_1_of_3(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(3)
    for i in range(10):
        assert cluster[i % 3].put(f"k{i}", f"v{i}".encode(), "1/3").status == 201
        assert_value(cluster[(i + 1) % 3].get(f"k{i}", "3/3"), f"v{i}".encode(), i)


def test_get_2_of_3_sees_a_delete_2_of_3(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(3)
    for i in range(10):
        assert cluster[i % 3].put(f"k{i}", b"doomed", "3/3").status == 201
        assert cluster[(i + 1) % 3].delete(f"k{i}", "2/3").status == 202
        assert cluster[(i + 2) % 3].get(f"k{i}", "2/3").status == 404, i


def test_get_1_of_2_sees_a_put_2_of_2(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(2)
    for i in range(10):
        writer, reader = cluster[i % 2], cluster[(i + 1) % 2]
        assert writer.put(f"k{i}", f"v{i}".encode(), "2/2").status == 201
        assert_value(reader.get(f"k{i}", "1/2"), f"v{i}".encode(), i)
        assert_value(writer.get(f"k{i}", "1/2"), f"v{i}".encode(), i)


def test_get_1_of_2_sees_a_delete_2_of_2(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(2)
    for i in range(10):
        writer, reader = cluster[i % 2], cluster[(i + 1) % 2]
        assert writer.put(f"k{i}", b"doomed", "2/2").status == 201
        assert reader.delete(f"k{i}", "2/2").status == 202
        assert writer.get(f"k{i}", "1/2").status == 404, i
        assert reader.get(f"k{i}", "1/2").status == 404, i


# -- overlapping quorums with a node down ------------------------------------------------


def test_get_2_of_3_sees_a_put_2_of_3_with_a_replica_down_at_read_time(
    start_cluster: ClusterFactory,
) -> None:
    """The hardest case: the node down at read time is one that acknowledged the write,
    and the node that coordinates the read missed it."""
    cluster = start_cluster(3, PATIENT_BREAKERS)
    cluster[2].stop()
    assert cluster[0].put("k", b"written while 2 was down", "2/3").status == 201
    cluster[2].start()
    cluster[1].stop()
    assert_value(cluster[2].get("k", "2/3"), b"written while 2 was down")
    assert_value(cluster[0].get("k", "2/3"), b"written while 2 was down")


def test_get_2_of_3_sees_a_delete_2_of_3_with_a_replica_down_at_read_time(
    start_cluster: ClusterFactory,
) -> None:
    cluster = start_cluster(3, PATIENT_BREAKERS)
    assert cluster[0].put("k", b"doomed", "3/3").status == 201
    cluster[2].stop()
    assert cluster[0].delete("k", "2/3").status == 202
    cluster[2].start()
    cluster[1].stop()
    assert cluster[2].get("k", "2/3").status == 404
    assert cluster[0].get("k", "2/3").status == 404


def test_default_replicas_on_three_nodes_tolerate_one_node_down(
    start_cluster: ClusterFactory,
) -> None:
    cluster = start_cluster(3, PATIENT_BREAKERS)
    assert cluster[0].put("before", b"written with all up").status == 201
    cluster[1].stop()
    assert cluster[0].put("during", b"written with 1 down").status == 201
    assert_value(cluster[2].get("before"), b"written with all up")
    assert_value(cluster[2].get("during"), b"written with 1 down")
    assert cluster[2].delete("before").status == 202
    assert cluster[0].get("before").status == 404


# -- a node that was down while the writes happened --------------------------------------


def test_a_node_back_from_downtime_answers_the_newest_state(
    start_cluster: ClusterFactory,
) -> None:
    """Node 2 misses a first write, an overwrite, a delete and a delete-then-recreate;
    once back, it answers each key with the newest state at 2/3 and 3/3."""
    cluster = start_cluster(3, PATIENT_BREAKERS)
    for key in ["overwritten", "deleted", "recreated"]:
        assert cluster[0].put(key, b"old", "3/3").status == 201
    cluster[2].stop()
    assert cluster[0].put("written", b"new", "2/3").status == 201
    assert cluster[1].put("overwritten", b"new", "2/3").status == 201
    assert cluster[0].delete("deleted", "2/3").status == 202
    # With node 2 down, node 0 had to acknowledge this delete, so its clock has seen the
    # delete's version and the recreation it coordinates next is newer.
    assert cluster[1].delete("recreated", "2/3").status == 202
    assert cluster[0].put("recreated", b"new again", "2/3").status == 201
    cluster[2].start()
    newest = {"written": b"new", "overwritten": b"new", "deleted": None, "recreated": b"new again"}
    for replicas in ["2/3", "3/3"]:
        for key, value in newest.items():
            response = cluster[2].get(key, replicas)
            if value is None:
                assert response.status == 404, (key, replicas, response.status, response.text)
            else:
                assert_value(response, value, (key, replicas))
