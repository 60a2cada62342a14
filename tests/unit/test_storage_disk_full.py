"""A volume with not a byte left makes LevelDB itself fail a write (the reserve is
measured, not guaranteed: a compaction can take the last bytes). Every write of the
storage then says DiskFull, the clock's ceiling included, so the node answers 507,
never a 500 (a full-volume run of tests/spec/test_dht_disk_full.py once got
`500 Internal Server Error: IOError` from the ceiling's save)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import plyvel
import pytest

from dht.storage.disk import DiskFull
from dht.storage.store import Storage

NO_SPACE = "IO error: leveldb/000005.log: No space left on device"


class FullVolume:
    """A LevelDB handle whose every write fails as a full volume makes it fail."""

    def __init__(self, db: Any) -> None:
        self._db = db

    def put(self, *args: Any, **kwargs: Any) -> None:
        raise plyvel.IOError(NO_SPACE)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


def test_the_clock_ceiling_on_a_full_volume_is_disk_full(tmp_path: Path) -> None:
    storage = Storage(tmp_path)
    real = storage._db
    storage._db = FullVolume(real)
    try:
        with pytest.raises(DiskFull, match="No space left"):
            storage.save_clock_ceiling(12345)
    finally:
        storage._db = real
        storage.close()
