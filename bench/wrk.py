"""Runs wrk (a closed-model generator: each connection waits for its answer) and reads
its text output, with the CPU time wrk itself used.

The CPU time is the evidence for the benchmark rule that a figure counts only if the
generator was not the bottleneck: with `-t1` wrk does its work on one thread, so when
its CPU time comes close to the wall time it ran, wrk (not the server) set the rate.
"""

from __future__ import annotations

import re
import resource
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent
# wrk prints durations as 12.34us, 1.20ms, 2.00s, 1.50m or 1.00h.
UNITS_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0, "h": 3_600_000.0}
DURATION = r"([\d.]+)(us|ms|s|m|h)"
DURATION_TEXT = r"[\d.]+(?:us|ms|s|m|h)"
# One wrk thread busy on its core this much of the time is taken as saturated.
SATURATED_CORE_SHARE = 0.90


@dataclass(frozen=True)
class WrkRun:
    """What one wrk run measured. `errors` are socket errors (connect, read, write,
    timeout) plus answers outside 2xx/3xx; `cpu_share` is wrk's CPU seconds over the
    seconds it ran (0 when not measured)."""

    requests: int
    seconds: float
    rate: float
    p50_ms: float
    p99_ms: float
    non_2xx: int = 0
    socket_errors: int = 0
    cpu_share: float = 0.0

    @property
    def errors(self) -> int:
        return self.non_2xx + self.socket_errors

    @property
    def generator_bound(self) -> bool:
        """wrk's one thread kept its core busy: the rate is wrk's, not the server's."""
        return self.cpu_share >= SATURATED_CORE_SHARE


def duration_ms(text: str) -> float:
    """A duration as wrk prints it ("643.00us", "1.21ms", "2.00s") in milliseconds."""
    match = re.fullmatch(DURATION, text.strip())
    if match is None:
        raise ValueError(f"not a wrk duration: {text!r}")
    return float(match.group(1)) * UNITS_MS[match.group(2)]


def parse_wrk(output: str, cpu_share: float = 0.0) -> WrkRun:
    """Reads wrk's output (run with --latency, which prints the percentiles); raises
    ValueError naming what is missing, since a silent zero would read as a figure."""

    def find(pattern: str, what: str) -> re.Match[str]:
        match = re.search(pattern, output, re.MULTILINE)
        if match is None:
            raise ValueError(f"no {what} in wrk's output:\n{output}")
        return match

    total = find(rf"^\s*(\d+) requests in ({DURATION_TEXT})", "request count")
    socket = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output
    )
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    return WrkRun(
        requests=int(total.group(1)),
        seconds=duration_ms(total.group(2)) / 1000,
        rate=float(find(r"^Requests/sec:\s+([\d.]+)", "Requests/sec").group(1)),
        p50_ms=duration_ms(find(rf"^\s+50%\s+({DURATION_TEXT})", "p50 (--latency)").group(1)),
        p99_ms=duration_ms(find(rf"^\s+99%\s+({DURATION_TEXT})", "p99 (--latency)").group(1)),
        non_2xx=int(non_2xx.group(1)) if non_2xx else 0,
        socket_errors=sum(int(count) for count in socket.groups()) if socket else 0,
        cpu_share=cpu_share,
    )


def children_cpu_seconds() -> float:
    """User + system CPU seconds of every child process reaped so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_wrk(
    url: str,
    script: str,
    seconds: float,
    connections: int,
    script_args: list[str],
    prefix: list[str] | None = None,
) -> WrkRun:
    """Runs `wrk -t1` with a script of bench/ and returns what it measured, with its CPU
    share. `prefix` goes before wrk (e.g. `taskset -c 0`, which execs wrk in place, so
    the CPU time is wrk's). The CPU time is the delta of the reaped children's: nothing
    else may be reaped meanwhile, which holds since servers are stopped only after."""
    command = [
        *(prefix or []),
        "wrk",
        "-t1",
        f"-c{connections}",
        f"-d{seconds:g}s",
        "--latency",
        "-s",
        str(SCRIPTS / script),
        url,
        "--",
        *script_args,
    ]
    cpu_before, started = children_cpu_seconds(), time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True)
    elapsed, cpu = time.monotonic() - started, children_cpu_seconds() - cpu_before
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {done.stderr or done.stdout}")
    return parse_wrk(done.stdout, cpu_share=cpu / elapsed)
