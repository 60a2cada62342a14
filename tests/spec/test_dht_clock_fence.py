"""SPEC.md rule 9.13: a node whose clock is off from a majority of the cluster's by more
than --max-clock-drift serves no client, says why in its answers, /v0/status and
/metrics, and serves again once its clock is right; a clock within the bound fences
nobody; where the nodes that answered split evenly (two nodes, or one of three down),
the node ahead is fenced and the node behind serves."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from dht.conformance.fixtures import ClusterFactory
from dht.conformance.http_client import expect, wait_for
from dht.conformance.launcher import Node
from dht.conformance.rules import rule
from dht.replication.fence import CHECK_INTERVAL

pytestmark = pytest.mark.dht

SKEW = 120


def measured(node: Node, peers: int) -> dict[str, Any]:
    """The node's clock fence once it has measured the clock of `peers` peers (a peer
    restarted is measured again at the next look, CHECK_INTERVAL later at most)."""
    fence: dict[str, Any] = wait_for(
        lambda: node.status()["clock_fence"],
        lambda fence: sum(offset is not None for offset in fence["offsets"].values()) == peers,
        deadline=2 * CHECK_INTERVAL,
    )
    return fence


@rule("9.13", "12.4")
def test_a_node_restarted_with_its_clock_off_is_fenced_from_its_first_answer_until_right(
    start_cluster: ClusterFactory,
) -> None:
    cluster = start_cluster(3)
    healthy, skewed = cluster.nodes[:2], cluster[2]
    expect(healthy[0].put("before", b"v", "3/3"), 201)
    skewed.stop()
    skewed.extra_args += ["--clock-skew", str(SKEW)]
    skewed.start()

    first = skewed.get("before")  # its first answer: it looked at its peers' clocks
    assert first.status == 503, first
    assert "clock is ~120 s ahead of the majority" in first.text, first.text
    assert "--max-clock-drift (60 s)" in first.text, first.text
    for answer in (skewed.put("k", b"v"), skewed.delete("before"), skewed.range("a")):
        assert answer.status == 503, answer
    fence = skewed.status()["clock_fence"]
    assert fence["fenced"] in first.text and fence["max_drift"] == 60
    metrics = skewed.metrics()
    assert metrics["dht_clock_fenced"] == 1
    for node in healthy:
        offset = fence["offsets"][node.url]
        assert offset["low"] <= -SKEW + 1 and offset["high"] >= -SKEW - 1, offset
        assert metrics.value("dht_peer_clock_offset_seconds", peer=node.url) == pytest.approx(
            -SKEW, abs=1
        )
    for node in healthy:  # one clock off of three: theirs are the majority
        # Measured since the restart (a look from before it said ~0), at the next look.
        theirs = wait_for(
            functools.partial(measured, node, 2),
            lambda fence: abs(fence["offsets"][skewed.url]["estimate"] - SKEW) <= 1,
            deadline=2 * CHECK_INTERVAL,
        )
        assert theirs["fenced"] is None
        assert node.metrics()["dht_clock_fenced"] == 0

    # Still a replica: the healthy nodes' writes reach it, and it refuses no client of
    # theirs; it coordinates nothing itself.
    expect(healthy[0].put("during", b"v", "3/3"), 201)
    expect(healthy[1].get("during", "3/3"), 200, b"v")

    skewed.stop()
    skewed.extra_args = [arg for arg in skewed.extra_args if arg not in ("--clock-skew", str(SKEW))]
    skewed.start()
    expect(skewed.get("during"), 200, b"v")
    assert measured(skewed, 2)["fenced"] is None


@rule("9.13")
def test_a_clock_off_by_less_than_the_bound_is_not_fenced(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(3)
    skewed = cluster[2]
    skewed.stop()
    skewed.extra_args += ["--clock-skew", "50"]
    skewed.start()
    fence = measured(skewed, 2)
    assert fence["fenced"] is None, fence
    assert all(
        offset["estimate"] == pytest.approx(-50, abs=1) for offset in fence["offsets"].values()
    )
    expect(skewed.put("within", b"v", "3/3"), 201)


@rule("9.13", "8.4")
def test_with_two_nodes_the_node_ahead_is_fenced_and_the_node_behind_serves(
    start_cluster: ClusterFactory,
) -> None:
    """Neither can tell which clock is wrong; the one ahead is fenced, since a write its
    peer refused would stay in its own copy, ahead of every write acknowledged after it."""
    right, skewed = start_cluster(2)
    skewed.stop()
    skewed.extra_args += ["--clock-skew", str(SKEW)]
    skewed.start()
    first = skewed.put("two", b"future", "1/2")  # its first answer: it has looked
    assert first.status == 503, first
    assert "~120 s ahead of 1 of the 2 nodes that answered" in first.text, first.text
    assert measured(right, 1)["fenced"] is None
    expect(right.put("two", b"now", "2/2"), 201)
    expect(right.get("two", "2/2"), 200, b"now")


@rule("9.13")
def test_with_two_nodes_a_node_restarted_behind_leaves_the_right_one_serving(
    start_cluster: ClusterFactory,
) -> None:
    """Found by review: the right node sees its one peer behind it and no one with it;
    its looks saw the peer jump back past the bound, a move of the peer's, so it is not
    fenced (only the wrong clock would serve). The node behind is not fenced either:
    nothing it writes takes an acknowledged write away (rule 9.13)."""
    right, moved = start_cluster(2)
    assert measured(right, 1)["fenced"] is None  # a look within the bound, remembered
    moved.stop()
    moved.extra_args += ["--clock-skew", str(-SKEW)]
    moved.start()
    fence = wait_for(
        lambda: measured(right, 1),
        lambda fence: abs(fence["offsets"][moved.url]["estimate"] + SKEW) <= 1,
        deadline=2 * CHECK_INTERVAL,
    )
    assert fence["fenced"] is None, fence
    expect(right.put("behind", b"v", "1/2"), 201)
    assert measured(moved, 1)["fenced"] is None


@rule("9.13")
def test_a_node_restarted_ahead_while_a_peer_is_down_is_fenced_and_no_acknowledged_write_is_lost(
    start_cluster: ClusterFactory,
) -> None:
    """The simulator's case (seed 4 of restart-skewed-amid): one of three down, another
    restarted minutes ahead. Unfenced, it coordinated: its one peer up refused its writes
    (504), but they stayed in its own copy, and once the peer down was back a write
    acknowledged through the right node could lose to them when real time reached them.
    Fenced, it writes nothing of its own; it stays a replica."""
    cluster = start_cluster(3)
    right, skewed, down = cluster.nodes
    down.stop()
    skewed.stop()
    skewed.extra_args += ["--clock-skew", str(SKEW)]
    skewed.start()
    first = skewed.put("k", b"future")
    assert first.status == 503, first
    assert "~120 s ahead of 1 of the 2 nodes that answered" in first.text, first.text
    assert skewed.status()["clock_fence"]["fenced"] in first.text
    assert measured(right, 1)["fenced"] is None  # the node behind it serves
    down.start()
    written = wait_for(lambda: right.put("k", b"now"), lambda answer: answer.status == 201)
    assert written.status == 201, written
    # Every replica answers with the acknowledged write: a copy of k ahead of real time
    # on the skewed node would be refused (rule 8.4), and the read could not have 3/3.
    read = wait_for(lambda: right.get("k", "3/3"), lambda answer: answer.status == 200)
    expect(read, 200, b"now")
    assert measured(skewed, 2)["fenced"] is not None  # both right clocks say so now
