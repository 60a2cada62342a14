"""Local storage on LevelDB (plyvel): records under one prefix, hints under another.

Nothing here knows about HTTP or other nodes. Point operations are short enough to run on
the event loop; the range iterator yields lazily so a scan never holds the range in memory.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import plyvel

from dht.disk import DiskFull, DiskSpace
from dht.record import Record, decode, encode

log = logging.getLogger(__name__)

RECORDS_PREFIX = b"r"
HINTS_PREFIX = b"h"


class StorageUnavailable(Exception):
    """The data folder cannot be opened; the message says which, why and what to do."""


def open_leveldb(data_dir: Path) -> Any:
    path = data_dir / "leveldb"
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        return plyvel.DB(str(path), create_if_missing=True)
    except plyvel.CorruptionError as exc:
        raise StorageUnavailable(
            f"{path} is damaged ({_reason(exc)}); `python -m dht repair --data-dir "
            f"{data_dir}` keeps what LevelDB can recover, or move the folder aside and "
            "start empty (this node then gets back only what is read or hinted to it)"
        ) from None
    except (plyvel.IOError, OSError) as exc:
        reason = _reason(exc)
        if "lock" in reason:
            raise StorageUnavailable(
                f"{path} is locked by another process: is another node running on this --data-dir?"
            ) from None
        raise StorageUnavailable(f"cannot open {path}: {reason}") from None


@contextlib.contextmanager
def space_errors() -> Iterator[None]:
    """LevelDB's own out-of-space error, as DiskFull (the reserve normally comes first)."""
    try:
        yield
    except plyvel.IOError as exc:
        reason = _reason(exc)
        if "No space" in reason or "ENOSPC" in reason:
            raise DiskFull(f"the volume is full: {reason}") from None
        raise


def repair(data_dir: Path) -> None:
    """LevelDB's own repair: keeps every record it can still read."""
    plyvel.repair_db(str(data_dir / "leveldb"))


def _reason(exc: BaseException) -> str:
    message = exc.args[0] if exc.args else exc
    return message.decode(errors="replace") if isinstance(message, bytes) else str(message)


class Storage:
    """`disk` guards every write with the volume's free-space reserve: a write that would
    go below it, or that LevelDB fails for lack of space, raises DiskFull."""

    def __init__(self, data_dir: Path, disk_reserve: int = 0, sync_writes: bool = False) -> None:
        self._db = open_leveldb(data_dir)
        self._records = self._db.prefixed_db(RECORDS_PREFIX)
        self.hints = self._db.prefixed_db(HINTS_PREFIX)
        self.disk = DiskSpace(data_dir, disk_reserve)
        self._sync = sync_writes

    def close(self) -> None:
        if not self._db.closed:
            self._db.close()

    def get(self, key: bytes) -> Record | None:
        data = self._records.get(key)
        return None if data is None else decode(data)

    def put_if_newer(self, key: bytes, record: Record) -> bool:
        """Last write wins: stores `record` only if it supersedes what is stored.

        Returns whether it was stored. Idempotent, so repeated deliveries are harmless.
        Safe without a lock because it runs on the event loop thread with no await inside.
        """
        if not record.supersedes(self.get(key)):
            return False
        data = encode(record)
        self.disk.admit(len(key) + len(data))
        with space_errors():
            self._records.put(key, data, sync=self._sync)
        return True

    def scan(self, start: bytes, end: bytes | None) -> Iterator[tuple[bytes, Record]]:
        """Every record (tombstones included) with start <= key < end, in byte order."""
        # fill_cache=False: a bulk scan must not evict the hot point-read blocks.
        iterator = self._records.iterator(start=start, stop=end, fill_cache=False)
        try:
            for key, data in iterator:
                yield key, decode(data)
        finally:
            iterator.close()
