"""The group commit's races between the writer thread's batches and
what the loop builds from the disk, and batches that fail, with real LevelDB in a
temporary folder and the batch write wrapped (never LevelDB itself faked)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import plyvel
import pytest

from dht.model.merkle import MerkleTrees
from dht.model.record import Record
from dht.model.ring import Ring
from dht.storage.digest_changes import DigestChanges
from dht.storage.disk import DiskFull
from dht.storage.store import Storage

NODES = ["http://a:1", "http://b:2", "http://c:3"]
NO_SPACE = "IO error: leveldb/000005.log: No space left on device"


@pytest.fixture
def digest_changes() -> DigestChanges:
    return DigestChanges()


@pytest.fixture
async def storage(tmp_path: Path, digest_changes: DigestChanges) -> AsyncIterator[Storage]:
    storage = Storage(tmp_path, changes=digest_changes)
    try:
        yield storage
    finally:
        storage.close()


def written(result: bool | asyncio.Future[bool]) -> asyncio.Future[bool]:
    assert isinstance(result, asyncio.Future), "a group-committed write answers later"
    return result


def first_batch_fails(storage: Storage) -> threading.Event:
    """The next batch waits in the writer thread until the event is set (up to 5 s),
    then fails as a full volume fails it; later batches are written."""
    write = storage._queue._write
    release = threading.Event()
    failed_once: list[bool] = []

    def full_once(*args: Any) -> None:
        if failed_once:
            return write(*args)
        failed_once.append(True)
        release.wait(5)
        raise DiskFull(NO_SPACE)

    storage._queue._write = full_once
    return release


async def test_trees_built_while_a_batch_lands_agree_with_the_disk(
    storage: Storage, digest_changes: DigestChanges
) -> None:
    """A membership step builds fresh trees (`RepairLoops.renew`): a snapshot of the
    digest index, then the trees attached to the `DigestChanges`, in one loop turn. A
    batch the writer thread has written but whose landing the loop has not run yet is in
    the snapshot, and its change reaches the trees again when it lands: counted twice,
    the tree of each peer sharing the key differs from the disk's for good."""
    ring = Ring(NODES, 8)
    assert await written(storage.write(b"k", Record.live(1, b"one"))) is True
    on_disk = threading.Event()
    write = storage._queue._write

    def write_then_tell(*args: Any) -> None:
        write(*args)
        on_disk.set()

    storage._queue._write = write_then_tell
    landing = written(storage.write(b"k", Record.live(2, b"two")))
    await asyncio.sleep(0)  # flushed: in the writer thread
    assert on_disk.wait(5)  # written and synced; the loop has not run its landing yet
    trees = MerkleTrees(ring, NODES[0])
    snapshot = storage.landed_digests()  # what AntiEntropy reads for the trees
    digest_changes.listen(trees.change)  # attached in the same turn, as the node does
    assert await landing is True
    trees.load(snapshot)
    fresh = MerkleTrees(ring, NODES[0])
    fresh.load(storage.digests())
    assert trees.leaves == fresh.leaves


async def test_trees_built_while_a_batch_fails_agree_with_the_disk(
    storage: Storage, digest_changes: DigestChanges
) -> None:
    ring = Ring(NODES, 8)
    assert await written(storage.write(b"k", Record.live(1, b"one"))) is True
    release = first_batch_fails(storage)
    failing = written(storage.write(b"k", Record.live(2, b"two")))
    await asyncio.sleep(0)
    trees = MerkleTrees(ring, NODES[0])
    snapshot = storage.landed_digests()
    digest_changes.listen(trees.change)
    later = written(storage.write(b"k", Record.live(3, b"three")))
    release.set()
    with pytest.raises(DiskFull):
        await failing
    assert await later is True
    trees.load(snapshot)
    fresh = MerkleTrees(ring, NODES[0])
    fresh.load(storage.digests())
    assert trees.leaves == fresh.leaves


def trees_of(storage: Storage) -> MerkleTrees:
    trees = MerkleTrees(Ring(NODES, 8), NODES[0])
    trees.load(storage.digests())
    return trees


