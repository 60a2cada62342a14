"""The hybrid logical clock that versions every write.

A version is one unsigned 64-bit integer: wall-clock milliseconds in the high 48 bits and
a counter in the low 16, which starts at the microsecond within the millisecond (its high
10 bits) when the clock reads microseconds: writes through two coordinators whose clocks
agree are then ordered to the microsecond, not only 1 ms apart (found when the lean HTTP
path made a write through one node and the next through another fit in one millisecond).
Comparing two versions is comparing two integers, so versions travel and sort as plain
numbers. The clock never goes backwards: when the wall clock
stalls or steps back, the counter (and, past it, the millisecond part) keeps moving.

A version received from another node moves the clock forward only if it is at most
`max_drift_ms` ahead of this node's wall clock; a version further ahead is refused
(`VersionAhead`). Without that bound one forged or badly skewed version would drag
every later write of the cluster into the future, or exhaust the 64 bits outright.

The clock never goes back across a restart either (SPEC.md rule 8.7). Before it issues
or takes a version past its saved ceiling, it saves a new ceiling a little further on
(`save_ceiling`, one synced write at most every CEILING_LEAD_MS of clock time), and a
clock started again begins at the ceiling it saved (`floor`). Without that, a node whose
clock a peer had carried forward, or whose wall clock stepped back while it was down,
would issue versions older than writes it had acknowledged, and its next acknowledged
writes would lose to them.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from dht.model.machine import Machine

COUNTER_BITS = 16
# Where the microsecond within the millisecond sits in the counter: 1000 << 6 < 1 << 16.
MICROSECOND_SHIFT = 6
MAX_VERSION = (1 << 64) - 1
DEFAULT_MAX_DRIFT_MS = 60_000
# How far past the version that crossed it a new saved ceiling reaches.
CEILING_LEAD_MS = 1_000


def wall_clock_ms() -> int:
    """Milliseconds since the epoch from the system clock (the production time source)."""
    return time.time_ns() // 1_000_000


def version_at(ms: int, counter: int = 0) -> int:
    """The version that a write at wall-clock `ms` with `counter` carries."""
    return (ms << COUNTER_BITS) | counter


def skewed_wall_clock(machine: Machine, skew_seconds: float) -> Callable[[], int]:
    """The machine's wall clock in milliseconds, shifted by `--clock-skew` (the test
    bed's skewed-clock fault)."""
    if not skew_seconds:
        return machine.wall_ms
    skew_ms = round(skew_seconds * 1000)
    return lambda: machine.wall_ms() + skew_ms


def skewed_wall_clock_us(machine: Machine, skew_seconds: float) -> Callable[[], int]:
    """`skewed_wall_clock` in microseconds."""
    if not skew_seconds:
        return machine.wall_us
    skew_us = round(skew_seconds * 1_000_000)
    return lambda: machine.wall_us() + skew_us


def version_at_us(us: int) -> int:
    """The first version a write at wall-clock `us` microseconds may carry."""
    ms, within = divmod(us, 1000)
    return version_at(ms, within << MICROSECOND_SHIFT)


def version_ms(version: int) -> int:
    """The wall-clock milliseconds a version was issued at (for logs and tests)."""
    return version >> COUNTER_BITS


class VersionAhead(ValueError):
    """A version from another node is further ahead of this node's clock than allowed."""

    def __init__(self, version: int, ahead_ms: int, max_drift_ms: int) -> None:
        super().__init__(
            f"version {version} is {ahead_ms / 1000:.3f}s ahead of this node's clock "
            f"(the limit is {max_drift_ms / 1000:g}s)"
        )
        self.ahead_ms = ahead_ms


class HybridClock:
    """Issues strictly increasing versions; `observe` merges versions seen from peers.

    Time is injected (`wall_ms`), so the clock is pure logic and testable with a fake one;
    so is its persistence: `floor` is the ceiling a previous run saved (every version it
    issued or observed is at most that), and `save_ceiling` durably records a new one
    before any version past the current one is used (None: a clock that forgets).
    """

    def __init__(
        self,
        wall_ms: Callable[[], int] = wall_clock_ms,
        max_drift_ms: int = DEFAULT_MAX_DRIFT_MS,
        floor: int = 0,
        save_ceiling: Callable[[int], None] | None = None,
        wall_us: Callable[[], int] | None = None,
    ) -> None:
        """`wall_us`: the same clock as `wall_ms` in microseconds (None: versions start
        at the millisecond)."""
        self._wall_ms = wall_ms
        self._wall_us = wall_us
        self._max_drift_ms = max_drift_ms
        self._last = floor
        self._ceiling = floor
        self._save_ceiling = save_ceiling
        self.refused = 0

    def now(self) -> int:
        """A version newer than every version this clock issued or observed, in this run
        or, with a saved ceiling, in any run before it."""
        if self._wall_us is None:
            issued = version_at(self._wall_ms())
        else:
            issued = version_at_us(self._wall_us())
        candidate = max(issued, self._last + 1)
        if candidate > MAX_VERSION:
            raise OverflowError("hybrid clock exhausted its 64 bits")
        self._move_to(candidate)
        return candidate

    def _move_to(self, version: int) -> None:
        if self._save_ceiling is not None and version > self._ceiling:
            ceiling = min(version + version_at(CEILING_LEAD_MS), MAX_VERSION)
            self._save_ceiling(ceiling)  # first: a crash after it forgets nothing
            self._ceiling = ceiling
        self._last = version

    def observe(self, remote_version: int) -> None:
        """Moves the clock past a version received from another node; raises
        VersionAhead (and leaves the clock as it was) if it is too far ahead."""
        ahead_ms = version_ms(remote_version) - self._wall_ms()
        if ahead_ms > self._max_drift_ms:
            self.refused += 1
            raise VersionAhead(remote_version, ahead_ms, self._max_drift_ms)
        if remote_version > self._last:
            self._move_to(remote_version)

    @property
    def last(self) -> int:
        return self._last

    def wall_ms(self) -> int:
        """This node's wall clock (skewed with it in tests): what expiry is judged by."""
        return self._wall_ms()
