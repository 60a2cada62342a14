"""Benchmark: the most requests/s dht answers (closed model, wrk), as a share of a bare
aiohttp server (and of a raw uvloop Protocol server) measured in the same run, and
whether that meets issue 30's targets and issue 51's goals.

Two groups of rows, PUT (unique keys, 100-byte values) then GET (over the keys that
round's PUT wrote), each with its own bare-server and raw-server reference:

- pinned: the reference servers and ONE dht node, with the default durability (the
  group commit), with `--durability none` and without its lean HTTP path
  (`--no-lean-http`), each pinned to core 1 (`taskset`), wrk pinned to core 0, so
  server and generator never share a core;
- unpinned: the reference servers, 3 nodes at replicas 1/1 and 3 nodes at the default
  2/3 (one cluster for both), and 3 nodes at 2/3 with `--no-lean-http`, everything free
  on both cores.

Below the table, one line per target of issue 30 and per bound of issue 51's goals
(`bench.throughput_report`'s TARGETS and ISSUE_51_GOALS) says "met" or "missed" with the
figure, and "does not count" under it when wrk was the bottleneck or requests failed;
a goal whose rows did not run (`--only unpinned`) prints nothing. Issue 51 judges the
pinned node's PUT rate against the `--durability none` node's of the same rounds too.

`--only durability` measures PUT with the group commit (the default), with no fsync
and with one per write, pinned (one node each) and unpinned (3 nodes at 2/3 each).

wrk always runs with one thread (`-t1 -c64`, the issue's original measurement), so its
CPU share of one core tells whether it was the bottleneck. Each measurement runs
`--rounds` times, servers in turn within a round (bare first), and the table shows the
round with the median rate; "vs bare" is the median of the per-round ratios. Needs wrk
and taskset (`make bench-tools`). Run from the repo root:

    .venv/bin/python -m bench.throughput --seconds 8 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench.process_cpu import thread_cpu
from bench.servers import Server, bare_server, dht_cluster
from bench.throughput_report import (
    BARE,
    NO_LEAN,
    NO_METRICS,
    NO_SYNC,
    ONE_NODE,
    RAW,
    SYNC_EACH,
    THREE_1_1,
    THREE_2_3,
    WITH_TLS,
    WORKLOADS,
    Row,
    ceiling,
    cpu_added,
    durability_costs,
    issue_51_verdicts,
    latency,
    lean_gains,
    metrics_costs,
    table,
    tls_costs,
    verdicts,
)
from bench.wrk import run_wrk

GENERATOR_CORE = 0
SERVER_CORE = 1


@dataclass(frozen=True)
class Load:
    """How each server is loaded: `rounds` wrk runs of `seconds` with `connections`,
    after `warm` seconds of PUTs to every dht server that are not measured."""

    rounds: int
    seconds: float
    connections: int
    warm: float = 0.0


def measure(
    pinning: str,
    servers: list[Server],
    load: Load,
    wrk_prefix: list[str],
    alternate: bool = False,
    workloads: tuple[str, ...] = WORKLOADS,
) -> list[Row]:
    """Runs every round: PUT on each server in turn (the bare one first), then GET on
    each over the keys its PUT just wrote; each PUT writes keys of its own prefix. With
    `alternate`, every other round takes the servers after the bare one in reverse
    order: the first of them after the bare server runs measurably slower here (20%
    seen), which would otherwise pass for a difference between two of them."""
    warm_up(pinning, servers, load, wrk_prefix)
    rounds, seconds, connections = load.rounds, load.seconds, load.connections
    rows = {(s.name, w): Row(pinning, s.name, w) for w in workloads for s in servers}
    for round_number in range(rounds):
        written: dict[str, tuple[str, int]] = {}
        in_turn = servers
        if alternate and round_number % 2:
            in_turn = [servers[0], *reversed(servers[1:])]
        for workload in workloads:
            bare_rate = 0.0
            rates: dict[str, float] = {}
            for index, server in enumerate(in_turn):
                prefix = f"r{round_number}s{servers.index(server)}-"
                args = [f"replicas={server.replicas}"] if server.replicas else []
                if workload == "PUT":
                    script, args = "wrk_put.lua", [*args, f"prefix={prefix}"]
                else:
                    prefix, keys = written[server.name]
                    script, args = "wrk_get.lua", [*args, f"prefix={prefix}", f"keys={keys}"]
                cpu_before = thread_cpu(server.pids)
                run = run_wrk(server.url, script, seconds, connections, args, wrk_prefix)
                by_thread = thread_cpu(server.pids).since(cpu_before)
                if workload == "PUT":
                    # The last `connections` PUTs may not have finished: read below them.
                    written[server.name] = (prefix, max(2, run.requests - connections))
                if index == 0:  # the bare server: this round's reference
                    bare_rate = run.rate
                row = rows[server.name, workload]
                rates[server.name] = run.rate
                row.runs.append(run)
                row.ratios.append(run.rate / bare_rate if bare_rate else 0.0)
                row.threads.append(by_thread.per_request(run.requests))
                row.cpu_us.append(row.threads[-1].total)
                print(
                    f"  round {round_number + 1} {pinning:8} {server.name:24} {workload} "
                    f"{run.rate:9,.0f} req/s  p99 {latency(run.p99_ms):>9}  "
                    f"errors {run.errors}  wrk CPU {run.cpu_share:.0%}  "
                    f"server CPU {row.cpu_us[-1]:.0f} us/req",
                    file=sys.stderr,
                    flush=True,
                )
            if raw_rate := rates.get(RAW):
                for name, rate in rates.items():
                    rows[name, workload].raw_ratios.append(rate / raw_rate)
    return list(rows.values())


def warm_up(pinning: str, servers: list[Server], load: Load, wrk_prefix: list[str]) -> None:
    """`load.warm` seconds of PUTs to each dht server, not measured: a node fresh from
    its start holds nothing, and LevelDB compacts little in a few seconds, so short
    rounds alone leave out what a node under sustained load pays (its compaction
    thread took 5-8 µs a PUT over 8 s and 26-31 over 90 s, with Snappy, bench/README)."""
    if load.warm <= 0:
        return
    for server in servers:
        if server.name in (BARE, RAW):
            continue
        args = [f"replicas={server.replicas}"] if server.replicas else []
        args.append(f"prefix=warm{servers.index(server)}-")
        run = run_wrk(server.url, "wrk_put.lua", load.warm, load.connections, args, wrk_prefix)
        print(
            f"  warm-up  {pinning:8} {server.name:24} PUT {run.requests:,} writes in "
            f"{load.warm:g} s, errors {run.errors} (not measured)",
            file=sys.stderr,
            flush=True,
        )


def pinned_rows(load: Load) -> list[Row]:
    """One node as it ships, one with no fsync (`--durability none`, issue 51's reference
    for the group commit) and one without its lean HTTP path (`--no-lean-http`, every
    request through aiohttp's handler), in alternating order."""
    with (
        bare_server(SERVER_CORE) as bare,
        bare_server(SERVER_CORE, "raw") as raw,
        dht_cluster(1, SERVER_CORE) as node,
        dht_cluster(1, SERVER_CORE, ("--durability", "none")) as unsynced,
        dht_cluster(1, SERVER_CORE, ("--no-lean-http",)) as aiohttp_path,
    ):
        servers = [
            bare,
            raw,
            Server(ONE_NODE, *node),
            Server(ONE_NODE + NO_SYNC, *unsynced),
            Server(ONE_NODE + NO_LEAN, *aiohttp_path),
        ]
        wrk_prefix = ["taskset", "-c", str(GENERATOR_CORE)]
        return measure("pinned", servers, load, wrk_prefix, True)


def unpinned_rows(load: Load) -> list[Row]:
    # One cluster for both replica settings: they are a per-request parameter.
    with (
        bare_server(None) as bare,
        bare_server(None, "raw") as raw,
        dht_cluster(3, None) as cluster,
        dht_cluster(3, None, ("--no-lean-http",)) as aiohttp_path,
    ):
        servers = [
            bare,
            raw,
            Server(THREE_1_1, *cluster, "1/1"),
            Server(THREE_2_3, *cluster),
            Server(THREE_2_3 + NO_LEAN, *aiohttp_path),
        ]
        return measure("unpinned", servers, load, [], True)


def metrics_rows(load: Load) -> list[Row]:
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
        servers = [bare, Server(ONE_NODE, *on), Server(ONE_NODE + NO_METRICS, *without)]
        rows = measure("pinned", servers, load, wrk_prefix, True)
    with (
        bare_server(None) as bare,
        dht_cluster(3, None) as on,
        dht_cluster(3, None, off) as without,
    ):
        servers = [bare, Server(THREE_2_3, *on), Server(THREE_2_3 + NO_METRICS, *without)]
        rows += measure("unpinned", servers, load, [], True)
    return rows


def tls_rows(load: Load) -> list[Row]:
    """What TLS between nodes costs: 3 nodes at 2/3 with and without it, in turn within
    each round (alternating order: use an even number of rounds), unpinned. Clients
    speak plain HTTP to both; every replica call of the TLS cluster is TLS."""
    from dht.testbed.certificates import LocalCA

    with tempfile.TemporaryDirectory() as folder:
        # TLS comes with a cluster secret (SPEC.md rule 11.7): both clusters have one.
        secret = ("--secret", "bench-tls")
        tls = (*secret, *LocalCA(Path(folder)).issue("node").flags())  # names 127.0.0.1
        with (
            bare_server(None) as bare,
            dht_cluster(3, None, secret) as plain,
            dht_cluster(3, None, tls) as secured,
        ):
            servers = [bare, Server(THREE_2_3, *plain), Server(THREE_2_3 + WITH_TLS, *secured)]
            return measure("unpinned", servers, load, [], True)


def durability_rows(load: Load) -> list[Row]:
    """PUT with the group commit (the default), with no fsync (`--durability none`) and
    with one per write (`--durability each`), in turn within each round (alternating
    order), pinned (one node each) and unpinned (three nodes at 2/3 each). Every data
    folder is on the same volume as the others (the system's temporary folder)."""
    pinned = ["taskset", "-c", str(GENERATOR_CORE)]
    rows = durability_group("pinned", ONE_NODE, 1, SERVER_CORE, pinned, load)
    rows += durability_group("unpinned", THREE_2_3, 3, None, [], load)
    return rows


def durability_group(
    pinning: str,
    label: str,
    size: int,
    core: int | None,
    wrk_prefix: list[str],
    load: Load,
) -> list[Row]:
    """The bare server and `size`-node clusters at each durability, measured together."""
    none, each = ("--durability", "none"), ("--durability", "each")
    with (
        bare_server(core) as bare,
        bare_server(core, "raw") as raw,
        dht_cluster(size, core) as group,
        dht_cluster(size, core, none) as unsynced,
        dht_cluster(size, core, each) as synced_each,
    ):
        servers = [
            bare,
            raw,
            Server(label, *group),
            Server(label + NO_SYNC, *unsynced),
            Server(label + SYNC_EACH, *synced_each),
        ]
        rows = measure(pinning, servers, load, wrk_prefix, True, ("PUT",))
        print_syncs(pinning, servers[2:])
    return rows


def print_syncs(pinning: str, servers: list[Server]) -> None:
    """Each server's syncs and writes per sync over its whole run (`storage` in the
    first node's /v0/status): the group commit's batching, as measured."""
    import json

    from dht.conformance.http_client import request

    for server in servers:
        storage = json.loads(request("GET", server.url + "/v0/status").body)["storage"]
        print(
            f"  {pinning} {server.name}: {storage['syncs']:,} syncs of "
            f"{storage['synced_writes']:,} writes ({storage['writes_per_sync']} per sync)",
            file=sys.stderr,
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.throughput", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--seconds", type=float, default=8.0, help="per wrk run (default 8)")
    parser.add_argument("--rounds", type=int, default=3, help="per measurement (default 3)")
    parser.add_argument("--connections", type=int, default=64, help="wrk's -c (default 64)")
    parser.add_argument(
        "--warm",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="PUTs to every dht server for this long before its rounds, not measured, so "
        "the figures are of nodes under sustained load (LevelDB compacting) rather than "
        "fresh ones (default 0)",
    )
    parser.add_argument(
        "--only",
        choices=("pinned", "unpinned", "metrics", "tls", "durability"),
        help="one group of rows; `metrics` compares nodes with and without --no-metrics, "
        "`tls` 3 nodes with and without TLS between them, `durability` PUTs with the "
        "group commit, with no fsync and with one fsync per write",
    )
    args = parser.parse_args()
    for tool in ("wrk", "taskset"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} not found: run `make bench-tools` (wrk: apt-get install wrk)")
    if args.warm < 0:
        parser.error("--warm: seconds, 0 or more")
    load = Load(args.rounds, args.seconds, args.connections, args.warm)
    can_pin = {GENERATOR_CORE, SERVER_CORE} <= os.sched_getaffinity(0)
    rows: list[Row] = []
    if args.only == "metrics":
        rows = metrics_rows(load)
    if args.only == "tls":
        rows = tls_rows(load)
    if args.only == "durability":
        rows = durability_rows(load)
    if args.only not in ("unpinned", "metrics", "tls", "durability"):
        if can_pin:
            rows += pinned_rows(load)
        else:
            print(f"skipping pinned rows: cores {GENERATOR_CORE} and {SERVER_CORE} needed")
    if args.only not in ("pinned", "metrics", "tls", "durability"):
        rows += unpinned_rows(load)
    print(
        f"wrk -t1 -c{args.connections}, {args.seconds:g} s per run, {args.rounds} rounds"
        f"{f' after {args.warm:g} s of PUTs to each dht server' if args.warm else ''} "
        f"(median round shown; vs bare = median of per-round ratios), on "
        f"{platform.node()} ({os.cpu_count()} cores)\n"
    )
    print(table(rows), "", *cpu_added(rows), "", *verdicts(rows), sep="\n")
    print(*issue_51_verdicts(rows), sep="\n")
    print(*lean_gains(rows), *metrics_costs(rows), *tls_costs(rows), sep="\n")
    print(*durability_costs(rows), sep="\n")
    print("", "Server CPU by thread, µs a request (median round):", sep="\n")
    for row in rows:
        if row.threads:
            split = row.median_threads.describe()
            print(f"{row.pinning} {row.name} {row.workload}: {split}")
    print("", "Generator ceiling:", *ceiling(rows), sep="\n")


if __name__ == "__main__":
    main()
