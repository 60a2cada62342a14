"""Benchmark: whether the large writes a node admits are the ones it finishes.

One round of `--clients` concurrent PUTs of one `--value-mib` value each (distinct keys,
the default replicas, 2/3 on 3 nodes) to node 1 of a 3-node cluster, from one aiohttp
client. The byte budget (`--max-in-flight-bytes`) refuses some at once (503); every
admitted one should answer 201. It prints the answers with their latencies, and what
node 1's replica calls ended with (`dht_replica_calls_total`) and each node's byte budget
refused (`/v0/status`). Defaults are issue 37's burst: 64 PUTs of 16 MiB, `--timeout` 1.

    .venv/bin/python -m bench.admitted_writes
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

import aiohttp

from dht.conformance.http_client import wait_for
from dht.conformance.launcher import Cluster
from dht.metrics import CALL_OUTCOMES

MiB = 1024 * 1024


async def burst(url: str, clients: int, value: bytes, deadline: float) -> list[tuple[int, float]]:
    """(status, seconds) of each PUT; status 0: no answer within `deadline`."""
    timeout = aiohttp.ClientTimeout(total=deadline)
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:

        async def put(index: int) -> tuple[int, float]:
            started = time.monotonic()
            try:
                async with session.put(f"{url}/v0/entity?id=large-{index}", data=value) as answer:
                    await answer.read()
                    return answer.status, time.monotonic() - started
            except (aiohttp.ClientError, TimeoutError, OSError):
                return 0, time.monotonic() - started

        return await asyncio.gather(*(put(index) for index in range(clients)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--value-mib", type=int, default=16)
    parser.add_argument("--budget-mib", type=int, default=256, help="--max-in-flight-bytes")
    parser.add_argument("--node-timeout", type=float, default=1.0, help="the nodes' --timeout")
    parser.add_argument("--deadline", type=float, default=120.0, help="each PUT's client deadline")
    parser.add_argument("--logs", type=Path, help="keep the nodes' folders and logs here")
    args = parser.parse_args()
    value = bytes(range(256)) * (args.value_mib * MiB // 256)
    flags = [
        "--log-level",
        "INFO",
        "--timeout",
        str(args.node_timeout),
        "--max-in-flight-bytes",
        str(args.budget_mib * MiB),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        cluster = Cluster(args.logs or Path(tmp), 3, flags).start()
        try:
            # A small write first opens node 1's channels to its peers, as traffic before
            # a burst would have: the burst measures writes, not dialling under it.
            assert cluster[0].put("small", b"v").status == 201
            started = time.monotonic()
            answers = asyncio.run(burst(cluster[0].url, args.clients, value, args.deadline))
            seconds = time.monotonic() - started
            # The third replica's copies go on after the answers: their outcomes count too.
            wait_for(lambda: cluster[0].status()["bytes_in_flight"], lambda held: held == 0, 60)
            metrics = cluster[0].metrics()
            refused = [node.status()["byte_budget_refusals"] for node in cluster]
        finally:
            cluster.stop()
    by_status: defaultdict[int, list[float]] = defaultdict(list)
    for status, took in answers:
        by_status[status].append(took)
    print(
        f"{args.clients} concurrent PUTs of {args.value_mib} MiB to node 1 of 3 (2/3), "
        f"--max-in-flight-bytes {args.budget_mib} MiB, --timeout {args.node_timeout}: "
        f"{seconds:.1f} s"
    )
    print("| status (0 = no answer) | count | min | median | max |")
    print("| --- | --- | --- | --- | --- |")
    for status, took in sorted(by_status.items()):
        print(
            f"| {status} | {len(took)} | {min(took):.2f} s | {statistics.median(took):.2f} s "
            f"| {max(took):.2f} s |"
        )
    outcomes = Counter(
        {
            outcome: int(metrics.value("dht_replica_calls_total", outcome=outcome))
            for outcome in CALL_OUTCOMES
        }
    )
    print(f"node 1's replica calls: {dict(+outcomes)}")
    print(f"byte budget refusals by node: {refused}")


if __name__ == "__main__":
    main()
