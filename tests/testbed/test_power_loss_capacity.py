"""The power-loss filesystem as a volume of fixed size (dht/testbed/capacity.py,
power_loss.py's `capacity`), mounted for real: statfs says its size, a ballast takes its
last byte and a write past it fails with ENOSPC, and room comes back when the ballast
goes or a power cut drops unsynced data. Skipped with the reason where FUSE cannot be
mounted (not root, no /dev/fuse)."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from dht.testbed.capacity import BLOCK
from dht.testbed.power_loss import PowerLossMount, mount, power_loss_unavailable
from tests.testbed.test_power_loss import write as append

SIZE = 8 * 1024 * 1024


@pytest.fixture
def volume(tmp_path: Path) -> Iterator[PowerLossMount]:
    reason = power_loss_unavailable()
    if reason is not None:
        pytest.skip(reason)
    (tmp_path / "backing").mkdir()
    (tmp_path / "backing" / "there-before").write_bytes(bytes(BLOCK))
    with mount(tmp_path / "backing", tmp_path / "mount", capacity=SIZE) as mounted:
        yield mounted


def test_statfs_says_the_capacity_less_what_the_files_take(volume: PowerLossMount) -> None:
    found = os.statvfs(volume.mountpoint)
    assert found.f_blocks * found.f_frsize == SIZE
    assert volume.free_bytes() == SIZE - BLOCK  # the file the backing folder had


def test_a_ballast_takes_the_last_byte_and_a_write_past_it_fails_until_it_goes(
    volume: PowerLossMount,
) -> None:
    append(volume.mountpoint / "log", b"kept", fsync=True)
    taken = volume.fill()
    assert taken == SIZE - 2 * BLOCK, taken
    assert volume.free_bytes() == 0
    with pytest.raises(OSError) as refused:
        append(volume.mountpoint / "other", bytes(BLOCK))
    assert refused.value.errno == errno.ENOSPC
    volume.free()
    assert volume.free_bytes() == SIZE - 2 * BLOCK
    append(volume.mountpoint / "log", b" and more", fsync=True)
    assert (volume.mountpoint / "log").read_bytes() == b"kept and more"
    # The ballast was never synced: the backing disk never held it.
    assert not (volume.backing / ".ballast").exists()


def test_a_power_cut_gives_back_the_room_of_what_it_dropped(volume: PowerLossMount) -> None:
    append(volume.mountpoint / "synced", bytes(BLOCK), fsync=True)
    append(volume.mountpoint / "unsynced", bytes(1024 * 1024))
    assert volume.free_bytes() == SIZE - 2 * BLOCK - 1024 * 1024
    volume.power_cut()
    assert volume.free_bytes() == SIZE - 2 * BLOCK


def test_a_file_removed_gives_its_room_back(volume: PowerLossMount) -> None:
    append(volume.mountpoint / "file", bytes(3 * BLOCK), fsync=True)
    os.rename(volume.mountpoint / "file", volume.mountpoint / "there-before")
    assert volume.free_bytes() == SIZE - 3 * BLOCK
    os.unlink(volume.mountpoint / "there-before")
    assert volume.free_bytes() == SIZE
