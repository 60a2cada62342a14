"""The clock's saved ceiling (dht/model/clock.py, SPEC 8.7) in a small file of its own,
written in place, so saving it needs no new space on the volume and never waits for
LevelDB's writer.

A volume with not a byte left must not stop a node from reading: every answer a read
coordinator takes whose version is past its ceiling needs the ceiling saved first, and
a save that needs a new block (a new file, renamed over the old one) fails on a full
volume. So the file is made once, with two slots, and each save overwrites the older
slot in place and syncs it (fdatasync): the blocks are the file's already. A slot is
the ceiling and a checksum of it; a save torn by a crash leaves that slot invalid and
the other one whole, so a read takes the highest valid slot.
"""

from __future__ import annotations

import errno
import os
import struct
import zlib
from pathlib import Path

from dht.storage.disk import DiskFull

_SLOT = struct.Struct(">QI4x")  # the ceiling, the CRC-32 of its 8 bytes, padding


def _slot(ceiling: int) -> bytes:
    value = ceiling.to_bytes(8, "big")
    return _SLOT.pack(ceiling, zlib.crc32(value))


def _valid(data: bytes) -> int | None:
    ceiling, checksum = _SLOT.unpack(data)
    return ceiling if zlib.crc32(ceiling.to_bytes(8, "big")) == checksum else None


class CeilingFile:
    """Two slots at `path`; `read` gives the highest valid one, `save` overwrites the
    other. Raises DiskFull when the file cannot be made or written for want of space."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._next_slot = 0

    def read(self) -> int | None:
        """The ceiling saved last, or None when no file was ever made here."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        slots = [
            _valid(data[start : start + _SLOT.size])
            for start in range(0, len(data) - _SLOT.size + 1, _SLOT.size)
        ]
        found = [ceiling for ceiling in slots if ceiling is not None]
        return max(found) if found else None

    def save(self, ceiling: int) -> None:
        """Durable when it returns: the slot written and synced."""
        try:
            fd = self._open()
            os.pwrite(fd, _slot(ceiling), self._next_slot * _SLOT.size)
            os.fdatasync(fd)
        except OSError as exc:
            raise _disk_full_or(exc) from None
        self._next_slot = 1 - self._next_slot

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _open(self) -> int:
        """The file, made with both slots the first time (synced, and its folder too, so
        that later saves only overwrite); the slot written next is the older one."""
        if self._fd is not None:
            return self._fd
        saved = self.read()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if saved is None or os.fstat(fd).st_size < 2 * _SLOT.size:
                os.pwrite(fd, _slot(saved or 0) * 2, 0)
                os.fsync(fd)
                folder = os.open(self.path.parent, os.O_RDONLY)
                try:
                    os.fsync(folder)
                finally:
                    os.close(folder)
            else:
                data = os.pread(fd, 2 * _SLOT.size, 0)
                first, second = _valid(data[: _SLOT.size]), _valid(data[_SLOT.size :])
                self._next_slot = 0 if (first or -1) <= (second or -1) else 1
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return fd


def _disk_full_or(exc: OSError) -> Exception:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return DiskFull(f"no room to save the clock's ceiling: {exc.strerror}")
    return exc
