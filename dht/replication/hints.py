"""Hinted handoff: durable hints for writes a replica missed, and the task that delivers
them once the replica answers again.

A hint lives in the hints key space of this node's LevelDB (never read as data), keyed by
target and data key, so a target holds at most one hint per key: the newest record.
Value: the hint's creation time (8 bytes, ms) then the encoded record. The store is
capped by total size and by age; past either cap the oldest hints are dropped, each drop
logged.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import struct
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from dht.config import NodeConfig
from dht.model.log_limits import RateLimitedLog
from dht.model.record import Record, decode, encode
from dht.replication.background import OwnedTask
from dht.storage.disk import DiskFull, DiskSpace
from dht.storage.store import put_or_disk_full
from dht.transport.peers import PeerError, Peers

log = logging.getLogger(__name__)

_CREATED = struct.Struct(">Q")
_SEPARATOR = b"\x00"
# Evicting down to this share of the size cap makes evictions rare (each one scans).
_EVICT_TO = 0.9
_DELIVERY_BATCH = 256
# Stale entries the age order may hold beyond the live ones before it is rebuilt.
_STALE_SLACK = 16


@dataclass(frozen=True, slots=True)
class Hint:
    target: str
    key: bytes
    record: Record
    created_ms: int


def hint_key(target: str, key: bytes) -> bytes:
    return target.encode() + _SEPARATOR + key


def encode_hint(record: Record, created_ms: int) -> bytes:
    return _CREATED.pack(created_ms) + encode(record)


def decode_hint(stored_key: bytes, data: bytes) -> Hint:
    target, _, key = stored_key.partition(_SEPARATOR)
    (created_ms,) = _CREATED.unpack_from(data)
    return Hint(target.decode(), key, decode(data[_CREATED.size :]), created_ms)


def hint_max_age(config: NodeConfig) -> float:
    """`--hint-max-age`, at most half of `--tombstone-grace`: a hint delivered after every
    node collected the tombstone that replaced its record would bring the record back
    (the other half covers clocks that disagree). A replica whose hint is dropped is
    repaired by anti-entropy instead."""
    limit = config.tombstone_grace / 2
    if config.hint_max_age <= limit:
        return config.hint_max_age
    log.info(
        "hints are kept at most %g s, half of --tombstone-grace, not --hint-max-age %g s: "
        "an older hint could bring back a record whose tombstone is collected",
        limit,
        config.hint_max_age,
    )
    return limit


class HintStore:
    """Hints on disk (a plyvel prefixed database) with per-target counts kept in memory."""

    def __init__(
        self,
        db: Any,
        disk: DiskSpace,
        max_bytes: int,
        max_age: float,
        now_ms: Callable[[], int],
    ) -> None:
        self._db = db
        self._disk = disk
        self._full = RateLimitedLog(log)
        self._max_bytes = max_bytes
        self._max_age_ms = int(max_age * 1000)
        self._now_ms = now_ms
        self.pending: Counter[str] = Counter()
        self._bytes = 0
        self.dropped = 0
        # Every hint's creation time and size, and the hints by age: eviction never reads
        # the store. An entry of the age order whose hint was replaced or removed is
        # skipped when met, and the order is rebuilt from the index once such entries
        # outnumber the hints kept (`_forget_stale`), so its memory follows the hints
        # kept, not the writes: one key overwritten all day for a peer that is down
        # keeps a few entries, not one per write.
        self._index: dict[bytes, tuple[int, int]] = {}
        self._by_age: list[tuple[int, bytes]] = []
        for stored_key, data in self._db.iterator():
            self.pending[stored_key.partition(_SEPARATOR)[0].decode()] += 1
            self._indexed(stored_key, _CREATED.unpack_from(data)[0], len(stored_key) + len(data))
        self._rebuild_age_order()

    def add(self, target: str, key: bytes, record: Record, written_ms: int | None = None) -> None:
        """Keeps `record` for `target` unless a newer hint for that key is already kept.
        A hint that would take the disk below its reserve is dropped (and logged).

        `written_ms`: when the record was written (its version's time, on this node's
        clock): the hint is as old as that, not as the failure of the call that missed
        the replica, which comes at its deadline (`--timeout`, plus the transfer time of
        the large writes queued with it). Anti-entropy stops copying a newer tombstone to
        a peer without the key once a hint of the older record can no longer land there,
        counting from the older record's version (SPEC.md rule 9.10)."""
        if self._max_bytes == 0:
            return  # --hint-max-bytes 0: hints are off
        stored_key = hint_key(target, key)
        existing = self._db.get(stored_key) if stored_key in self._index else None
        if existing is not None and not record.supersedes(decode_hint(stored_key, existing).record):
            return
        created_ms = self._now_ms()
        if written_ms is not None:
            created_ms = min(created_ms, written_ms)
        data = encode_hint(record, created_ms)
        try:
            self._disk.admit(len(stored_key) + len(data))
            put_or_disk_full(self._db, stored_key, data)
        except DiskFull as exc:
            self.dropped += 1
            self._full.warning("full", "dropped a hint for %s: %s", target, exc)
            return
        if existing is None:
            self.pending[target] += 1
        else:
            self._bytes -= len(stored_key) + len(existing)
        self._indexed(stored_key, created_ms, len(stored_key) + len(data))
        heapq.heappush(self._by_age, (created_ms, stored_key))
        self._forget_stale()
        if self._bytes > self._max_bytes:
            self._evict_oldest(int(self._max_bytes * _EVICT_TO))

    @property
    def age_entries(self) -> int:
        """Entries in the order by age, of kept hints and of replaced or removed ones not
        yet skipped: the memory the store holds beside its index."""
        return len(self._by_age)

    def for_target(self, target: str, limit: int) -> Iterator[Hint]:
        prefix = target.encode() + _SEPARATOR
        for count, (stored_key, data) in enumerate(self._db.iterator(prefix=prefix)):
            if count >= limit:
                return
            yield decode_hint(stored_key, data)

    def delivered(self, hint: Hint) -> None:
        """Removes a delivered hint, unless a newer one replaced it meanwhile."""
        stored_key = hint_key(hint.target, hint.key)
        data = self._db.get(stored_key)
        if data is not None and decode_hint(stored_key, data).record == hint.record:
            self._remove(stored_key)

    def expired(self, hint: Hint) -> bool:
        return self._now_ms() - hint.created_ms > self._max_age_ms

    def drop(self, hint: Hint, reason: str) -> None:
        self._drop(hint_key(hint.target, hint.key), reason)

    def _drop(self, stored_key: bytes, reason: str) -> None:
        if stored_key in self._index:
            self._remove(stored_key)
            self.dropped += 1
            target, _, key = stored_key.partition(_SEPARATOR)
            log.warning("dropped hint for %s key %r: %s", target.decode(), key, reason)

    def _indexed(self, stored_key: bytes, created_ms: int, size: int) -> None:
        self._index[stored_key] = (created_ms, size)
        self._bytes += size

    def _remove(self, stored_key: bytes) -> None:
        self._db.delete(stored_key)
        if stored_key not in self._index:
            # On the disk but not in the index: an earlier removal's batch failed (the
            # volume full, group commit), and the hint was delivered again (found by
            # review: a KeyError here stopped every later delivery to its target).
            return
        _, size = self._index.pop(stored_key)
        self._bytes -= size
        target = stored_key.partition(_SEPARATOR)[0].decode()
        self.pending[target] -= 1
        if self.pending[target] <= 0:
            del self.pending[target]
        self._forget_stale()

    def _forget_stale(self) -> None:
        """Rebuilds the age order once it holds more than twice as many entries as there
        are hints (plus a few): a rebuild is linear in the hints kept and comes only after
        at least as many replacements or removals, so it costs O(1) a write, amortized."""
        if len(self._by_age) > 2 * len(self._index) + _STALE_SLACK:
            self._rebuild_age_order()

    def _rebuild_age_order(self) -> None:
        self._by_age = [(created, key) for key, (created, _) in self._index.items()]
        heapq.heapify(self._by_age)

    def _evict_oldest(self, goal: int) -> None:
        """Drops the oldest hints until the store is down to `goal` bytes."""
        while self._bytes > goal and self._by_age:
            created_ms, stored_key = heapq.heappop(self._by_age)
            if self._index.get(stored_key, (None,))[0] == created_ms:
                self._drop(stored_key, f"hint store over its {self._max_bytes}-byte cap")


