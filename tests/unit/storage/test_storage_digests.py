"""The digest index beside the records (dht/storage/store.py): writes decide what is newer by
it, so it must hold exactly the stored records, also after `python -m dht repair`
(real LevelDB in a temporary folder)."""

from __future__ import annotations

from pathlib import Path

import plyvel

from dht.model.record import Record
from dht.storage.store import Storage, digest_key, repair


def test_an_older_write_is_refused_and_a_tie_is_decided_by_the_record(tmp_path: Path) -> None:
    storage = Storage(tmp_path, durability="none")
    try:
        assert storage.write(b"k", Record.live(5, b"b")) is True
        assert storage.write(b"k", Record.live(4, b"z")) is False
        assert storage.write(b"k", Record.live(5, b"a")) is False  # tie: b"b" > b"a"
        assert storage.write(b"k", Record.live(5, b"c")) is True
        assert storage.get(b"k") == Record.live(5, b"c")
        assert storage.digest(b"k") is not None and storage.digest(b"k").version == 5  # type: ignore[union-attr]
    finally:
        storage.close()


def test_the_same_write_delivered_again_is_answered_stored(tmp_path: Path) -> None:
    """Idempotent, and said so (SPEC.md rule 9.13: "kept" sends a client write again)."""
    storage = Storage(tmp_path, durability="none")
    try:
        assert storage.write(b"k", Record.live(5, b"b", copies=3)) is True
        assert storage.write(b"k", Record.live(5, b"b", copies=3)) is True
        assert storage.write(b"k", Record.live(5, b"b", copies=2)) is True  # F widened here
        assert storage.get(b"k") == Record.live(5, b"b", copies=3)
    finally:
        storage.close()


def test_after_a_repair_the_index_is_rebuilt_so_an_older_write_stays_out(tmp_path: Path) -> None:
    storage = Storage(tmp_path, durability="none")
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
    storage = Storage(tmp_path, durability="none")
    try:
        assert storage.write(b"kept", Record.live(6, b"older")) is False
        assert storage.get(b"kept") == Record.live(7, b"newer")
        assert storage.digest(b"gone") is None
        assert [key for key, _ in storage.digests()] == [b"kept"]
    finally:
        storage.close()


def test_a_folder_from_before_arrival_times_gets_them_at_its_first_start(tmp_path: Path) -> None:
    """Digest entries of 17 bytes and the `m:digests-1` marker (a data folder written
    before tombstone collection went by arrival): the index is rebuilt, every entry
    saying it arrived at that start, so collection waits for exchanges from then on."""
    storage = Storage(tmp_path, durability="none", wall_ms=lambda: 1_000)
    storage.write(b"deleted", Record.deleted(7))
    storage.close()
    db = plyvel.DB(str(tmp_path / "leveldb"))
    db.put(digest_key(b"deleted"), db.get(digest_key(b"deleted"))[:17])
    db.delete(b"m:digests-2")
    db.put(b"m:digests-1", b"1")
    db.close()
    storage = Storage(tmp_path, durability="none", wall_ms=lambda: 5_000)
    try:
        entry = storage.digest(b"deleted")
        assert entry is not None and (entry.version, entry.arrived_ms) == (7, 5_000)
    finally:
        storage.close()
    db = plyvel.DB(str(tmp_path / "leveldb"))
    try:
        assert db.get(b"m:digests-1") is None
    finally:
        db.close()


def test_a_newer_record_takes_the_wider_copy_count_of_the_one_it_replaces(
    tmp_path: Path,
) -> None:
    """A PUT at 3/3, then one at 2/2: the replica that held the first names three copies
    for the second too, so it stays among the nodes its record names (rule 9.10)."""
    storage = Storage(tmp_path, durability="none")
    try:
        storage.write(b"k", Record.live(1, b"v1", copies=3))
        assert storage.write(b"k", Record.live(2, b"v2", copies=2)) is True
        assert storage.get(b"k") == Record.live(2, b"v2", copies=3)
        assert storage.write(b"k", Record.deleted(3, copies=1)) is True
        assert storage.get(b"k") == Record.deleted(3, copies=3)
        entry = storage.digest(b"k")
        assert entry is not None and entry.copies == 3
        # The same version arriving with the narrower count changes nothing (it is
        # answered stored: this node holds that delete, rule 9.13)...
        assert storage.write(b"k", Record.deleted(3, copies=2)) is True
        assert storage.get(b"k") == Record.deleted(3, copies=3)
        # ...and with a wider one (0: the whole cluster) widens it.
        assert storage.write(b"k", Record.deleted(3, copies=0)) is True
        assert storage.get(b"k") == Record.deleted(3, copies=0)
        assert storage.write(b"k", Record.live(4, b"v4", copies=2)) is True
        assert storage.get(b"k") == Record.live(4, b"v4", copies=0)
    finally:
        storage.close()
