"""A cluster-wide range that loses sources mid-stream (SPEC.md rule 8.5), on fake
sources: it is cut once the sources left fall short in either node list of a change,
however many remain overall."""

from __future__ import annotations

import pytest

from dht.coordination.cluster_range import RangeIncomplete, merge_newest
from dht.model.record import Record
from dht.model.ring import Ring
from dht.model.topology import Topology
from dht.transport.peers import PeerError
from dht.transport.replica import RecordSource

NODES = [f"http://127.0.0.1:{8080 + index}" for index in range(5)]
SHRINK = Topology(Ring(NODES, 16), Ring(NODES[2:], 16))  # joint(5 nodes -> the last 3)
KEYS = [f"key-{index}".encode() for index in range(4)]


class Source:
    """One node's local range: every key of KEYS, or a failure after the first `fails_after`."""

    def __init__(self, url: str, fails_after: int | None = None) -> None:
        self._url = url
        self._items = iter(KEYS if fails_after is None else KEYS[:fails_after])
        self._fails = fails_after is not None

    def __aiter__(self) -> Source:
        return self

    async def __anext__(self) -> tuple[bytes, Record]:
        key = next(self._items, None)
        if key is not None:
            return key, Record.live(1, b"v")
        if self._fails:
            raise PeerError(f"{self._url}: range stream failed")
        raise StopAsyncIteration

    async def aclose(self) -> None:
        pass


async def merged(failing: list[str]) -> list[bytes]:
    sources: dict[str, RecordSource] = {
        url: Source(url, 1 if url in failing else None) for url in NODES
    }
    return [key async for key, _ in merge_newest(sources, SHRINK, now_ms=0)]


async def test_a_range_that_keeps_enough_of_each_list_ends_whole() -> None:
    assert await merged([NODES[0], NODES[2]]) == KEYS  # old 3 of 5, new 2 of 3


async def test_a_range_that_keeps_too_few_of_the_new_list_is_cut() -> None:
    """Three of the five old nodes remain, as many as a range needs of them, but only one
    of the three new ones."""
    with pytest.raises(RangeIncomplete, match="1 of the next list's 3 nodes"):
        await merged([NODES[2], NODES[3]])
