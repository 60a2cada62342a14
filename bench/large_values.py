"""Benchmark: a burst of large values against one node of a 3-node cluster.

`--clients` curl processes each PUT one `--value-mib` value at once (distinct keys, replicas
2/3) to node 1, while one thread GETs a small key in a loop and another asks
`/v0/status` every 100 ms. It prints node 1's resident memory (before, peak during the
burst, and `--settle` seconds after it), the PUTs' answers, the small GETs' p50/p99, and
the slowest `/v0/status`. Defaults are the hardening issue's burst: 64 PUTs of 16 MiB.

    .venv/bin/python -m bench.large_values
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from dht.conformance.http_client import request
from dht.conformance.launcher import Cluster, Node

MiB = 1024 * 1024


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


class Sampler(threading.Thread):
    """Samples every 50 ms until stopped: node RSS, a small GET's latency, /v0/status."""

    def __init__(self, node: Node) -> None:
        super().__init__(daemon=True)
        assert node.process is not None
        self._node = node
        self._pid = node.process.pid
        self.stopping = threading.Event()
        self.peak = 0.0
        self.small_gets: list[float] = []
        self.small_get_errors: Counter[int] = Counter()
        self.status_slowest = 0.0

    def run(self) -> None:
        last_status = 0.0
        while not self.stopping.wait(0.05):
            self.peak = max(self.peak, rss_mib(self._pid))
            started = time.monotonic()
            try:
                answer = self._node.get("small", "1/3")
                if answer.status == 200:
                    self.small_gets.append(time.monotonic() - started)
                else:
                    self.small_get_errors[answer.status] += 1
            except OSError:
                self.small_get_errors[0] += 1
            if time.monotonic() - last_status >= 0.1:
                last_status = time.monotonic()
                try:
                    request("GET", self._node.url + "/v0/status", timeout=5.0)
                    self.status_slowest = max(self.status_slowest, time.monotonic() - last_status)
                except OSError:
                    self.status_slowest = float("inf")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--value-mib", type=int, default=16)
    parser.add_argument("--settle", type=float, default=15.0)
    parser.add_argument("--timeout", type=float, default=60.0, help="each PUT's client timeout")
    args = parser.parse_args()
    value = bytes(range(256)) * (args.value_mib * MiB // 256)
    with tempfile.TemporaryDirectory() as tmp:
        cluster = Cluster(Path(tmp), 3, ["--log-level", "INFO"]).start()
        try:
            node = cluster[0]
            assert node.process is not None
            assert node.put("small", b"v", "3/3").status == 201
            before = rss_mib(node.process.pid)
            sampler = Sampler(node)
            sampler.start()

            body = Path(tmp) / "value"
            body.write_bytes(value)
            started = time.monotonic()
            # curl processes, not threads of this one: the burst must not starve the
            # sampler of this process's GIL and show the generator's stalls as the node's.
            curls = [
                subprocess.Popen(
                    [
                        "curl",
                        "-s",
                        "-o",
                        "/dev/null",
                        "-w",
                        "%{http_code}",
                        "-X",
                        "PUT",
                        "--max-time",
                        str(args.timeout),
                        "--data-binary",
                        f"@{body}",
                        f"{node.url}/v0/entity?id=big-{index}&replicas=2/3",
                    ],
                    stdout=subprocess.PIPE,
                    text=True,
                )
                for index in range(args.clients)
            ]
            answers = Counter(int(curl.communicate()[0] or 0) for curl in curls)
            burst = time.monotonic() - started
            sampler.stopping.set()
            sampler.join()
            time.sleep(args.settle)
            after = rss_mib(node.process.pid)
        finally:
            cluster.stop()
    gets = sorted(sampler.small_gets)
    p99 = gets[min(len(gets) - 1, int(len(gets) * 0.99))] if gets else float("nan")
    print(f"{args.clients} concurrent PUTs of {args.value_mib} MiB to node 1 of 3 (2/3):")
    print("| figure | value |")
    print("| --- | --- |")
    print(f"| burst duration | {burst:.1f} s |")
    print(f"| answers (0 = no answer) | {dict(sorted(answers.items()))} |")
    print(f"| node 1 RSS before | {before:.0f} MiB |")
    print(f"| peak RSS growth | {sampler.peak - before:.0f} MiB |")
    print(f"| RSS growth {args.settle:.0f} s after | {after - before:.0f} MiB |")
    if gets:
        p50 = statistics.median(gets) * 1000
        print(f"| small GET p50 / p99 during the burst | {p50:.1f} / {p99 * 1000:.1f} ms |")
        print(f"| small GETs during the burst | {len(gets)} |")
    print(f"| small GET errors | {dict(sampler.small_get_errors)} |")
    print(f"| slowest /v0/status | {sampler.status_slowest * 1000:.0f} ms |")


if __name__ == "__main__":
    main()
