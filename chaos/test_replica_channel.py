"""The replica channel under faults on its link: with 200 calls in flight on one
connection, a reset, a silent link and a trickling link each fail every call within the
deadline (a reset one at once), nothing hangs, and the link serves again after the heal.

The calls come from this test process through `dht.transport.peers.Peer` (deadline, breaker and
channel as a node uses them), to a real node across a real Toxiproxy link. The fault is
put on the link of an open channel and the calls are sent into it at once: a toxic
added while answers sit in another toxic (a latency) would release them, as Toxiproxy
flushes a chain when it changes.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from dataclasses import dataclass
from typing import Any

import pytest

from dht.config import NodeConfig
from dht.conformance.peer_tools import cluster_secret
from dht.conformance.rules import rule
from dht.model.clock import HybridClock
from dht.model.record import Record
from dht.model.ring import Ring
from dht.transport.peers import Peer, PeerError
from tests.fixtures import ChaosClusterFactory

IN_FLIGHT = 200
TIMEOUT = 0.5
MARGIN = 0.7  # scheduling slack on a loaded 2-core machine


def peer_of_node2(
    cluster_urls: list[str],
    link_listen: str,
    tmp_dir: Any,
    tls: ssl.SSLContext | None,
    secret: str | None,
) -> Peer:
    """Node 1's view of node 2, dialling it through the test bed's node1-to-node2 link
    (over TLS with node 1's certificate when the nodes talk TLS), proving their secret."""
    config = NodeConfig(
        secret=secret,
        port=0,
        data_dir=tmp_dir,
        cluster=tuple(cluster_urls),
        self_url=cluster_urls[0],
        timeout=TIMEOUT,
        breaker_threshold=1_000_000,
        routes=((cluster_urls[1], f"http://{link_listen}"),),
    )
    return Peer(cluster_urls[1], config, Ring(config.cluster, config.vnodes).identity, tls=tls)


async def calls_at_once(peer: Peer, clock: HybridClock) -> list[tuple[BaseException | None, float]]:
    """Sends IN_FLIGHT writes on one channel at once and returns each call's outcome
    (None: success) with its duration."""

    async def one(index: int) -> tuple[BaseException | None, float]:
        started = time.monotonic()
        try:
            await peer.put(f"k{index}".encode(), Record.live(clock.now(), b"v" * 100))
        except PeerError as error:
            return error, time.monotonic() - started
        return None, time.monotonic() - started

    async with asyncio.timeout(10):  # nothing may hang: a hang fails the test here
        return await asyncio.gather(*(one(index) for index in range(IN_FLIGHT)))


@dataclass(frozen=True)
class Fault:
    kind: str
    attributes: dict[str, int]
    # Every call fails at once (a reset), rather than by the deadline.
    at_once: bool = False
    # Answers that still trickle through in time may succeed; the rest fail.
    some_cross: bool = False


FAULTS = {
    "reset": Fault("reset_peer", {"timeout": 0}, at_once=True),
    "silent": Fault("timeout", {"timeout": 0}),
    # 8 bytes every 200 ms: an answer frame is 10 bytes, so one in a few crosses in time.
    "trickle": Fault(
        "slicer", {"average_size": 8, "size_variation": 0, "delay": 200_000}, some_cross=True
    ),
}


@rule("11.2", "9.1")
@pytest.mark.parametrize("name", FAULTS)
async def test_a_fault_fails_every_call_in_flight_within_the_deadline_and_the_link_recovers(
    start_chaos_cluster: ChaosClusterFactory, tmp_path: Any, name: str
) -> None:
    fault = FAULTS[name]
    cluster, testbed = start_chaos_cluster(2)
    link = testbed.links[0, 1]
    peer = peer_of_node2(
        cluster.urls, link.listen, tmp_path, cluster[0].peer_tls, cluster_secret(cluster[0])
    )
    clock = HybridClock()
    try:
        warm = await peer.put(b"warm", Record.live(clock.now(), b"v"))  # channel open
        assert warm is True
        testbed.add_toxic([link], fault.kind, "downstream", **fault.attributes)
        outcomes = await calls_at_once(peer, clock)
        failed = [elapsed for error, elapsed in outcomes if error is not None]
        slowest = max(elapsed for _, elapsed in outcomes)
        crossed = IN_FLIGHT - len(failed)
        assert crossed <= (IN_FLIGHT // 10 if fault.some_cross else 0), f"{crossed} crossed"
        assert slowest < TIMEOUT + MARGIN, f"a call took {slowest:.3f}s"
        if fault.at_once:
            assert slowest < TIMEOUT, f"a reset failed a call only after {slowest:.3f}s"

        testbed.heal()
        recovered = await asyncio.gather(
            *(
                peer.put(f"after{i}".encode(), Record.live(clock.now(), b"v"))
                for i in range(IN_FLIGHT)
            )
        )
        assert all(recovered)
        print(
            f"\n{name}: {len(failed)} of {IN_FLIGHT} calls in flight failed, the slowest "
            f"call ended after {slowest * 1000:.0f} ms (deadline {TIMEOUT * 1000:.0f} ms); "
            f"{len(recovered)} calls succeeded after the heal"
        )
    finally:
        await peer.close()
