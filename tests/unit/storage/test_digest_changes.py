"""The sink storage tells its digest changes to (dht/storage/digest_changes.py): the trees
attached to it hear each change, one listener at a time, and between two rings, with
none attached, a change is dropped (the next trees load the digest index instead)."""

from __future__ import annotations

from pathlib import Path

from dht.model.merkle import Digest
from dht.model.record import Record
from dht.storage.digest_changes import DigestChanges
from dht.storage.store import Storage

OLD = Digest(1, 0x11, 3, 1_000)
NEW = Digest(2, 0x22, 3, 2_000)
Heard = list[tuple[bytes, Digest | None, Digest | None]]


def listener(heard: Heard) -> DigestChanges:
    changes = DigestChanges()
    changes.listen(lambda key, old, new: heard.append((key, old, new)))
    return changes


def test_a_change_with_no_listener_is_dropped() -> None:
    changes = DigestChanges()
    assert not changes.listening
    changes.publish(b"k", OLD, NEW)  # no one to tell: nothing fails
    heard: Heard = []
    changes.listen(lambda key, old, new: heard.append((key, old, new)))
    assert heard == []  # a listener attached later hears only what comes after it


def test_a_change_reaches_the_listener_attached() -> None:
    heard: Heard = []
    changes = listener(heard)
    assert changes.listening
    changes.publish(b"k", None, NEW)
    changes.publish(b"k", NEW, None)
    assert heard == [(b"k", None, NEW), (b"k", NEW, None)]


def test_a_detached_listener_hears_nothing_more() -> None:
    heard: Heard = []
    changes = listener(heard)
    changes.listen(None)
    assert not changes.listening
    changes.publish(b"k", OLD, NEW)
    assert heard == []


def test_a_listener_attached_replaces_the_one_before() -> None:
    """A membership step makes fresh trees: the old ones must not go on hearing."""
    before: Heard = []
    after: Heard = []
    changes = listener(before)
    changes.listen(lambda key, old, new: after.append((key, old, new)))
    changes.publish(b"k", OLD, NEW)
    assert before == [] and after == [(b"k", OLD, NEW)]


def test_storage_publishes_each_change_to_the_sink_it_was_made_with(tmp_path: Path) -> None:
    heard: Heard = []
    storage = Storage(tmp_path, durability="none", changes=listener(heard))
    try:
        assert storage.write(b"k", Record.live(1, b"v")) is True  # small: written at once
        stored = storage.digest(b"k")
        assert heard == [(b"k", None, stored)]
        record = Record.deleted(2)
        assert storage.write(b"k", record) is True
        assert storage.collect(b"k", record) is True
        assert [key for key, _, _ in heard] == [b"k"] * 3
        assert heard[-1][2] is None and storage.digest(b"k") is None
    finally:
        storage.close()
