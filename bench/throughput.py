"""Benchmark: requests/s for PUT and GET on one node and on a 3-node cluster, one run.

Runs wrk (64 connections, 2 threads) against each topology with default replicas:
PUT of unique 100-byte values, then GET uniform over the keys just written. Needs `wrk`
(Debian package wrk). Run from the repo root:

    .venv/bin/python -m bench.throughput --seconds 10
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.launcher import Cluster

SCRIPTS = Path(__file__).resolve().parent


def wrk(
    url: str, script: str, seconds: int, connections: int, *args: str
) -> tuple[float, str, int]:
    """Runs wrk and returns (requests/s, p99 latency as wrk prints it, requests sent)."""
    output = subprocess.run(
        [
            "wrk",
            "-t2",
            f"-c{connections}",
            f"-d{seconds}s",
            "--latency",
            "-s",
            str(SCRIPTS / script),
            url,
            "--",
            *args,
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))  # type: ignore[union-attr]
    p99 = re.search(r"99%\s+(\S+)", output).group(1)  # type: ignore[union-attr]
    sent = int(re.search(r"(\d+) requests in", output).group(1))  # type: ignore[union-attr]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    if errors and int(errors.group(1)) > rate * seconds * 0.001:
        print(f"warning: {errors.group(1)} non-2xx answers in {script}", file=sys.stderr)
    return rate, p99, sent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=64)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk not found: apt-get install wrk")
    rows = []
    for size in (1, 3):
        with tempfile.TemporaryDirectory() as tmp:
            cluster = Cluster(Path(tmp), size, ["--log-level", "WARNING"]).start()
            try:
                url = cluster[0].url
                put = wrk(url, "wrk_put.lua", args.seconds, args.connections)
                # Each of wrk's two threads wrote about half the keys, numbered from 2.
                written_per_thread = max(1, put[2] // 2 - args.connections)
                get = wrk(
                    url, "wrk_get.lua", args.seconds, args.connections, str(written_per_thread)
                )
            finally:
                cluster.stop()
        replicas = "1/1" if size == 1 else "2/3 (default)"
        rows.append((f"{size} node{'s' if size > 1 else ''}", replicas, put, get))
    print("| topology | replicas | PUT req/s | PUT p99 | GET req/s | GET p99 |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, replicas, (put_rate, put_p99, _), (get_rate, get_p99, _) in rows:
        print(
            f"| {name} | {replicas} | {put_rate:,.0f} | {put_p99} | {get_rate:,.0f} | {get_p99} |"
        )


if __name__ == "__main__":
    main()
