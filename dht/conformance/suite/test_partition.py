"""SPEC.md section 18: partitions on a 3-node cluster at the default `replicas`, with
clients on both sides: every node, the cut-off one included, is sent reads, writes and
deletes throughout. The kit's network-namespace mode gives each directed link (the
connections node A dials to node B) a Toxiproxy proxy of its own, so a partition is a
set of links cut, on nodes that know nothing of it. Each scenario is recorded and
judged by its history, as section 14's are (dht/conformance/faults.py)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from dht.conformance.faults import (
    BOUND,
    CLIENT_TIMEOUT,
    REFUSED,
    SUCCESS,
    Recorder,
    during,
    first_failure,
    seconds,
    took,
)
from dht.conformance.fixtures import LinkedClusterFactory
from dht.conformance.rules import rule
from dht.conformance.traffic import Clients, Mix, key_space
from dht.history.operation import Op
from dht.testbed.netns import NetnsTestbed
from dht.testbed.toxiproxy import Link

pytestmark = pytest.mark.partition

KEYS = key_space(16)
# Two clients a node: each side of every partition is written and read.
CLIENTS = 6
MIX = Mix(put=0.5, delete=0.1, expiring=0.0)


def answered_in_time(op: Op) -> bool:
    """Any answer the contract allows (a 2xx, 404, or 503/504 where a quorum is out of
    reach) within the bound."""
    return op.status in (*SUCCESS, *REFUSED) and (took(op) or 0.0) <= BOUND


def partition_scenario(
    start_linked_cluster: LinkedClusterFactory,
    scenario: str,
    label: str,
    links: Callable[[NetnsTestbed], list[Link]],
) -> str:
    """Clients through every node; `links` cut for a while, then healed; the history
    judged. Returns what went wrong ('' when nothing): the requests sent during the
    partition, as answered, and the whole history, as judged."""
    cluster, testbed = start_linked_cluster(3)
    recorder = Recorder(scenario, cluster.nodes)
    seed = sum(map(ord, scenario))
    clients = Clients(cluster.nodes, KEYS, CLIENTS, seed, timeout=CLIENT_TIMEOUT, mix=MIX)
    clients.start()
    time.sleep(seconds(3.0, 1.0))
    with recorder.fault(label):
        testbed.cut(links(testbed))
        time.sleep(seconds(12.0, 4.0))
        testbed.heal()
    time.sleep(seconds(5.0, 2.0))
    ops = clients.stop()
    recorder.add(ops)
    judged, _ = recorder.finish(cluster.nodes)
    assert judged.fates, "no write was acknowledged: nothing to check"
    (window,) = recorder.faults
    cut_off = during(ops, window)
    assert cut_off, "no request ran during the partition"
    problems = [
        judged.failure(),
        first_failure(cut_off, answered_in_time, "a 2xx, 404, 503 or 504"),
    ]
    return "; ".join(problem for problem in problems if problem)


@rule("18.1")
def test_one_node_cut_off_both_ways_with_clients_on_both_sides(
    start_linked_cluster: LinkedClusterFactory,
) -> None:
    found = partition_scenario(
        start_linked_cluster,
        "partition-isolated",
        "node3 cut off both ways",
        lambda testbed: [*testbed.links_into(2), *testbed.links_out_of(2)],
    )
    assert not found, found


@rule("18.2")
def test_a_bridge_node_that_sees_both_halves(
    start_linked_cluster: LinkedClusterFactory,
) -> None:
    found = partition_scenario(
        start_linked_cluster,
        "partition-bridge",
        "node1 and node2 cut apart, node3 sees both",
        lambda testbed: [testbed.links[0, 1], testbed.links[1, 0]],
    )
    assert not found, found


@rule("18.3")
@pytest.mark.parametrize(
    ("direction", "links"),
    [
        ("out of", NetnsTestbed.links_out_of),
        ("into", NetnsTestbed.links_into),
    ],
    ids=["node3-dials-no-one", "no-one-dials-node3"],
)
def test_one_way_cuts_of_one_nodes_links(
    start_linked_cluster: LinkedClusterFactory,
    direction: str,
    links: Callable[[NetnsTestbed, int], list[Link]],
) -> None:
    found = partition_scenario(
        start_linked_cluster,
        f"partition-one-way-{'out' if direction == 'out of' else 'in'}",
        f"every link {direction} node3 cut",
        lambda testbed: links(testbed, 2),
    )
    assert not found, found
