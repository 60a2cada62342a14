"""A constant-rate (open-model) load generator for the v0 API, free of coordinated omission.

Request i is due at start + i / rate, whatever the server does (bench.schedule). A fixed
pool of workers, one per connection, takes the requests in order, sleeps until each is
due and sends it; every latency is measured from the request's *intended* send time, so
when the server stalls (and every worker waits on it) the requests that fall due in the
meantime go out late and count the whole wait (the wrk2 method) instead of silently
lowering the rate. A request the event loop wakes up for a little early is measured from
when it actually went out, so latencies are never understated. The run is bounded:
nothing is sent later than `duration + timeout` after the start, and each request gives
up after `timeout`.

Prints wrk2's percentile table plus the achieved rate, answers and errors by status,
time-outs, and how far behind schedule the generator itself sent. Run from the repo root:

    .venv/bin/python bench/constant_rate.py --url http://127.0.0.1:8080 --rate 2000 \\
        --duration 30 --connections 64 --workload put|get|mixed [--replicas 2/3]

`get` and `mixed` first fill --keys keys (skip with --skip-prefill). Locust cannot hold a
fixed rate on 2 cores (its users wait for answers); this tool is the reference.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script, `python bench/constant_rate.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import asyncio
import random
import time
from collections.abc import Iterator

import aiohttp
import uvloop

from bench.measurement import Result, percentile_table
from bench.schedule import Schedule
from bench.workload import WORKLOADS, Workload
from locustfiles.prefill import KEY_PREFIX, check_replicas, loopback_address, prefill, run_prefix

__all__ = ["Result", "Workload", "percentile_table", "run"]

# The event loop's timers tick in milliseconds (libuv), so a sleep ends up to about a
# millisecond early or late. Waking half a millisecond before a request is due centres
# that error on zero: an early send is measured from when it went out, a late one from
# when it was due, and the mean rate is unchanged.
TIMER_SLACK = 0.0005


async def run(
    url: str,
    rate: float,
    duration: float,
    workload: Workload,
    connections: int = 64,
    request_timeout: float = 2.0,
    seed: int = 1,
) -> Result:
    """Sends `rate` requests a second for `duration` seconds to `url` over at most
    `connections` connections, and measures them."""
    schedule = Schedule(rate, duration)
    result = Result(rate, duration)
    rng = random.Random(seed)
    due: Iterator[tuple[int, float]] = iter(schedule)  # shared: each worker takes the next
    connector = aiohttp.TCPConnector(limit=connections)
    timeout = aiohttp.ClientTimeout(total=request_timeout)
    async with aiohttp.ClientSession(
        url, connector=connector, timeout=timeout, auto_decompress=False
    ) as session:
        clock = time.perf_counter
        start = clock()
        give_up = start + duration + request_timeout

        async def worker() -> None:
            for index, offset in due:
                intended = start + offset
                now = clock()
                if now > give_up:
                    result.unsent += 1
                    continue
                if intended - now > TIMER_SLACK:
                    await asyncio.sleep(intended - now - TIMER_SLACK)
                    now = clock()
                result.record_lag(now - intended)
                method, path, body = workload.request(index, rng)
                try:
                    async with session.request(method, path, data=body) as response:
                        await response.read()
                except TimeoutError:
                    result.timeouts += 1
                    continue
                except aiohttp.ClientError:
                    result.connection_errors += 1
                    continue
                result.record(response.status, clock() - min(intended, now))

        await asyncio.gather(*(worker() for _ in range(connections)))
        result.elapsed = clock() - start
    return result


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python bench/constant_rate.py",
        description="Send requests at a fixed rate and print latency percentiles measured "
        "from each request's intended send time.",
    )
    parser.add_argument(
        "--url", required=True, help="a node on loopback, e.g. http://127.0.0.1:8080"
    )
    parser.add_argument("--rate", type=float, required=True, help="requests per second")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds (default 30)")
    parser.add_argument("--connections", type=int, default=64, help="(default 64)")
    parser.add_argument("--workload", choices=WORKLOADS, default="put", help="(default put)")
    parser.add_argument("--replicas", help="ack/from of every request (default: the node's)")
    parser.add_argument("--keys", type=int, default=10_000, help="filled key space (10000)")
    parser.add_argument("--value-bytes", type=int, default=100, help="(default 100)")
    parser.add_argument("--timeout", type=float, default=2.0, help="per request, s (default 2)")
    parser.add_argument("--skip-prefill", action="store_true", help="keys are already there")
    parser.add_argument("--seed", type=int, default=1, help="of the key choice (default 1)")
    args = parser.parse_args(argv)
    try:
        loopback_address(args.url)
        args.replicas = check_replicas(args.replicas)
    except ValueError as error:
        parser.error(str(error))
    if args.connections < 1 or args.keys < 1 or args.value_bytes < 0 or args.timeout <= 0:
        parser.error("--connections and --keys must be >= 1, --timeout > 0")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_arguments(argv)
    url = args.url.rstrip("/")
    value = b"v" * args.value_bytes
    # A put run writes keys of its own, so repeated runs never overwrite each other.
    prefix = run_prefix("put") if args.workload == "put" else KEY_PREFIX
    workload = Workload(args.workload, args.keys, value, args.replicas, prefix)
    if workload.reads_filled_keys and not args.skip_prefill:
        seconds = prefill(url, args.keys, value, args.replicas)
        print(f"prefill: {args.keys} keys in {seconds:.1f}s")
    print(
        f"Running {args.duration:g}s test @ {url}: {args.workload} at {args.rate:,.0f}/s, "
        f"{args.connections} connections, replicas {args.replicas or 'default'}",
        flush=True,
    )
    result = uvloop.run(
        run(url, args.rate, args.duration, workload, args.connections, args.timeout, args.seed)
    )
    print(percentile_table(result))


if __name__ == "__main__":
    main()
