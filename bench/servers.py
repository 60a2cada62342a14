"""The servers a benchmark loads: the reference servers (`bench.bare_server`) and fresh
dht clusters, each started on free loopback ports and stopped at the end, optionally
pinned to one core."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.pinning import check_pinned, pin
from bench.throughput_report import BARE, RAW


@dataclass(frozen=True)
class Server:
    """Where one row's load goes: a URL, the replicas sent with each request, and the
    processes that serve it (whose CPU time each run counts)."""

    name: str
    url: str
    pids: tuple[int, ...]
    replicas: str | None = None


@contextlib.contextmanager
def bare_server(core: int | None, kind: str = "aiohttp") -> Iterator[Server]:
    """A reference server (`bench.bare_server`: bare aiohttp, or with `kind` "raw" a
    uvloop Protocol), started under `taskset -c core` when given one."""
    from dht.conformance.http_client import free_port, request, wait_for

    port = free_port()
    command = [sys.executable, "-m", "bench.bare_server", "--port", str(port), "--kind", kind]
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
        yield Server(RAW if kind == "raw" else BARE, url, (process.pid,))
    finally:
        process.terminate()
        process.wait()


@contextlib.contextmanager
def dht_cluster(
    nodes: int, core: int | None, extra: tuple[str, ...] = ()
) -> Iterator[tuple[str, tuple[int, ...]]]:
    """A fresh cluster on a temporary folder; yields the first node's URL and every
    node's process id. With `core`, every node is pinned to it once it answers."""
    from dht.conformance.launcher import Cluster

    with tempfile.TemporaryDirectory() as tmp:
        cluster = Cluster(Path(tmp), nodes, ["--log-level", "WARNING", *extra]).start()
        try:
            for node in cluster:
                if core is not None:
                    assert node.process is not None
                    pin(node.process.pid, core)
            yield cluster[0].url, tuple(node.process.pid for node in cluster if node.process)
        finally:
            cluster.stop()
