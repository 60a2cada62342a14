"""The test bed itself: node-to-node traffic really crosses the Toxiproxy links."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from dht.conformance.http_client import wait_for
from dht.conformance.rules import rule
from dht.testbed.toxiproxy import ToxiproxyServer, free_ports
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


def test_a_toxiproxy_server_whose_port_another_one_holds_does_not_start(tmp_path: Path) -> None:
    """A second server on a port another Toxiproxy holds exits at once, while the first
    answers its /version: taken for the second's, that answer gave its test bed the
    first's links to fault and heal (a suspect for ci19's heal that restarted nothing
    after SIGSTOP). It must fail to start instead, and say why."""
    port = free_ports(1)[0]
    first = ToxiproxyServer("127.0.0.1", port, tmp_path / "first.log")
    first.start()
    try:
        second = ToxiproxyServer("127.0.0.1", port, tmp_path / "second.log")
        with pytest.raises(RuntimeError, match=r"exited .*another process answers there"):
            second.start()
        assert first.running()
    finally:
        first.stop()
