"""The processes of an adapter's members: started with their output in a log file
(and a group id of their member's, where the run partitions; a fake clock's preload,
where it steps clocks), signalled only while they run, and killed at once even when
paused; or all of a member's at once, as a power cut stops them."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

Process = subprocess.Popen[bytes]


def spawn(
    argv: Sequence[str],
    log: Path,
    group: int | None = None,
    environment: Mapping[str, str] | None = None,
) -> Process:
    """`argv` started, its output (both streams) appended to `log`; under the group id
    `group` if given (by which `partition.Partitions` knows a member's traffic), with
    `environment` added to this process's (`clock.Clocks`'s preload)."""
    env = None if environment is None else os.environ | dict(environment)
    with open(log, "ab") as output:
        return subprocess.Popen(
            list(argv), stdout=output, stderr=subprocess.STDOUT, group=group, env=env
        )


def send(process: Process | None, signum: signal.Signals) -> None:
    """`signum` to `process` while it runs (a pause or a resume)."""
    if process is not None and process.poll() is None:
        process.send_signal(signum)


def kill_now(process: Process | None) -> None:
    """kill -9, reaped: a paused process is let run first, so that it dies at once."""
    kill_all_now([process])


def kill_all_now(processes: Sequence[Process | None]) -> None:
    """kill -9 to each of `processes` that runs, one right after the other (as a power
    cut stops them), then each reaped."""
    running = [process for process in processes if process is not None and process.poll() is None]
    for process in running:
        process.send_signal(signal.SIGCONT)
        process.kill()
    for process in running:
        process.wait()
