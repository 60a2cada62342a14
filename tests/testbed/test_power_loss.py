"""The power-loss filesystem (dht/testbed/power_loss.py, lazy_filesystem.py), mounted for
real: a power cut takes exactly what was not fsynced; metadata is durable at once; the
mount goes away whatever happened to its process. Skipped with the reason where FUSE
cannot be mounted (not root, no /dev/fuse); that reason is checked here too."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from dht.testbed import power_loss
from dht.testbed.page_cache import PAGE, Unsynced
from dht.testbed.power_loss import PowerLossMount, PowerLossUnavailable, mount, mounted


def write(path: Path, data: bytes, *, fsync: bool = False, flags: int = 0) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | flags, 0o644)
    try:
        os.write(fd, data)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def test_a_write_not_fsynced_is_gone_after_a_power_cut(lazy_mount: PowerLossMount) -> None:
    file = lazy_mount.mountpoint / "file"
    write(file, b"acknowledged, never synced")
    lazy_mount.power_cut()
    assert file.read_bytes() == b""


def test_a_write_fsynced_survives_a_power_cut(lazy_mount: PowerLossMount) -> None:
    file = lazy_mount.mountpoint / "file"
    write(file, b"synced", fsync=True)
    lazy_mount.power_cut()
    assert file.read_bytes() == b"synced"
    assert (lazy_mount.backing / "file").read_bytes() == b"synced"


def test_a_write_through_a_descriptor_opened_o_dsync_survives(lazy_mount: PowerLossMount) -> None:
    file = lazy_mount.mountpoint / "file"
    write(file, b"synced by its flag", flags=os.O_DSYNC)
    lazy_mount.power_cut()
    assert file.read_bytes() == b"synced by its flag"


def test_of_two_files_only_the_one_synced_keeps_its_data(lazy_mount: PowerLossMount) -> None:
    synced, unsynced = lazy_mount.mountpoint / "synced", lazy_mount.mountpoint / "unsynced"
    write(synced, b"kept", fsync=True)
    write(unsynced, b"lost")
    lazy_mount.power_cut()
    assert (synced.read_bytes(), unsynced.read_bytes()) == (b"kept", b"")


def test_appends_after_the_last_sync_are_cut_back_to_the_synced_length(
    lazy_mount: PowerLossMount,
) -> None:
    """A log whose tail was never synced comes back short, as LevelDB's log does."""
    log = lazy_mount.mountpoint / "log"
    write(log, b"record 1;" * 1000, fsync=True)
    write(log, b"record 2;" * 1000)
    lazy_mount.power_cut()
    assert log.read_bytes() == b"record 1;" * 1000


def test_reads_and_sizes_see_writes_not_yet_synced(lazy_mount: PowerLossMount) -> None:
    file = lazy_mount.mountpoint / "file"
    write(file, b"a" * 10_000, fsync=True)
    with open(file, "r+b") as handle:  # over a page boundary, inside the file
        handle.seek(PAGE - 1)
        handle.write(b"XY")
    write(file, b"tail")
    expected = b"a" * (PAGE - 1) + b"XY" + b"a" * (10_000 - PAGE - 1) + b"tail"
    assert file.read_bytes() == expected
    assert file.stat().st_size == 10_004
    assert (lazy_mount.backing / "file").read_bytes() == b"a" * 10_000
    assert lazy_mount.unsynced() == Unsynced(files=1, bytes=3 * PAGE)


def test_a_truncate_not_synced_is_undone_by_a_power_cut(lazy_mount: PowerLossMount) -> None:
    file = lazy_mount.mountpoint / "file"
    write(file, b"whole", fsync=True)
    os.truncate(file, 2)
    assert file.read_bytes() == b"wh"
    lazy_mount.power_cut()
    assert file.read_bytes() == b"whole"


def test_a_file_created_and_never_synced_is_there_empty_after_a_cut(
    lazy_mount: PowerLossMount,
) -> None:
    """Creation is metadata, durable at once (as in LazyFS); the data is not."""
    (lazy_mount.mountpoint / "folder").mkdir()
    file = lazy_mount.mountpoint / "folder" / "new"
    write(file, b"never synced")
    lazy_mount.power_cut()
    assert file.exists() and file.read_bytes() == b""


def test_a_rename_is_durable_at_once_and_the_data_goes_with_the_file(
    lazy_mount: PowerLossMount,
) -> None:
    """LevelDB's CURRENT: written to a temporary file, synced, renamed over the old one."""
    mountpoint = lazy_mount.mountpoint
    write(mountpoint / "CURRENT", b"MANIFEST-000001\n", fsync=True)
    write(mountpoint / "000002.dbtmp", b"MANIFEST-000002\n", fsync=True)
    os.rename(mountpoint / "000002.dbtmp", mountpoint / "CURRENT")
    write(mountpoint / "draft", b"synced;", fsync=True)
    write(mountpoint / "draft", b"not synced")
    os.rename(mountpoint / "draft", mountpoint / "renamed")
    assert (mountpoint / "renamed").read_bytes() == b"synced;not synced"
    lazy_mount.power_cut()
    assert sorted(os.listdir(mountpoint)) == ["CURRENT", "renamed"]
    assert (mountpoint / "CURRENT").read_bytes() == b"MANIFEST-000002\n"
    assert (mountpoint / "renamed").read_bytes() == b"synced;"


def test_a_new_file_never_sees_the_unsynced_data_of_a_deleted_one(
    lazy_mount: PowerLossMount,
) -> None:
    """The cache is by inode; a deleted file's inode may be given to the next one."""
    for round_number in range(20):
        old, new = lazy_mount.mountpoint / "old", lazy_mount.mountpoint / f"new-{round_number}"
        write(old, b"stale" * 2000)
        old.unlink()
        write(new, b"fresh")
        assert new.read_bytes() == b"fresh"
    assert lazy_mount.power_cut().files == 20  # each new file, and no deleted one


def test_unmount_takes_the_mount_away_when_the_filesystem_was_killed(
    lazy_mount: PowerLossMount,
) -> None:
    write(lazy_mount.mountpoint / "file", b"data")
    lazy_mount.process.send_signal(signal.SIGKILL)
    lazy_mount.process.wait()
    lazy_mount.unmount()
    assert not mounted(lazy_mount.mountpoint)
    assert os.listdir(lazy_mount.mountpoint) == []
    assert (lazy_mount.backing / "file").read_bytes() == b""


def test_without_root_the_reason_says_so_and_mount_raises_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(power_loss.os, "geteuid", lambda: 1000)
    assert power_loss.power_loss_unavailable() == "mounting the power-loss filesystem needs root"
    with pytest.raises(PowerLossUnavailable, match="needs root"):
        mount(tmp_path / "backing", tmp_path / "mount")
    assert not (tmp_path / "mount").exists()


def test_without_fuse_the_reason_names_dev_fuse(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(power_loss.os, "geteuid", lambda: 0)

    def no_device(path: str, flags: int) -> int:
        raise FileNotFoundError(2, "No such file or directory", path)

    monkeypatch.setattr(power_loss.os, "open", no_device)
    reason = power_loss.power_loss_unavailable()
    assert reason is not None and reason.startswith("cannot open /dev/fuse")
