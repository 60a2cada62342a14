"""Tombstone collection: removes, in the background, tombstones and expired records that
no replica needs any more, so a store with deletes and expiries does not only grow.

The rule (Cassandra's gc_grace, made checkable): a dead record (a tombstone, or a record
past its expiry) may go once it has been dead for `--tombstone-grace`, and here for as
long, AND every other node of the ring has completed an anti-entropy exchange with this
one that began after the record arrived here. That exchange compared the key with that
node (any node that holds an older version lists the key in its tree for this one, or
this one lists it in its tree for that node: replica sets are prefixes of one
preference list), so no node can still hold an older live value that would come back
once the tombstone is gone ("zombie" data): a node that was down keeps every tombstone
it might need alive on its peers until it is back and has exchanged with them. Without
anti-entropy (`--anti-entropy-interval 0`) no tombstone is collected on a ring of more
than one node.

Why every node of the ring and not only the record's own replica set: the record says
the `F` of its own write, and an earlier write of the key may have gone to more nodes
(a PUT at 3/3, then a DELETE at 2/2). Why the arrival here and not the version's time:
the version is the coordinator's clock, and one running behind would make a tombstone
look older than an exchange that never carried it.

A pass reads every record once, a batch per loop turn, every `grace / 4` seconds (from
0.1 s to 10 minutes): a dead record goes at most a quarter of the grace, or 10 minutes,
after it may.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from dht.model.merkle import MerkleTrees
from dht.model.record import Record
from dht.replication.background import OwnedTask
from dht.storage.store import Storage

log = logging.getLogger(__name__)

_BATCH = 1_000
# A pass that removed this many records compacts LevelDB afterwards, so the disk space
# comes back (removing a record writes a delete marker; only compaction drops both).
COMPACT_AFTER = 10_000


def collectible(
    record: Record,
    arrived_ms: int,
    now_ms: int,
    grace_ms: int,
    exchanged_since: list[int | None],
) -> bool:
    """The rule: dead, and here, for longer than the grace, and each other node's last
    completed exchange with this one began after the record arrived here
    (`exchanged_since`: that start per node, None for one never exchanged with)."""
    dead = record.dead_since()
    if dead is None or now_ms - max(dead, arrived_ms) <= grace_ms:
        return False
    return all(start is not None and start > arrived_ms for start in exchanged_since)


class Collector:
    def __init__(
        self,
        storage: Storage,
        trees: MerkleTrees,
        exchanged_since: Callable[[str], int | None],
        wall_ms: Callable[[], int],
        grace: float,
    ) -> None:
        self._storage = storage
        self._trees = trees
        self._exchanged_since = exchanged_since
        self._wall_ms = wall_ms
        self._grace_ms = round(grace * 1000)
        self._interval = min(max(grace / 4, 0.1), 600.0)
        self.collected = 0
        self.passes = 0
        self._task = OwnedTask("tombstone-collector", self._run)

    def start(self) -> None:
        self._task.start()

    async def close(self) -> None:
        await self._task.close()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                collected = await self.collect_pass()
            except Exception:
                log.exception("tombstone collection pass failed")
                continue
            if collected:
                log.info("collected %d tombstones and expired records", collected)
            if collected >= COMPACT_AFTER:
                await self._storage.compact()
                log.info("compacted storage after the collection")

    async def collect_pass(self) -> int:
        """One pass over every record; returns how many it removed."""
        collected = 0
        dead: list[tuple[bytes, Record]] = []
        for count, (key, record) in enumerate(self._storage.scan(b"", None), start=1):
            if record.dead_since() is not None:
                dead.append((key, record))
            if count % _BATCH == 0:
                collected += self._collect(dead)
                dead = []
                await asyncio.sleep(0)  # requests go on between batches
        collected += self._collect(dead)
        self.passes += 1
        return collected

    def _collect(self, dead: list[tuple[bytes, Record]]) -> int:
        now = self._wall_ms()
        since = [self._exchanged_since(url) for url in self._trees.leaves]
        collected = 0
        for key, record in dead:
            entry = self._storage.digest(key)
            if entry is None or entry.version != record.version:
                continue  # replaced since the scan read it
            if collectible(
                record, entry.arrived_ms, now, self._grace_ms, since
            ) and self._storage.collect(key, record):
                collected += 1
        self.collected += collected
        return collected
