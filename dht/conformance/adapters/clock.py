"""The wall clocks of an adapter's members, stepped ahead or behind by the nemesis and
set true again: libfaketime preloaded into every process of a member
(`dht.testbed.fake_clock`), with one offset file per member that all its processes
read, so that a Redis server and the sentinel beside it move together, as a partition
cuts both off together.

It can reach a program that reads the time through the C library, not one that reads
it another way: a Go program such as etcd reads it through the vDSO. Nor one that
libfaketime cannot run: Debian 12's libfaketime 0.9.10 hangs Debian's redis-server at
its start (jemalloc, which it is linked with, and libfaketime each call the other while
they initialize). So an adapter may `prepare` with a probe that tries its program
under the fake clock, and `unreached` asks `fake_clock.reach` of each member's running
processes; either says why not, and the run then draws no clock fault rather than
pretend it made one. The monotonic clock is left true, so a member's timers
keep their pace; what it reads off the wall clock sees the step (Redis's Sentinel
measures a primary's silence, and its own stalls, by it).

An adapter holds one and touches nothing until a run asks for clock faults (`prepare`):
then it starts member i's processes with `environment(i)`, and `release`s each once it
has exited (libfaketime leaves files in /dev/shm named by the process's id).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from dht.conformance.adapters.processes import Process
from dht.testbed import fake_clock
from dht.testbed.fake_clock import FakeClock


class Clocks:
    """The clocks of `count` members, their offset files in `folder`/clocks."""

    def __init__(self, folder: Path, count: int) -> None:
        self.folder = folder / "clocks"
        self.count = count
        self._clock: FakeClock | None = None

    def prepare(self, probe: Callable[[], str | None] | None = None) -> str | None:
        """Why this machine cannot step the members' clocks, or None: it will, and every
        member's clock starts true. `probe`, if given, tries the store's own program
        under the fake clock (it may use `step` and `environment`, and must leave every
        offset at 0): None if a step reached it, else why not, and then nothing of the
        fake clock is given to the members."""
        reason = fake_clock.unavailable()
        if reason is None and self._clock is None:
            self._clock = FakeClock(self.folder, self.count)
        if reason is None and probe is not None:
            reason = probe()
        if reason is not None:
            self._clock = None
        return reason

    def environment(self, index: int) -> dict[str, str] | None:
        """What member `index`'s processes add to their environment (None: nothing, as
        the run wants no clock faults)."""
        return None if self._clock is None else self._clock.environment(index)

    def unreached(self, members: Sequence[Sequence[Process | None]]) -> str | None:
        """None when a step reaches every running process of every member (`members[i]`
        are member i's), else why not, for the first member it does not reach."""
        if self._clock is None:
            return "the clocks were not prepared"
        for index, processes in enumerate(members):
            for process in processes:
                if process is None or process.poll() is not None:
                    continue
                if (why := fake_clock.reach(process.pid)) is not None:
                    return f"the fake clock does not reach m{index}: {why}"
        return None

    def step(self, index: int, seconds: float) -> None:
        """Member `index`'s wall clock `seconds` off the true time from now on (negative:
        behind; 0: true again), in every process of it, running or started later."""
        if self._clock is None:
            raise RuntimeError("no clock step before `prepare`")
        self._clock.set_offset(index, seconds)

    def release(self, process: Process | None) -> None:
        """What libfaketime left in /dev/shm for `process`, removed once it has exited."""
        if self._clock is not None and process is not None and process.poll() is not None:
            fake_clock.release(process.pid)
