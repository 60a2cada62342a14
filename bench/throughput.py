"""Benchmark: the most requests/s dht answers (closed model, wrk), as a share of a bare
aiohttp server measured in the same run, and whether that meets the targets.

Two groups of rows, PUT (unique keys, 100-byte values) then GET (over the keys that
round's PUT wrote), each with its own bare-server reference:

- pinned: the bare server and ONE dht node, each pinned to core 1 (`taskset`), wrk
  pinned to core 0, so server and generator never share a core;
- unpinned: the bare server, 3 nodes at replicas 1/1 and 3 nodes at the default 2/3
  (one cluster for both), everything free on both cores.

wrk always runs with one thread (`-t1 -c64`, the issue's original measurement), so its
CPU share of one core tells whether it was the bottleneck. Each measurement runs
`--rounds` times, servers in turn within a round (bare first), and the table shows the
round with the median rate; "vs bare" is the median of the per-round ratios. Needs wrk
and taskset (`make bench-tools`). Run from the repo root:

    .venv/bin/python -m bench.throughput --seconds 8 --rounds 3
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bench.wrk import SATURATED_CORE_SHARE, WrkRun, run_wrk

GENERATOR_CORE = 0
SERVER_CORE = 1
WORKLOADS = ("PUT", "GET")
BARE = "bare aiohttp"
ONE_NODE = "1 node"
THREE_1_1 = "3 nodes, 1/1"
THREE_2_3 = "3 nodes, 2/3 (default)"
NO_METRICS = ", --no-metrics"


@dataclass(frozen=True)
class Server:
    """Where one row's load goes: a URL and the replicas sent with each request."""

    name: str
    url: str
    replicas: str | None = None


@dataclass
class Row:
    """One row of the table: every round's wrk run, and every round's ratio to the bare
    server's run just before it (paired, so drift on the shared machine cancels)."""

    pinning: str
    name: str
    workload: str
    runs: list[WrkRun] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)

    @property
    def median(self) -> WrkRun:
        """The round with the median rate (the lower middle for an even count), so its
        latencies and rate come from one real run."""
        middle = statistics.median_low(run.rate for run in self.runs)
        return next(run for run in self.runs if run.rate == middle)

    @property
    def ratio(self) -> float:
        return statistics.median(self.ratios)

    @property
    def errors(self) -> int:
        return sum(run.errors for run in self.runs)

    @property
    def generator_bound(self) -> bool:
        return any(run.generator_bound for run in self.runs)


@dataclass(frozen=True)
class Target:
    """A goal from the issue: this row's ratio to the bare server at least `share`."""

    pinning: str
    name: str
    share: float


TARGETS = (Target("pinned", ONE_NODE, 0.90), Target("unpinned", THREE_2_3, 0.40))


# -- the report (pure) ------------------------------------------------------------------


def latency(ms: float) -> str:
    return f"{ms:.2f} ms" if ms < 10 else f"{ms:.1f} ms"


