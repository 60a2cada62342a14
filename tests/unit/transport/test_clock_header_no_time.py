"""The fence watch (dht.replication.fence, SPEC.md rule 9.13) reading a peer's
X-Dht-Clock that is a number, but no time: the watch and /v0/status go on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dht.model.topology import STABLE, TopologyState
from dht.replication.fence import FenceWatch
from dht.storage.membership import Membership
from dht.transport.wire import CLOCK_HEADER

NOW = 1_700_000_000_000
URLS = ["http://n1:1", "http://n2:2", "http://n3:3"]
STEP = TopologyState(0, STABLE, tuple(URLS))
ABSURD = "9" * 400  # digits int() takes (Python allows 4300), but no float holds


class PeerFromMemory:
    def __init__(self, url: str, clock: str) -> None:
        self.url = url
        self.clock = clock

    async def get_json(self, path: str) -> tuple[Any, dict[str, str]]:
        return STEP.to_json(), {CLOCK_HEADER: self.clock}


class PeersFromMemory:
    def __init__(self, peers: list[PeerFromMemory]) -> None:
        self.by_url = {peer.url: peer for peer in peers}


def watch(tmp_path: Path, clocks: list[str]) -> FenceWatch:
    peers = [PeerFromMemory(url, clock) for url, clock in zip(URLS[1:], clocks, strict=True)]
    return FenceWatch(
        URLS[0],
        tmp_path,
        Membership(tmp_path, STEP, 8),
        PeersFromMemory(peers),  # type: ignore[arg-type]
        lambda reason: None,
        lambda: NOW,
        60_000,
        1.0,
    )


@pytest.mark.parametrize("absurd_peers", [1, 2])
async def test_a_clock_header_that_is_no_time_leaves_the_watch_and_status_working(
    tmp_path: Path, absurd_peers: int
) -> None:
    clocks = [ABSURD] * absurd_peers + [str(NOW)] * (2 - absurd_peers)
    fence = watch(tmp_path, clocks)
    await fence.check()  # a look; the watch's task runs it every 5 s
    fence.status()  # what /v0/status and /metrics show
