"""Benchmark: anti-entropy and tombstone collection (SPEC rules 9.9 and 9.10).

Four figures on 127.0.0.1. A 3-node cluster (`dht/conformance/launcher.py`, `--log-level WARNING`,
hints off with `--hint-max-bytes 0`, `--anti-entropy-interval` 1 s) is loaded with
`--keys` keys (`key0000000000 ..`, 100 random bytes each, so compression does not hide
the data) by concurrent PUTs (aiohttp, 64 in flight) at the default replicas (2/3; every
node holds every key). In the order they run:

1. foreground: the cluster's highest rate of a mixed GET/PUT workload (wrk, closed model,
   5 s), then half of it at a constant rate (vegeta, open model) into node 1 for
   `--window` seconds with no exchange running (in sync), then again while a wiped node 3
   is rebuilt at `--rate` (the default `--anti-entropy-rate`); percentiles, the p99
   change (target: up by less than 20%), and the rebuild's copy rate with and without
   the traffic. Each window also counts the LevelDB compactions that began in it (from
   the nodes' LevelDB LOG): at this write rate all three replicas flush and compact at
   once about every 25 s, stalling requests for up to ~0.7 s on 2 cores, anti-entropy
   or not; a 30 s window holds at least one. The machine is shared: each window first
   waits (up to `--patience`) for a second in which other processes use under a
   quarter core, prints the CPU they used during it, and is measured once more if that
   was more.
2. rebuild: nodes 1 and 2 restart at `--fast-rate` records/s (so the rate cap is not the
   figure); node 3 starts on an empty data folder; the time until every record was copied
   into it. Progress is read from `/v0/status`: the records node 3 pulled plus those its
   peers pushed to it (each copy is counted once, by the side that started the exchange);
   node 3's records are compared with a peer's once at the end.
3. divergence: stop node 3, overwrite `--divergence` of the keys through node 1 (hints
   off: node 3 misses them), restart it, and count the records every node sent and
   received until every pair has exchanged without a difference, and the leaves the
   exchanges compared and found differing (next to the count expected for random keys).
4. tombstones: on a node of its own (`--tombstone-nodes 3`: on the cluster), loaded the
   same way, `--tombstone-grace 1`: delete every key, then the LevelDB folder's size
   (`du -sb`) after the deletes, once every tombstone is gone (`/v0/status`
   `tombstones.collected` reaches the key count, then no record is left), with the node
   stopped, and after an explicit `CompactRange` over every key (the node compacts by
   itself after a collection pass that removed 10,000 records or more).

Prints each figure as it comes, then a Markdown block for a note. Needs wrk and vegeta
(`make bench-tools`); without vegeta the foreground traffic comes from the Python
generator of bench/constant_rate.py, capped at 2,500 requests/s. Run from the repo root
(the default run takes about 5 minutes on 2 cores; `--quick`, 10,000 keys and 5 s
windows, about 1):

    .venv/bin/python -m bench.anti_entropy [--keys 100000] [--quick] [--only rebuild]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.anti_entropy_cluster import (
    INTERVAL,
    node_flags,
    node_log_problems,
    restart_all,
    wait_in_sync,
)
from bench.anti_entropy_foreground import foreground
from bench.anti_entropy_load import VALUE_BYTES, puts, send
from bench.anti_entropy_repair import divergence, rebuild
from bench.anti_entropy_report import DEFAULT_RATE, markdown, progress, say, seconds
from bench.tombstone_space import tombstones

SCENARIOS = ("foreground", "rebuild", "divergence", "tombstones")  # in the order they run
DEFAULT_KEYS = 100_000
QUICK_KEYS = 10_000
FAST_RATE = 20_000.0
# A foreground window: each replica flushes its memtable and compacts about every 25 s at
# the foreground's write rate (all three at once: they take the same writes), which
# stalls requests for up to ~0.7 s on 2 cores. A shorter window holds one such stall or
# none, and its p99 says more about that than about anti-entropy.
WINDOW = 30.0
# Warnings expected here: a peer's circuit opens while node 3 is stopped on purpose.
EXPECTED_LOG = ("circuit to",)


def run_scenarios(args: argparse.Namespace, chosen: list[str], root: Path) -> dict[str, Any]:
    """Runs the chosen figures in order, printing each; one that fails (a time-out, a
    node that does not start) is reported and the next one runs."""
    from dht.conformance.launcher import Cluster

    results: dict[str, Any] = {}
    problems: list[str] = []
    first_rate = args.rate if "foreground" in chosen else args.fast_rate
    needs_cluster = bool(set(chosen) - {"tombstones"}) or args.tombstone_nodes == 3
    cluster = Cluster(root / "cluster", 3 if needs_cluster else 0, node_flags(first_rate))
    cluster.start()

    def attempt(name: str, run: Callable[[], Any]) -> None:
        try:
            results[name] = run()
        except (TimeoutError, RuntimeError, OSError) as error:
            say(f"{name}: FAILED: {type(error).__name__}: {str(error)[:400]}")
            results.setdefault("failed", []).append(name)
        else:
            say(*results[name].lines())

    try:
        if needs_cluster:
            took = send(cluster[0].url, puts(range(args.keys)), 201)
            say(f"loaded {args.keys:,} keys in {seconds(took)} ({args.keys / took:,.0f} PUT/s)")
            wait_in_sync(cluster, args.deadline)
        if "foreground" in chosen:
            attempt(
                "foreground",
                lambda: foreground(
                    cluster,
                    args.keys,
                    args.window,
                    args.foreground_rate,
                    args.rate,
                    args.deadline,
                    root,
                    args.seed,
                    args.patience,
                ),
            )
        if "rebuild" in chosen:
            progress(f"rebuild: wiping node 3 (--anti-entropy-rate {args.fast_rate:g})")
            attempt("rebuild", lambda: rebuild(cluster, args.keys, args.fast_rate, args.deadline))
        if "divergence" in chosen:
            progress("divergence: node 3 down, overwriting")
            if "rebuild" not in chosen:  # node 3 may still be rebuilding: fast, then in sync
                restart_all(cluster, node_flags(args.fast_rate))
            wait_in_sync(cluster, args.deadline)
            attempt(
                "divergence",
                lambda: divergence(cluster, args.keys, args.divergence, args.deadline, args.seed),
            )
        if "tombstones" in chosen and args.tombstone_nodes == 3:
            attempt(
                "tombstones", lambda: tombstones(cluster, args.keys, args.deadline, args.fast_rate)
            )
    finally:
        cluster.stop()
        problems += node_log_problems(cluster)
    if "tombstones" in chosen and args.tombstone_nodes == 1:
        single = Cluster(root / "single", 1, node_flags(args.fast_rate, grace=1.0)).start()
        try:
            took = send(single[0].url, puts(range(args.keys)), 201)
            say(f"one node: loaded {args.keys:,} keys in {seconds(took)}")
            attempt(
                "tombstones", lambda: tombstones(single, args.keys, args.deadline, args.fast_rate)
            )
        finally:
            single.stop()
            problems += node_log_problems(single, "single node")
    results["problems"] = problems
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.anti_entropy", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--keys", type=int, default=DEFAULT_KEYS, help="(default 100000)")
    parser.add_argument("--quick", action="store_true", help="10,000 keys, 5 s windows")
    parser.add_argument("--only", action="append", choices=SCENARIOS, help="(repeatable)")
    parser.add_argument(
        "--fast-rate", type=float, default=FAST_RATE, help="rebuild's rate cap (default 20000)"
    )
    parser.add_argument(
        "--rate",
        type=float,
        default=DEFAULT_RATE,
        help=f"--anti-entropy-rate during the foreground windows (default {DEFAULT_RATE:g})",
    )
    parser.add_argument("--divergence", type=float, default=0.01, help="(default 0.01)")
    parser.add_argument(
        "--window",
        type=float,
        default=WINDOW,
        help=f"seconds per foreground window (default {WINDOW:g}: more than the ~25 s "
        "between LevelDB compactions at that write rate)",
    )
    parser.add_argument(
        "--foreground-rate", type=float, default=0.0, help="fixed rate (default: half the max)"
    )
    parser.add_argument(
        "--tombstone-nodes",
        type=int,
        choices=(1, 3),
        default=1,
        help="1: a node of its own, loaded for it (default); 3: the cluster, where "
        "collection also waits on the exchanges between the nodes",
    )
    parser.add_argument(
        "--deadline", type=float, default=300.0, help="per wait, seconds (default 300)"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--patience",
        type=float,
        default=30.0,
        help="seconds to wait for a quiet machine before a foreground window (default 30)",
    )
    args = parser.parse_args()
    if args.quick:
        args.keys = QUICK_KEYS if args.keys == DEFAULT_KEYS else args.keys
        args.window = min(args.window, 5.0)
    chosen = args.only or list(SCENARIOS)
    if "foreground" in chosen and not args.foreground_rate and shutil.which("wrk") is None:
        sys.exit("wrk not found (make bench-tools), or give --foreground-rate")
    say(
        f"3 nodes on 127.0.0.1, --hint-max-bytes 0 --anti-entropy-interval {INTERVAL:g}, "
        f"{args.keys:,} keys of {VALUE_BYTES} random bytes, on {platform.node()} "
        f"({os.cpu_count()} cores, Python {platform.python_version()})"
    )
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-ae-") as tmp:
        results = run_scenarios(args, chosen, Path(tmp))
    problems = results["problems"]
    expected = sum(any(e in line for e in EXPECTED_LOG) for line in problems)
    say(
        f"node logs: {len(problems)} warnings or errors"
        + (f" ({expected} of them circuits opening to the stopped node 3):" if problems else ""),
        *problems[:20],
        f"failed: {', '.join(results['failed'])}" if results.get("failed") else "failed: none",
        f"took {seconds(time.monotonic() - started)}",
        "",
        "```markdown",
        markdown(
            args.keys,
            results.get("rebuild"),
            results.get("divergence"),
            results.get("foreground"),
            results.get("tombstones"),
        ),
        "```",
    )


if __name__ == "__main__":
    main()
