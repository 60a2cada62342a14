"""SPEC.md rule 9.10 where the faults combine: tombstone collection must not undo an
acknowledged delete, whatever `F` the delete used and whatever the clock of the node
that coordinated it said.

Each test leaves a replica holding the old value down while the others take the delete,
waits well past the grace with collection passes running, brings the replica back,
and checks that the value never reads again, from any node.
"""

from __future__ import annotations

import pytest

from dht.config import NodeConfig
from dht.conformance.fixtures import ClusterFactory
from dht.conformance.http_client import expect, wait_for
from dht.conformance.launcher import Cluster, Node
from dht.conformance.rules import rule
from dht.model.ring import Ring

pytestmark = pytest.mark.dht

# Hints off, so that only anti-entropy brings the tombstone to the replica that was down
# (hints are dropped at half the grace anyway); exchanges every half second.
COLLECTING = [
    "--breaker-cooldown",
    "0.5",
    "--hint-max-bytes",
    "0",
    "--anti-entropy-interval",
    "0.5",
    "--tombstone-grace",
    "1",
]
CONVERGE_WITHIN = 30.0
# The nodes share one clock: a drift bound small next to the grace, so exchanges stop
# handing a tombstone to a node without it once it is past the grace (rule 9.10: the
# grace, and at least half of it plus twice the drift), as the waits below expect.
CLOCKS_AGREE = ["--max-clock-drift", "0.25"]


def wait_for_collection_passes(nodes: list[Node], more: int) -> None:
    """Until each node made `more` collection passes (one every 0.25 s) from now."""
    for node in nodes:
        first = node.status()["tombstones"]["passes"]
        wait_for(
            lambda n=node: n.status()["tombstones"]["passes"],
            lambda passes, first=first: passes >= first + more,
            deadline=15.0,
        )


def wait_until_gone_or_deleted(cluster: Cluster, keys: list[str]) -> None:
    """Until no node holds a live record of any of `keys` (each holds a tombstone or
    nothing): anti-entropy brought the delete everywhere, or the value came back."""
    for node in cluster:
        wait_for(
            lambda n=node: [
                key
                for key, record in n.local_records().items()
                if key in keys and not record.tombstone
            ],
            lambda live: live == [],
            deadline=CONVERGE_WITHIN,
        )


def assert_deleted_everywhere(cluster: Cluster, keys: list[str]) -> None:
    """Every key reads 404 at 3/3 through every node (once the circuits to the node
    that was down have closed again)."""
    for node in cluster:
        for key in keys:
            answer = wait_for(lambda n=node, k=key: n.get(k, "3/3"), lambda a: a.status != 503)
            expect(answer, 404, context=f"{key} through {node.url}")


@rule("9.10")
def test_a_delete_with_a_smaller_from_is_not_undone_by_collection(
    start_cluster: ClusterFactory,
) -> None:
    """Issue 24, finding 2: keys written at 3/3, deleted at 2/2 while the third replica
    was down. The tombstone said F=2, so its holders waited only for each other, and the
    replica that was down handed the value back once they had collected it."""
    cluster = start_cluster(3, [*COLLECTING, *CLOCKS_AGREE])
    ring = Ring(cluster.urls, NodeConfig.vnodes)
    down = cluster[2]
    keys = [f"smaller-from-{index}" for index in range(30)]
    for key in keys:
        expect(cluster[0].put(key, b"deleted value", "3/3"), 201, context=key)
    down.stop()
    deleted = [key for key in keys if down.url not in ring.replicas_for(key.encode(), 2)]
    assert len(deleted) >= 3, "too few keys whose first two replicas exclude the stopped node"
    for key in deleted:
        expect(cluster[0].delete(key, "2/2"), 202, context=key)
    wait_for_collection_passes(cluster.nodes[:2], more=8)
    down.start()
    wait_until_gone_or_deleted(cluster, deleted)
    assert_deleted_everywhere(cluster, deleted)


