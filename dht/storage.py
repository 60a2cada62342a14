"""Local storage on LevelDB (plyvel): records under one prefix, hints under another.

Nothing here knows about HTTP or other nodes. Point operations are short enough to run on
the event loop; the range iterator yields lazily so a scan never holds the range in memory.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import plyvel

from dht.record import Record, decode, encode

log = logging.getLogger(__name__)

RECORDS_PREFIX = b"r"
HINTS_PREFIX = b"h"


class Storage:
    def __init__(self, data_dir: Path, sync_writes: bool = False) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        self._db = plyvel.DB(str(data_dir / "leveldb"), create_if_missing=True)
        self._records = self._db.prefixed_db(RECORDS_PREFIX)
        self.hints = self._db.prefixed_db(HINTS_PREFIX)
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
        self._records.put(key, encode(record), sync=self._sync)
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
