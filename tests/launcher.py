"""What the repository's own tests add to the kit's launcher (dht/conformance/launcher.py):
running a module of the repository, stopping a `cluster` command, and a cluster behind
Toxiproxy."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from dht.conformance.launcher import Cluster
from dht.testbed.toxiproxy import Testbed, free_ports, ports_needed

REPO = Path(__file__).resolve().parents[1]


def run_module(module: str, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """`python -m MODULE ARGS` from the repository's root, its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def interrupt(process: subprocess.Popen[bytes]) -> bytes:
    """Ctrl-C (SIGINT) to a `python -m dht cluster` started in a session of its own, and
    all it printed; past 20 s the command and every node it started are killed and the
    test fails."""
    process.send_signal(signal.SIGINT)
    try:
        output, _ = process.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        raise
    return output


def chaos_cluster(
    root: Path, size: int, extra_args: list[str] | None = None
) -> tuple[Cluster, Testbed]:
    """A cluster (not started yet) whose every node-to-node link crosses a Toxiproxy
    proxy, and its started test bed. Stop both when done."""
    root.mkdir(parents=True, exist_ok=True)
    # One draw for every port, so a proxy cannot take a node's port or another's.
    ports = free_ports(size + ports_needed(size))
    cluster = Cluster(root, size, extra_args, ports[:size])
    testbed = Testbed(cluster.urls, root / "toxiproxy.log", ports[size:]).start()
    for index, node in enumerate(cluster):
        node.extra_args += testbed.route_args(index)
    return cluster, testbed
