"""An in-memory disk for the real `Storage`: a database with the part of plyvel's
interface dht uses, a group-commit writer whose batches land on virtual time, and the
clock's ceiling.

What a crash keeps is what was synced. A write with `sync=True` syncs the log, so it
makes every write before it durable too (LevelDB's log is one file); an unsynced one
is lost by a crash that comes before the next synced write. A batch handed to the
writer is written when it lands, `latency` later on the virtual clock; a crash before
then loses it whole (it was never acknowledged). The ceiling is saved synced at once,
as `CeilingFile` does.
"""

from __future__ import annotations

import asyncio
import bisect
import random
from collections.abc import Callable, Iterator
from typing import Any

from dht.storage.batch_writer import Landed, Write

_MISSING = object()


class MemoryDB:
    """A sorted key space; `prefixed_db` views share it."""

    def __init__(self) -> None:
        self._data: dict[bytes, bytes] = {}
        self._keys: list[bytes] = []  # sorted
        self._durable: dict[bytes, bytes] = {}
        self._unsynced: list[tuple[bytes, bytes | None]] = []
        self.closed = False
        self.writes = 0

    # -- what survives -----------------------------------------------------------------

    def crash(self) -> int:
        """The process died: what was not synced is gone. Returns how many writes."""
        lost = len(self._unsynced)
        self._data = dict(self._durable)
        self._keys = sorted(self._data)
        self._unsynced = []
        self.closed = False
        return lost

    def _apply(self, key: bytes, value: bytes | None) -> None:
        data = self._data
        if value is None:
            if data.pop(key, _MISSING) is not _MISSING:
                index = bisect.bisect_left(self._keys, key)
                del self._keys[index]
        else:
            if key not in data:
                bisect.insort(self._keys, key)
            data[key] = value
        self.writes += 1
        self._unsynced.append((key, value))

    def _sync(self) -> None:
        durable = self._durable
        for key, value in self._unsynced:
            if value is None:
                durable.pop(key, None)
            else:
                durable[key] = value
        self._unsynced = []

    # -- plyvel's interface ------------------------------------------------------------

    def get(self, key: bytes, default: bytes | None = None) -> bytes | None:
        return self._data.get(key, default)

    def put(self, key: bytes, value: bytes, sync: bool = False) -> None:
        self._apply(key, value)
        if sync:
            self._sync()

    def delete(self, key: bytes, sync: bool = False) -> None:
        self._apply(key, None)
        if sync:
            self._sync()

    def write_batch(self, sync: bool = False, **_: Any) -> _Batch:
        return _Batch(self, b"", sync)

    def prefixed_db(self, prefix: bytes) -> _Prefixed:
        return _Prefixed(self, prefix)

    def iterator(self, **options: Any) -> _Iterator:
        return _Iterator(self, b"", **options)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.iterator())

    def compact_range(self, **_: Any) -> None:
        pass

    def close(self) -> None:
        self.closed = True


class _Prefixed:
    def __init__(self, db: MemoryDB, prefix: bytes) -> None:
        self._db = db
        self._prefix = prefix

    def get(self, key: bytes, default: bytes | None = None) -> bytes | None:
        return self._db.get(self._prefix + key, default)

    def put(self, key: bytes, value: bytes, sync: bool = False) -> None:
        self._db.put(self._prefix + key, value, sync)

    def delete(self, key: bytes, sync: bool = False) -> None:
        self._db.delete(self._prefix + key, sync)

    def write_batch(self, sync: bool = False, **_: Any) -> _Batch:
        return _Batch(self._db, self._prefix, sync)

    def prefixed_db(self, prefix: bytes) -> _Prefixed:
        return _Prefixed(self._db, self._prefix + prefix)

    def iterator(self, **options: Any) -> _Iterator:
        return _Iterator(self._db, self._prefix, **options)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.iterator())


class _Batch:
    """Atomic: applied at the end of the `with`, all or nothing."""

    def __init__(self, db: MemoryDB, prefix: bytes, sync: bool) -> None:
        self._db = db
        self._prefix = prefix
        self._sync = sync
        self._operations: list[tuple[bytes, bytes | None]] = []

    def put(self, key: bytes, value: bytes) -> None:
        self._operations.append((self._prefix + key, value))

    def delete(self, key: bytes) -> None:
        self._operations.append((self._prefix + key, None))

    def __enter__(self) -> _Batch:
        return self

    def __exit__(self, kind: Any, value: Any, traceback: Any) -> None:
        if kind is None:
            for key, data in self._operations:
                self._db._apply(key, data)
            if self._sync:
                self._db._sync()


class _Iterator:
    """A snapshot taken when it is made, as LevelDB's iterators read one."""

    def __init__(
        self,
        db: MemoryDB,
        base: bytes,
        *,
        prefix: bytes | None = None,
        start: bytes | None = None,
        stop: bytes | None = None,
        include_value: bool = True,
        include_key: bool = True,
        **_: Any,
    ) -> None:
        keys = db._keys
        low = base + (prefix or b"")
        first = bisect.bisect_left(keys, max(low, base + start) if start is not None else low)
        if stop is not None:
            last = bisect.bisect_left(keys, base + stop)
        else:
            last = len(keys)
        chosen = [key for key in keys[first:last] if key.startswith(low)]
        strip = len(base)
        data = db._data
        if include_value and include_key:
            self._items: list[Any] = [(key[strip:], data[key]) for key in chosen]
        elif include_value:
            self._items = [data[key] for key in chosen]
        else:
            self._items = [key[strip:] for key in chosen]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._items)

    def __enter__(self) -> _Iterator:
        return self

    def __exit__(self, *_: Any) -> None:
        pass

    def close(self) -> None:
        pass


class DelayedWriter:
    """The group commit's writer (`dht.storage.batch_writer.BatchWriter`): a batch runs
    `latency()` seconds later on the loop, in the handing node's context (so a crash
    before then drops it), and `landed` right after it."""

    def __init__(self, latency: Callable[[], float]) -> None:
        self._latency = latency

    def write(self, write: Write, landed: Landed) -> None:
        asyncio.get_running_loop().call_later(self._latency(), _run, write, landed)

    def shutdown(self) -> None:
        pass


def _run(write: Write, landed: Landed) -> None:
    error: BaseException | None = None
    try:
        write()
    except Exception as exc:
        error = exc
    asyncio.get_running_loop().call_soon(landed, error)


class SimDisk:
    """One node's disk: what it keeps across crashes and restarts."""

    def __init__(self, rng: random.Random) -> None:
        self.db = MemoryDB()
        self.ceiling: int | None = None
        self._rng = rng
        self.lost_writes = 0

    def save_ceiling(self, ceiling: int) -> None:
        self.ceiling = ceiling

    def writer(self) -> DelayedWriter:
        return DelayedWriter(lambda: 0.0005 + self._rng.random() * 0.002)

    def crash(self) -> None:
        self.lost_writes += self.db.crash()
