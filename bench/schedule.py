"""When each request of a constant-rate run is due: request i at i / rate seconds from the
start, for the run's duration, whatever the server does (pure; no clock, no I/O)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

# rate * duration a hair over a whole number (200 * 2.0000000001) is still that number.
_EPSILON = 1e-9


@dataclass(frozen=True)
class Schedule:
    """`rate` requests a second for `duration` seconds: `count` of them, at `offset(i)`."""

    rate: float
    duration: float

    def __post_init__(self) -> None:
        if not (self.rate > 0 and self.duration > 0):
            raise ValueError(f"rate and duration must be positive: {self.rate}, {self.duration}")

    @property
    def count(self) -> int:
        """How many requests are due: every i with i / rate < duration."""
        return max(1, math.ceil(self.rate * self.duration - _EPSILON))

    @property
    def interval(self) -> float:
        return 1.0 / self.rate

    def offset(self, index: int) -> float:
        """Seconds from the start at which request `index` is due."""
        return index / self.rate

    def __iter__(self) -> Iterator[tuple[int, float]]:
        """(index, offset) of every request, in order."""
        return ((index, self.offset(index)) for index in range(self.count))


def send_offsets(rate: float, duration: float) -> Iterator[float]:
    """The offsets alone: seconds from the start at which each request is due."""
    return (offset for _, offset in Schedule(rate, duration))
