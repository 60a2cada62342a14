"""What a power cut takes away: each file's writes since its last fsync, kept in memory.

The lazy filesystem (`lazy_filesystem.py`) writes nothing to its backing directory until
a file is fsynced. Until then a file's new contents live here, as the kernel's page cache
holds them before writeback: the *dirty pages* written (4 KiB each, read from the backing
file first when a write covers part of one) and the file's *size* as readers see it. A
truncate is cached too: backing bytes at or past `visible` (the smallest size the file was
cut to since its last sync) are not part of the file any more and read as zeros, as the
kernel's page cache would show them.

`sync` writes one file's dirty pages and size to the backing file and fsyncs it; after
that the backing file is the file. `cut` drops every file's cache at once, which is a
power cut: the backing directory then holds exactly what was synced.

A file is known by its backing inode, not its path, so a rename keeps its unsynced data
with it, as a real filesystem does; `forget` drops it when its last name goes (its inode
number may then be reused by a new file).

Locks: the cache's own lock guards the table of files; each file has a lock of its own,
so one file's fsync does not stall another's writes. A file dropped by `cut` or `forget`
while a caller waited for it is marked `dropped`, and the caller takes the new one.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

PAGE = 4096


def backing_bytes(fd: int, start: int, length: int, visible: int) -> bytes:
    """`length` bytes of the backing file from `start`, zeros at or past `visible` (and
    past its end): what the file holds there when no dirty page covers it."""
    wanted = max(0, min(length, visible - start))
    data = os.pread(fd, wanted, start) if wanted else b""
    return data + bytes(length - len(data))


class UnsyncedFile:
    """One file's writes since its last sync, over its backing file (module docstring).

    `synced` is the backing file's size. Invariant: `visible <= size`; every dirty page
    starts before `size`, and a dirty page's bytes past `size` are zeros."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.visible = size
        self.synced = size  # the backing file's size
        self.pages: dict[int, bytearray] = {}
        self.lock = threading.Lock()
        self.dropped = False

    @property
    def dirty(self) -> bool:
        return bool(self.pages) or self.visible != self.synced or self.size != self.synced

    def read(self, fd: int, offset: int, length: int) -> bytes:
        end = min(offset + length, self.size)
        out = bytearray()
        position = offset
        while position < end:
            index = position // PAGE
            page = self.pages.get(index)
            if page is not None:
                until = min((index + 1) * PAGE, end)
                out += page[position - index * PAGE : until - index * PAGE]
            else:  # a run of clean pages: one read of the backing file
                until = min((index + 1) * PAGE, end)
                while until < end and until // PAGE not in self.pages:
                    until = min(until + PAGE, end)
                out += backing_bytes(fd, position, until - position, self.visible)
            position = until
        return bytes(out)

    def write(self, fd: int, offset: int, data: bytes) -> None:
        view = memoryview(data)
        done = 0
        while done < len(data):
            position = offset + done
            index = position // PAGE
            start = position - index * PAGE
            count = min(PAGE - start, len(data) - done)
            page = self.pages.get(index)
            if page is None:
                if count == PAGE:
                    page = bytearray(PAGE)
                else:  # zeros past `visible`, so past `size` too
                    page = bytearray(backing_bytes(fd, index * PAGE, PAGE, self.visible))
                self.pages[index] = page
            page[start : start + count] = view[done : done + count]
            done += count
        self.size = max(self.size, offset + len(data))

    def truncate(self, length: int) -> None:
        first_gone = -(-length // PAGE)  # the first page wholly past the new end
        for index in [index for index in self.pages if index >= first_gone]:
            del self.pages[index]
        partial = self.pages.get(length // PAGE)
        if partial is not None:
            cut = length - (length // PAGE) * PAGE
            partial[cut:] = bytes(PAGE - cut)
        self.size = length
        self.visible = min(self.visible, length)

    def sync(self, fd: int, data_only: bool) -> None:
        """Writes the dirty pages and the size to the backing file, fsyncs it, and leaves
        this file clean: its backing file is now all of it."""
        if self.visible < self.synced:
            os.ftruncate(fd, self.visible)  # what a truncate cut off reads as zeros after
        for first, pages in self._runs():
            start = first * PAGE
            data = b"".join(pages)[: self.size - start]
            os.pwrite(fd, data, start)
        if os.fstat(fd).st_size != self.size:
            os.ftruncate(fd, self.size)
        if data_only:
            os.fdatasync(fd)
        else:
            os.fsync(fd)
        self.pages.clear()
        self.visible = self.synced = self.size

    def _runs(self) -> Iterator[tuple[int, list[bytearray]]]:
        """The dirty pages in runs of consecutive ones: one write each."""
        run: list[bytearray] = []
        first = previous = -2
        for index in sorted(self.pages):
            if index != previous + 1 and run:
                yield first, run
                run = []
            if not run:
                first = index
            run.append(self.pages[index])
            previous = index
        if run:
            yield first, run


@dataclass(frozen=True)
class Unsynced:
    """What a power cut now would take: files with unsynced changes, and their dirty
    bytes (whole pages)."""

    files: int
    bytes: int


class PageCache:
    """Every file's `UnsyncedFile`, by backing inode (module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._files: dict[int, UnsyncedFile] = {}

    def find(self, inode: int) -> UnsyncedFile | None:
        """The file's cache if it has one (for its size: not locked)."""
        with self._lock:
            return self._files.get(inode)

    @contextmanager
    def holding(self, inode: int, backing_size: Callable[[], int]) -> Iterator[UnsyncedFile]:
        """The file's cache, made from its backing file's size if it has none, locked."""
        while True:
            with self._lock:
                unsynced = self._files.get(inode)
                if unsynced is None:
                    unsynced = self._files[inode] = UnsyncedFile(backing_size())
            with unsynced.lock:
                if not unsynced.dropped:
                    yield unsynced
                    return

    @contextmanager
    def holding_if_cached(self, inode: int) -> Iterator[UnsyncedFile | None]:
        """The file's cache, locked, or None (then the backing file is the file)."""
        while True:
            unsynced = self.find(inode)
            if unsynced is None:
                yield None
                return
            with unsynced.lock:
                if not unsynced.dropped:
                    yield unsynced
                    return

    def release_if_clean(self, inode: int, unsynced: UnsyncedFile) -> None:
        """Forgets a file just synced (the caller holds its lock): nothing of it is
        cached any more."""
        if unsynced.dirty:
            return
        with self._lock:
            if self._files.get(inode) is unsynced:
                del self._files[inode]
                unsynced.dropped = True

    @contextmanager
    def changing_names(self) -> Iterator[Callable[[int], UnsyncedFile | None]]:
        """Holds the table while a file's last name goes (unlink, a rename over it), and
        gives `forget(inode)` to drop its cache (and return it, or None if it had none):
        the inode freed cannot be reused by a new file and find the old file's cache in
        between."""
        with self._lock:
            yield self._forget

    def _forget(self, inode: int) -> UnsyncedFile | None:
        unsynced = self._files.pop(inode, None)
        if unsynced is not None:
            unsynced.dropped = True
        return unsynced

    def cut(self) -> Unsynced:
        """A power cut: every unsynced write is gone. Says what was dropped."""
        with self._lock:
            dropped = self._unsynced()
            for unsynced in self._files.values():
                unsynced.dropped = True
            self._files = {}
        return dropped

    def unsynced(self) -> Unsynced:
        with self._lock:
            return self._unsynced()

    def _unsynced(self) -> Unsynced:
        dirty = [unsynced for unsynced in self._files.values() if unsynced.dirty]
        return Unsynced(len(dirty), sum(len(unsynced.pages) * PAGE for unsynced in dirty))
