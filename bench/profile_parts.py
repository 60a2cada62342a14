"""Where a node's CPU goes, by part: py-spy's samples of a node under load, each given to
the part of dht whose code it was running, as a share of the samples and, given the CPU
the node spent per request, as microseconds per request.

    .venv/bin/python -m bench.profile_parts --run PUT [--node-args="--durability none"]
    .venv/bin/python -m bench.profile_parts node.folded --cpu-us-per-request 97

`--run` starts one node pinned to core 1, loads it with wrk (`-t1 -c64`, pinned to core
0, PUT of new keys or GET of keys written first), samples it with py-spy (pinned to core
0 too, `--nonblocking`, so the node is not paused) and prints its rate, its CPU per
request and the table. Or give it py-spy's output of any run:

    py-spy record --format raw --threads --nonblocking --nolineno --rate 250 \
        --duration 8 --pid PID -o node.folded

`--nolineno`: a part is known by its file, and py-spy 0.4.0 reading a line number from a
running process (`--nonblocking`) can panic on a code object that changed under it
(benfred/py-spy#653, #735: it did in CI, and at once in a run here). Without
`--nonblocking` py-spy stops the node for each sample: in two runs here that took the
PUT p99 from about 20 ms to 95 ms, too far from a node unobserved to profile it.

A sample belongs to the innermost frame of a known part (`PARTS`, matched on the frame's
file path): a sample inside LevelDB's C code called from `dht/storage/store.py` is
storage's, one in uvloop's C code with no Python frame of dht above it is the event
loop's. The group commit's thread (`leveldb-writer`) is a part of its own, whatever it
runs. py-spy samples only threads that are running (not idle), so the shares are of CPU.
"""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

# (part, what a frame's file path contains), tried in order on each frame from the
# innermost out: the first part that matches any frame names the sample.
PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("group commit (writer thread)", ()),  # by thread name, below
    ("storage (loop side)", ("dht/storage/",)),
    ("replica channel", ("dht/transport/",)),
    ("coordinator", ("dht/coordination/",)),
    ("replication (hints, repair, anti-entropy)", ("dht/replication/",)),
    ("HTTP edge (dht)", ("dht/web/",)),
    ("HTTP edge (aiohttp)", ("aiohttp/", "multidict/", "yarl/")),
    ("model (clock, ring, records)", ("dht/model/",)),
    ("other dht (metrics, status)", ("dht/",)),
    ("event loop and the rest", ("",)),
)
WRITER_THREAD = "leveldb-writer"
# The frames every sample of the loop has at its root (`run_node` starts the loop): a
# sample with nothing of dht below them runs the event loop's own C code (uvloop, the
# kernel's socket calls, the callbacks' dispatch).
ENTRY = ("dht/node.py", "dht/__main__.py", "dht/command_line/")
# py-spy's raw line: frames joined by ';', then a space and the count of samples.
_LINE = re.compile(r"^(?P<stack>.*) (?P<count>\d+)$")
# A frame: "function (path/to/file.py:123)"; thread roots read "thread (0x...)" and, with
# --threads and a named thread, may carry its name.
_FILE = re.compile(r"\(([^():]+\.py)(?::\d+)?\)\s*$")


def part_of(stack: str) -> str:
    frames = stack.split(";")
    if any(WRITER_THREAD in frame for frame in frames[:3]):
        return PARTS[0][0]
    files = [match.group(1) for frame in frames if (match := _FILE.search(frame))]
    for path in reversed(files):  # innermost first
        if any(entry in path for entry in ENTRY):
            continue
        for part, markers in PARTS[1:-1]:
            if any(marker in path for marker in markers):
                return part
    return PARTS[-1][0]


def samples_by_part(lines: Iterable[str]) -> Counter[str]:
    counts: Counter[str] = Counter()
    for line in lines:
        match = _LINE.match(line.rstrip("\n"))
        if match:
            counts[part_of(match["stack"])] += int(match["count"])
    return counts