async def test_a_failed_collection_leaves_no_older_write_over_its_tombstone(
    storage: Storage, digest_changes: DigestChanges
) -> None:
    """Collection queues the removal of a tombstone; a write of the key decided against
    the queued removal saw no record at all, so one older than the tombstone was taken.
    When the removal's batch then failed (the volume full), the tombstone was still on
    the disk and the older live value was written over it: last-write-wins reversed, the
    deleted value back."""
    tombstone = Record.deleted(10)
    assert await written(storage.write(b"k", tombstone)) is True
    trees = trees_of(storage)
    digest_changes.listen(trees.change)
    release = first_batch_fails(storage)
    assert storage.collect(b"k", tombstone) is True  # its removal is queued
    await asyncio.sleep(0)  # in flight
    assert storage.write(b"k", Record.live(5, b"deleted value")) is False
    release.set()
    await storage.drain()
    assert storage.get(b"k") == tombstone
    assert trees.leaves == trees_of(storage).leaves


async def test_a_write_during_a_queued_collection_is_decided_against_what_it_removes(
    storage: Storage, digest_changes: DigestChanges
) -> None:
    tombstone = Record.deleted(10)
    assert await written(storage.write(b"k", tombstone)) is True
    trees = trees_of(storage)
    digest_changes.listen(trees.change)
    assert storage.collect(b"k", tombstone) is True
    assert storage.write(b"k", Record.live(5, b"older")) is False
    await storage.drain()
    assert storage.get(b"k") is None  # collected: the older write lost to the tombstone
    newer = Record.live(12, b"newer")
    assert await written(storage.write(b"k", Record.deleted(11))) is True
    assert storage.collect(b"k", Record.deleted(11)) is True
    await asyncio.sleep(0)  # the removal in flight, the newer write after it
    assert await written(storage.write(b"k", newer)) is True
    await storage.drain()
    assert storage.get(b"k") == newer
    assert trees.leaves == trees_of(storage).leaves


async def test_a_newer_write_after_a_failed_collection_replaces_the_tombstone(
    storage: Storage, digest_changes: DigestChanges
) -> None:
    tombstone = Record.deleted(10, copies=3)
    assert await written(storage.write(b"k", tombstone)) is True
    trees = trees_of(storage)
    digest_changes.listen(trees.change)
    release = first_batch_fails(storage)
    assert storage.collect(b"k", tombstone) is True
    await asyncio.sleep(0)
    newer = written(storage.write(b"k", Record.live(12, b"newer", copies=2)))
    release.set()
    assert await newer is True
    stored = storage.get(b"k")
    assert stored is not None and stored.value == b"newer" and stored.copies == 3
    assert trees.leaves == trees_of(storage).leaves


async def test_a_hint_whose_removal_failed_is_delivered_again_and_removed(
    tmp_path: Path,
) -> None:
    """A delivered hint's removal is queued; if its batch fails, the hint is still on the
    disk but gone from the store's index. Delivered again, `delivered` must remove it,
    not raise KeyError (which stops the delivery to that target every round)."""
    from dht.replication.hints import HintStore

    storage = Storage(tmp_path)
    try:
        hints = HintStore(storage.hints, storage.disk, 1 << 20, 3600.0, lambda: 1_000)
        hints.add("http://b:2", b"k", Record.live(1, b"v"))
        await storage.drain()
        (hint,) = hints.for_target("http://b:2", 10)
        write = storage._queue._write

        def full(*args: Any) -> None:
            raise plyvel.IOError(NO_SPACE)

        storage._queue._write = full
        hints.delivered(hint)  # its removal queued, and its batch fails
        await storage.drain()
        storage._queue._write = write
        (again,) = hints.for_target("http://b:2", 10)  # still on the disk
        hints.delivered(again)
        await storage.drain()
        assert list(hints.for_target("http://b:2", 10)) == []
        assert hints.pending["http://b:2"] == 0
    finally:
        storage.close()
