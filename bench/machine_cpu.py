"""The shared machine's CPU: how much other processes used while a benchmark measured
(the machine's busy time less ours, from /proc), and waiting for a quiet second before a
latency figure. Used by the anti-entropy benchmark's foreground windows."""

from __future__ import annotations

import os
import time
from pathlib import Path

QUIET_CORES = 0.25  # other processes' CPU under which the machine counts as quiet


def machine_busy_seconds() -> float:
    """CPU seconds every core of the machine spent busy since boot (/proc/stat: user,
    nice, system, irq, softirq; not idle, iowait or steal)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    user, nice, system, _idle, _iowait, irq, softirq = (int(f) for f in fields[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process, every thread (/proc/PID/stat)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def foreign_cores(busy: float, ours: float, seconds: float) -> float:
    """Cores the machine's other processes used on average: its busy CPU seconds less
    ours (nodes, generator, this process) over `seconds` (never below zero: the
    counters tick in 10 ms steps)."""
    return max(0.0, busy - ours) / seconds if seconds > 0 else 0.0


class CpuMeter:
    """The machine's busy CPU and ours (the nodes', this process's and its reaped
    children's: the generator) between `__init__` and `foreign()`."""

    def __init__(self, pids: list[int]) -> None:
        from bench.wrk import children_cpu_seconds

        self._pids = pids
        self._children = children_cpu_seconds
        self._start = self._read()

    def _read(self) -> tuple[float, float, float]:
        ours = sum(process_cpu_seconds(pid) for pid in self._pids)
        ours += time.process_time() + self._children()
        return time.monotonic(), machine_busy_seconds(), ours

    def foreign(self) -> float:
        end = self._read()
        return foreign_cores(
            end[1] - self._start[1], end[2] - self._start[2], end[0] - self._start[0]
        )


def wait_quiet(pids: list[int], patience: float) -> float:
    """Waits, up to `patience` seconds, for a second in which the machine's other
    processes use less than QUIET_CORES (this 2-core machine is shared: another test run
    halves what the nodes get and makes a latency figure meaningless); returns the cores
    they used in the last second measured."""
    started = time.monotonic()
    while True:
        meter = CpuMeter(pids)
        time.sleep(1.0)
        used = meter.foreign()
        if used < QUIET_CORES or time.monotonic() - started > patience:
            return used