def table(rows: list[Row]) -> str:
    lines = [
        "| pinning | server | workload | req/s | p50 | p99 | vs bare | errors | wrk CPU |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        run = row.median
        bound = " (generator-bound)" if row.generator_bound else ""
        lines.append(
            f"| {row.pinning} | {row.name} | {row.workload} | {run.rate:,.0f} | "
            f"{latency(run.p50_ms)} | {latency(run.p99_ms)} | {row.ratio:.2f} | "
            f"{row.errors} | {run.cpu_share:.0%}{bound} |"
        )
    return "\n".join(lines)


def find_row(rows: list[Row], pinning: str, name: str, workload: str) -> Row | None:
    return next(
        (r for r in rows if (r.pinning, r.name, r.workload) == (pinning, name, workload)), None
    )


def verdicts(rows: list[Row]) -> list[str]:
    """One line per target and workload, ending in "met" or "missed"; a second line says
    why a figure does not count (a generator-bound run, or errors), if it does not."""
    lines = []
    for target in TARGETS:
        for workload in WORKLOADS:
            row = find_row(rows, target.pinning, target.name, workload)
            bare = find_row(rows, target.pinning, BARE, workload)
            if row is None or bare is None:
                continue
            outcome = "met" if row.ratio >= target.share else "missed"
            lines.append(
                f"target {workload} {target.name} >= {target.share:.2f} x bare "
                f"({target.pinning}): {row.ratio:.2f} {outcome}"
            )
            lines += [f"  does not count: {reason}" for reason in doubts(row, bare)]
    return lines


def doubts(row: Row, bare: Row) -> list[str]:
    """Why a ratio is not a measurement of dht: the generator set a rate, or requests
    failed (a fast error is not throughput)."""
    reasons = [
        f"wrk used >= {SATURATED_CORE_SHARE:.0%} of its core on {r.name}"
        for r in (bare, row)
        if r.generator_bound
    ]
    reasons += [f"{r.errors} errors on {r.name}" for r in (bare, row) if r.errors]
    return reasons


def ceiling(rows: list[Row]) -> list[str]:
    """The evidence that wrk was not the bottleneck: per pinning and workload, the rate
    it reached on the bare server against the fastest dht row, and its CPU share."""
    lines = []
    for pinning in dict.fromkeys(row.pinning for row in rows):
        for workload in WORKLOADS:
            bare = find_row(rows, pinning, BARE, workload)
            others = [
                r for r in rows if (r.pinning, r.workload) == (pinning, workload) and r is not bare
            ]
            if bare is None or not others:
                continue
            fastest, run = max(others, key=lambda r: r.median.rate), bare.median
            # Its CPU per request is roughly fixed, so a full core would send about this.
            full_core = f"{run.rate / run.cpu_share:,.0f}" if run.cpu_share else "?"
            lines.append(
                f"{pinning} {workload}: wrk reached {run.rate:,.0f} req/s on the bare server "
                f"using {run.cpu_share:.0%} of its core (~{full_core} req/s at a full core), "
                f"{run.rate / fastest.median.rate:.1f}x the fastest dht row "
                f"({fastest.name}, {fastest.median.rate:,.0f} req/s)"
            )
    bound = [f"{r.pinning} {r.name} {r.workload}" for r in rows if r.generator_bound]
    lines.append(
        "generator-bound rows (wrk >= "
        f"{SATURATED_CORE_SHARE:.0%} of a core in some round): {', '.join(bound) or 'none'}"
    )
    return lines


# -- running it -------------------------------------------------------------------------


def measure(
    pinning: str,
    servers: list[Server],
    rounds: int,
    seconds: float,
    connections: int,
    wrk_prefix: list[str],
    alternate: bool = False,
) -> list[Row]:
    """Runs every round: PUT on each server in turn (the bare one first), then GET on
    each over the keys its PUT just wrote; each PUT writes keys of its own prefix. With
    `alternate`, every other round takes the servers after the bare one in reverse
    order: the first of them after the bare server runs measurably slower here (20%
    seen), which would otherwise pass for a difference between two of them."""
    rows = {(s.name, w): Row(pinning, s.name, w) for w in WORKLOADS for s in servers}
    for round_number in range(rounds):
        written: dict[str, tuple[str, int]] = {}
        in_turn = servers
        if alternate and round_number % 2:
            in_turn = [servers[0], *reversed(servers[1:])]
        for workload in WORKLOADS:
            bare_rate = 0.0
            for index, server in enumerate(in_turn):
                prefix = f"r{round_number}s{servers.index(server)}-"
                args = [f"replicas={server.replicas}"] if server.replicas else []
                if workload == "PUT":
                    script, args = "wrk_put.lua", [*args, f"prefix={prefix}"]
                else:
                    prefix, keys = written[server.name]
                    script, args = "wrk_get.lua", [*args, f"prefix={prefix}", f"keys={keys}"]
                run = run_wrk(server.url, script, seconds, connections, args, wrk_prefix)
                if workload == "PUT":
                    # The last `connections` PUTs may not have finished: read below them.
                    written[server.name] = (prefix, max(2, run.requests - connections))
                if index == 0:  # the bare server: this round's reference
                    bare_rate = run.rate
                row = rows[server.name, workload]
                row.runs.append(run)
                row.ratios.append(run.rate / bare_rate if bare_rate else 0.0)
                print(
                    f"  round {round_number + 1} {pinning:8} {server.name:24} {workload} "
                    f"{run.rate:9,.0f} req/s  p99 {latency(run.p99_ms):>9}  "
                    f"errors {run.errors}  wrk CPU {run.cpu_share:.0%}",
                    file=sys.stderr,
                    flush=True,
                )
    return list(rows.values())


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


@contextlib.contextmanager
def bare_server(core: int | None) -> Iterator[Server]:
    """The reference server, started under `taskset -c core` when given one."""
    from tests.launcher import free_port, request, wait_for

    port = free_port()
    command = [sys.executable, "-m", "bench.bare_server", "--port", str(port)]
    pinned = ["taskset", "-c", str(core)] if core is not None else []
    process = subprocess.Popen([*pinned, *command])
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        try:
            return request("GET", url + "/", timeout=1).status == 200
        except OSError:
            return False

    try:
        wait_for(answers, bool, deadline=10)
        if core is not None:
            check_pinned(process.pid, core)
        yield Server(BARE, url)
    finally:
        process.terminate()
        process.wait()


@contextlib.contextmanager
def dht_cluster(nodes: int, core: int | None, extra: tuple[str, ...] = ()) -> Iterator[str]:
    """A fresh cluster on a temporary folder; yields the first node's URL. With `core`,
    every node is pinned to it once it answers."""
    from tests.launcher import Cluster

    with tempfile.TemporaryDirectory() as tmp:
        cluster = Cluster(Path(tmp), nodes, ["--log-level", "WARNING", *extra]).start()
        try:
            for node in cluster:
                if core is not None:
                    assert node.process is not None
                    pin(node.process.pid, core)
            yield cluster[0].url
        finally:
            cluster.stop()


def pinned_rows(rounds: int, seconds: float, connections: int) -> list[Row]:
    with bare_server(SERVER_CORE) as bare, dht_cluster(1, SERVER_CORE) as node:
        servers = [bare, Server(ONE_NODE, node)]
        wrk_prefix = ["taskset", "-c", str(GENERATOR_CORE)]
        return measure("pinned", servers, rounds, seconds, connections, wrk_prefix)


def unpinned_rows(rounds: int, seconds: float, connections: int) -> list[Row]:
    # One cluster for both replica settings: they are a per-request parameter.
    with bare_server(None) as bare, dht_cluster(3, None) as cluster:
        servers = [bare, Server(THREE_1_1, cluster, "1/1"), Server(THREE_2_3, cluster)]
        return measure("unpinned", servers, rounds, seconds, connections, [])


def metrics_rows(rounds: int, seconds: float, connections: int) -> list[Row]:
    """What counting for /metrics costs: the same servers with and without it, in turn
    within each round (in alternating order: use an even number of rounds), pinned (one
    node) and unpinned (three nodes at 2/3)."""
    wrk_prefix = ["taskset", "-c", str(GENERATOR_CORE)]
    off = ("--no-metrics",)
    with (
        bare_server(SERVER_CORE) as bare,
        dht_cluster(1, SERVER_CORE) as on,
        dht_cluster(1, SERVER_CORE, off) as without,
    ):
        servers = [bare, Server(ONE_NODE, on), Server(ONE_NODE + NO_METRICS, without)]
        rows = measure("pinned", servers, rounds, seconds, connections, wrk_prefix, True)
    with (
        bare_server(None) as bare,
        dht_cluster(3, None) as on,
        dht_cluster(3, None, off) as without,
    ):
        servers = [bare, Server(THREE_2_3, on), Server(THREE_2_3 + NO_METRICS, without)]
        rows += measure("unpinned", servers, rounds, seconds, connections, [], True)
    return rows


def metrics_costs(rows: list[Row]) -> list[str]:
    """One line per row with a --no-metrics twin: both rates as shares of the bare
    server, and what metrics cost (1 - on/off, from the median shares)."""
    lines = []
    for row in rows:
        twin = find_row(rows, row.pinning, row.name + NO_METRICS, row.workload)
        if twin is None:
            continue
        cost = 1 - row.ratio / twin.ratio if twin.ratio else 0.0
        lines.append(
            f"metrics cost {row.pinning} {row.name} {row.workload}: {row.ratio:.2f} x bare "
            f"with, {twin.ratio:.2f} x bare without: {cost:+.1%} (target under 5%)"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.throughput", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--seconds", type=float, default=8.0, help="per wrk run (default 8)")
    parser.add_argument("--rounds", type=int, default=3, help="per measurement (default 3)")
    parser.add_argument("--connections", type=int, default=64, help="wrk's -c (default 64)")
    parser.add_argument(
        "--only",
        choices=("pinned", "unpinned", "metrics"),
        help="one group of rows; `metrics` compares nodes with and without --no-metrics",
    )
    args = parser.parse_args()
    for tool in ("wrk", "taskset"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} not found: run `make bench-tools` (wrk: apt-get install wrk)")
    can_pin = {GENERATOR_CORE, SERVER_CORE} <= os.sched_getaffinity(0)
    rows: list[Row] = []
    if args.only == "metrics":
        rows = metrics_rows(args.rounds, args.seconds, args.connections)
    if args.only not in ("unpinned", "metrics"):
        if can_pin:
            rows += pinned_rows(args.rounds, args.seconds, args.connections)
        else:
            print(f"skipping pinned rows: cores {GENERATOR_CORE} and {SERVER_CORE} needed")
    if args.only not in ("pinned", "metrics"):
        rows += unpinned_rows(args.rounds, args.seconds, args.connections)
    print(
        f"wrk -t1 -c{args.connections}, {args.seconds:g} s per run, {args.rounds} rounds "
        f"(median round shown; vs bare = median of per-round ratios), on "
        f"{platform.node()} ({os.cpu_count()} cores)\n"
    )
    print(table(rows), "", *verdicts(rows), *metrics_costs(rows), sep="\n")
    print("", "Generator ceiling:", *ceiling(rows), sep="\n")


if __name__ == "__main__":
    main()
