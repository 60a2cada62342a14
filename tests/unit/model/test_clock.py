"""The hybrid logical clock (SPEC.md rules 8.3 and 8.4)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dht.model.clock import (
    COUNTER_BITS,
    MAX_VERSION,
    HybridClock,
    VersionAhead,
    version_at,
    version_ms,
)

START_MS = 1_700_000_000_000  # a realistic wall-clock reading (November 2023)


class FakeWall:
    """A wall clock in milliseconds that only moves when a test moves it."""

    def __init__(self, ms: int = START_MS) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


def test_versions_strictly_increase_with_a_frozen_wall_clock() -> None:
    clock = HybridClock(FakeWall())
    versions = [clock.now() for _ in range(10_000)]
    assert all(a < b for a, b in itertools.pairwise(versions))


def test_a_write_10_ms_later_is_newer_than_every_write_before_it() -> None:
    wall = FakeWall()
    clock = HybridClock(wall)
    before = [clock.now() for _ in range(60_000)]  # many writes within one millisecond
    wall.ms += 10
    later = clock.now()
    assert later > max(before)
    assert version_ms(later) == wall.ms


def test_two_coordinators_order_writes_a_microsecond_apart_within_one_millisecond() -> None:
    """Found by tests/spec/test_dht_placement.py once the lean HTTP path made a write
    through one node and the next through another fit in one millisecond: the second
    coordinator's counter started below the first's, and its later write lost."""
    us = [START_MS * 1000 + 100]

    def wall_us() -> int:
        return us[0]

    first = HybridClock(lambda: us[0] // 1000, wall_us=wall_us)
    second = HybridClock(lambda: us[0] // 1000, wall_us=wall_us)
    earlier = [first.now() for _ in range(3)]  # one coordinator, three writes
    us[0] += 1
    later = second.now()  # the other coordinator, a microsecond on
    assert later > max(earlier)
    assert version_ms(later) == START_MS  # still the same millisecond
    clock = HybridClock(lambda: us[0] // 1000, wall_us=wall_us)
    many = [clock.now() for _ in range(5_000)]  # a frozen clock: the counter goes on
    assert all(a < b for a, b in itertools.pairwise(many))


def test_versions_keep_increasing_when_the_wall_clock_steps_backwards() -> None:
    wall = FakeWall()
    clock = HybridClock(wall)
    versions = [clock.now() for _ in range(5)]
    wall.ms -= 5_000  # an NTP step back
    versions += [clock.now() for _ in range(1_000)]
    wall.ms += 2_000  # still behind the first reading
    versions += [clock.now() for _ in range(5)]
    wall.ms += 10_000  # past it again
    versions += [clock.now() for _ in range(5)]
    assert all(a < b for a, b in itertools.pairwise(versions))
    assert version_ms(versions[-1]) == wall.ms


def test_observing_a_newer_remote_version_moves_the_clock_past_it() -> None:
    clock = HybridClock(FakeWall())
    clock.now()
    remote = version_at(START_MS + 60_000, 7)  # a peer whose wall clock runs a minute ahead
    clock.observe(remote)
    assert clock.last == remote
    assert clock.now() > remote


def test_observing_an_older_version_changes_nothing() -> None:
    observing = HybridClock(FakeWall())
    untouched = HybridClock(FakeWall())
    for _ in range(3):
        observing.now()
        untouched.now()
    last = observing.last
    observing.observe(last)  # an equal version is not newer either
    observing.observe(version_at(START_MS - 1_000))
    assert observing.last == last
    assert [observing.now() for _ in range(3)] == [untouched.now() for _ in range(3)]


@pytest.mark.parametrize("ms", [0, 1, START_MS, 4_102_444_800_000, (1 << 48) - 1])
def test_versions_fit_in_64_bits_with_milliseconds_in_the_high_bits(ms: int) -> None:
    for counter in (0, 1, (1 << COUNTER_BITS) - 1):
        version = version_at(ms, counter)
        assert 0 <= version <= MAX_VERSION < 1 << 64
        assert version_ms(version) == ms
        assert version & ((1 << COUNTER_BITS) - 1) == counter
    clock = HybridClock(FakeWall(ms))
    issued = clock.now()
    assert issued <= MAX_VERSION
    assert version_ms(issued) == ms


def test_the_clock_refuses_to_issue_a_version_beyond_64_bits() -> None:
    """Only a wall clock past 2^48 ms (the year 10889) could get there."""
    clock = HybridClock(FakeWall(1 << 48))
    with pytest.raises(OverflowError):
        clock.now()


DRIFT_MS = 60_000


def test_a_version_within_the_drift_bound_moves_the_clock() -> None:
    wall = FakeWall()
    clock = HybridClock(wall, DRIFT_MS)
    ahead = version_at(START_MS + DRIFT_MS, 0xFFFF)
    clock.observe(ahead)
    assert clock.now() > ahead
    assert clock.refused == 0


def test_a_version_past_the_drift_bound_is_refused_and_leaves_the_clock_alone() -> None:
    clock = HybridClock(FakeWall(), DRIFT_MS)
    before = clock.now()
    with pytest.raises(VersionAhead) as refused:
        clock.observe(version_at(START_MS + DRIFT_MS + 1))
    assert refused.value.ahead_ms == DRIFT_MS + 1
    assert "60.001s ahead" in str(refused.value)
    assert clock.last == before
    assert version_ms(clock.now()) == START_MS
    assert clock.refused == 1


def test_a_forged_maximal_version_cannot_exhaust_the_clock() -> None:
    """The forged-version bug: one replica write with version 2^64-1 made every later
    write on the node fail."""
    clock = HybridClock(FakeWall(), DRIFT_MS)
    with pytest.raises(VersionAhead):
        clock.observe(MAX_VERSION)
    assert version_ms(clock.now()) == START_MS


@settings(max_examples=500)
@given(
    remote=st.lists(st.integers(min_value=0, max_value=MAX_VERSION), max_size=20),
    wall_steps=st.lists(st.integers(min_value=-10_000, max_value=10_000), max_size=20),
    drift_ms=st.integers(min_value=0, max_value=3_600_000),
)
def test_observe_and_now_stay_within_bounds_for_any_64_bit_input(
    remote: list[int], wall_steps: list[int], drift_ms: int
) -> None:
    """Whatever 64-bit versions arrive, and however the wall clock steps (even back),
    `now` never raises and never runs further ahead of the wall clock than the drift
    bound plus one millisecond per version it issued; refused versions move nothing."""
    wall = FakeWall()
    clock = HybridClock(wall, drift_ms)
    highest_wall = wall.ms
    issued = 0
    previous = 0
    for index, version in enumerate(remote):
        wall.ms += wall_steps[index] if index < len(wall_steps) else 0
        highest_wall = max(highest_wall, wall.ms)
        last = clock.last
        try:
            clock.observe(version)
        except VersionAhead:
            assert clock.last == last
            assert version_ms(version) > wall.ms + drift_ms
        now = clock.now()
        issued += 1
        assert now > previous
        assert now <= MAX_VERSION
        assert version_ms(now) <= highest_wall + drift_ms + issued
        previous = now


class SavedCeiling:
    """The clock's persisted ceiling (a LevelDB key on a node), as a list of saves."""

    def __init__(self) -> None:
        self.saves: list[int] = []

    def __call__(self, ceiling: int) -> None:
        self.saves.append(ceiling)

    @property
    def floor(self) -> int:
        return self.saves[-1] if self.saves else 0


