"""The fake clock's pure parts (dht/testbed/fake_clock.py): the offset as libfaketime
reads it, the environment a node gets, the file replaced whole, and what is cleaned up.
Real processes under it: tests/testbed/test_fake_clock.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from dht.conformance.spec import PART_ONE_TIERS, load_rules, tier_of
from dht.testbed import fake_clock
from dht.testbed.fake_clock import FakeClock, offset_text, preload_environment, write_offset


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(30, "+30"), (-30.0, "-30"), (0.0, "+0"), (0.5, "+0.5"), (-2.25, "-2.25")],
)
def test_an_offset_is_written_with_its_sign_and_whole_seconds_without_a_point(
    seconds: float, text: str
) -> None:
    assert offset_text(seconds) == text


def test_the_environment_preloads_the_library_reads_the_file_always_and_keeps_monotonic(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LD_PRELOAD", "/lib/other.so")
    environment = preload_environment(Path("/lib/libfaketime.so.1"), Path("/run/node-0"))
    assert environment == {
        "LD_PRELOAD": "/lib/libfaketime.so.1:/lib/other.so",
        "FAKETIME_TIMESTAMP_FILE": "/run/node-0",
        "FAKETIME_NO_CACHE": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "FAKETIME_FORCE_MONOTONIC_FIX": "0",
    }


def test_the_offset_file_is_replaced_whole(tmp_path: Path) -> None:
    offset_file = tmp_path / "node-0.faketime"
    write_offset(offset_file, -10)
    write_offset(offset_file, 15)
    assert offset_file.read_text() == "+15\n"
    assert [path.name for path in tmp_path.iterdir()] == ["node-0.faketime"]


def test_a_clock_starts_every_node_at_the_true_time_and_moves_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fake_clock, "find_library", lambda: Path("/lib/libfaketime.so.1"))
    clock = FakeClock(tmp_path, 3)
    clock.set_offset(1, -30)
    texts = [(tmp_path / f"node-{index}.faketime").read_text() for index in range(3)]
    assert texts == ["+0\n", "-30\n", "+0\n"]
    assert clock.offset(1) == -30 and clock.offset(0) == 0
    assert clock.environment(1)["FAKETIME_TIMESTAMP_FILE"] == str(tmp_path / "node-1.faketime")


def test_the_library_named_in_the_environment_is_looked_for_first(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    own = tmp_path / "libfaketime.so.1"
    own.write_bytes(b"")
    monkeypatch.setenv(fake_clock.LIBRARY_ENV, str(own))
    assert fake_clock.find_library() == own


def test_what_libfaketime_left_for_a_process_is_removed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(fake_clock, "SHARED_MEMORY", tmp_path)
    for name in ("faketime_shm_42", "sem.faketime_sem_42", "faketime_shm_43"):
        (tmp_path / name).write_bytes(b"")
    fake_clock.release(42)
    assert [path.name for path in tmp_path.iterdir()] == ["faketime_shm_43"]


def test_off_linux_the_reason_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fake_clock.sys, "platform", "darwin")
    reason = fake_clock.unavailable.__wrapped__()
    assert reason is not None and "Linux" in reason and "\n" not in reason


def test_section_17_is_the_clock_tier_of_part_one() -> None:
    assert "clock" in PART_ONE_TIERS
    clock_rules = [rule for rule in load_rules().values() if rule.tier == "clock"]
    assert [rule.number for rule in clock_rules] == ["19.1", "19.2", "19.3", "19.4", "19.5", "19.6"]
    assert tier_of("19.9") == "clock"
