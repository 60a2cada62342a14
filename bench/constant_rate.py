"""A constant-rate (open-model) load generator for the v0 API, free of coordinated omission.

Requests are sent on a fixed schedule, request i at start + i / rate, whatever the server
does; each latency is measured from the request's *intended* send time, so a stalled
server shows up as latency instead of silently slowing the load down (the wrk2 method).
Latencies go into an HdrHistogram; the report is wrk2's percentile table plus the achieved
rate, errors by status and time-outs. Run from the repo root:

    .venv/bin/python -m bench.constant_rate --url http://127.0.0.1:8080 --rate 2000 \\
        --duration 30 --workload put

Where Locust cannot hold a fixed rate on 2 cores (its users wait for answers), this tool
is the reference.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import quote

import aiohttp
from hdrh.histogram import HdrHistogram

from locustfiles.prefill import KEY_PREFIX, key_name

PERCENTILES = (50.0, 75.0, 90.0, 99.0, 99.9, 99.99, 100.0)
# Latencies are recorded in microseconds, from 1 µs to 5 minutes, 3 significant digits.
LOWEST_US, HIGHEST_US, DIGITS = 1, 300_000_000, 3
WORKLOADS = ("put", "get", "mixed", "status")


@dataclass
class Result:
    """What one run measured. Latencies are in microseconds."""

    rate: float
    duration: float
    histogram: HdrHistogram = field(
        default_factory=lambda: HdrHistogram(LOWEST_US, HIGHEST_US, DIGITS)
    )
    statuses: Counter[int] = field(default_factory=Counter)
    timeouts: int = 0
    connection_errors: int = 0
    elapsed: float = 0.0

    @property
    def sent(self) -> int:
        return sum(self.statuses.values()) + self.timeouts + self.connection_errors

    @property
    def achieved_rate(self) -> float:
        return self.sent / self.elapsed if self.elapsed else 0.0

    @property
    def errors(self) -> int:
        """Answers that are not success: 4xx other than 404 on reads, 5xx, time-outs."""
        failed = sum(n for status, n in self.statuses.items() if status >= 500)
        return failed + self.timeouts + self.connection_errors

    def percentile_ms(self, percentile: float) -> float:
        return float(self.histogram.get_value_at_percentile(percentile)) / 1000.0


def send_offsets(rate: float, duration: float) -> Iterator[float]:
    """Seconds from the start at which each request is due: i / rate, for the duration."""
    if rate <= 0 or duration <= 0:
        raise ValueError("rate and duration must be positive")
    for index in itertools.count():
        offset = index / rate
        if offset >= duration:
            return
        yield offset


def percentile_table(result: Result) -> str:
    """wrk2's latency distribution table, then the counts."""
    lines = ["  Latency Distribution (HdrHistogram - Recorded Latency)"]
    for percentile in PERCENTILES:
        lines.append(f"{percentile:7.3f}%  {format_ms(result.percentile_ms(percentile))}")
    statuses = ", ".join(f"{code}: {n}" for code, n in sorted(result.statuses.items()))
    lines += [
        f"  {result.sent} requests in {result.elapsed:.2f}s: target {result.rate:,.0f}/s, "
        f"achieved {result.achieved_rate:,.0f}/s",
        f"  answers by status: {statuses or 'none'}",
        f"  time-outs: {result.timeouts}, connection errors: {result.connection_errors}",
    ]
    return "\n".join(lines)


def format_ms(milliseconds: float) -> str:
    if milliseconds >= 1000:
        return f"{milliseconds / 1000:8.2f}s"
    return f"{milliseconds:8.2f}ms"


@dataclass(frozen=True)
class Workload:
    """Which requests to send: `put` writes key i of the run, `get` reads a random key of
    `keys` (bench.prefill wrote them), `mixed` does both half the time."""

    kind: str
    keys: int = 10_000
    value: bytes = b"v" * 100
    replicas: str | None = None
    prefix: str = KEY_PREFIX

    def request(self, index: int, rng: random.Random) -> tuple[str, str, bytes | None]:
        """(method, path with query, body) of request number `index`."""
        suffix = f"&replicas={self.replicas}" if self.replicas else ""
        if self.kind == "status":
            return "GET", "/v0/status", None
        if self.kind == "put" or (self.kind == "mixed" and rng.random() < 0.5):
            return "PUT", f"/v0/entity?id={quote(self.key(index))}{suffix}", self.value
        return "GET", f"/v0/entity?id={quote(self.key(rng.randrange(self.keys)))}{suffix}", None

    def key(self, index: int) -> str:
        return key_name(index, self.prefix)


async def run(
    url: str,
    rate: float,
    duration: float,
    workload: Workload,
    connections: int = 64,
    request_timeout: float = 2.0,
    seed: int = 1,
) -> Result:
    """Sends `rate` requests a second for `duration` seconds and measures them."""
    result = Result(rate, duration)
    rng = random.Random(seed)
    slots = asyncio.Semaphore(connections)
    connector = aiohttp.TCPConnector(limit=connections)
    client_timeout = aiohttp.ClientTimeout(total=request_timeout)
    async with aiohttp.ClientSession(url, connector=connector, timeout=client_timeout) as session:

        async def one(intended: float, method: str, path: str, body: bytes | None) -> None:
            async with slots:
                try:
                    async with session.request(method, path, data=body) as response:
                        await response.read()
                        status = response.status
                except TimeoutError:
                    result.timeouts += 1
                    return
                except aiohttp.ClientError:
                    result.connection_errors += 1
                    return
            latency_us = (time.perf_counter() - intended) * 1_000_000
            result.histogram.record_value(max(LOWEST_US, min(int(latency_us), HIGHEST_US)))
            result.statuses[status] += 1

        tasks: set[asyncio.Task[None]] = set()
        start = time.perf_counter()
        for index, offset in enumerate(send_offsets(rate, duration)):
            intended = start + offset
            delay = intended - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(one(intended, *workload.request(index, rng)))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.wait(tasks)
        result.elapsed = time.perf_counter() - start
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.constant_rate",
        description="Send requests at a fixed rate and print latency percentiles measured "
        "from each request's intended send time.",
    )
    parser.add_argument("--url", required=True, help="a node, e.g. http://127.0.0.1:8080")
    parser.add_argument("--rate", type=float, required=True, help="requests per second")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds (default 30)")
    parser.add_argument("--connections", type=int, default=64, help="(default 64)")
    parser.add_argument("--workload", choices=WORKLOADS, default="put", help="(default put)")
    parser.add_argument("--replicas", help="ack/from for every request (default: the node's)")
    parser.add_argument(
        "--keys", type=int, default=10_000, help="key space of get/mixed (default 10000)"
    )
    parser.add_argument("--timeout", type=float, default=2.0, help="per request (default 2)")
    args = parser.parse_args()
    workload = Workload(args.workload, args.keys, replicas=args.replicas)
    import uvloop

    result = uvloop.run(
        run(args.url, args.rate, args.duration, workload, args.connections, args.timeout)
    )
    print(percentile_table(result))


if __name__ == "__main__":
    main()
