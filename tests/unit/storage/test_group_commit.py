"""The group commit (dht/storage/group_commit.py, SPEC.md rule 10.2) with real LevelDB in
a temporary folder: writes taken together land in one synced batch, each answered, and
read, only once that batch is on the disk; last-write-wins and the trees' digests stay
exact across writes of one key in one batch or in two; a batch that fails fails only
its own writes; closing writes what is still queued and answers none of it."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import plyvel
import pytest

from dht.model.merkle import Digest
from dht.model.record import Record
from dht.storage import group_commit
from dht.storage.digest_changes import DigestChanges
from dht.storage.disk import DiskFull
from dht.storage.store import Storage

NO_SPACE = "IO error: leveldb/000005.log: No space left on device"
Changes = list[tuple[bytes, Digest | None, Digest | None]]


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


def listen(digest_changes: DigestChanges) -> Changes:
    changes: Changes = []
    digest_changes.listen(lambda key, old, new: changes.append((key, old, new)))
    return changes


@contextmanager
def writer_held(storage: Storage) -> Iterator[threading.Event]:
    """Keeps the writer thread busy until the event is set: a batch flushed meanwhile is
    in flight, not landed."""
    release = threading.Event()
    storage._writer.write(release.wait, lambda error: None)
    try:
        yield release
    finally:
        release.set()


def written(result: bool | asyncio.Future[bool]) -> asyncio.Future[bool]:
    assert isinstance(result, asyncio.Future), "a group-committed write answers later"
    return result


async def test_writes_taken_together_share_one_synced_batch(storage: Storage) -> None:
    writes = [written(storage.write(b"k%d" % i, Record.live(1, b"v"))) for i in range(50)]
    assert await asyncio.gather(*writes) == [True] * 50
    assert storage.status() == {
        "durability": "group",
        "syncs": 1,
        "synced_writes": 50,
        "writes_per_sync": 50.0,
    }


async def test_a_write_is_read_only_once_its_batch_is_on_the_disk(storage: Storage) -> None:
    with writer_held(storage) as release:
        landing = written(storage.write(b"k", Record.live(1, b"v")))
        await asyncio.sleep(0.01)
        assert not landing.done()
        assert storage.get(b"k") is None and storage.digest(b"k") is None
        assert list(storage.scan(b"", None)) == []
        release.set()
        assert await landing is True
    assert storage.get(b"k") == Record.live(1, b"v")


async def test_in_one_batch_the_newer_write_of_a_key_wins_whatever_the_order(
    storage: Storage, digest_changes: DigestChanges
) -> None:
    changes = listen(digest_changes)
    older, newer = Record.live(1, b"old"), Record.live(2, b"new")
    first = written(storage.write(b"a", older))
    second = written(storage.write(b"a", newer))
    third = written(storage.write(b"b", newer))
    fourth = written(storage.write(b"b", older))  # older than one still queued
    assert await asyncio.gather(first, second, third, fourth) == [True, True, True, False]
    assert storage.get(b"a") == newer and storage.get(b"b") == newer
    # One change per key: what was stored before the batch, to what is after it.
    assert [(key, old) for key, old, _ in changes] == [(b"a", None), (b"b", None)]
    assert [new for _, _, new in changes] == [storage.digest(b"a"), storage.digest(b"b")]
    assert storage.status()["syncs"] == 1


async def test_a_write_after_one_in_flight_is_decided_against_it(
    storage: Storage, digest_changes: DigestChanges
) -> None:
    changes = listen(digest_changes)
    with writer_held(storage) as release:
        in_flight = written(storage.write(b"k", Record.live(2, b"two")))
        await asyncio.sleep(0)  # flushed: in the thread's queue
        older = written(storage.write(b"k", Record.live(1, b"one")))
        newer = written(storage.write(b"k", Record.live(3, b"three")))
        await asyncio.sleep(0.01)
        assert not older.done(), "answered only once the newer write it lost to is synced"
        release.set()
        assert await asyncio.gather(in_flight, older, newer) == [True, False, True]
    assert storage.get(b"k") == Record.live(3, b"three")
    (_, none, two), (_, two_again, three) = changes
    assert none is None and two is not None and two_again == two
    assert three == storage.digest(b"k")


async def test_an_older_write_than_one_on_the_disk_is_refused_at_once(storage: Storage) -> None:
    assert await written(storage.write(b"k", Record.live(2, b"two"))) is True
    assert storage.write(b"k", Record.live(1, b"one")) is False


async def test_a_write_delivered_again_is_answered_stored_queued_or_landed(
    storage: Storage,
) -> None:
    """SPEC.md rule 9.13: "kept" sends a client write again newer; the write's own
    record brought first by a read repair (here with the wider F a replica gave it) is
    not a newer record, whether its batch is still queued or on the disk."""
    with writer_held(storage) as release:
        first = written(storage.write(b"k", Record.live(2, b"two", copies=3)))
        again = written(storage.write(b"k", Record.live(2, b"two", copies=2)))
        await asyncio.sleep(0.01)
        assert not again.done(), "answered before the record it matches is synced"
        release.set()
        assert await asyncio.gather(first, again) == [True, True]
    assert storage.write(b"k", Record.live(2, b"two", copies=2)) is True  # landed: at once
    assert storage.write(b"k", Record.live(2, b"one", copies=2)) is False
    assert storage.get(b"k") == Record.live(2, b"two", copies=3)


class FullOnce:
    """A LevelDB handle whose next batch fails as a full volume makes it fail."""

    def __init__(self, db: Any) -> None:
        self._db = db
        self.failed = False

    def write_batch(self, *args: Any, **kwargs: Any) -> Any:
        if self.failed:
            return self._db.write_batch(*args, **kwargs)
        self.failed = True
        raise plyvel.IOError(NO_SPACE)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


async def test_a_batch_that_fails_fails_only_its_own_writes(
    storage: Storage, digest_changes: DigestChanges
) -> None:
    changes = listen(digest_changes)
    assert await written(storage.write(b"k", Record.live(1, b"one"))) is True
    stored_before = storage.digest(b"k")
    real = storage._db
    with writer_held(storage) as release:
        failing = written(storage.write(b"k", Record.live(2, b"two")))
        lost_to_it = written(storage.write(b"j", Record.live(5, b"j")))
        await asyncio.sleep(0)  # flushed: the failing batch is in flight
        refused_for_it = written(storage.write(b"k", Record.live(1, b"one, again")))
        after = written(storage.write(b"k", Record.live(3, b"three")))
        storage._db = FullOnce(real)
        release.set()
        results = await asyncio.gather(failing, lost_to_it, refused_for_it, return_exceptions=True)
        assert all(isinstance(result, DiskFull) for result in results), results
        assert await after is True
        storage._db = real
    assert storage.get(b"k") == Record.live(3, b"three") and storage.get(b"j") is None
    # The trees heard one -> three: the failed batch's two never was stored.
    assert changes[-1] == (b"k", stored_before, storage.digest(b"k"))
    assert len(changes) == 2


async def test_collection_is_queued_and_waits_for_a_write_of_its_key(
    storage: Storage, digest_changes: DigestChanges
) -> None:
    changes = listen(digest_changes)
    tombstone = Record.deleted(1)
    assert await written(storage.write(b"k", tombstone)) is True
    entry = storage.digest(b"k")
    newer = written(storage.write(b"k", Record.live(2, b"back")))
    assert storage.collect(b"k", tombstone) is False  # a write of the key is queued
    await newer
    assert await written(storage.write(b"t", tombstone)) is True
    assert storage.collect(b"t", tombstone) is True
    assert storage.get(b"t") == tombstone  # removed once its batch lands
    await storage.writes_landed()
    assert storage.get(b"t") is None
    assert changes[0] == (b"k", None, entry)
    assert changes[-1] == (b"t", storage_digest_of(changes, b"t"), None)


def storage_digest_of(changes: Changes, key: bytes) -> Digest | None:
    return next(new for changed, _, new in changes if changed == key and new is not None)


async def test_hints_and_nonces_are_queued_and_a_queued_hint_is_read_back(
    storage: Storage,
) -> None:
    with writer_held(storage) as release:
        storage.hints.put(b"peer\x00k", b"hint")
        storage.remember_nonce(b"nonce", 1234)
        await asyncio.sleep(0)
        assert storage.hints.get(b"peer\x00k") == b"hint"  # what HintStore compares with
        assert list(storage.hints.iterator()) == []  # delivered once on the disk
        release.set()
        await storage.drain()
    assert list(storage.hints.iterator()) == [(b"peer\x00k", b"hint")]
    assert storage.kept_nonces() == [(1234, b"nonce")]


async def test_closing_writes_what_is_queued_and_answers_none_of_it(tmp_path: Path) -> None:
    storage = Storage(tmp_path)
    landing = written(storage.write(b"k", Record.live(1, b"v")))
    storage.close()  # before the loop ran the batch
    assert not landing.done()
    reopened = Storage(tmp_path, durability="none")
    try:
        assert reopened.get(b"k") == Record.live(1, b"v")
    finally:
        reopened.close()


async def test_with_durability_none_a_small_write_is_stored_at_once(tmp_path: Path) -> None:
    storage = Storage(tmp_path, durability="none")
    try:
        assert storage.write(b"k", Record.live(1, b"v")) is True
        assert storage.status()["syncs"] == 0
    finally:
        storage.close()


async def test_with_durability_each_every_small_write_is_synced_on_its_own(
    tmp_path: Path,
) -> None:
    storage = Storage(tmp_path, durability="each")
    try:
        for i in range(3):
            assert storage.write(b"k%d" % i, Record.live(1, b"v")) is True
        assert storage.status()["syncs"] == storage.status()["synced_writes"] == 3
    finally:
        storage.close()


async def test_a_batch_slow_to_reach_the_disk_is_logged_with_how_long_it_took(
    storage: Storage, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(group_commit, "SLOW_BATCH_SECONDS", 0.05)
    with caplog.at_level(logging.WARNING, logger=group_commit.__name__):
        assert await written(storage.write(b"fast", Record.live(1, b"v")))
        assert "to reach the disk" not in caplog.text
        with writer_held(storage) as release:
            slow = written(storage.write(b"slow", Record.live(1, b"v")))
            await asyncio.sleep(0.1)  # the writer thread is busy: the batch waits
            release.set()
            assert await slow
    assert "a batch of 1 writes took" in caplog.text and "(fsync)" in caplog.text