@rule("9.10")
def test_a_delete_from_a_clock_behind_is_not_undone_by_collection(
    start_cluster: ClusterFactory,
) -> None:
    """Issue 24, finding 4: collection compared the version's time with the start of
    each holder's last exchange. A coordinator whose clock runs behind (nothing bounds
    that direction) issues a tombstone older than an exchange the absent replica made
    before the delete, so the holders took that exchange for one that had carried the
    tombstone. Four nodes: the coordinator holds none of the keys, so only its versions
    are behind, and the holders' own clocks are right."""
    cluster = start_cluster(4, COLLECTING)
    behind = cluster[3]
    behind.stop()
    behind.extra_args += ["--clock-skew", "-30"]
    behind.start()
    ring = Ring(cluster.urls, NodeConfig.vnodes)
    keys = [
        key
        for key in (f"clock-behind-{index}" for index in range(200))
        if behind.url not in ring.replicas_for(key.encode(), 3)
    ]
    assert len(keys) >= 5
    holders = ring.replicas_for(keys[0].encode(), 3)
    keys = [key for key in keys if ring.replicas_for(key.encode(), 3) == holders]
    down, *staying = [node for node in cluster if node.url in holders]
    for key in keys:
        expect(behind.put(key, b"deleted value", "3/3"), 201, context=key)
    # The holders' exchanges with the replica about to go down complete after the
    # writes; the delete comes after them, with a version 30 s before them.
    for node in staying:
        exchanges = node.status()["peers"][down.url]["anti_entropy"]["exchanges"]
        wait_for(
            lambda n=node: n.status()["peers"][down.url]["anti_entropy"]["exchanges"],
            lambda count, first=exchanges: count >= first + 2,
            deadline=15.0,
        )
    down.stop()
    for key in keys:
        expect(behind.delete(key, "2/3"), 202, context=key)
        expect(behind.get(key, "2/3"), 404, context=key)  # the delete is newer
    wait_for_collection_passes(staying, more=8)
    down.start()
    wait_until_gone_or_deleted(cluster, keys)
    assert_deleted_everywhere(cluster, keys)


@rule("9.10")
def test_a_value_copied_with_a_smaller_from_onto_a_wider_replica_does_not_come_back(
    start_cluster: ClusterFactory,
) -> None:
    """Found in review of issue 24: PUT v1 at 3/3 (every node holds it, F=3), PUT v2 at
    2/2 (the first two replicas), and anti-entropy copies v2 onto the third replica,
    which held v1. Stored with F=2, v2 there was in none of its trees (its replica set
    leaves it out), and the first two list their F=2 records only for each other: after
    a DELETE at 2/2 no exchange compared the key, every exchange with the third counted,
    the first two collected the tombstone and v2 read again (14 of 14 keys). Now a
    replica stores a record with the wider F of it and of the one it replaces, so the
    third replica holds v2 as F=3 and the delete reaches it."""
    cluster = start_cluster(3, [*COLLECTING, *CLOCKS_AGREE])
    ring = Ring(cluster.urls, NodeConfig.vnodes)
    third = cluster[2]
    keys = [
        key
        for key in (f"smaller-copy-{index}" for index in range(40))
        if ring.replicas_for(key.encode(), 3)[2] == third.url
    ]
    assert len(keys) >= 5
    for key in keys:
        expect(cluster[0].put(key, b"v1", "3/3"), 201, context=key)
    for key in keys:
        expect(cluster[0].put(key, b"v2", "2/2"), 201, context=key)
    # Anti-entropy brings v2 (F=2) to the third replica.
    wait_for(
        lambda: {k: r.value for k, r in third.local_records().items() if k in keys},
        lambda held: held == {key: b"v2" for key in keys},
        deadline=15.0,
    )
    for key in keys:
        expect(cluster[0].delete(key, "2/2"), 202, context=key)
        # The delete is acknowledged; read at 2/2 only, as a read of the third replica
        # would repair it.
        expect(cluster[0].get(key, "2/2"), 404, context=key)
    holders = cluster.nodes[:2]
    wait_for_collection_passes(holders, more=8)
    wait_for(  # anti-entropy had every chance to bring the tombstone to the third node
        lambda: [k for n in holders for k in n.local_records() if k in keys],
        lambda left: left == [],
        deadline=30.0,
    )
    came_back = [key for key in keys if cluster[0].get(key, "3/3").status != 404]
    third_holds = {k: r.value for k, r in third.local_records().items() if k in keys}
    assert came_back == [], (
        f"{len(came_back)} of {len(keys)} deleted keys read again once the tombstones were "
        f"collected; the third replica still holds {sorted(set(third_holds.values()))}"
    )
