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

import os
import struct
import zlib
from pathlib import Path

from dht.storage.disk import disk_full_or, replace_durably, sync_folder

_SLOT = struct.Struct(">QI4x")  # the ceiling, the CRC-32 of its 8 bytes, padding
# The file of the commit before the slots: the ceiling alone, 8 bytes big-endian, always
# replaced whole (a temporary file renamed over it), so never torn.
_LEGACY_SIZE = 8


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
        if len(data) == _LEGACY_SIZE:  # the format before the slots, replaced whole
            return int.from_bytes(data, "big")
        slots = [
            _valid(data[start : start + _SLOT.size])
            for start in range(0, len(data) - _SLOT.size + 1, _SLOT.size)
        ]
        found = [ceiling for ceiling in slots if ceiling is not None]
        return max(found) if found else None

    def save(self, ceiling: int) -> None:
        """Durable when it returns: the slot written and synced."""
        try:
            if self._fd is None and self._open(ceiling):
                return  # made, with the ceiling in both slots
            assert self._fd is not None
            os.pwrite(self._fd, _slot(ceiling), self._next_slot * _SLOT.size)
            os.fdatasync(self._fd)
        except OSError as exc:
            raise disk_full_or(exc, "the clock's ceiling") from None
        self._next_slot = 1 - self._next_slot

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _open(self, ceiling: int) -> bool:
        """Opens the file, the slot written next the older one; True when it had to be
        made first, with `ceiling` (or the higher ceiling an older file held) in both
        slots. It is made whole or not at all (a temporary file, synced, renamed over,
        the folder synced; `replace_durably`): a file made in place and cut short by a
        crash would say a ceiling of its own (zeros), and the clock would start from
        it rather than from the ceiling the folder had before (LevelDB's entry, or the
        newest version stored). Later saves only overwrite."""
        saved = self.read()
        try:
            fd = os.open(self.path, os.O_RDWR)
        except FileNotFoundError:
            fd = None
        if fd is not None:
            try:
                data = os.pread(fd, 2 * _SLOT.size + 1, 0)
                if len(data) == 2 * _SLOT.size and saved is not None:
                    # Its name synced too: a making whose folder's sync failed (EIO) is
                    # not trusted by a save that follows it.
                    sync_folder(self.path.parent)
                    first, second = _valid(data[: _SLOT.size]), _valid(data[_SLOT.size :])
                    self._next_slot = 0 if _older_or_same(first, second) else 1
                    self._fd = fd
                    return False
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)  # the format before the slots, or torn: made again
        replace_durably(self.path, _slot(max(saved or 0, ceiling)) * 2)
        self._fd = os.open(self.path, os.O_RDWR)
        self._next_slot = 0
        return True


def _older_or_same(first: int | None, second: int | None) -> bool:
    """Whether the first slot is to be overwritten: it is invalid, or not newer."""
    return first is None or (second is not None and first <= second)
