"""`python -m dht cluster`: a local cluster of N node processes in one command.

Starts every node, waits until each answers /v0/status, prints the URLs, and on Ctrl-C or
SIGTERM stops them all (SIGTERM, then SIGKILL for any that linger): no orphans. Then it
starts the dashboard (`python -m dht cockpit`, dht/testbed/cockpit.py) as one more child, which is
stopped with the nodes; the cluster runs on without it if it cannot start.

While it runs, `python -m dht cluster add` and `python -m dht cluster remove URL` change
its membership. The running command writes `<data-dir>/cluster.json` (its pid, host, node
URLs, and the port and token of a control server on 127.0.0.1), and the control server,
in threads of its own, does the work: starts the new node with `--join` or stops the
removed one, and drives the change (dht/membership/driver.py) in between, streaming
each step back to the command that asked. The nodes and their processes are shared by the
main loop, which watches them, and those threads: `LocalCluster` keeps them under a lock.

With --node-command the nodes are another implementation's, started from a template
(node_template.py) with none of dht's node flags; `restart` runs the same command on the
same data folder, `add` and `remove` are refused (membership changes are dht's own API),
and link faults need the namespaces of --netns, since such a node cannot be told of them.

This module is the command; node_processes.py starts and stops the processes,
local_cluster.py holds the nodes and changes them, cluster_control.py serves the changes.
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import signal
import subprocess
import time
from types import FrameType
from typing import TYPE_CHECKING

from dht.testbed.certificates import LocalCA
from dht.testbed.cluster_control import CONTROL_FILE
from dht.testbed.cockpit_access import new_token, page_url
from dht.testbed.local_cluster import LocalCluster
from dht.testbed.node_processes import (
    START_DEADLINE,
    passed_settings,
    start_dashboard,
    stop_all,
    template_command,
    wait_until_serving,
)

if TYPE_CHECKING:
    from dht.testbed.cluster_links import ClusterLinks

# The one logger of `python -m dht cluster`, whichever module of it speaks.
log = logging.getLogger("dht.testbed.cluster")


def signal_name(code: int) -> str:
    """ " (SIGKILL)" for an exit code of -9; "" for an exit, or a signal with no name."""
    try:
        return f" ({signal.Signals(-code).name})" if code < 0 else ""
    except ValueError:  # a real-time signal (SIGRTMIN+N)
        return ""


def run_cluster(args: argparse.Namespace) -> int:
    urls = [f"http://{args.host}:{args.base_port + i}" for i in range(args.nodes)]
    extra = passed_settings(args)
    # Closed to forged replica writes out of the box: the nodes share a secret, generated
    # unless one is given. It reaches them through the environment, not argv, so other
    # users of the machine cannot read it from the process list.
    environment = os.environ | {"DHT_SECRET": args.secret or secrets.token_hex(16)}
    cluster = LocalCluster(args.host, args.data_dir, extra, environment, chaos=args.chaos)
    if args.tls:
        cluster.authority = LocalCA(args.data_dir / "tls")
    if args.node_command is not None:
        cluster.command_for = template_command(args.node_command)
        cluster.skews = None
        cluster.fixed_membership = (
            "a --node-command cluster cannot add or remove nodes: membership changes are "
            "dht's own API (python -m dht membership), not the v0 API its nodes serve"
        )
    dashboard: subprocess.Popen[bytes] | None = None
    links: ClusterLinks | None = None

    def on_signal(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    # SIGINT too: Python leaves it ignored when the process starts with it ignored, as
    # a shell that is not interactive starts `python -m dht cluster &`.
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        if args.chaos:
            from dht.testbed.cluster_links import start_links

            ports = [args.base_port + index for index in range(len(urls))]
            links = start_links(urls, ports, args.data_dir, args.dashboard_port, args.netns)
            cluster.toxiproxy = links.api_url
        if links is not None:
            in_links = links
            cluster.launch = lambda url, command: in_links.start_node(
                urls.index(url), command, environment
            )
        processes = []
        for index in range(len(urls)):
            data_dir = args.data_dir / f"node-{index + 1}"
            command = cluster.command_for(urls[index], data_dir, urls)
            process = cluster.launch(urls[index], command)
            cluster.supervise(urls[index], process, data_dir)
            processes.append(process)
        deadline = time.monotonic() + START_DEADLINE
        for url, process in zip(urls, processes, strict=True):
            wait_until_serving(url, process, deadline)
        cluster.serve_control()  # first: the dashboard asks it for process faults
        if args.dashboard_port:
            # The cockpit acts for whoever holds this token: the one who opens the URL
            # printed below, which cluster.json (this user's only) keeps as well.
            token = new_token()
            dashboard = start_dashboard(
                args, urls, links.api_url if links else None, cluster.control is not None, token
            )
            if dashboard is not None:
                cluster.note_cockpit(page_url(args.host, args.dashboard_port, token))
        if args.node_command is None:
            print(f"dht cluster of {len(urls)} nodes is up; data in {args.data_dir.resolve()}")
        else:
            print(f"cluster of {len(urls)} nodes is up; data in {args.data_dir.resolve()}")
            print(f"each node runs: {args.node_command}")
        for url in urls:
            print(f"  {url}")
        print(f"try: curl -X PUT -d hello '{urls[0]}/v0/entity?id=greeting'")
        if links is not None:
            print(f"Toxiproxy API: {links.api_url}  (links: curl {links.api_url}/proxies)")
            print(f"  {links.description}")
        elif cluster.control is not None and args.node_command is None:
            print(
                f"python -m dht cluster add --data-dir {args.data_dir} adds a node, "
                "... remove URL removes one"
            )
        if dashboard is not None:
            print(f"dashboard: {cluster.cockpit}")
            if cluster.control is not None:
                print(f"  (its token, for you only, is also in {args.data_dir / CONTROL_FILE})")
        print("Ctrl-C stops every node.", flush=True)
        while True:
            cluster.start_waiting()
            while (exited := cluster.exited()) is not None:
                url, code = exited
                log.error(
                    "node %s exited with code %d%s; the other nodes serve on. "
                    "`python -m dht cluster restart %s --data-dir %s` starts it again on its data",
                    url,
                    code,
                    signal_name(code),
                    url,
                    args.data_dir,
                )
            if dashboard is not None and dashboard.poll() is not None:
                log.error(
                    "the dashboard exited with code %d; the cluster runs on without it",
                    dashboard.returncode,
                )
                dashboard = None
            time.sleep(0.2)
    except KeyboardInterrupt:
        log.info("stopping the cluster")
        return 0
    except (RuntimeError, OSError) as exc:  # a node that cannot start or run at all
        log.error("%s", exc)
        return 1
    finally:
        stop_all(cluster.close() + ([dashboard] if dashboard is not None else []))
        if links is not None:
            links.stop()
