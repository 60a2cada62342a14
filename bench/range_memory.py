"""Benchmark: a node's memory while it streams a range over many keys.

Fills a fresh data dir with N records straight through dht.storage.store (fast, no HTTP), starts
a real node on it, streams GET /v0/entities over all of it while sampling the node's RSS,
and prints RSS before, peak during, and the growth. Run:

    .venv/bin/python -m bench.range_memory --keys 1000000
"""

from __future__ import annotations

import argparse
import http.client
import sys
import tempfile
import threading
import time
from pathlib import Path

from dht.conformance.http_client import free_port
from dht.conformance.launcher import Node
from dht.model.clock import HybridClock
from dht.model.record import Record
from dht.storage.store import Storage


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    """Resident memory of a process: VmRSS in all; RssAnon is the heap and stacks (what a
    leak or a buffered range would grow), RssFile the mapped LevelDB tables and code."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field}")


def fill(data_dir: Path, keys: int, value_bytes: int) -> None:
    storage = Storage(data_dir)
    clock = HybridClock()
    value = b"x" * value_bytes
    for i in range(keys):
        storage.write(f"key{i:08d}".encode(), Record.live(clock.now(), value))
    storage.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--value-bytes", type=int, default=32)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        node = Node(port, Path(tmp) / "node", url, [url], ["--log-level", "WARNING"])
        started = time.monotonic()
        fill(node.data_dir, args.keys, args.value_bytes)
        print(f"filled {args.keys} keys in {time.monotonic() - started:.1f}s")
        node.start()
        assert node.process is not None
        pid = node.process.pid
        fields = ("VmRSS", "RssAnon", "RssFile")
        before = {field: rss_kib(pid, field) for field in fields}
        peak = dict(before)
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                for field in fields:
                    peak[field] = max(peak[field], rss_kib(pid, field))
                time.sleep(0.05)

        sampler = threading.Thread(target=sample)
        sampler.start()
        started = time.monotonic()
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        connection.request("GET", "/v0/entities?start=key")
        response = connection.getresponse()
        received = 0
        while chunk := response.read(1 << 16):
            received += len(chunk)
        elapsed = time.monotonic() - started
        done.set()
        sampler.join()
        node.stop()
        expected = args.keys * (len("key00000000\n") + args.value_bytes)
        print(
            f"streamed {received} bytes ({'complete' if received == expected else 'SHORT'})"
            f" in {elapsed:.1f}s, {args.keys / elapsed:,.0f} records/s"
        )
        for field in fields:
            print(
                f"node {field}: before {before[field] / 1024:.1f} MiB, "
                f"peak {peak[field] / 1024:.1f} MiB, "
                f"growth {(peak[field] - before[field]) / 1024:.1f} MiB"
            )
        sys.exit(0 if received == expected else 1)


if __name__ == "__main__":
    main()