class HintDelivery:
    """Delivers hints to their targets every `interval` seconds, to each target whose
    circuit lets a request through (the delivery itself is the probe of a half-open one).
    A hint is deleted once its target acknowledged it."""

    def __init__(self, store: HintStore, peers: Peers, interval: float) -> None:
        self._store = store
        self._peers = peers
        self._interval = interval
        self._task = OwnedTask("hint-delivery", self._run)
        self.delivered = 0

    def start(self) -> None:
        self._task.start()

    async def close(self) -> None:
        await self._task.close()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            for target in list(self._store.pending):
                try:
                    await self.deliver_to(target)
                except Exception:
                    log.exception("hint delivery to %s failed unexpectedly", target)

    async def deliver_to(self, target: str) -> None:
        peer = self._peers.by_url.get(target)
        if peer is None:
            for hint in list(self._store.for_target(target, _DELIVERY_BATCH)):
                self._store.drop(hint, "target is no longer in the cluster")
            return
        if not peer.available():
            return
        sent = 0
        for hint in list(self._store.for_target(target, _DELIVERY_BATCH)):
            if self._store.expired(hint):
                self._store.drop(hint, "older than the hint age limit")
                continue
            try:
                await peer.put(hint.key, hint.record)
            except PeerError as error:
                log.debug("hint delivery to %s stopped: %s", target, error)
                break
            self._store.delivered(hint)
            sent += 1
        if sent:
            self.delivered += sent
            log.info(
                "delivered %d hints to %s (%d pending)", sent, target, self._store.pending[target]
            )
