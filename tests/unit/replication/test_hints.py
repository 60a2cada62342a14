"""The hint store's memory (dht.replication.hints, SPEC.md rule 9.6): what it keeps to
order hints by age grows with the hints it holds, not with how often they were
overwritten or removed (real LevelDB in a temporary folder, time faked)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dht.model.record import Record
from dht.replication.hints import HintStore
from dht.storage.disk import DiskSpace
from dht.storage.store import Storage

TARGET = "http://127.0.0.1:1"
OVERWRITES = 10_000
# Entries the age order may hold whatever the hints kept: a constant, far below OVERWRITES.
FEW = 64
HINT_BYTES = 53  # one hint for TARGET of a 6-byte key and a 1-byte value, key included


class Clock:
    def __init__(self) -> None:
        self.now_ms = 1_000

    def __call__(self) -> int:
        self.now_ms += 1
        return self.now_ms


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[Storage]:
    storage = Storage(tmp_path, durability="none")
    try:
        yield storage
    finally:
        storage.close()


def hint_store(storage: Storage, tmp_path: Path, max_bytes: int = 1 << 30) -> HintStore:
    disk = DiskSpace(tmp_path, 0, measure=lambda path: 1 << 40)
    return HintStore(storage.hints, disk, max_bytes, max_age=3600.0, now_ms=Clock())


def test_overwriting_one_hint_for_a_down_peer_keeps_the_age_order_bounded(
    storage: Storage, tmp_path: Path
) -> None:
    hints = hint_store(storage, tmp_path)
    for version in range(1, OVERWRITES + 1):
        hints.add(TARGET, b"hot-key", Record.live(version, b"v"))
    assert hints.pending[TARGET] == 1
    assert hints.age_entries <= 2 * 1 + FEW, hints.age_entries


def test_hints_added_and_delivered_leave_no_age_entries_behind(
    storage: Storage, tmp_path: Path
) -> None:
    hints = hint_store(storage, tmp_path)
    for index in range(OVERWRITES):
        key = f"key-{index}".encode()
        hints.add(TARGET, key, Record.live(1, b"v"))
        for hint in list(hints.for_target(TARGET, 10)):
            hints.delivered(hint)
    assert hints.pending[TARGET] == 0
    assert hints.age_entries <= FEW, hints.age_entries


def test_the_oldest_hints_still_go_first_past_the_size_cap(
    storage: Storage, tmp_path: Path
) -> None:
    """The rebuilds that bound the age order must not lose its order: overwrite one key
    many times among others, then fill past the cap; the oldest others are dropped and
    the key overwritten last, the newest hint, stays."""
    hints = hint_store(storage, tmp_path, max_bytes=50 * HINT_BYTES)
    for index in range(20):
        hints.add(TARGET, f"old-{index:02d}".encode(), Record.live(1, b"v"))
    for version in range(1, 1_000):
        hints.add(TARGET, b"old-00", Record.live(version + 1, b"v"))
    for index in range(40):
        hints.add(TARGET, f"new-{index:02d}".encode(), Record.live(1, b"v"))
    kept = {hint.key for hint in hints.for_target(TARGET, 1_000)}
    assert hints.dropped > 0
    assert b"new-39" in kept and b"old-00" in kept
    assert b"old-01" not in kept
    assert hints.age_entries <= 2 * len(kept) + FEW, hints.age_entries
