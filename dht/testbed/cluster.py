"""`python -m dht cluster`: a local cluster of N node processes in one command.

Starts every node, waits until each answers /v0/status, prints the URLs, and on Ctrl-C or
SIGTERM stops them all (SIGTERM, then SIGKILL for any that linger): no orphans. Then it
starts the dashboard (`python -m dht cockpit`, dht/testbed/cockpit.py) as one more child, which is
stopped with the nodes; the cluster runs on without it if it cannot start.
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dht.testbed.toxiproxy import Testbed

log = logging.getLogger("dht.testbed.cluster")

START_DEADLINE = 15.0
STOP_DEADLINE = 10.0
DASHBOARD_DEADLINE = 10.0

_PASSED_FLAGS = (
    "timeout",
    "breaker_threshold",
    "breaker_cooldown",
    "vnodes",
    "max_value_bytes",
    "max_key_bytes",
    "max_in_flight",
    "max_in_flight_bytes",
    "hint_max_bytes",
    "hint_max_age",
    "hint_interval",
    "anti_entropy_interval",
    "anti_entropy_rate",
    "tombstone_grace",
    "max_clock_drift",
    "disk_reserve",
    "clock_skew",
    "log_level",
)


def node_command(
    port: int, data_dir: Path, cluster: list[str], host: str, extra: list[str]
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "dht",
        "node",
        "--port",
        str(port),
        "--host",
        host,
        "--data-dir",
        str(data_dir),
        "--cluster",
        ",".join(cluster),
        *extra,
    ]


def passed_settings(args: argparse.Namespace) -> list[str]:
    """The node flags given to `cluster`, as command-line arguments for each node."""
    flags: list[str] = []
    for name in _PASSED_FLAGS:
        flags += ["--" + name.replace("_", "-"), str(getattr(args, name))]
    if args.sync_writes:
        flags.append("--sync-writes")
    if not args.metrics:
        flags.append("--no-metrics")
    return flags


def wait_until_serving(url: str, process: subprocess.Popen[bytes], deadline: float) -> None:
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"node {url} exited with code {process.returncode}")
        try:
            with urllib.request.urlopen(url + "/v0/status", timeout=0.5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            time.sleep(0.05)
    raise RuntimeError(f"node {url} did not answer within {START_DEADLINE:.0f}s")


def stop_all(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_DEADLINE
    for process in processes:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log.warning("node pid %d ignored SIGTERM; killing it", process.pid)
            process.kill()
            process.wait()


def start_testbed(urls: list[str], data_dir: Path, dashboard_port: int) -> Testbed:
    """Toxiproxy on free ports other than the nodes' and the dashboard's, which nothing
    listens on yet."""
    from dht.testbed.toxiproxy import Testbed

    data_dir.mkdir(parents=True, exist_ok=True)
    return Testbed(urls, data_dir / "toxiproxy.log", avoid=[dashboard_port]).start()


def dashboard_command(
    args: argparse.Namespace, urls: list[str], testbed: Testbed | None
) -> list[str]:
    command = [sys.executable, "-m", "dht", "cockpit", "--port", str(args.dashboard_port)]
    command += ["--host", args.host, "--log-level", args.log_level]
    for url in urls:
        command += ["--node", url]
    if testbed is not None:
        command += ["--toxiproxy", testbed.api_url]
    return command


def start_dashboard(
    args: argparse.Namespace, urls: list[str], testbed: Testbed | None
) -> subprocess.Popen[bytes] | None:
    """Starts the cockpit and waits until it answers; None, with the reason logged, if it
    does not. The dashboard is a convenience: a taken port must not stop the cluster."""
    url = f"http://{args.host}:{args.dashboard_port}"
    process = subprocess.Popen(dashboard_command(args, urls, testbed))
    deadline = time.monotonic() + DASHBOARD_DEADLINE
    try:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                log.error(
                    "the dashboard exited with code %d; the cluster runs on without it "
                    "(--dashboard-port picks another port, 0 none)",
                    process.returncode,
                )
                return None
            try:
                with urllib.request.urlopen(url + "/cockpit.json", timeout=0.5) as response:
                    if response.status == 200:
                        return process
            except (urllib.error.URLError, OSError):
                time.sleep(0.05)
    except BaseException:  # Ctrl-C or SIGTERM while waiting: no orphan
        stop_all([process])
        raise
    log.error(
        "the dashboard did not answer on %s within %.0fs; the cluster runs on without it",
        url,
        DASHBOARD_DEADLINE,
    )
    stop_all([process])
    return None


def run_cluster(args: argparse.Namespace) -> int:
    urls = [f"http://{args.host}:{args.base_port + i}" for i in range(args.nodes)]
    extra = passed_settings(args)
    # Closed to forged replica writes out of the box: the nodes share a secret, generated
    # unless one is given. It reaches them through the environment, not argv, so other
    # users of the machine cannot read it from the process list.
    environment = os.environ | {"DHT_SECRET": args.secret or secrets.token_hex(16)}
    processes: list[subprocess.Popen[bytes]] = []
    dashboard: subprocess.Popen[bytes] | None = None
    testbed: Testbed | None = None

    def on_signal(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    # SIGINT too: Python leaves it ignored when the process starts with it ignored, as
    # a shell that is not interactive starts `python -m dht cluster &`.
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        if args.chaos:
            testbed = start_testbed(urls, args.data_dir, args.dashboard_port)
        for index in range(len(urls)):
            data_dir = args.data_dir / f"node-{index + 1}"
            routes = testbed.route_args(index) if testbed else []
            command = node_command(
                args.base_port + index, data_dir, urls, args.host, extra + routes
            )
            processes.append(subprocess.Popen(command, env=environment))
        deadline = time.monotonic() + START_DEADLINE
        for url, process in zip(urls, processes, strict=True):
            wait_until_serving(url, process, deadline)
        if args.dashboard_port:
            dashboard = start_dashboard(args, urls, testbed)
        print(f"dht cluster of {len(urls)} nodes is up; data in {args.data_dir.resolve()}")
        for url in urls:
            print(f"  {url}")
        print(f"try: curl -X PUT -d hello '{urls[0]}/v0/entity?id=greeting'")
        if testbed is not None:
            print(f"Toxiproxy API: {testbed.api_url}  (links: curl {testbed.api_url}/proxies)")
            print("  node1 dials node2 through the proxy node1-to-node2, and so on")
        if dashboard is not None:
            print(f"dashboard: http://{args.host}:{args.dashboard_port}/")
        print("Ctrl-C stops every node.", flush=True)
        while True:
            for url, process in zip(urls, processes, strict=True):
                if process.poll() is not None:
                    log.error(
                        "node %s exited with code %d; stopping the cluster", url, process.returncode
                    )
                    return 1
            if dashboard is not None and dashboard.poll() is not None:
                log.error(
                    "the dashboard exited with code %d; the cluster runs on without it",
                    dashboard.returncode,
                )
                dashboard = None
            time.sleep(0.5)
    except KeyboardInterrupt:
        log.info("stopping the cluster")
        return 0
    except (RuntimeError, FileNotFoundError) as exc:
        log.error("%s", exc)
        return 1
    finally:
        stop_all(processes + ([dashboard] if dashboard is not None else []))
        if testbed is not None:
            testbed.stop()
