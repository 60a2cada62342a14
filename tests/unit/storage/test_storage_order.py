"""Storage writes of one key land in the order they were asked for, even when a large
value goes to the writer thread and a small one would be written at once (real LevelDB
in a temporary folder)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from dht.limits import LARGE_WRITE
from dht.model.merkle import Digest
from dht.model.record import Record
from dht.storage.digest_changes import DigestChanges
from dht.storage.store import Storage

LARGE = b"L" * LARGE_WRITE
SMALL = b"s"


async def test_a_newer_small_write_is_not_undone_by_an_older_large_one_landing_later(
    tmp_path: Path,
) -> None:
    storage = Storage(tmp_path, durability="none")
    try:
        older_large = storage.write(b"k", Record.live(1, LARGE))
        assert isinstance(older_large, asyncio.Future)
        await asyncio.sleep(0)  # now in the writer thread
        newer_small = storage.write(b"k", Record.live(2, SMALL))
        assert isinstance(newer_small, asyncio.Future)  # waits for the large one
        assert await asyncio.gather(older_large, newer_small) == [True, True]
        assert storage.get(b"k") == Record.live(2, SMALL)
    finally:
        storage.close()


async def test_an_older_small_write_after_a_newer_large_one_is_kept_out(tmp_path: Path) -> None:
    storage = Storage(tmp_path, durability="none")
    try:
        newer_large = storage.write(b"k", Record.live(2, LARGE))
        await asyncio.sleep(0)
        older_small = storage.write(b"k", Record.live(1, SMALL))
        assert isinstance(older_small, asyncio.Future)
        assert await asyncio.gather(newer_large, older_small) == [True, False]
        assert storage.get(b"k") == Record.live(2, LARGE)
        assert storage.write(b"other", Record.live(1, SMALL)) is True  # other keys: at once
    finally:
        storage.close()


async def test_collection_leaves_a_key_alone_while_its_large_write_is_in_the_thread(
    tmp_path: Path,
) -> None:
    """Issue 24, finding 5: `collect` read the tombstone while the new value was still in
    the writer thread, removed it, and the value's landing then took the tombstone's
    digest out of the trees a second time (or, landing between the read and the
    removal, the new value itself was removed)."""
    digest_changes = DigestChanges()
    storage = Storage(tmp_path, durability="none", changes=digest_changes)
    changes: list[tuple[Digest | None, Digest | None]] = []
    digest_changes.listen(lambda key, old, new: changes.append((old, new)))
    release = threading.Event()
    try:
        tombstone = Record.deleted(1)
        assert storage.write(b"k", tombstone) is True
        # Hold the writer thread so the large write is known to be in it, not landed.
        held = asyncio.get_running_loop().create_future()
        storage._writer.write(release.wait, held.set_result)
        landing = storage.write(b"k", Record.live(2, LARGE))
        await asyncio.sleep(0)
        assert storage.collect(b"k", tombstone) is False
        release.set()
        await held
        assert await landing is True
        assert storage.get(b"k") == Record.live(2, LARGE)
        # Every digest taken out was put in before, once: the trees stay exact.
        put_in = [new for _, new in changes if new is not None]
        taken_out = [old for old, _ in changes if old is not None]
        assert all(put_in.count(entry) >= taken_out.count(entry) for entry in taken_out)
    finally:
        release.set()
        storage.close()
