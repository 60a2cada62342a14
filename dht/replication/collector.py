"""Tombstone collection: removes, in the background, tombstones and expired records that
no replica needs any more, so a store with deletes and expiries does not only grow.

The rule (Cassandra's gc_grace, made checkable): a dead record (a tombstone, or a record
past its expiry) may go once it has been dead for `--tombstone-grace` AND every other
node that is to hold it has completed an anti-entropy exchange with this one that began
after the record was written. That exchange put the record (or a newer one) on both
sides, so no replica can still hold an older live value that would come back once the
tombstone is gone ("zombie" data): a replica that was down keeps every tombstone it
needs on its peers until it is back and has exchanged with them. Without anti-entropy
(`--anti-entropy-interval 0`) no shared tombstone is ever collected.

A pass reads every record once, a batch per loop turn, every `grace / 4` seconds (from
0.1 s to 10 minutes): a dead record goes at most a quarter of the grace, or 10 minutes,
after it may.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from dht.coordination.clock import version_ms
from dht.replication.background import OwnedTask
from dht.replication.merkle import MerkleTrees
from dht.storage.record import Record
from dht.storage.store import Storage

log = logging.getLogger(__name__)

_BATCH = 1_000
# A pass that removed this many records compacts LevelDB afterwards, so the disk space
# comes back (removing a record writes a delete marker; only compaction drops both).
COMPACT_AFTER = 10_000


def collectible(
    record: Record, now_ms: int, grace_ms: int, exchanged_since: list[int | None]
) -> bool:
    """The rule: dead for longer than the grace, and each other holder's last completed
    exchange with this node began after the record was written (`exchanged_since`: that
    start per holder, None for one never exchanged with)."""
    dead = record.dead_since()
    if dead is None or now_ms - dead <= grace_ms:
        return False
    written = version_ms(record.version)
    return all(start is not None and start > written for start in exchanged_since)


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
        collected = 0
        for key, record in dead:
            holders = self._trees.sharing(key, record.copies)
            since = [self._exchanged_since(url) for url in holders]
            if collectible(record, now, self._grace_ms, since) and self._storage.collect(
                key, record
            ):
                collected += 1
        self.collected += collected
        return collected
