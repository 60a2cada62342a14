"""Group commit: LevelDB writes queued on the event loop and written by one thread, those
queued together in one WriteBatch (synced when `sync`), each acknowledged only once its
batch has landed.

At most one batch is in the thread at a time; the writes queued meanwhile make the next
one, so a node under load syncs once per batch, not once per write, and the loop never
waits for an fsync: it does no LevelDB write while the thread may be in one (LevelDB
serialises its writers, so a write on the loop would wait for the thread's fsync).

Until its batch lands, a queued write is visible only to the writes that follow it
(`pending`, which they consult to decide what is newer): reads see LevelDB, so nothing
is read that a power loss could still undo. A batch holds at most one operation per
LevelDB key, the newest, since only the newest of a key's writes in one batch would
survive it anyway; every write queued in it is answered when it lands. A batch that
fails (a full volume) fails exactly the writes it holds, each with the batch's error.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dht.model.log_limits import RateLimitedLog
from dht.model.merkle import Digest
from dht.storage.batch_writer import BatchWriter

log = logging.getLogger(__name__)

# A batch that takes longer than this to land (LevelDB's write and, by default, the
# fsync) is logged: every write in it waited that long for its answer, which the
# operator sees as slow requests and should be able to put down to the disk.
SLOW_BATCH_SECONDS = 1.0

# One operation of a batch: the LevelDB key and its new value, None to delete it.
Operation = tuple[bytes, bytes | None]
# The LevelDB write of one batch, run in the thread: (puts, deletes, sync).
BatchWrite = Callable[[list[tuple[bytes, bytes]], list[bytes], bool], None]


@dataclass(slots=True)
class Change:
    """What one batch does to a record's digest entry, for the trees (`DigestChanges`):
    `old` is what was stored before the batch, `new` what is after it (None: removed)."""

    old: Digest | None
    new: Digest | None


@dataclass(slots=True, eq=False)
class Batch:
    operations: dict[bytes, bytes | None] = field(default_factory=dict)
    changes: dict[bytes, Change] = field(default_factory=dict)
    # Each write's future and what it answers once the batch has landed.
    waiters: list[tuple[asyncio.Future[bool], bool]] = field(default_factory=list)
    writes: int = 0
    done: asyncio.Future[None] | None = None  # made when asked for (`landed`)
    sent_at: float = 0.0  # the loop's time when the writer thread was handed it


class GroupCommit:
    """The queue of one database's writes. Loop-only, but for `write_remaining`, which
    `close` calls once the loop no longer runs a batch."""

    def __init__(
        self,
        write: BatchWrite,
        writer: BatchWriter,
        sync: bool,
        on_landed: Callable[[dict[bytes, Change]], None],
    ) -> None:
        self._write = write
        self._writer = writer
        self.sync = sync
        self._on_landed = on_landed
        self._failures = RateLimitedLog(log)
        self._open: Batch | None = None
        self._in_flight: Batch | None = None
        self._flush_soon = False
        # LevelDB key -> its newest queued value (None: deleted) and the batch holding it.
        self._pending: dict[bytes, tuple[bytes | None, Batch]] = {}
        self.batches = 0  # batches landed
        self.batched_writes = 0  # writes in them

    def pending(self, key: bytes) -> tuple[bytes | None, Batch] | None:
        """The newest value queued for `key` and its batch, or None when none is."""
        return self._pending.get(key)

    def holds(self, key: bytes) -> bool:
        return key in self._pending

    def in_flight(self) -> dict[bytes, Digest | None]:
        """For each record the batch in the writer thread changes, its digest entry
        before that batch: what the trees hold for it until the batch lands (the thread
        may have written it already: LevelDB shows it, the trees hear of it only then)."""
        batch = self._in_flight
        return {} if batch is None else {key: c.old for key, c in batch.changes.items()}

    def queue(
        self,
        operations: Sequence[Operation],
        change: tuple[bytes, Digest | None, Digest | None] | None = None,
        answer: bool | None = True,
    ) -> asyncio.Future[bool] | None:
        """Adds one write (its operations land together) to the open batch; its future
        gives `answer` once the batch has landed, or the batch's error (None for
        `answer` None: nobody waits). `change`: the record key and the digest entries
        the write replaces and brings, told to `on_landed` with its batch."""
        batch = self._open
        if batch is None:
            batch = self._open = Batch()
        for key, value in operations:
            batch.operations[key] = value
            self._pending[key] = (value, batch)
        if change is not None:
            key, old, new = change
            earlier = batch.changes.get(key)
            if earlier is None:
                batch.changes[key] = Change(old, new)
            else:  # replaced within the batch: it changes what was stored before it
                earlier.new = new
        batch.writes += 1
        future = None
        if answer is not None:
            future = asyncio.get_running_loop().create_future()
            batch.waiters.append((future, answer))
        if self._in_flight is None and not self._flush_soon:
            # Whatever else the loop takes in this turn joins the batch.
            self._flush_soon = True
            asyncio.get_running_loop().call_soon(self._flush)
        return future

    def after(self, batch: Batch, answer: bool) -> asyncio.Future[bool]:
        """A future that gives `answer` once `batch` has landed (or its error): for a
        write found older than one of its key still queued, which may be acknowledged
        only once the newer one is durable."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        batch.waiters.append((future, answer))
        return future

    def landed(self) -> list[asyncio.Future[None]]:
        """Futures done once every batch queued now has landed or failed."""
        futures = []
        for batch in (self._in_flight, self._open):
            if batch is not None:
                if batch.done is None:
                    batch.done = asyncio.get_running_loop().create_future()
                futures.append(batch.done)
        return futures

    @property
    def idle(self) -> bool:
        return self._open is None and self._in_flight is None

    def write_remaining(self) -> None:
        """Writes the open batch in the calling thread, answering no one: for `close`,
        after the thread has finished the batch it had. What a stopping node queued
        last is kept, and nothing it did not sync was acknowledged."""
        batch, self._open = self._open, None
        if batch is not None:
            self._write_batch(batch)

    def _flush(self) -> None:
        self._flush_soon = False
        if self._in_flight is not None or self._open is None:
            return
        batch, self._open = self._open, None
        self._in_flight = batch
        loop = asyncio.get_running_loop()
        batch.sent_at = loop.time()
        try:
            self._writer.write(
                functools.partial(self._write_batch, batch), functools.partial(self._landed, batch)
            )
        except RuntimeError as exc:  # the storage is closed: its writes fail, none waits
            self._landed(batch, exc)

    def _write_batch(self, batch: Batch) -> None:
        puts = [(key, value) for key, value in batch.operations.items() if value is not None]
        deletes = [key for key, value in batch.operations.items() if value is None]
        self._write(puts, deletes, self.sync)

    def _landed(self, batch: Batch, error: BaseException | None) -> None:
        self._in_flight = None
        for key in batch.operations:
            if self._pending[key][1] is batch:
                del self._pending[key]
        took = asyncio.get_running_loop().time() - batch.sent_at
        if took > SLOW_BATCH_SECONDS:
            self._failures.warning(
                "slow",
                "a batch of %d writes took %.1f s to reach the disk%s: their requests waited",
                batch.writes,
                took,
                " (fsync)" if self.sync else "",
            )
        if error is None:
            self.batches += 1
            self.batched_writes += batch.writes
            try:
                self._on_landed(batch.changes)
            except Exception:  # the writes are on the disk: they are answered anyway
                log.exception("telling the trees of %d writes failed", batch.writes)
            for future, answer in batch.waiters:
                if not future.done():
                    future.set_result(answer)
        else:
            self._failed(batch, error)
        if batch.done is not None:
            batch.done.set_result(None)
        self._flush()

    def _failed(self, batch: Batch, error: BaseException) -> None:
        """Fails every write of `batch` with `error`. A write of the same key queued
        after it replaces what is stored, not what the failed batch held."""
        if self._open is not None:
            for key, change in batch.changes.items():
                later = self._open.changes.get(key)
                if later is not None:
                    later.old = change.old
        self._failures.warning("batch", "a batch of %d writes failed: %s", batch.writes, error)
        for future, _ in batch.waiters:
            if not future.done():
                future.set_exception(error)


class QueuedSpace:
    """A prefixed key space (the hints) whose writes go through the group commit, with
    what `HintStore` uses of a plyvel database: `get` sees the writes still queued,
    `iterator` only those landed (a hint is delivered once it is on the disk). Its
    writes are answered to no one: one that fails is logged (a hint is best effort)."""

    def __init__(self, db: Any, prefix: bytes, queue: GroupCommit) -> None:
        self._db = db.prefixed_db(prefix)
        self._prefix = prefix
        self._queue = queue

    def get(self, key: bytes) -> bytes | None:
        queued = self._queue.pending(self._prefix + key)
        return self._db.get(key) if queued is None else queued[0]

    def put(self, key: bytes, value: bytes, sync: bool = False) -> None:
        self._queue.queue([(self._prefix + key, value)], answer=None)

    def delete(self, key: bytes, sync: bool = False) -> None:
        self._queue.queue([(self._prefix + key, None)], answer=None)

    def iterator(self, **options: Any) -> Any:
        return self._db.iterator(**options)
