"""CPU time of server processes, from /proc: what a request costs the server, steadier
across machines than a ratio of rates (issue 30's measure).

`/proc/PID/stat` counts user and system time of every thread of a process (LevelDB's
compaction thread included) in clock ticks; a process's children are not counted, and
a dht node starts none.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: tuple[int, ...]) -> float:
    """User plus system CPU seconds used so far by the processes `pids`, all threads."""
    total = 0
    for pid in pids:
        total += sum(_user_and_system(Path(f"/proc/{pid}/stat")))
    return total / _TICKS_PER_SECOND


@dataclass(frozen=True)
class ThreadCpu:
    """CPU time of processes split by thread: their event loops (each process's main
    thread, where a node's loop runs) and their other threads (a node's group commit
    writer and LevelDB's compaction), each as user and kernel time. In seconds, or,
    once `per_request`, in microseconds a request."""

    loop_user: float = 0.0
    loop_system: float = 0.0
    other_user: float = 0.0
    other_system: float = 0.0

    def since(self, earlier: ThreadCpu) -> ThreadCpu:
        return ThreadCpu(
            self.loop_user - earlier.loop_user,
            self.loop_system - earlier.loop_system,
            self.other_user - earlier.other_user,
            self.other_system - earlier.other_system,
        )

    def per_request(self, requests: int) -> ThreadCpu:
        """Microseconds a request, for `requests` answered in the time measured."""
        scale = 1e6 / requests if requests else 0.0
        return ThreadCpu(
            self.loop_user * scale,
            self.loop_system * scale,
            self.other_user * scale,
            self.other_system * scale,
        )

    @property
    def total(self) -> float:
        return self.loop_user + self.loop_system + self.other_user + self.other_system

    def describe(self) -> str:
        """As µs a request: 'event loop 113 (92 user, 21 kernel), other threads ...'."""
        return (
            f"event loop {self.loop_user + self.loop_system:.0f} µs "
            f"({self.loop_user:.0f} user, {self.loop_system:.0f} kernel), other threads "
            f"{self.other_user + self.other_system:.0f} µs "
            f"({self.other_user:.0f} user, {self.other_system:.0f} kernel)"
        )


def thread_cpu(pids: tuple[int, ...]) -> ThreadCpu:
    """The CPU seconds used so far by each thread of the processes `pids`, added up as
    `ThreadCpu` splits them. A thread that has exited is no longer listed: a node's
    threads live as long as it does."""
    loop_user = loop_system = other_user = other_system = 0
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                user, system = _user_and_system(task / "stat")
            except OSError:
                continue  # the thread exited meanwhile
            if task.name == str(pid):
                loop_user, loop_system = loop_user + user, loop_system + system
            else:
                other_user, other_system = other_user + user, other_system + system
    tick = _TICKS_PER_SECOND
    return ThreadCpu(loop_user / tick, loop_system / tick, other_user / tick, other_system / tick)


def _user_and_system(stat_path: Path) -> tuple[int, int]:
    """utime and stime, in clock ticks, from a /proc stat file."""
    stat = stat_path.read_text()
    # The command name (field 2) may hold spaces: the fields after it are counted from
    # its closing parenthesis. utime and stime are fields 14 and 15.
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[11]), int(fields[12])
