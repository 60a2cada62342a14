"""SPEC.md rule 9.13: a node whose clock is off from a majority of the cluster's by more
than --max-clock-drift serves no client, says why in its answers, /v0/status and
/metrics, and serves again once its clock is right; a clock within the bound, or a
cluster of two, fences nobody."""

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
def test_with_two_nodes_neither_is_fenced_since_neither_can_tell_which_clock_is_wrong(
    start_cluster: ClusterFactory,
) -> None:
    right, skewed = start_cluster(2)
    skewed.stop()
    skewed.extra_args += ["--clock-skew", str(SKEW)]
    skewed.start()
    for node in (right, skewed):
        assert measured(node, 1)["fenced"] is None
    # Its versions are refused (rule 8.4): no write through it is acknowledged at 2/2.
    assert skewed.put("two", b"future", "2/2").status in (503, 504)
    assert right.status()["versions_refused"] >= 1