@given(
    st.lists(st.tuples(st.sampled_from(["now", "observe"]), st.integers(-30_000, 59_000))),
    st.integers(-3_600_000, 3_600_000),
)
@settings(max_examples=200, deadline=None)
def test_a_clock_started_from_its_saved_ceiling_issues_newer_versions(
    steps: list[tuple[str, int]], step_back_ms: int
) -> None:
    """Rule 8.7: whatever a run issued or observed, and however the wall clock moved
    while the node was down, the next run's first version is newer."""
    wall = FakeWall()
    saved = SavedCeiling()
    clock = HybridClock(wall, floor=saved.floor, save_ceiling=saved)
    used: list[int] = []
    for action, offset_ms in steps:
        if action == "now":
            wall.ms = START_MS + offset_ms
            used.append(clock.now())
        else:
            remote = version_at(wall.ms + offset_ms)
            clock.observe(remote)
            used.append(remote)
        assert saved.floor >= max(used)  # saved before the version was used
    wall.ms = START_MS + step_back_ms  # a crash: nothing saved on the way out
    restarted = HybridClock(wall, floor=saved.floor, save_ceiling=saved)
    assert restarted.now() > max(used, default=0)


def test_the_ceiling_is_saved_once_per_lead_not_once_per_version() -> None:
    wall = FakeWall()
    saved = SavedCeiling()
    clock = HybridClock(wall, save_ceiling=saved)
    for _ in range(10):  # ten seconds of writes, a hundred a second
        for _ in range(100):
            wall.ms += 10
            clock.now()
    assert 9 <= len(saved.saves) <= 11
    assert all(version_ms(ceiling) - START_MS <= 11_000 for ceiling in saved.saves)


def test_a_refused_version_saves_no_ceiling() -> None:
    saved = SavedCeiling()
    clock = HybridClock(FakeWall(), max_drift_ms=1_000, save_ceiling=saved)
    with pytest.raises(VersionAhead):
        clock.observe(version_at(START_MS + 5_000))
    assert saved.saves == []
