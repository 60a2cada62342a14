"""The free-space reserve (dht.storage.disk), with the volume's free space and the clock faked."""

from __future__ import annotations

from pathlib import Path

import pytest

from dht.limits import RESUME_MARGIN
from dht.storage.disk import DiskFull, DiskSpace

MiB = 1024 * 1024
RESERVE = 32 * MiB


class Volume:
    def __init__(self, free: int) -> None:
        self.free = free
        self.measured = 0

    def __call__(self, path: Path) -> int:
        self.measured += 1
        return self.free


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def space(volume: Volume, clock: Clock) -> DiskSpace:
    return DiskSpace(Path("/data"), RESERVE, volume, clock, max_age=1.0)


def test_writes_that_leave_the_reserve_free_are_admitted_without_a_system_call() -> None:
    volume, clock = Volume(RESERVE + 10 * MiB), Clock()
    disk = space(volume, clock)
    for _ in range(9):
        disk.admit(MiB)
    assert volume.measured == 1  # only at start
    assert disk.free == RESERVE + MiB


def test_a_write_into_the_reserve_is_refused_then_every_write_until_space_is_back() -> None:
    volume, clock = Volume(RESERVE + MiB), Clock()
    disk = space(volume, clock)
    with pytest.raises(DiskFull, match="below the --disk-reserve of 32 MiB"):
        disk.admit(2 * MiB)
    assert disk.refusing and disk.refused == 1
    with pytest.raises(DiskFull):
        disk.admit(1)  # read-only now, however small the write
    volume.free = RESERVE + RESUME_MARGIN  # not yet past the margin with the write
    with pytest.raises(DiskFull):
        disk.admit(1)
    volume.free = RESERVE + RESUME_MARGIN + MiB
    disk.admit(1)
    assert not disk.refusing
    assert disk.status()["refusing_writes"] is False


def test_the_estimate_is_measured_again_once_stale() -> None:
    volume, clock = Volume(RESERVE + 100 * MiB), Clock()
    disk = space(volume, clock)
    volume.free = RESERVE  # filled by something else
    clock.now = 0.5
    disk.admit(1)  # fresh enough: trusted
    clock.now = 1.6
    with pytest.raises(DiskFull):
        disk.admit(1)


def test_a_restart_on_a_full_volume_starts_refusing() -> None:
    assert space(Volume(RESERVE + MiB // 2), Clock()).refusing
    assert not space(Volume(RESERVE + 2 * MiB), Clock()).refusing


def test_status_measures_again_once_stale_and_says_when_space_is_back() -> None:
    """A node whose writes fail before they reach the reserve's check (LevelDB refusing
    after a compaction took the last bytes) still shows the volume as it is now, not as
    it was at start (found by the disk-full spec test)."""
    volume, clock = Volume(RESERVE + MiB // 2), Clock()
    disk = space(volume, clock)
    assert disk.status()["refusing_writes"] is True
    volume.free = RESERVE + 40 * MiB  # space back, and no write since
    assert disk.status()["refusing_writes"] is True  # the reading is fresh: trusted
    clock.now = 1.6
    status = disk.status()
    assert status["free_bytes"] == RESERVE + 40 * MiB
    assert status["refusing_writes"] is False
