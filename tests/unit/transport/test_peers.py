"""The node's peers (dht.transport.peers.Peers): each is made with what observes its
calls, those a membership step adds later too."""

from __future__ import annotations

from pathlib import Path

from dht.config import NodeConfig
from dht.transport.peers import Peers

A, B, C = "http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3"


async def test_every_peer_reports_its_calls_to_the_observer_the_peers_were_made_with(
    tmp_path: Path,
) -> None:
    config = NodeConfig(port=1, data_dir=tmp_path, cluster=(A, B), self_url=A)
    calls: list[tuple[str, str, float | None]] = []
    peers = Peers(config, (A, B), "ring", observe_calls=lambda *call: calls.append(call))
    added = peers.ensure((A, B, C), "ring")  # a membership step adds C
    try:
        assert [peer.url for peer in added] == [C]
        peers[B].succeeded(0.25)
        peers[C].failed("timeout", None)
        assert calls == [(B, "ok", 0.25), (C, "timeout", None)]
    finally:
        await peers.close()


async def test_peers_made_without_an_observer_report_to_no_one(tmp_path: Path) -> None:
    config = NodeConfig(port=1, data_dir=tmp_path, cluster=(A, B), self_url=A)
    peers = Peers(config, (A, B), "ring")
    try:
        peers[B].succeeded(0.25)  # nothing to tell, nothing raised
        assert peers[B].breaker.state.value == "closed"
    finally:
        await peers.close()
