"""The lazy filesystem's page cache (dht.testbed.page_cache) over a plain backing file:
what readers see before a sync, what a sync writes, what a cut leaves."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from dht.testbed.page_cache import PAGE, PageCache, Unsynced, UnsyncedFile


@pytest.fixture
def backing(tmp_path: Path) -> Iterator[int]:
    """A backing file holding 10 000 bytes of 'b', open read-write."""
    path = tmp_path / "file"
    path.write_bytes(b"b" * 10_000)
    fd = os.open(path, os.O_RDWR)
    yield fd
    os.close(fd)


def contents(fd: int) -> bytes:
    return os.pread(fd, 1 << 20, 0)


def test_a_write_is_read_back_over_the_backing_bytes_around_it(backing: int) -> None:
    unsynced = UnsyncedFile(10_000)
    unsynced.write(backing, PAGE - 2, b"xxxx")  # across a page boundary
    assert unsynced.read(backing, 0, 10_000) == b"b" * (PAGE - 2) + b"xxxx" + b"b" * (
        10_000 - PAGE - 2
    )
    assert contents(backing) == b"b" * 10_000


def test_a_write_past_the_end_grows_the_file_with_zeros_between(backing: int) -> None:
    unsynced = UnsyncedFile(10_000)
    unsynced.write(backing, 20_000, b"end")
    assert unsynced.size == 20_003
    assert unsynced.read(backing, 9_998, 6) == b"bb\0\0\0\0"
    assert unsynced.read(backing, 19_999, 100) == b"\0end"


def test_a_truncate_then_a_growth_reads_zeros_where_the_old_bytes_were(backing: int) -> None:
    unsynced = UnsyncedFile(10_000)
    unsynced.truncate(100)
    unsynced.write(backing, 200, b"new")
    assert unsynced.read(backing, 0, 1_000) == b"b" * 100 + b"\0" * 100 + b"new"
    assert contents(backing) == b"b" * 10_000


def test_a_sync_writes_exactly_the_file_as_read(backing: int) -> None:
    unsynced = UnsyncedFile(10_000)
    unsynced.truncate(5_000)
    unsynced.write(backing, 6_000, b"tail")
    unsynced.write(backing, 0, b"head")
    seen = unsynced.read(backing, 0, 1 << 20)
    unsynced.sync(backing, data_only=False)
    assert contents(backing) == seen == b"head" + b"b" * 4_996 + b"\0" * 1_000 + b"tail"
    assert not unsynced.dirty


def test_a_truncate_alone_is_dirty_and_its_sync_shortens_the_backing_file(backing: int) -> None:
    unsynced = UnsyncedFile(10_000)
    unsynced.truncate(3)
    assert unsynced.dirty
    unsynced.sync(backing, data_only=True)
    assert contents(backing) == b"bbb"


def test_a_cut_drops_every_file_and_says_how_much(backing: int) -> None:
    cache = PageCache()
    with cache.holding(1, lambda: 10_000) as first:
        first.write(backing, 0, b"a" * (PAGE + 1))
    with cache.holding(2, lambda: 0) as second:
        second.write(backing, 0, b"z")
    assert cache.unsynced() == Unsynced(files=2, bytes=3 * PAGE)
    assert cache.cut() == Unsynced(files=2, bytes=3 * PAGE)
    assert first.dropped and second.dropped
    assert cache.find(1) is None and cache.unsynced() == Unsynced(0, 0)
    assert contents(backing) == b"b" * 10_000


def test_a_synced_file_leaves_the_cache(backing: int) -> None:
    cache = PageCache()
    with cache.holding(1, lambda: 10_000) as unsynced:
        unsynced.write(backing, 0, b"a")
        unsynced.sync(backing, data_only=True)
        cache.release_if_clean(1, unsynced)
    assert cache.find(1) is None
    with cache.holding_if_cached(1) as found:
        assert found is None


def test_a_file_whose_last_name_goes_is_forgotten_so_its_inode_can_be_reused(
    backing: int,
) -> None:
    cache = PageCache()
    with cache.holding(7, lambda: 10_000) as old:
        old.write(backing, 0, b"old")
    with cache.changing_names() as forget:
        forget(7)
    with cache.holding(7, lambda: 0) as new:
        assert new is not old and new.size == 0
