"""The processes of a local cluster: the command line that starts a node (dht's own, with
the node flags `cluster` passes on, or another implementation's from a --node-command
template), waiting until it serves, stopping a group of them
(SIGTERM, then SIGKILL for any that linger), and the dashboard beside them
(cluster_links.py makes the Toxiproxy links).
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from dht.config import node_settings, url_port
from dht.testbed.cockpit_access import TOKEN_ENVIRONMENT
from dht.testbed.namespaces import stop_processes
from dht.testbed.node_template import node_argv

# The one logger of `python -m dht cluster`, whichever module of it speaks.
log = logging.getLogger("dht.testbed.cluster")

START_DEADLINE = 15.0
STOP_DEADLINE = 10.0
DASHBOARD_DEADLINE = 10.0


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


def template_command(template: str) -> Callable[[str, Path, list[str]], list[str]]:
    """The argv of another implementation's node `url` in a cluster of `urls` from a
    --node-command `template` (node_template.py), given its absolute data folder, which
    it makes first: dht's node makes its own, and another may expect it to exist."""

    def command(url: str, data_dir: Path, urls: list[str]) -> list[str]:
        data_dir.mkdir(parents=True, exist_ok=True)
        return node_argv(template, url_port(url), data_dir.resolve(), urls, url)

    return command


def passed_settings(args: argparse.Namespace) -> list[str]:
    """The node flags given to `cluster`, as command-line arguments for each node: every
    shared setting (dht/config.py) but the ones that travel in the environment."""
    flags: list[str] = []
    for flag in node_settings():
        declared = flag.setting
        if declared.scope != "shared" or declared.environment is not None:
            continue
        value = getattr(args, flag.name)
        if declared.action == "store_true":
            flags += [flag.flag] if value else []
        elif declared.action == "store_false":
            flags += [] if value else [flag.flag]
        else:
            flags += [flag.flag, str(value)]
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
    stop_processes(processes, STOP_DEADLINE)


def dashboard_command(
    args: argparse.Namespace, urls: list[str], toxiproxy: str | None, controlled: bool
) -> list[str]:
    command = [sys.executable, "-m", "dht", "cockpit", "--port", str(args.dashboard_port)]
    command += ["--host", args.host, "--log-level", args.log_level]
    command += ["--probe-rate", str(args.probe_rate)]
    for url in urls:
        command += ["--node", url]
    if toxiproxy is not None:
        command += ["--toxiproxy", toxiproxy]
    if controlled:  # the cluster's control server is up: process faults on the page
        command += ["--cluster-dir", str(args.data_dir)]
    return command


def start_dashboard(
    args: argparse.Namespace,
    urls: list[str],
    toxiproxy: str | None,
    controlled: bool,
    token: str,
) -> subprocess.Popen[bytes] | None:
    """Starts the cockpit, which acts only for whoever holds `token`, and waits until it
    answers; None, with the reason logged, if it does not. The dashboard is a
    convenience: a taken port must not stop the cluster. The token travels in the
    environment: argv is in the process list, for every user of the machine to read."""
    url = f"http://{args.host}:{args.dashboard_port}"
    process = subprocess.Popen(
        dashboard_command(args, urls, toxiproxy, controlled),
        env=os.environ | {TOKEN_ENVIRONMENT: token},
    )
    ready = urllib.request.Request(
        url + "/cockpit.json", headers={"Authorization": f"Bearer {token}"}
    )
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
                with urllib.request.urlopen(ready, timeout=0.5) as response:
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