def table(counts: Counter[str], cpu_us_per_request: float | None) -> str:
    total = sum(counts.values())
    header = "| part | samples | share |" + (" µs per request |" if cpu_us_per_request else "")
    lines = [header, "| --- | --- | --- |" + (" --- |" if cpu_us_per_request else "")]
    for part, _ in PARTS:
        count = counts.get(part, 0)
        share = count / total if total else 0.0
        row = f"| {part} | {count:,} | {share:.1%} |"
        if cpu_us_per_request:
            row += f" {share * cpu_us_per_request:.1f} |"
        lines.append(row)
    lines.append(
        f"| total | {total:,} | 100% |"
        + (f" {cpu_us_per_request:.1f} |" if cpu_us_per_request else "")
    )
    return "\n".join(lines)


def profile_node(workload: str, node_args: list[str], seconds: float) -> tuple[str, Path, float]:
    """Runs one pinned node under wrk and py-spy; returns what wrk measured (a line), the
    folded samples and the node's CPU µs per request."""
    from bench.process_cpu import cpu_seconds
    from bench.servers import dht_cluster
    from bench.throughput import GENERATOR_CORE, SERVER_CORE
    from bench.wrk import run_wrk

    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    folded = Path(tempfile.mkdtemp(prefix="dht-profile-")) / f"{workload}.folded"
    pinned = ["taskset", "-c", str(GENERATOR_CORE)]
    with dht_cluster(1, SERVER_CORE, tuple(node_args)) as (url, pids):
        written = run_wrk(url, "wrk_put.lua", 3, 64, ["prefix=w-"], pinned)
        record = ["record", "--format", "raw", "--threads", "--nonblocking", "--nolineno"]
        record += ["--rate", "250"]
        target = ["--duration", f"{seconds:g}", "--pid", str(pids[0]), "-o", str(folded)]
        sampler = subprocess.Popen(
            [*pinned, spy, *record, *target],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        time.sleep(0.5)  # py-spy attached before the load begins
        before = cpu_seconds(pids)
        if workload == "PUT":
            run = run_wrk(url, "wrk_put.lua", seconds, 64, ["prefix=p-"], pinned)
        else:
            keys = f"keys={max(2, written.requests - 64)}"
            run = run_wrk(url, "wrk_get.lua", seconds, 64, ["prefix=w-", keys], pinned)
        used = cpu_seconds(pids) - before
        _, error = sampler.communicate()
        if sampler.returncode != 0:
            sys.exit(f"py-spy failed: {error.decode(errors='replace').strip()}")
    per_request = used * 1e6 / run.requests
    summary = (
        f"{workload} on one pinned node{''.join(' ' + arg for arg in node_args)}: "
        f"{run.rate:,.0f} req/s, "
        f"p99 {run.p99_ms:.2f} ms, node CPU {per_request:.1f} µs per request, "
        f"wrk {run.cpu_share:.0%} of its core"
    )
    return summary, folded, per_request


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.profile_parts", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("folded", type=Path, nargs="?", help="py-spy's --format raw output")
    parser.add_argument(
        "--cpu-us-per-request",
        type=float,
        help="the node's CPU per request in the same load (bench.throughput prints it)",
    )
    parser.add_argument(
        "--run", choices=("PUT", "GET"), help="profile a node of its own under this load"
    )
    parser.add_argument("--node-args", default="", help="the node's flags, as one string")
    parser.add_argument("--seconds", type=float, default=8.0, help="of load (default 8)")
    args = parser.parse_args()
    if args.run:
        for tool in ("wrk", "taskset"):
            if shutil.which(tool) is None:
                sys.exit(f"{tool} not found: run `make bench-tools`")
        summary, args.folded, args.cpu_us_per_request = profile_node(
            args.run, shlex.split(args.node_args), args.seconds
        )
        print(summary)
    elif args.folded is None:
        parser.error("give py-spy's output, or --run PUT|GET")
    try:
        text = args.folded.read_text()
    except OSError as error:
        sys.exit(f"cannot read {args.folded}: {error.strerror}")
    counts = samples_by_part(text.splitlines())
    if not counts:
        sys.exit(f"{args.folded}: no samples (py-spy's --format raw lines end in a count)")
    print(table(counts, args.cpu_us_per_request))


if __name__ == "__main__":
    main()
