"""The namespace test bed: a Toxiproxy proxy on every directed link between nodes that
know nothing of proxies.

`Testbed` (toxiproxy.py) needs the node's help: dht is told (`--route`) to dial its
peers through the links. Other implementations of the same API only take a topology of
`http://127.0.0.1:PORT` or `http://localhost:PORT` URLs, and find themselves in it by
their port. Here each node runs in a network namespace of its own (namespaces.py), where
the peers' URLs lead into Toxiproxy:

    node i's namespace (eth0 = PREFIX.(i+2)/24 on a bridge in a hub namespace)
      127.0.0.1:PORT_j   -> proxy `nodei-to-nodej`, the link i -> j, for each j != i;
                            its upstream is node j's ingress
      PREFIX.(i+2):INGRESS -> proxy `nodei-ingress` (never faulted) -> localhost:PORT_i,
                            so a node bound to 127.0.0.1, localhost or 0.0.0.0 is
                            reachable from the other namespaces
      PREFIX.(i+2):API   the API of this namespace's toxiproxy-server
    the root namespace (the harness; one more veth on the bridge, PREFIX.1/24)
      127.0.0.1:PORT_i   -> proxy `harness-to-nodei` -> node i's ingress

The namespaces are the network's only: /etc/hosts is the machine's, where `localhost` is
127.0.0.1 (where it also names ::1, nothing listens at [::1]:PORT_j in node i's
namespace, so a client that tries ::1 first is refused at once and goes on to
127.0.0.1). So node i dialing `http://127.0.0.1:PORT_j`, or `http://localhost:PORT_j` (the
course's form, which the conformance kit gives: node_template.py), crosses the link
i -> j, the harness reaches node i at the URL it would without namespaces, and a link
fault is what `Testbed` makes of it (`LinkFaults`). Every namespace and process here
dies with the harness, whatever way it ends; see namespaces.py for the one rule that
follows (start processes from the main thread).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dht.testbed.namespaces import Namespace, die_with_parent, run_ip, stop_processes
from dht.testbed.toxiproxy import (
    LinkFaults,
    ToxiproxyServer,
    find_toxiproxy_server,
    free_ports,
    link_name,
    node_name,
)
from dht.testbed.workers import shared_range

# The /24s tried, in order, when no prefix is given: rarely used ones (10.213.N.0/24).
_PREFIX_BASE = "10.213"
_GONE_DEADLINE = 5.0


def netns_unavailable() -> str | None:
    """Why the namespace test bed cannot run here, in one line; None if it can."""
    if sys.platform != "linux":
        return f"network namespaces are Linux's, and this is {sys.platform}"
    if os.geteuid() != 0:
        return "making network namespaces, veths and bridges needs root"
    for tool in ("ip", "nsenter", "unshare"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not on PATH (iproute2 has ip, util-linux nsenter and unshare)"
    try:
        server = find_toxiproxy_server()
    except FileNotFoundError as exc:
        return str(exc)
    if not os.access(shutil.which(server) or server, os.X_OK):
        return f"toxiproxy-server {server} is not an executable file"
    try:  # what start() makes, in a namespace that goes when the command exits
        done = subprocess.run(
            ["unshare", "--net", "--", "ip", "-batch", "-"],
            input="link add dhtcheck0 type bridge\n"
            "link add dhtcheck1 type veth peer name dhtcheck2\n",
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot make a network namespace: {exc}"
    if done.returncode != 0:
        reason = (done.stderr or done.stdout).strip().splitlines()
        return "cannot make a network namespace with a bridge and a veth: " + (
            reason[0] if reason else f"exit code {done.returncode}"
        )
    return None


def free_prefix() -> str:
    """The first 10.213.N (N = 0..255, this test worker's share) that no address or route
    of this namespace uses."""
    taken = subprocess.run(
        ["ip", "-4", "-o", "route", "show", "table", "all"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    taken += subprocess.run(
        ["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, check=True
    ).stdout
    for third in shared_range(0, 256):  # never one another test worker may take (workers.py)
        prefix = f"{_PREFIX_BASE}.{third}"
        if f"{prefix}." not in taken:
            return prefix
    raise RuntimeError(f"every {_PREFIX_BASE}.N.0/24 is in use here: give a prefix")


def _spare_ports(count: int, ports: Sequence[int], start: int = 8474) -> list[int]:
    """Ports inside a namespace other than the nodes': they are empty, so any will do."""
    spare = (port for port in range(start, 65536) if port not in ports)
    return [next(spare) for _ in range(count)]


class NetnsTestbed(LinkFaults):
    """A namespace per node, Toxiproxy on every link between them (module docstring).
    `ports[i]` is node i's port; start node i with `popen(i, argv)` (or
    `command_prefix(i)`) and reach it from here at http://127.0.0.1:ports[i]."""

    __test__ = False  # a name pytest would otherwise try to collect from test modules

    def __init__(
        self,
        ports: list[int],
        log_dir: Path | None = None,
        prefix: str | None = None,
        api_port: int | None = None,
    ) -> None:
        """`prefix` is the first three octets of the private /24 the namespaces share
        (default: the first free 10.213.N); `api_port` the port of the root
        namespace's Toxiproxy API on 127.0.0.1 (default: a free one). The ports
        127.0.0.1:ports[i] of this namespace must be free when `start` runs."""
        super().__init__()
        self.ports = list(ports)
        self.log_dir = log_dir
        self._prefix = prefix
        self._api_port = api_port
        self.ingress_port, self.namespace_api_port = _spare_ports(2, self.ports)
        self.hub: Namespace | None = None
        self.namespaces: list[Namespace] = []
        self.root: ToxiproxyServer | None = None  # the harness's way in, on 127.0.0.1
        self.uplink = ""  # the root namespace's veth to the bridge, once made
        self.processes: list[subprocess.Popen[bytes]] = []  # started with `popen`

    @property
    def prefix(self) -> str:
        assert self._prefix is not None, "start() first"
        return self._prefix

    def address(self, index: int) -> str:
        """Node `index`'s address on the bridge, in its namespace."""
        return f"{self.prefix}.{index + 2}"

    @property
    def api_urls(self) -> list[str]:
        """Every Toxiproxy API of the test bed: node 0's namespace, ..., then the root."""
        return [server.api_url for server in self.servers]

    def start(self) -> NetnsTestbed:
        """Makes the namespaces, the bridge and the servers and proxies; on failure,
        removes whatever it made and raises RuntimeError."""
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        if self._prefix is None:
            self._prefix = free_prefix()
        self.hub = Namespace()
        self.namespaces = [Namespace() for _ in self.ports]
        for namespace in (self.hub, *self.namespaces):
            namespace.wait_until_ready()
        self._wire()
        self.servers = [
            ToxiproxyServer(
                self.address(index),
                self.namespace_api_port,
                self._log(f"toxiproxy-{node_name(index)}.log"),
                namespace.prefix,
                die_with_parent(),
            )
            for index, namespace in enumerate(self.namespaces)
        ]
        api_port = self._api_port or free_ports(1, avoid=self.ports)[0]
        self.root = ToxiproxyServer(
            "127.0.0.1", api_port, self._log("toxiproxy-root.log"), (), die_with_parent()
        )
        self.servers.append(self.root)
        for server in self.servers:
            server.launch()
        for server in self.servers:
            server.wait_until_running()
        self._make_proxies()

    def _wire(self) -> None:
        """The bridge in the hub, a veth from it into each node's namespace and one into
        this (root) namespace. Each end is made where it is to live, so nothing is ever
        left in the root namespace but the uplink, which goes with the hub."""
        assert self.hub is not None
        self.uplink = f"dht{self.hub.holder.pid}"  # unique while the hub lives
        run_ip([f"link add {self.uplink} type veth peer name uplink netns {self.hub.holder.pid}"])
        commands = ["link set lo up", "link add bridge type bridge", "link set bridge up"]
        commands.append("link set uplink master bridge up")
        for index, namespace in enumerate(self.namespaces):
            veth = f"node{index}"
            commands.append(
                f"link add {veth} type veth peer name eth0 netns {namespace.holder.pid}"
            )
            commands.append(f"link set {veth} master bridge up")
        self.hub.ip(*commands)
        for index, namespace in enumerate(self.namespaces):
            namespace.ip(
                "link set lo up",
                f"addr add {self.address(index)}/24 dev eth0",
                "link set eth0 up",
            )
        run_ip([f"addr add {self.prefix}.1/24 dev {self.uplink}", f"link set {self.uplink} up"])

    def _make_proxies(self) -> None:
        assert self.root is not None
        ingress = {
            index: f"{self.address(index)}:{self.ingress_port}" for index in range(len(self.ports))
        }
        for source, port in enumerate(self.ports):
            server = self.servers[source]
            server.create(f"{node_name(source)}-ingress", ingress[source], f"localhost:{port}")
            for target, target_port in enumerate(self.ports):
                if source != target:
                    self.links[source, target] = server.create(
                        link_name(source, target), f"127.0.0.1:{target_port}", ingress[target]
                    )
            self.root.create(
                f"harness-to-{node_name(source)}", f"127.0.0.1:{port}", ingress[source]
            )

    def _log(self, name: str) -> Path | None:
        if self.log_dir is None:
            return None
        self.log_dir.mkdir(parents=True, exist_ok=True)
        return self.log_dir / name

    # -- the nodes -----------------------------------------------------------------------

    def command_prefix(self, index: int) -> list[str]:
        """What goes before a node's argv to run it in node `index`'s namespace. A
        process started so, without `popen`, does not die with the harness unless its
        Popen gets `preexec_fn=die_with_parent()` (namespaces.py); one that outlives the
        harness keeps its namespace."""
        return self.namespaces[index].prefix

    def popen(self, index: int, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        """Starts `argv` in node `index`'s namespace, dying with this thread, and stopped
        by `stop` if still running. Its pid is the program's own (nsenter execs)."""
        process = self.namespaces[index].popen(argv, **kwargs)
        self.processes.append(process)
        return process

    # -- the end -------------------------------------------------------------------------

    def stop(self) -> None:
        """Stops every process the test bed started, then removes the namespaces, their
        veths and the bridge; returns once the root namespace's veth is gone."""
        stop_processes(self.processes)
        for server in self.servers:
            server.stop()
        for namespace in (*self.namespaces, *([self.hub] if self.hub else [])):
            namespace.close()
        if self.uplink:
            # The uplink goes with the hub's namespace, but the kernel removes a dead
            # namespace's devices in the background: removing it here is at once.
            subprocess.run(["ip", "link", "del", self.uplink], capture_output=True)
            deadline = time.monotonic() + _GONE_DEADLINE
            while Path("/sys/class/net", self.uplink).exists():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the veth {self.uplink} outlived its namespace")
                time.sleep(0.01)
            self.uplink = ""
