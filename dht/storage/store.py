"""Local storage on LevelDB (plyvel): records under one prefix, hints under another, the
digest index of the records under a third, and the nonces of internal requests taken
lately (dht/transport/proof.py, `SeenNonces`) under a fourth.

The digest index holds, for every record, its version, digest and copies (dht/model/merkle.py)
under `d` + its leaf + its key: anti-entropy lists a leaf's records with one prefix scan,
and the per-peer trees are rebuilt from it at start without reading a value. A record
and its digest are written in one LevelDB batch, so they never disagree; the node's
`DigestChanges` (dht/storage/digest_changes.py) then tells the trees.

How a write reaches the disk is `durability` (`--durability`, SPEC.md rule 10.2):
"group" (the default) queues every write, records, hints and nonces alike, for the
writer thread, which writes those queued together in one synced batch
(dht/storage/group_commit.py): a write is answered, and read, only once it is on the
disk, and the loop never waits for an fsync. "none" writes a small record at once on the
loop, unsynced; "each" does too, synced (one fsync per write, on the loop). With either,
a value of LARGE_WRITE or more, and any write of a key with one still queued, goes
through the thread's batches, so writes of a key land in order.

Nothing here knows about HTTP or other nodes. Reads are point operations short enough to
run on the event loop; the range iterator yields lazily so a scan never holds the range
in memory.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import plyvel

from dht.config import Compression, Durability
from dht.limits import LARGE_WRITE
from dht.model.merkle import Digest, leaf_of, pack_digest, record_digest, unpack_digest
from dht.model.record import Record, decode, encode, wider_copies
from dht.storage.batch_writer import BatchWriter, WriterThread
from dht.storage.ceiling_file import CeilingFile
from dht.storage.digest_changes import DigestChanges
from dht.storage.disk import DiskFull, DiskSpace, StorageError
from dht.storage.group_commit import Batch, Change, GroupCommit, QueuedSpace

log = logging.getLogger(__name__)

RECORDS_PREFIX = b"r"
HINTS_PREFIX = b"h"
DIGESTS_PREFIX = b"d"
# Set once every record has its digest entry: a data folder from before the index, or
# from before the entries carried their arrival time (`m:digests-1`), gets it built at
# its first start.
DIGESTS_READY = b"m:digests-2"
_OLDER_INDEX_MARKERS = [b"m:digests-1"]
# The hybrid clock's saved ceiling (dht/model/clock.py), 8 bytes big-endian: a file of
# its own (`save_clock_ceiling`); the LevelDB entry is read in folders from before it.
CEILING_FILE = "clock-ceiling"
CLOCK_CEILING = b"m:clock-ceiling"
# Nonce -> when it may be forgotten (Unix ms, 8 bytes big-endian).
NONCES_PREFIX = b"n"
_INDEX_BATCH = 10_000


def digest_key(key: bytes) -> bytes:
    return DIGESTS_PREFIX + leaf_of(key).to_bytes(2, "big") + key


class StorageUnavailable(StorageError):
    """The data folder cannot be opened; the message says which, why and what to do.
    The node does not start (`python -m dht node` prints it and exits 1)."""


def open_leveldb(data_dir: Path, compression: Compression = "none") -> Any:
    """LevelDB in `data_dir`, its new blocks compressed with Snappy or not (each block
    says how it was stored, so a folder written either way opens either way)."""
    path = data_dir / "leveldb"
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        return plyvel.DB(
            str(path),
            create_if_missing=True,
            compression="snappy" if compression == "snappy" else None,
        )
    except plyvel.CorruptionError as exc:
        raise StorageUnavailable(
            f"{path} is damaged ({_reason(exc)}); `python -m dht repair --data-dir "
            f"{data_dir}` keeps what LevelDB can recover, or move the folder aside and "
            "start empty (this node then gets back only what is read or hinted to it)"
        ) from None
    except (plyvel.IOError, OSError) as exc:
        reason = _reason(exc)
        if "lock" in reason:
            raise StorageUnavailable(
                f"{path} is locked by another process: is another node running on this --data-dir?"
            ) from None
        raise StorageUnavailable(f"cannot open {path}: {reason}") from None


def put_or_disk_full(db: Any, key: bytes, data: bytes, sync: bool = False) -> None:
    """db.put, with LevelDB's own out-of-space error raised as DiskFull (the reserve
    normally comes first). A plain function: a context manager costs a microsecond per
    write on the hot path."""
    try:
        db.put(key, data, sync=sync)
    except plyvel.IOError as exc:
        raise _disk_full_or(exc) from None


def write_or_disk_full(
    db: Any, puts: list[tuple[bytes, bytes]], deletes: list[bytes], sync: bool = False
) -> None:
    """One atomic LevelDB batch, with an out-of-space error raised as DiskFull."""
    try:
        with db.write_batch(sync=sync) as batch:
            for key, data in puts:
                batch.put(key, data)
            for key in deletes:
                batch.delete(key)
    except plyvel.IOError as exc:
        raise _disk_full_or(exc) from None


def _disk_full_or(exc: Exception) -> Exception:
    reason = _reason(exc)
    if "No space" in reason or "ENOSPC" in reason:
        # LevelDB keeps a failed background write as its state: every later write fails
        # the same way until the database is opened again, whatever space is freed.
        return DiskFull(
            f"LevelDB ran out of space ({reason}); its writes are refused until the node restarts"
        )
    return exc


def repair(data_dir: Path) -> None:
    """LevelDB's own repair: keeps every record it can still read. It may keep a record
    and lose its digest entry (or the reverse), so the digest index is marked for a
    rebuild at the next start: writes decide what is newer by it."""
    plyvel.repair_db(str(data_dir / "leveldb"))
    db = plyvel.DB(str(data_dir / "leveldb"))
    try:
        db.delete(DIGESTS_READY, sync=True)
    finally:
        db.close()


def _digest_entries(iterator: Any) -> Iterator[tuple[bytes, Digest]]:
    try:
        for stored_key, data in iterator:
            yield stored_key[len(DIGESTS_PREFIX) + 2 :], unpack_digest(data)
    finally:
        iterator.close()


def _as_before(
    entries: Iterator[tuple[bytes, Digest]], before: dict[bytes, Digest | None]
) -> Iterator[tuple[bytes, Digest]]:
    """`entries`, but each key of `before` with the entry it gives (none for None)."""
    for key, entry in entries:
        if key not in before:
            yield key, entry
    for key, old in before.items():
        if old is not None:
            yield key, old


def _reason(exc: BaseException) -> str:
    message = exc.args[0] if exc.args else exc
    return message.decode(errors="replace") if isinstance(message, bytes) else str(message)


class Storage:
    """`disk` guards every write with the volume's free-space reserve: a write that would
    go below it, or that LevelDB fails for lack of space, raises DiskFull (or, queued,
    fails its future with it).

    A write of the group commit (every write with `durability` "group", large ones
    otherwise) is visible to reads (`get`, `digest`, `digests`, `scan`) once its batch
    has landed; before that only the writes that follow it see it, to decide what is
    newer."""

    def __init__(
        self,
        data_dir: Path,
        disk_reserve: int = 0,
        durability: Durability = "group",
        wall_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        *,
        db: Any = None,
        writer: BatchWriter | None = None,
        disk: DiskSpace | None = None,
        changes: DigestChanges | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        compression: Compression = "none",
    ) -> None:
        """`db`, `writer` and `disk` are for a caller that supplies the medium itself (the
        simulator, `dht.simulation`): an open database with plyvel's interface, the
        writer the group commit's batches run in, and the volume's free space. By
        default: LevelDB in `data_dir`, a thread of its own, and `data_dir`'s volume.

        `changes` hears of every change to the digest index once it is on the disk: the
        node's repair loops attach their trees to it. Without it, no one is told (a
        tool or a test that keeps no trees). `monotonic` times how long the volume's
        free space measured stays believed. `compression`: `--compression`."""
        self._changes = DigestChanges() if changes is None else changes
        self._wall_ms = wall_ms  # stamps each record's arrival in its digest entry
        self._db = open_leveldb(data_dir, compression) if db is None else db
        self._ceiling = CeilingFile(data_dir / CEILING_FILE)
        self._records = self._db.prefixed_db(RECORDS_PREFIX)
        self._nonces = self._db.prefixed_db(NONCES_PREFIX)
        self.disk = DiskSpace(data_dir, disk_reserve, clock=monotonic) if disk is None else disk
        self.durability = durability
        self._sync = durability != "none"  # on the loop: "each"; in batches: "group" too
        self._queue_all = durability == "group"
        # The group commit's thread (plyvel lets go of the GIL meanwhile), so neither an
        # fsync nor a 16 MiB write stops the loop. One thread: LevelDB takes one write at
        # a time anyway.
        self._writer = WriterThread() if writer is None else writer
        self._queue = GroupCommit(self._write_batch, self._writer, self._sync, self._landed)
        # Manual compactions take seconds: their own thread, so no batch waits for one.
        self._compactor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="leveldb-compact")
        self.hints: Any = (
            QueuedSpace(self._db, HINTS_PREFIX, self._queue)
            if self._queue_all
            else self._db.prefixed_db(HINTS_PREFIX)
        )
        self.synced_on_loop = 0  # "each": small writes synced one by one
        self._nonce_landing: asyncio.Future[bool] | None = None
        self._index_digests()

    async def drain(self) -> None:
        """Until nothing is queued: every write taken so far has landed or failed."""
        while not self._queue.idle:
            await asyncio.wait(self._queue.landed())

    def close(self) -> None:
        """Closes the database once the thread's batch and compaction have finished, and
        the writes still queued (the loop stopped before `drain`) are written, synced and
        answered to no one: nothing is acknowledged that is not on the disk."""
        self._writer.shutdown()
        self._compactor.shutdown(wait=True)
        if self._db.closed:
            self._ceiling.close()
            return
        try:
            self._queue.write_remaining()
        except DiskFull as exc:
            log.warning("closing: the writes still queued are lost: %s", exc)
        finally:
            self._db.close()
            self._ceiling.close()

    def status(self) -> dict[str, Any]:
        """`--durability`, the syncs of writes made (batches of the group commit, or
        single writes with "each") and the writes they held: writes per sync says how
        much the group commit saves."""
        syncs = (self._queue.batches if self._sync else 0) + self.synced_on_loop
        writes = (self._queue.batched_writes if self._sync else 0) + self.synced_on_loop
        return {
            "durability": self.durability,
            "syncs": syncs,
            "synced_writes": writes,
            "writes_per_sync": round(writes / syncs, 2) if syncs else None,
        }

    def clock_ceiling(self) -> int:
        """The ceiling the clock saved last (its file; in a folder from before the file,
        LevelDB's entry); in a folder where it never saved one, the newest version
        stored, read from the digest index (a node that only coordinated a write, or only
        forwarded it, has no trace of its version: that is what the ceiling is for)."""
        saved = self._ceiling.read()
        if saved is not None:
            return saved
        data = self._db.get(CLOCK_CEILING)
        if data is not None:
            return int.from_bytes(data, "big")
        return max((entry.version for _, entry in self.digests()), default=0)

    def save_clock_ceiling(self, ceiling: int) -> None:
        """Synced, whatever --durability says, on the loop: a version past the ceiling is
        used only after this returns (at most once a second of clock time, `HybridClock`).
        A file of its own, not LevelDB: LevelDB lets one writer in at a time, so a synced
        put here would wait for the whole batch in the writer thread (289 ms behind
        16 values of 8 MiB, measured) and stop the loop meanwhile. Overwritten in place
        (`CeilingFile`), so a volume with not a byte left still saves it and the node
        still reads; not held to the disk reserve. Raises DiskFull only when the file
        cannot be made."""
        self._ceiling.save(ceiling)

    # -- the nonces of internal requests taken (dht.transport.proof.NonceStore) ----------

    def kept_nonces(self) -> list[tuple[int, bytes]]:
        """Every nonce `remember_nonce` saved and `forget_nonces` did not remove, with
        when it may be forgotten."""
        return [(int.from_bytes(at, "big"), nonce) for nonce, at in self._nonces]

    def remember_nonce(self, nonce: bytes, forget_at_ms: int) -> None:
        """Kept as records are (synced unless --durability none; a node killed keeps it
        anyway): with "group" it is queued, and `nonce_kept` waits for its sync. Not held
        to the disk reserve: a few dozen bytes, and refusing them would refuse internal
        reads too. Raises DiskFull when the volume has not a byte left."""
        when = forget_at_ms.to_bytes(8, "big")
        if self._queue_all:
            self._nonce_landing = self._queue.queue([(NONCES_PREFIX + nonce, when)])
            return
        put_or_disk_full(self._nonces, nonce, when, sync=self._sync)

    async def nonce_kept(self) -> None:
        """Until the nonce `remember_nonce` took last (with no await between the two) is
        on the disk; raises DiskFull if its batch failed for want of space."""
        landing, self._nonce_landing = self._nonce_landing, None
        if landing is not None:
            await landing

    def forget_nonces(self, nonces: list[bytes]) -> None:
        """One batch. One that fails is logged: the nonces stay on disk, and the next
        start drops them again, past their time."""
        if self._queue_all:
            self._queue.queue([(NONCES_PREFIX + nonce, None) for nonce in nonces], answer=None)
            return
        try:
            write_or_disk_full(self._nonces, [], nonces)
        except DiskFull as exc:
            log.warning("kept %d nonces past their time: %s", len(nonces), exc)

    def get(self, key: bytes) -> Record | None:
        data = self._records.get(key)
        return None if data is None else decode(data)

    def write(self, key: bytes, record: Record) -> bool | asyncio.Future[bool]:
        """Last write wins: stores `record` only if it supersedes what is stored or
        queued, and says whether this node holds it now. Idempotent: a record delivered
        again (a read repair or a handoff can bring a write's record before the write's
        own call) is answered True, stored, as it was the first time: a coordinator
        takes False for a newer record kept over its write, and sends the write again
        newer (SPEC.md rule 9.13), which for its own record would reorder a write that
        a reader may have seen already. Raises DiskFull, or fails the future with it.

        A write the group commit takes gives a future, done once its batch is on the
        disk; so does one older than a write of its key still queued (False, once that
        one is on the disk: what it is answered for must be durable too). One older than
        what is stored gives False at once. With --durability none or each, a small
        record of a key with nothing queued is written at once, on the loop (the check
        and the write have no await between them, so no lock is needed)."""
        stored_key = RECORDS_PREFIX + key
        if self._queue_all or len(record.value) >= LARGE_WRITE or self._queue.holds(stored_key):
            return self._queued_write(key, stored_key, record)
        prepared = self._prepared(key, record, None)
        if prepared is None:
            return self._holds(key, record)
        data, old, new = prepared
        puts = [(stored_key, data), (digest_key(key), pack_digest(new))]
        write_or_disk_full(self._db, puts, [], self._sync)
        self.synced_on_loop += self._sync
        self._changes.publish(key, old, new)
        return True

    def _queued_write(
        self, key: bytes, stored_key: bytes, record: Record
    ) -> bool | asyncio.Future[bool]:
        queued = self._queue.pending(stored_key)
        prepared = self._prepared(key, record, queued)
        if prepared is None:
            if queued is None:
                return self._holds(key, record)  # on the disk already, or lost to it
            if queued[0] is None:
                return False  # lost to what is on the disk, which a removal will take
            return self._queue.after(queued[1], record.same_write(decode(queued[0])))
        data, old, new = prepared
        operations = [(stored_key, data), (digest_key(key), pack_digest(new))]
        written = self._queue.queue(operations, (key, old, new))
        assert written is not None
        return written

    def _prepared(
        self, key: bytes, record: Record, queued: tuple[bytes | None, Batch] | None
    ) -> tuple[bytes, Digest | None, Digest] | None:
        """The bytes to store for `record`, admitted by the disk reserve, with the digest
        entries it replaces and brings; None when what is stored, or `queued` (the newest
        record of the key still queued, and its batch), is newer. The record is stored
        with the wider copy count of it and of the one it replaces (`wider_copies`).

        The stored version is read from the digest entry (25 bytes), not the record: the
        stored value is read only when the versions tie, where last-write-wins looks at
        the rest of the record.

        A removal queued (collection, handoff) is decided against as the record it
        removes, still on the disk: its batch may fail and leave that record, which an
        older write must not replace (found by review: a tombstone whose collection
        failed was overwritten by the older value it had deleted). The trees are told
        the change from the queued state (`old`: None), which a failed batch corrects."""
        if queued is None or queued[0] is None:
            against = self.digest(key)
        else:
            entry = self._queue.pending(digest_key(key))
            against = None if entry is None or entry[0] is None else unpack_digest(entry[0])
        old = None if queued is not None and queued[0] is None else against
        if against is not None:
            if record.version <= against.version and (
                record.version < against.version or not record.supersedes(self._newest(key, queued))
            ):
                return None
            if (copies := wider_copies(record.copies, against.copies)) != record.copies:
                record = dataclasses.replace(record, copies=copies)
        data = encode(record)
        self.disk.admit(len(key) + len(data))
        new = Digest(record.version, record_digest(key, record), record.copies, self._wall_ms())
        return data, old, new

    def _holds(self, key: bytes, record: Record) -> bool:
        """Whether the record stored (not queued) of `key` is `record`'s write (read
        only when the versions tie, as `_prepared` does)."""
        digest = self.digest(key)
        return (
            digest is not None
            and digest.version == record.version
            and record.same_write(self.get(key))
        )

    def _newest(self, key: bytes, queued: tuple[bytes | None, Batch] | None) -> Record | None:
        if queued is None or queued[0] is None:
            return self.get(key)
        return decode(queued[0])

    def _write_batch(
        self, puts: list[tuple[bytes, bytes]], deletes: list[bytes], sync: bool
    ) -> None:
        write_or_disk_full(self._db, puts, deletes, sync)

    def _landed(self, changes: dict[bytes, Change]) -> None:
        if self._changes.listening:  # else a batch's every key would be told to no one
            for key, change in changes.items():
                self._changes.publish(key, change.old, change.new)

    def digest(self, key: bytes) -> Digest | None:
        data = self._db.get(digest_key(key))
        return None if data is None else unpack_digest(data)

    def digests(self, leaf: int | None = None) -> Iterator[tuple[bytes, Digest]]:
        """The digest entries (key, entry) of one leaf, or of every record, as they are
        at this call: LevelDB's iterator, created here, reads a snapshot taken now."""
        prefix = DIGESTS_PREFIX + (b"" if leaf is None else leaf.to_bytes(2, "big"))
        return _digest_entries(self._db.iterator(prefix=prefix, fill_cache=False))

    def landed_digests(self) -> Iterator[tuple[bytes, Digest]]:
        """Every digest entry as the trees know them, for trees built now and told of
        every change from now on (attached to the `DigestChanges` with no await after
        this call): the batch in the writer thread counts as it was before it, since the
        trees hear of it when it lands. LevelDB's snapshot, taken now, may or may not
        hold it already (found by review: trees built at a membership step counted such
        a batch twice, and differed from every peer's for good)."""
        before = self._queue.in_flight()
        entries = self.digests()
        return entries if not before else _as_before(entries, before)

    async def writes_landed(self) -> None:
        """Until every write now queued has landed: their digest entries say they
        arrived already, and anti-entropy starts an exchange only once they are in its
        trees too."""
        if landed := self._queue.landed():
            await asyncio.wait(landed)

    def collect(self, key: bytes, record: Record) -> bool:
        """Removes `record` for good (a tombstone or an expired record past its grace),
        unless a write replaced it meanwhile or one of the key is queued (it may land
        between this read and the removal); says whether it did. With --durability
        group the removal is queued too (nobody waits for it: a removal a power loss
        undoes is made again by the next collection)."""
        stored_key = RECORDS_PREFIX + key
        if self._queue.holds(stored_key) or self.get(key) != record:
            return False
        old = self.digest(key)
        if self._queue_all:
            removal: list[tuple[bytes, bytes | None]] = [
                (stored_key, None),
                (digest_key(key), None),
            ]
            self._queue.queue(removal, (key, old, None), answer=None)
            return True
        write_or_disk_full(self._db, [], [stored_key, digest_key(key)], self._sync)
        self._changes.publish(key, old, None)
        return True

    async def compact(self) -> None:
        """LevelDB's manual compaction of records and digests: after a collection removed
        many of them, their delete markers and the values they hid only leave the disk
        when a compaction passes over them. It runs in a thread of its own (writes go on
        meanwhile), which `close` waits for before closing the database."""
        await asyncio.get_running_loop().run_in_executor(
            self._compactor,
            lambda: self._db.compact_range(start=DIGESTS_PREFIX, stop=RECORDS_PREFIX + b"\xff"),
        )

    def _index_digests(self) -> None:
        """Gives every record its digest entry, and no other entry is left, in a data
        folder from before the digest index (a format-1 folder, say) or after a repair."""
        if self._db.get(DIGESTS_READY) is not None:
            return
        with self._db.iterator(prefix=DIGESTS_PREFIX, include_value=False) as entries:
            stale = list(entries)
        write_or_disk_full(self._db, [], [*stale, *_OLDER_INDEX_MARKERS])
        puts: list[tuple[bytes, bytes]] = []
        arrived = self._wall_ms()
        count = 0
        for key, record in self.scan(b"", None):
            # Arrived now, as far as collection is concerned: it waits for exchanges
            # from here on.
            entry = Digest(record.version, record_digest(key, record), record.copies, arrived)
            puts.append((digest_key(key), pack_digest(entry)))
            count += 1
            if len(puts) >= _INDEX_BATCH:
                write_or_disk_full(self._db, puts, [])
                puts = []
        write_or_disk_full(self._db, [*puts, (DIGESTS_READY, b"1")], [], sync=True)
        if count:
            log.info("indexed the digests of %d records", count)

    def count(self, start: bytes = b"") -> int:
        """How many records (tombstones included) have a key from `start` on. Reads
        every key: call it from a thread."""
        with self._records.iterator(start=start, include_value=False, fill_cache=False) as keys:
            return sum(1 for _ in keys)

    def scan(self, start: bytes, end: bytes | None) -> Iterator[tuple[bytes, Record]]:
        """Every record (tombstones included) with start <= key < end, in byte order."""
        # fill_cache=False: a bulk scan must not evict the hot point-read blocks.
        iterator = self._records.iterator(start=start, stop=end, fill_cache=False)
        try:
            for key, data in iterator:
                yield key, decode(data)
        finally:
            iterator.close()
