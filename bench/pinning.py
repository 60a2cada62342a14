"""Pinning a process to one core (`taskset`), every thread of it and its children, and
checking that it held: a thread left free would run beside the generator and inflate a
figure. Read from /proc; used by bench.throughput and bench.metrics_cost."""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path


def pin(pid: int, core: int, attempts: int = 3) -> None:
    """Pins a running process, every thread of it and its child processes, to `core`,
    then checks it: a thread left free would run beside the generator and inflate the
    figure. Threads started later inherit the pinning from the thread that starts them;
    one started during the pinning by a thread not yet pinned is caught by the next pass."""
    for _ in range(attempts):
        for process in process_tree(pid):
            subprocess.run(
                ["taskset", "-a", "-p", "-c", str(core), str(process)],
                check=True,
                stdout=subprocess.DEVNULL,
            )
        if not loose_threads(pid, core):
            return
    check_pinned(pid, core)


def check_pinned(pid: int, core: int) -> None:
    loose = loose_threads(pid, core)
    if loose:
        raise RuntimeError(f"process {pid}: threads not pinned to core {core}: {loose}")


def loose_threads(pid: int, core: int) -> list[tuple[int, set[int]]]:
    """(thread id, the cores it may run on) for every thread of `pid` and its children
    that may run elsewhere than `core`."""
    return [
        (tid, affinity)
        for process in process_tree(pid)
        for tid in threads_of(process)
        if (affinity := thread_affinity(tid)) is not None and affinity != {core}
    ]


def process_tree(pid: int) -> list[int]:
    """`pid` and its descendants, from /proc/PID/task/TID/children."""
    tree, index = [pid], 0
    while index < len(tree):
        for tid in threads_of(tree[index]):
            with contextlib.suppress(OSError):
                children = Path(f"/proc/{tree[index]}/task/{tid}/children").read_text()
                tree += [int(child) for child in children.split()]
        index += 1
    return tree


def threads_of(pid: int) -> list[int]:
    try:
        return [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    except FileNotFoundError:
        return []


def thread_affinity(tid: int) -> set[int] | None:
    try:
        return os.sched_getaffinity(tid)
    except ProcessLookupError:
        return None  # the thread ended meanwhile
