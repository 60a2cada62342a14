"""A fixed capacity for the lazy filesystem (`lazy_filesystem.py`): a volume of so many
bytes, so that the test bed can fill a node's folder to the last byte (SPEC.md sections
20 and 21) on the same filesystem that can cut its power.

What is counted is each regular file's size as readers see it (its unsynced size when
it has one), in whole blocks of `BLOCK` bytes: a write that would make the files take
more blocks than the volume has writes what fits and no more, and one that fits nothing
fails with ENOSPC, as on a full disk. statfs reports the capacity and what is left.
Folders, names and links take no room; a sparse file counts by its size; a file's room
is free again once its last name goes, even if a process still has it open (a real
filesystem waits for the last close). Those differences do not matter to a store that
writes logs and tables, and keep the count exact and cheap: writes and truncates change
it by their own size change, a file's last name going by the file's size, and it is
counted anew from the backing directory at the mount and after a power cut.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from pathlib import Path

BLOCK = 4096


def blocks(size: int) -> int:
    """The blocks a file of `size` bytes takes."""
    return -(-size // BLOCK)


class NoSpace(OSError):
    """No room left on the volume (ENOSPC)."""

    def __init__(self) -> None:
        super().__init__(errno.ENOSPC, os.strerror(errno.ENOSPC))


class Capacity:
    """The volume's blocks and how many the files take (module docstring); thread-safe.
    `total_bytes` is rounded down to whole blocks."""

    def __init__(self, total_bytes: int, used_bytes: int = 0) -> None:
        if total_bytes < BLOCK:
            raise ValueError(f"a volume of {total_bytes} bytes has not one block of {BLOCK}")
        self.total = total_bytes // BLOCK
        self._used = blocks(used_bytes)
        self._lock = threading.Lock()

    @property
    def used(self) -> int:
        """The blocks the files take (may exceed `total` if they did at the mount)."""
        return self._used

    @property
    def free(self) -> int:
        return max(0, self.total - self._used)

    def room_for_write(self, size: int, offset: int, length: int) -> int:
        """How many of `length` bytes written at `offset` to a file of `size` bytes fit,
        taken from the free blocks at once; raises NoSpace when not one does."""
        with self._lock:
            end = max(size, offset + length)
            needed = blocks(end) - blocks(size)
            if needed <= self.total - self._used:
                self._used += needed
                return length
            last_byte = (blocks(size) + max(0, self.total - self._used)) * BLOCK
            fitting = last_byte - offset
            if fitting <= 0:
                raise NoSpace()
            self._used += blocks(max(size, offset + fitting)) - blocks(size)
            return fitting

    def resize(self, size: int, new_size: int) -> None:
        """A file's size changes from `size` to `new_size` (a truncate): a growth that
        does not fit raises NoSpace and changes nothing."""
        with self._lock:
            change = blocks(new_size) - blocks(size)
            if change > 0 and change > self.total - self._used:
                raise NoSpace()
            self._used = max(0, self._used + change)

    def release(self, size: int) -> None:
        """A file of `size` bytes is gone."""
        with self._lock:
            self._used = max(0, self._used - blocks(size))

    def recount(self, backing: Path) -> None:
        """Counts anew from the backing directory's regular files (each inode once), for
        when no file has unsynced data: at the mount, and just after a power cut."""
        used = blocks_under(backing)
        with self._lock:
            self._used = used


def blocks_under(root: Path) -> int:
    """The blocks the regular files under `root` take by their sizes, each inode once."""
    seen: set[int] = set()
    total = 0
    for folder, _, names in os.walk(root):
        for name in names:
            try:
                found = os.lstat(os.path.join(folder, name))
            except FileNotFoundError:
                continue
            if stat.S_ISREG(found.st_mode) and found.st_ino not in seen:
                seen.add(found.st_ino)
                total += blocks(found.st_size)
    return total
