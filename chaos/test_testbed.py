"""The test bed itself: node-to-node traffic really crosses the Toxiproxy links."""

from __future__ import annotations

from tests.fixtures import ChaosClusterFactory
from tests.spec.rules import rule


@rule("3.4")
def test_cutting_every_link_of_a_node_fails_quorum_writes_through_it(
    start_chaos_cluster: ChaosClusterFactory,
) -> None:
    cluster, testbed = start_chaos_cluster(3)
    assert cluster[0].put("before", b"1").status == 201
    testbed.cut(testbed.links_out_of(0))
    assert cluster[0].put("after", b"2").status == 504
    testbed.heal()
    assert cluster[0].put("healed", b"3").status == 201
