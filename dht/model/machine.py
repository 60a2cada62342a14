"""What a node reads of the machine it runs on: its clocks and its randomness.

Every part that measures a duration, tells the time of day or draws a nonce is given a
`Machine` when it is made (STYLE.md, seams by construction), never the `time` module or
`os.urandom` directly: a node passes `SYSTEM`, the simulator a machine of virtual time
and seeded randomness, and no global is replaced for a run.

`monotonic` is for durations and deadlines (on Linux `time.perf_counter` reads the same
clock, CLOCK_MONOTONIC, so one serves both), `wall` and `wall_ns` for the time of day:
versions, a request proof's age, a log's timestamp. A node's `--clock-skew` shifts only
the wall clock its versions come from (`dht.model.clock.skewed_wall_clock`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Machine:
    monotonic: Callable[[], float] = time.monotonic
    monotonic_ns: Callable[[], int] = time.monotonic_ns
    wall: Callable[[], float] = time.time  # seconds since the epoch
    wall_ns: Callable[[], int] = time.time_ns
    random_bytes: Callable[[int], bytes] = os.urandom

    def wall_ms(self) -> int:
        return self.wall_ns() // 1_000_000

    def wall_us(self) -> int:
        return self.wall_ns() // 1_000


SYSTEM = Machine()
