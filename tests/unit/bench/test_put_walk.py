"""bench.put_walk follows real PUTs through the simulated nodes' code."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bench.put_walk import _walks
from dht.simulation.loop import VirtualLoop


def test_a_put_walk_sees_the_write_cross_from_the_coordinator_to_both_ends_of_a_channel(
    tmp_path: Path,
) -> None:
    loop = VirtualLoop()
    try:
        walks = loop.run_until_complete(_walks(loop, tmp_path, 2))
    finally:
        asyncio.set_event_loop(None)
        loop.close()
    for walk in walks:
        # The PUT came in as bytes through the node's HTTP edge: lean path, server, API.
        assert ("dht.web.lean_http", "dht.web.lean_parse") in walk.hops
        assert ("dht.web.server", "dht.web.client_api") in walk.hops
        assert ("dht.web.client_api", "dht.coordination.coordinator") in walk.hops
        assert walk.count_with_edge > walk.count
        assert ("dht.coordination.coordinator", "dht.coordination.write") in walk.hops
        assert ("dht.transport.channel_server", "dht.transport.local_replica") in walk.hops
        assert ("dht.storage.store", "dht.storage.group_commit") in walk.hops
        assert walk.packages >= {"coordination", "transport", "storage", "model"}
        assert not any(module.startswith("dht.simulation") for module in walk.modules)
