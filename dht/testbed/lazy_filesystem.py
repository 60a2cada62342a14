"""A FUSE filesystem that loses what was not fsynced when the power is cut (after
Jepsen's LazyFS, dsrhaslab/lazyfs, written anew on mfusepy).

Mounted over a directory, it serves a backing directory. What a file's writes and
truncates change stays in memory (`page_cache.py`) until the file is fsynced (or
fdatasynced, or written through a descriptor opened O_SYNC/O_DSYNC); reads see it, as
they see the kernel's page cache. A *power cut* (`cut` on the control socket) drops every
file's cache: the backing directory is then exactly what was synced, and the filesystem
serves on from it, as a machine does once it is powered up again.

Metadata is not cached, as in LazyFS: create, mkdir, rename, unlink, link, symlink,
chmod and utimens reach the backing directory at once and survive a cut (fsyncdir has
nothing left to do). So a file created and written but never synced is there after a cut,
with what it held when last synced: empty if never. A real filesystem may also lose the
file itself; software that survives the short file here (LevelDB's log recovery) must
survive that too, but this filesystem does not show it.

Attributes and entries are not cached by the kernel (timeouts 0), so a size after a cut
is read anew. The kernel's page cache of a file is dropped when the file is opened again
(no `keep_cache`): a cut is meant for when the processes that used the files are gone,
as after a real one; a descriptor kept open across it may still read what the kernel
cached.

With a capacity (`capacity.py`) it is a volume of that many bytes, as a disk of fixed
size is: statfs reports it, and a write past it writes what fits and then fails with
ENOSPC, so the test bed can fill it with a ballast file and free it again (SPEC.md
sections 20 and 21). Without one, statfs and free space are the backing directory's.

The control socket speaks lines: `cut` answers `cut FILES BYTES` (what was dropped),
`unsynced` answers `unsynced FILES BYTES`. `power_loss.py` starts this filesystem as a
process of its own and drives it.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import stat
import threading
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

import mfusepy

from dht.testbed.capacity import BLOCK, Capacity
from dht.testbed.page_cache import PageCache, Unsynced, UnsyncedFile

log = logging.getLogger(__name__)

# The largest write the kernel hands over at once (libfuse raises the kernel's page
# count to fit): fewer round trips for LevelDB's table files.
MAX_WRITE = 1024 * 1024
_SYNC_FLAGS = os.O_SYNC | os.O_DSYNC
_STATVFS_FIELDS = ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files",
                   "f_ffree", "f_favail", "f_flag", "f_namemax")  # fmt: skip


class LazyFilesystem(mfusepy.Operations):  # type: ignore[misc]
    """The FUSE operations (module docstring). A file handle is the backing file's own
    descriptor, always opened read-write: an fsync through a read-only descriptor must
    be able to write the file's cached pages."""

    use_ns = True  # times in nanoseconds (mfusepy's float seconds are deprecated)

    def __init__(self, backing: Path, cache: PageCache, capacity: Capacity | None = None) -> None:
        self.root = str(backing)
        self.cache = cache
        self.capacity = capacity
        self._inodes: dict[int, int] = {}  # file handle -> backing inode
        self._synced_handles: set[int] = set()  # opened O_SYNC or O_DSYNC
        self._datasync_handles: set[int] = set()  # of those, O_DSYNC without O_SYNC

    def _full(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    # -- the mount ----------------------------------------------------------------------

    def init_with_config(self, conn_info: Any, config_3: Any) -> None:
        if config_3 is not None:
            config_3.entry_timeout = 0
            config_3.attr_timeout = 0
            config_3.negative_timeout = 0
            config_3.use_ino = 1
        if conn_info is not None:
            conn_info.max_write = MAX_WRITE

    def statfs(self, path: str) -> dict[str, int]:
        found = os.statvfs(self._full(path))
        fields = {name: getattr(found, name) for name in _STATVFS_FIELDS}
        if self.capacity is not None:
            free = self.capacity.free
            fields |= {"f_bsize": BLOCK, "f_frsize": BLOCK, "f_blocks": self.capacity.total,
                       "f_bfree": free, "f_bavail": free}  # fmt: skip
        return fields

    # -- metadata: straight to the backing directory --------------------------------------

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        found = os.fstat(fh) if fh is not None else os.lstat(self._full(path))
        attrs: dict[str, Any] = {
            "st_mode": found.st_mode,
            "st_ino": found.st_ino,
            "st_nlink": found.st_nlink,
            "st_uid": found.st_uid,
            "st_gid": found.st_gid,
            "st_size": found.st_size,
            "st_blocks": found.st_blocks,
            "st_blksize": found.st_blksize,
            "st_atime": found.st_atime_ns,
            "st_mtime": found.st_mtime_ns,
            "st_ctime": found.st_ctime_ns,
        }
        unsynced = self.cache.find(found.st_ino) if stat.S_ISREG(found.st_mode) else None
        if unsynced is not None:
            attrs["st_size"] = unsynced.size
            attrs["st_blocks"] = -(-unsynced.size // 512)
        return attrs

    def access(self, path: str, amode: int) -> int:
        if not os.access(self._full(path), amode):
            raise mfusepy.FuseOSError(errno.EACCES)
        return 0

    def readdir(self, path: str, fh: int) -> list[tuple[str, dict[str, int], int]]:
        """With each name its inode (with use_ino, a name without one, inode 0, would be
        skipped by readers) and type."""
        full = self._full(path)
        here = os.lstat(full)
        names = [(".", here), ("..", here)]
        with os.scandir(full) as entries:
            names += [(entry.name, entry.stat(follow_symlinks=False)) for entry in entries]
        return [(name, {"st_ino": s.st_ino, "st_mode": s.st_mode}, 0) for name, s in names]

    def readlink(self, path: str) -> str:
        return os.readlink(self._full(path))

    def mkdir(self, path: str, mode: int) -> int:
        os.mkdir(self._full(path), mode)
        return 0

    def rmdir(self, path: str) -> int:
        os.rmdir(self._full(path))
        return 0

    def symlink(self, target: str, source: str) -> int:
        os.symlink(source, self._full(target))
        return 0

    def link(self, target: str, source: str) -> int:
        os.link(self._full(source), self._full(target))
        return 0

    def chmod(self, path: str, mode: int) -> int:
        os.chmod(self._full(path), mode)
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        os.chown(self._full(path), uid, gid, follow_symlinks=False)
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        if times is None:  # now
            os.utime(self._full(path), follow_symlinks=False)
        else:
            os.utime(self._full(path), ns=times, follow_symlinks=False)
        return 0

    def unlink(self, path: str) -> int:
        full = self._full(path)
        with self.cache.changing_names() as forget:
            last = _last_name_of_file(full)
            os.unlink(full)
            if last is not None:
                self._gone(last, forget(last.st_ino))
        return 0

    def rename(self, old: str, new: str) -> int:
        full = self._full(new)
        with self.cache.changing_names() as forget:
            replaced = _last_name_of_file(full)
            os.rename(self._full(old), full)
            if replaced is not None:
                self._gone(replaced, forget(replaced.st_ino))
        return 0

    def _gone(self, last: os.stat_result, cached: UnsyncedFile | None) -> None:
        """A file's last name went: its room is free (its size as readers saw it)."""
        if self.capacity is not None:
            self.capacity.release(last.st_size if cached is None else cached.size)

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        return 0  # metadata is durable at once (module docstring)

    # -- file contents: through the page cache --------------------------------------------

    def create(self, path: str, mode: int, flags: int) -> int:
        fd = os.open(
            self._full(path), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | (flags & os.O_EXCL), mode
        )
        return self._opened(fd, flags)

    def open(self, path: str, flags: int) -> int:
        try:
            fd = os.open(self._full(path), os.O_RDWR | os.O_CLOEXEC)
        except PermissionError:
            fd = os.open(self._full(path), (flags & os.O_ACCMODE) | os.O_CLOEXEC)
        return self._opened(fd, flags)

    def _opened(self, fd: int, flags: int) -> int:
        found = os.fstat(fd)
        self._inodes[fd] = found.st_ino
        if flags & _SYNC_FLAGS:
            self._synced_handles.add(fd)
            if flags & os.O_SYNC != os.O_SYNC:
                self._datasync_handles.add(fd)
        if flags & os.O_TRUNC and found.st_size:
            with self.cache.holding(found.st_ino, lambda: found.st_size) as unsynced:
                if self.capacity is not None:
                    self.capacity.resize(unsynced.size, 0)
                unsynced.truncate(0)
        return fd

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        with self.cache.holding_if_cached(self._inodes[fh]) as unsynced:
            if unsynced is None:
                return os.pread(fh, size, offset)
            return unsynced.read(fh, offset, size)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        inode = self._inodes[fh]
        with self.cache.holding(inode, lambda: os.fstat(fh).st_size) as unsynced:
            if self.capacity is not None:  # a full volume takes what fits (NoSpace: none)
                data = data[: self.capacity.room_for_write(unsynced.size, offset, len(data))]
            unsynced.write(fh, offset, data)
            if fh in self._synced_handles:
                unsynced.sync(fh, data_only=fh in self._datasync_handles)
                self.cache.release_if_clean(inode, unsynced)
        return len(data)

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        found = os.fstat(fh) if fh is not None else os.stat(self._full(path))
        with self.cache.holding(found.st_ino, lambda: found.st_size) as unsynced:
            if self.capacity is not None:
                self.capacity.resize(unsynced.size, length)
            unsynced.truncate(length)
        return 0

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        inode = self._inodes[fh]
        with self.cache.holding_if_cached(inode) as unsynced:
            if unsynced is None:
                os.fdatasync(fh) if datasync else os.fsync(fh)
            else:
                unsynced.sync(fh, data_only=bool(datasync))
                self.cache.release_if_clean(inode, unsynced)
        return 0

    def flush(self, path: str, fh: int) -> int:
        return 0  # a close is no sync

    def release(self, path: str, fh: int) -> int:
        self._inodes.pop(fh, None)
        self._synced_handles.discard(fh)
        self._datasync_handles.discard(fh)
        os.close(fh)
        return 0


def _last_name_of_file(full: str) -> os.stat_result | None:
    """The regular file at `full` if this is its only name (its cache goes with it),
    else None."""
    try:
        found = os.lstat(full)
    except FileNotFoundError:
        return None
    return found if stat.S_ISREG(found.st_mode) and found.st_nlink == 1 else None


def serve_control(
    control: Path, cache: PageCache, after_cut: Callable[[], None] = lambda: None
) -> threading.Thread:
    """Answers `cut` and `unsynced` on the Unix socket `control` (module docstring), in a
    daemon thread: the filesystem's process ends with its mount. Bound before the mount
    is made, so a path that cannot be bound fails before anything is mounted."""
    with suppress(FileNotFoundError):
        control.unlink()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(control))
    listener.listen(8)

    def answer(command: str) -> str:
        if command == "cut":
            dropped = cache.cut()
            after_cut()
            log.warning("power cut: %d files lost %d unsynced bytes", dropped.files, dropped.bytes)
            return _line("cut", dropped)
        if command == "unsynced":
            return _line("unsynced", cache.unsynced())
        return f"error unknown command {command!r}: cut or unsynced\n"

    def serve() -> None:
        while True:
            connection, _ = listener.accept()
            with connection, connection.makefile("rw") as stream:
                for line in stream:
                    stream.write(answer(line.strip()))
                    stream.flush()

    thread = threading.Thread(target=serve, name="power-loss-control", daemon=True)
    thread.start()
    return thread


def _line(word: str, unsynced: Unsynced) -> str:
    return f"{word} {unsynced.files} {unsynced.bytes}\n"


def run(backing: Path, mountpoint: Path, control: Path, capacity_bytes: int | None = None) -> None:
    """Serves `backing` at `mountpoint` until unmounted (`fusermount3 -u`) or signalled
    (SIGTERM, SIGINT: libfuse unmounts), as a volume of `capacity_bytes` if given.
    auto_unmount has fusermount3 take the mount away even if this process is killed."""
    cache = PageCache()
    capacity = None if capacity_bytes is None else Capacity(capacity_bytes)

    def recount() -> None:  # at the mount and after a cut nothing is cached
        if capacity is not None:
            capacity.recount(backing)

    recount()
    serve_control(control, cache, recount)
    try:
        mfusepy.FUSE(
            LazyFilesystem(backing, cache, capacity),
            str(mountpoint),
            foreground=True,
            fsname=f"lazy:{backing}",
            subtype="dht-power-loss",
            auto_unmount=True,
            default_permissions=True,
        )
    finally:
        with suppress(FileNotFoundError):
            control.unlink()
