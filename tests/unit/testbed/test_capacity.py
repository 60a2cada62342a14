"""The lazy filesystem's fixed capacity (dht/testbed/capacity.py): what a write, a
truncate and a file's removal take and give back, counted in whole blocks. Pure: the
mounted filesystem's side is tests/testbed/test_power_loss_capacity.py."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from dht.testbed.capacity import BLOCK, Capacity, NoSpace, blocks_under


def test_a_write_takes_the_blocks_its_growth_needs_and_an_overwrite_none() -> None:
    capacity = Capacity(10 * BLOCK)
    assert capacity.room_for_write(0, 0, BLOCK + 1) == BLOCK + 1
    assert capacity.used == 2
    assert capacity.room_for_write(BLOCK + 1, 0, BLOCK + 1) == BLOCK + 1  # within the file
    assert capacity.used == 2


def test_a_write_past_the_capacity_writes_what_fits_and_then_nothing_fits() -> None:
    capacity = Capacity(4 * BLOCK)
    assert capacity.room_for_write(0, 0, 100) == 100  # one file of 100 bytes: one block
    assert capacity.room_for_write(0, 0, 10 * BLOCK) == 3 * BLOCK  # another: what is left
    assert capacity.free == 0
    with pytest.raises(NoSpace) as refused:
        capacity.room_for_write(3 * BLOCK, 3 * BLOCK, 1)
    assert refused.value.errno == errno.ENOSPC
    # The rest of a file's last block is its own: writing it needs no new block.
    assert capacity.room_for_write(100, 100, BLOCK - 100) == BLOCK - 100


def test_a_truncate_that_grows_past_the_capacity_is_refused_and_shrinking_gives_room() -> None:
    capacity = Capacity(4 * BLOCK)
    capacity.room_for_write(0, 0, 4 * BLOCK)
    with pytest.raises(NoSpace):
        capacity.resize(0, 1)
    capacity.resize(4 * BLOCK, BLOCK)
    assert capacity.free == 3


def test_a_file_gone_gives_its_blocks_back() -> None:
    capacity = Capacity(4 * BLOCK, used_bytes=4 * BLOCK)
    capacity.release(2 * BLOCK)
    assert (capacity.used, capacity.free) == (2, 2)


def test_a_recount_counts_each_regular_file_once_by_its_size(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(bytes(BLOCK + 1))
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "b").write_bytes(b"x")
    (tmp_path / "link").hardlink_to(tmp_path / "a")
    (tmp_path / "symlink").symlink_to(tmp_path / "a")
    assert blocks_under(tmp_path) == 3
    capacity = Capacity(10 * BLOCK)
    capacity.recount(tmp_path)
    assert capacity.free == 7
