"""The test bed itself: node-to-node traffic really crosses the Toxiproxy links."""

from __future__ import annotations

import signal

from dht.conformance.http_client import wait_for
from dht.conformance.rules import rule
from tests.fixtures import ChaosClusterFactory


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


@rule("9.8")
def test_a_toxiproxy_whose_control_port_hangs_is_restarted_with_the_same_links(
    start_chaos_cluster: ChaosClusterFactory,
) -> None:
    """Toxiproxy's control port can hang while it removes a toxic under traffic
    (Shopify/toxiproxy#558), and its client waits for ever: a test bed must outlive
    that. A stopped server (SIGSTOP) answers nothing, like the hung one; `heal` gives up
    on it, starts a new one on the same ports with the same links, all healed, and
    records the restart (every connection through a link was dropped)."""
    cluster, testbed = start_chaos_cluster(3)
    testbed.cut(testbed.links_out_of(0))
    assert cluster[0].put("cut", b"1", "3/3").status == 504
    assert testbed.server.process is not None
    testbed.server.process.send_signal(signal.SIGSTOP)
    testbed.heal(reset_timeout=2.0)
    assert len(testbed.restarts) == 1
    written = wait_for(lambda: cluster[0].put("healed", b"2", "3/3").status, lambda s: s == 201)
    assert written == 201
    testbed.cut(testbed.links_out_of(0))  # the new server's links take faults as before
    assert cluster[0].put("cut again", b"3", "3/3").status == 504
    testbed.heal()
    assert len(testbed.restarts) == 1
