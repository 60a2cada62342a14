"""Where a node's CPU goes, by part: py-spy's samples of a node under load, each given to
the part of dht whose code it was running, as a share of the samples and, given the CPU
the node spent per request, as microseconds per request.

    py-spy record --format raw --threads --nonblocking --rate 400 --duration 10 \
        --pid PID -o node.folded
    .venv/bin/python -m bench.profile_parts node.folded --cpu-us-per-request 97

A sample belongs to the innermost frame of a known part (`PARTS`, matched on the frame's
file path): a sample inside LevelDB's C code called from `dht/storage/store.py` is
storage's, one in uvloop's C code with no Python frame of dht above it is the event
loop's. The group commit's thread (`leveldb-writer`) is a part of its own, whatever it
runs. py-spy samples only threads that are running (not idle), so the shares are of CPU.
"""

from __future__ import annotations

import argparse
import re
import sys
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


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.profile_parts", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("folded", type=Path, help="py-spy's --format raw output")
    parser.add_argument(
        "--cpu-us-per-request",
        type=float,
        help="the node's CPU per request in the same load (bench.throughput prints it)",
    )
    args = parser.parse_args()
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
