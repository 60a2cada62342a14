"""bench.scenarios' scenarios: the five set-ups measured (a bare aiohttp server as the
reference, one node, 3 nodes at 1/1 and at 2/3, 2/3 with one node cut off behind
Toxiproxy), the workloads run on each, and starting what a scenario needs."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from dht.conformance.http_client import free_port, request, wait_for
from dht.conformance.launcher import Cluster
from tests.launcher import chaos_cluster

PREFILL_KEYS = 10_000
WORKLOADS = ("put", "get")
REQUEST_TIMEOUT = 2.0


@dataclass(frozen=True)
class Scenario:
    name: str
    nodes: int  # 0: the bare reference server
    replicas: str | None = None
    node_down: bool = False


SCENARIOS = (
    Scenario("bare aiohttp (reference)", 0),
    Scenario("1 node", 1),
    Scenario("3 nodes, 1/1", 3, "1/1"),
    Scenario("3 nodes, 2/3", 3),
    Scenario("3 nodes, 2/3, one node down", 3, node_down=True),
)


@contextlib.contextmanager
def topology(scenario: Scenario, root: Path) -> Iterator[str]:
    """Starts what a scenario needs and yields the URL the load goes to."""
    if scenario.nodes == 0:
        port = free_port()
        server = subprocess.Popen([sys.executable, "-m", "bench.bare_server", "--port", str(port)])
        url = f"http://127.0.0.1:{port}"
        try:
            wait_for(lambda: _answers(url), bool, deadline=10)
            yield url
        finally:
            server.terminate()
            server.wait()
        return
    settings = ["--log-level", "WARNING"]
    if scenario.node_down:
        cluster, testbed = chaos_cluster(root, scenario.nodes, settings)
        try:
            cluster.start()
            testbed.cut(testbed.links_into(scenario.nodes - 1))
            yield cluster[0].url
        finally:
            cluster.stop()
            testbed.stop()
        return
    cluster = Cluster(root, scenario.nodes, settings).start()
    try:
        yield cluster[0].url
    finally:
        cluster.stop()


def _answers(url: str) -> bool:
    try:
        return request("GET", url + "/v0/status", timeout=1).status == 200
    except OSError:
        return False
