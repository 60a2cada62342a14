"""Storage writes of one key land in the order they were asked for, even when a large
value goes to the writer thread and a small one would be written at once (real LevelDB
in a temporary folder)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from dht.storage.record import Record
from dht.storage.store import LARGE_WRITE, Storage

LARGE = b"L" * LARGE_WRITE
SMALL = b"s"


async def test_a_newer_small_write_is_not_undone_by_an_older_large_one_landing_later(
    tmp_path: Path,
) -> None:
    storage = Storage(tmp_path)
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
    storage = Storage(tmp_path)
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
