"""A volume with not a byte left fails a write whatever the reserve said (the reserve is
measured, not guaranteed: a compaction can take the last bytes). The clock's ceiling
then says DiskFull too, so the node answers 507, never a 500 (a full-volume run of
tests/spec/test_dht_disk_full.py once got `500 Internal Server Error: IOError` from the
ceiling's save). The ceiling lives in a file of its own, apart from LevelDB."""

from __future__ import annotations

import asyncio
import errno
import os
from pathlib import Path
from typing import Any

import pytest

from dht.model.record import Record
from dht.storage.disk import DiskFull
from dht.storage.store import CEILING_FILE, CLOCK_CEILING, Storage


class NoWrites:
    """A LevelDB handle that refuses writes: LevelDB lets one writer in at a time, so a
    write here would wait for the writer thread's whole batch and its fsync."""

    def __init__(self, db: Any) -> None:
        self._db = db

    def put(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("the clock's ceiling went through LevelDB")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


def test_the_clock_ceiling_is_disk_full_only_when_its_file_cannot_be_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = Storage(tmp_path)

    def no_room(*args: Any) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_room)  # the file's making
    try:
        with pytest.raises(DiskFull, match="No space left"):
            storage.save_clock_ceiling(12345)
    finally:
        monkeypatch.undo()
        storage.close()


def test_a_full_volume_still_saves_the_clock_ceiling_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once its file is made, a save overwrites a slot of it: no new block, so a volume
    with not a byte left does not stop the clock, nor the reads that move it."""
    storage = Storage(tmp_path)
    storage.save_clock_ceiling(100)
    real_open = os.open

    def no_new_files(path: Any, flags: int, *args: Any) -> int:
        if flags & os.O_CREAT:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", no_new_files)
    try:
        for ceiling in (200, 300, 400):
            storage.save_clock_ceiling(ceiling)
    finally:
        monkeypatch.undo()
        storage.close()
    again = Storage(tmp_path)
    try:
        assert again.clock_ceiling() == 400
    finally:
        again.close()


def test_a_torn_save_of_the_ceiling_leaves_the_one_before(tmp_path: Path) -> None:
    storage = Storage(tmp_path)
    storage.save_clock_ceiling(100)
    storage.save_clock_ceiling(200)
    storage.close()
    path = tmp_path / CEILING_FILE
    data = bytearray(path.read_bytes())
    torn = 0 if data[:8] == (200).to_bytes(8, "big") else 16
    data[torn + 3] ^= 0xFF  # the slot of 200, torn
    path.write_bytes(bytes(data))
    again = Storage(tmp_path)
    try:
        assert again.clock_ceiling() == 100
        again.save_clock_ceiling(300)  # overwrites the torn slot, not the good one
        assert again.clock_ceiling() == 300
    finally:
        again.close()


def test_the_clock_ceiling_is_saved_apart_from_leveldb_and_read_from_older_folders(
    tmp_path: Path,
) -> None:
    """Saved in a file of its own, so a synced save never waits for LevelDB's writer;
    a folder from before the file keeps the ceiling LevelDB holds."""
    storage = Storage(tmp_path)
    real = storage._db
    real.put(CLOCK_CEILING, (500).to_bytes(8, "big"), sync=True)
    assert storage.clock_ceiling() == 500
    storage._db = NoWrites(real)  # LevelDB's writer may be in a batch's fsync
    try:
        storage.save_clock_ceiling(900)
    finally:
        storage._db = real
        storage.close()
    assert (tmp_path / CEILING_FILE).exists()
    again = Storage(tmp_path)
    try:
        assert again.clock_ceiling() == 900
    finally:
        again.close()


def test_a_ceiling_file_of_the_format_before_the_slots_still_holds(tmp_path: Path) -> None:
    """The commit before the slots wrote the ceiling as 8 bytes (replaced durably): a
    folder it saved in must start from that ceiling, not from LevelDB's older entry
    (nor from the newest version stored), and keep it through the first save."""
    storage = Storage(tmp_path)
    storage._db.put(CLOCK_CEILING, (500).to_bytes(8, "big"), sync=True)
    storage.close()
    (tmp_path / CEILING_FILE).write_bytes((900).to_bytes(8, "big"))
    again = Storage(tmp_path)
    try:
        assert again.clock_ceiling() == 900
        again.save_clock_ceiling(900)  # a clean stop of a clock that never moved
    finally:
        again.close()
    third = Storage(tmp_path)
    try:
        assert third.clock_ceiling() == 900
    finally:
        third.close()


async def _write(storage: Storage, key: bytes, record: Record) -> None:
    landed = storage.write(key, record)
    if not isinstance(landed, bool):
        assert await landed
    await storage.drain()


class PowerCut(BaseException):
    """The process stops here: what it had not synced is gone."""


@pytest.mark.parametrize("cut", ["sync", "slot"])
@pytest.mark.parametrize("older", ["leveldb", "records"])
def test_a_power_cut_during_the_ceiling_files_first_save_keeps_the_ceiling_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, older: str, cut: str
) -> None:
    """A folder from before the file: its first save makes the file. A power cut after
    the file is made but before the ceiling in it is synced must leave a file that says
    no less than the ceiling the folder had (LevelDB's entry, or the newest version
    stored): a file of zeros would start the clock from its wall clock, behind versions
    it issued."""
    storage = Storage(tmp_path)
    if older == "leveldb":
        storage._db.put(CLOCK_CEILING, (5_000).to_bytes(8, "big"), sync=True)
    else:
        asyncio.run(_write(storage, b"k", Record.live(5_000, b"v")))
    floor = storage.clock_ceiling()
    assert floor == 5_000
    real_pwrite, real_fsync = os.pwrite, os.fsync

    def cut_before_the_slot(fd: int, data: bytes, offset: int) -> int:
        if cut == "slot" and len(data) == 16:  # a slot: its save never reaches the disk
            raise PowerCut
        return real_pwrite(fd, data, offset)

    def cut_at_the_first_sync(fd: int) -> None:
        if cut == "sync":  # what was written and not synced yet stays, as zeros or not
            raise PowerCut
        real_fsync(fd)

    monkeypatch.setattr(os, "pwrite", cut_before_the_slot)
    monkeypatch.setattr(os, "fsync", cut_at_the_first_sync)
    try:
        storage.save_clock_ceiling(floor + 1_000)
    except PowerCut:
        pass
    monkeypatch.undo()
    storage.close()
    again = Storage(tmp_path)
    try:
        assert again.clock_ceiling() >= floor
    finally:
        again.close()
