"""How long a cluster is a copy short after losing a node for good (issue 28's figures).

Four real node processes on loopback; `--keys` records (default 100,000) written at
`replicas=2/3`, so a key has three copies and the keys of a dead node lack one. Then:

1. a foreground load of `--rate` requests a second (GETs and PUTs at the default
   quorum, through the survivors) runs for `--baseline` seconds: the p99 without any
   change;
2. one node is killed with SIGKILL and removed with `membership --dead`, the load still
   running: the seconds until every key has its third copy again (the change's handoff
   step and its end), the records streamed per key that lacked a copy (target <= 1.05),
   and the p99 of the load during the streaming.

The load generator is a Python thread pool at a few hundred requests a second, far
below what one node answers (see `bench.throughput`): the p99 is the cluster's.

    .venv/bin/python -m bench.dead_removal [--keys 100000] [--rate 200]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import threading
import time
from pathlib import Path

import aiohttp

from dht.config import NodeConfig
from dht.conformance.http_client import request
from dht.conformance.launcher import Cluster, Node
from dht.membership.driver import change_membership
from dht.model.ring import Ring


async def preload(node: Node, keys: int, concurrency: int = 64) -> float:
    """Writes `keys` records at 2/3 through `node`; returns the seconds it took."""
    began = time.monotonic()
    queue: asyncio.Queue[int] = asyncio.Queue()
    for index in range(keys):
        queue.put_nowait(index)
    async with aiohttp.ClientSession() as session:

        async def worker() -> None:
            while not queue.empty():
                index = queue.get_nowait()
                url = f"{node.url}/v0/entity?id=bench-{index:07d}&replicas=2/3"
                async with session.put(url, data=b"v" * 100) as answer:
                    if answer.status != 201:
                        raise RuntimeError(f"preload PUT answered {answer.status}")

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.monotonic() - began


class Load:
    """GETs and PUTs at `rate` a second through `nodes`, each latency kept with its time."""

    def __init__(self, nodes: list[Node], rate: float) -> None:
        self.nodes, self.rate = nodes, rate
        self.samples: list[tuple[float, float, int]] = []  # (started, seconds, status)
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,)) for i in range(8)]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def _run(self, index: int) -> None:
        interval = len(self._threads) / self.rate
        count = 0
        while not self._stop.is_set():
            node = self.nodes[count % len(self.nodes)]
            key = f"load-{index}-{count % 50}"
            started = time.monotonic()
            try:
                if count % 2:
                    answer = request("GET", f"{node.url}/v0/entity?id={key}", timeout=5.0)
                else:
                    answer = request("PUT", f"{node.url}/v0/entity?id={key}", b"x", timeout=5.0)
                status = answer.status
            except OSError:
                status = 0
            self.samples.append((started, time.monotonic() - started, status))
            count += 1
            self._stop.wait(max(0.0, interval - (time.monotonic() - started)))

    def p99_ms(self, since: float, until: float) -> tuple[float, int, int]:
        """p99 in ms of the requests begun in [since, until], how many, how many failed."""
        inside = [(s, status) for at, s, status in self.samples if since <= at <= until]
        if len(inside) < 2:
            return float("nan"), len(inside), 0
        p99 = statistics.quantiles([s for s, _ in inside], n=100)[98] * 1000
        return p99, len(inside), sum(status not in (200, 201, 404) for _, status in inside)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.dead_removal", description=__doc__)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--baseline", type=float, default=10.0)
    parser.add_argument("--handoff-rate", type=int, default=NodeConfig.handoff_rate)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-dead-") as folder:
        cluster = Cluster(Path(folder), 4, ["--handoff-rate", str(args.handoff_rate)])
        cluster.start()
        try:
            run(cluster, args)
        finally:
            cluster.stop()


def run(cluster: Cluster, args: argparse.Namespace) -> None:
    dead, survivors = cluster.nodes[0], cluster.nodes[1:]
    seconds = asyncio.run(preload(survivors[0], args.keys))
    print(f"preloaded {args.keys:,} keys at 2/3 on 4 nodes in {seconds:.1f} s")
    ring = Ring(cluster.urls, NodeConfig.vnodes)
    lacking = sum(
        dead.url in ring.replicas_for(f"bench-{i:07d}".encode(), 3) for i in range(args.keys)
    )
    with Load(survivors, args.rate) as load:
        began = time.monotonic()
        time.sleep(args.baseline)
        baseline_end = time.monotonic()
        dead.kill()
        killed = time.monotonic()
        report = asyncio.run(
            change_membership(
                [node.url for node in survivors],
                [node.url for node in survivors],
                dead=[dead.url],
            )
        )
        done = time.monotonic()
        time.sleep(1.0)
    sent = sum(report.sent.values())
    handoff = report.step_seconds.get("handoff", 0.0)
    handoff_began = done - report.step_seconds.get("stable", 0.0) - handoff
    base_p99, base_n, base_failed = load.p99_ms(began, baseline_end)
    moving_p99, moving_n, moving_failed = load.p99_ms(handoff_began, handoff_began + handoff)
    print(
        f"\n| figure | value |\n| --- | --- |\n"
        f"| keys that lacked a copy (had one on the dead node) | {lacking:,} |\n"
        f"| records streamed | {sent:,} |\n"
        f"| records streamed per key that lacked a copy | {sent / lacking:.3f} |\n"
        f"| seconds from the kill to every key's third copy (change over) | "
        f"{done - killed:.1f} |\n"
        f"| of which the handoff step | {handoff:.1f} ({sent / handoff:,.0f} records/s) |\n"
        f"| foreground p99 without a change, ms | {base_p99:.1f} ({base_n} requests, "
        f"{base_failed} failed) |\n"
        f"| foreground p99 during the streaming, ms | {moving_p99:.1f} ({moving_n} requests, "
        f"{moving_failed} failed) |"
    )


if __name__ == "__main__":
    main()
