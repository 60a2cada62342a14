"""The free-space reserve of a node's volume: writes are refused while free space is
below it, so a full disk is a clear, recoverable state rather than a node that cannot
write, and then cannot restart (LevelDB needs room to replay its log and compact).

Once a write is refused the node is read-only, for every write however small, until free
space is back above the reserve by `RESUME_MARGIN` (a high and a low watermark, as
Elasticsearch has): a node near the line does not flap between taking small writes and
refusing large ones.

Free space is read with statvfs when the last reading is older than `max_age` seconds or
when the estimate (last reading minus bytes written since) comes near the reserve; so a
write costs no system call, and writes resume by themselves as soon as space is back.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dht.limits import RESUME_MARGIN, MiB


class StorageError(Exception):
    """Root of the errors of this node's own disk (the data folder, its volume).
    `status`: what the HTTP edge answers a client whose request met it, or None when
    none does (the node does not start). Nothing catches the root itself: each place
    catches the one it can answer."""

    status: int | None = None


class DiskFull(StorageError):
    """A write refused because the volume is below the node's free-space reserve."""

    status = 507  # Insufficient Storage: a write refused for space (SPEC.md rule 9.7)


def replace_durably(path: Path, data: bytes) -> None:
    """Replaces `path` with `data`, durably: a crash or a power cut leaves the old file or
    the new one, never a mix (write a temporary file, fsync it, rename it, fsync the
    folder). A volume with no room left raises DiskFull."""
    temporary = path.with_suffix(".tmp")
    try:
        with open(temporary, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
        sync_folder(path.parent)
    except OSError as exc:
        raise disk_full_or(exc, path.name) from None


def sync_folder(folder: Path) -> None:
    """fsyncs a folder: the names made, renamed or removed in it are on the disk."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def disk_full_or(exc: OSError, what: str) -> Exception:
    """`exc` as DiskFull when it says the volume has no room left (saving `what`)."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return DiskFull(f"no room to save {what}: {exc.strerror}")
    return exc


def free_bytes(path: Path) -> int:
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


class DiskSpace:
    def __init__(
        self,
        path: Path,
        reserve: int,
        measure: Callable[[Path], int] = free_bytes,
        clock: Callable[[], float] = time.monotonic,
        max_age: float = 1.0,
    ) -> None:
        self._path = path
        self.reserve = reserve
        self._measure = measure
        self._clock = clock
        self._max_age = max_age
        self.refused = 0
        self._measured_at = 0.0
        self._free = 0
        self._refresh()
        # Whether writes are refused now. A restart on a volume as full as it was left
        # starts read-only too.
        self.refusing = self._free < reserve + RESUME_MARGIN

    @property
    def free(self) -> int:
        """Free bytes as last estimated."""
        return self._free

    def admit(self, size: int) -> None:
        """Raises DiskFull unless `size` more bytes leave the reserve free (and, once
        refusing, the resume margin too); counts them."""
        needed = self.reserve + size + (RESUME_MARGIN if self.refusing else 0)
        if self._free < needed or self._clock() - self._measured_at > self._max_age:
            self._refresh()
            if self._free < needed:
                self.refused += 1
                self.refusing = True
                raise DiskFull(
                    f"{self._free // MiB} MiB free on the volume of {self._path}, below the "
                    f"--disk-reserve of {self.reserve // MiB} MiB"
                )
        self._free -= size
        self.refusing = False

    def status(self) -> dict[str, Any]:
        """What /v0/status shows, from a reading at most `max_age` old: a node whose
        writes fail before they reach `admit` (LevelDB refusing after a compaction took
        the last bytes) would otherwise show the space of its start for ever."""
        if self._clock() - self._measured_at > self._max_age:
            self._refresh()
            if self.refusing and self._free >= self.reserve + RESUME_MARGIN:
                self.refusing = False
        return {
            "free_bytes": self._free,
            "reserve_bytes": self.reserve,
            "refusing_writes": self.refusing,
            "writes_refused": self.refused,
        }

    def _refresh(self) -> None:
        self._free = self._measure(self._path)
        self._measured_at = self._clock()
