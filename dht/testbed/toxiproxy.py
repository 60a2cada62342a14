"""The fault-injection test bed: a Toxiproxy server with one proxy per directed link.

Node A reaches node B through the proxy named `nodeA-to-nodeB`, so every node-to-node
byte crosses Toxiproxy, and one link can be slowed or cut without touching the others
(a single proxy per node could only cut a node's incoming traffic, not a two-way
partition). Clients talk to nodes directly.

Needs toxiproxy-python (the `test` extra) and a toxiproxy-server binary: `make test`
builds one into .tools/bin; $DHT_TOXIPROXY_SERVER or PATH can name another.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests
from toxiproxy import Toxiproxy

from dht.config import url_port

log = logging.getLogger(__name__)

_REPO_BINARY = Path(__file__).resolve().parents[2] / ".tools" / "bin" / "toxiproxy-server"
_START_DEADLINE = 10.0


def find_toxiproxy_server() -> str:
    for candidate in (
        os.environ.get("DHT_TOXIPROXY_SERVER"),
        str(_REPO_BINARY) if _REPO_BINARY.exists() else None,
        shutil.which("toxiproxy-server"),
    ):
        if candidate:
            return candidate
    raise FileNotFoundError(
        "toxiproxy-server not found: run `make test` once (it builds .tools/bin/"
        "toxiproxy-server), or set DHT_TOXIPROXY_SERVER"
    )


def node_name(index: int) -> str:
    return f"node{index + 1}"


def link_name(source: int, target: int) -> str:
    return f"{node_name(source)}-to-{node_name(target)}"


def free_ports(count: int, host: str = "127.0.0.1", avoid: Iterable[int] = ()) -> list[int]:
    """`count` distinct free ports, none of them in `avoid` (ports promised to processes
    that have not bound them yet): every socket stays bound until all are chosen, or the
    kernel may hand out the same port twice."""
    avoided = set(avoid)
    with contextlib.ExitStack() as stack:
        chosen: list[int] = []
        while len(chosen) < count:
            sock = stack.enter_context(socket.socket())
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
            if port not in avoided:
                chosen.append(port)
        return chosen


def ports_needed(nodes: int) -> int:
    """Ports a test bed listens on: its API and one proxy per directed link."""
    return 1 + nodes * (nodes - 1)


class Testbed:
    """Starts toxiproxy-server on a free loopback port and a proxy for every link between
    `node_urls` (http://host:port of each node, in cluster order)."""

    __test__ = False  # a name pytest would otherwise try to collect from test modules

    def __init__(
        self,
        node_urls: list[str],
        log_path: Path | None = None,
        ports: list[int] | None = None,
        avoid: Iterable[int] = (),
    ) -> None:
        """`ports` (ports_needed(len(node_urls)) of them) are where the API and the links
        listen; by default free ones, chosen now, other than the nodes' ports and `avoid`
        (the nodes may not listen yet)."""
        self.node_urls = node_urls
        self._ports = ports or free_ports(
            ports_needed(len(node_urls)), avoid=[*map(url_port, node_urls), *avoid]
        )
        self.api_port = self._ports[0]
        self._log_path = log_path
        self._process: subprocess.Popen[bytes] | None = None
        self.toxiproxy = Toxiproxy()
        self.links: dict[tuple[int, int], Any] = {}
        # (start, end) on the monotonic clock of each restart `heal` made: every
        # connection through the links was dropped then, a fault of its own.
        self.restarts: list[tuple[float, float]] = []

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def start(self) -> Testbed:
        self._start_server()
        link_ports = iter(self._ports[1:])
        for source in range(len(self.node_urls)):
            for target in range(len(self.node_urls)):
                if source != target:
                    self.links[source, target] = self._create_link(
                        source, target, f"127.0.0.1:{next(link_ports)}"
                    )
        return self

    def _create_link(self, source: int, target: int, listen: str) -> Any:
        return self.toxiproxy.create(
            upstream=urlsplit(self.node_urls[target]).netloc,
            name=link_name(source, target),
            listen=listen,
        )

    def _start_server(self) -> None:
        command = [find_toxiproxy_server(), "-host", "127.0.0.1", "-port", str(self.api_port)]
        log = open(self._log_path, "ab") if self._log_path else subprocess.DEVNULL
        try:
            self._process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        finally:
            if self._log_path:
                log.close()  # type: ignore[union-attr]
        self.toxiproxy.update_api_consumer("127.0.0.1", self.api_port)
        deadline = time.monotonic() + _START_DEADLINE
        while not self.toxiproxy.running():
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("toxiproxy-server did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()

    def restart(self) -> None:
        """A new toxiproxy-server on the same ports with the same links, healed: every
        connection through a link is dropped. For a server whose control port stopped
        answering (it then may not answer SIGTERM either: SIGKILL)."""
        started = time.monotonic()
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        self._start_server()
        for (source, target), proxy in list(self.links.items()):
            self.links[source, target] = self._create_link(source, target, proxy.listen)
        self.restarts.append((started, time.monotonic()))
        log.warning("restarted Toxiproxy, whose control port stopped answering")

    def route_args(self, source: int) -> list[str]:
        """The `--route` flags that make node `source` dial its peers through the links."""
        args: list[str] = []
        for (src, target), proxy in self.links.items():
            if src == source:
                args += ["--route", f"{self.node_urls[target]}=http://{proxy.listen}"]
        return args

    # -- faults ------------------------------------------------------------------------

    def links_into(self, target: int) -> list[Any]:
        return [proxy for (_, dst), proxy in self.links.items() if dst == target]

    def links_out_of(self, source: int) -> list[Any]:
        return [proxy for (src, _), proxy in self.links.items() if src == source]

    def cut(self, links: Iterable[Any]) -> None:
        """Disables links: connections on them are dropped and new ones refused."""
        for proxy in links:
            proxy.disable()

    def isolate(self, index: int) -> None:
        """A two-way partition of one node from all the others."""
        self.cut([*self.links_into(index), *self.links_out_of(index)])

    def add_toxic(
        self, links: Iterable[Any], kind: str, stream: str = "downstream", **attributes: Any
    ) -> None:
        """Adds a toxic (latency, timeout, reset_peer, slicer, bandwidth, ...) to links:
        on `downstream` (the answers coming back) or `upstream` (the requests going out)."""
        for proxy in links:
            proxy.add_toxic(
                type=kind, stream=stream, name=f"{kind}_{stream}", attributes=attributes
            )

    def heal(self, reset_timeout: float = 30.0) -> None:
        """Enables every link and removes every toxic. Toxiproxy's control port can hang
        while it removes a latency toxic under traffic (Shopify/toxiproxy#558: /reset
        answers 503 after 25 s, or not at all, and the fault stays), and its client sets
        no deadline: so /reset is asked here with one, and a server that does not reset
        within `reset_timeout` is restarted with the same links (`restart`, recorded in
        `restarts`) rather than holding the run up."""
        deadline = time.monotonic() + reset_timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                answer = requests.post(f"{self.api_url}/reset", timeout=left)
                if answer.ok:
                    return
                log.warning("Toxiproxy's reset answered %d; trying again", answer.status_code)
            except requests.RequestException as exc:
                log.warning("Toxiproxy's reset did not answer: %s", exc)
            time.sleep(0.2)
        self.restart()
