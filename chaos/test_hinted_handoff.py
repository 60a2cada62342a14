"""Hinted handoff through real Toxiproxy faults (SPEC.md rule 9.6): a replica that
missed writes while cut off receives them from the coordinators' durable hints soon after
it answers again, with no read of those keys."""

from __future__ import annotations

import time

from chaos.flags import FAST_FAULTS
from chaos.observe import pending_hints, read_repairs
from dht.conformance.http_client import wait_for
from dht.conformance.launcher import Cluster, Node
from dht.conformance.rules import rule
from dht.testbed.toxiproxy import Testbed
from tests.fixtures import ChaosClusterFactory

# From the heal: the breaker's cooldown (0.5 s), a delivery round (0.2 s), and slack.
HANDOFF_DEADLINE = 5.0


def live_values(node: Node, keys: set[str]) -> dict[str, bytes]:
    """The live values `node` itself stores for `keys`."""
    return {
        key: record.value
        for key, record in node.local_records().items()
        if key in keys and not record.tombstone
    }


def heal_and_await_handoff(
    testbed: Testbed, cluster: Cluster, replica: Node, written: dict[str, bytes]
) -> float:
    """Heals every link, waits until `replica` holds `written`, checks that no read
    repaired it (so hints did), and returns the seconds the delivery took."""
    testbed.heal()
    healed = time.monotonic()
    wait_for(
        lambda: live_values(replica, set(written)),
        lambda values: values == written,
        deadline=HANDOFF_DEADLINE,
    )
    delay = time.monotonic() - healed
    assert [read_repairs(node) for node in cluster] == [0, 0, 0], "a read repaired them"
    return delay


@rule("9.6")
def test_a_replica_cut_off_during_writes_receives_them_by_hinted_handoff_in_bounded_time(
    start_chaos_cluster: ChaosClusterFactory,
) -> None:
    cluster, testbed = start_chaos_cluster(3, FAST_FAULTS)
    coordinators, replica = [cluster[0], cluster[1]], cluster[2]
    written = {f"handoff-{i:02d}": f"value-{i}".encode() for i in range(20)}

    testbed.cut(testbed.links_into(2))
    for index, (key, value) in enumerate(written.items()):
        assert coordinators[index % 2].put(key, value).status == 201
    wait_for(
        lambda: sum(pending_hints(node, replica) for node in coordinators),
        lambda count: count == len(written),
    )
    assert live_values(replica, set(written)) == {}

    delay = heal_and_await_handoff(testbed, cluster, replica, written)
    print(f"\n{len(written)} hinted writes delivered {delay:.2f}s after heal")
    wait_for(
        lambda: [pending_hints(node, replica) for node in coordinators],
        lambda counts: counts == [0, 0],
    )
    assert sum(int(node.status()["hints_delivered"]) for node in coordinators) == len(written)


@rule("9.6", "10.1")
def test_hints_survive_a_restart_of_the_hint_holder(
    start_chaos_cluster: ChaosClusterFactory,
) -> None:
    """The hint holder is killed (SIGKILL, the harshest restart) and started again while
    the replica is still cut off; its hints come back from disk and are delivered."""
    cluster, testbed = start_chaos_cluster(3, FAST_FAULTS)
    holder, replica = cluster[0], cluster[2]
    written = {f"durable-{i:02d}": f"value-{i}".encode() for i in range(10)}

    testbed.cut(testbed.links_into(2))
    for key, value in written.items():
        assert holder.put(key, value).status == 201
    wait_for(lambda: pending_hints(holder, replica), lambda count: count == len(written))
    holder.kill()
    holder.start()
    assert pending_hints(holder, replica) == len(written), "hints lost in the restart"
    assert live_values(replica, set(written)) == {}

    delay = heal_and_await_handoff(testbed, cluster, replica, written)
    print(f"\nhints delivered {delay:.2f}s after heal, across a restart")
    assert int(holder.status()["hints_delivered"]) == len(written)
