"""The cluster-wide range: every node's local range opened at once, then merged into one
sorted stream, newest version per key.

The range needs N - quorum(N) + 1 of each node list in use (`Topology.range_shortfall`)
to answer: fewer before its first byte is `NotEnoughSources`, fewer left mid-stream is
`RangeIncomplete`. The merge holds one record per source, whatever the range's size.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections.abc import AsyncGenerator, Callable

from dht.model.record import Record
from dht.model.topology import Topology
from dht.transport.peers import PeerError
from dht.transport.replica import RecordSource, Replica

log = logging.getLogger(__name__)


class NotEnoughSources(Exception):
    """Fewer nodes than a cluster-wide range needs answered before its first byte."""


class RangeIncomplete(Exception):
    """A cluster-wide range lost too many sources after its first byte was sent."""


async def open_cluster_range(
    start: bytes,
    end: bytes | None,
    replicas: list[Replica],
    topology: Topology,
    wall_ms: Callable[[], int],
) -> AsyncGenerator[tuple[bytes, bytes], None]:
    """The live records of the whole cluster in [start, end), merged, newest version
    per key: `replicas` every node's, and `topology` the one the range is counted by
    throughout. Raises NotEnoughSources (before anything is sent) when too few nodes
    answer; the iterator raises RangeIncomplete when too few are left mid-stream."""
    opened = await asyncio.gather(
        *(replica.open_scan(start, end) for replica in replicas), return_exceptions=True
    )
    sources: dict[str, RecordSource] = {}
    for replica, result in zip(replicas, opened, strict=True):
        if isinstance(result, PeerError):
            log.info("range: a source is missing: %s", result)
        elif isinstance(result, BaseException):
            raise result
        else:
            sources[replica.url] = result
    if (shortfall := topology.range_shortfall(sources)) is not None:
        for source in sources.values():
            await source.aclose()
        raise NotEnoughSources(f"answered: {shortfall}")
    return merge_newest(sources, topology, wall_ms())


async def merge_newest(
    sources: dict[str, RecordSource], topology: Topology, now_ms: int
) -> AsyncGenerator[tuple[bytes, bytes], None]:
    """k-way merge of sorted record streams, by the node each comes from: one entry per
    key, the newest version, tombstones and records expired at `now_ms` dropped. Holds
    one record per source, whatever the size of the range. Once the sources left fall
    short of what `topology` asks of a range, raises RangeIncomplete."""
    urls = list(sources)
    streams = list(sources.values())
    heap: list[tuple[bytes, int, Record]] = []
    live = set(urls)

    async def advance(index: int) -> None:
        try:
            key, record = await anext(streams[index])
        except StopAsyncIteration:
            return
        except PeerError as error:
            live.discard(urls[index])
            log.warning("range: a source failed mid-stream: %s", error)
            if (shortfall := topology.range_shortfall(live)) is not None:
                raise RangeIncomplete(f"left: {shortfall}") from error
            return
        heapq.heappush(heap, (key, index, record))

    try:
        for index in range(len(sources)):
            await advance(index)
        while heap:
            key, index, best = heapq.heappop(heap)
            await advance(index)
            while heap and heap[0][0] == key:
                _, other, record = heapq.heappop(heap)
                if record.supersedes(best):
                    best = record
                await advance(other)
            if best.live_at(now_ms):
                yield key, best.value
    finally:
        for stream in streams:
            await stream.aclose()
