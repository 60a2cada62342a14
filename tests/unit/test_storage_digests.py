"""The digest index beside the records (dht/storage/store.py): writes decide what is newer by
it, so it must hold exactly the stored records, also after `python -m dht repair`
(real LevelDB in a temporary folder)."""

from __future__ import annotations

from pathlib import Path

import plyvel

from dht.storage.record import Record
from dht.storage.store import Storage, digest_key, repair


def test_an_older_write_is_refused_and_a_tie_is_decided_by_the_record(tmp_path: Path) -> None:
    storage = Storage(tmp_path)
    try:
        assert storage.write(b"k", Record.live(5, b"b")) is True
        assert storage.write(b"k", Record.live(4, b"z")) is False
        assert storage.write(b"k", Record.live(5, b"a")) is False  # tie: b"b" > b"a"
        assert storage.write(b"k", Record.live(5, b"c")) is True
        assert storage.get(b"k") == Record.live(5, b"c")
        assert storage.digest(b"k") is not None and storage.digest(b"k").version == 5  # type: ignore[union-attr]
    finally:
        storage.close()


def test_after_a_repair_the_index_is_rebuilt_so_an_older_write_stays_out(tmp_path: Path) -> None:
    storage = Storage(tmp_path)
    storage.write(b"kept", Record.live(7, b"newer"))
    storage.write(b"gone", Record.live(7, b"v"))
    storage.close()
    # What a repair may leave: a record without its digest entry, an entry without
    # its record.
    db = plyvel.DB(str(tmp_path / "leveldb"))
    db.delete(digest_key(b"kept"))
    db.delete(b"r" + b"gone")
    db.close()
    repair(tmp_path)
    storage = Storage(tmp_path)
    try:
        assert storage.write(b"kept", Record.live(6, b"older")) is False
        assert storage.get(b"kept") == Record.live(7, b"newer")
        assert storage.digest(b"gone") is None
        assert [key for key, _ in storage.digests()] == [b"kept"]
    finally:
        storage.close()
